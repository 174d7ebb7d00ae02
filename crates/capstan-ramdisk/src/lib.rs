//! The provisioning ramdisk: a Debian cloud kernel, a busybox initramfs with the kernel modules a
//! virtual or physical server needs to see its disks and NIC, and `capstan-agent` — booted from a
//! per-host ISO whose kernel command line tells the agent where capstan is and which token to use.
//!
//! - [`RamdiskBuild`] makes the ramdisk from Debian packages (`apt-get download`, `dpkg-deb -x`,
//!   `depmod`): nothing is installed on the build machine.
//! - [`Ramdisk`] opens a built ramdisk and makes boot ISOs from it.
//! - [`test_image`] builds the bootable disk image the host end-to-end tests provision.
//! - [`cloud_image`] builds the Debian cloud-init image (with a kubeadm test stand-in) the cluster
//!   end-to-end tests provision.
//! - [`node_image`] builds the Kubernetes node image (`capstan image build`): Debian 12 with
//!   containerd, the kubelet, kubeadm and kubectl of a Kubernetes release, and the control-plane,
//!   etcd, CoreDNS, kube-proxy and pause images already in containerd, made by [`oci`] from those
//!   binaries; [`kube_bin`] checks the binaries it is given.
//! - [`rootfs`] (debootstrap, cached) and [`disk`] (a bootable MBR disk and its qcow2) are the
//!   pipeline both Debian images share.
//! - [`cpio`] writes initramfs archives.

pub mod cloud_image;
pub mod cpio;
pub mod debian;
pub mod disk;
pub mod kube_bin;
pub mod node_image;
pub mod oci;
pub mod rootfs;
pub mod test_image;

use capstan_iso::IsoImage;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Files of a built ramdisk.
pub const KERNEL: &str = "vmlinuz";
pub const INITRD: &str = "initrd.img";
pub const ISOLINUX_BIN: &str = "isolinux.bin";
pub const LDLINUX: &str = "ldlinux.c32";
pub const MANIFEST: &str = "manifest.json";
pub const GENERIC_ISO: &str = "capstan-ramdisk.iso";
/// Where the build machine has ISOLINUX (Debian packages `isolinux` and `syslinux-common`).
pub const SYSTEM_ISOLINUX_BIN: &str = "/usr/lib/ISOLINUX/isolinux.bin";
pub const SYSTEM_LDLINUX: &str = "/usr/lib/syslinux/modules/bios/ldlinux.c32";

/// Kernel modules the ramdisk loads (with their dependencies), when the kernel has them as modules.
pub const RAMDISK_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "virtio_scsi",
    "virtio_net",
    "sd_mod",
    "sr_mod",
    "isofs",
    "ata_piix",
    "ahci",
    "nvme",
    "e1000",
    "e1000e",
    "igb",
    "ixgbe",
    "i40e",
    "bnxt_en",
    "mlx5_core",
];

/// Why a build or an ISO failed.
#[derive(Debug, thiserror::Error)]
pub enum RamdiskError {
    #[error("{0} is not a built ramdisk (missing {1}): run `capstan ramdisk build --out {0}`")]
    NotBuilt(String, &'static str),
    #[error(
        "the agent binary {0} does not exist: build it with `cargo build --release -p capstan-agent` or pass --agent"
    )]
    NoAgent(String),
    #[error("{} is missing: install the isolinux and syslinux-common packages", .0)]
    NoIsolinux(String),
    #[error("running {command}: {detail}")]
    Command { command: String, detail: String },
    #[error("{what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Package(String),
    #[error("making the ISO")]
    Iso(#[from] capstan_iso::IsoError),
}

pub(crate) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RamdiskError {
    let path = path.to_owned();
    move |source| RamdiskError::Io { what, path, source }
}

/// Runs a build tool (apt-get, dpkg-deb, mkfs, …): its stdout, or its stderr in the error. The one
/// way capstan's image, ramdisk and bundle builders run a tool.
pub fn run(command: &mut std::process::Command) -> Result<String, RamdiskError> {
    let shown = format!("{command:?}");
    let out = command.output().map_err(|e| RamdiskError::Command {
        command: shown.clone(),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(RamdiskError::Command {
            command: shown,
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What a build made, written as `manifest.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub kernel_package: String,
    pub kernel_version: String,
    pub busybox_package: String,
    pub modules: Vec<String>,
    pub agent_sha256: String,
    pub kernel_bytes: u64,
    pub initrd_bytes: u64,
    pub iso_bytes: u64,
}

/// How to build the ramdisk.
#[derive(Clone, Debug)]
pub struct RamdiskBuild {
    /// Output directory.
    pub out: PathBuf,
    /// The `capstan-agent` binary to ship.
    pub agent: PathBuf,
    /// Where downloaded packages are kept between builds.
    pub cache: PathBuf,
}

/// The ramdisk's `/init`: mount, load modules, bring up the first NIC by DHCP, run the agent.
const INIT: &str = r#"#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /tmp /run
echo "capstan-ramdisk: loading modules"
for m in $(cat /lib/modules/load-order); do insmod "/lib/modules/$m" 2>/dev/null; done
ip link set lo up
nic=""
n=0
while [ -z "$nic" ] && [ $n -lt 100 ]; do
  for path in /sys/class/net/*; do
    name=${path##*/}
    [ "$name" = lo ] && continue
    [ -e "$path/device" ] && nic=$name && break
  done
  [ -z "$nic" ] && sleep 0.2
  n=$((n + 1))
done
echo "capstan-ramdisk: network interface ${nic:-none}"
ip link set "$nic" up
until udhcpc -i "$nic" -s /etc/udhcpc.script -q -n -t 5 -T 2; do
  echo "capstan-ramdisk: no DHCP lease on $nic yet"
done
echo "capstan-ramdisk: network up, starting the agent"
while true; do
  /bin/capstan-agent
  echo "capstan-ramdisk: the agent exited; restarting it"
  sleep 2
done
"#;

/// Applies a udhcpc lease with busybox's ifconfig and route.
pub const UDHCPC_SCRIPT: &str = r#"#!/bin/sh
case "$1" in
  bound|renew)
    ifconfig "$interface" "$ip" netmask "${subnet:-255.255.255.0}" up
    if [ -n "$router" ]; then
      route del default 2>/dev/null
      for r in $router; do route add default gw "$r" dev "$interface"; break; done
    fi
    echo "capstan-ramdisk: lease $ip on $interface"
    ;;
esac
exit 0
"#;

/// An initramfs: busybox with its applets, modules in load order, an init, extra files.
pub(crate) struct Initramfs<'a> {
    pub busybox: &'a Path,
    pub modules: &'a [PathBuf],
    pub init: &'a str,
    /// (path in the archive, content, executable)
    pub files: Vec<(String, Vec<u8>, bool)>,
}

impl Initramfs<'_> {
    pub fn build(&self) -> Result<Vec<u8>, RamdiskError> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut archive = cpio::Cpio::new(gz);
        let busybox = std::fs::read(self.busybox).map_err(io("reading", self.busybox))?;
        let applets = run(std::process::Command::new(self.busybox).arg("--list"))?;
        let write_err = |e: std::io::Error| RamdiskError::Io {
            what: "writing",
            path: PathBuf::from("initramfs"),
            source: e,
        };
        let mut dirs: Vec<String> = [
            "bin",
            "dev",
            "proc",
            "sys",
            "tmp",
            "run",
            "mnt",
            "etc",
            "lib",
            "lib/modules",
        ]
        .iter()
        .map(|d| (*d).to_owned())
        .collect();
        for (path, _, _) in &self.files {
            for ancestor in Path::new(path).ancestors().skip(1) {
                let a = ancestor.to_string_lossy().into_owned();
                if !a.is_empty() && !dirs.contains(&a) {
                    dirs.push(a);
                }
            }
        }
        // Parents sort before their children.
        dirs.sort();
        for d in &dirs {
            archive.dir(d).map_err(write_err)?;
        }
        archive
            .file("bin/busybox", &busybox, true)
            .map_err(write_err)?;
        for applet in applets.split_whitespace().filter(|a| *a != "busybox") {
            archive
                .symlink(&format!("bin/{applet}"), "busybox")
                .map_err(write_err)?;
        }
        let mut order = String::new();
        for module in self.modules {
            let name = module
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let data = std::fs::read(module).map_err(io("reading", module))?;
            archive
                .file(&format!("lib/modules/{name}"), &data, false)
                .map_err(write_err)?;
            order.push_str(&name);
            order.push('\n');
        }
        archive
            .file("lib/modules/load-order", order.as_bytes(), false)
            .map_err(write_err)?;
        archive
            .file("init", self.init.as_bytes(), true)
            .map_err(write_err)?;
        for (path, data, executable) in &self.files {
            archive.file(path, data, *executable).map_err(write_err)?;
        }
        archive
            .finish()
            .and_then(|gz| gz.finish())
            .map_err(write_err)
    }
}

/// The shared libraries a dynamic executable needs, with its interpreter (from `ldd`).
pub(crate) fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>, RamdiskError> {
    let out = run(std::process::Command::new("ldd").arg(binary))?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            if let Some((_, rest)) = line.split_once("=> ") {
                rest.split_whitespace()
                    .next()
                    .filter(|p| p.starts_with('/'))
                    .map(PathBuf::from)
            } else {
                line.split_whitespace()
                    .next()
                    .filter(|p| p.starts_with('/'))
                    .map(PathBuf::from)
            }
        })
        .collect())
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The sha256 of a file as hex, read in pieces (images are gigabytes).
pub fn sha256_file(path: &Path) -> Result<String, RamdiskError> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(io("reading", path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 4 << 20];
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

impl RamdiskBuild {
    /// Builds the ramdisk into `out`; `progress` hears one line per step.
    pub fn run(&self, progress: &dyn Fn(&str)) -> Result<Manifest, RamdiskError> {
        if !self.agent.is_file() {
            return Err(RamdiskError::NoAgent(self.agent.display().to_string()));
        }
        for system in [SYSTEM_ISOLINUX_BIN, SYSTEM_LDLINUX] {
            if !Path::new(system).is_file() {
                return Err(RamdiskError::NoIsolinux(system.to_owned()));
            }
        }
        progress("fetching Debian's cloud kernel and busybox-static");
        let parts = debian::prepare(&self.cache)?;
        progress(&format!("kernel {}", parts.kernel_version));
        let modules = parts.modules(RAMDISK_MODULES)?;
        progress(&format!("{} kernel modules", modules.len()));
        // Debug symbols are most of an unstripped binary and useless in the ramdisk.
        let stripped = self.cache.join("capstan-agent.stripped");
        let agent_path = match run(std::process::Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(&self.agent))
        {
            Ok(_) => stripped,
            Err(_) => self.agent.clone(),
        };
        let agent = std::fs::read(&agent_path).map_err(io("reading", &agent_path))?;
        let mut files = vec![
            ("bin/capstan-agent".to_owned(), agent.clone(), true),
            (
                "etc/udhcpc.script".to_owned(),
                UDHCPC_SCRIPT.as_bytes().to_vec(),
                true,
            ),
        ];
        for lib in shared_libraries(&self.agent)? {
            let data = std::fs::read(&lib).map_err(io("reading", &lib))?;
            files.push((
                lib.to_string_lossy().trim_start_matches('/').to_owned(),
                data,
                true,
            ));
        }
        progress("building the initramfs");
        let initrd = Initramfs {
            busybox: &parts.busybox,
            modules: &modules,
            init: INIT,
            files,
        }
        .build()?;
        std::fs::create_dir_all(&self.out).map_err(io("creating", &self.out))?;
        let kernel = std::fs::read(&parts.kernel).map_err(io("reading", &parts.kernel))?;
        let write = |name: &str, data: &[u8]| {
            let path = self.out.join(name);
            std::fs::write(&path, data).map_err(io("writing", &path))
        };
        write(KERNEL, &kernel)?;
        write(INITRD, &initrd)?;
        write(
            ISOLINUX_BIN,
            &std::fs::read(SYSTEM_ISOLINUX_BIN)
                .map_err(io("reading", Path::new(SYSTEM_ISOLINUX_BIN)))?,
        )?;
        write(
            LDLINUX,
            &std::fs::read(SYSTEM_LDLINUX).map_err(io("reading", Path::new(SYSTEM_LDLINUX)))?,
        )?;
        progress("making the generic ISO");
        let ramdisk = Ramdisk {
            dir: self.out.clone(),
        };
        let iso = ramdisk.boot_iso("")?;
        write(GENERIC_ISO, &iso)?;
        let manifest = Manifest {
            kernel_package: parts.kernel_package.clone(),
            kernel_version: parts.kernel_version.clone(),
            busybox_package: parts.busybox_package.clone(),
            modules: modules
                .iter()
                .filter_map(|m| m.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect(),
            agent_sha256: sha256_hex(&agent),
            kernel_bytes: kernel.len() as u64,
            initrd_bytes: initrd.len() as u64,
            iso_bytes: iso.len() as u64,
        };
        write(
            MANIFEST,
            &serde_json::to_vec_pretty(&manifest).unwrap_or_default(),
        )?;
        Ok(manifest)
    }
}

/// A built ramdisk.
#[derive(Clone, Debug)]
pub struct Ramdisk {
    dir: PathBuf,
}

impl Ramdisk {
    /// Opens the ramdisk built into `dir`.
    pub fn open(dir: &Path) -> Result<Self, RamdiskError> {
        for name in [KERNEL, INITRD, ISOLINUX_BIN, LDLINUX] {
            if !dir.join(name).is_file() {
                return Err(RamdiskError::NotBuilt(dir.display().to_string(), name));
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// A bootable ISO: ISOLINUX boots the ramdisk at once, console on the first serial port and
    /// the screen, with `extra_cmdline` appended to the kernel command line.
    pub fn boot_iso(&self, extra_cmdline: &str) -> Result<Vec<u8>, RamdiskError> {
        // `no_timer_check`: on an emulated (or overcommitted) machine the kernel's IO-APIC timer
        // check can miss its window and panic ("IO-APIC + timer doesn't work!").
        let config = format!(
            "SERIAL 0 115200\nPROMPT 0\nTIMEOUT 1\nDEFAULT capstan\nLABEL capstan\n  KERNEL /isolinux/vmlinuz\n  APPEND initrd=/isolinux/initrd.img console=tty0 console=ttyS0,115200 no_timer_check {extra_cmdline}\n"
        );
        let mut iso = IsoImage::new("CAPSTAN_RAMDISK")?;
        iso.add_file("isolinux/isolinux.bin", &self.dir.join(ISOLINUX_BIN))?
            .add_file("isolinux/ldlinux.c32", &self.dir.join(LDLINUX))?
            .add_file("isolinux/vmlinuz", &self.dir.join(KERNEL))?
            .add_file("isolinux/initrd.img", &self.dir.join(INITRD))?
            .add_bytes("isolinux/isolinux.cfg", config.into_bytes())?
            .isolinux_boot("isolinux/isolinux.bin", "isolinux/boot.cat")?;
        let mut out = Vec::new();
        iso.write_to(&mut out)?;
        out.flush().map_err(io("writing", Path::new("iso")))?;
        Ok(out)
    }
}
