//! The Kubernetes binaries a node image is built from (`capstan image build --kubernetes-bin
//! DIR`): which must be there, that they are x86-64 Linux executables of one release, their
//! versions (each asked itself: `kubeadm version -o short`, `kubelet --version`, `etcd --version`,
//! …) and digests, and the images that release's kubeadm wants (`kubeadm config images list`),
//! each matched to the binary it is built from and checked against that binary's version.
//!
//! An air-gapped site has these as release archives: the Kubernetes server release's
//! `kubernetes/server/bin/`, etcd's and CoreDNS's releases, and a pause binary; any directory
//! holding them by their usual names will do.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Run on the node itself (installed in `/usr/bin`).
pub const HOST_BINARIES: &[&str] = &["kubelet", "kubeadm", "kubectl"];
/// Every binary a node image needs.
pub const REQUIRED: &[&str] = &[
    "kubelet",
    "kubeadm",
    "kubectl",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "etcd",
    "coredns",
    "pause",
];
/// Put into the etcd image beside etcd when the directory has them (`kubectl exec` into etcd).
pub const OPTIONAL: &[&str] = &["etcdctl", "etcdutl"];
/// ELF `e_machine` of x86-64: the node image is an amd64 Debian.
const EM_X86_64: u16 = 62;
const PT_INTERP: u32 = 3;

/// Why the binaries cannot make a node image.
#[derive(Debug, thiserror::Error)]
pub enum KubeBinError {
    #[error(
        "{0} is not a directory: --kubernetes-bin names the directory holding the Kubernetes binaries"
    )]
    NoDir(String),
    #[error(
        "{dir} lacks {missing}: a node image needs {} (the Kubernetes server release's kubernetes/server/bin/, etcd's and CoreDNS's releases, and a pause binary, by those names)",
        REQUIRED.join(", ")
    )]
    Missing { dir: String, missing: String },
    #[error("{0} is not an ELF executable: give the Linux binary")]
    NotElf(String),
    #[error("{path} is built for ELF machine {machine}, not x86-64: the node image is amd64")]
    WrongMachine { path: String, machine: u16 },
    #[error("{0} is not executable: chmod +x it")]
    NotExecutable(String),
    #[error("running {command}: {detail}")]
    Command { command: String, detail: String },
    #[error("`{command}` printed no version capstan recognises: {output:?}")]
    Version { command: String, output: String },
    #[error(
        "{name} is {version} but kubeadm is {kubeadm}: give the binaries of one Kubernetes release"
    )]
    Skew {
        name: String,
        version: String,
        kubeadm: String,
    },
    #[error(
        "kubeadm {kubernetes} wants {image}, which capstan cannot build from binaries (it builds kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns and pause)"
    )]
    UnknownImage { kubernetes: String, image: String },
    #[error(
        "kubeadm {kubernetes} wants {image}, but {path} is version {found}: give the {binary} of the version kubeadm names"
    )]
    ImageVersion {
        kubernetes: String,
        image: String,
        binary: String,
        path: String,
        found: String,
    },
    #[error("reading {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn read_err(path: &Path) -> impl FnOnce(std::io::Error) -> KubeBinError {
    let path = path.to_owned();
    move |source| KubeBinError::Io { path, source }
}

/// One checked binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binary {
    pub name: String,
    pub path: PathBuf,
    pub sha256: String,
    pub bytes: u64,
    /// As the binary says it (`v1.35.4`, `3.6.6`, `1.13.1`, `3.10.1`).
    pub version: String,
    /// The dynamic loader it asks for; none for a static binary.
    pub interpreter: Option<String>,
}

/// An image kubeadm wants, and the binaries it is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WantedImage {
    /// As kubeadm lists it: `registry.k8s.io/etcd:3.6.6-0`.
    pub reference: String,
    /// The image's name (`etcd`), which names its main binary too.
    pub component: String,
}

/// The checked directory.
#[derive(Clone, Debug)]
pub struct KubeBinaries {
    pub dir: PathBuf,
    /// kubeadm's version, which every Kubernetes binary matches: `v1.35.4`.
    pub kubernetes_version: String,
    pub binaries: BTreeMap<String, Binary>,
    pub images: Vec<WantedImage>,
}

fn command_text(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// stdout of a command that must succeed (its stderr goes into the error).
fn output(command: &mut Command) -> Result<String, KubeBinError> {
    let shown = command_text(command);
    let out = command.output().map_err(|e| KubeBinError::Command {
        command: shown.clone(),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(KubeBinError::Command {
            command: shown,
            detail: format!(
                "{}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The ELF machine and interpreter of `path`.
fn elf(path: &Path) -> Result<(u16, Option<String>), KubeBinError> {
    let not_elf = || KubeBinError::NotElf(path.display().to_string());
    let mut file = std::fs::File::open(path).map_err(read_err(path))?;
    let mut head = [0u8; 64];
    file.read_exact(&mut head).map_err(|_| not_elf())?;
    // 64-bit little-endian ELF: what x86-64 Linux runs.
    if head[..4] != *b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(not_elf());
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let u64_at = |b: &[u8], at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    let machine = u16_at(&head, 18);
    let (phoff, phentsize, phnum) = (u64_at(&head, 32), u16_at(&head, 54), u16_at(&head, 56));
    if phentsize < 56 {
        return Err(not_elf());
    }
    let mut headers = vec![0u8; usize::from(phentsize) * usize::from(phnum)];
    file.seek(SeekFrom::Start(phoff)).map_err(read_err(path))?;
    file.read_exact(&mut headers).map_err(|_| not_elf())?;
    for header in headers.chunks(usize::from(phentsize)) {
        if u32_at(header, 0) == PT_INTERP {
            let (offset, size) = (u64_at(header, 8), u64_at(header, 32));
            let mut interp = vec![0u8; usize::try_from(size.min(4096)).unwrap_or(0)];
            file.seek(SeekFrom::Start(offset)).map_err(read_err(path))?;
            file.read_exact(&mut interp).map_err(|_| not_elf())?;
            let text = String::from_utf8_lossy(&interp)
                .trim_end_matches('\0')
                .to_owned();
            return Ok((machine, Some(text)));
        }
    }
    Ok((machine, None))
}

fn sha256_of(path: &Path) -> Result<(String, u64), KubeBinError> {
    let mut file = std::fs::File::open(path).map_err(read_err(path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(read_err(path))?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        hasher.update(&buffer[..n]);
    }
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, bytes))
}

/// How each binary tells its version, and where in what it prints the version is.
fn version_of(name: &str, path: &Path) -> Result<String, KubeBinError> {
    let args: &[&str] = match name {
        "kubeadm" => &["version", "-o", "short"],
        "kubectl" => &["version", "--client"],
        "etcdctl" => &["version"],
        "etcdutl" => &["version"],
        "coredns" => &["-version"],
        "pause" => &["-v"],
        _ => &["--version"],
    };
    let mut command = Command::new(path);
    command.args(args);
    let shown = command_text(&command);
    let text = output(&mut command)?;
    parse_version(name, &text).ok_or(KubeBinError::Version {
        command: shown,
        output: text.trim().chars().take(300).collect(),
    })
}

/// The version in what `name`'s version command printed.
fn parse_version(name: &str, text: &str) -> Option<String> {
    let first_line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let token = match name {
        // "Client Version: v1.35.4" (then Kustomize's, on its own line).
        "kubectl" => text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Client Version:"))?
            .trim(),
        // "etcd Version: 3.6.6", "etcdctl version: 3.6.6".
        "etcd" | "etcdctl" | "etcdutl" => first_line.rsplit(':').next()?.trim(),
        // "CoreDNS-1.13.1".
        "coredns" => first_line.strip_prefix("CoreDNS-")?,
        // "Kubernetes v1.35.4", "v1.35.4", "pause.go 3.10.1", "pause.c v3.10".
        _ => first_line.rsplit(' ').next()?,
    };
    let plain = token.trim_start_matches('v');
    let numeric = plain
        .split(['.', '-', '+'])
        .next()
        .is_some_and(|major| !major.is_empty() && major.chars().all(|c| c.is_ascii_digit()));
    numeric.then(|| token.to_owned())
}

/// Whether `tag` (of kubeadm's list) is `version` of the binary: etcd's tags add a build
/// number (`3.6.6-0`), CoreDNS's and Kubernetes' have a `v`.
fn tag_matches(component: &str, tag: &str, version: &str) -> bool {
    let tag = tag.trim_start_matches('v');
    let version = version.trim_start_matches('v');
    match component {
        "etcd" => tag == version || tag.rsplit_once('-').is_some_and(|(v, _)| v == version),
        _ => tag == version,
    }
}

impl KubeBinaries {
    /// Checks `dir`: every required binary there, an executable x86-64 ELF, Kubernetes binaries
    /// of kubeadm's version, and the images kubeadm lists matched to binaries of their versions.
    pub fn open(dir: &Path) -> Result<Self, KubeBinError> {
        if !dir.is_dir() {
            return Err(KubeBinError::NoDir(dir.display().to_string()));
        }
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|name| !dir.join(name).is_file())
            .collect();
        if !missing.is_empty() {
            return Err(KubeBinError::Missing {
                dir: dir.display().to_string(),
                missing: missing.join(", "),
            });
        }
        let mut binaries = BTreeMap::new();
        for name in REQUIRED
            .iter()
            .chain(OPTIONAL.iter())
            .filter(|name| dir.join(name).is_file())
        {
            let path = dir.join(name);
            let shown = path.display().to_string();
            let (machine, interpreter) = elf(&path)?;
            if machine != EM_X86_64 {
                return Err(KubeBinError::WrongMachine {
                    path: shown,
                    machine,
                });
            }
            let mode = std::fs::metadata(&path).map_err(read_err(&path))?;
            if std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o111 == 0 {
                return Err(KubeBinError::NotExecutable(shown));
            }
            let (sha256, bytes) = sha256_of(&path)?;
            let version = version_of(name, &path)?;
            binaries.insert(
                (*name).to_owned(),
                Binary {
                    name: (*name).to_owned(),
                    path,
                    sha256,
                    bytes,
                    version,
                    interpreter,
                },
            );
        }
        let kubernetes_version = binaries
            .get("kubeadm")
            .map(|b| b.version.clone())
            .unwrap_or_default();
        for binary in binaries.values() {
            let is_kubernetes = binary.name.starts_with("kube");
            if is_kubernetes && binary.version != kubernetes_version {
                return Err(KubeBinError::Skew {
                    name: binary.name.clone(),
                    version: binary.version.clone(),
                    kubeadm: kubernetes_version.clone(),
                });
            }
        }
        let kubeadm = dir.join("kubeadm");
        let listed = output(
            Command::new(&kubeadm)
                .args(["config", "images", "list", "--kubernetes-version"])
                .arg(&kubernetes_version),
        )?;
        let mut images = Vec::new();
        for reference in listed.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let unknown = || KubeBinError::UnknownImage {
                kubernetes: kubernetes_version.clone(),
                image: reference.to_owned(),
            };
            let (name, tag) = crate::oci::split_reference(reference).map_err(|_| unknown())?;
            let component = name.rsplit('/').next().unwrap_or(name);
            let binary = binaries.get(component).ok_or_else(unknown)?;
            if !tag_matches(component, tag, &binary.version) {
                return Err(KubeBinError::ImageVersion {
                    kubernetes: kubernetes_version.clone(),
                    image: reference.to_owned(),
                    binary: component.to_owned(),
                    path: binary.path.display().to_string(),
                    found: binary.version.clone(),
                });
            }
            images.push(WantedImage {
                reference: reference.to_owned(),
                component: component.to_owned(),
            });
        }
        Ok(Self {
            dir: dir.to_owned(),
            kubernetes_version,
            binaries,
            images,
        })
    }

    /// The binary `name`, which [`KubeBinaries::open`] made sure of for every required one.
    pub fn get(&self, name: &str) -> Option<&Binary> {
        self.binaries.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_each_binary_prints_them() {
        let cases = [
            ("kubeadm", "v1.35.4\n", Some("v1.35.4")),
            ("kubelet", "Kubernetes v1.35.4\n", Some("v1.35.4")),
            (
                "kubectl",
                "Client Version: v1.35.4\nKustomize Version: v5.7.1\n",
                Some("v1.35.4"),
            ),
            (
                "etcd",
                "etcd Version: 3.6.6\nGit SHA: release-v3.6.6\nGo Version: go1.26\n",
                Some("3.6.6"),
            ),
            (
                "etcdctl",
                "etcdctl version: 3.6.6\nAPI version: 3.6\n",
                Some("3.6.6"),
            ),
            (
                "coredns",
                "CoreDNS-1.13.1\nlinux/amd64, go1.26, release-v1.13.1\n",
                Some("1.13.1"),
            ),
            ("pause", "pause.go 3.10.1\n", Some("3.10.1")),
            ("pause", "pause.c v3.10\n", Some("v3.10")),
            ("kube-proxy", "something else\n", None),
            ("kubectl", "error: unknown flag\n", None),
        ];
        for (name, text, want) in cases {
            assert_eq!(
                parse_version(name, text).as_deref(),
                want,
                "{name}: {text:?}"
            );
        }
    }

    #[test]
    fn image_tags_match_binary_versions_as_kubeadm_writes_them() {
        assert!(tag_matches("etcd", "3.6.6-0", "3.6.6"));
        assert!(!tag_matches("etcd", "3.6.6-0", "3.6.5"));
        assert!(tag_matches("coredns", "v1.13.1", "1.13.1"));
        assert!(tag_matches("pause", "3.10.1", "3.10.1"));
        assert!(!tag_matches("pause", "3.10.1", "3.10"));
        assert!(tag_matches("kube-apiserver", "v1.35.4", "v1.35.4"));
    }

    fn dir_with(names: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for name in names {
            std::fs::write(dir.path().join(name), b"#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        }
        dir
    }

    #[test]
    fn a_directory_without_a_binary_is_refused_naming_each_missing_one() {
        let dir = dir_with(&["kubelet", "kubeadm", "kubectl", "kube-apiserver"]);
        let err = KubeBinaries::open(dir.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(
                "lacks kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns, pause"
            ),
            "{err}"
        );
        let err = KubeBinaries::open(&dir.path().join("nowhere"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("is not a directory"), "{err}");
    }

    #[test]
    fn a_script_is_not_taken_for_a_binary() {
        let dir = dir_with(REQUIRED);
        let err = KubeBinaries::open(dir.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("kubelet is not an ELF executable"), "{err}");
    }

    #[test]
    fn elf_headers_tell_static_from_dynamic() {
        // The test process itself is a dynamically linked x86-64 executable.
        let me = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
        let (machine, interpreter) = elf(&me).unwrap_or_else(|e| panic!("{e}"));
        if cfg!(target_arch = "x86_64") {
            assert_eq!(machine, EM_X86_64);
        }
        assert!(
            interpreter
                .as_deref()
                .is_some_and(|i| i.contains("ld-linux")),
            "{interpreter:?}"
        );
    }
}
