//! `capstan crds`: the CustomResourceDefinitions capstan's controllers need, for installing them into a
//! real management cluster before `capstan controllers` runs there.

use crate::output::Exit;
use crate::output::out;

/// Arguments of `capstan crds`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<Exit> {
    out!(
        "{}",
        capstan_manifest::to_yaml_documents(&capstan_controllers::crds())
    );
    Ok(Exit::Ok)
}
