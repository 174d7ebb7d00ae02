//! A bootable disk from a root filesystem tree, without loop mounts: the one way capstan's
//! Debian images ([`crate::cloud_image`], [`crate::node_image`]) become a raw disk and a qcow2.
//!
//! The layout: an MBR with SYSLINUX's boot code; partition 1 is FAT with SYSLINUX, the tree's
//! kernel and initramfs (`mkfs.vfat`, `mcopy`, `syslinux --install` on a partition image);
//! partition 2, the last one, is the ext4 root filesystem labelled
//! [`ROOT_LABEL`](crate::rootfs::ROOT_LABEL), made from the tree with `mkfs.ext4 -d`. Being last,
//! the root partition can grow into the rest of a bigger disk (cloud-init's `growpart`) and leaves
//! room for the config drive capstan's agent adds after it.

use crate::rootfs::ROOT_LABEL;
use crate::{RamdiskError, io, run};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const MIB: u64 = 1 << 20;
/// The smallest boot partition; a bigger kernel and initramfs get a bigger one.
const MIN_BOOT_PARTITION_BYTES: u64 = 96 * MIB;
const SYSLINUX_MBR: &str = "/usr/lib/syslinux/mbr/mbr.bin";

/// The kernel command line of capstan's Debian images (`no_timer_check`: on an emulated or
/// overcommitted machine the kernel's IO-APIC timer check can miss its window and panic;
/// `net.ifnames=0`: the NIC is `eth0` whatever the machine, as the network data expects).
pub fn cmdline() -> String {
    format!(
        "root=LABEL={ROOT_LABEL} rw console=tty0 console=ttyS0,115200 net.ifnames=0 no_timer_check"
    )
}

/// The kernel and initramfs a disk boots, as copied out of the tree.
#[derive(Clone, Debug)]
pub struct BootFiles {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
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
pub(crate) fn tree_bytes(dir: &Path) -> u64 {
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

/// The boot partition's size for a kernel and initramfs of `boot_bytes`: room for both twice
/// over (a kernel update on the machine writes the new pair before removing the old one).
fn boot_partition_bytes(boot_bytes: u64) -> u64 {
    (2 * boot_bytes + 16 * MIB)
        .max(MIN_BOOT_PARTITION_BYTES)
        .div_ceil(MIB)
        * MIB
}

/// How the qcow2 is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qcow2 {
    /// Clusters as they are: the fastest to write and to use as a backing file.
    Plain,
    /// zlib-compressed clusters (`qemu-img convert -c`): what every machine downloads shrinks to
    /// about half, for a minute more of building; capstan's agent, Ironic's and QEMU read them.
    Compressed,
}

/// Writes the disk of the tree at `root` as `raw` and converts it to `qcow2`; the kernel and
/// initramfs are copied to `boot_dir` (as `vmlinuz` and `initrd.img`, for direct kernel boots).
/// The root filesystem gets `root_free` bytes beyond what its files take.
pub fn write(
    root: &Path,
    boot_dir: &Path,
    raw: &Path,
    qcow2: &Path,
    format: Qcow2,
    root_free: u64,
    progress: &dyn Fn(&str),
) -> Result<BootFiles, RamdiskError> {
    let work = raw.with_extension("parts");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io("creating", &work))?;
    std::fs::create_dir_all(boot_dir).map_err(io("creating", boot_dir))?;
    let boot = root.join("boot");
    let kernel = boot_dir.join("vmlinuz");
    let initrd = boot_dir.join("initrd.img");
    std::fs::copy(boot_file(&boot, "vmlinuz-")?, &kernel).map_err(io("copying", &kernel))?;
    std::fs::copy(boot_file(&boot, "initrd.img-")?, &initrd).map_err(io("copying", &initrd))?;
    let boot_bytes = [&kernel, &initrd]
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let boot_partition = boot_partition_bytes(boot_bytes);

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
        .and_then(|f| f.set_len(boot_partition))
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
    let root_bytes = (tree_bytes(root) + root_free).div_ceil(MIB) * MIB;
    let ext4 = work.join("root.img");
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", ROOT_LABEL, "-d"])
        .arg(root)
        .arg(&ext4)
        .arg(format!("{}M", root_bytes / MIB)))?;

    progress("disk image");
    let image_bytes = MIB + boot_partition + root_bytes + MIB;
    std::fs::File::create(raw)
        .and_then(|f| f.set_len(image_bytes))
        .map_err(io("creating", raw))?;
    let mut sfdisk = Command::new("sfdisk")
        .arg("--quiet")
        .arg(raw)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io("running sfdisk on", raw))?;
    if let Some(mut stdin) = sfdisk.stdin.take() {
        let table = format!(
            "label: dos\nstart=2048, size={}, type=6, bootable\nstart={}, size={}, type=83\n",
            boot_partition / 512,
            (MIB + boot_partition) / 512,
            root_bytes / 512,
        );
        stdin
            .write_all(table.as_bytes())
            .map_err(io("running sfdisk on", raw))?;
    }
    let status = sfdisk
        .wait_with_output()
        .map_err(io("running sfdisk on", raw))?;
    if !status.status.success() {
        return Err(RamdiskError::Command {
            command: "sfdisk".into(),
            detail: String::from_utf8_lossy(&status.stderr).into_owned(),
        });
    }
    let mbr = std::fs::read(SYSLINUX_MBR).map_err(io("reading", Path::new(SYSLINUX_MBR)))?;
    let mut disk = std::fs::File::options()
        .write(true)
        .open(raw)
        .map_err(io("opening", raw))?;
    // Boot code only (the first 440 bytes): the partition table sfdisk wrote stays.
    disk.write_all(&mbr[..mbr.len().min(440)])
        .map_err(io("writing", raw))?;
    copy_into(&mut disk, MIB, &fat)?;
    copy_into(&mut disk, MIB + boot_partition, &ext4)?;
    disk.sync_all().map_err(io("syncing", raw))?;
    drop(disk);
    let _ = std::fs::remove_dir_all(&work);
    let mut convert = Command::new("qemu-img");
    convert.args(["convert", "-q", "-f", "raw", "-O", "qcow2"]);
    if format == Qcow2::Compressed {
        progress("qcow2 (qemu-img convert, compressed: about a minute)");
        convert.arg("-c");
    } else {
        progress("qcow2 (qemu-img convert)");
    }
    run(convert.arg(raw).arg(qcow2))?;
    Ok(BootFiles { kernel, initrd })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_boot_partition_fits_two_kernels_and_never_shrinks_below_the_minimum() {
        assert_eq!(boot_partition_bytes(10 * MIB), MIN_BOOT_PARTITION_BYTES);
        let big = boot_partition_bytes(70 * MIB);
        assert!(big >= 140 * MIB && big.is_multiple_of(MIB), "{big}");
    }
}
