//! The Kubernetes node image (`capstan image build`): a Debian 12 disk that a Metal3Machine or a
//! KVMMachine boots and cloud-init turns into a node by running capstan's kubeadm bootstrap data,
//! with nothing to download on the way.
//!
//! What it holds, besides Debian's systemd, cloud-init, the generic kernel (bare metal needs its
//! storage and NIC drivers) and `growpart` (the root partition grows to the disk):
//!
//! - containerd and runc from Debian, configured for the kubelet (the systemd cgroup driver, the
//!   pause image kubeadm wants as `sandbox_image`, CNI plugins in `/opt/cni/bin`), and Debian's
//!   CNI plugins, iptables, nftables, conntrack, ipset, socat, ethtool and ebtables (kubeadm's
//!   preflight checks look for them);
//! - the kubelet, kubeadm and kubectl from the directory the build is given ([`crate::kube_bin`]),
//!   with the kubelet's unit and the drop-in kubeadm expects, enabled;
//! - every image that kubeadm's `config images list` names — the control plane, etcd, CoreDNS,
//!   kube-proxy, pause — built by [`crate::oci`] from the binaries in the same directory and
//!   imported into containerd's `k8s.io` namespace **at build time**, by the image's own
//!   containerd run in a chroot in a private mount namespace (its own socket, no CRI plugin), so
//!   the node's first boot finds them unpacked and kubeadm pulls nothing;
//! - `br_netfilter` and `overlay` loaded at boot, IP forwarding and bridge netfilter on, swap
//!   masked;
//! - `/etc/capstan/node-image.json`: what went in (also written beside the image).
//!
//! The root filesystem ([`crate::rootfs`]) and the image archives (by a digest of what went into
//! them) are cached; each build copies the cached tree, adds the node's files and makes the disk
//! ([`crate::disk`]), so nothing a build adds ever lands in the cache.

use crate::kube_bin::{Binary, KubeBinError, KubeBinaries, WantedImage};
use crate::oci::{Content, Entry, Image, OciError, Written};
use crate::rootfs::Recipe;
use crate::{RamdiskError, run};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Installed in the chroot after debootstrap's base set.
const CHROOT_PACKAGES: &[&str] = &[
    "cloud-init",
    // The generic kernel, not the cloud one: bare-metal machines need its storage and NIC drivers.
    "linux-image-amd64",
    "initramfs-tools",
    "openssh-server",
    "locales",
    // cloud-init's ntp module configures the NTP client it finds instead of installing chrony.
    "systemd-timesyncd",
    // Turns the DNS servers cloud-init writes for a static address into /etc/resolv.conf.
    "resolvconf",
    // cloud-init's growpart module grows the root partition to the disk it was written to.
    "cloud-guest-utils",
    "fdisk",
    // The container runtime the kubelet talks to, and what runs the containers.
    "containerd",
    "runc",
    "containernetworking-plugins",
    // Without a profile loader, containerd cannot give containers the AppArmor profile Debian's
    // kernel expects them to have.
    "apparmor",
    // What kubeadm's preflight checks and kube-proxy use.
    "iptables",
    "nftables",
    "conntrack",
    "ipset",
    "socat",
    "ethtool",
    "ebtables",
];

/// The node image's root filesystem.
pub const RECIPE: Recipe<'static> = Recipe {
    name: "node",
    base_packages: crate::cloud_image::BASE_PACKAGES,
    chroot_packages: CHROOT_PACKAGES,
};

/// Free space in the root filesystem beyond its files. A node grows its root partition to the
/// disk at first boot (cloud-init's growpart); this is what a disk the image's own size gets.
pub const DEFAULT_ROOT_FREE_BYTES: u64 = 1 << 30;
/// Where the image says what it holds, on the node.
pub const MANIFEST_ON_NODE: &str = "etc/capstan/node-image.json";
/// containerd's namespace for the kubelet's images.
pub const K8S_NAMESPACE: &str = "k8s.io";
/// `PATH` in every image.
const IMAGE_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The tools of the kube-proxy image, from the node's root filesystem: iptables in both of its
/// modes with their `-save`/`-restore` forms (symlinks as Debian has them, so the image chooses
/// the mode the node does), nft for kube-proxy's nftables mode, conntrack and ipset.
const KUBE_PROXY_TOOLS: &[&str] = &[
    "usr/sbin/iptables",
    "usr/sbin/iptables-save",
    "usr/sbin/iptables-restore",
    "usr/sbin/ip6tables",
    "usr/sbin/ip6tables-save",
    "usr/sbin/ip6tables-restore",
    "usr/sbin/iptables-nft",
    "usr/sbin/iptables-nft-save",
    "usr/sbin/iptables-nft-restore",
    "usr/sbin/ip6tables-nft",
    "usr/sbin/ip6tables-nft-save",
    "usr/sbin/ip6tables-nft-restore",
    "usr/sbin/iptables-legacy",
    "usr/sbin/iptables-legacy-save",
    "usr/sbin/iptables-legacy-restore",
    "usr/sbin/ip6tables-legacy",
    "usr/sbin/ip6tables-legacy-save",
    "usr/sbin/ip6tables-legacy-restore",
    "usr/sbin/nft",
    "usr/sbin/conntrack",
    "usr/sbin/ipset",
];
/// iptables loads its matches and targets from here at run time (dlopen), so ldd never names them.
const XTABLES_EXTENSIONS: &str = "usr/lib/x86_64-linux-gnu/xtables";
/// Where Debian's containernetworking-plugins are; linked into `/opt/cni/bin`.
const DEBIAN_CNI_DIR: &str = "usr/lib/cni";

/// Why a node image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum NodeImageError {
    #[error(
        "building a node image needs root (debootstrap, chroot, mount namespaces): run it as root or with sudo"
    )]
    NotRoot,
    #[error("{tool} is not installed: install the Debian package {package}")]
    Tool {
        tool: &'static str,
        package: &'static str,
    },
    #[error(transparent)]
    Binaries(#[from] KubeBinError),
    #[error(transparent)]
    Build(#[from] RamdiskError),
    #[error(transparent)]
    Archive(#[from] OciError),
    #[error(
        "{path} is dynamically linked ({interpreter}), but the {image} image holds the binary alone: give a statically linked build (CGO_ENABLED=0, as the release's is)"
    )]
    Dynamic {
        image: String,
        path: String,
        interpreter: String,
    },
    #[error("the node root filesystem {} has no /{path}, which {why}", root.display())]
    RootFile {
        root: PathBuf,
        path: String,
        why: &'static str,
    },
    #[error(
        "{binary} needs {missing}, which the node image's Debian {suite} does not have: give a static build, or one built against Debian {suite}'s libraries"
    )]
    Libraries {
        binary: String,
        missing: String,
        suite: &'static str,
    },
    #[error(
        "importing the images into the node image's containerd: {detail}\n--- containerd's log ends ---\n{log}"
    )]
    Import { detail: String, log: String },
    #[error("{what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> NodeImageError {
    let path = path.to_owned();
    move |source| NodeImageError::Io { what, path, source }
}

/// How to build a node image.
#[derive(Clone, Debug)]
pub struct NodeImageBuild {
    /// The directory with the Kubernetes binaries ([`crate::kube_bin::REQUIRED`]).
    pub kubernetes_bin: PathBuf,
    /// Where the qcow2, its `.sha256` and the manifest go.
    pub out: PathBuf,
    /// The package cache (root filesystems, image archives).
    pub cache: PathBuf,
    /// The Debian mirror debootstrap uses when the root filesystem is not cached.
    pub mirror: String,
    /// Free space in the root filesystem beyond its files.
    pub root_free: u64,
    /// Compressed clusters (the default of `capstan image build`) or plain ones.
    pub qcow2: crate::disk::Qcow2,
}

/// One binary in the manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BinaryEntry {
    pub version: String,
    pub sha256: String,
    pub bytes: u64,
    /// `/usr/bin/kubelet` on the node, or the image it is in.
    pub installed_as: String,
}

/// The disk in the manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskEntry {
    pub file: String,
    pub format: String,
    pub sha256: String,
    pub bytes: u64,
}

/// The Debian side of the manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DebianEntry {
    pub suite: String,
    /// The kernel the image boots (`/boot/vmlinuz-…`).
    pub kernel: String,
    /// Every installed package with its version.
    pub packages: BTreeMap<String, String>,
}

/// What a node image holds (`node-<version>.json`, and `/etc/capstan/node-image.json` on the node).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeManifest {
    pub kubernetes_version: String,
    pub architecture: String,
    pub debian: DebianEntry,
    pub binaries: BTreeMap<String, BinaryEntry>,
    /// In kubeadm's order (`kubeadm config images list`).
    pub images: Vec<Written>,
    /// containerd's `sandbox_image`.
    pub sandbox_image: String,
    /// Where the images are: containerd's namespace, imported at build time.
    pub containerd_namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskEntry>,
}

/// A built node image.
#[derive(Clone, Debug)]
pub struct NodeImage {
    pub qcow2: PathBuf,
    pub sha256: String,
    /// `<qcow2>.sha256`, in `sha256sum`'s format.
    pub sha256_file: PathBuf,
    pub manifest_file: PathBuf,
    pub manifest: NodeManifest,
}

/// An image archive written by [`archives`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveFile {
    pub file: String,
    #[serde(flatten)]
    pub written: Written,
}

fn is_root() -> bool {
    // The effective uid is the third field of /proc/self/status's `Uid:` line.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .any(|dir| dir.join(tool).is_file())
}

/// Every tool a build runs, with the Debian package that has it.
fn require(tools: &[(&'static str, &'static str)]) -> Result<(), NodeImageError> {
    if !is_root() {
        return Err(NodeImageError::NotRoot);
    }
    for (tool, package) in tools {
        let present = if tool.starts_with('/') {
            Path::new(tool).is_file()
        } else {
            on_path(tool)
        };
        if !present {
            return Err(NodeImageError::Tool { tool, package });
        }
    }
    Ok(())
}

const ARCHIVE_TOOLS: &[(&str, &str)] = &[("debootstrap", "debootstrap"), ("chroot", "coreutils")];
const DISK_TOOLS: &[(&str, &str)] = &[
    ("unshare", "util-linux"),
    ("mkfs.ext4", "e2fsprogs"),
    ("mkfs.vfat", "dosfstools"),
    ("mcopy", "mtools"),
    ("syslinux", "syslinux"),
    ("/usr/lib/syslinux/mbr/mbr.bin", "syslinux-common"),
    ("sfdisk", "fdisk"),
    ("qemu-img", "qemu-utils"),
];

/// A path inside `root`, resolved as the root's own programs would see it: every symlink met on
/// the way is recorded in `links` (its path and target, as in the tree), and the path returned
/// has no symlink in it.
fn resolve_in_root(
    root: &Path,
    path: &str,
    links: &mut BTreeMap<String, String>,
) -> Result<String, NodeImageError> {
    let missing = |why: &'static str| NodeImageError::RootFile {
        root: root.to_owned(),
        path: path.trim_start_matches('/').to_owned(),
        why,
    };
    let mut resolved: Vec<String> = Vec::new();
    let mut pending: VecDeque<String> = path.split('/').map(str::to_owned).collect();
    let mut hops = 0;
    while let Some(part) = pending.pop_front() {
        match part.as_str() {
            "" | "." => continue,
            ".." => {
                resolved.pop();
                continue;
            }
            _ => {}
        }
        resolved.push(part);
        let relative = resolved.join("/");
        let full = root.join(&relative);
        let meta =
            std::fs::symlink_metadata(&full).map_err(|_| missing("the images are built from"))?;
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                return Err(missing("resolves through a symlink loop"));
            }
            let target = std::fs::read_link(&full).map_err(io("reading", &full))?;
            let target = target.to_string_lossy().into_owned();
            links.insert(relative, target.clone());
            resolved.pop();
            if target.starts_with('/') {
                resolved.clear();
            }
            for (i, piece) in target.split('/').enumerate() {
                pending.insert(i, piece.to_owned());
            }
        }
    }
    Ok(resolved.join("/"))
}

/// The shared libraries `files` (paths inside `root`) need, as `ldd` run in the chroot names them;
/// `Err` lists the ones it could not find.
fn chroot_libraries(root: &Path, files: &[String]) -> Result<Vec<String>, NodeImageError> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let out = Command::new("chroot")
        .arg(root)
        .arg("ldd")
        .args(files.iter().map(|f| format!("/{f}")))
        .output()
        .map_err(io("running ldd in", root))?;
    // ldd exits non-zero when one of several files is static; each static one says so itself.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libraries = BTreeSet::new();
    let mut missing = BTreeSet::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with('\t') || l.starts_with(' '))
    {
        let line = line.trim();
        if let Some((name, rest)) = line.split_once("=> ") {
            if rest.starts_with("not found") {
                missing.insert(name.trim().to_owned());
            } else if let Some(path) = rest
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/'))
            {
                libraries.insert(path.to_owned());
            }
        } else if let Some(path) = line
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        {
            libraries.insert(path.to_owned());
        }
    }
    if !missing.is_empty() {
        return Err(NodeImageError::Libraries {
            binary: files.join(", "),
            missing: missing.into_iter().collect::<Vec<_>>().join(", "),
            suite: crate::rootfs::SUITE,
        });
    }
    Ok(libraries.into_iter().collect())
}

/// Layer entries for `paths` of the node's root filesystem, their shared libraries and every
/// symlink on the way, each at the path it has in the tree.
fn rootfs_entries(root: &Path, paths: &[String]) -> Result<Vec<Entry>, NodeImageError> {
    let mut links = BTreeMap::new();
    let mut files = BTreeSet::new();
    for path in paths {
        files.insert(resolve_in_root(root, path, &mut links)?);
    }
    let wanted: Vec<String> = files.iter().cloned().collect();
    for library in chroot_libraries(root, &wanted)? {
        files.insert(resolve_in_root(root, &library, &mut links)?);
    }
    // The libraries' own dependencies are in ldd's answer already (it lists the whole closure).
    let mut entries = Vec::new();
    for file in &files {
        let full = root.join(file);
        let meta = std::fs::metadata(&full).map_err(io("reading", &full))?;
        entries.push(Entry::File {
            path: file.clone(),
            mode: std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777,
            content: Content::File(full),
        });
    }
    for (path, target) in links {
        entries.push(Entry::Symlink { path, target });
    }
    Ok(entries)
}

/// The static binary `binary` at `path` in an image, refused when it is dynamically linked.
fn static_binary(image: &str, binary: &Binary, path: &str) -> Result<Entry, NodeImageError> {
    if let Some(interpreter) = &binary.interpreter {
        return Err(NodeImageError::Dynamic {
            image: image.to_owned(),
            path: binary.path.display().to_string(),
            interpreter: interpreter.clone(),
        });
    }
    Ok(Entry::File {
        path: path.to_owned(),
        mode: 0o755,
        content: Content::File(binary.path.clone()),
    })
}

/// What kubeadm's image `wanted` is made of: its binary (and, for kube-proxy, the node's
/// iptables), how its process starts, which user runs it.
pub fn image_for(
    wanted: &WantedImage,
    binaries: &KubeBinaries,
    root: &Path,
) -> Result<Image, NodeImageError> {
    let binary = |name: &str| {
        binaries.get(name).ok_or_else(|| {
            NodeImageError::Binaries(KubeBinError::Missing {
                dir: binaries.dir.display().to_string(),
                missing: name.to_owned(),
            })
        })
    };
    let main = binary(&wanted.component)?;
    let tmp = Entry::Dir {
        path: "tmp".into(),
        mode: 0o1777,
    };
    let at_local_bin = |name: &str| format!("usr/local/bin/{name}");
    let mut image = Image {
        reference: wanted.reference.clone(),
        architecture: "amd64".into(),
        entrypoint: vec![format!("/{}", at_local_bin(&wanted.component))],
        cmd: Vec::new(),
        env: vec![IMAGE_PATH.into()],
        user: None,
        working_dir: "/".into(),
        created_by: format!(
            "capstan image build: {} {} (sha256 {})",
            main.name, main.version, main.sha256
        ),
        entries: vec![tmp],
    };
    match wanted.component.as_str() {
        // kubeadm's static Pods name the command (`kube-apiserver …`, `etcd …`), found on PATH
        // where upstream's images have it.
        "kube-apiserver" | "kube-controller-manager" | "kube-scheduler" => {
            image.entries.push(static_binary(
                &wanted.reference,
                main,
                &at_local_bin(&main.name),
            )?);
        }
        "etcd" => {
            image.entries.push(static_binary(
                &wanted.reference,
                main,
                &at_local_bin("etcd"),
            )?);
            for tool in crate::kube_bin::OPTIONAL {
                if let Some(extra) = binaries.get(tool) {
                    image.entries.push(static_binary(
                        &wanted.reference,
                        extra,
                        &at_local_bin(tool),
                    )?);
                }
            }
        }
        "kube-proxy" => {
            image.entries.push(static_binary(
                &wanted.reference,
                main,
                &at_local_bin("kube-proxy"),
            )?);
            let extensions = root.join(XTABLES_EXTENSIONS);
            let mut paths: Vec<String> = KUBE_PROXY_TOOLS.iter().map(|p| (*p).to_owned()).collect();
            let listed = std::fs::read_dir(&extensions).map_err(|_| NodeImageError::RootFile {
                root: root.to_owned(),
                path: XTABLES_EXTENSIONS.into(),
                why: "holds iptables' extensions (package libxtables12)",
            })?;
            let mut modules: Vec<String> = listed
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".so"))
                .map(|name| format!("{XTABLES_EXTENSIONS}/{name}"))
                .collect();
            modules.sort();
            paths.extend(modules);
            image.entries.extend(rootfs_entries(root, &paths)?);
            image.entries.push(Entry::Dir {
                path: "run".into(),
                mode: 0o755,
            });
        }
        // As upstream's: the binary at the root, started by the Deployment's args alone. It runs
        // as root, which binding port 53 needs without a file capability on the binary.
        "coredns" => {
            image.entrypoint = vec!["/coredns".into()];
            image
                .entries
                .push(static_binary(&wanted.reference, main, "coredns")?);
        }
        // The sandbox's first process, as upstream's runs it: an unprivileged user.
        "pause" => {
            image.entrypoint = vec!["/pause".into()];
            image.user = Some("65535:65535".into());
            image
                .entries
                .push(static_binary(&wanted.reference, main, "pause")?);
        }
        other => {
            return Err(NodeImageError::Binaries(KubeBinError::UnknownImage {
                kubernetes: binaries.kubernetes_version.clone(),
                image: format!("{} ({other})", wanted.reference),
            }));
        }
    }
    Ok(image)
}

/// The archive of `image`, from the cache when one with the same fingerprint is there.
fn cached_archive(
    image: &Image,
    cache: &Path,
    progress: &dyn Fn(&str),
) -> Result<(PathBuf, Written), NodeImageError> {
    let dir = cache.join("oci");
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    let fingerprint = image.fingerprint()?;
    let archive = dir.join(format!("{fingerprint}.tar"));
    let record = dir.join(format!("{fingerprint}.json"));
    if archive.is_file()
        && let Ok(text) = std::fs::read(&record)
        && let Ok(written) = serde_json::from_slice::<Written>(&text)
    {
        progress(&format!("image {} (cached)", image.reference));
        return Ok((archive, written));
    }
    progress(&format!(
        "image {}: writing its OCI archive",
        image.reference
    ));
    let written = image.write_archive(&archive)?;
    let json = serde_json::to_vec_pretty(&written).unwrap_or_default();
    std::fs::write(&record, json).map_err(io("writing", &record))?;
    progress(&format!(
        "image {}: {} MiB, {}",
        image.reference,
        written.archive_bytes >> 20,
        written.manifest_digest
    ));
    Ok((archive, written))
}

/// Every image kubeadm wants as an archive (in the cache), in kubeadm's order.
fn build_archives(
    binaries: &KubeBinaries,
    root: &Path,
    cache: &Path,
    progress: &dyn Fn(&str),
) -> Result<Vec<(PathBuf, Written)>, NodeImageError> {
    binaries
        .images
        .iter()
        .map(|wanted| {
            let image = image_for(wanted, binaries, root)?;
            cached_archive(&image, cache, progress)
        })
        .collect()
}

/// Writes the image archives kubeadm's images would be imported from into `out`
/// (`<name>_<tag>.tar`, and `images.json` listing them), without making a disk.
pub fn archives(
    kubernetes_bin: &Path,
    out: &Path,
    cache: &Path,
    mirror: &str,
    progress: &dyn Fn(&str),
) -> Result<Vec<ArchiveFile>, NodeImageError> {
    require(ARCHIVE_TOOLS)?;
    progress(&format!(
        "checking the Kubernetes binaries in {}",
        kubernetes_bin.display()
    ));
    let binaries = KubeBinaries::open(kubernetes_bin)?;
    let root = crate::rootfs::bootstrap(cache, &RECIPE, mirror, progress)?;
    let built = build_archives(&binaries, &root, cache, progress)?;
    std::fs::create_dir_all(out).map_err(io("creating", out))?;
    let mut files = Vec::new();
    for ((archive, written), wanted) in built.into_iter().zip(&binaries.images) {
        let tag = crate::oci::split_reference(&written.reference)
            .map(|(_, tag)| tag.to_owned())
            .unwrap_or_default();
        let name = format!("{}_{tag}.tar", wanted.component);
        let target = out.join(&name);
        let _ = std::fs::remove_file(&target);
        if std::fs::hard_link(&archive, &target).is_err() {
            std::fs::copy(&archive, &target).map_err(io("copying", &target))?;
        }
        files.push(ArchiveFile {
            file: name,
            written,
        });
    }
    let listing = out.join("images.json");
    std::fs::write(
        &listing,
        serde_json::to_vec_pretty(&files).unwrap_or_default(),
    )
    .map_err(io("writing", &listing))?;
    Ok(files)
}

/// Writes a file into the staged tree, replacing what the package put there.
fn put(root: &Path, relative: &str, contents: &[u8], mode: u32) -> Result<(), NodeImageError> {
    let path = root.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, contents).map_err(io("writing", &path))?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(io("setting the mode of", &path))
}

/// Makes `relative` a symlink to `target` in the staged tree.
fn link(root: &Path, relative: &str, target: &str) -> Result<(), NodeImageError> {
    let path = root.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    let _ = std::fs::remove_file(&path);
    std::os::unix::fs::symlink(target, &path).map_err(io("linking", &path))
}

/// The kubelet's unit: started after containerd and restarted forever, since until kubeadm has
/// written its configuration it exits at once.
const KUBELET_UNIT: &str = "[Unit]
Description=kubelet: the Kubernetes node agent
Documentation=https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/
Wants=network-online.target
After=network-online.target containerd.service

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
";

/// What `kubeadm init|join` expects of the kubelet's unit: it writes the kubeconfigs, the
/// KubeletConfiguration and `kubeadm-flags.env` (`KUBELET_KUBEADM_ARGS`), then restarts the
/// kubelet, whose command line this drop-in makes from them; `/etc/default/kubelet` is the
/// administrator's (`KUBELET_EXTRA_ARGS`).
const KUBEADM_DROP_IN: &str = "# Written by capstan image build: the kubelet as kubeadm configures it.
[Service]
Environment=\"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf\"
Environment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml\"
# kubeadm init|join writes KUBELET_KUBEADM_ARGS here.
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# The administrator's KUBELET_EXTRA_ARGS, which come last and so win.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
";

const DEFAULT_KUBELET: &str = "# Extra kubelet flags, after kubeadm's: KUBELET_EXTRA_ARGS=--node-labels=…\nKUBELET_EXTRA_ARGS=\n";

fn containerd_config(sandbox_image: &str) -> String {
    format!(
        r#"# Written by capstan image build: containerd for the kubelet.
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  # kubeadm's pause image, imported into the k8s.io namespace with the others: no sandbox pulls.
  sandbox_image = "{sandbox_image}"

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  # kubeadm configures the kubelet with cgroupDriver: systemd; the runtime must use the same.
  SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".cni]
  # Debian's plugins are linked here, where CNI installers (Cilium, Calico, Flannel) put theirs.
  bin_dir = "/opt/cni/bin"
  conf_dir = "/etc/cni/net.d"
"#
    )
}

/// Loaded at boot: containerd's overlayfs snapshotter, and bridged pod traffic through netfilter.
const MODULES_LOAD: &str =
    "# Written by capstan image build: what Kubernetes networking needs.\noverlay\nbr_netfilter\n";
/// Applied by systemd-sysctl, which runs after the modules above are loaded. kubeadm 1.35's
/// preflight checks IPv6 forwarding too (`net.ipv6.conf.default.forwarding`), even on an IPv4
/// cluster.
const SYSCTL: &str = "# Written by capstan image build: kubeadm's preflight checks these.\n\
net.ipv4.ip_forward = 1\n\
net.ipv6.conf.all.forwarding = 1\n\
net.ipv6.conf.default.forwarding = 1\n\
net.bridge.bridge-nf-call-iptables = 1\n\
net.bridge.bridge-nf-call-ip6tables = 1\n";

/// Puts the host binaries, units and configuration into the staged tree.
fn install_node_files(
    staged: &Path,
    binaries: &KubeBinaries,
    sandbox_image: &str,
) -> Result<(), NodeImageError> {
    for name in crate::kube_bin::HOST_BINARIES {
        if let Some(binary) = binaries.get(name) {
            let target = staged.join("usr/bin").join(name);
            let _ = std::fs::remove_file(&target);
            std::fs::copy(&binary.path, &target).map_err(io("copying", &binary.path))?;
            std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .map_err(io("setting the mode of", &target))?;
        }
    }
    // A dynamically linked kubelet (the release's is one) must find its libraries on the node.
    let dynamic: Vec<String> = crate::kube_bin::HOST_BINARIES
        .iter()
        .filter(|name| binaries.get(name).is_some_and(|b| b.interpreter.is_some()))
        .map(|name| format!("usr/bin/{name}"))
        .collect();
    chroot_libraries(staged, &dynamic)?;

    put(
        staged,
        "usr/lib/systemd/system/kubelet.service",
        KUBELET_UNIT.as_bytes(),
        0o644,
    )?;
    put(
        staged,
        "usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
        KUBEADM_DROP_IN.as_bytes(),
        0o644,
    )?;
    put(
        staged,
        "etc/default/kubelet",
        DEFAULT_KUBELET.as_bytes(),
        0o644,
    )?;
    // What `systemctl enable` makes, without running systemctl in the chroot.
    link(
        staged,
        "etc/systemd/system/multi-user.target.wants/kubelet.service",
        "/usr/lib/systemd/system/kubelet.service",
    )?;
    let containerd_unit = ["usr/lib/systemd/system", "lib/systemd/system"]
        .iter()
        .map(|dir| format!("{dir}/containerd.service"))
        .find(|unit| staged.join(unit).exists())
        .ok_or_else(|| NodeImageError::RootFile {
            root: staged.to_owned(),
            path: "lib/systemd/system/containerd.service".into(),
            why: "the containerd package installs",
        })?;
    link(
        staged,
        "etc/systemd/system/multi-user.target.wants/containerd.service",
        &format!("/{containerd_unit}"),
    )?;
    put(
        staged,
        "etc/containerd/config.toml",
        containerd_config(sandbox_image).as_bytes(),
        0o644,
    )?;
    put(
        staged,
        "etc/modules-load.d/kubernetes.conf",
        MODULES_LOAD.as_bytes(),
        0o644,
    )?;
    put(
        staged,
        "etc/sysctl.d/90-kubernetes.conf",
        SYSCTL.as_bytes(),
        0o644,
    )?;
    // The kubelet refuses to start with swap on; no swap unit ever starts with its target masked.
    link(staged, "etc/systemd/system/swap.target", "/dev/null")?;
    put(
        staged,
        "etc/cloud/cloud.cfg.d/91-capstan-locale.cfg",
        crate::cloud_image::LOCALE_CFG.as_bytes(),
        0o644,
    )?;
    let cni = staged.join(DEBIAN_CNI_DIR);
    let plugins = std::fs::read_dir(&cni).map_err(|_| NodeImageError::RootFile {
        root: staged.to_owned(),
        path: DEBIAN_CNI_DIR.into(),
        why: "the containernetworking-plugins package installs",
    })?;
    for plugin in plugins.flatten() {
        let name = plugin.file_name().to_string_lossy().into_owned();
        link(
            staged,
            &format!("opt/cni/bin/{name}"),
            &format!("/{DEBIAN_CNI_DIR}/{name}"),
        )?;
    }
    // The host keys openssh-server made when it was installed would be every node's, and anyone's
    // who downloads the image: cloud-init's ssh module makes each machine its own at first boot.
    let ssh = staged.join("etc/ssh");
    if let Ok(entries) = std::fs::read_dir(&ssh) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("ssh_host_") {
                std::fs::remove_file(entry.path()).map_err(io("removing", &entry.path()))?;
            }
        }
    }
    std::fs::create_dir_all(staged.join("etc/cni/net.d"))
        .map_err(io("creating", &staged.join("etc/cni/net.d")))?;
    Ok(())
}

/// The configuration of the containerd that imports the images at build time: the node's root
/// as its root, state, socket and temporary mounts under a directory of its own, no CRI plugin
/// (nothing runs), no `/opt/containerd`.
fn import_config(dir_in_root: &str) -> String {
    format!(
        r#"version = 2
root = "/var/lib/containerd"
state = "{dir_in_root}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt"]

[grpc]
  address = "{dir_in_root}/containerd.sock"

[ttrpc]
  address = "{dir_in_root}/containerd.sock.ttrpc"
"#
    )
}

/// Stops the build-time containerd (SIGTERM, then waits) when dropped, whatever happened.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let _ = self.0.wait();
    }
}

/// An error with its sources, for a message that carries it as text.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Imports `archives` into the staged tree's containerd (`k8s.io` namespace, unpacked), with
/// the tree's own containerd in a chroot in a private mount namespace, and checks that each is
/// there under its reference with the digest the archive has.
fn import_images(
    staged: &Path,
    work: &Path,
    archives: &[(PathBuf, Written)],
    progress: &dyn Fn(&str),
) -> Result<(), NodeImageError> {
    const DIR: &str = "/tmp/capstan-import";
    let dir = staged.join(DIR.trim_start_matches('/'));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    std::fs::write(dir.join("config.toml"), import_config(DIR))
        .map_err(io("writing", &dir.join("config.toml")))?;
    let mut inside = Vec::new();
    for (i, (archive, _)) in archives.iter().enumerate() {
        let name = format!("{i}.tar");
        let target = dir.join(&name);
        if std::fs::hard_link(archive, &target).is_err() {
            std::fs::copy(archive, &target).map_err(io("copying", archive))?;
        }
        inside.push(format!("{DIR}/{name}"));
    }
    let log = work.join("containerd-import.log");
    let log_file = std::fs::File::create(&log).map_err(io("creating", &log))?;
    let log_err = log_file.try_clone().map_err(io("opening", &log))?;
    // The mounts containerd needs (and the ones it makes to unpack) live and die with its private
    // mount namespace; `exec` keeps one process, so stopping it is signalling this child.
    let script = "set -e\n\
        mount -t proc proc \"$1/proc\"\n\
        mount -t sysfs sysfs \"$1/sys\"\n\
        mount --rbind /dev \"$1/dev\"\n\
        exec chroot \"$1\" /usr/bin/containerd --config \"$2/config.toml\"\n";
    let child = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "capstan-import",
        ])
        .arg(staged)
        .arg(DIR)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        .spawn()
        .map_err(io("starting containerd in", staged))?;
    let daemon = Daemon(child);
    let ctr = |args: &[&str]| {
        let mut command = Command::new("chroot");
        command
            .arg(staged)
            .arg("/usr/bin/ctr")
            // ctr waits for the socket, so no polling here: it connects once containerd listens.
            .args(["--address", &format!("{DIR}/containerd.sock")])
            .args(["--connect-timeout", "120s", "--namespace", K8S_NAMESPACE])
            .args(args);
        run(&mut command).map_err(|e| NodeImageError::Import {
            detail: chain(&e),
            log: tail(&log, 20),
        })
    };
    for ((_, written), archive) in archives.iter().zip(&inside) {
        progress(&format!("containerd: importing {}", written.reference));
        ctr(&["images", "import", archive])?;
    }
    // REF TYPE DIGEST SIZE PLATFORMS LABELS
    let listed = ctr(&["images", "ls"])?;
    for (_, written) in archives {
        let found = listed.lines().any(|line| {
            let mut columns = line.split_whitespace();
            columns.next() == Some(written.reference.as_str())
                && columns.nth(1) == Some(written.manifest_digest.as_str())
        });
        if !found {
            return Err(NodeImageError::Import {
                detail: format!(
                    "{} is not in namespace {K8S_NAMESPACE} with digest {}; `ctr images ls` says:\n{listed}",
                    written.reference, written.manifest_digest
                ),
                log: tail(&log, 20),
            });
        }
    }
    drop(daemon);
    std::fs::remove_dir_all(&dir).map_err(io("removing", &dir))?;
    Ok(())
}

impl NodeImageBuild {
    /// `node-<version>`, the name of the image and its companions.
    fn stem(version: &str) -> String {
        format!("node-{version}")
    }

    /// Builds the image; `progress` hears one line per step.
    pub fn run(&self, progress: &dyn Fn(&str)) -> Result<NodeImage, NodeImageError> {
        require(ARCHIVE_TOOLS)?;
        require(DISK_TOOLS)?;
        progress(&format!(
            "checking the Kubernetes binaries in {}",
            self.kubernetes_bin.display()
        ));
        let binaries = KubeBinaries::open(&self.kubernetes_bin)?;
        let version = binaries.kubernetes_version.clone();
        progress(&format!(
            "Kubernetes {version}; kubeadm wants {}",
            binaries
                .images
                .iter()
                .map(|i| i.reference.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let root = crate::rootfs::bootstrap(&self.cache, &RECIPE, &self.mirror, progress)?;
        let archives = build_archives(&binaries, &root, &self.cache, progress)?;
        let sandbox_image = binaries
            .images
            .iter()
            .find(|i| i.component == "pause")
            .map(|i| i.reference.clone())
            .ok_or_else(|| {
                NodeImageError::Binaries(KubeBinError::UnknownImage {
                    kubernetes: version.clone(),
                    image: "(no pause image in kubeadm's list)".into(),
                })
            })?;

        let stem = Self::stem(&version);
        std::fs::create_dir_all(&self.out).map_err(io("creating", &self.out))?;
        let work = self.out.join(format!(".{stem}.work"));
        if work.exists() {
            // A mount namespace that died took its mounts with it, so a leftover is only files.
            std::fs::remove_dir_all(&work).map_err(io("removing", &work))?;
        }
        std::fs::create_dir_all(&work).map_err(io("creating", &work))?;
        let staged = work.join("root");
        progress("copying the cached root filesystem");
        run(Command::new("cp")
            .args(["-a", "--reflink=auto"])
            .arg(&root)
            .arg(&staged))?;
        let _ = std::fs::remove_file(staged.join(".capstan-complete"));
        progress("installing kubelet, kubeadm, kubectl, their units and the node's configuration");
        install_node_files(&staged, &binaries, &sandbox_image)?;
        progress(&format!(
            "importing {} images into containerd's {K8S_NAMESPACE} namespace",
            archives.len()
        ));
        import_images(&staged, &work, &archives, progress)?;

        let mut manifest = NodeManifest {
            kubernetes_version: version.clone(),
            architecture: "amd64".into(),
            debian: DebianEntry {
                suite: crate::rootfs::SUITE.into(),
                kernel: kernel_version(&staged),
                packages: crate::rootfs::installed_packages(&staged)?,
            },
            binaries: binaries
                .binaries
                .values()
                .map(|b| {
                    let installed_as = if crate::kube_bin::HOST_BINARIES.contains(&b.name.as_str())
                    {
                        format!("/usr/bin/{}", b.name)
                    } else {
                        binaries
                            .images
                            .iter()
                            .find(|i| {
                                i.component == b.name
                                    || (i.component == "etcd" && b.name.starts_with("etcd"))
                            })
                            .map(|i| i.reference.clone())
                            .unwrap_or_default()
                    };
                    (
                        b.name.clone(),
                        BinaryEntry {
                            version: b.version.clone(),
                            sha256: b.sha256.clone(),
                            bytes: b.bytes,
                            installed_as,
                        },
                    )
                })
                .collect(),
            images: archives.iter().map(|(_, w)| w.clone()).collect(),
            sandbox_image,
            containerd_namespace: K8S_NAMESPACE.into(),
            disk: None,
        };
        put(
            &staged,
            MANIFEST_ON_NODE,
            &serde_json::to_vec_pretty(&manifest).unwrap_or_default(),
            0o644,
        )?;

        let raw = work.join(format!("{stem}.img"));
        let qcow2 = self.out.join(format!("{stem}.qcow2"));
        crate::disk::write(
            &staged,
            &work,
            &raw,
            &qcow2,
            self.qcow2,
            self.root_free,
            progress,
        )?;
        progress("sha256 of the qcow2");
        let sha256 = crate::sha256_file(&qcow2)?;
        let bytes = std::fs::metadata(&qcow2)
            .map_err(io("reading", &qcow2))?
            .len();
        let qcow2_name = format!("{stem}.qcow2");
        let sha256_file = self.out.join(format!("{qcow2_name}.sha256"));
        std::fs::write(&sha256_file, format!("{sha256}  {qcow2_name}\n"))
            .map_err(io("writing", &sha256_file))?;
        manifest.disk = Some(DiskEntry {
            file: qcow2_name,
            format: "qcow2".into(),
            sha256: sha256.clone(),
            bytes,
        });
        let manifest_file = self.out.join(format!("{stem}.json"));
        std::fs::write(
            &manifest_file,
            serde_json::to_vec_pretty(&manifest).unwrap_or_default(),
        )
        .map_err(io("writing", &manifest_file))?;
        std::fs::remove_dir_all(&work).map_err(io("removing", &work))?;
        Ok(NodeImage {
            qcow2,
            sha256,
            sha256_file,
            manifest_file,
            manifest,
        })
    }
}

/// The version of the kernel in the tree's `/boot` (`6.1.0-41-amd64`).
fn kernel_version(root: &Path) -> String {
    let mut kernels: Vec<String> = std::fs::read_dir(root.join("boot"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_prefix("vmlinuz-")
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    kernels.sort();
    kernels.pop().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        for d in ["usr/lib/x86_64-linux-gnu", "usr/sbin", "etc/alternatives"] {
            std::fs::create_dir_all(root.join(d)).unwrap_or_else(|e| panic!("{e}"));
        }
        std::os::unix::fs::symlink("usr/lib", root.join("lib")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join("usr/sbin/xtables-nft-multi"), b"x")
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("xtables-nft-multi", root.join("usr/sbin/iptables-nft"))
            .unwrap_or_else(|e| panic!("{e}"));
        // Debian's alternatives: absolute links through /etc.
        std::os::unix::fs::symlink("/etc/alternatives/iptables", root.join("usr/sbin/iptables"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(
            "/usr/sbin/iptables-nft",
            root.join("etc/alternatives/iptables"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join("usr/lib/x86_64-linux-gnu/libc.so.6"), b"c")
            .unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    #[test]
    fn paths_resolve_inside_the_root_recording_every_symlink() {
        let dir = tree();
        let mut links = BTreeMap::new();
        let resolved = resolve_in_root(dir.path(), "/usr/sbin/iptables", &mut links)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resolved, "usr/sbin/xtables-nft-multi");
        assert_eq!(
            links,
            BTreeMap::from([
                (
                    "etc/alternatives/iptables".to_owned(),
                    "/usr/sbin/iptables-nft".to_owned()
                ),
                (
                    "usr/sbin/iptables".to_owned(),
                    "/etc/alternatives/iptables".to_owned()
                ),
                (
                    "usr/sbin/iptables-nft".to_owned(),
                    "xtables-nft-multi".to_owned()
                ),
            ])
        );
        let mut links = BTreeMap::new();
        let resolved = resolve_in_root(dir.path(), "/lib/x86_64-linux-gnu/libc.so.6", &mut links)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resolved, "usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(
            links,
            BTreeMap::from([("lib".to_owned(), "usr/lib".to_owned())])
        );
    }

    #[test]
    fn a_missing_path_or_a_loop_is_named() {
        let dir = tree();
        let mut links = BTreeMap::new();
        let err = resolve_in_root(dir.path(), "/usr/sbin/nft", &mut links)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("has no /usr/sbin/nft"), "{err}");
        std::os::unix::fs::symlink("loop-b", dir.path().join("loop-a"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("loop-a", dir.path().join("loop-b"))
            .unwrap_or_else(|e| panic!("{e}"));
        let err = resolve_in_root(dir.path(), "loop-a", &mut links)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("symlink loop"), "{err}");
    }

    #[test]
    fn containerd_is_configured_as_kubeadm_configures_the_kubelet() {
        let config = containerd_config("registry.k8s.io/pause:3.10.1");
        assert!(config.contains("sandbox_image = \"registry.k8s.io/pause:3.10.1\""));
        assert!(config.contains("SystemdCgroup = true"));
        assert!(config.contains("bin_dir = \"/opt/cni/bin\""));
        // The drop-in passes every variable kubeadm and the administrator set.
        for variable in [
            "$KUBELET_KUBECONFIG_ARGS",
            "$KUBELET_CONFIG_ARGS",
            "$KUBELET_KUBEADM_ARGS",
            "$KUBELET_EXTRA_ARGS",
        ] {
            assert!(KUBEADM_DROP_IN.contains(variable), "{variable}");
        }
        assert!(KUBEADM_DROP_IN.contains("EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env"));
        assert!(KUBEADM_DROP_IN.contains("EnvironmentFile=-/etc/default/kubelet"));
        assert!(SYSCTL.contains("net.ipv4.ip_forward = 1"));
        assert!(SYSCTL.contains("net.ipv6.conf.default.forwarding = 1"));
        assert!(MODULES_LOAD.contains("br_netfilter"));
    }

    #[test]
    fn the_node_recipe_has_its_own_cache() {
        assert!(RECIPE.dir_name().starts_with("node-rootfs-bookworm-"));
        assert_ne!(RECIPE.dir_name(), crate::cloud_image::RECIPE.dir_name());
    }
}
