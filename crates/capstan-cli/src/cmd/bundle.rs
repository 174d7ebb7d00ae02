//! `capstan bundle`: the offline install bundle for air-gapped management hosts.
//!
//! - `capstan bundle create --deb capstan_….deb [--ramdisk DIR] [--image FILE]… [--manifest FILE]…`
//!   writes one archive with capstan's package and the libraries it needs, the ramdisk, the images,
//!   the CRDs (`capstan crds`) and manifests, with `SHA256SUMS` and `manifest.json`
//!   (see `capstan_bundle`). It needs the network (apt) once; the Debian packages are cached.
//! - `capstan bundle install BUNDLE` (run by the bundle's `install` bootstrapper once the package is
//!   in, or by hand) verifies it, puts its parts into the data directory, starts `capstan.service`
//!   and waits until the API answers: `capstan serve` is then ready to provision.
//! - `capstan bundle verify BUNDLE` only checks it, and `-o json|yaml` prints its manifest.

use crate::output::{Exit, Style, outln};
use crate::stderr::errln;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The subcommands of `capstan bundle`.
#[derive(Debug, clap::Subcommand)]
pub enum BundleCommand {
    /// Write an offline install bundle (needs apt's package lists and network once).
    Create(CreateArgs),
    /// Install a bundle: verify it, put the ramdisk, images, CRDs and manifests in place, start
    /// capstan.service and wait for its API.
    Install(InstallArgs),
    /// Check a bundle against its SHA256SUMS and print what it holds.
    Verify(VerifyArgs),
}

/// Arguments of `capstan bundle create`.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// capstan's Debian package (`scripts/package.sh` writes it).
    #[arg(long, value_name = "FILE")]
    deb: PathBuf,
    /// The provisioning ramdisk (`capstan ramdisk build --out DIR`).
    #[arg(long, value_name = "DIR")]
    ramdisk: Option<PathBuf>,
    /// A node OS image to carry (repeat for more); served under /images/ once installed.
    #[arg(long = "image", value_name = "FILE")]
    images: Vec<PathBuf>,
    /// A manifest the clusters take as a file, e.g. a cluster spec's Cilium manifest (repeatable).
    #[arg(long = "manifest", value_name = "FILE")]
    manifests: Vec<PathBuf>,
    /// Another Debian package to carry with its dependencies (repeatable), e.g. qemu-utils.
    #[arg(long = "package", value_name = "NAME")]
    packages: Vec<String>,
    /// The Debian package cache (default: `$XDG_CACHE_HOME/capstan`, else `~/.cache/capstan`).
    #[arg(long, value_name = "DIR", env = "CAPSTAN_CACHE")]
    cache: Option<PathBuf>,
    /// The archive to write (default: `capstan-bundle-VERSION.tar` here).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Arguments of `capstan bundle install`.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// The bundle: its archive, or the directory it unpacks to.
    bundle: PathBuf,
    /// The data directory of the `capstan serve` to provision from.
    #[arg(long, env = "CAPSTAN_DATA_DIR", default_value = "/var/lib/capstan")]
    data_dir: PathBuf,
    /// Own the installed files as this user and group (default: `capstan`, the package's service
    /// user, when it exists).
    #[arg(long, value_name = "USER")]
    owner: Option<String>,
    /// Install the files only: do not start (or restart) capstan.service.
    #[arg(long)]
    no_start: bool,
    /// How long to wait for the API once the service is started, in seconds.
    #[arg(long, default_value_t = 180)]
    timeout: u64,
}

/// Arguments of `capstan bundle verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The bundle: its archive, or the directory it unpacks to.
    bundle: PathBuf,
    /// Print the manifest as JSON or YAML instead of a summary.
    #[arg(short, long, value_enum)]
    output: Option<Format>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Format {
    Json,
    Yaml,
}

pub fn run(command: BundleCommand, style: &Style) -> anyhow::Result<Exit> {
    match command {
        BundleCommand::Create(args) => create(args),
        BundleCommand::Install(args) => install(args, style),
        BundleCommand::Verify(args) => verify(args),
    }
}

fn progress(line: &str) {
    errln!("==> {line}");
}

fn create(args: CreateArgs) -> anyhow::Result<Exit> {
    let crds = capstan_manifest::to_yaml_documents(&capstan_controllers::crds()).into_bytes();
    let deb_version = capstan_bundle::debs::control(&args.deb)
        .ok()
        .and_then(|c| capstan_bundle::debs::field(&c, "Version").map(str::to_owned));
    let out = args.out.unwrap_or_else(|| {
        PathBuf::from(format!(
            "capstan-bundle-{}.tar",
            deb_version.as_deref().unwrap_or("unknown")
        ))
    });
    let spec = capstan_bundle::BundleSpec {
        out: out.clone(),
        deb: args.deb,
        extra_packages: args.packages,
        ramdisk: args.ramdisk,
        images: args.images,
        crds: Some(crds),
        manifests: args.manifests,
        cache: crate::cmd::ramdisk::default_cache(args.cache),
    };
    let manifest = capstan_bundle::create(&spec, &progress)?;
    let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    outln!(
        "{} ({:.1} MiB): capstan {}, {} packages, {}{} images, {} manifests",
        out.display(),
        bytes as f64 / (1024.0 * 1024.0),
        manifest.capstan_version,
        manifest.packages.len(),
        match &manifest.ramdisk {
            Some(r) => format!("ramdisk ({}), ", r.kernel_version),
            None => "no ramdisk, ".to_owned(),
        },
        manifest.images.len(),
        manifest.manifests.len()
    );
    outln!(
        "On the air-gapped host: tar xf {} && sudo ./{}/install",
        out.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        manifest.name
    );
    Ok(Exit::Ok)
}

/// Whether a system user exists (read from the passwd database through `getent`).
fn user_exists(name: &str) -> bool {
    std::process::Command::new("getent")
        .args(["passwd", name])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn systemctl(args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("systemctl")
        .args(args)
        .output()
        .context("running systemctl")?;
    if !out.status.success() {
        anyhow::bail!(
            "systemctl {} failed: {} (see `journalctl -u capstan`)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn install(args: InstallArgs, style: &Style) -> anyhow::Result<Exit> {
    let owner = match args.owner {
        Some(owner) => Some(owner),
        None => user_exists("capstan").then(|| "capstan".to_owned()),
    };
    let options = capstan_bundle::InstallOptions {
        data_dir: args.data_dir.clone(),
        owner,
    };
    let installed = capstan_bundle::install(&args.bundle, &options, &progress)?;
    if args.no_start {
        outln!(
            "installed bundle {} into {} (not started: --no-start)",
            installed.manifest.name,
            args.data_dir.display()
        );
        return Ok(Exit::Ok);
    }
    if !Path::new("/run/systemd/system").is_dir() {
        anyhow::bail!(
            "installed bundle {} into {}, but systemd is not running here: start `capstan serve --data-dir {}` yourself, or pass --no-start",
            installed.manifest.name,
            args.data_dir.display(),
            args.data_dir.display()
        );
    }
    // serve reads the ramdisk and images at start: a running service is restarted to take them.
    progress("starting capstan.service (systemctl enable capstan; systemctl restart capstan)");
    systemctl(&["enable", "--quiet", "capstan.service"])?;
    systemctl(&["restart", "capstan.service"])?;
    let kubeconfig = args.data_dir.join("kubeconfig");
    let server = wait_ready(&kubeconfig, Duration::from_secs(args.timeout))?;
    outln!(
        "{} capstan serve is ready to provision at {server}",
        style.ok("ready:")
    );
    outln!(
        "  bundle    {} (capstan {})",
        installed.manifest.name,
        installed.manifest.capstan_version
    );
    match (&installed.ramdisk, &installed.manifest.ramdisk) {
        (Some(dir), Some(r)) => outln!(
            "  ramdisk   {} (kernel {})",
            dir.display(),
            r.kernel_version
        ),
        (Some(dir), None) => outln!("  ramdisk   {}", dir.display()),
        _ => outln!("  ramdisk   none in the bundle: only fake:// hosts can be provisioned"),
    }
    for image in &installed.images {
        outln!("  image     {}", image.display());
    }
    outln!(
        "  use it    sudo capstan kubeconfig > admin.kubeconfig; KUBECONFIG=admin.kubeconfig kubectl get bmh"
    );
    Ok(Exit::Ok)
}

/// Waits until the service wrote its kubeconfig and its `/readyz` answers, returning the server.
fn wait_ready(kubeconfig: &Path, timeout: Duration) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no kubeconfig yet");
    progress(&format!(
        "waiting for the API (up to {} s)",
        timeout.as_secs()
    ));
    while Instant::now() < deadline {
        if kubeconfig.is_file() {
            let attempt = runtime.block_on(async {
                let (client, server) = crate::client::connect(kubeconfig).await?;
                let request = http::Request::get("/readyz")
                    .body(Vec::new())
                    .context("building the request")?;
                client
                    .request_text(request)
                    .await
                    .context("asking /readyz")?;
                anyhow::Ok(server)
            });
            match attempt {
                Ok(server) => return Ok(server),
                Err(err) => last = format!("{err:#}"),
            }
        }
        // The service's start is the event awaited; there is no notification to wait on.
        std::thread::sleep(Duration::from_millis(500));
    }
    anyhow::bail!(
        "capstan.service did not answer within {} s ({last}): see `journalctl -u capstan`",
        timeout.as_secs()
    )
}

fn verify(args: VerifyArgs) -> anyhow::Result<Exit> {
    let temp;
    let root = if args.bundle.is_dir() {
        args.bundle.clone()
    } else {
        temp = tempfile::tempdir().context("creating a temporary directory")?;
        capstan_bundle::install::unpack(&args.bundle, temp.path())?
    };
    capstan_bundle::manifest::verify(&root)?;
    let manifest = capstan_bundle::manifest::read(&root)?;
    match args.output {
        Some(Format::Json) => outln!("{}", serde_json::to_string_pretty(&manifest)?),
        Some(Format::Yaml) => outln!(
            "{}",
            capstan_manifest::to_yaml_documents(&[serde_json::to_value(&manifest)?])
        ),
        None => {
            outln!(
                "{}: every file matches SHA256SUMS; capstan {}",
                manifest.name,
                manifest.capstan_version
            );
            for package in &manifest.packages {
                outln!("  package   {} {}", package.name, package.version);
            }
            if let Some(r) = &manifest.ramdisk {
                outln!("  ramdisk   kernel {}", r.kernel_version);
            }
            for file in manifest
                .images
                .iter()
                .chain(&manifest.crds)
                .chain(&manifest.manifests)
            {
                outln!("  file      {} ({} bytes)", file.file, file.bytes);
            }
        }
    }
    Ok(Exit::Ok)
}
