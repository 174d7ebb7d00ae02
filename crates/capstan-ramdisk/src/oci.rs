//! OCI image archives written by capstan itself, without a container engine: one image per
//! archive, in the OCI image layout (image-spec v1.0) packed as a tar, the format
//! `ctr images import`, `skopeo copy oci-archive:` and `crane push` read.
//!
//! ```text
//! oci-layout                 {"imageLayoutVersion":"1.0.0"}
//! index.json                 one manifest, annotated with the image's reference
//! blobs/sha256/<manifest>    config + the layer, by digest
//! blobs/sha256/<config>      platform, entrypoint, environment, user, rootfs.diff_ids
//! blobs/sha256/<layer>       a gzip tar of the image's files
//! ```
//!
//! containerd (1.6 and later) names an imported image by the `io.containerd.image.name`
//! annotation of its manifest in `index.json`, taken as it is; only when that is missing does it
//! fall back to `org.opencontainers.image.ref.name`, which the OCI spec makes a tag and which
//! `ctr` then prefixes with `--base-name` or a made-up `import-<date>`. So the index carries both,
//! as containerd's own export does: the full reference (`registry.k8s.io/pause:3.10.1`) and the
//! tag (`3.10.1`).
//!
//! An archive is a function of its contents: entries are sorted, owned by root, dated at the
//! epoch ([`CREATED`]), and gzip carries no name or time; the same files give the same digests,
//! which is what lets a build cache archives by what went into them ([`Image::fingerprint`]).

use flate2::Compression;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub const LAYOUT_VERSION: &str = "1.0.0";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// The annotation containerd names an imported image by.
pub const CONTAINERD_IMAGE_NAME: &str = "io.containerd.image.name";
/// The OCI annotation of an image's tag.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The creation time of every image and layer entry.
pub const CREATED: &str = "1970-01-01T00:00:00Z";
/// Changes whenever what [`Image::write_archive`] writes changes, so that cached archives made by
/// an older capstan are not taken for new ones.
const FORMAT: &str = "capstan-oci-archive-1";

/// Why an archive could not be made.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error(
        "image reference {0:?} is not NAME:TAG (e.g. registry.k8s.io/pause:3.10.1): a node's images are found by their tag"
    )]
    Reference(String),
    #[error(
        "{image}: layer path {path:?} is not a relative path inside the image (no empty, `.` or `..` parts)"
    )]
    Path { image: String, path: String },
    #[error("{image}: {path} is in the layer twice")]
    Duplicate { image: String, path: String },
    #[error("{image}: {path} would lie under {parent}, which is not a directory in the layer")]
    NotADirectory {
        image: String,
        path: String,
        parent: String,
    },
    #[error("{what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> OciError {
    let path = path.to_owned();
    move |source| OciError::Io { what, path, source }
}

/// What a file in a layer holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Content {
    Bytes(Vec<u8>),
    /// Read from this file when the layer is written.
    File(PathBuf),
}

/// One entry of an image's layer; paths are relative to the image's root (`usr/local/bin/etcd`).
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    Dir {
        path: String,
        mode: u32,
    },
    File {
        path: String,
        mode: u32,
        content: Content,
    },
    Symlink {
        path: String,
        target: String,
    },
}

impl Entry {
    pub fn path(&self) -> &str {
        match self {
            Entry::Dir { path, .. } | Entry::File { path, .. } | Entry::Symlink { path, .. } => {
                path
            }
        }
    }
}

/// An image: its reference, how its process starts, and its one layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    /// `registry/repository:tag`, what containerd names it (`registry.k8s.io/etcd:3.6.6-0`).
    pub reference: String,
    /// GOARCH-style: `amd64`, `arm64`.
    pub architecture: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    /// `uid[:gid]`; none runs the process as root.
    pub user: Option<String>,
    pub working_dir: String,
    /// Says in the image's history what made it.
    pub created_by: String,
    pub entries: Vec<Entry>,
}

/// A blob of an archive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
}

/// `index.json` and the manifest blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    pub media_type: String,
    pub manifests: Vec<Descriptor>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    pub media_type: String,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// The config blob (the parts of image-spec's config capstan writes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub created: String,
    pub architecture: String,
    pub os: String,
    pub config: ExecConfig,
    pub rootfs: RootFs,
    pub history: Vec<History>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExecConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cmd: Vec<String>,
    pub working_dir: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub created: String,
    pub created_by: String,
}

/// What [`Image::write_archive`] wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Written {
    pub reference: String,
    /// The manifest's digest: what `ctr images ls` shows, and `name@digest` pins.
    pub manifest_digest: String,
    /// The config's digest: the image ID the kubelet and `crictl images` show.
    pub config_digest: String,
    pub layer_digest: String,
    /// The digest of the uncompressed layer (`rootfs.diff_ids`).
    pub diff_id: String,
    pub layer_bytes: u64,
    pub archive_bytes: u64,
}

/// Splits `name:tag`; the tag follows the last `:` after the last `/` (a registry's port is not one).
pub fn split_reference(reference: &str) -> Result<(&str, &str), OciError> {
    let bad = || OciError::Reference(reference.to_owned());
    if reference.contains('@') || reference.chars().any(char::is_whitespace) {
        return Err(bad());
    }
    let last_part = reference.rfind('/').map_or(0, |i| i + 1);
    let colon = reference[last_part..].rfind(':').ok_or_else(bad)? + last_part;
    let (name, tag) = (&reference[..colon], &reference[colon + 1..]);
    let tag_ok = !tag.is_empty()
        && tag.len() <= 128
        && !tag.starts_with(['.', '-'])
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    let name_ok = !name.is_empty()
        && name.split('/').all(|part| !part.is_empty())
        && name[name.find('/').map_or(0, |i| i + 1)..]
            .chars()
            .all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-' | '/')
            });
    if tag_ok && name_ok {
        Ok((name, tag))
    } else {
        Err(bad())
    }
}

fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(data)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A writer that hashes and counts what passes through it.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    fn finish(self) -> (W, String, u64) {
        (
            self.inner,
            format!("sha256:{}", hex(&self.hasher.finalize())),
            self.bytes,
        )
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A tar header as every entry of capstan's archives has it: root's, at the epoch.
fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header
}

impl Image {
    /// The layer's entries by path, every parent directory included (0755 unless given), after
    /// checking that paths are relative, unique, and never under a file or a symlink.
    pub fn layer_entries(&self) -> Result<BTreeMap<String, Entry>, OciError> {
        let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
        for entry in &self.entries {
            let path = entry.path().trim_start_matches('/').trim_end_matches('/');
            if path.is_empty()
                || path
                    .split('/')
                    .any(|part| part.is_empty() || part == "." || part == "..")
            {
                return Err(OciError::Path {
                    image: self.reference.clone(),
                    path: entry.path().to_owned(),
                });
            }
            let mut normalised = entry.clone();
            match &mut normalised {
                Entry::Dir { path: p, .. }
                | Entry::File { path: p, .. }
                | Entry::Symlink { path: p, .. } => *p = path.to_owned(),
            }
            if entries.insert(path.to_owned(), normalised).is_some() {
                return Err(OciError::Duplicate {
                    image: self.reference.clone(),
                    path: path.to_owned(),
                });
            }
        }
        let paths: Vec<String> = entries.keys().cloned().collect();
        for path in paths {
            let mut parent = Path::new(&path).parent();
            while let Some(dir) = parent.filter(|p| !p.as_os_str().is_empty()) {
                let dir_name = dir.to_string_lossy().into_owned();
                match entries.get(&dir_name) {
                    Some(Entry::Dir { .. }) => {}
                    Some(_) => {
                        return Err(OciError::NotADirectory {
                            image: self.reference.clone(),
                            path,
                            parent: dir_name,
                        });
                    }
                    None => {
                        entries.insert(
                            dir_name.clone(),
                            Entry::Dir {
                                path: dir_name,
                                mode: 0o755,
                            },
                        );
                    }
                }
                parent = dir.parent();
            }
        }
        Ok(entries)
    }

    /// A digest of everything the archive is made of (files by their content), to cache
    /// archives by: equal fingerprints, equal archives.
    pub fn fingerprint(&self) -> Result<String, OciError> {
        let mut hasher = Sha256::new();
        let mut field = |value: &str| {
            hasher.update((value.len() as u64).to_le_bytes());
            hasher.update(value.as_bytes());
        };
        field(FORMAT);
        field(&self.reference);
        field(&self.architecture);
        for list in [&self.entrypoint, &self.cmd, &self.env] {
            field(&list.len().to_string());
            for item in list {
                field(item);
            }
        }
        field(self.user.as_deref().unwrap_or("\0root"));
        field(&self.working_dir);
        field(&self.created_by);
        for (path, entry) in self.layer_entries()? {
            field(&path);
            match entry {
                Entry::Dir { mode, .. } => field(&format!("dir {mode:o}")),
                Entry::Symlink { target, .. } => field(&format!("symlink {target}")),
                Entry::File { mode, content, .. } => {
                    let digest = match content {
                        Content::Bytes(bytes) => sha256_digest(&bytes),
                        Content::File(file) => {
                            let mut reader =
                                std::fs::File::open(&file).map_err(io("reading", &file))?;
                            let mut hashing = Hashing::new(std::io::sink());
                            std::io::copy(&mut reader, &mut hashing)
                                .map_err(io("reading", &file))?;
                            hashing.finish().1
                        }
                    };
                    field(&format!("file {mode:o} {digest}"));
                }
            }
        }
        Ok(hex(&hasher.finalize()))
    }

    /// Writes the gzip tar of the layer to `path`: (digest, diff_id, bytes).
    fn write_layer(&self, path: &Path) -> Result<(String, String, u64), OciError> {
        let entries = self.layer_entries()?;
        let file = std::fs::File::create(path).map_err(io("creating", path))?;
        let compressed = Hashing::new(BufWriter::new(file));
        // Level 6 (gzip's default): within a few percent of the best ratio for the big static
        // binaries these layers hold, at a fraction of level 9's time.
        let gzip = GzEncoder::new(compressed, Compression::default());
        let mut layer = tar::Builder::new(Hashing::new(gzip));
        let write_err = io("writing", path);
        let result = (|| -> std::io::Result<()> {
            for (name, entry) in &entries {
                match entry {
                    Entry::Dir { mode, .. } => {
                        let mut h = header(tar::EntryType::Directory, *mode, 0);
                        layer.append_data(&mut h, format!("{name}/"), std::io::empty())?;
                    }
                    Entry::Symlink { target, .. } => {
                        let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                        layer.append_link(&mut h, name, target)?;
                    }
                    Entry::File { mode, content, .. } => match content {
                        Content::Bytes(bytes) => {
                            let mut h = header(tar::EntryType::Regular, *mode, bytes.len() as u64);
                            layer.append_data(&mut h, name, bytes.as_slice())?;
                        }
                        Content::File(source) => {
                            let reader = std::fs::File::open(source).map_err(|e| {
                                std::io::Error::new(e.kind(), format!("{}: {e}", source.display()))
                            })?;
                            let size = reader.metadata()?.len();
                            let mut h = header(tar::EntryType::Regular, *mode, size);
                            layer.append_data(&mut h, name, reader)?;
                        }
                    },
                }
            }
            Ok(())
        })();
        result.map_err(io("writing the layer", path))?;
        let uncompressed = layer.into_inner().map_err(io("writing", path))?;
        let (gzip, diff_id, _) = uncompressed.finish();
        let compressed = gzip.finish().map_err(io("compressing", path))?;
        let (mut file, digest, bytes) = compressed.finish();
        file.flush().map_err(write_err)?;
        Ok((digest, diff_id, bytes))
    }

    /// Writes the image as an OCI archive at `path` (via `path.partial`, so that a file at
    /// `path` is always whole).
    pub fn write_archive(&self, path: &Path) -> Result<Written, OciError> {
        let (_, tag) = split_reference(&self.reference)?;
        let layer_path = path.with_extension("layer.partial");
        let (layer_digest, diff_id, layer_bytes) = self.write_layer(&layer_path)?;
        let config = Config {
            created: CREATED.into(),
            architecture: self.architecture.clone(),
            os: "linux".into(),
            config: ExecConfig {
                user: self.user.clone(),
                env: self.env.clone(),
                entrypoint: self.entrypoint.clone(),
                cmd: self.cmd.clone(),
                working_dir: self.working_dir.clone(),
            },
            rootfs: RootFs {
                kind: "layers".into(),
                diff_ids: vec![diff_id.clone()],
            },
            history: vec![History {
                created: CREATED.into(),
                created_by: self.created_by.clone(),
            }],
        };
        let config_json = serde_json::to_vec(&config).map_err(|e| OciError::Io {
            what: "encoding the config of",
            path: path.to_owned(),
            source: e.into(),
        })?;
        let manifest = Manifest {
            schema_version: 2,
            media_type: MANIFEST_MEDIA_TYPE.into(),
            config: Descriptor {
                media_type: CONFIG_MEDIA_TYPE.into(),
                digest: sha256_digest(&config_json),
                size: config_json.len() as u64,
                platform: None,
                annotations: BTreeMap::new(),
            },
            layers: vec![Descriptor {
                media_type: LAYER_MEDIA_TYPE.into(),
                digest: layer_digest.clone(),
                size: layer_bytes,
                platform: None,
                annotations: BTreeMap::new(),
            }],
        };
        let manifest_json = serde_json::to_vec(&manifest).map_err(|e| OciError::Io {
            what: "encoding the manifest of",
            path: path.to_owned(),
            source: e.into(),
        })?;
        let index = Index {
            schema_version: 2,
            media_type: INDEX_MEDIA_TYPE.into(),
            manifests: vec![Descriptor {
                media_type: MANIFEST_MEDIA_TYPE.into(),
                digest: sha256_digest(&manifest_json),
                size: manifest_json.len() as u64,
                platform: Some(Platform {
                    architecture: self.architecture.clone(),
                    os: "linux".into(),
                }),
                annotations: BTreeMap::from([
                    (CONTAINERD_IMAGE_NAME.to_owned(), self.reference.clone()),
                    (REF_NAME.to_owned(), tag.to_owned()),
                ]),
            }],
        };
        let index_json = serde_json::to_vec(&index).map_err(|e| OciError::Io {
            what: "encoding the index of",
            path: path.to_owned(),
            source: e.into(),
        })?;
        let layout = format!("{{\"imageLayoutVersion\":\"{LAYOUT_VERSION}\"}}");

        let partial = path.with_extension("partial");
        let file = std::fs::File::create(&partial).map_err(io("creating", &partial))?;
        let mut archive = tar::Builder::new(BufWriter::new(file));
        let blob = |digest: &str| format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
        let result = (|| -> std::io::Result<()> {
            for (name, data) in [
                ("oci-layout", layout.as_bytes()),
                ("index.json", index_json.as_slice()),
            ] {
                let mut h = header(tar::EntryType::Regular, 0o644, data.len() as u64);
                archive.append_data(&mut h, name, data)?;
            }
            for dir in ["blobs/", "blobs/sha256/"] {
                let mut h = header(tar::EntryType::Directory, 0o755, 0);
                archive.append_data(&mut h, dir, std::io::empty())?;
            }
            for (digest, data) in [
                (&index.manifests[0].digest, manifest_json.as_slice()),
                (&manifest.config.digest, config_json.as_slice()),
            ] {
                let mut h = header(tar::EntryType::Regular, 0o644, data.len() as u64);
                archive.append_data(&mut h, blob(digest), data)?;
            }
            let layer = std::fs::File::open(&layer_path)?;
            let mut h = header(tar::EntryType::Regular, 0o644, layer_bytes);
            archive.append_data(&mut h, blob(&layer_digest), layer)?;
            archive.into_inner()?.flush()
        })();
        let _ = std::fs::remove_file(&layer_path);
        result.map_err(io("writing", &partial))?;
        std::fs::rename(&partial, path).map_err(io("renaming", &partial))?;
        let archive_bytes = std::fs::metadata(path).map_err(io("reading", path))?.len();
        Ok(Written {
            reference: self.reference.clone(),
            manifest_digest: index.manifests[0].digest.clone(),
            config_digest: manifest.config.digest,
            layer_digest,
            diff_id,
            layer_bytes,
            archive_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
    }

    fn pause_like(dir: &Path) -> Image {
        let binary = dir.join("pause-binary");
        std::fs::write(&binary, b"\x7fELF pretend binary").unwrap_or_else(|e| panic!("{e}"));
        Image {
            reference: "registry.k8s.io/pause:3.10.1".into(),
            architecture: "amd64".into(),
            entrypoint: vec!["/pause".into()],
            cmd: vec![],
            env: vec!["PATH=/usr/bin:/bin".into()],
            user: Some("65535:65535".into()),
            working_dir: "/".into(),
            created_by: "test".into(),
            entries: vec![
                Entry::File {
                    path: "pause".into(),
                    mode: 0o755,
                    content: Content::File(binary),
                },
                Entry::File {
                    path: "/etc/deep/nested/file".into(),
                    mode: 0o644,
                    content: Content::Bytes(b"hello".to_vec()),
                },
                Entry::Symlink {
                    path: "usr/bin/pause".into(),
                    target: "../../pause".into(),
                },
                Entry::Dir {
                    path: "tmp".into(),
                    mode: 0o1777,
                },
            ],
        }
    }

    /// The archive's members by name.
    fn members(path: &Path) -> BTreeMap<String, (tar::EntryType, Vec<u8>)> {
        let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{e}"));
        let mut archive = tar::Archive::new(file);
        let mut out = BTreeMap::new();
        for entry in archive.entries().unwrap_or_else(|e| panic!("{e}")) {
            let mut entry = entry.unwrap_or_else(|e| panic!("{e}"));
            let name = entry
                .path()
                .unwrap_or_else(|e| panic!("{e}"))
                .to_string_lossy()
                .into_owned();
            let kind = entry.header().entry_type();
            let mut data = Vec::new();
            entry
                .read_to_end(&mut data)
                .unwrap_or_else(|e| panic!("{e}"));
            out.insert(name, (kind, data));
        }
        out
    }

    fn blob<'a>(
        members: &'a BTreeMap<String, (tar::EntryType, Vec<u8>)>,
        digest: &str,
    ) -> &'a [u8] {
        let name = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
        &members
            .get(&name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", members.keys()))
            .1
    }

    #[test]
    fn the_archive_is_an_oci_layout_whose_digests_match_their_blobs() {
        let dir = tmp();
        let image = pause_like(dir.path());
        let path = dir.path().join("pause.tar");
        let written = image.write_archive(&path).unwrap_or_else(|e| panic!("{e}"));
        let members = members(&path);
        assert_eq!(
            members["oci-layout"].1,
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()
        );
        let index: Index =
            serde_json::from_slice(&members["index.json"].1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(index.schema_version, 2);
        assert_eq!(index.media_type, INDEX_MEDIA_TYPE);
        assert_eq!(index.manifests.len(), 1);
        let descriptor = &index.manifests[0];
        assert_eq!(descriptor.media_type, MANIFEST_MEDIA_TYPE);
        assert_eq!(descriptor.digest, written.manifest_digest);
        // containerd takes the full reference from its own annotation; the OCI one is the tag.
        assert_eq!(
            descriptor.annotations[CONTAINERD_IMAGE_NAME],
            "registry.k8s.io/pause:3.10.1"
        );
        assert_eq!(descriptor.annotations[REF_NAME], "3.10.1");
        assert_eq!(
            descriptor.platform,
            Some(Platform {
                architecture: "amd64".into(),
                os: "linux".into()
            })
        );

        let manifest_bytes = blob(&members, &descriptor.digest);
        assert_eq!(sha256_digest(manifest_bytes), descriptor.digest);
        assert_eq!(manifest_bytes.len() as u64, descriptor.size);
        let manifest: Manifest =
            serde_json::from_slice(manifest_bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(manifest.media_type, MANIFEST_MEDIA_TYPE);
        assert_eq!(manifest.config.media_type, CONFIG_MEDIA_TYPE);
        assert_eq!(manifest.config.digest, written.config_digest);
        let config_bytes = blob(&members, &manifest.config.digest);
        assert_eq!(sha256_digest(config_bytes), manifest.config.digest);
        assert_eq!(config_bytes.len() as u64, manifest.config.size);

        assert_eq!(manifest.layers.len(), 1);
        let layer = &manifest.layers[0];
        assert_eq!(layer.media_type, LAYER_MEDIA_TYPE);
        let layer_bytes = blob(&members, &layer.digest);
        assert_eq!(sha256_digest(layer_bytes), layer.digest);
        assert_eq!(layer_bytes.len() as u64, layer.size);
        assert_eq!(written.layer_digest, layer.digest);

        // diff_id: the digest of the layer once gunzipped.
        let mut uncompressed = Vec::new();
        flate2::read::GzDecoder::new(layer_bytes)
            .read_to_end(&mut uncompressed)
            .unwrap_or_else(|e| panic!("{e}"));
        let config: Config = serde_json::from_slice(config_bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.rootfs.kind, "layers");
        assert_eq!(config.rootfs.diff_ids, vec![sha256_digest(&uncompressed)]);
        assert_eq!(written.diff_id, config.rootfs.diff_ids[0]);
        assert_eq!(config.architecture, "amd64");
        assert_eq!(config.os, "linux");
        assert_eq!(config.config.entrypoint, vec!["/pause".to_owned()]);
        assert_eq!(config.config.user.as_deref(), Some("65535:65535"));
        assert_eq!(config.created, CREATED);
        // Nothing else in the archive.
        assert_eq!(members.len(), 2 + 2 + 3, "{:?}", members.keys());
        assert_eq!(
            written.archive_bytes,
            std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0)
        );
        assert!(!path.with_extension("partial").exists());
        assert!(!path.with_extension("layer.partial").exists());
    }

    #[test]
    fn the_layer_holds_the_entries_sorted_with_their_parents_owned_by_root_at_the_epoch() {
        let dir = tmp();
        let path = dir.path().join("pause.tar");
        let written = pause_like(dir.path())
            .write_archive(&path)
            .unwrap_or_else(|e| panic!("{e}"));
        let members = members(&path);
        let layer = blob(&members, &written.layer_digest);
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(layer));
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap_or_else(|e| panic!("{e}")) {
            let mut entry = entry.unwrap_or_else(|e| panic!("{e}"));
            let header = entry.header().clone();
            let name = entry
                .path()
                .unwrap_or_else(|e| panic!("{e}"))
                .to_string_lossy()
                .into_owned();
            assert_eq!(header.uid().ok(), Some(0), "{name}");
            assert_eq!(header.gid().ok(), Some(0), "{name}");
            assert_eq!(header.mtime().ok(), Some(0), "{name}");
            let mode = header.mode().unwrap_or(0);
            let detail = match header.entry_type() {
                tar::EntryType::Directory => format!("dir {mode:o}"),
                tar::EntryType::Symlink => format!(
                    "symlink {}",
                    entry
                        .link_name()
                        .ok()
                        .flatten()
                        .map(|l| l.to_string_lossy().into_owned())
                        .unwrap_or_default()
                ),
                _ => {
                    let mut data = Vec::new();
                    entry
                        .read_to_end(&mut data)
                        .unwrap_or_else(|e| panic!("{e}"));
                    format!("file {mode:o} {}", String::from_utf8_lossy(&data))
                }
            };
            seen.push(format!("{name} {detail}"));
        }
        assert_eq!(
            seen,
            vec![
                "etc/ dir 755",
                "etc/deep/ dir 755",
                "etc/deep/nested/ dir 755",
                "etc/deep/nested/file file 644 hello",
                "pause file 755 \u{7f}ELF pretend binary",
                "tmp/ dir 1777",
                "usr/ dir 755",
                "usr/bin/ dir 755",
                "usr/bin/pause symlink ../../pause",
            ]
        );
    }

    #[test]
    fn the_same_contents_give_the_same_archive_and_fingerprint() {
        let dir = tmp();
        let image = pause_like(dir.path());
        let a = dir.path().join("a.tar");
        let b = dir.path().join("b.tar");
        let first = image.write_archive(&a).unwrap_or_else(|e| panic!("{e}"));
        let second = image.write_archive(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(first, second);
        assert_eq!(std::fs::read(&a).ok(), std::fs::read(&b).ok());
        let print = image.fingerprint().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(print, image.fingerprint().unwrap_or_else(|e| panic!("{e}")));

        // A changed file, or a changed setting, is a different archive.
        std::fs::write(dir.path().join("pause-binary"), b"another")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(print, image.fingerprint().unwrap_or_else(|e| panic!("{e}")));
        let mut other = image.clone();
        other.user = None;
        assert_ne!(
            image.fingerprint().unwrap_or_else(|e| panic!("{e}")),
            other.fingerprint().unwrap_or_else(|e| panic!("{e}"))
        );
    }

    #[test]
    fn references_need_a_tag_and_no_digest() {
        for good in [
            (
                "registry.k8s.io/pause:3.10.1",
                "registry.k8s.io/pause",
                "3.10.1",
            ),
            (
                "registry.k8s.io/coredns/coredns:v1.13.1",
                "registry.k8s.io/coredns/coredns",
                "v1.13.1",
            ),
            (
                "localhost:5000/etcd:3.6.6-0",
                "localhost:5000/etcd",
                "3.6.6-0",
            ),
        ] {
            let (name, tag) = split_reference(good.0).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!((name, tag), (good.1, good.2));
        }
        for bad in [
            "registry.k8s.io/pause",
            "localhost:5000/etcd",
            "registry.k8s.io/pause@sha256:abcd",
            "registry.k8s.io/Pause:1",
            "registry.k8s.io/pause:",
            "pause:-1",
            "a//b:1",
        ] {
            let err = split_reference(bad).err();
            assert!(
                matches!(err, Some(OciError::Reference(_))),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn bad_layers_are_refused_with_the_path_named() {
        let dir = tmp();
        let mut image = pause_like(dir.path());
        image.entries.push(Entry::Dir {
            path: "usr/../etc".into(),
            mode: 0o755,
        });
        let err = image.layer_entries().err().map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("usr/../etc")),
            "{err:?}"
        );

        let mut image = pause_like(dir.path());
        image.entries.push(Entry::Dir {
            path: "pause".into(),
            mode: 0o755,
        });
        assert!(matches!(
            image.layer_entries(),
            Err(OciError::Duplicate { .. })
        ));

        // A file under a symlink would land wherever the symlink points when unpacked.
        let mut image = pause_like(dir.path());
        image.entries.push(Entry::File {
            path: "usr/bin/pause/inside".into(),
            mode: 0o644,
            content: Content::Bytes(vec![]),
        });
        let err = image.layer_entries().err().map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(
                |e| e.contains("usr/bin/pause/inside") && e.contains("not a directory")
            ),
            "{err:?}"
        );
    }
}
