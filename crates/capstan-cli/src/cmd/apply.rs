//! `capstan apply -f FILE|DIR|-`: creates or updates every object of a manifest set, in dependency
//! order (Namespaces and CRDs first), and says what changed for each.

use crate::client::{self, api_error};
use crate::output::{Exit, Style};
use anyhow::Context;
use kube::api::{DynamicObject, Patch, PatchParams};
use std::path::PathBuf;

/// Arguments of `capstan apply`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files, directories or `-` for stdin.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
    /// Namespace for objects that name none.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    connect: client::ConnectArgs,
}

/// Applies Namespaces and CRDs before the objects that need them.
fn order(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "Secret" | "ConfigMap" => 2,
        _ => 3,
    }
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    let mut objects = match capstan_manifest::load_paths(&args.files) {
        Ok(objects) => objects,
        Err(err) => {
            eprintln!("{} {err}", style.error("error:"));
            return Ok(Exit::Unreadable);
        }
    };
    objects.sort_by_key(|o| order(o.value["kind"].as_str().unwrap_or_default()));
    args.connect.run(|client| async move {
        let mut failed = 0;
        for object in objects {
            let id = object.id().context("reading the object's identity")?;
            let resource = match client::resolve_kind(&client, &id.api_version, &id.kind).await {
                Ok(r) => r,
                Err(err) => {
                    eprintln!("{} {}: {err:#}", style.error("error:"), object.origin);
                    failed += 1;
                    continue;
                }
            };
            let namespace = resource.namespaced.then(|| {
                id.namespace
                    .clone()
                    .unwrap_or_else(|| args.namespace.clone())
            });
            let api_resource = kube::api::ApiResource {
                group: resource.group.clone(),
                version: resource.version.clone(),
                api_version: resource.api_version(),
                kind: resource.kind.clone(),
                plural: resource.plural.clone(),
            };
            let api: kube::Api<DynamicObject> = match &namespace {
                Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &api_resource),
                None => kube::Api::all_with(client.clone(), &api_resource),
            };
            let before = api.get_opt(&id.name).await.map_err(api_error)?;
            // Strict, as kubectl is by default: a misspelt field is an error, not a silent drop.
            let params = PatchParams::apply("capstan").force().validation_strict();
            match api
                .patch(&id.name, &params, &Patch::Apply(&object.value))
                .await
            {
                Ok(after) => {
                    let verb = match before {
                        None => "created",
                        Some(b)
                            if b.metadata.resource_version == after.metadata.resource_version =>
                        {
                            "unchanged"
                        }
                        Some(_) => "configured",
                    };
                    println!("{}/{} {verb}", resource.plural, id.name);
                }
                Err(err) => {
                    eprintln!(
                        "{} {} ({}/{}): {:#}",
                        style.error("error:"),
                        object.origin,
                        resource.plural,
                        id.name,
                        api_error(err)
                    );
                    failed += 1;
                }
            }
        }
        Ok(if failed > 0 { Exit::Invalid } else { Exit::Ok })
    })
}
