//! What a bundle holds (`manifest.json`) and its checksums (`SHA256SUMS`, in `sha256sum -c` format so
//! that a person can check a copy with coreutils alone before trusting any of it).

use crate::{BundleError, io, sha256_file};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The bundle format this build writes and reads.
pub const FORMAT: u32 = 1;

/// `manifest.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: u32,
    /// The top directory of the archive, `capstan-bundle-VERSION`.
    pub name: String,
    /// The capstan package's version (`0.1.0+git20261201.3f2a9c1d8e7b`).
    pub capstan_version: String,
    /// When the bundle was made (RFC 3339).
    pub created: String,
    /// Every package in `debs/`, capstan's first.
    pub packages: Vec<Package>,
    /// The ramdisk's own manifest (kernel package and version, the agent's sha256), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramdisk: Option<capstan_ramdisk::Manifest>,
    #[serde(default)]
    pub images: Vec<File>,
    #[serde(default)]
    pub crds: Vec<File>,
    #[serde(default)]
    pub manifests: Vec<File>,
}

/// One Debian package of the bundle.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    pub name: String,
    pub version: String,
    pub architecture: String,
    /// Its path in the bundle (`debs/NAME_VERSION_ARCH.deb`).
    pub file: String,
    pub sha256: String,
    pub bytes: u64,
}

/// One file of the bundle.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct File {
    /// Its path in the bundle.
    pub file: String,
    pub sha256: String,
    pub bytes: u64,
}

/// Reads `SHA256SUMS` text: relative path → sha256.
pub fn parse_sums(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut sums = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        // `HASH  PATH` (text mode) or `HASH *PATH` (binary mode), as sha256sum writes them.
        let (hash, path) = line
            .split_once("  ")
            .or_else(|| line.split_once(" *"))
            .ok_or_else(|| format!("SHA256SUMS line {}: not `HASH  PATH`", number + 1))?;
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("SHA256SUMS line {}: not a sha256", number + 1));
        }
        sums.insert(path.to_owned(), hash.to_ascii_lowercase());
    }
    Ok(sums)
}

/// Writes `SHA256SUMS` text.
pub fn format_sums(sums: &BTreeMap<String, String>) -> String {
    sums.iter()
        .map(|(path, hash)| format!("{hash}  {path}\n"))
        .collect()
}

/// Checks every file under `root` against its `SHA256SUMS`, and that nothing is listed that is
/// missing or present that is not listed (a file slipped into a copy is as suspect as a changed one).
pub fn verify(root: &Path) -> Result<(), BundleError> {
    let sums_path = root.join("SHA256SUMS");
    let text = std::fs::read_to_string(&sums_path).map_err(|e| BundleError::NotABundle {
        path: root.to_owned(),
        why: format!("no readable SHA256SUMS ({e})"),
    })?;
    let sums = parse_sums(&text).map_err(|why| BundleError::NotABundle {
        path: root.to_owned(),
        why,
    })?;
    for (file, expected) in &sums {
        let path = root.join(file);
        if !path.is_file() {
            return Err(BundleError::NotABundle {
                path: root.to_owned(),
                why: format!("{file}, listed in SHA256SUMS, is missing"),
            });
        }
        let (found, _) = sha256_file(&path)?;
        if &found != expected {
            return Err(BundleError::Checksum {
                file: file.clone(),
                expected: expected.clone(),
                found,
            });
        }
    }
    for file in files_under(root)? {
        if file != "SHA256SUMS" && !sums.contains_key(&file) {
            return Err(BundleError::NotABundle {
                path: root.to_owned(),
                why: format!("{file} is not listed in SHA256SUMS"),
            });
        }
    }
    Ok(())
}

/// Every regular file under `root`, as `/`-separated relative paths, sorted.
pub(crate) fn files_under(root: &Path) -> Result<Vec<String>, BundleError> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io("reading", &dir))? {
            let entry = entry.map_err(io("reading", &dir))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(io("reading", &path))?;
            if kind.is_dir() {
                pending.push(path);
            } else if let Ok(relative) = path.strip_prefix(root) {
                files.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Reads `manifest.json` of an unpacked bundle.
pub fn read(root: &Path) -> Result<Manifest, BundleError> {
    let path = root.join("manifest.json");
    let text = std::fs::read(&path).map_err(|e| BundleError::NotABundle {
        path: root.to_owned(),
        why: format!("no readable manifest.json ({e})"),
    })?;
    let manifest: Manifest =
        serde_json::from_slice(&text).map_err(|source| BundleError::Manifest {
            path: root.to_owned(),
            source,
        })?;
    if manifest.format != FORMAT {
        return Err(BundleError::NotABundle {
            path: root.to_owned(),
            why: format!(
                "its format is {}, this capstan reads format {FORMAT}: use the capstan of the bundle",
                manifest.format
            ),
        });
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sums_round_trip_and_refuse_what_sha256sum_would_not_write() {
        let mut sums = BTreeMap::new();
        sums.insert("debs/a.deb".to_owned(), "ab".repeat(32));
        sums.insert("install".to_owned(), "0f".repeat(32));
        assert_eq!(parse_sums(&format_sums(&sums)).unwrap(), sums);
        assert!(parse_sums("xyz  file\n").unwrap_err().contains("line 1"));
        assert!(
            parse_sums(&format!("{}\n", "ab".repeat(32)))
                .unwrap_err()
                .contains("HASH  PATH")
        );
    }

    #[test]
    fn verify_finds_a_changed_a_missing_and_an_unlisted_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("debs")).unwrap();
        std::fs::write(root.join("debs/a.deb"), b"package").unwrap();
        let mut sums = BTreeMap::new();
        sums.insert(
            "debs/a.deb".to_owned(),
            sha256_file(&root.join("debs/a.deb")).unwrap().0,
        );
        std::fs::write(root.join("SHA256SUMS"), format_sums(&sums)).unwrap();
        verify(root).unwrap();

        std::fs::write(root.join("extra"), b"x").unwrap();
        let err = verify(root).unwrap_err().to_string();
        assert!(err.contains("extra is not listed"), "{err}");
        std::fs::remove_file(root.join("extra")).unwrap();

        std::fs::write(root.join("debs/a.deb"), b"changed").unwrap();
        let err = verify(root).unwrap_err().to_string();
        assert!(
            err.contains("debs/a.deb in the bundle does not match"),
            "{err}"
        );

        std::fs::remove_file(root.join("debs/a.deb")).unwrap();
        let err = verify(root).unwrap_err().to_string();
        assert!(err.contains("is missing"), "{err}");
    }
}
