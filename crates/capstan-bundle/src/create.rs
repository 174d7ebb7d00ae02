//! Writes a bundle: resolves and fetches the packages, checksums every part, and streams the
//! archive straight from the sources (an image of gigabytes is read twice, never copied).

use crate::manifest::{self, FORMAT, File, Manifest};
use crate::{BundleError, debs, io, sha256_file, sha256_hex};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The bootstrapper at the top of every bundle.
pub const INSTALL_SCRIPT: &str = include_str!("install.sh");

/// What goes into a bundle.
#[derive(Clone, Debug, Default)]
pub struct BundleSpec {
    /// The archive to write.
    pub out: PathBuf,
    /// capstan's package (`scripts/package.sh`).
    pub deb: PathBuf,
    /// More Debian packages to carry (with their dependencies), e.g. `qemu-utils`.
    pub extra_packages: Vec<String>,
    /// A built ramdisk (`capstan ramdisk build --out DIR`).
    pub ramdisk: Option<PathBuf>,
    /// Node OS images.
    pub images: Vec<PathBuf>,
    /// The CRDs, as one YAML stream (`capstan crds`).
    pub crds: Option<Vec<u8>>,
    /// Manifests the clusters take as files.
    pub manifests: Vec<PathBuf>,
    /// The Debian package cache (`apt-get download` lands there once).
    pub cache: PathBuf,
}

/// One entry of the archive: from a file, or from memory.
enum Source {
    Path(PathBuf),
    Bytes(Vec<u8>),
}

struct Entry {
    name: String,
    source: Source,
    mode: u32,
}

/// The files of a directory (recursively), as (relative name, path).
fn dir_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, BundleError> {
    Ok(manifest::files_under(dir)?
        .into_iter()
        .map(|name| {
            let path = dir.join(&name);
            (name, path)
        })
        .collect())
}

fn file_name(path: &Path) -> Result<String, BundleError> {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| BundleError::Input(format!("{} names no file", path.display())))
}

/// Writes the bundle `spec` describes, reporting each step to `progress`; returns its manifest.
pub fn create(spec: &BundleSpec, progress: &dyn Fn(&str)) -> Result<Manifest, BundleError> {
    if !spec.deb.is_file() {
        return Err(BundleError::Input(format!(
            "{} does not exist: build capstan's package with scripts/package.sh",
            spec.deb.display()
        )));
    }
    let capstan = debs::index(&spec.deb)?;
    if capstan.package.name != "capstan" {
        return Err(BundleError::Input(format!(
            "{} is the package {}, not capstan",
            spec.deb.display(),
            capstan.package.name
        )));
    }
    let control = debs::control(&spec.deb)?;
    let mut roots = debs::depends_names(debs::field(&control, "Depends").unwrap_or_default());
    roots.extend(debs::depends_names(
        debs::field(&control, "Pre-Depends").unwrap_or_default(),
    ));
    roots.extend(spec.extra_packages.iter().cloned());
    roots.sort();
    roots.dedup();
    progress(&format!(
        "resolving the dependencies of {} ({})",
        capstan.package.name,
        roots.join(", ")
    ));
    let names = debs::closure(&roots)?;
    progress(&format!(
        "fetching {} Debian packages into {}",
        names.len(),
        spec.cache.display()
    ));
    let files = debs::fetch_all(&spec.cache, &names)?;

    let name = format!("capstan-bundle-{}", capstan.package.version);
    let mut entries = Vec::new();
    // Checksums already computed (packages by their index, images for the manifest), so that no
    // file is read twice for them.
    let mut known: BTreeMap<String, (String, u64)> = BTreeMap::new();
    let mut indexed = vec![capstan];
    let mut package_sources = vec![spec.deb.clone()];
    for file in files {
        indexed.push(debs::index(&file)?);
        package_sources.push(file);
    }
    for (i, source) in indexed.iter().zip(package_sources) {
        known.insert(
            i.package.file.clone(),
            (i.package.sha256.clone(), i.package.bytes),
        );
        entries.push(Entry {
            name: i.package.file.clone(),
            source: Source::Path(source),
            mode: 0o644,
        });
    }
    let packages_text = debs::packages_index(&indexed);
    let created = jiff::Timestamp::now();
    let release = debs::release(
        &packages_text,
        &created.strftime("%a, %d %b %Y %H:%M:%S +0000").to_string(),
    );
    entries.push(Entry {
        name: "debs/Packages".into(),
        source: Source::Bytes(packages_text.into_bytes()),
        mode: 0o644,
    });
    entries.push(Entry {
        name: "debs/Release".into(),
        source: Source::Bytes(release.into_bytes()),
        mode: 0o644,
    });

    let mut manifest = Manifest {
        format: FORMAT,
        name: name.clone(),
        capstan_version: indexed[0].package.version.clone(),
        created: created.to_string(),
        packages: indexed.into_iter().map(|i| i.package).collect(),
        ..Manifest::default()
    };

    if let Some(ramdisk) = &spec.ramdisk {
        capstan_ramdisk::Ramdisk::open(ramdisk)?;
        let text = std::fs::read(ramdisk.join("manifest.json"))
            .map_err(io("reading", &ramdisk.join("manifest.json")))?;
        manifest.ramdisk =
            Some(
                serde_json::from_slice(&text).map_err(|source| BundleError::Manifest {
                    path: ramdisk.clone(),
                    source,
                })?,
            );
        for (relative, path) in dir_files(ramdisk)? {
            entries.push(Entry {
                name: format!("ramdisk/{relative}"),
                source: Source::Path(path),
                mode: 0o644,
            });
        }
    }

    let mut taken = BTreeSet::new();
    for image in &spec.images {
        let file = file_name(image)?;
        if !taken.insert(file.clone()) {
            return Err(BundleError::Input(format!(
                "two images are named {file}: rename one"
            )));
        }
        progress(&format!("checksumming {}", image.display()));
        let (sha256, bytes) = sha256_file(image)?;
        manifest.images.push(File {
            file: format!("images/{file}"),
            sha256: sha256.clone(),
            bytes,
        });
        known.insert(format!("images/{file}"), (sha256.clone(), bytes));
        entries.push(Entry {
            name: format!("images/{file}"),
            source: Source::Path(image.clone()),
            mode: 0o644,
        });
        // The checksum file an image URL's `checksum` points at, as Metal3 users write it.
        entries.push(Entry {
            name: format!("images/{file}.sha256sum"),
            source: Source::Bytes(format!("{sha256}  {file}\n").into_bytes()),
            mode: 0o644,
        });
    }
    if let Some(crds) = &spec.crds {
        entries.push(Entry {
            name: "crds/capstan-crds.yaml".into(),
            source: Source::Bytes(crds.clone()),
            mode: 0o644,
        });
    }
    for path in &spec.manifests {
        let file = file_name(path)?;
        if !taken.insert(format!("manifests/{file}")) {
            return Err(BundleError::Input(format!(
                "two manifests are named {file}: rename one"
            )));
        }
        entries.push(Entry {
            name: format!("manifests/{file}"),
            source: Source::Path(path.clone()),
            mode: 0o644,
        });
    }
    entries.push(Entry {
        name: "install".into(),
        source: Source::Bytes(INSTALL_SCRIPT.as_bytes().to_vec()),
        mode: 0o755,
    });

    progress("checksumming the bundle's files");
    let mut sums = BTreeMap::new();
    for entry in &entries {
        let (sha256, bytes) = match (&entry.source, known.get(&entry.name)) {
            (_, Some(sum)) => sum.clone(),
            (Source::Path(path), None) => sha256_file(path)?,
            (Source::Bytes(bytes), None) => (sha256_hex(bytes), bytes.len() as u64),
        };
        if entry.name.starts_with("crds/") {
            manifest.crds.push(File {
                file: entry.name.clone(),
                sha256: sha256.clone(),
                bytes,
            });
        } else if entry.name.starts_with("manifests/") {
            manifest.manifests.push(File {
                file: entry.name.clone(),
                sha256: sha256.clone(),
                bytes,
            });
        }
        if sums.insert(entry.name.clone(), sha256).is_some() {
            return Err(BundleError::Input(format!(
                "{} would be in the bundle twice",
                entry.name
            )));
        }
    }
    let manifest_json =
        serde_json::to_vec_pretty(&manifest).map_err(|source| BundleError::Manifest {
            path: spec.out.clone(),
            source,
        })?;
    sums.insert("manifest.json".into(), sha256_hex(&manifest_json));
    let mut head = vec![
        Entry {
            name: "SHA256SUMS".into(),
            source: Source::Bytes(manifest::format_sums(&sums).into_bytes()),
            mode: 0o644,
        },
        Entry {
            name: "manifest.json".into(),
            source: Source::Bytes(manifest_json),
            mode: 0o644,
        },
    ];
    head.append(&mut entries);

    progress(&format!("writing {}", spec.out.display()));
    write_archive(&spec.out, &name, head)?;
    Ok(manifest)
}

/// Writes the entries under `top/` into `out`, through a partial file renamed at the end (a
/// bundle that exists is whole).
fn write_archive(out: &Path, top: &str, entries: Vec<Entry>) -> Result<(), BundleError> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    let partial = out.with_extension("tar.partial");
    let file = std::fs::File::create(&partial).map_err(io("creating", &partial))?;
    let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
    builder.mode(tar::HeaderMode::Deterministic);
    for entry in entries {
        let name = format!("{top}/{}", entry.name);
        let mut header = tar::Header::new_gnu();
        header.set_mode(entry.mode);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        match entry.source {
            Source::Path(path) => {
                let mut source = std::fs::File::open(&path).map_err(io("reading", &path))?;
                let len = source.metadata().map_err(io("reading", &path))?.len();
                header.set_size(len);
                builder
                    .append_data(&mut header, &name, &mut source)
                    .map_err(io("writing", &partial))?;
            }
            Source::Bytes(bytes) => {
                header.set_size(bytes.len() as u64);
                builder
                    .append_data(&mut header, &name, bytes.as_slice())
                    .map_err(io("writing", &partial))?;
            }
        }
    }
    let writer = builder.into_inner().map_err(io("writing", &partial))?;
    let file = writer.into_inner().map_err(|e| BundleError::Io {
        what: "writing",
        path: partial.clone(),
        source: e.into_error(),
    })?;
    file.sync_all().map_err(io("syncing", &partial))?;
    std::fs::rename(&partial, out).map_err(io("renaming", &partial))
}
