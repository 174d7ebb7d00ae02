//! `capstan apply -f FILE|DIR|-`: creates or updates every object of a manifest set, in dependency
//! order (Namespaces and CRDs first), and says what changed for each.

use crate::client::{self, api_error};
use crate::output::outln;
use crate::output::{Exit, Style};
use crate::stderr::errln;
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

/// Applies Namespaces and CRDs before the objects that need them (`delete -f` goes in reverse).
pub(super) fn order(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "Secret" | "ConfigMap" => 2,
        _ => 3,
    }
}

/// Whether applying `manifest` changed any field it sets. Not the resourceVersion: a controller
/// writing the object (status, a finalizer) between the read and the apply changes that too.
/// A Secret's `stringData` is stored as `data`, so it is judged by `data`.
fn applied_fields_changed(
    manifest: &serde_json::Value,
    before: &DynamicObject,
    after: &DynamicObject,
) -> bool {
    let (Ok(before), Ok(after)) = (serde_json::to_value(before), serde_json::to_value(after))
    else {
        return true;
    };
    let Some(fields) = manifest.as_object() else {
        return true;
    };
    fields.iter().any(|(key, wanted)| match key.as_str() {
        "apiVersion" | "kind" => false,
        "stringData" => before.get("data") != after.get("data"),
        _ => differs_under(wanted, before.get(key), after.get(key)),
    })
}

/// Whether `before` and `after` differ anywhere `wanted` sets a value.
fn differs_under(
    wanted: &serde_json::Value,
    before: Option<&serde_json::Value>,
    after: Option<&serde_json::Value>,
) -> bool {
    match wanted {
        serde_json::Value::Object(fields) => fields.iter().any(|(key, wanted)| {
            differs_under(
                wanted,
                before.and_then(|b| b.get(key)),
                after.and_then(|a| a.get(key)),
            )
        }),
        _ => before != after,
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
    objects.sort_by_key(|o| order(o.value["kind"].as_str().unwrap_or_default()));
    args.connect.run(|client| async move {
        let mut failed = 0;
        for object in objects {
            let id = object.id().context("reading the object's identity")?;
            let resource = match client::resolve_kind(&client, &id.api_version, &id.kind).await {
                Ok(r) => r,
                Err(err) => {
                    errln!("{} {}: {err:#}", style.error("error:"), object.origin);
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
                        Some(before) if applied_fields_changed(&object.value, &before, &after) => {
                            "configured"
                        }
                        Some(_) => "unchanged",
                    };
                    outln!("{}/{} {verb}", resource.kind_and_group(), id.name);
                }
                Err(err) => {
                    let err = api_error(err);
                    errln!(
                        "{} {} ({}/{}): {:#}",
                        style.error("error:"),
                        where_(&object, &err),
                        resource.kind_and_group(),
                        id.name,
                        err
                    );
                    failed += 1;
                }
            }
        }
        Ok(if failed > 0 { Exit::Invalid } else { Exit::Ok })
    })
}

/// Where in the manifest the server's complaint is: the line of the first field it names (or of
/// that field's nearest ancestor in the manifest), else the object's first line.
fn where_(object: &capstan_manifest::LoadedObject, err: &anyhow::Error) -> String {
    let fields = match err.downcast_ref::<client::ClientError>() {
        Some(client::ClientError::Api { fields, .. }) => fields.as_slice(),
        _ => &[],
    };
    fields
        .iter()
        .map(|f| capstan_model::path::FieldPath::parse(f))
        .find(|path| !path.is_root())
        .map_or_else(|| object.origin.to_string(), |path| object.location(&path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_concurrent_status_or_finalizer_write_is_not_a_change_by_apply() {
        let manifest = json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": "h0", "labels": {"role": "cp"}}, "spec": {"online": true}});
        let before = object(
            json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": "h0", "resourceVersion": "5", "labels": {"role": "cp"}},
            "spec": {"online": true}}),
        );
        let after = object(
            json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": "h0", "resourceVersion": "7", "labels": {"role": "cp"},
                "finalizers": ["baremetalhost.metal3.io"]},
            "spec": {"online": true}, "status": {"provisioning": {"state": "registering"}}}),
        );
        assert!(!applied_fields_changed(&manifest, &before, &after));
    }

    #[test]
    fn a_changed_field_or_label_is_a_change() {
        let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "2"}}, "data": {"k": "v"}});
        let before = object(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"k": "v"}}));
        let after = object(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "2"}}, "data": {"k": "v"}}));
        assert!(applied_fields_changed(&manifest, &before, &after));
    }

    #[test]
    fn secret_string_data_is_judged_by_the_stored_data() {
        let manifest = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "stringData": {"password": "new"}});
        let stored = |b64: &str| {
            object(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                "data": {"password": b64}}),
            )
        };
        assert!(applied_fields_changed(
            &manifest,
            &stored("b2xk"),
            &stored("bmV3")
        ));
        assert!(!applied_fields_changed(
            &manifest,
            &stored("bmV3"),
            &stored("bmV3")
        ));
    }
}
