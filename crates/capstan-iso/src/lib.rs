//! ISO 9660 images, written from a list of files: config drives (`config-2`) and bootable media.
//!
//! An image has a primary volume (names mangled to ISO 9660 level 1: upper case, 8.3, unique per
//! directory — what boot loaders such as ISOLINUX read) and a Joliet volume over the same files
//! with their real names (what Linux mounts, so `meta_data.json` stays `meta_data.json`). With
//! [`IsoImage::isolinux_boot`] it also carries an El Torito boot catalog with one no-emulation
//! entry, and the boot file gets ISOLINUX's boot information table.
//!
//! Output is deterministic: the same files give the same bytes (timestamps are fixed).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const SECTOR: usize = 2048;
/// Sectors before the first volume descriptor (the system area).
const SYSTEM_AREA: u32 = 16;
/// Recording time of every record: 2000-01-01 00:00:00 UTC, for reproducible images.
const RECORD_TIME: [u8; 7] = [100, 1, 1, 0, 0, 0, 0];
const VOLUME_TIME: &[u8; 16] = b"2000010100000000";

/// Why an image could not be described or written.
#[derive(Debug, thiserror::Error)]
pub enum IsoError {
    #[error("volume id {0:?} must be 1 to 32 characters of A-Z, a-z, 0-9, '_' or '-'")]
    VolumeId(String),
    #[error("path {0:?} must be relative, with non-empty components and no '.' or '..'")]
    Path(String),
    #[error("{0} is added twice")]
    Duplicate(String),
    #[error("{path} is both a file and a directory")]
    FileAndDirectory { path: String },
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is {size} bytes; an ISO 9660 file holds at most 4 GiB")]
    TooLarge { path: String, size: u64 },
    #[error("the boot image {0} is not among the files")]
    BootImageMissing(String),
    #[error("the boot image {0} is shorter than 64 bytes, too short for a boot information table")]
    BootImageTooShort(String),
    #[error("the image would exceed 8 TiB")]
    ImageTooLarge,
    #[error("writing the image")]
    Write(#[source] std::io::Error),
}

#[derive(Clone, Debug)]
enum Source {
    Bytes(Vec<u8>),
    File(PathBuf),
}

#[derive(Clone, Debug)]
struct Boot {
    image: String,
    catalog: String,
}

/// An ISO 9660 image being described.
#[derive(Clone, Debug)]
pub struct IsoImage {
    volume_id: String,
    files: BTreeMap<String, Source>,
    boot: Option<Boot>,
}

fn check_path(path: &str) -> Result<String, IsoError> {
    let trimmed = path.trim_start_matches('/');
    if trimmed.is_empty()
        || trimmed
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(IsoError::Path(path.to_owned()));
    }
    Ok(trimmed.to_owned())
}

impl IsoImage {
    /// An empty image with volume id (label) `volume_id`, e.g. `config-2`.
    pub fn new(volume_id: &str) -> Result<Self, IsoError> {
        if volume_id.is_empty()
            || volume_id.len() > 32
            || !volume_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(IsoError::VolumeId(volume_id.to_owned()));
        }
        Ok(Self {
            volume_id: volume_id.to_owned(),
            files: BTreeMap::new(),
            boot: None,
        })
    }

    fn insert(&mut self, path: &str, source: Source) -> Result<&mut Self, IsoError> {
        let path = check_path(path)?;
        if self.files.contains_key(&path) {
            return Err(IsoError::Duplicate(path));
        }
        let clash = self.files.keys().find(|existing| {
            existing.starts_with(&format!("{path}/")) || path.starts_with(&format!("{existing}/"))
        });
        if let Some(existing) = clash {
            return Err(IsoError::FileAndDirectory {
                path: existing.clone().min(path.clone()),
            });
        }
        self.files.insert(path, source);
        Ok(self)
    }

    /// Adds a file with `data` at `path` (`a/b/c.json`; directories are implied).
    pub fn add_bytes(
        &mut self,
        path: &str,
        data: impl Into<Vec<u8>>,
    ) -> Result<&mut Self, IsoError> {
        self.insert(path, Source::Bytes(data.into()))
    }

    /// Adds a file whose content is read from `source` when the image is written.
    pub fn add_file(&mut self, path: &str, source: &Path) -> Result<&mut Self, IsoError> {
        self.insert(path, Source::File(source.to_owned()))
    }

    /// Makes the image bootable with ISOLINUX: `boot_image` (an added file, normally
    /// `isolinux/isolinux.bin`) is loaded with no emulation, and a boot catalog is written at
    /// `catalog`.
    pub fn isolinux_boot(
        &mut self,
        boot_image: &str,
        catalog: &str,
    ) -> Result<&mut Self, IsoError> {
        let image = check_path(boot_image)?;
        let catalog = check_path(catalog)?;
        if self.files.contains_key(&catalog) {
            return Err(IsoError::Duplicate(catalog));
        }
        self.boot = Some(Boot { image, catalog });
        Ok(self)
    }

    /// The whole image in memory.
    pub fn to_vec(&self) -> Result<Vec<u8>, IsoError> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Writes the image; returns the number of bytes written.
    pub fn write_to(&self, out: &mut impl Write) -> Result<u64, IsoError> {
        let layout = Layout::plan(self)?;
        layout.write(self, out)
    }
}

// ---- layout ---------------------------------------------------------------------------------------

/// A directory of the tree, in both namings.
#[derive(Debug, Default)]
struct Dir {
    /// Index of the parent directory (the root is its own parent).
    parent: usize,
    /// The directory's own name (empty for the root).
    name: String,
    /// Its primary (mangled) name.
    primary: String,
    /// Child directories and files, by real name: `(name, Entry)`.
    entries: BTreeMap<String, Entry>,
    /// Sector of its primary and Joliet records, and their sizes in bytes.
    primary_lba: u32,
    primary_size: u32,
    joliet_lba: u32,
    joliet_size: u32,
}

#[derive(Debug, Clone)]
enum Entry {
    Dir(usize),
    File(usize),
}

#[derive(Debug)]
struct FileSlot {
    path: String,
    primary: String,
    size: u32,
    lba: u32,
}

struct Layout {
    dirs: Vec<Dir>,
    files: Vec<FileSlot>,
    /// Directory indices in path-table order (breadth first, by parent then name).
    order: Vec<usize>,
    primary_path_table: (u32, u32, u32),
    joliet_path_table: (u32, u32, u32),
    catalog_lba: Option<u32>,
    boot_file: Option<usize>,
    total_sectors: u32,
}

fn sectors(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(SECTOR as u64)).unwrap_or(u32::MAX)
}

/// An ISO 9660 level 1 name (`NAME.EXT`, upper case, d-characters), unique among `taken`.
fn mangle(name: &str, is_dir: bool, taken: &mut Vec<String>) -> String {
    let clean = |s: &str, max: usize| -> String {
        s.chars()
            .map(|c| {
                let c = c.to_ascii_uppercase();
                if c.is_ascii_uppercase() || c.is_ascii_digit() {
                    c
                } else {
                    '_'
                }
            })
            .take(max)
            .collect()
    };
    let (stem, ext) = match name.rsplit_once('.') {
        Some((stem, ext)) if !is_dir && !stem.is_empty() => (stem, ext),
        _ => (name, ""),
    };
    let stem = clean(stem, 8);
    let ext = clean(ext, 3);
    let build = |stem: &str| {
        if is_dir || ext.is_empty() {
            stem.to_owned()
        } else {
            format!("{stem}.{ext}")
        }
    };
    let mut candidate = build(&stem);
    let mut n = 1u32;
    while taken.contains(&candidate) {
        let suffix = format!("~{n}");
        let keep = 8usize.saturating_sub(suffix.len()).min(stem.len());
        candidate = build(&format!("{}{suffix}", &stem[..keep]));
        n += 1;
    }
    taken.push(candidate.clone());
    candidate
}

fn joliet_name(name: &str) -> Vec<u8> {
    // Joliet allows 64 UCS-2 characters; longer names are cut, as mkisofs does.
    name.encode_utf16()
        .take(64)
        .flat_map(u16::to_be_bytes)
        .collect()
}

/// Size of a directory record with a name of `name_len` bytes.
fn record_len(name_len: usize) -> usize {
    let len = 33 + name_len;
    len + (len % 2)
}

/// Bytes a directory's records take (records never cross a sector boundary).
fn dir_bytes(names: impl Iterator<Item = usize>) -> u32 {
    let mut used = 0usize;
    // "." and "..".
    for len in [record_len(1), record_len(1)]
        .into_iter()
        .chain(names.map(record_len))
    {
        let offset = used % SECTOR;
        if offset + len > SECTOR {
            used += SECTOR - offset;
        }
        used += len;
    }
    u32::try_from(used.div_ceil(SECTOR) * SECTOR).unwrap_or(u32::MAX)
}

fn path_table_len(names: impl Iterator<Item = usize>) -> u32 {
    let total: usize = names.map(|n| 8 + n + (n % 2)).sum();
    u32::try_from(total).unwrap_or(u32::MAX)
}

impl Layout {
    fn plan(image: &IsoImage) -> Result<Self, IsoError> {
        let mut dirs = vec![Dir::default()];
        let mut files = Vec::new();
        for (path, source) in &image.files {
            let size = match source {
                Source::Bytes(b) => b.len() as u64,
                Source::File(p) => std::fs::metadata(p)
                    .map_err(|source| IsoError::Read {
                        path: p.clone(),
                        source,
                    })?
                    .len(),
            };
            let size = u32::try_from(size).map_err(|_| IsoError::TooLarge {
                path: path.clone(),
                size,
            })?;
            let components: Vec<&str> = path.split('/').collect();
            let mut dir = 0usize;
            for component in &components[..components.len() - 1] {
                dir = match dirs[dir].entries.get(*component) {
                    Some(Entry::Dir(d)) => *d,
                    Some(Entry::File(_)) => {
                        return Err(IsoError::FileAndDirectory { path: path.clone() });
                    }
                    None => {
                        let index = dirs.len();
                        dirs.push(Dir {
                            parent: dir,
                            name: (*component).to_owned(),
                            ..Dir::default()
                        });
                        dirs[dir]
                            .entries
                            .insert((*component).to_owned(), Entry::Dir(index));
                        index
                    }
                };
            }
            let name = components[components.len() - 1].to_owned();
            dirs[dir].entries.insert(name, Entry::File(files.len()));
            files.push(FileSlot {
                path: path.clone(),
                primary: String::new(),
                size,
                lba: 0,
            });
        }
        let catalog_entry = image.boot.as_ref().map(|boot| boot.catalog.clone());
        // The catalog is a file of its own in the tree (so tools can find it), one sector long.
        let mut catalog_file = None;
        if let Some(catalog) = &catalog_entry {
            let components: Vec<&str> = catalog.split('/').collect();
            let mut dir = 0usize;
            for component in &components[..components.len() - 1] {
                dir = match dirs[dir].entries.get(*component) {
                    Some(Entry::Dir(d)) => *d,
                    Some(Entry::File(_)) => {
                        return Err(IsoError::FileAndDirectory {
                            path: catalog.clone(),
                        });
                    }
                    None => {
                        let index = dirs.len();
                        dirs.push(Dir {
                            parent: dir,
                            name: (*component).to_owned(),
                            ..Dir::default()
                        });
                        dirs[dir]
                            .entries
                            .insert((*component).to_owned(), Entry::Dir(index));
                        index
                    }
                };
            }
            catalog_file = Some(files.len());
            dirs[dir].entries.insert(
                components[components.len() - 1].to_owned(),
                Entry::File(files.len()),
            );
            files.push(FileSlot {
                path: catalog.clone(),
                primary: String::new(),
                size: u32::try_from(SECTOR).unwrap_or(2048),
                lba: 0,
            });
        }
        let boot_file = match &image.boot {
            Some(boot) => {
                let index = files
                    .iter()
                    .position(|f| f.path == boot.image)
                    .ok_or_else(|| IsoError::BootImageMissing(boot.image.clone()))?;
                if files[index].size < 64 {
                    return Err(IsoError::BootImageTooShort(boot.image.clone()));
                }
                Some(index)
            }
            None => None,
        };
        // Primary names, unique per directory.
        for d in 0..dirs.len() {
            let mut taken = Vec::new();
            let entries: Vec<(String, Entry)> = dirs[d]
                .entries
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (name, entry) in entries {
                match entry {
                    Entry::Dir(child) => dirs[child].primary = mangle(&name, true, &mut taken),
                    Entry::File(f) => {
                        files[f].primary = format!("{};1", mangle(&name, false, &mut taken));
                    }
                }
            }
        }
        // Path-table order: breadth first, children sorted by primary name.
        let mut order = vec![0usize];
        let mut i = 0;
        while i < order.len() {
            let mut children: Vec<usize> = dirs[order[i]]
                .entries
                .values()
                .filter_map(|e| match e {
                    Entry::Dir(d) => Some(*d),
                    Entry::File(_) => None,
                })
                .collect();
            children.sort_by(|a, b| dirs[*a].primary.cmp(&dirs[*b].primary));
            order.extend(children);
            i += 1;
        }
        // Sizes of directories.
        for d in 0..dirs.len() {
            let primary_names: Vec<usize> = dirs[d]
                .entries
                .values()
                .map(|e| match e {
                    Entry::Dir(c) => dirs[*c].primary.len(),
                    Entry::File(f) => files[*f].primary.len(),
                })
                .collect();
            let joliet_names: Vec<usize> = dirs[d]
                .entries
                .keys()
                .map(|n| joliet_name(n).len())
                .collect();
            dirs[d].primary_size = dir_bytes(primary_names.into_iter());
            dirs[d].joliet_size = dir_bytes(joliet_names.into_iter());
        }
        // Sectors: system area, PVD, [boot record], Joliet SVD, terminator.
        let mut next = SYSTEM_AREA + 3 + u32::from(image.boot.is_some());
        let primary_pt_len = path_table_len(
            order
                .iter()
                .map(|d| if *d == 0 { 1 } else { dirs[*d].primary.len() }),
        );
        let joliet_pt_len = path_table_len(order.iter().map(|d| {
            if *d == 0 {
                1
            } else {
                joliet_name(&dirs[*d].name).len()
            }
        }));
        let table = |len: u32, next: &mut u32| {
            let l = *next;
            *next += sectors(u64::from(len));
            let m = *next;
            *next += sectors(u64::from(len));
            (len, l, m)
        };
        let primary_path_table = table(primary_pt_len, &mut next);
        let joliet_path_table = table(joliet_pt_len, &mut next);
        for d in &order {
            dirs[*d].primary_lba = next;
            next += dirs[*d].primary_size / 2048;
        }
        for d in &order {
            dirs[*d].joliet_lba = next;
            next += dirs[*d].joliet_size / 2048;
        }
        let mut catalog_lba = None;
        for (index, file) in files.iter_mut().enumerate() {
            file.lba = next;
            if Some(index) == catalog_file {
                catalog_lba = Some(next);
            }
            // Empty files still get a distinct (unused) sector number of zero length.
            next = next
                .checked_add(sectors(u64::from(file.size)))
                .ok_or(IsoError::ImageTooLarge)?;
        }
        Ok(Self {
            dirs,
            files,
            order,
            primary_path_table,
            joliet_path_table,
            catalog_lba,
            boot_file,
            total_sectors: next,
        })
    }

    fn write(&self, image: &IsoImage, out: &mut impl Write) -> Result<u64, IsoError> {
        let mut w = Writer { out, written: 0 };
        w.zeros(SYSTEM_AREA as usize * SECTOR)?;
        w.bytes(&self.volume_descriptor(image, false))?;
        if let Some(catalog) = self.catalog_lba {
            let mut boot = vec![0u8; SECTOR];
            boot[0] = 0;
            boot[1..6].copy_from_slice(b"CD001");
            boot[6] = 1;
            boot[7..7 + 23].copy_from_slice(b"EL TORITO SPECIFICATION");
            boot[71..75].copy_from_slice(&catalog.to_le_bytes());
            w.bytes(&boot)?;
        }
        w.bytes(&self.volume_descriptor(image, true))?;
        let mut terminator = vec![0u8; SECTOR];
        terminator[0] = 255;
        terminator[1..6].copy_from_slice(b"CD001");
        terminator[6] = 1;
        w.bytes(&terminator)?;
        for joliet in [false, true] {
            let (len, _, _) = if joliet {
                self.joliet_path_table
            } else {
                self.primary_path_table
            };
            for big_endian in [false, true] {
                let table = self.path_table(joliet, big_endian);
                debug_assert_eq!(table.len(), len as usize);
                w.padded(&table)?;
            }
        }
        for joliet in [false, true] {
            for d in &self.order {
                w.bytes(&self.directory(*d, joliet))?;
            }
        }
        for (index, file) in self.files.iter().enumerate() {
            if Some(file.lba) == self.catalog_lba && file.size as usize == SECTOR {
                w.bytes(&self.boot_catalog())?;
                continue;
            }
            let mut data = match image.files.get(&file.path) {
                Some(Source::Bytes(b)) => b.clone(),
                Some(Source::File(p)) => {
                    let mut data = Vec::with_capacity(file.size as usize);
                    std::fs::File::open(p)
                        .and_then(|mut f| f.read_to_end(&mut data))
                        .map_err(|source| IsoError::Read {
                            path: p.clone(),
                            source,
                        })?;
                    data
                }
                None => Vec::new(),
            };
            // A file that changed size since the plan would corrupt every later extent.
            data.resize(file.size as usize, 0);
            if Some(index) == self.boot_file {
                boot_info_table(&mut data, file.lba);
            }
            w.padded(&data)?;
        }
        Ok(w.written)
    }

    fn volume_descriptor(&self, image: &IsoImage, joliet: bool) -> Vec<u8> {
        let mut d = vec![0u8; SECTOR];
        d[0] = if joliet { 2 } else { 1 };
        d[1..6].copy_from_slice(b"CD001");
        d[6] = 1;
        let text = |d: &mut [u8], at: usize, len: usize, value: &str| {
            if joliet {
                let mut encoded = joliet_name(value);
                encoded.resize(len, 0);
                for pair in encoded
                    .chunks_exact_mut(2)
                    .skip(value.encode_utf16().count())
                {
                    pair.copy_from_slice(&[0, b' ']);
                }
                d[at..at + len].copy_from_slice(&encoded);
            } else {
                let mut padded = value.as_bytes().to_vec();
                padded.resize(len, b' ');
                d[at..at + len].copy_from_slice(&padded[..len]);
            }
        };
        text(&mut d, 8, 32, "LINUX");
        text(&mut d, 40, 32, &image.volume_id);
        both32(&mut d[80..88], self.total_sectors);
        if joliet {
            // UCS-2 level 3.
            d[88..91].copy_from_slice(b"%/E");
        }
        both16(&mut d[120..124], 1);
        both16(&mut d[124..128], 1);
        both16(&mut d[128..132], 2048);
        let (len, l, m) = if joliet {
            self.joliet_path_table
        } else {
            self.primary_path_table
        };
        both32(&mut d[132..140], len);
        d[140..144].copy_from_slice(&l.to_le_bytes());
        d[148..152].copy_from_slice(&m.to_be_bytes());
        let root = &self.dirs[0];
        let (lba, size) = if joliet {
            (root.joliet_lba, root.joliet_size)
        } else {
            (root.primary_lba, root.primary_size)
        };
        d[156..190].copy_from_slice(&record(lba, size, true, &[0]));
        for (at, len) in [(190, 128), (318, 128), (446, 128)] {
            text(&mut d, at, len, "");
        }
        text(&mut d, 574, 128, "CAPSTAN");
        for (at, len) in [(702, 37), (739, 37), (776, 37)] {
            text(&mut d, at, len, "");
        }
        for at in [813, 830, 864] {
            d[at..at + 16].copy_from_slice(VOLUME_TIME);
        }
        // No expiration date: all zero digits.
        d[847..863].copy_from_slice(b"0000000000000000");
        d[881] = 1;
        d
    }

    fn name_bytes(&self, d: usize, joliet: bool) -> Vec<u8> {
        if d == 0 {
            vec![0]
        } else if joliet {
            joliet_name(&self.dirs[d].name)
        } else {
            self.dirs[d].primary.as_bytes().to_vec()
        }
    }

    fn path_table(&self, joliet: bool, big_endian: bool) -> Vec<u8> {
        let mut table = Vec::new();
        let number = |d: usize| {
            u16::try_from(self.order.iter().position(|o| *o == d).unwrap_or(0) + 1)
                .unwrap_or(u16::MAX)
        };
        for d in &self.order {
            let name = self.name_bytes(*d, joliet);
            let dir = &self.dirs[*d];
            let lba = if joliet {
                dir.joliet_lba
            } else {
                dir.primary_lba
            };
            table.push(u8::try_from(name.len()).unwrap_or(0));
            table.push(0);
            table.extend(if big_endian {
                lba.to_be_bytes()
            } else {
                lba.to_le_bytes()
            });
            let parent = number(dir.parent);
            table.extend(if big_endian {
                parent.to_be_bytes()
            } else {
                parent.to_le_bytes()
            });
            table.extend(&name);
            if name.len() % 2 == 1 {
                table.push(0);
            }
        }
        table
    }

    fn directory(&self, d: usize, joliet: bool) -> Vec<u8> {
        let dir = &self.dirs[d];
        let parent = &self.dirs[dir.parent];
        let (lba, size, parent_lba, parent_size) = if joliet {
            (
                dir.joliet_lba,
                dir.joliet_size,
                parent.joliet_lba,
                parent.joliet_size,
            )
        } else {
            (
                dir.primary_lba,
                dir.primary_size,
                parent.primary_lba,
                parent.primary_size,
            )
        };
        let mut records = vec![
            record(lba, size, true, &[0]),
            record(parent_lba, parent_size, true, &[1]),
        ];
        let mut children: Vec<(Vec<u8>, Vec<u8>)> = dir
            .entries
            .iter()
            .map(|(name, entry)| {
                let (key, rec) = match entry {
                    Entry::Dir(c) => {
                        let child = &self.dirs[*c];
                        let name = if joliet {
                            joliet_name(name)
                        } else {
                            child.primary.as_bytes().to_vec()
                        };
                        let (l, s) = if joliet {
                            (child.joliet_lba, child.joliet_size)
                        } else {
                            (child.primary_lba, child.primary_size)
                        };
                        (name.clone(), record(l, s, true, &name))
                    }
                    Entry::File(f) => {
                        let file = &self.files[*f];
                        let name = if joliet {
                            joliet_name(name)
                        } else {
                            file.primary.as_bytes().to_vec()
                        };
                        (name.clone(), record(file.lba, file.size, false, &name))
                    }
                };
                (key, rec)
            })
            .collect();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        records.extend(children.into_iter().map(|(_, r)| r));
        let mut out = Vec::with_capacity(size as usize);
        for rec in records {
            let offset = out.len() % SECTOR;
            if offset + rec.len() > SECTOR {
                out.resize(out.len() + SECTOR - offset, 0);
            }
            out.extend(rec);
        }
        out.resize(size as usize, 0);
        out
    }

    fn boot_catalog(&self) -> Vec<u8> {
        let mut c = vec![0u8; SECTOR];
        // Validation entry: header, x86, id string, checksum, key bytes.
        c[0] = 1;
        c[1] = 0;
        c[4..4 + 7].copy_from_slice(b"CAPSTAN");
        c[30] = 0x55;
        c[31] = 0xAA;
        let sum = c[..32].chunks(2).fold(0u16, |acc, w| {
            acc.wrapping_add(u16::from_le_bytes([w[0], w[1]]))
        });
        c[28..30].copy_from_slice(&0u16.wrapping_sub(sum).to_le_bytes());
        // Default entry: bootable, no emulation, default segment, 4 virtual sectors.
        c[32] = 0x88;
        c[33] = 0;
        c[38..40].copy_from_slice(&4u16.to_le_bytes());
        if let Some(boot) = self.boot_file {
            c[40..44].copy_from_slice(&self.files[boot].lba.to_le_bytes());
        }
        c
    }
}

/// ISOLINUX's boot information table at offset 8 of the boot file: where the PVD is, where the
/// file is, its length, and a checksum of everything after the table's 64-byte window.
fn boot_info_table(data: &mut [u8], lba: u32) {
    let length = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let checksum = data[64..]
        .chunks(4)
        .map(|w| {
            let mut word = [0u8; 4];
            word[..w.len()].copy_from_slice(w);
            u32::from_le_bytes(word)
        })
        .fold(0u32, u32::wrapping_add);
    data[8..12].copy_from_slice(&SYSTEM_AREA.to_le_bytes());
    data[12..16].copy_from_slice(&lba.to_le_bytes());
    data[16..20].copy_from_slice(&length.to_le_bytes());
    data[20..24].copy_from_slice(&checksum.to_le_bytes());
    data[24..64].fill(0);
}

fn both16(at: &mut [u8], value: u16) {
    at[..2].copy_from_slice(&value.to_le_bytes());
    at[2..4].copy_from_slice(&value.to_be_bytes());
}

fn both32(at: &mut [u8], value: u32) {
    at[..4].copy_from_slice(&value.to_le_bytes());
    at[4..8].copy_from_slice(&value.to_be_bytes());
}

fn record(lba: u32, size: u32, is_dir: bool, name: &[u8]) -> Vec<u8> {
    let len = record_len(name.len());
    let mut r = vec![0u8; len];
    r[0] = u8::try_from(len).unwrap_or(u8::MAX);
    both32(&mut r[2..10], lba);
    both32(&mut r[10..18], size);
    r[18..25].copy_from_slice(&RECORD_TIME);
    r[25] = if is_dir { 2 } else { 0 };
    both16(&mut r[28..32], 1);
    r[32] = u8::try_from(name.len()).unwrap_or(u8::MAX);
    r[33..33 + name.len()].copy_from_slice(name);
    r
}

struct Writer<'a, W: Write> {
    out: &'a mut W,
    written: u64,
}

impl<W: Write> Writer<'_, W> {
    fn bytes(&mut self, data: &[u8]) -> Result<(), IsoError> {
        self.out.write_all(data).map_err(IsoError::Write)?;
        self.written += data.len() as u64;
        Ok(())
    }

    fn zeros(&mut self, count: usize) -> Result<(), IsoError> {
        self.bytes(&vec![0u8; count])
    }

    /// Writes `data` and pads it to a whole sector.
    fn padded(&mut self, data: &[u8]) -> Result<(), IsoError> {
        self.bytes(data)?;
        let rest = data.len() % SECTOR;
        if rest != 0 {
            self.zeros(SECTOR - rest)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_mangled_to_unique_level_one_names() {
        let mut taken = Vec::new();
        assert_eq!(mangle("meta_data.json", false, &mut taken), "META_DAT.JSO");
        assert_eq!(mangle("meta_data.jsonx", false, &mut taken), "META_D~1.JSO");
        assert_eq!(mangle("isolinux", true, &mut taken), "ISOLINUX");
        assert_eq!(mangle("ldlinux.c32", false, &mut taken), "LDLINUX.C32");
        assert_eq!(mangle("user_data", false, &mut taken), "USER_DAT");
    }

    #[test]
    fn bad_input_is_refused_with_the_reason() {
        assert!(matches!(
            IsoImage::new("has space"),
            Err(IsoError::VolumeId(_))
        ));
        assert!(matches!(IsoImage::new(""), Err(IsoError::VolumeId(_))));
        let mut iso = IsoImage::new("config-2").unwrap();
        iso.add_bytes("a/b", b"x".to_vec()).unwrap();
        assert!(matches!(
            iso.add_bytes("a/b", b"y".to_vec()),
            Err(IsoError::Duplicate(_))
        ));
        assert!(matches!(
            iso.add_bytes("a/b/c", b"y".to_vec()),
            Err(IsoError::FileAndDirectory { .. })
        ));
        assert!(matches!(
            iso.add_bytes("a/../c", b"y".to_vec()),
            Err(IsoError::Path(_))
        ));
        iso.isolinux_boot("missing.bin", "boot.cat").unwrap();
        assert!(matches!(iso.to_vec(), Err(IsoError::BootImageMissing(_))));
    }

    #[test]
    fn images_are_deterministic_and_sector_aligned() {
        let mut iso = IsoImage::new("config-2").unwrap();
        iso.add_bytes("openstack/latest/meta_data.json", b"{}".to_vec())
            .unwrap();
        let a = iso.to_vec().unwrap();
        let b = iso.to_vec().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len() % SECTOR, 0);
        assert_eq!(&a[16 * SECTOR + 1..16 * SECTOR + 6], b"CD001");
        assert_eq!(&a[16 * SECTOR + 40..16 * SECTOR + 48], b"config-2");
    }

    #[test]
    fn the_boot_info_table_sums_the_file_after_its_window() {
        let mut data = vec![0u8; 128];
        data[64] = 1;
        data[68] = 2;
        data[127] = 1;
        boot_info_table(&mut data, 40);
        assert_eq!(u32::from_le_bytes(data[8..12].try_into().unwrap()), 16);
        assert_eq!(u32::from_le_bytes(data[12..16].try_into().unwrap()), 40);
        assert_eq!(u32::from_le_bytes(data[16..20].try_into().unwrap()), 128);
        assert_eq!(
            u32::from_le_bytes(data[20..24].try_into().unwrap()),
            1 + 2 + (1 << 24)
        );
    }
}
