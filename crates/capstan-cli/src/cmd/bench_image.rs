//! `capstan bench image-write`: the agent's raw image write (HTTP download, sha256, write, fsync)
//! against `dd` writing the same bytes to the same kind of target, on this machine.
//!
//! The image is served over loopback by the same `ServeDir` the provisioning server uses. `dd`
//! reads the image from the local file (no network, no digest): the bound the agent is held to.

use crate::output::Exit;
use crate::output::outln;
use crate::stderr::errln;
use anyhow::{Context, bail};
use capstan_model::agent::{ChecksumType, ImageFormat};
use serde::Serialize;
use sha2::Digest;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Arguments of `capstan bench image-write`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Image size in MiB.
    #[arg(long, default_value_t = 512)]
    size_mib: u64,
    /// Where to put the image and the targets (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Figures {
    image_mib: u64,
    agent_seconds: f64,
    agent_mib_per_second: f64,
    dd_seconds: f64,
    dd_mib_per_second: f64,
    agent_share_of_dd: f64,
}

fn make_image(path: &Path, mib: u64) -> anyhow::Result<String> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut hasher = sha2::Sha256::new();
    // Incompressible, reproducible bytes (xorshift), so no layer can cheat with zeros.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for chunk in block.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        hasher.update(&block);
        file.write_all(&block)?;
    }
    file.flush()?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

async fn bench(args: &Args, dir: &Path) -> anyhow::Result<Figures> {
    let images = dir.join("images");
    std::fs::create_dir_all(&images)?;
    let image = images.join("bench.img");
    let digest = make_image(&image, args.size_mib).context("writing the test image")?;
    let bytes = args.size_mib << 20;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/images/bench.img", listener.local_addr()?);
    let router =
        axum::Router::new().nest_service("/images", tower_http::services::ServeDir::new(&images));
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    let target = dir.join("agent-target");
    std::fs::File::create(&target)?.set_len(bytes + (64 << 20))?;
    let job = capstan_agent::deploy::DeployJob {
        url: &url,
        checksum: &digest,
        checksum_type: ChecksumType::Sha256,
        format: ImageFormat::Raw,
        device_path: &target,
        device_bytes: bytes + (64 << 20),
    };
    let started = Instant::now();
    let written = tokio::task::block_in_place(|| capstan_agent::deploy::write_image(&job, &|_| {}))
        .map_err(|e| anyhow::anyhow!(capstan_agent::error_chain(&e)))?;
    let agent_seconds = started.elapsed().as_secs_f64();
    server.abort();
    if written != bytes {
        bail!("the agent wrote {written} bytes of {bytes}");
    }

    let dd_target = dir.join("dd-target");
    std::fs::File::create(&dd_target)?.set_len(bytes + (64 << 20))?;
    let started = Instant::now();
    let status = Command::new("dd")
        .arg(format!("if={}", image.display()))
        .arg(format!("of={}", dd_target.display()))
        .args(["bs=4M", "conv=notrunc,fsync", "status=none"])
        .status()
        .context("running dd")?;
    let dd_seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("dd failed");
    }
    let mib = args.size_mib as f64;
    Ok(Figures {
        image_mib: args.size_mib,
        agent_seconds,
        agent_mib_per_second: mib / agent_seconds,
        dd_seconds,
        dd_mib_per_second: mib / dd_seconds,
        agent_share_of_dd: dd_seconds / agent_seconds,
    })
}

pub fn run(args: Args) -> anyhow::Result<Exit> {
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => super::bench::tempfile_dir("image")?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    errln!("bench image-write: {} MiB image…", args.size_mib);
    let figures = runtime.block_on(bench(&args, &dir));
    if args.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let figures = figures?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        outln!("image write, {} MiB:", figures.image_mib);
        outln!(
            "  agent (HTTP + sha256 + write + fsync) {:>7.2} s {:>8.1} MiB/s",
            figures.agent_seconds,
            figures.agent_mib_per_second
        );
        outln!(
            "  dd (local file, bs=4M, fsync)         {:>7.2} s {:>8.1} MiB/s",
            figures.dd_seconds,
            figures.dd_mib_per_second
        );
        outln!(
            "  agent / dd                            {:>7.0} %",
            figures.agent_share_of_dd * 100.0
        );
    }
    Ok(Exit::Ok)
}
