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
//! The root filesystem comes from [`crate::rootfs`] (`debootstrap`, kept in the package cache) and
//! the disk from [`crate::disk`]; later builds only re-make the disk.

use crate::{RamdiskError, io, run, sha256_file};
use std::path::{Path, PathBuf};
use std::process::Command;

pub use crate::disk::cmdline;
pub use crate::rootfs::{DEFAULT_MIRROR, ROOT_LABEL, SUITE};

/// Free space left in the root filesystem beyond what the tree needs, unless the build asks for
/// more (kept small: provisioning writes every byte of the image).
pub const DEFAULT_ROOT_FREE_BYTES: u64 = 160 << 20;
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

/// The locale cloud-init sets.
pub(crate) const LOCALE_CFG: &str =
    "# capstan: a locale every Debian system has.\nlocale: C.UTF-8\n";

/// Packages `debootstrap` installs; the rest follows inside the chroot (so that debootstrap's
/// resolver does not stop on cloud-init's virtual dependencies).
pub(crate) const BASE_PACKAGES: &[&str] = &[
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
/// The cloud-init image's root filesystem.
pub const RECIPE: crate::rootfs::Recipe<'static> = crate::rootfs::Recipe {
    name: "cloud",
    base_packages: BASE_PACKAGES,
    chroot_packages: CHROOT_PACKAGES,
};

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
    let root = crate::rootfs::bootstrap(cache, &RECIPE, mirror, progress)?;
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
    let raw = out.join("cloud.img");
    let qcow2 = out.join("cloud.qcow2");
    let boot = crate::disk::write(
        &root,
        out,
        &raw,
        &qcow2,
        crate::disk::Qcow2::Plain,
        root_free,
        progress,
    )?;
    Ok(CloudImage {
        raw_sha256: sha256_file(&raw)?,
        qcow2_sha256: sha256_file(&qcow2)?,
        raw,
        qcow2,
        kernel: boot.kernel,
        initrd: boot.initrd,
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
    fn the_cloud_image_keeps_its_cache_name() {
        // Trees bootstrapped before the root filesystem code was shared stay valid.
        assert!(RECIPE.dir_name().starts_with("cloud-rootfs-bookworm-"));
    }
}
