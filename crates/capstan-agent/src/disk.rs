//! The root device and what is written around the image: choosing the device by Metal3's
//! `rootDeviceHints`, reading and extending its partition table (MBR or GPT) with a config-drive
//! partition at the end, and metadata cleaning.
//!
//! Without hints the root device is the smallest disk of at least 4 GiB (Ironic's rule); with
//! hints every given hint must match. The config-drive partition is placed at the end of the
//! device, aligned to 1 MiB, sized to the ISO rounded up to 1 MiB with a 64 MiB minimum. A GPT
//! written for a smaller disk (every image's is) gets its backup header and entries moved to the
//! device's real end.

use crate::inspect::BlockDevice;
use capstan_model::metal3::RootDeviceHints;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};

const SECTOR: u64 = 512;
const MIB: u64 = 1 << 20;
/// The smallest device the agent picks by itself.
pub const MIN_ROOT_DEVICE: u64 = 4 << 30;
/// The smallest config-drive partition.
pub const MIN_CONFIG_DRIVE: u64 = 64 * MIB;
/// GPT type of a Linux filesystem partition, in its on-disk byte order.
const LINUX_DATA_GUID: [u8; 16] = [
    0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4,
];

/// Why a disk operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("no disk matches the root device hints {hints}; disks: {disks}")]
    NoMatch { hints: String, disks: String },
    #[error("no disk of at least 4 GiB; disks: {0}")]
    NoDisk(String),
    #[error("{what} on {device}")]
    Io {
        what: &'static str,
        device: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{device} has no free primary partition slot for the config drive")]
    NoFreeSlot { device: String },
    #[error("{device} has no room after its last partition for a {size} MiB config drive")]
    NoRoom { device: String, size: u64 },
    #[error("{device}: {reason}")]
    BadTable { device: String, reason: String },
}

fn describe(devices: &[BlockDevice]) -> String {
    devices
        .iter()
        .map(|d| format!("{} ({} GiB)", d.name, d.size_bytes >> 30))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The device to deploy to.
pub fn choose_root_device(
    devices: &[BlockDevice],
    hints: Option<&RootDeviceHints>,
) -> Result<BlockDevice, DiskError> {
    let mut candidates: Vec<&BlockDevice> = match hints {
        Some(h) => devices.iter().filter(|d| matches(d, h)).collect(),
        None => devices
            .iter()
            .filter(|d| d.size_bytes >= MIN_ROOT_DEVICE)
            .collect(),
    };
    candidates.sort_by_key(|d| (d.size_bytes, d.name.clone()));
    match (candidates.first(), hints) {
        (Some(d), _) => Ok((*d).clone()),
        (None, Some(h)) => Err(DiskError::NoMatch {
            hints: serde_json::to_string(h).unwrap_or_default(),
            disks: describe(devices),
        }),
        (None, None) => Err(DiskError::NoDisk(describe(devices))),
    }
}

fn matches(d: &BlockDevice, h: &RootDeviceHints) -> bool {
    let contains = |have: &Option<String>, want: &Option<String>| match want {
        None => true,
        Some(w) => have
            .as_deref()
            .is_some_and(|h| h.to_lowercase().contains(&w.to_lowercase())),
    };
    let equals = |have: &Option<String>, want: &Option<String>| match want {
        None => true,
        Some(w) => have.as_deref() == Some(w.as_str()),
    };
    let name_ok = h
        .device_name
        .as_deref()
        .is_none_or(|n| n.trim_start_matches("/dev/") == d.name);
    name_ok
        && equals(&d.hctl, &h.hctl)
        && contains(&d.model, &h.model)
        && contains(&d.vendor, &h.vendor)
        && equals(&d.serial, &h.serial_number)
        && equals(&d.wwn, &h.wwn)
        && h.min_size_gigabytes.is_none_or(|g| {
            d.size_bytes >= u64::try_from(g).unwrap_or(u64::MAX).saturating_mul(1 << 30)
        })
        && h.rotational.is_none_or(|r| r == d.rotational)
}

/// A partition, in sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    pub first: u64,
    pub last: u64,
}

/// A device's partition table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Table {
    None,
    Mbr(Vec<Partition>),
    Gpt(Vec<Partition>),
}

fn io(what: &'static str, device: &str) -> impl FnOnce(std::io::Error) -> DiskError {
    let device = device.to_owned();
    move |source| DiskError::Io {
        what,
        device,
        source,
    }
}

fn read_at(file: &mut File, offset: u64, len: usize, device: &str) -> Result<Vec<u8>, DiskError> {
    let mut buf = vec![0u8; len];
    file.seek(SeekFrom::Start(offset))
        .map_err(io("seeking", device))?;
    file.read_exact(&mut buf).map_err(io("reading", device))?;
    Ok(buf)
}

fn write_at(file: &mut File, offset: u64, data: &[u8], device: &str) -> Result<(), DiskError> {
    file.seek(SeekFrom::Start(offset))
        .map_err(io("seeking", device))?;
    file.write_all(data).map_err(io("writing", device))
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

struct Gpt {
    header: Vec<u8>,
    entries: Vec<u8>,
    entries_lba: u64,
    count: usize,
    size: usize,
}

fn read_gpt(file: &mut File, device: &str) -> Result<Gpt, DiskError> {
    let header = read_at(file, SECTOR, SECTOR as usize, device)?;
    if &header[0..8] != b"EFI PART" {
        return Err(DiskError::BadTable {
            device: device.to_owned(),
            reason: "protective MBR without a GPT header".into(),
        });
    }
    let entries_lba = le64(&header, 72);
    let count = le32(&header, 80) as usize;
    let size = le32(&header, 84) as usize;
    if size < 128 || count == 0 || count * size > 1 << 20 {
        return Err(DiskError::BadTable {
            device: device.to_owned(),
            reason: format!("{count} entries of {size} bytes"),
        });
    }
    let entries = read_at(file, entries_lba * SECTOR, count * size, device)?;
    Ok(Gpt {
        header,
        entries,
        entries_lba,
        count,
        size,
    })
}

/// Reads the partition table of `file`.
pub fn read_table(file: &mut File, device: &str) -> Result<Table, DiskError> {
    let mbr = read_at(file, 0, SECTOR as usize, device)?;
    if mbr[510] != 0x55 || mbr[511] != 0xAA {
        return Ok(Table::None);
    }
    let slots: Vec<(u8, u64, u64)> = (0..4)
        .map(|i| {
            let e = &mbr[446 + i * 16..446 + (i + 1) * 16];
            (e[4], u64::from(le32(e, 8)), u64::from(le32(e, 12)))
        })
        .collect();
    if slots.iter().any(|(t, _, _)| *t == 0xEE) {
        let gpt = read_gpt(file, device)?;
        let parts = (0..gpt.count)
            .map(|i| &gpt.entries[i * gpt.size..(i + 1) * gpt.size])
            .filter(|e| e[..16].iter().any(|b| *b != 0))
            .map(|e| Partition {
                first: le64(e, 32),
                last: le64(e, 40),
            })
            .collect();
        return Ok(Table::Gpt(parts));
    }
    Ok(Table::Mbr(
        slots
            .into_iter()
            .filter(|(t, _, n)| *t != 0 && *n > 0)
            .map(|(_, first, n)| Partition {
                first,
                last: first + n - 1,
            })
            .collect(),
    ))
}

fn config_drive_sectors(iso_len: u64) -> u64 {
    iso_len.div_ceil(MIB).max(MIN_CONFIG_DRIVE / MIB) * MIB / SECTOR
}

/// Adds a partition at the end of the device holding `iso`; returns its first sector.
pub fn write_config_drive(
    file: &mut File,
    device: &str,
    device_bytes: u64,
    iso: &[u8],
) -> Result<u64, DiskError> {
    let device_sectors = device_bytes / SECTOR;
    let wanted = config_drive_sectors(iso.len() as u64);
    let align = MIB / SECTOR;
    let first = match read_table(file, device)? {
        Table::None => {
            // No table: an MBR with just the config drive, after whatever the image is.
            let first = (device_sectors - wanted) / align * align;
            let mut mbr = read_at(file, 0, SECTOR as usize, device)?;
            set_mbr_entry(&mut mbr, 0, first, wanted);
            mbr[510] = 0x55;
            mbr[511] = 0xAA;
            write_at(file, 0, &mbr, device)?;
            first
        }
        Table::Mbr(parts) => {
            let mut mbr = read_at(file, 0, SECTOR as usize, device)?;
            let slot = (0..4).find(|i| mbr[446 + i * 16 + 4] == 0).ok_or_else(|| {
                DiskError::NoFreeSlot {
                    device: device.to_owned(),
                }
            })?;
            let end = device_sectors.min(u64::from(u32::MAX));
            let first = (end - wanted) / align * align;
            if parts.iter().any(|p| p.last >= first) {
                return Err(DiskError::NoRoom {
                    device: device.to_owned(),
                    size: wanted * SECTOR / MIB,
                });
            }
            set_mbr_entry(&mut mbr, slot, first, wanted);
            write_at(file, 0, &mbr, device)?;
            first
        }
        Table::Gpt(parts) => add_gpt_partition(file, device, device_sectors, wanted, &parts)?,
    };
    write_at(file, first * SECTOR, iso, device)?;
    // The rest of the partition stays as it was: the ISO says how long the filesystem is.
    file.sync_all().map_err(io("syncing", device))?;
    Ok(first)
}

fn set_mbr_entry(mbr: &mut [u8], slot: usize, first: u64, sectors: u64) {
    let e = &mut mbr[446 + slot * 16..446 + (slot + 1) * 16];
    e.fill(0);
    // CHS fields say "beyond CHS"; every current reader uses the LBA fields.
    e[1..4].copy_from_slice(&[0xFE, 0xFF, 0xFF]);
    e[4] = 0x83;
    e[5..8].copy_from_slice(&[0xFE, 0xFF, 0xFF]);
    e[8..12].copy_from_slice(&u32::try_from(first).unwrap_or(u32::MAX).to_le_bytes());
    e[12..16].copy_from_slice(&u32::try_from(sectors).unwrap_or(u32::MAX).to_le_bytes());
}

fn add_gpt_partition(
    file: &mut File,
    device: &str,
    device_sectors: u64,
    wanted: u64,
    parts: &[Partition],
) -> Result<u64, DiskError> {
    let mut gpt = read_gpt(file, device)?;
    let entry_sectors = ((gpt.count * gpt.size) as u64).div_ceil(SECTOR);
    let last_usable = device_sectors - 2 - entry_sectors;
    let align = MIB / SECTOR;
    let first = (last_usable + 1 - wanted) / align * align;
    let last = first + wanted - 1;
    if parts.iter().any(|p| p.last >= first) {
        return Err(DiskError::NoRoom {
            device: device.to_owned(),
            size: wanted * SECTOR / MIB,
        });
    }
    let slot = (0..gpt.count)
        .find(|i| {
            gpt.entries[i * gpt.size..i * gpt.size + 16]
                .iter()
                .all(|b| *b == 0)
        })
        .ok_or_else(|| DiskError::NoFreeSlot {
            device: device.to_owned(),
        })?;
    let entry = &mut gpt.entries[slot * gpt.size..(slot + 1) * gpt.size];
    entry.fill(0);
    entry[..16].copy_from_slice(&LINUX_DATA_GUID);
    // A unique partition GUID derived from the disk GUID and the slot (random v4 layout bits).
    let mut unique = [0u8; 16];
    unique.copy_from_slice(&gpt.header[56..72]);
    unique[0] ^= 0xC0 ^ u8::try_from(slot & 0xff).unwrap_or(0);
    unique[7] = (unique[7] & 0x0f) | 0x40;
    unique[8] = (unique[8] & 0x3f) | 0x80;
    entry[16..32].copy_from_slice(&unique);
    entry[32..40].copy_from_slice(&first.to_le_bytes());
    entry[40..48].copy_from_slice(&last.to_le_bytes());
    for (i, unit) in "config-2".encode_utf16().enumerate() {
        entry[56 + 2 * i..58 + 2 * i].copy_from_slice(&unit.to_le_bytes());
    }
    let entries_crc = crc32fast::hash(&gpt.entries);
    let backup_lba = device_sectors - 1;
    let backup_entries_lba = backup_lba - entry_sectors;
    let header_size = le32(&gpt.header, 12) as usize;
    let finish = |header: &mut Vec<u8>, mine: u64, other: u64, entries_lba: u64| {
        header[24..32].copy_from_slice(&mine.to_le_bytes());
        header[32..40].copy_from_slice(&other.to_le_bytes());
        header[48..56].copy_from_slice(&last_usable.to_le_bytes());
        header[72..80].copy_from_slice(&entries_lba.to_le_bytes());
        header[88..92].copy_from_slice(&entries_crc.to_le_bytes());
        header[16..20].fill(0);
        let crc = crc32fast::hash(&header[..header_size.min(SECTOR as usize)]);
        header[16..20].copy_from_slice(&crc.to_le_bytes());
    };
    let mut primary = gpt.header.clone();
    finish(&mut primary, 1, backup_lba, gpt.entries_lba);
    let mut backup = gpt.header.clone();
    finish(&mut backup, backup_lba, 1, backup_entries_lba);
    write_at(file, gpt.entries_lba * SECTOR, &gpt.entries, device)?;
    write_at(file, SECTOR, &primary, device)?;
    write_at(file, backup_entries_lba * SECTOR, &gpt.entries, device)?;
    write_at(file, backup_lba * SECTOR, &backup, device)?;
    // The protective MBR covers the whole (now larger) disk.
    let mut mbr = read_at(file, 0, SECTOR as usize, device)?;
    for i in 0..4 {
        let e = &mut mbr[446 + i * 16..446 + (i + 1) * 16];
        if e[4] == 0xEE {
            let size = u32::try_from(device_sectors - 1).unwrap_or(u32::MAX);
            e[12..16].copy_from_slice(&size.to_le_bytes());
        }
    }
    write_at(file, 0, &mbr, device)?;
    gpt.header = primary;
    Ok(first)
}

/// Metadata cleaning: zeroes the first and last MiB of the device and the first MiB of every
/// partition its table lists, which removes partition tables and filesystem signatures.
pub fn clean_metadata(file: &mut File, device: &str, device_bytes: u64) -> Result<(), DiskError> {
    let table = read_table(file, device).unwrap_or(Table::None);
    let zeros = vec![0u8; MIB as usize];
    let wipe = |file: &mut File, offset: u64| -> Result<(), DiskError> {
        let len = MIB.min(device_bytes.saturating_sub(offset));
        write_at(
            file,
            offset,
            &zeros[..usize::try_from(len).unwrap_or(0)],
            device,
        )
    };
    if let Table::Mbr(parts) | Table::Gpt(parts) = &table {
        for p in parts {
            if p.first * SECTOR < device_bytes {
                wipe(file, p.first * SECTOR)?;
            }
        }
    }
    wipe(file, 0)?;
    wipe(file, device_bytes.saturating_sub(MIB))?;
    file.sync_all().map_err(io("syncing", device))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn device(name: &str, gib: u64, rotational: bool) -> BlockDevice {
        BlockDevice {
            name: name.into(),
            size_bytes: gib << 30,
            model: Some(format!("Model {name}")),
            vendor: None,
            serial: Some(format!("S-{name}")),
            wwn: None,
            rotational,
            hctl: None,
        }
    }

    #[test]
    fn root_device_by_hints_or_the_smallest_big_enough_disk() {
        let disks = [
            device("sda", 100, true),
            device("sdb", 2, false),
            device("sdc", 20, false),
        ];
        assert_eq!(choose_root_device(&disks, None).unwrap().name, "sdc");
        let hints = RootDeviceHints {
            device_name: Some("/dev/sda".into()),
            ..Default::default()
        };
        assert_eq!(
            choose_root_device(&disks, Some(&hints)).unwrap().name,
            "sda"
        );
        let hints = RootDeviceHints {
            rotational: Some(false),
            ..Default::default()
        };
        assert_eq!(
            choose_root_device(&disks, Some(&hints)).unwrap().name,
            "sdb"
        );
        let hints = RootDeviceHints {
            min_size_gigabytes: Some(50),
            ..Default::default()
        };
        assert_eq!(
            choose_root_device(&disks, Some(&hints)).unwrap().name,
            "sda"
        );
        let hints = RootDeviceHints {
            serial_number: Some("S-nope".into()),
            ..Default::default()
        };
        let err = choose_root_device(&disks, Some(&hints))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no disk matches") && err.contains("sda (100 GiB)"),
            "{err}"
        );
    }

    fn sfdisk_json(path: &std::path::Path) -> serde_json::Value {
        let out = Command::new("sfdisk")
            .arg("--json")
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn verify(path: &std::path::Path) {
        let out = Command::new("sfdisk")
            .arg("--verify")
            .arg(path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("No errors detected"),
            "{text}"
        );
    }

    fn image_with(
        label: &str,
        image_mib: u64,
        device_mib: u64,
    ) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk");
        // The image's table is made for an image-sized disk, then the "device" is larger.
        let f = File::create(&path).unwrap();
        f.set_len(image_mib * MIB).unwrap();
        drop(f);
        let mut child = Command::new("sfdisk")
            .arg("--quiet")
            .arg(&path)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("label: {label}\n,16M,L\n").as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success());
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(device_mib * MIB)
            .unwrap();
        (dir, path)
    }

    #[test]
    fn mbr_and_gpt_get_a_config_drive_partition_at_the_device_end() {
        for label in ["dos", "gpt"] {
            let (_dir, path) = image_with(label, 32, 256);
            let mut file = File::options().read(true).write(true).open(&path).unwrap();
            let iso = vec![7u8; 3 * 1024 * 1024 + 5];
            let first = write_config_drive(&mut file, "disk", 256 * MIB, &iso).unwrap();
            drop(file);
            verify(&path);
            let table = sfdisk_json(&path);
            let parts = table["partitiontable"]["partitions"].as_array().unwrap();
            assert_eq!(parts.len(), 2, "{label}: {table}");
            let added = &parts[1];
            assert_eq!(added["start"].as_u64().unwrap(), first);
            assert_eq!(
                added["size"].as_u64().unwrap(),
                64 * MIB / SECTOR,
                "{label}"
            );
            assert_eq!(first % (MIB / SECTOR), 0);
            let data = std::fs::read(&path).unwrap();
            let at = usize::try_from(first * SECTOR).unwrap();
            assert_eq!(&data[at..at + iso.len()], &iso[..]);
            if label == "gpt" {
                assert_eq!(added["name"], "config-2");
                assert_eq!(
                    table["partitiontable"]["lastlba"].as_u64().unwrap(),
                    256 * MIB / SECTOR - 34
                );
            }
        }
    }

    #[test]
    fn metadata_cleaning_erases_the_tables() {
        for label in ["dos", "gpt"] {
            let (_dir, path) = image_with(label, 64, 64);
            let mut file = File::options().read(true).write(true).open(&path).unwrap();
            clean_metadata(&mut file, "disk", 64 * MIB).unwrap();
            assert_eq!(read_table(&mut file, "disk").unwrap(), Table::None);
            let out = Command::new("sfdisk")
                .arg("--json")
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                !out.status.success() || out.stdout.is_empty(),
                "{label}: a table survived"
            );
        }
    }
}
