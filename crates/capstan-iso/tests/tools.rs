#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Images checked by tools that did not write them: xorriso reads the trees (primary and Joliet)
//! and the El Torito catalog and extracts every file byte for byte; blkid reads the label as
//! cloud-init's config-drive lookup does; QEMU boots an ISOLINUX image, which reads its config.

use capstan_iso::IsoImage;
use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (run scripts/install-deps.sh)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn config_drive() -> (IsoImage, Vec<(&'static str, Vec<u8>)>) {
    let files = vec![
        (
            "openstack/latest/meta_data.json",
            br#"{"uuid": "u-1", "name": "node-0"}"#.to_vec(),
        ),
        (
            "openstack/latest/network_data.json",
            br#"{"links": [], "networks": [], "services": []}"#.to_vec(),
        ),
        ("openstack/latest/user_data", b"#cloud-config\n".repeat(300)),
        ("openstack/content/0000", vec![0u8; 0]),
        (
            "a-rather-long-file-name-that-level-one-cannot-hold.txt",
            b"long".to_vec(),
        ),
        (
            "a-rather-long-file-name-that-level-one-cannot-hold.yaml",
            b"long too".to_vec(),
        ),
    ];
    let mut iso = IsoImage::new("config-2").unwrap();
    for (path, data) in &files {
        iso.add_bytes(path, data.clone()).unwrap();
    }
    (iso, files)
}

#[test]
fn xorriso_extracts_every_file_by_its_joliet_name() {
    let dir = tempfile::tempdir().unwrap();
    let (iso, files) = config_drive();
    let image = dir.path().join("cd.iso");
    std::fs::write(&image, iso.to_vec().unwrap()).unwrap();
    let out = dir.path().join("out");
    run(Command::new("xorriso")
        .args(["-osirrox", "on", "-indev"])
        .arg(&image)
        .args(["-extract", "/"])
        .arg(&out));
    for (path, data) in &files {
        let got = std::fs::read(out.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(&got, data, "{path}");
    }
    // The primary tree has the level-one names, unique in each directory.
    let listing = run(Command::new("xorriso")
        .args(["-read_fs", "ecma119", "-indev"])
        .arg(&image)
        .args(["-find", "/", "-exec", "lsdl"]));
    assert!(listing.contains("META_DAT.JSO"), "{listing}");
    assert!(
        listing.contains("A_RATHER.TXT") && listing.contains("A_RATHER.YAM"),
        "{listing}"
    );
}

#[test]
fn blkid_sees_an_iso9660_filesystem_labelled_config_2() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("cd.iso");
    std::fs::write(&image, config_drive().0.to_vec().unwrap()).unwrap();
    let out = run(Command::new("blkid")
        .args(["-p", "-o", "export"])
        .arg(&image));
    assert!(out.contains("TYPE=iso9660"), "{out}");
    assert!(out.contains("LABEL=config-2"), "{out}");
}

fn isolinux_files() -> Option<(&'static Path, &'static Path)> {
    let bin = Path::new("/usr/lib/ISOLINUX/isolinux.bin");
    let ldlinux = Path::new("/usr/lib/syslinux/modules/bios/ldlinux.c32");
    (bin.exists() && ldlinux.exists()).then_some((bin, ldlinux))
}

#[test]
fn an_isolinux_image_has_a_valid_boot_catalog_and_boots_in_qemu() {
    let (bin, ldlinux) = isolinux_files()
        .expect("isolinux and syslinux-common are installed (scripts/install-deps.sh)");
    let dir = tempfile::tempdir().unwrap();
    let mut iso = IsoImage::new("CAPSTAN_BOOT").unwrap();
    iso.add_file("isolinux/isolinux.bin", bin)
        .unwrap()
        .add_file("isolinux/ldlinux.c32", ldlinux)
        .unwrap()
        .add_bytes(
            "isolinux/isolinux.cfg",
            // The kernel does not exist: ISOLINUX says so on the serial port.
            b"SERIAL 0 115200\nPROMPT 0\nTIMEOUT 1\nDEFAULT probe\nLABEL probe\n  KERNEL capstan-probe\n".to_vec(),
        )
        .unwrap()
        .isolinux_boot("isolinux/isolinux.bin", "isolinux/boot.cat")
        .unwrap();
    let image = dir.path().join("boot.iso");
    std::fs::write(&image, iso.to_vec().unwrap()).unwrap();
    if let Ok(keep) = std::env::var("CAPSTAN_ISO_KEEP") {
        std::fs::copy(&image, keep).unwrap();
    }
    let report = run(Command::new("xorriso")
        .args(["-indev"])
        .arg(&image)
        .args(["-report_el_torito", "plain"]));
    assert!(
        report.contains("El Torito boot img :   1  BIOS  y   none"),
        "{report}"
    );
    // Boot it: ISOLINUX reads its config from our directory records and tries the kernel the
    // config names, which it reports on the serial port. The console is read until that line.
    let mut qemu = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg",
            "-m",
            "128",
            "-display",
            "none",
            "-no-reboot",
            "-serial",
            "stdio",
            "-boot",
            "d",
            "-cdrom",
        ])
        .arg(&image)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = qemu.stdout.take().unwrap();
    // A watchdog ends QEMU if the line never comes, so the read below always ends.
    let pid = qemu.id();
    let watchdog = std::thread::spawn(move || {
        let _ = Command::new("timeout")
            .args(["60", "tail", &format!("--pid={pid}"), "-f", "/dev/null"])
            .status();
        let _ = Command::new("kill")
            .arg(pid.to_string())
            .stderr(std::process::Stdio::null())
            .status();
    });
    let mut console = String::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
        let Ok(line) = line else { break };
        console.push_str(&line);
        console.push('\n');
        if line.contains("Loading capstan-probe") {
            break;
        }
    }
    let _ = qemu.kill();
    let _ = qemu.wait();
    let _ = watchdog.join();
    assert!(
        console.contains("Loading capstan-probe"),
        "console: {console}"
    );
}
