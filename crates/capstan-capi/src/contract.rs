//! The provider objects a Cluster or Machine references, read and written by the Cluster API
//! contracts: untyped (any provider's kind), at the version capstan stores or the API prefers.
//!
//! What the contracts say, and what is read here:
//! - infrastructure cluster: `spec.controlPlaneEndpoint`, `status.initialization.provisioned`
//!   (v1beta2) or `status.ready` (v1beta1), `status.failureDomains`;
//! - infrastructure machine: `spec.providerID`, `status.initialization.provisioned` or
//!   `status.ready`, `status.addresses`, `status.failureDomain`;
//! - bootstrap config: `status.dataSecretName` with `status.initialization.dataSecretCreated` or
//!   `status.ready`;
//! - control plane: `status.initialization.controlPlaneInitialized` or `status.initialized`
//!   (v1beta1), `spec.controlPlaneEndpoint` when it provides one, replica counts;
//! - templates: `spec.template.spec` (and `spec.template.metadata`) is what a clone gets.

use capstan_model::meta::ContractVersionedObjectReference;
use capstan_runtime::tables::ObjectCaches;
use capstan_runtime::watches::{WatchError, resolve_kind};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

/// Why a referenced object could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    #[error("resolving {kind}.{group}")]
    Resolve {
        group: String,
        kind: String,
        source: WatchError,
    },
    #[error("{kind} {namespace}/{name} does not exist")]
    Missing {
        kind: String,
        namespace: String,
        name: String,
    },
    #[error("{action} {kind} {namespace}/{name}")]
    Api {
        action: &'static str,
        kind: String,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
}

/// A referenced object's API.
pub struct Referenced {
    pub api: Api<DynamicObject>,
    pub resource: ApiResource,
    pub reference: ContractVersionedObjectReference,
    pub namespace: String,
}

impl Referenced {
    /// The API of `reference` in `namespace`.
    pub async fn resolve(
        client: &Client,
        namespace: &str,
        reference: &ContractVersionedObjectReference,
    ) -> Result<Self, ContractError> {
        let (resource, _namespaced) = resolve_kind(client, &reference.api_group, &reference.kind)
            .await
            .map_err(|source| ContractError::Resolve {
                group: reference.api_group.clone(),
                kind: reference.kind.clone(),
                source,
            })?;
        Ok(Self {
            api: Api::namespaced_with(client.clone(), namespace, &resource),
            resource,
            reference: reference.clone(),
            namespace: namespace.to_owned(),
        })
    }

    fn error(&self, action: &'static str, name: &str) -> impl FnOnce(kube::Error) -> ContractError {
        let (kind, namespace, name) = (
            self.reference.kind.clone(),
            self.namespace.clone(),
            name.to_owned(),
        );
        move |source| ContractError::Api {
            action,
            kind,
            namespace,
            name,
            source: Box::new(source),
        }
    }

    /// The referenced object, if it exists.
    pub async fn get(&self) -> Result<Option<DynamicObject>, ContractError> {
        self.api
            .get_opt(&self.reference.name)
            .await
            .map_err(self.error("reading", &self.reference.name))
    }

    /// The referenced object, if it exists: from the process's cache of its kind when `cached`
    /// names the kind (a trigger of the reader records every change there before waking it), else
    /// read live.
    pub async fn get_cached(
        &self,
        objects: &ObjectCaches,
        cached: &[ApiResource],
    ) -> Result<Option<DynamicObject>, ContractError> {
        let is_cached = cached
            .iter()
            .any(|r| r.api_version == self.resource.api_version && r.kind == self.resource.kind);
        if !is_cached {
            return self.get().await;
        }
        objects
            .dynamic(&self.resource)
            .get(&self.namespace, &self.reference.name)
            .await
            .map(|object| object.map(std::sync::Arc::unwrap_or_clone))
            .map_err(self.error("reading", &self.reference.name))
    }

    /// Deletes the referenced object (in the background); gone already is success.
    pub async fn delete(&self) -> Result<(), ContractError> {
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        match self.api.delete(&self.reference.name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(source) => Err(self.error("deleting", &self.reference.name)(source)),
        }
    }

    /// Makes `owner` an owner of `object` (the controller when `controller`), dropping owner
    /// references of `replaces` kinds (a MachineSet's, once the Machine owns the clone) and adding
    /// `labels`; a merge patch guarded by the object's resourceVersion, sent only when needed.
    pub async fn adopt(
        &self,
        object: &DynamicObject,
        owner: OwnerReference,
        replaces: &[&str],
        labels: &[(&str, &str)],
    ) -> Result<(), ContractError> {
        let current = object.metadata.owner_references.clone().unwrap_or_default();
        let mut wanted: Vec<OwnerReference> = current
            .iter()
            .filter(|o| o.uid != owner.uid && !replaces.contains(&o.kind.as_str()))
            .cloned()
            .map(|mut o| {
                // One controller only: ours.
                if owner.controller == Some(true) {
                    o.controller = None;
                }
                o
            })
            .collect();
        wanted.push(owner);
        let missing_labels: Vec<&(&str, &str)> = labels
            .iter()
            .filter(|(k, v)| object.labels().get(*k).map(String::as_str) != Some(*v))
            .collect();
        if same_owners(&current, &wanted) && missing_labels.is_empty() {
            return Ok(());
        }
        let mut metadata = json!({
            "ownerReferences": wanted,
            "resourceVersion": object.metadata.resource_version,
        });
        if !missing_labels.is_empty() {
            metadata["labels"] = missing_labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        let name = object.name_any();
        self.api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "metadata": metadata })),
            )
            .await
            .map_err(self.error("adopting", &name))?;
        Ok(())
    }
}

fn same_owners(a: &[OwnerReference], b: &[OwnerReference]) -> bool {
    let key = |o: &OwnerReference| (o.uid.clone(), o.controller.unwrap_or(false));
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

/// An owner reference to `owner` (the controller owner when `controller`).
pub fn owner_reference<K: Resource<DynamicType = ()>>(
    owner: &K,
    controller: bool,
) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: controller.then_some(true),
        block_owner_deletion: Some(true),
    }
}

/// `value` at `path` (dot-separated members).
pub fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .fold(value, |v, member| v.get(member).unwrap_or(&Value::Null))
}

/// Whether an infrastructure object reports it is provisioned: `status.initialization.provisioned`
/// (v1beta2 contract) or `status.ready` (v1beta1 contract).
pub fn provisioned(object: &DynamicObject) -> bool {
    at(&object.data, "status.initialization.provisioned").as_bool() == Some(true)
        || at(&object.data, "status.ready").as_bool() == Some(true)
}

/// The bootstrap data Secret's name once a bootstrap config reports it created.
pub fn data_secret_name(object: &DynamicObject) -> Option<String> {
    let created = at(&object.data, "status.initialization.dataSecretCreated").as_bool()
        == Some(true)
        || at(&object.data, "status.ready").as_bool() == Some(true);
    let name = at(&object.data, "status.dataSecretName").as_str()?;
    (created && !name.is_empty()).then(|| name.to_owned())
}

/// Whether a control plane reports it is initialised.
pub fn control_plane_initialized(object: &DynamicObject) -> bool {
    at(
        &object.data,
        "status.initialization.controlPlaneInitialized",
    )
    .as_bool()
        == Some(true)
        || at(&object.data, "status.initialized").as_bool() == Some(true)
}

/// The non-empty `spec.controlPlaneEndpoint` of an object (`host` set, `port` non-zero).
pub fn control_plane_endpoint(object: &DynamicObject) -> Option<(String, i32)> {
    let endpoint = at(&object.data, "spec.controlPlaneEndpoint");
    let host = endpoint.get("host")?.as_str().filter(|h| !h.is_empty())?;
    let port = endpoint.get("port")?.as_i64().filter(|p| *p > 0)?;
    Some((host.to_owned(), i32::try_from(port).ok()?))
}

/// Why an object is not ready, from its `Ready` condition (`reason: message`), for conditions that
/// point at the root cause instead of only saying "waiting".
pub fn not_ready_reason(object: &DynamicObject) -> Option<String> {
    let conditions = at(&object.data, "status.conditions").as_array()?;
    let ready = conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    if ready.get("status").and_then(Value::as_str) == Some("True") {
        return None;
    }
    let reason = ready.get("reason").and_then(Value::as_str).unwrap_or("");
    let message = ready.get("message").and_then(Value::as_str).unwrap_or("");
    match (reason.is_empty(), message.is_empty()) {
        (true, true) => None,
        (false, true) => Some(reason.to_owned()),
        (true, false) => Some(message.to_owned()),
        (false, false) => Some(format!("{reason}: {message}")),
    }
}

/// Creates the object a template (`…Template` kind) stamps out, by the `spec.template` contract:
/// kind without the `Template` suffix, `spec` = the template's `spec.template.spec`, labels and
/// annotations from `spec.template.metadata` plus `labels`, the cloned-from annotations, and
/// `owner`. Returns a reference to the clone; one that already exists (a retried pass) is kept.
pub async fn clone_template(
    client: &Client,
    namespace: &str,
    template: &ContractVersionedObjectReference,
    name: &str,
    labels: &[(String, String)],
    owner: OwnerReference,
) -> Result<ContractVersionedObjectReference, ContractError> {
    let source = Referenced::resolve(client, namespace, template).await?;
    let template_object = source.get().await?.ok_or_else(|| ContractError::Missing {
        kind: template.kind.clone(),
        namespace: namespace.to_owned(),
        name: template.name.clone(),
    })?;
    let kind = template
        .kind
        .strip_suffix("Template")
        .unwrap_or(&template.kind)
        .to_owned();
    let target_ref = ContractVersionedObjectReference::to(&template.api_group, &kind, name);
    let target = Referenced::resolve(client, namespace, &target_ref).await?;
    let spec = at(&template_object.data, "spec.template.spec").clone();
    let meta = at(&template_object.data, "spec.template.metadata");
    let mut all_labels = meta
        .get("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (k, v) in labels {
        all_labels.insert(k.clone(), json!(v));
    }
    let mut annotations = meta
        .get("annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    annotations.insert(
        crate::ANNOTATION_CLONED_FROM_NAME.into(),
        json!(template.name),
    );
    annotations.insert(
        crate::ANNOTATION_CLONED_FROM_GROUPKIND.into(),
        json!(format!("{}.{}", template.kind, template.api_group)),
    );
    let object = json!({
        "apiVersion": target.resource.api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": all_labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": if spec.is_null() { json!({}) } else { spec },
    });
    let object: DynamicObject = serde_json::from_value(object).map_err(|e| ContractError::Api {
        action: "building",
        kind: kind.clone(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source: Box::new(kube::Error::SerdeError(e)),
    })?;
    match target.api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(target_ref),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(target_ref),
        Err(source) => Err(target.error("creating", name)(source)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(data: Value) -> DynamicObject {
        let mut object = DynamicObject::new(
            "x",
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        object.data = data;
        object
    }

    #[test]
    fn contract_fields_of_both_versions() {
        let cases = [
            (
                json!({"status": {"initialization": {"provisioned": true}}}),
                true,
            ),
            (json!({"status": {"ready": true}}), true),
            (json!({"status": {"ready": false}}), false),
            (json!({}), false),
        ];
        for (data, want) in cases {
            assert_eq!(provisioned(&object(data.clone())), want, "{data}");
        }
        let bootstrap = [
            (
                json!({"status": {"dataSecretName": "s", "initialization": {"dataSecretCreated": true}}}),
                Some("s"),
            ),
            (
                json!({"status": {"dataSecretName": "s", "ready": true}}),
                Some("s"),
            ),
            (json!({"status": {"dataSecretName": "s"}}), None),
            (json!({"status": {"ready": true}}), None),
        ];
        for (data, want) in bootstrap {
            assert_eq!(
                data_secret_name(&object(data.clone())).as_deref(),
                want,
                "{data}"
            );
        }
        assert_eq!(
            control_plane_endpoint(&object(
                json!({"spec": {"controlPlaneEndpoint": {"host": "10.0.0.5", "port": 6443}}})
            )),
            Some(("10.0.0.5".to_owned(), 6443))
        );
        assert_eq!(
            control_plane_endpoint(&object(
                json!({"spec": {"controlPlaneEndpoint": {"host": "", "port": 0}}})
            )),
            None
        );
        assert!(control_plane_initialized(&object(
            json!({"status": {"initialized": true}})
        )));
        assert_eq!(
            not_ready_reason(&object(json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NoHost", "message": "no available host matches"}]}}))).as_deref(),
            Some("NoHost: no available host matches")
        );
    }
}
