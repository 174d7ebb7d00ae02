//! `capstan delete KIND NAME…`: deletes objects (objects with finalizers are marked and go away once
//! their controllers have cleaned up).

use crate::client::{self, api_error};
use crate::output::{Exit, Style};
use anyhow::Context;
use std::path::PathBuf;

/// Arguments of `capstan delete`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kind, plural, singular or short name.
    kind: String,
    /// Object names.
    #[arg(required = true)]
    names: Vec<String>,
    /// Namespace.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// Kubeconfig (default: `$KUBECONFIG`, then the data directory's).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The data directory of `capstan serve`.
    #[arg(long, env = "CAPSTAN_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    let kubeconfig = client::kubeconfig_path(
        args.kubeconfig.as_deref(),
        &args
            .data_dir
            .clone()
            .unwrap_or_else(client::default_data_dir),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let client = client::connect(&kubeconfig).await?;
        let resource = client::resolve(&client, &args.kind).await?;
        let namespace = resource.namespaced.then_some(args.namespace.as_str());
        let mut failed = false;
        for name in &args.names {
            let request = http::Request::delete(resource.path(namespace, Some(name)))
                .body(Vec::new())
                .context("building the request")?;
            match client.request_text(request).await {
                Ok(_) => println!("{}/{name} deleted", resource.plural),
                Err(err) => {
                    eprintln!(
                        "{} {}/{name}: {:#}",
                        style.error("error:"),
                        resource.plural,
                        api_error(err)
                    );
                    failed = true;
                }
            }
        }
        Ok(if failed { Exit::Invalid } else { Exit::Ok })
    })
}
