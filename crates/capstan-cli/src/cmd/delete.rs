//! `capstan delete KIND NAME…` or `capstan delete -f FILE|DIR|-`: deletes objects, named or as the
//! manifests describe them (in the reverse of `apply`'s order). Objects with finalizers are marked
//! and go away once their controllers have cleaned up; like kubectl, the command waits for that
//! (`--wait=false` does not), following a watch, up to `--timeout` seconds.

use crate::client::{self, api_error};
use crate::output::outln;
use crate::output::{Exit, Style};
use anyhow::Context;

/// Arguments of `capstan delete`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kind, plural, singular or short name.
    #[arg(required_unless_present = "files", conflicts_with = "files")]
    kind: Option<String>,
    /// Object names.
    #[arg(required_unless_present = "files")]
    names: Vec<String>,
    /// Delete the objects these manifests describe: files, directories or `-` for stdin.
    #[arg(short = 'f', long = "filename")]
    files: Vec<std::path::PathBuf>,
    /// Objects of `-f` that are not there are not an error.
    #[arg(long)]
    ignore_not_found: bool,
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

/// One object to delete: its resource, namespace and name.
struct Target {
    resource: client::Resource,
    namespace: Option<String>,
    name: String,
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    let mut objects = match capstan_manifest::load_paths(&args.files) {
        Ok(objects) => objects,
        Err(err) => {
            eprintln!("{} {err}", style.error("error:"));
            return Ok(Exit::Unreadable);
        }
    };
    // The reverse of apply's order: what depends on a Namespace or CRD goes first.
    objects.sort_by_key(|o| {
        std::cmp::Reverse(super::apply::order(
            o.value["kind"].as_str().unwrap_or_default(),
        ))
    });
    args.connect.run(|client| async move {
        let mut targets = Vec::new();
        let mut failed = false;
        if let Some(kind) = &args.kind {
            let resource = client::resolve(&client, kind).await?;
            let namespace = resource.namespaced.then(|| args.namespace.clone());
            for name in &args.names {
                targets.push(Target {
                    resource: resource.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                });
            }
        }
        for object in &objects {
            let id = object.id().context("reading the object's identity")?;
            match client::resolve_kind(&client, &id.api_version, &id.kind).await {
                Ok(resource) => {
                    let namespace = resource.namespaced.then(|| {
                        id.namespace
                            .clone()
                            .unwrap_or_else(|| args.namespace.clone())
                    });
                    targets.push(Target {
                        resource,
                        namespace,
                        name: id.name,
                    });
                }
                Err(err) => {
                    eprintln!("{} {}: {err:#}", style.error("error:"), object.origin);
                    failed = true;
                }
            }
        }
        for Target {
            resource,
            namespace,
            name,
        } in &targets
        {
            let namespace = namespace.as_deref();
            let request = http::Request::delete(resource.path(namespace, Some(name)))
                .body(Vec::new())
                .context("building the request")?;
            let deleted = match client.request_text(request).await {
                Ok(_) if args.wait => wait_gone(
                    &client,
                    resource,
                    namespace,
                    name,
                    std::time::Duration::from_secs(args.timeout),
                )
                .await
                .map_err(|e| e.context("waiting")),
                Ok(_) => Ok(()),
                Err(err) => Err(api_error(err)),
            };
            let shown = resource.kind_and_group();
            match deleted {
                Ok(()) => outln!("{shown}/{name} deleted"),
                Err(err)
                    if args.ignore_not_found
                        && err
                            .downcast_ref::<client::ClientError>()
                            .is_some_and(client::ClientError::is_not_found) => {}
                Err(err) => {
                    eprintln!("{} {shown}/{name}: {:#}", style.error("error:"), err);
                    failed = true;
                }
            }
        }
        Ok(if failed { Exit::Invalid } else { Exit::Ok })
    })
}
