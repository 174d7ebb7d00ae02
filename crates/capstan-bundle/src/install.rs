//! Installs a bundle's parts where `capstan serve` finds them: unpacks the archive (when given
//! one), verifies every file, then replaces the data directory's `ramdisk/` and adds its images,
//! CRDs and manifests, owned by the service's user. The package itself is installed before this
//! runs (the bundle's `install` bootstrapper does it with apt, from the bundle alone).
//!
//! Each part is written beside its place and renamed into it, so an interrupted install leaves
//! the old part or the new one, never half of one; running it again finishes the job.

use crate::manifest::{self, Manifest};
use crate::{BundleError, io, run};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where and how to install.
#[derive(Clone, Debug)]
pub struct InstallOptions {
    /// `capstan serve`'s data directory (the package's service uses `/var/lib/capstan`).
    pub data_dir: PathBuf,
    /// The user and group that own what is installed (the package's service user, `capstan`),
    /// when that user exists; `None` leaves the files to the caller.
    pub owner: Option<String>,
}

/// What an install put where.
#[derive(Clone, Debug)]
pub struct Installed {
    pub manifest: Manifest,
    /// The unpacked bundle (the archive's top directory, or the directory given).
    pub root: PathBuf,
    pub ramdisk: Option<PathBuf>,
    pub images: Vec<PathBuf>,
    pub crds: Vec<PathBuf>,
    pub manifests: Vec<PathBuf>,
}

/// Unpacks `archive` into `into` (refusing entries outside it), returning the bundle's top
/// directory.
pub fn unpack(archive: &Path, into: &Path) -> Result<PathBuf, BundleError> {
    std::fs::create_dir_all(into).map_err(io("creating", into))?;
    let file = std::fs::File::open(archive).map_err(io("reading", archive))?;
    let mut reader = tar::Archive::new(std::io::BufReader::new(file));
    let mut top: Option<PathBuf> = None;
    for entry in reader.entries().map_err(io("reading", archive))? {
        let mut entry = entry.map_err(io("reading", archive))?;
        let path = entry.path().map_err(io("reading", archive))?.into_owned();
        let first = path
            .components()
            .next()
            .map(|c| PathBuf::from(c.as_os_str()));
        match (&top, first) {
            (None, Some(first)) => top = Some(first),
            (Some(top), Some(first)) if *top == first => {}
            _ => {
                return Err(BundleError::NotABundle {
                    path: archive.to_owned(),
                    why: format!(
                        "{} is outside the bundle's one top directory",
                        path.display()
                    ),
                });
            }
        }
        // unpack_in refuses `..` and absolute paths: nothing lands outside `into`.
        let inside = entry.unpack_in(into).map_err(io("unpacking", archive))?;
        if !inside {
            return Err(BundleError::NotABundle {
                path: archive.to_owned(),
                why: format!("{} points outside the bundle", path.display()),
            });
        }
    }
    top.map(|t| into.join(t))
        .ok_or_else(|| BundleError::NotABundle {
            path: archive.to_owned(),
            why: "the archive is empty".into(),
        })
}

/// Copies the tree `from` to `to` through `to.partial`, then swaps it in.
fn replace_dir(from: &Path, to: &Path) -> Result<(), BundleError> {
    let partial = to.with_extension("partial");
    let old = to.with_extension("old");
    let _ = std::fs::remove_dir_all(&partial);
    let _ = std::fs::remove_dir_all(&old);
    std::fs::create_dir_all(&partial).map_err(io("creating", &partial))?;
    for relative in manifest::files_under(from)? {
        let target = partial.join(&relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        std::fs::copy(from.join(&relative), &target).map_err(io("copying", &target))?;
    }
    if to.exists() {
        std::fs::rename(to, &old).map_err(io("moving aside", to))?;
    }
    std::fs::rename(&partial, to).map_err(io("renaming", &partial))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// Copies one file to `to` through `to.partial`.
fn replace_file(from: &Path, to: &Path) -> Result<(), BundleError> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    let mut partial = to.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::copy(from, &partial).map_err(io("copying", &partial))?;
    std::fs::rename(&partial, to).map_err(io("renaming", &partial))
}

/// Installs the bundle at `source` (an archive, or the directory it unpacks to).
pub fn install(
    source: &Path,
    options: &InstallOptions,
    progress: &dyn Fn(&str),
) -> Result<Installed, BundleError> {
    let root = if source.is_dir() {
        source.to_owned()
    } else {
        let into = options.data_dir.join("bundles");
        progress(&format!(
            "unpacking {} into {}",
            source.display(),
            into.display()
        ));
        unpack(source, &into)?
    };
    progress("checking every file against SHA256SUMS");
    manifest::verify(&root)?;
    let manifest = manifest::read(&root)?;
    std::fs::create_dir_all(&options.data_dir).map_err(io("creating", &options.data_dir))?;

    let mut installed = Installed {
        manifest: manifest.clone(),
        root: root.clone(),
        ramdisk: None,
        images: Vec::new(),
        crds: Vec::new(),
        manifests: Vec::new(),
    };
    let ramdisk = root.join("ramdisk");
    if ramdisk.is_dir() {
        let to = options.data_dir.join("ramdisk");
        progress(&format!("ramdisk → {}", to.display()));
        replace_dir(&ramdisk, &to)?;
        capstan_ramdisk::Ramdisk::open(&to)?;
        installed.ramdisk = Some(to);
    }
    let groups: [(&str, &[manifest::File], &str); 3] = [
        ("images", &manifest.images, "images"),
        ("crds", &manifest.crds, "bundle/crds"),
        ("manifests", &manifest.manifests, "bundle/manifests"),
    ];
    for (kind, files, place) in groups {
        for file in files {
            let from = root.join(&file.file);
            let name = from
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let to = options.data_dir.join(place).join(&name);
            progress(&format!("{} → {}", file.file, to.display()));
            replace_file(&from, &to)?;
            if kind == "images" {
                let sums = root.join(format!("{}.sha256sum", file.file));
                if sums.is_file() {
                    replace_file(&sums, &to.with_file_name(format!("{name}.sha256sum")))?;
                }
            }
            match kind {
                "images" => installed.images.push(to),
                "crds" => installed.crds.push(to),
                _ => installed.manifests.push(to),
            }
        }
    }
    let record = options.data_dir.join("bundle/manifest.json");
    replace_file(&root.join("manifest.json"), &record)?;

    if let Some(owner) = &options.owner {
        let mut paths: Vec<PathBuf> = vec![options.data_dir.join("bundle")];
        paths.extend(installed.ramdisk.clone());
        if !installed.images.is_empty() {
            paths.push(options.data_dir.join("images"));
        }
        run(Command::new("chown")
            .arg("-R")
            .arg(format!("{owner}:{owner}"))
            .args(&paths))?;
    }
    Ok(installed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn archive(entries: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut builder = tar::Builder::new(file.reopen().unwrap());
        for (name, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            // set_path would refuse `..`; a hostile archive is written byte by byte.
            let bytes = name.as_bytes();
            header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.finish().unwrap();
        file
    }

    #[test]
    fn unpacking_refuses_a_second_top_directory_and_paths_outside() {
        let dir = tempfile::tempdir().unwrap();
        let two = archive(&[("a/x", b"1"), ("b/y", b"2")]);
        let err = unpack(two.path(), dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("outside the bundle's one top directory"),
            "{err}"
        );

        let dir = tempfile::tempdir().unwrap();
        let escape = archive(&[("a/x", b"1"), ("a/../../escaped", b"2")]);
        assert!(unpack(escape.path(), dir.path()).is_err());
        assert!(!dir.path().parent().unwrap().join("escaped").exists());
    }

    #[test]
    fn a_directory_that_is_not_a_bundle_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let options = InstallOptions {
            data_dir: dir.path().join("data"),
            owner: None,
        };
        let err = install(dir.path(), &options, &|_| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a capstan bundle"), "{err}");
        assert!(err.contains("capstan bundle create"), "{err}");
    }
}
