//! `capstan ramdisk build --out DIR`: the provisioning ramdisk from Debian packages (see
//! `docs/ramdisk.md`); `capstan serve` finds it in `DATA_DIR/ramdisk` or takes `--ramdisk DIR`.
//! `capstan ramdisk test-image --out DIR`: the bootable disk image the host end-to-end tests provision.
//! `capstan ramdisk cloud-image --out DIR`: the Debian cloud-init image (with the kubeadm test
//! stand-in) the cluster end-to-end tests provision.

use crate::output::outln;
use crate::output::{Exit, Style};
use crate::stderr::errln;
use anyhow::Context;
use std::path::PathBuf;

/// `capstan ramdisk` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum RamdiskCommand {
    /// Build the provisioning ramdisk: kernel, initramfs with the agent, ISOLINUX, a generic ISO.
    Build(BuildArgs),
    /// Build the test OS image (disk.img, disk.qcow2) that reports its config drive on the console.
    TestImage(TestImageArgs),
    /// Build the Debian cloud-init image (cloud.img, cloud.qcow2, vmlinuz, initrd.img) with the
    /// kubeadm TEST STAND-IN, for the cluster end-to-end tests (debootstrap; root, network).
    CloudImage(CloudImageArgs),
}

#[derive(Debug, clap::Args)]
pub struct CloudImageArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Where the bootstrapped root filesystem is kept between builds.
    #[arg(long, env = "CAPSTAN_CACHE")]
    cache: Option<PathBuf>,
    /// The Debian mirror debootstrap uses.
    #[arg(long, default_value = capstan_ramdisk::cloud_image::DEFAULT_MIRROR)]
    mirror: String,
    /// Free space in the root filesystem beyond its files, in MiB (the image grows by as much).
    #[arg(long, value_name = "MIB", default_value_t = capstan_ramdisk::cloud_image::DEFAULT_ROOT_FREE_BYTES / (1024 * 1024))]
    root_free_mib: u64,
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// The capstan-agent binary (default: capstan-agent next to this executable).
    #[arg(long)]
    agent: Option<PathBuf>,
    /// Where downloaded Debian packages are kept.
    #[arg(long, env = "CAPSTAN_CACHE")]
    cache: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct TestImageArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Where downloaded Debian packages are kept.
    #[arg(long, env = "CAPSTAN_CACHE")]
    cache: Option<PathBuf>,
}

/// The package cache: given, else `$XDG_CACHE_HOME/capstan`, else `~/.cache/capstan`.
pub fn default_cache(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir)
            .join("capstan")
    })
}

pub fn run(command: RamdiskCommand, style: &Style) -> anyhow::Result<Exit> {
    match command {
        RamdiskCommand::Build(args) => {
            let agent = match args.agent {
                Some(agent) => agent,
                None => std::env::current_exe()
                    .context("locating this executable")?
                    .with_file_name("capstan-agent"),
            };
            let build = capstan_ramdisk::RamdiskBuild {
                out: args.out.clone(),
                agent,
                cache: default_cache(args.cache),
            };
            let started = std::time::Instant::now();
            let manifest = build
                .run(&|step| errln!("{} {step}", style.ok("ramdisk:")))
                .map_err(|e| {
                    anyhow::anyhow!(capstan_runtime::controller::ErrorChain(&e).to_string())
                })?;
            outln!(
                "ramdisk in {} ({:.1} s): kernel {} ({} MiB), initrd {} MiB, ISO {} MiB, {} modules",
                args.out.display(),
                started.elapsed().as_secs_f64(),
                manifest.kernel_version,
                manifest.kernel_bytes >> 20,
                manifest.initrd_bytes >> 20,
                manifest.iso_bytes >> 20,
                manifest.modules.len()
            );
            Ok(Exit::Ok)
        }
        RamdiskCommand::TestImage(args) => {
            let image = capstan_ramdisk::test_image::build(&default_cache(args.cache), &args.out)
                .map_err(|e| {
                anyhow::anyhow!(capstan_runtime::controller::ErrorChain(&e).to_string())
            })?;
            outln!("{}  {}", image.raw_sha256, image.raw.display());
            outln!("{}  {}", image.qcow2_sha256, image.qcow2.display());
            Ok(Exit::Ok)
        }
        RamdiskCommand::CloudImage(args) => {
            let image = capstan_ramdisk::cloud_image::build(
                &default_cache(args.cache),
                &args.out,
                &args.mirror,
                args.root_free_mib * 1024 * 1024,
                &|step| errln!("{} {step}", style.ok("cloud-image:")),
            )
            .map_err(|e| {
                anyhow::anyhow!(capstan_runtime::controller::ErrorChain(&e).to_string())
            })?;
            outln!("{}  {}", image.raw_sha256, image.raw.display());
            outln!("{}  {}", image.qcow2_sha256, image.qcow2.display());
            Ok(Exit::Ok)
        }
    }
}
