//! `capstan delete KIND NAME…` or `capstan delete -f FILE|DIR|-`: deletes objects, named or as the
//! manifests describe them (in the reverse of `apply`'s order). Objects with finalizers are marked
//! and go away once their controllers have cleaned up; like kubectl, the command waits for that
//! (`--wait=false` does not), following a watch, up to `--timeout` seconds.
//!
//! Deleting one object can remove others of the same run before their turn: a Cluster's deletion
//! takes its MachineDeployments and control plane with it, and the garbage collector takes an
//! owner's dependents. So every object is read before anything is deleted, and one that was there
//! then and is gone at its turn is done, said as `… already gone (removed with its cluster
//! capi-1)`. A name that was not there when the command started is still NotFound (exit 1)
//! unless `--ignore-not-found`.

use crate::client::{self, api_error};
use crate::output::outln;
use crate::output::{Exit, Style};
use crate::stderr::errln;
use anyhow::Context;
use capstan_model::meta::LABEL_CLUSTER_NAME;
use kube::api::DynamicObject;

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

/// The objects of `resource` in `namespace` (all namespaces when `None`).
fn api_of(
    client: &kube::Client,
    resource: &client::Resource,
    namespace: Option<&str>,
) -> kube::Api<DynamicObject> {
    let api_resource = kube::api::ApiResource {
        group: resource.group.clone(),
        version: resource.version.clone(),
        api_version: resource.api_version(),
        kind: resource.kind.clone(),
        plural: resource.plural.clone(),
    };
    match namespace {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &api_resource),
        None => kube::Api::all_with(client.clone(), &api_resource),
    }
}

/// Waits until `name` is gone, following a watch.
async fn wait_gone(
    client: &kube::Client,
    resource: &client::Resource,
    namespace: Option<&str>,
    name: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let api = api_of(client, resource, namespace);
    let gone =
        kube::runtime::wait::await_condition(api, name, |o: Option<&DynamicObject>| o.is_none());
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

/// An object as the command found it before deleting anything (or, for one this run deleted or
/// found gone, as it was): what ties it to the others.
struct Seen {
    kind: String,
    group: String,
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
    /// `(kind, name, uid)` of each ownerReference.
    owners: Vec<(String, String, String)>,
    /// Its `cluster.x-k8s.io/cluster-name` label: the Cluster whose deletion removes it.
    cluster: Option<String>,
}

impl Seen {
    fn of(target: &Target, object: &DynamicObject) -> Self {
        let meta = &object.metadata;
        Self {
            kind: target.resource.kind.clone(),
            group: target.resource.group.clone(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            uid: meta.uid.clone(),
            owners: meta
                .owner_references
                .iter()
                .flatten()
                .map(|o| (o.kind.clone(), o.name.clone(), o.uid.clone()))
                .collect(),
            cluster: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_CLUSTER_NAME))
                .cloned(),
        }
    }

    /// What removed this object, among those this run has deleted (or found gone): an owner, else
    /// the Cluster its label names; `None` when neither is among them.
    fn removed_with(&self, gone: &[Seen]) -> Option<String> {
        let owner = self
            .owners
            .iter()
            .find(|(_, _, uid)| gone.iter().any(|g| g.uid.as_deref() == Some(uid.as_str())));
        if let Some((kind, name, _)) = owner {
            return Some(format!("{} {name}", kind.to_lowercase()));
        }
        let cluster = self.cluster.as_deref()?;
        gone.iter()
            .find(|g| {
                g.kind == "Cluster"
                    && g.group == "cluster.x-k8s.io"
                    && g.namespace == self.namespace
                    && g.name == cluster
            })
            .map(|g| format!("cluster {}", g.name))
    }
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    let mut objects = match capstan_manifest::load_paths(&args.files) {
        Ok(objects) => objects,
        Err(err) => {
            errln!("{} {err}", style.error("error:"));
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
                    errln!("{} {}: {err:#}", style.error("error:"), object.origin);
                    failed = true;
                }
            }
        }
        // Before any deletion: what is there now, so that an object this run's earlier deletions
        // remove is told apart from a name that was never there. A read that fails for another
        // reason leaves the object unknown: its deletion then reports what the server says.
        let mut seen = Vec::with_capacity(targets.len());
        for target in &targets {
            let api = api_of(&client, &target.resource, target.namespace.as_deref());
            let found = api.get_opt(&target.name).await.ok().flatten();
            seen.push(found.map(|object| Seen::of(target, &object)));
        }
        let mut gone: Vec<Seen> = Vec::new();
        for (target, seen) in targets.iter().zip(seen) {
            let Target {
                resource,
                namespace,
                name,
            } = target;
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
            let not_found = |err: &anyhow::Error| {
                err.downcast_ref::<client::ClientError>()
                    .is_some_and(client::ClientError::is_not_found)
            };
            match (deleted, seen) {
                (Ok(()), seen) => {
                    outln!("{shown}/{name} deleted");
                    gone.extend(seen);
                }
                // It was there when the command started: an earlier deletion of this run (its
                // owner's, its Cluster's) or another client removed it since. Either way it is
                // what was asked for.
                (Err(err), Some(seen)) if not_found(&err) => {
                    match seen.removed_with(&gone) {
                        Some(owner) => {
                            outln!("{shown}/{name} already gone (removed with its {owner})")
                        }
                        None => {
                            outln!("{shown}/{name} already gone (deleted while this command ran)")
                        }
                    }
                    gone.push(seen);
                }
                (Err(err), None) if args.ignore_not_found && not_found(&err) => {}
                (Err(err), _) => {
                    errln!("{} {shown}/{name}: {:#}", style.error("error:"), err);
                    failed = true;
                }
            }
        }
        Ok(if failed { Exit::Invalid } else { Exit::Ok })
    })
}
