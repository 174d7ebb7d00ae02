//! Mappings shared by several kinds: object references, `metav1.Duration` fields, Machine specs,
//! health checks, failure domains, and the status reshuffle every v1beta2 kind went through.

use serde_json::{Map, Value};

use super::ConvertError;
use super::duration::{format_seconds, parse_seconds};
use super::tree::{
    self, each_item, get, join, join_all, move_value, put, string_at, take, with_value,
};
use crate::kinds::KINDS;
use crate::meta::group_of;

/// The older of the two versions, the one references are resolved to when converting down.
pub(super) const V1BETA1: &str = "v1beta1";

/// `metadata.namespace` of an object, which v1beta1 references written by conversion carry.
pub(super) fn namespace_of(object: &Value) -> Option<String> {
    get(object, &["metadata", "namespace"])
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The `apiVersion` a v1beta1 reference to `group`/`kind` gets: `v1beta1` when the kind serves it,
/// the kind's storage version when it does not, and `v1beta1` for kinds capstan does not know.
pub(super) fn referenced_api_version(group: &str, kind: &str) -> String {
    let version = KINDS
        .iter()
        .find(|info| info.group == group && info.kind == kind)
        .map_or(V1BETA1, |info| {
            if info.versions.contains(&V1BETA1) {
                V1BETA1
            } else {
                info.storage_version
            }
        });
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// Fields of a `corev1.ObjectReference` that v1beta2 references dropped.
const DROPPED_REFERENCE_FIELDS: [&str; 4] = ["namespace", "uid", "resourceVersion", "fieldPath"];

fn object_mut<'a>(
    value: &'a mut Value,
    at: &str,
) -> Result<&'a mut Map<String, Value>, ConvertError> {
    value
        .as_object_mut()
        .ok_or_else(|| ConvertError::not_an_object(at))
}

/// `corev1.ObjectReference` at `container.key` → `ContractVersionedObjectReference`:
/// `apiVersion` becomes `apiGroup`; `namespace`, `uid`, `resourceVersion`, `fieldPath` are dropped.
pub(super) fn contract_reference_up(
    container: &mut Value,
    key: &str,
    at: &str,
) -> Result<(), ConvertError> {
    let path = join(at, key);
    let Some(reference) = container.get_mut(key) else {
        return Ok(());
    };
    let api_version = string_at(reference, "apiVersion", &path)?.map(str::to_owned);
    let fields = object_mut(reference, &path)?;
    let mut converted = Map::new();
    if let Some(api_version) = api_version {
        converted.insert(
            "apiGroup".into(),
            Value::String(group_of(&api_version).to_owned()),
        );
    }
    for (field, value) in std::mem::take(fields) {
        if field != "apiVersion" && !DROPPED_REFERENCE_FIELDS.contains(&field.as_str()) {
            converted.insert(field, value);
        }
    }
    *fields = converted;
    Ok(())
}

/// `ContractVersionedObjectReference` at `container.key` → `corev1.ObjectReference`: `apiGroup`
/// becomes the `apiVersion` of [`referenced_api_version`], and `namespace` is the referring object's.
pub(super) fn contract_reference_down(
    container: &mut Value,
    key: &str,
    namespace: Option<&str>,
    at: &str,
) -> Result<(), ConvertError> {
    let path = join(at, key);
    let Some(reference) = container.get_mut(key) else {
        return Ok(());
    };
    let group = string_at(reference, "apiGroup", &path)?.map(str::to_owned);
    let kind = string_at(reference, "kind", &path)?
        .unwrap_or_default()
        .to_owned();
    let fields = object_mut(reference, &path)?;
    let mut converted = Map::new();
    if let Some(group) = group {
        converted.insert(
            "apiVersion".into(),
            Value::String(referenced_api_version(&group, &kind)),
        );
    }
    for (field, value) in std::mem::take(fields) {
        if field != "apiGroup" {
            converted.insert(field, value);
        }
    }
    if let Some(namespace) = namespace {
        converted
            .entry("namespace")
            .or_insert_with(|| Value::String(namespace.to_owned()));
    }
    *fields = converted;
    Ok(())
}

/// A `corev1.ObjectReference` kept as a full reference in v1beta2 (`apiVersion`, `kind`, `name`)
/// loses the fields v1beta2 dropped.
pub(super) fn trim_reference(reference: &mut Value, at: &str) -> Result<(), ConvertError> {
    let fields = object_mut(reference, at)?;
    for field in DROPPED_REFERENCE_FIELDS {
        fields.remove(field);
    }
    Ok(())
}

/// The Go duration at `container.from` → whole seconds at `to` (below `container`). A one-step
/// `to` keeps the field's position.
pub(super) fn seconds_up(
    container: &mut Value,
    from: &str,
    to: &[&str],
    at: &str,
) -> Result<(), ConvertError> {
    let path = join(at, from);
    let Some(text) = string_at(container, from, at)?.map(str::to_owned) else {
        return Ok(());
    };
    let seconds = parse_seconds(&text).map_err(|source| ConvertError::InvalidDuration {
        path,
        value: text.clone(),
        source,
    })?;
    if let [to] = to {
        tree::rename(container, from, to);
        put(container, &[to], Value::from(seconds), at)
    } else {
        take(container, &[from]);
        put(container, to, Value::from(seconds), at)
    }
}

/// Whole seconds at `from` (below `container`) → a Go duration at `container.to`. A one-step
/// `from` keeps the field's position.
pub(super) fn seconds_down(
    container: &mut Value,
    from: &[&str],
    to: &str,
    at: &str,
) -> Result<(), ConvertError> {
    let Some(value) = get(container, from) else {
        return Ok(());
    };
    let seconds = value.as_i64().ok_or_else(|| ConvertError::WrongType {
        path: join_all(at, from),
        expected: "a whole number of seconds",
    })?;
    let text = Value::String(format_seconds(seconds));
    if let [from] = from {
        tree::rename(container, from, to);
        put(container, &[to], text, at)
    } else {
        take(container, from);
        put(container, &[to], text, at)
    }
}

/// The three node timeouts of a Machine spec: v1beta1 name, v1beta2 name under `deletion`.
const NODE_TIMEOUTS: [(&str, &str); 3] = [
    ("nodeDrainTimeout", "nodeDrainTimeoutSeconds"),
    ("nodeVolumeDetachTimeout", "nodeVolumeDetachTimeoutSeconds"),
    ("nodeDeletionTimeout", "nodeDeletionTimeoutSeconds"),
];

/// `nodeDrainTimeout: 10s` → `deletion.nodeDrainTimeoutSeconds: 10`, and the other two.
pub(super) fn node_timeouts_up(spec: &mut Value, at: &str) -> Result<(), ConvertError> {
    for (duration, seconds) in NODE_TIMEOUTS {
        seconds_up(spec, duration, &["deletion", seconds], at)?;
    }
    Ok(())
}

/// `deletion.nodeDrainTimeoutSeconds: 10` → `nodeDrainTimeout: 10s`, and the other two.
pub(super) fn node_timeouts_down(spec: &mut Value, at: &str) -> Result<(), ConvertError> {
    for (duration, seconds) in NODE_TIMEOUTS {
        seconds_down(spec, &["deletion", seconds], duration, at)?;
    }
    Ok(())
}

/// A Machine spec (Machine, and the templates of MachineSet and MachineDeployment), up.
pub(super) fn machine_spec_up(spec: &mut Value, at: &str) -> Result<(), ConvertError> {
    with_value(spec, &["bootstrap"], at, |bootstrap, at| {
        contract_reference_up(bootstrap, "configRef", at)
    })?;
    contract_reference_up(spec, "infrastructureRef", at)?;
    node_timeouts_up(spec, at)
}

/// A Machine spec, down; references get `namespace`.
pub(super) fn machine_spec_down(
    spec: &mut Value,
    namespace: Option<&str>,
    at: &str,
) -> Result<(), ConvertError> {
    with_value(spec, &["bootstrap"], at, |bootstrap, at| {
        contract_reference_down(bootstrap, "configRef", namespace, at)
    })?;
    contract_reference_down(spec, "infrastructureRef", namespace, at)?;
    node_timeouts_down(spec, at)
}

/// A v1beta1 MachineHealthCheck spec (or a topology `machineHealthCheck`) → the v1beta2
/// `checks` / `remediation` shape.
pub(super) fn health_check_up(check: &mut Value, at: &str) -> Result<(), ConvertError> {
    seconds_up(
        check,
        "nodeStartupTimeout",
        &["checks", "nodeStartupTimeoutSeconds"],
        at,
    )?;
    for (from, to) in [
        ("unhealthyConditions", "unhealthyNodeConditions"),
        ("unhealthyMachineConditions", "unhealthyMachineConditions"),
    ] {
        each_item(check, &[from], at, |condition, at| {
            seconds_up(condition, "timeout", &["timeoutSeconds"], at)
        })?;
        move_value(check, &[from], &["checks", to], at)?;
    }
    move_value(
        check,
        &["unhealthyRange"],
        &["remediation", "triggerIf", "unhealthyInRange"],
        at,
    )?;
    move_value(
        check,
        &["maxUnhealthy"],
        &["remediation", "triggerIf", "unhealthyLessThanOrEqualTo"],
        at,
    )?;
    with_value(check, &["remediationTemplate"], at, trim_reference)?;
    move_value(
        check,
        &["remediationTemplate"],
        &["remediation", "templateRef"],
        at,
    )
}

/// The v1beta2 `checks` / `remediation` shape → a v1beta1 MachineHealthCheck spec.
pub(super) fn health_check_down(check: &mut Value, at: &str) -> Result<(), ConvertError> {
    seconds_down(
        check,
        &["checks", "nodeStartupTimeoutSeconds"],
        "nodeStartupTimeout",
        at,
    )?;
    for (from, to) in [
        ("unhealthyNodeConditions", "unhealthyConditions"),
        ("unhealthyMachineConditions", "unhealthyMachineConditions"),
    ] {
        each_item(check, &["checks", from], at, |condition, at| {
            seconds_down(condition, &["timeoutSeconds"], "timeout", at)
        })?;
        move_value(check, &["checks", from], &[to], at)?;
    }
    move_value(
        check,
        &["remediation", "triggerIf", "unhealthyInRange"],
        &["unhealthyRange"],
        at,
    )?;
    move_value(
        check,
        &["remediation", "triggerIf", "unhealthyLessThanOrEqualTo"],
        &["maxUnhealthy"],
        at,
    )?;
    move_value(
        check,
        &["remediation", "templateRef"],
        &["remediationTemplate"],
        at,
    )
}

/// v1beta1 failure domains (a map from name to `{controlPlane, attributes}`) → v1beta2 (a list of
/// `{name, controlPlane, attributes}`, sorted by name as upstream sorts them).
pub(super) fn failure_domains_up(
    container: &mut Value,
    key: &str,
    at: &str,
) -> Result<(), ConvertError> {
    let path = join(at, key);
    let Some(domains) = container.get_mut(key) else {
        return Ok(());
    };
    let map = object_mut(domains, &path)?;
    let mut names: Vec<String> = map.keys().cloned().collect();
    names.sort();
    let mut list = Vec::with_capacity(names.len());
    for name in names {
        let Some(Value::Object(domain)) = map.remove(&name) else {
            return Err(ConvertError::not_an_object(&join(&path, &name)));
        };
        let mut item = Map::new();
        item.insert("name".into(), Value::String(name));
        item.extend(domain);
        list.push(Value::Object(item));
    }
    *domains = Value::Array(list);
    Ok(())
}

/// v1beta2 failure domains (a list) → v1beta1 (a map by name; a later duplicate wins).
pub(super) fn failure_domains_down(
    container: &mut Value,
    key: &str,
    at: &str,
) -> Result<(), ConvertError> {
    let path = join(at, key);
    let Some(domains) = container.get_mut(key) else {
        return Ok(());
    };
    let Value::Array(list) = domains else {
        return Err(ConvertError::WrongType {
            path,
            expected: "a list",
        });
    };
    let mut map = Map::new();
    for (index, item) in std::mem::take(list).into_iter().enumerate() {
        let item_path = format!("{path}[{index}]");
        let Value::Object(mut domain) = item else {
            return Err(ConvertError::not_an_object(&item_path));
        };
        let Some(Value::String(name)) = domain.remove("name") else {
            return Err(ConvertError::WrongType {
                path: join(&item_path, "name"),
                expected: "a string",
            });
        };
        map.insert(name, Value::Object(domain));
    }
    *domains = Value::Object(map);
    Ok(())
}

/// How a kind's status changed shape between v1beta1 and v1beta2.
pub(super) struct StatusShape {
    /// Fields (besides `conditions`) that v1beta2 keeps under `status.deprecated.v1beta1`.
    pub deprecated: &'static [&'static str],
    /// Fields (besides `conditions`) that v1beta1 keeps under `status.v1beta2`.
    pub v1beta2: &'static [&'static str],
    /// v1beta1 status fields and the `status.initialization` fields they became.
    pub initialization: &'static [(&'static str, &'static str)],
}

/// The shape of kinds whose status only swapped their conditions.
pub(super) const CONDITIONS_ONLY: StatusShape = StatusShape {
    deprecated: &[],
    v1beta2: &[],
    initialization: &[],
};

/// The shape of kinds that also dropped terminal failures.
pub(super) const CONDITIONS_AND_FAILURES: StatusShape = StatusShape {
    deprecated: &["failureReason", "failureMessage"],
    v1beta2: &[],
    initialization: &[],
};

/// v1beta1 status → v1beta2: v1beta1 `conditions` and the deprecated fields move to
/// `deprecated.v1beta1`, `initialization` is filled from the v1beta1 flags, and everything under
/// `v1beta2` (its `conditions` included) moves up to the status itself.
pub(super) fn status_up(object: &mut Value, shape: &StatusShape) -> Result<(), ConvertError> {
    let Some(status) = object.get_mut("status") else {
        return Ok(());
    };
    object_mut(status, "status")?;
    for field in std::iter::once("conditions").chain(shape.deprecated.iter().copied()) {
        move_value(
            status,
            &[field],
            &["deprecated", "v1beta1", field],
            "status",
        )?;
    }
    for (flag, initialization) in shape.initialization {
        move_value(
            status,
            &[flag],
            &["initialization", initialization],
            "status",
        )?;
    }
    if let Some(newer) = take(status, &["v1beta2"]) {
        let Value::Object(newer) = newer else {
            return Err(ConvertError::not_an_object("status.v1beta2"));
        };
        for (field, value) in newer {
            put(status, &[&field], value, "status")?;
        }
    }
    Ok(())
}

/// v1beta2 status → v1beta1, the inverse of [`status_up`].
pub(super) fn status_down(object: &mut Value, shape: &StatusShape) -> Result<(), ConvertError> {
    let Some(status) = object.get_mut("status") else {
        return Ok(());
    };
    object_mut(status, "status")?;
    for field in std::iter::once("conditions").chain(shape.v1beta2.iter().copied()) {
        move_value(status, &[field], &["v1beta2", field], "status")?;
    }
    for (flag, initialization) in shape.initialization {
        move_value(
            status,
            &["initialization", initialization],
            &[flag],
            "status",
        )?;
    }
    if let Some(older) = take(status, &["deprecated", "v1beta1"]) {
        let Value::Object(older) = older else {
            return Err(ConvertError::not_an_object("status.deprecated.v1beta1"));
        };
        for (field, value) in older {
            put(status, &[&field], value, "status")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_lose_the_version_and_get_it_back_from_the_catalogue() {
        let mut spec = json!({"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "Metal3Cluster", "name": "capi-1", "namespace": "default", "uid": "u"}});
        contract_reference_up(&mut spec, "infrastructureRef", "spec").unwrap();
        assert_eq!(
            spec,
            json!({"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Cluster", "name": "capi-1"}})
        );
        contract_reference_down(&mut spec, "infrastructureRef", Some("default"), "spec").unwrap();
        assert_eq!(
            spec,
            json!({"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "Metal3Cluster", "name": "capi-1", "namespace": "default"}})
        );
    }

    #[test]
    fn referenced_versions() {
        assert_eq!(
            referenced_api_version("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"),
            "controlplane.cluster.x-k8s.io/v1beta1"
        );
        assert_eq!(
            referenced_api_version("metal3.io", "BareMetalHost"),
            "metal3.io/v1alpha1"
        );
        assert_eq!(referenced_api_version("", "ConfigMap"), "v1");
        assert_eq!(
            referenced_api_version("infrastructure.cluster.x-k8s.io", "DockerMachineTemplate"),
            "infrastructure.cluster.x-k8s.io/v1beta1"
        );
    }

    #[test]
    fn bad_references_are_errors() {
        let mut spec = json!({"infrastructureRef": "capi-1"});
        assert_eq!(
            contract_reference_up(&mut spec, "infrastructureRef", "spec")
                .unwrap_err()
                .to_string(),
            "spec.infrastructureRef must be an object"
        );
        let mut spec = json!({"infrastructureRef": {"apiVersion": 1}});
        assert_eq!(
            contract_reference_up(&mut spec, "infrastructureRef", "spec")
                .unwrap_err()
                .to_string(),
            "spec.infrastructureRef.apiVersion must be a string"
        );
    }

    #[test]
    fn durations_become_seconds_in_place_or_under_deletion() {
        let mut spec = json!({"a": 1, "nodeDrainTimeout": "1m30s", "b": 2});
        node_timeouts_up(&mut spec, "spec").unwrap();
        assert_eq!(
            spec,
            json!({"a": 1, "b": 2, "deletion": {"nodeDrainTimeoutSeconds": 90}})
        );
        node_timeouts_down(&mut spec, "spec").unwrap();
        assert_eq!(spec, json!({"a": 1, "b": 2, "nodeDrainTimeout": "1m30s"}));

        let mut remediation = json!({"maxRetry": 3, "retryPeriod": "90s"});
        seconds_up(
            &mut remediation,
            "retryPeriod",
            &["retryPeriodSeconds"],
            "spec",
        )
        .unwrap();
        let keys: Vec<_> = remediation.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["maxRetry", "retryPeriodSeconds"]);
        assert_eq!(remediation["retryPeriodSeconds"], 90);
    }

    #[test]
    fn bad_durations_are_errors() {
        let mut spec = json!({"nodeDrainTimeout": "ten seconds"});
        let err = node_timeouts_up(&mut spec, "spec").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.nodeDrainTimeout: \"ten seconds\" is not a duration"),
            "{err}"
        );
        let mut spec = json!({"nodeDrainTimeout": 10});
        assert_eq!(
            node_timeouts_up(&mut spec, "spec").unwrap_err().to_string(),
            "spec.nodeDrainTimeout must be a string"
        );
        let mut spec = json!({"deletion": {"nodeDrainTimeoutSeconds": "10"}});
        assert_eq!(
            node_timeouts_down(&mut spec, "spec")
                .unwrap_err()
                .to_string(),
            "spec.deletion.nodeDrainTimeoutSeconds must be a whole number of seconds"
        );
    }

    #[test]
    fn failure_domains_map_to_a_sorted_list_and_back() {
        let mut status = json!({"failureDomains": {"b": {"controlPlane": true}, "a": {"attributes": {"rack": "1"}}}});
        failure_domains_up(&mut status, "failureDomains", "status").unwrap();
        assert_eq!(
            status,
            json!({"failureDomains": [{"name": "a", "attributes": {"rack": "1"}}, {"name": "b", "controlPlane": true}]})
        );
        failure_domains_down(&mut status, "failureDomains", "status").unwrap();
        assert_eq!(
            status,
            json!({"failureDomains": {"b": {"controlPlane": true}, "a": {"attributes": {"rack": "1"}}}})
        );
        let mut bad = json!({"failureDomains": [{"controlPlane": true}]});
        assert!(failure_domains_down(&mut bad, "failureDomains", "status").is_err());
    }

    #[test]
    fn statuses_swap_their_condition_generations() {
        let shape = StatusShape {
            deprecated: &["readyReplicas"],
            v1beta2: &["readyReplicas"],
            initialization: &[("ready", "provisioned")],
        };
        let mut object = json!({"status": {"ready": true, "readyReplicas": 1, "conditions": [{"type": "Ready"}],
            "v1beta2": {"readyReplicas": 2, "conditions": [{"type": "Available"}]}}});
        status_up(&mut object, &shape).unwrap();
        assert_eq!(
            object,
            json!({"status": {"readyReplicas": 2, "conditions": [{"type": "Available"}], "initialization": {"provisioned": true},
                "deprecated": {"v1beta1": {"readyReplicas": 1, "conditions": [{"type": "Ready"}]}}}})
        );
        status_down(&mut object, &shape).unwrap();
        assert_eq!(
            object,
            json!({"status": {"ready": true, "readyReplicas": 1, "conditions": [{"type": "Ready"}],
                "v1beta2": {"readyReplicas": 2, "conditions": [{"type": "Available"}]}}})
        );
    }
}
