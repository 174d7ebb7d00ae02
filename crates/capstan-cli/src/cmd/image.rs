//! `capstan image build --kubernetes-bin DIR --out DIR`: the Kubernetes node image (Debian 12,
//! containerd, the kubelet, kubeadm and kubectl, and every image kubeadm wants already in
//! containerd), as `node-<version>.qcow2` with its `.sha256` and a JSON manifest, for a
//! Metal3MachineTemplate or a KVMMachineTemplate (see `docs/images.md`).
//! `capstan image archives --kubernetes-bin DIR --out DIR`: only the OCI image archives of those
//! images, for loading into another containerd or a registry.

use crate::output::outln;
use crate::output::{Exit, Style};
use crate::stderr::errln;
use std::path::PathBuf;

/// `capstan image` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ImageCommand {
    /// Build the Kubernetes node image (qcow2 + sha256 + manifest) from a directory of
    /// Kubernetes binaries (debootstrap; needs root, and Debian's mirror the first time).
    Build(BuildArgs),
    /// Write the OCI image archives of the images kubeadm wants (control plane, etcd, CoreDNS,
    /// kube-proxy, pause), built from the same binaries, without a disk image.
    Archives(ArchivesArgs),
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The directory with kubelet, kubeadm, kubectl, kube-apiserver, kube-controller-manager,
    /// kube-scheduler, kube-proxy, etcd (and etcdctl), coredns and pause.
    #[arg(long, value_name = "DIR")]
    kubernetes_bin: PathBuf,
    /// Where node-<version>.qcow2, its .sha256 and node-<version>.json go.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Where the root filesystem and the image archives are kept between builds.
    #[arg(long, env = "CAPSTAN_CACHE")]
    cache: Option<PathBuf>,
    /// The Debian mirror debootstrap uses when the root filesystem is not cached.
    #[arg(long, default_value = capstan_ramdisk::rootfs::DEFAULT_MIRROR)]
    mirror: String,
    /// Free space in the root filesystem beyond its files, in MiB (the node grows its root
    /// partition to the disk at first boot).
    #[arg(long, value_name = "MIB", default_value_t = capstan_ramdisk::node_image::DEFAULT_ROOT_FREE_BYTES >> 20)]
    root_free_mib: u64,
    /// Write the qcow2's clusters uncompressed: about twice the size, a minute faster to build.
    #[arg(long)]
    uncompressed: bool,
}

#[derive(Debug, clap::Args)]
pub struct ArchivesArgs {
    /// The directory with the Kubernetes binaries (as for `capstan image build`).
    #[arg(long, value_name = "DIR")]
    kubernetes_bin: PathBuf,
    /// Where the archives (<name>_<tag>.tar) and images.json go.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Where the root filesystem (kube-proxy's iptables come from it) and the archives are kept.
    #[arg(long, env = "CAPSTAN_CACHE")]
    cache: Option<PathBuf>,
    /// The Debian mirror debootstrap uses when the root filesystem is not cached.
    #[arg(long, default_value = capstan_ramdisk::rootfs::DEFAULT_MIRROR)]
    mirror: String,
}

fn failed(e: &capstan_ramdisk::node_image::NodeImageError) -> anyhow::Error {
    anyhow::anyhow!(capstan_runtime::controller::ErrorChain(e).to_string())
}

pub fn run(command: ImageCommand, style: &Style) -> anyhow::Result<Exit> {
    let started = std::time::Instant::now();
    match command {
        ImageCommand::Build(args) => {
            let build = capstan_ramdisk::node_image::NodeImageBuild {
                kubernetes_bin: args.kubernetes_bin,
                out: args.out,
                cache: super::ramdisk::default_cache(args.cache),
                mirror: args.mirror,
                root_free: args.root_free_mib << 20,
                qcow2: if args.uncompressed {
                    capstan_ramdisk::disk::Qcow2::Plain
                } else {
                    capstan_ramdisk::disk::Qcow2::Compressed
                },
            };
            let image = build
                .run(&|step| errln!("{} {step}", style.ok("image:")))
                .map_err(|e| failed(&e))?;
            errln!(
                "{} Kubernetes {}, {} images, {} MiB qcow2, in {:.0} s; manifest {}",
                style.ok("image:"),
                image.manifest.kubernetes_version,
                image.manifest.images.len(),
                image.manifest.disk.as_ref().map_or(0, |d| d.bytes >> 20),
                started.elapsed().as_secs_f64(),
                image.manifest_file.display()
            );
            outln!("{}  {}", image.sha256, image.qcow2.display());
            Ok(Exit::Ok)
        }
        ImageCommand::Archives(args) => {
            let files = capstan_ramdisk::node_image::archives(
                &args.kubernetes_bin,
                &args.out,
                &super::ramdisk::default_cache(args.cache),
                &args.mirror,
                &|step| errln!("{} {step}", style.ok("image:")),
            )
            .map_err(|e| failed(&e))?;
            for file in &files {
                outln!(
                    "{}  {}  {}",
                    file.written.manifest_digest,
                    args.out.join(&file.file).display(),
                    file.written.reference
                );
            }
            Ok(Exit::Ok)
        }
    }
}
