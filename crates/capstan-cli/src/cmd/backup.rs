//! `capstan backup --to FILE`: a consistent snapshot of the store, taken while `capstan serve` runs.
//! `capstan serve --restore-from FILE` starts from it.

use crate::output::{Exit, Style};
use crate::stderr::errln;
use anyhow::Context;
use std::path::PathBuf;

/// Arguments of `capstan backup`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The data directory of `capstan serve`.
    #[arg(long, env = "CAPSTAN_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Where to write the snapshot (replaced if it exists).
    #[arg(long)]
    to: PathBuf,
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    let database = args
        .data_dir
        .unwrap_or_else(crate::client::default_data_dir)
        .join("state.db");
    capstan_store::backup_file(&database, &args.to)
        .with_context(|| format!("backing up {}", database.display()))?;
    errln!("{} {}", style.ok("backup written:"), args.to.display());
    Ok(Exit::Ok)
}
