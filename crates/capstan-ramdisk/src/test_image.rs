//! The OS image the end-to-end tests provision: a small MBR disk with one FAT partition holding
//! SYSLINUX, Debian's cloud kernel and a busybox initramfs whose init reads the config drive and
//! says what it found on the serial console:
//!
//! ```text
//! capstan-test-image: booted from disk
//! capstan-test-image: hostname=<meta_data.json "name">
//! capstan-test-image: address <ip_address> (one line per network_data.json address)
//! capstan-test-image: config drive read
//! ```
//!
//! Then it stays up. Built without loop mounts: `mkfs.vfat` and `mcopy` on a partition image,
//! `syslinux --install` on it, `sfdisk` for the table, SYSLINUX's `mbr.bin` for the boot code.

use crate::debian::DebianParts;
use crate::{Initramfs, RamdiskError, io, run, sha256_file};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const MIB: u64 = 1 << 20;
/// Size of the whole image and of its FAT partition (starting at 1 MiB).
const IMAGE_BYTES: u64 = 64 * MIB;
const PARTITION_BYTES: u64 = 48 * MIB;
const SYSLINUX_MBR: &str = "/usr/lib/syslinux/mbr/mbr.bin";

const INIT: &str = r#"#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "capstan-test-image: booted from disk"
for m in $(cat /lib/modules/load-order); do insmod "/lib/modules/$m" 2>/dev/null; done
dev=""
n=0
while [ -z "$dev" ] && [ $n -lt 100 ]; do
  dev=$(findfs LABEL=config-2 2>/dev/null)
  [ -z "$dev" ] && sleep 0.2
  n=$((n + 1))
done
if [ -z "$dev" ]; then
  echo "capstan-test-image: no config drive found"
else
  mkdir -p /mnt
  mount -t iso9660 -o ro "$dev" /mnt
  name=$(sed -n 's/^ *"name": *"\([^"]*\)".*/\1/p' /mnt/openstack/latest/meta_data.json | head -n 1)
  echo "capstan-test-image: hostname=$name"
  if [ -f /mnt/openstack/latest/network_data.json ]; then
    sed -n 's/.*"ip_address": *"\([^"]*\)".*/\1/p' /mnt/openstack/latest/network_data.json | while read -r a; do
      echo "capstan-test-image: address $a"
    done
  fi
  echo "capstan-test-image: config drive read"
fi
while true; do sleep 3600; done
"#;

/// A built test image.
#[derive(Clone, Debug)]
pub struct TestImage {
    pub raw: PathBuf,
    pub raw_sha256: String,
    pub qcow2: PathBuf,
    pub qcow2_sha256: String,
}

/// Builds `disk.img` and `disk.qcow2` in `out` from the packages in `cache`.
pub fn build(cache: &Path, out: &Path) -> Result<TestImage, RamdiskError> {
    let parts: DebianParts = crate::debian::prepare(cache)?;
    let modules = parts.modules(&[
        "virtio_pci",
        "virtio_blk",
        "virtio_scsi",
        "sd_mod",
        "isofs",
        "ata_piix",
    ])?;
    let initrd = Initramfs {
        busybox: &parts.busybox,
        modules: &modules,
        init: INIT,
        files: Vec::new(),
    }
    .build()?;
    std::fs::create_dir_all(out).map_err(io("creating", out))?;
    let work = out.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io("creating", &work))?;
    let initrd_path = work.join("initrd.img");
    std::fs::write(&initrd_path, &initrd).map_err(io("writing", &initrd_path))?;
    let config = work.join("syslinux.cfg");
    std::fs::write(
        &config,
        "SERIAL 0 115200\nPROMPT 0\nTIMEOUT 1\nDEFAULT linux\nLABEL linux\n  KERNEL vmlinuz\n  APPEND initrd=initrd.img console=tty0 console=ttyS0,115200 quiet\n",
    )
    .map_err(io("writing", &config))?;
    let fat = work.join("fat.img");
    std::fs::File::create(&fat)
        .and_then(|f| f.set_len(PARTITION_BYTES))
        .map_err(io("creating", &fat))?;
    run(Command::new("mkfs.vfat")
        .args(["-n", "CAPSTANTEST"])
        .arg(&fat))?;
    run(Command::new("mcopy")
        .arg("-i")
        .arg(&fat)
        .arg(&parts.kernel)
        .arg("::/vmlinuz"))?;
    run(Command::new("mcopy")
        .arg("-i")
        .arg(&fat)
        .arg(&initrd_path)
        .arg("::/initrd.img"))?;
    run(Command::new("mcopy")
        .arg("-i")
        .arg(&fat)
        .arg(&config)
        .arg("::/syslinux.cfg"))?;
    run(Command::new("syslinux").arg("--install").arg(&fat))?;
    let raw = out.join("disk.img");
    std::fs::File::create(&raw)
        .and_then(|f| f.set_len(IMAGE_BYTES))
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
            "label: dos\nstart=2048, size={}, type=6, bootable\n",
            PARTITION_BYTES / 512
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
    let fat_bytes = std::fs::read(&fat).map_err(io("reading", &fat))?;
    let mut disk = std::fs::File::options()
        .write(true)
        .open(&raw)
        .map_err(io("opening", &raw))?;
    // Boot code only (the first 440 bytes): the partition table sfdisk wrote stays.
    disk.write_all(&mbr[..mbr.len().min(440)])
        .map_err(io("writing", &raw))?;
    disk.seek(SeekFrom::Start(MIB))
        .map_err(io("seeking", &raw))?;
    disk.write_all(&fat_bytes).map_err(io("writing", &raw))?;
    disk.sync_all().map_err(io("syncing", &raw))?;
    drop(disk);
    let qcow2 = out.join("disk.qcow2");
    run(Command::new("qemu-img")
        .args(["convert", "-q", "-f", "raw", "-O", "qcow2"])
        .arg(&raw)
        .arg(&qcow2))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(TestImage {
        raw_sha256: sha256_file(&raw)?,
        qcow2_sha256: sha256_file(&qcow2)?,
        raw,
        qcow2,
    })
}
