//! `capstan delete KIND NAME…`: deletes objects. Objects with finalizers are marked and go away once
//! their controllers have cleaned up; like kubectl, the command waits for that (`--wait=false` does
//! not), following a watch, up to `--timeout` seconds.

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
    /// Wait until the objects are gone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    wait: bool,
    /// How long to wait, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    #[command(flatten)]
    connect: client::ConnectArgs,
}

/// Waits until `name` is gone, following a watch.
async fn wait_gone(
    client: &kube::Client,
    resource: &client::Resource,
    namespace: Option<&str>,
    name: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let api_resource = kube::api::ApiResource {
        group: resource.group.clone(),
        version: resource.version.clone(),
        api_version: resource.api_version(),
        kind: resource.kind.clone(),
        plural: resource.plural.clone(),
    };
    let api: kube::Api<kube::api::DynamicObject> = match namespace {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &api_resource),
        None => kube::Api::all_with(client.clone(), &api_resource),
    };
    let gone =
        kube::runtime::wait::await_condition(api, name, |o: Option<&kube::api::DynamicObject>| {
            o.is_none()
        });
    match tokio::time::timeout(timeout, gone).await {
        Ok(result) => result.map(|_| ()).context("watching for the deletion"),
        Err(_) => anyhow::bail!(
            "still there after {} s (its finalizers: see `capstan describe`)",
            timeout.as_secs()
        ),
    }
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
            let deleted = match client.request_text(request).await {
                Ok(_) if args.wait => wait_gone(
                    &client,
                    &resource,
                    namespace,
                    name,
                    std::time::Duration::from_secs(args.timeout),
                )
                .await
                .map_err(|e| e.context("waiting")),
                Ok(_) => Ok(()),
                Err(err) => Err(api_error(err)),
            };
            match deleted {
                Ok(()) => println!("{}/{name} deleted", resource.plural),
                Err(err) => {
                    eprintln!(
                        "{} {}/{name}: {:#}",
                        style.error("error:"),
                        resource.plural,
                        err
                    );
                    failed = true;
                }
            }
        }
        Ok(if failed { Exit::Invalid } else { Exit::Ok })
    })
}
