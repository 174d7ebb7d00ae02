//! The Debian cloud-init image the cluster end-to-end tests provision: Debian 12 (minbase, systemd,
//! `linux-image-cloud-amd64`, real `cloud-init` reading the `config-2` config drive or a NoCloud
//! `cidata` disk, `systemd-timesyncd` for its NTP settings, `resolvconf` for the DNS servers of
//! static addresses) on a bootable MBR disk, plus capstan's **kubeadm test stand-in** as `/usr/local/bin/kubeadm`.
//!
//! No registry here ships kubeadm or kubelet, so the image cannot run Kubernetes. What it proves is
//! everything before that: cloud-init itself runs the bootstrap data capstan renders (files with
//! their owners and modes, users, `preKubeadmCommands`, `kubeadm init|join`, `postKubeadmCommands`,
//! the `bootstrap-success.complete` sentinel). The stand-in (`kubeadm-standin.py`, a clearly named
//! test part, never shipped as kubeadm) checks the kubeadm configuration file it is handed and
//! registers the Node in the workload API (a capstan API server in the tests) with the bootstrap
//! token and the CA hash from that file, or, on `init`, with a node certificate it signs with the
//! cluster CA cloud-init wrote.
//!
//! A second test part, `capstan-bootstrap-report` (a systemd unit after cloud-init's final stage),
//! prints on the serial console what the bootstrap data left behind (files with modes, owners and
//! digests; users; the commands in order; the sentinel; cloud-init's status), so that a test can
//! check the machine from outside without logging in.
//!
//! The layout: partition 1 is FAT with SYSLINUX, the kernel and Debian's initramfs; partition 2 is
//! the ext4 root filesystem (label `capstan-root`), made with `mkfs.ext4 -d` without loop mounts.
//! The agent adds the config drive as a third partition when it provisions the image.
//!
//! The root filesystem comes from `debootstrap` (network: Debian's mirror) and is kept in the
//! package cache; later builds only re-make the disk.

use crate::{RamdiskError, io, run};
use sha2::{Digest, Sha256};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const MIB: u64 = 1 << 20;
const BOOT_PARTITION_BYTES: u64 = 96 * MIB;
/// Free space left in the root filesystem beyond what the tree needs, unless the build asks for
/// more (kept small: provisioning writes every byte of the image).
pub const DEFAULT_ROOT_FREE_BYTES: u64 = 160 * MIB;
const SYSLINUX_MBR: &str = "/usr/lib/syslinux/mbr/mbr.bin";
/// The root filesystem's label, which the kernel command line names.
pub const ROOT_LABEL: &str = "capstan-root";
/// Debian release of the image.
pub const SUITE: &str = "bookworm";
/// The mirror `debootstrap` uses unless told otherwise.
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
/// The kubeadm test stand-in installed as `/usr/local/bin/kubeadm`.
pub const KUBEADM_STANDIN: &str = include_str!("kubeadm-standin.py");
/// The test reporter: prints what the bootstrap data left on the machine, after cloud-init.
pub const BOOTSTRAP_REPORT: &str = include_str!("bootstrap-report.py");
const REPORT_UNIT: &str = "[Unit]\n\
Description=capstan test reporter: what the bootstrap data left on this machine\n\
After=cloud-final.service\n\
Wants=cloud-final.service\n\
\n\
[Service]\n\
Type=oneshot\n\
ExecStart=/usr/local/bin/capstan-bootstrap-report\n\
\n\
[Install]\n\
WantedBy=cloud-init.target\n";
/// What cloud-init is told: the config drive first, NoCloud (a `cidata` disk) second.
const CLOUD_CFG: &str = "# capstan: read the config drive (config-2) the provisioner writes, else NoCloud.\n\
datasource_list: [ ConfigDrive, NoCloud, None ]\n";

/// The locale cloud-init sets.
const LOCALE_CFG: &str = "# capstan: a locale every Debian system has.\nlocale: C.UTF-8\n";

/// Packages `debootstrap` installs; `cloud-init` and the kernel follow inside the chroot (so that
/// debootstrap's resolver does not stop on cloud-init's virtual dependencies).
const BASE_PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "udev",
    "dbus",
    "python3-cffi-backend",
    "python3-yaml",
    "openssl",
    "ca-certificates",
    // The bootstrap step runner reports each step to capstan with curl.
    "curl",
    "iproute2",
    "ifupdown",
    "isc-dhcp-client",
    "sudo",
    "kmod",
    "e2fsprogs",
];
const CHROOT_PACKAGES: &[&str] = &[
    "cloud-init",
    "linux-image-cloud-amd64",
    "initramfs-tools",
    // cloud-init's ssh and locale modules fail without them, and users expect to log in by key.
    "openssh-server",
    "locales",
    // cloud-init's ntp module configures the NTP client it finds; with none it installs chrony,
    // which needs a network the guests of the tests do not have.
    "systemd-timesyncd",
    // ifupdown hands the `dns-nameservers` cloud-init writes for a static address to resolvconf,
    // which writes /etc/resolv.conf (without it the DNS servers of a static address are unused).
    "resolvconf",
];

/// A built image.
#[derive(Clone, Debug)]
pub struct CloudImage {
    pub raw: PathBuf,
    pub raw_sha256: String,
    pub qcow2: PathBuf,
    pub qcow2_sha256: String,
    /// The kernel and initramfs, beside the image, for direct kernel boots.
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// The kernel command line the image boots with.
    pub cmdline: String,
}

/// The kernel command line of the image (`no_timer_check`: on an emulated or overcommitted machine
/// the kernel's IO-APIC timer check can miss its window and panic).
pub fn cmdline() -> String {
    format!(
        "root=LABEL={ROOT_LABEL} rw console=tty0 console=ttyS0,115200 net.ifnames=0 no_timer_check"
    )
}

fn sha256_file(path: &Path) -> Result<String, RamdiskError> {
    let mut file = std::fs::File::open(path).map_err(io("reading", path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 4 * MIB as usize];
    loop {
        let n = file.read(&mut buffer).map_err(io("reading", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Unmounts `proc` of a chroot when dropped, whatever happened in between.
struct ProcMount(PathBuf);

impl ProcMount {
    fn mount(root: &Path) -> Result<Self, RamdiskError> {
        let proc = root.join("proc");
        std::fs::create_dir_all(&proc).map_err(io("creating", &proc))?;
        run(Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(&proc))?;
        Ok(Self(proc))
    }
}

impl Drop for ProcMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The cached root filesystem, bootstrapped when missing.
fn rootfs(cache: &Path, mirror: &str, progress: &dyn Fn(&str)) -> Result<PathBuf, RamdiskError> {
    // The tree depends on what is installed and configured: a change makes a new one.
    let recipe: String = [BASE_PACKAGES, CHROOT_PACKAGES].concat().join(",") + CLOUD_CFG;
    let digest: String = Sha256::digest(recipe.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    let root = cache.join(format!("cloud-rootfs-{SUITE}-{digest}"));
    let complete = root.join(".capstan-complete");
    if complete.is_file() {
        return Ok(root);
    }
    std::fs::create_dir_all(cache).map_err(io("creating", cache))?;
    let partial = cache.join(format!("cloud-rootfs-{SUITE}-{digest}.partial"));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(io("removing", &partial))?;
    }
    progress(&format!(
        "debootstrap {SUITE} from {mirror} (about 2 minutes)"
    ));
    run(Command::new("debootstrap")
        .arg("--variant=minbase")
        .arg(format!("--include={}", BASE_PACKAGES.join(",")))
        .arg(SUITE)
        .arg(&partial)
        .arg(mirror))?;
    progress(&format!(
        "installing {} in the chroot",
        CHROOT_PACKAGES.join(", ")
    ));
    {
        let _proc = ProcMount::mount(&partial)?;
        run(Command::new("chroot")
            .arg(&partial)
            .args(["apt-get", "install", "-y", "-q", "--no-install-recommends"])
            .args(CHROOT_PACKAGES)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
        run(Command::new("chroot")
            .arg(&partial)
            .args(["apt-get", "clean"]))?;
    }
    configure(&partial)?;
    std::fs::rename(&partial, &root).map_err(io("renaming", &partial))?;
    std::fs::write(&complete, SUITE).map_err(io("writing", &complete))?;
    Ok(root)
}

/// What every boot of the image needs: the root in fstab, cloud-init's datasources, a fresh
/// machine id per machine, no host name of the build machine.
fn configure(root: &Path) -> Result<(), RamdiskError> {
    let write = |relative: &str, contents: &str| {
        let path = root.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        std::fs::write(&path, contents).map_err(io("writing", &path))
    };
    write(
        "etc/fstab",
        &format!("LABEL={ROOT_LABEL} / ext4 defaults 0 1\n"),
    )?;
    write("etc/cloud/cloud.cfg.d/90-capstan.cfg", CLOUD_CFG)?;
    write("etc/machine-id", "")?;
    write("etc/hostname", "localhost\n")?;
    let lists = root.join("var/lib/apt/lists");
    if let Ok(entries) = std::fs::read_dir(&lists) {
        for entry in entries.flatten() {
            if entry.path().is_file() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    Ok(())
}

/// The newest file in `dir` whose name starts with `prefix`.
fn boot_file(dir: &Path, prefix: &str) -> Result<PathBuf, RamdiskError> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io("reading", dir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    found.sort();
    found.pop().ok_or_else(|| {
        RamdiskError::Package(format!(
            "no {prefix}* in {}: the root filesystem has no kernel",
            dir.display()
        ))
    })
}

/// Bytes the files below `dir` take, rounded up to 4 KiB blocks.
fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        total += meta.len().div_ceil(4096) * 4096 + 4096;
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

fn copy_into(disk: &mut std::fs::File, offset: u64, part: &Path) -> Result<(), RamdiskError> {
    let mut source = std::fs::File::open(part).map_err(io("reading", part))?;
    disk.seek(SeekFrom::Start(offset))
        .map_err(io("seeking in the image for", part))?;
    std::io::copy(&mut source, disk).map_err(io("copying", part))?;
    Ok(())
}

/// Builds `cloud.img` and `cloud.qcow2` (plus `vmlinuz` and `initrd.img`) in `out`, bootstrapping
/// the root filesystem into `cache` first if it is not there.
/// `root_free` is the free space the root filesystem gets beyond its files
/// ([`DEFAULT_ROOT_FREE_BYTES`] unless what runs on it needs more).
pub fn build(
    cache: &Path,
    out: &Path,
    mirror: &str,
    root_free: u64,
    progress: &dyn Fn(&str),
) -> Result<CloudImage, RamdiskError> {
    let root = rootfs(cache, mirror, progress)?;
    // The test parts are written on every build, so a changed stand-in never hides in the cache.
    for (relative, contents) in [
        ("usr/local/bin/kubeadm", KUBEADM_STANDIN),
        ("usr/local/bin/capstan-bootstrap-report", BOOTSTRAP_REPORT),
    ] {
        let path = root.join(relative);
        std::fs::write(&path, contents).map_err(io("writing", &path))?;
        run(Command::new("chmod").arg("0755").arg(&path))?;
    }
    // cloud-init's default locale (en_US.UTF-8) is not generated in a minbase system; C.UTF-8
    // always exists, so the locale module succeeds and `cloud-init status` can say `done`.
    let locale = root.join("etc/cloud/cloud.cfg.d/91-capstan-locale.cfg");
    std::fs::write(&locale, LOCALE_CFG).map_err(io("writing", &locale))?;
    let unit = root.join("etc/systemd/system/capstan-bootstrap-report.service");
    std::fs::write(&unit, REPORT_UNIT).map_err(io("writing", &unit))?;
    let wants = root.join("etc/systemd/system/cloud-init.target.wants");
    std::fs::create_dir_all(&wants).map_err(io("creating", &wants))?;
    let link = wants.join("capstan-bootstrap-report.service");
    if !link.exists() {
        std::os::unix::fs::symlink("../capstan-bootstrap-report.service", &link)
            .map_err(io("linking", &link))?;
    }

    std::fs::create_dir_all(out).map_err(io("creating", out))?;
    let work = out.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io("creating", &work))?;
    let boot = root.join("boot");
    let kernel = out.join("vmlinuz");
    let initrd = out.join("initrd.img");
    std::fs::copy(boot_file(&boot, "vmlinuz-")?, &kernel).map_err(io("copying", &kernel))?;
    std::fs::copy(boot_file(&boot, "initrd.img-")?, &initrd).map_err(io("copying", &initrd))?;

    progress("boot partition (FAT, SYSLINUX)");
    let config = work.join("syslinux.cfg");
    std::fs::write(
        &config,
        format!(
            "SERIAL 0 115200\nPROMPT 0\nTIMEOUT 1\nDEFAULT linux\nLABEL linux\n  KERNEL vmlinuz\n  APPEND initrd=initrd.img {}\n",
            cmdline()
        ),
    )
    .map_err(io("writing", &config))?;
    let fat = work.join("boot.img");
    std::fs::File::create(&fat)
        .and_then(|f| f.set_len(BOOT_PARTITION_BYTES))
        .map_err(io("creating", &fat))?;
    run(Command::new("mkfs.vfat")
        .args(["-n", "CAPSTANBOOT"])
        .arg(&fat))?;
    for (file, name) in [
        (&kernel, "::/vmlinuz"),
        (&initrd, "::/initrd.img"),
        (&config, "::/syslinux.cfg"),
    ] {
        run(Command::new("mcopy")
            .arg("-i")
            .arg(&fat)
            .arg(file)
            .arg(name))?;
    }
    run(Command::new("syslinux").arg("--install").arg(&fat))?;

    progress("root partition (ext4 from the tree, no loop mounts)");
    let root_bytes = (tree_bytes(&root) + root_free).div_ceil(MIB) * MIB;
    let ext4 = work.join("root.img");
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", ROOT_LABEL, "-d"])
        .arg(&root)
        .arg(&ext4)
        .arg(format!("{}M", root_bytes / MIB)))?;

    progress("disk image");
    let raw = out.join("cloud.img");
    let image_bytes = MIB + BOOT_PARTITION_BYTES + root_bytes + MIB;
    std::fs::File::create(&raw)
        .and_then(|f| f.set_len(image_bytes))
        .map_err(io("creating", &raw))?;
    let mut sfdisk = Command::new("sfdisk")
        .arg("--quiet")
        .arg(&raw)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io("running sfdisk on", &raw))?;
    if let Some(mut stdin) = sfdisk.stdin.take() {
        let table = format!(
            "label: dos\nstart=2048, size={}, type=6, bootable\nstart={}, size={}, type=83\n",
            BOOT_PARTITION_BYTES / 512,
            (MIB + BOOT_PARTITION_BYTES) / 512,
            root_bytes / 512,
        );
        stdin
            .write_all(table.as_bytes())
            .map_err(io("running sfdisk on", &raw))?;
    }
    let status = sfdisk
        .wait_with_output()
        .map_err(io("running sfdisk on", &raw))?;
    if !status.status.success() {
        return Err(RamdiskError::Command {
            command: "sfdisk".into(),
            detail: String::from_utf8_lossy(&status.stderr).into_owned(),
        });
    }
    let mbr = std::fs::read(SYSLINUX_MBR).map_err(io("reading", Path::new(SYSLINUX_MBR)))?;
    let mut disk = std::fs::File::options()
        .write(true)
        .open(&raw)
        .map_err(io("opening", &raw))?;
    // Boot code only (the first 440 bytes): the partition table sfdisk wrote stays.
    disk.write_all(&mbr[..mbr.len().min(440)])
        .map_err(io("writing", &raw))?;
    copy_into(&mut disk, MIB, &fat)?;
    copy_into(&mut disk, MIB + BOOT_PARTITION_BYTES, &ext4)?;
    disk.sync_all().map_err(io("syncing", &raw))?;
    drop(disk);
    let _ = std::fs::remove_dir_all(&work);
    let qcow2 = out.join("cloud.qcow2");
    run(Command::new("qemu-img")
        .args(["convert", "-q", "-f", "raw", "-O", "qcow2"])
        .arg(&raw)
        .arg(&qcow2))?;
    Ok(CloudImage {
        raw_sha256: sha256_file(&raw)?,
        qcow2_sha256: sha256_file(&qcow2)?,
        raw,
        qcow2,
        kernel,
        initrd,
        cmdline: cmdline(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standin_says_it_is_one_and_needs_a_config() {
        assert!(KUBEADM_STANDIN.starts_with("#!/usr/bin/python3"));
        assert!(KUBEADM_STANDIN.contains("TEST STAND-IN for kubeadm"));
        assert!(KUBEADM_STANDIN.contains("without --config"));
    }

    #[test]
    fn cmdline_boots_the_labelled_root_with_a_serial_console() {
        let line = cmdline();
        assert!(line.contains(&format!("root=LABEL={ROOT_LABEL}")));
        assert!(line.contains("console=ttyS0"));
    }

    #[test]
    fn tree_bytes_counts_files_and_directories() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let empty = tree_bytes(dir.path());
        std::fs::write(dir.path().join("a"), vec![0u8; 5000]).unwrap_or_else(|e| panic!("{e}"));
        // The file's two 4 KiB blocks and its inode.
        assert_eq!(tree_bytes(dir.path()) - empty, 8192 + 4096);
    }
}
