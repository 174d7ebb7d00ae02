//! `capstan render SPEC -o DIR`: a cluster spec becomes an apply-ready bundle.
//!
//! Nothing is written unless the whole bundle is valid: the spec is loaded and checked, the bundle is
//! rendered in memory, and only then written (atomically) to the output directory.

use crate::output::{Exit, Style};
use crate::stderr::errln;
use capstan_render::{CapiVersion, RenderOptions};
use std::path::PathBuf;

/// Arguments of `capstan render`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The cluster spec (YAML). See docs/spec.md for its format.
    spec: PathBuf,
    /// Directory to write the bundle to.
    #[arg(short = 'o', long = "output-dir")]
    output_dir: PathBuf,
    /// API version of the Cluster API and Metal3 infrastructure objects.
    #[arg(long, value_enum, default_value_t = ApiVersion::V1beta1)]
    api_version: ApiVersion,
    /// Give every host capstan's simulated BMC (`fake://CLUSTER/HOST`) instead of the spec's, so
    /// `capstan serve` takes the hosts through their lifecycle with no machines (demos, trials).
    #[arg(long)]
    fake_bmcs: bool,
}

/// `--api-version` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ApiVersion {
    V1beta1,
    V1beta2,
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    let spec = match capstan_render::load_spec(&args.spec) {
        Ok(spec) => spec,
        Err(err) => return Ok(report(&err, style)),
    };
    let spec_dir = args.spec.parent().map(PathBuf::from).unwrap_or_default();
    let options = RenderOptions {
        api_version: match args.api_version {
            ApiVersion::V1beta1 => CapiVersion::V1beta1,
            ApiVersion::V1beta2 => CapiVersion::V1beta2,
        },
    };
    let mut bundle = match capstan_render::render(&spec, &spec_dir, &options) {
        Ok(bundle) => bundle,
        Err(err) => return Ok(report(&err, style)),
    };
    if args.fake_bmcs
        && let Err(err) = fake_bmcs(&spec, &mut bundle)
    {
        errln!("{} {err}", style.error("error:"));
        return Ok(Exit::Invalid);
    }
    if let Err(err) = capstan_render::write_bundle(&bundle, &args.output_dir) {
        return Ok(report(&err, style));
    }
    for notice in &bundle.notices {
        errln!("{} {notice}", style.warning("note:"));
    }
    errln!(
        "{} wrote {} files to {}",
        style.ok("rendered:"),
        bundle.files.len(),
        args.output_dir.display()
    );
    // The spec names a Cilium manifest and rendering read it, so no `cilium install` hint here: the
    // bundle's README.md has the command that renders one this cluster takes without fixes.
    Ok(Exit::Ok)
}

/// Rewrites each host's BMC address in its `hosts/<host>.yaml` to `fake://<cluster>/<host>`. The
/// address is unique among the hosts (render checks), so it occurs exactly once in the host's file.
fn fake_bmcs(
    spec: &capstan_render::Spec,
    bundle: &mut capstan_render::Bundle,
) -> Result<(), String> {
    for host in &spec.hosts {
        let path = PathBuf::from(format!("hosts/{}.yaml", host.name));
        let file = bundle
            .files
            .iter_mut()
            .find(|f| f.path == path)
            .ok_or_else(|| format!("--fake-bmcs: the bundle has no {}", path.display()))?;
        let fake = format!("fake://{}/{}", spec.name, host.name);
        let occurrences = file.contents.matches(host.bmc.address.as_str()).count();
        if occurrences != 1 {
            return Err(format!(
                "--fake-bmcs: {} names the BMC address {} {occurrences} times, not once",
                path.display(),
                host.bmc.address
            ));
        }
        file.contents = file.contents.replace(host.bmc.address.as_str(), &fake);
    }
    Ok(())
}

fn report(err: &capstan_render::RenderError, style: &Style) -> Exit {
    errln!("{} {err}", style.error("error:"));
    if err.is_unreadable() {
        Exit::Unreadable
    } else {
        Exit::Invalid
    }
}
