//! `capstan kubeconfig`: prints the admin kubeconfig `capstan serve` wrote.

use crate::output::Exit;
use crate::output::out;
use anyhow::Context;
use std::path::PathBuf;

/// Arguments of `capstan kubeconfig`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The data directory of `capstan serve`.
    #[arg(long, env = "CAPSTAN_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<Exit> {
    let path = args
        .data_dir
        .unwrap_or_else(crate::client::default_data_dir)
        .join("kubeconfig");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (has `capstan serve` been started with this data directory?)",
            path.display()
        )
    })?;
    out!("{text}");
    Ok(Exit::Ok)
}
