//! `capstan delete KIND NAME…`: deletes objects (objects with finalizers are marked and go away once
//! their controllers have cleaned up).

use crate::client::{self, api_error};
use crate::output::{Exit, Style};
use anyhow::Context;

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
    #[command(flatten)]
    connect: client::ConnectArgs,
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    args.connect.run(|client| async move {
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
