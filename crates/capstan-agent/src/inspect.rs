//! Inspection: what the host is made of, read from `/proc` and `/sys` (under a configurable root,
//! so tests use a fake tree), in Metal3's `status.hardware` shape.
//!
//! RAM is the sum of the online memory blocks in `/sys/devices/system/memory` (the installed
//! memory as the kernel sees it, which matches what a BMC reports); without that directory it is
//! `MemTotal` rounded up to a multiple of 64 MiB, since `MemTotal` excludes what the kernel keeps.

use capstan_model::metal3::{Cpu, HardwareDetails, Nic, Storage, SystemVendor};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Where the agent reads the system from.
#[derive(Clone, Debug)]
pub struct SystemRoot {
    /// `/` on a host; a fake tree in tests. `proc/` and `sys/` are read below it.
    pub root: PathBuf,
}

impl SystemRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative.trim_start_matches('/'))
    }

    /// A sysfs/procfs value, trimmed; `None` when missing or empty.
    pub fn read(&self, relative: &str) -> Option<String> {
        read_trimmed(&self.path(relative))
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// One block device as the agent sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockDevice {
    /// Kernel name, e.g. `vda`.
    pub name: String,
    pub size_bytes: u64,
    pub model: Option<String>,
    pub vendor: Option<String>,
    pub serial: Option<String>,
    pub wwn: Option<String>,
    pub rotational: bool,
    pub hctl: Option<String>,
}

/// The disks worth deploying to: no loop, RAM, optical, device-mapper or zero-sized devices.
pub fn block_devices(system: &SystemRoot) -> Vec<BlockDevice> {
    entries(&system.path("sys/block"))
        .into_iter()
        .filter(|name| {
            !["loop", "ram", "sr", "dm-", "zram", "md", "fd", "nbd"]
                .iter()
                .any(|p| name.starts_with(p))
        })
        .filter_map(|name| {
            let base = format!("sys/block/{name}");
            let sectors: u64 = system.read(&format!("{base}/size"))?.parse().ok()?;
            if sectors == 0 {
                return None;
            }
            let hctl = std::fs::read_link(system.path(&format!("{base}/device")))
                .ok()
                .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()))
                .filter(|f| f.split(':').count() == 4);
            Some(BlockDevice {
                size_bytes: sectors * 512,
                model: system.read(&format!("{base}/device/model")),
                vendor: system.read(&format!("{base}/device/vendor")),
                serial: system
                    .read(&format!("{base}/device/serial"))
                    .or_else(|| system.read(&format!("{base}/serial"))),
                wwn: system.read(&format!("{base}/device/wwid")),
                rotational: system.read(&format!("{base}/queue/rotational")).as_deref()
                    == Some("1"),
                hctl,
                name,
            })
        })
        .collect()
}

fn ram_mebibytes(system: &SystemRoot) -> Option<i64> {
    let blocks = entries(&system.path("sys/devices/system/memory"));
    let block_size = system
        .read("sys/devices/system/memory/block_size_bytes")
        .and_then(|hex| u64::from_str_radix(&hex, 16).ok());
    if let Some(block_size) = block_size {
        let online = blocks
            .iter()
            .filter(|b| b.starts_with("memory"))
            .filter(|b| {
                system
                    .read(&format!("sys/devices/system/memory/{b}/online"))
                    .as_deref()
                    == Some("1")
            })
            .count() as u64;
        if online > 0 {
            return i64::try_from(online * block_size / (1 << 20)).ok();
        }
    }
    let meminfo = system.read("proc/meminfo")?;
    let kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let mib = kib.div_ceil(1024);
    i64::try_from(mib.div_ceil(64) * 64).ok()
}

fn cpu(system: &SystemRoot) -> Cpu {
    let info = system.read("proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
    };
    let count = info
        .lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count();
    Cpu {
        arch: Some(std::env::consts::ARCH.to_owned()),
        model: field("model name"),
        clock_megahertz: field("cpu MHz").and_then(|v| v.parse().ok()),
        count: i64::try_from(count).ok().filter(|c| *c > 0),
        flags: field("flags")
            .map(|f| f.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default(),
    }
}

fn nics(system: &SystemRoot) -> Vec<Nic> {
    entries(&system.path("sys/class/net"))
        .into_iter()
        .filter(|name| name != "lo")
        .filter(|name| {
            system
                .path(&format!("sys/class/net/{name}/device"))
                .exists()
        })
        .map(|name| {
            let base = format!("sys/class/net/{name}");
            let speed = system
                .read(&format!("{base}/speed"))
                .and_then(|s| s.parse::<i64>().ok())
                .filter(|s| *s > 0);
            let pci = std::fs::read_link(system.path(&format!("{base}/device")))
                .ok()
                .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
            let model = match (
                system.read(&format!("{base}/device/vendor")),
                system.read(&format!("{base}/device/device")),
            ) {
                (Some(v), Some(d)) => Some(format!("{v} {d}")),
                _ => None,
            };
            Nic {
                mac: system.read(&format!("{base}/address")),
                speed_gbps: speed.map(|mbps| mbps / 1000),
                pci_address: pci,
                model,
                pxe: None,
                ip: None,
                vlan_id: None,
                name: Some(name),
            }
        })
        .collect()
}

/// The hardware of the host.
pub fn inspect(system: &SystemRoot) -> HardwareDetails {
    let storage = block_devices(system)
        .into_iter()
        .map(|d| Storage {
            name: Some(format!("/dev/{}", d.name)),
            alternate_names: Vec::new(),
            type_: Some(
                if d.name.starts_with("nvme") {
                    "NVME"
                } else if d.rotational {
                    "HDD"
                } else {
                    "SSD"
                }
                .to_owned(),
            ),
            model: d.model,
            vendor: d.vendor,
            serial_number: d.serial,
            size_bytes: i64::try_from(d.size_bytes).ok(),
            rotational: Some(d.rotational),
            hctl: d.hctl,
            wwn: d.wwn,
        })
        .collect();
    let dmi = |f: &str| system.read(&format!("sys/class/dmi/id/{f}"));
    HardwareDetails {
        hostname: system.read("proc/sys/kernel/hostname"),
        cpu: Some(cpu(system)),
        ram_mebibytes: ram_mebibytes(system),
        nics: nics(system),
        storage,
        system_vendor: Some(SystemVendor {
            manufacturer: dmi("sys_vendor"),
            product_name: dmi("product_name"),
            serial_number: dmi("product_serial"),
        }),
        firmware: Some(json!({"bios": {
            "vendor": dmi("bios_vendor"),
            "version": dmi("bios_version"),
            "date": dmi("bios_date"),
        }})),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a fake `/sys` and `/proc` for a host with one NIC and two disks.
    pub(crate) fn fake_system(root: &Path) {
        let write = |rel: &str, content: &str| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        };
        write(
            "proc/cpuinfo",
            "processor\t: 0\nmodel name\t: QEMU Virtual CPU\ncpu MHz\t\t: 2400.000\nflags\t\t: fpu sse2\n\nprocessor\t: 1\nmodel name\t: QEMU Virtual CPU\n",
        );
        write("proc/meminfo", "MemTotal:        1000000 kB\n");
        write("sys/devices/system/memory/block_size_bytes", "8000000\n");
        for i in 0..8 {
            write(
                &format!("sys/devices/system/memory/memory{i}/online"),
                "1\n",
            );
        }
        write("sys/class/net/lo/address", "00:00:00:00:00:00\n");
        write("sys/class/net/eth0/address", "52:54:00:12:34:56\n");
        write("sys/class/net/eth0/speed", "1000\n");
        write("sys/class/net/eth0/device/vendor", "0x1af4\n");
        write("sys/class/net/eth0/device/device", "0x1000\n");
        for (name, sectors, rotational) in [
            ("vda", "20971520", "1"),
            ("vdb", "4194304", "0"),
            ("sr0", "100", "1"),
            ("loop0", "10", "0"),
        ] {
            write(&format!("sys/block/{name}/size"), sectors);
            write(&format!("sys/block/{name}/queue/rotational"), rotational);
        }
        write("sys/block/vda/serial", "disk-a\n");
        write("sys/class/dmi/id/sys_vendor", "QEMU\n");
        write("sys/class/dmi/id/product_name", "Standard PC\n");
        write("sys/class/dmi/id/bios_vendor", "SeaBIOS\n");
    }

    #[test]
    fn inspection_reads_cpu_ram_nics_disks_and_vendor() {
        let dir = tempfile::tempdir().unwrap();
        fake_system(dir.path());
        let hw = inspect(&SystemRoot::new(dir.path()));
        let cpu = hw.cpu.unwrap();
        assert_eq!(cpu.count, Some(2));
        assert_eq!(cpu.model.as_deref(), Some("QEMU Virtual CPU"));
        assert_eq!(cpu.clock_megahertz, Some(2400.0));
        assert_eq!(hw.ram_mebibytes, Some(1024), "8 blocks of 128 MiB");
        assert_eq!(hw.nics.len(), 1);
        assert_eq!(hw.nics[0].mac.as_deref(), Some("52:54:00:12:34:56"));
        assert_eq!(hw.nics[0].speed_gbps, Some(1));
        let names: Vec<_> = hw.storage.iter().filter_map(|s| s.name.clone()).collect();
        assert_eq!(names, ["/dev/vda", "/dev/vdb"]);
        assert_eq!(hw.storage[0].size_bytes, Some(10 << 30));
        assert_eq!(hw.storage[0].type_.as_deref(), Some("HDD"));
        assert_eq!(hw.storage[0].serial_number.as_deref(), Some("disk-a"));
        assert_eq!(
            hw.system_vendor.unwrap().manufacturer.as_deref(),
            Some("QEMU")
        );
        assert_eq!(hw.firmware.unwrap()["bios"]["vendor"], "SeaBIOS");
    }

    #[test]
    fn without_memory_blocks_ram_is_mem_total_rounded_up() {
        let dir = tempfile::tempdir().unwrap();
        fake_system(dir.path());
        std::fs::remove_dir_all(dir.path().join("sys/devices/system/memory")).unwrap();
        let hw = inspect(&SystemRoot::new(dir.path()));
        assert_eq!(hw.ram_mebibytes, Some(1024));
    }
}
