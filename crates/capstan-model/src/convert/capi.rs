//! `cluster.x-k8s.io` and `addons.cluster.x-k8s.io`: Cluster (with its topology), Machine,
//! MachineSet, MachineDeployment, MachineHealthCheck and ClusterResourceSet.

use serde_json::Value;

use super::ConvertError;
use super::common::{
    CONDITIONS_ONLY, StatusShape, contract_reference_down, contract_reference_up,
    failure_domains_down, failure_domains_up, health_check_down, health_check_up,
    machine_spec_down, machine_spec_up, namespace_of, node_timeouts_down, node_timeouts_up,
    status_down, status_up,
};
use super::tree::{each_item, get_mut, move_value, rename, take, with_value};

const CLUSTER_STATUS: StatusShape = StatusShape {
    deprecated: &["failureReason", "failureMessage"],
    v1beta2: &["controlPlane", "workers"],
    initialization: &[
        ("controlPlaneReady", "controlPlaneInitialized"),
        ("infrastructureReady", "infrastructureProvisioned"),
    ],
};

const MACHINE_STATUS: StatusShape = StatusShape {
    deprecated: &["failureReason", "failureMessage"],
    v1beta2: &[],
    initialization: &[
        ("bootstrapReady", "bootstrapDataSecretCreated"),
        ("infrastructureReady", "infrastructureProvisioned"),
    ],
};

const MACHINE_SET_STATUS: StatusShape = StatusShape {
    deprecated: &[
        "availableReplicas",
        "readyReplicas",
        "fullyLabeledReplicas",
        "failureReason",
        "failureMessage",
    ],
    v1beta2: &["availableReplicas", "readyReplicas", "upToDateReplicas"],
    initialization: &[],
};

const MACHINE_DEPLOYMENT_STATUS: StatusShape = StatusShape {
    deprecated: &[
        "availableReplicas",
        "readyReplicas",
        "unavailableReplicas",
        "updatedReplicas",
    ],
    v1beta2: &["availableReplicas", "readyReplicas", "upToDateReplicas"],
    initialization: &[],
};

fn spec_mut(object: &mut Value) -> Option<&mut Value> {
    object.get_mut("spec")
}

/// Cluster, v1beta1 → v1beta2.
pub(super) fn cluster_up(object: &mut Value) -> Result<(), ConvertError> {
    if let Some(spec) = spec_mut(object) {
        contract_reference_up(spec, "controlPlaneRef", "spec")?;
        contract_reference_up(spec, "infrastructureRef", "spec")?;
        with_value(spec, &["topology"], "spec", topology_up)?;
    }
    status_up(object, &CLUSTER_STATUS)?;
    with_value(object, &["status"], "", |status, at| {
        failure_domains_up(status, "failureDomains", at)
    })
}

/// Cluster, v1beta2 → v1beta1.
pub(super) fn cluster_down(object: &mut Value) -> Result<(), ConvertError> {
    let namespace = namespace_of(object);
    if let Some(spec) = spec_mut(object) {
        contract_reference_down(spec, "controlPlaneRef", namespace.as_deref(), "spec")?;
        contract_reference_down(spec, "infrastructureRef", namespace.as_deref(), "spec")?;
        with_value(spec, &["topology"], "spec", topology_down)?;
    }
    with_value(object, &["status"], "", |status, at| {
        failure_domains_down(status, "failureDomains", at)
    })?;
    status_down(object, &CLUSTER_STATUS)
}

/// Drops `definitionFrom` (removed in v1beta2) from every variable of the list at `path`.
fn drop_definition_from(
    container: &mut Value,
    path: &[&str],
    at: &str,
) -> Result<(), ConvertError> {
    each_item(container, path, at, |variable, _| {
        take(variable, &["definitionFrom"]);
        Ok(())
    })
}

/// A topology `machineHealthCheck` → `healthCheck`.
fn topology_health_check_up(class: &mut Value, at: &str) -> Result<(), ConvertError> {
    with_value(class, &["machineHealthCheck"], at, |check, at| {
        rename(check, "enable", "enabled");
        health_check_up(check, at)
    })?;
    rename(class, "machineHealthCheck", "healthCheck");
    Ok(())
}

/// A topology `healthCheck` → `machineHealthCheck`.
fn topology_health_check_down(class: &mut Value, at: &str) -> Result<(), ConvertError> {
    with_value(class, &["healthCheck"], at, |check, at| {
        rename(check, "enabled", "enable");
        health_check_down(check, at)
    })?;
    rename(class, "healthCheck", "machineHealthCheck");
    Ok(())
}

fn topology_up(topology: &mut Value, at: &str) -> Result<(), ConvertError> {
    move_value(topology, &["class"], &["classRef", "name"], at)?;
    move_value(
        topology,
        &["classNamespace"],
        &["classRef", "namespace"],
        at,
    )?;
    take(topology, &["rolloutAfter"]);
    drop_definition_from(topology, &["variables"], at)?;
    with_value(topology, &["controlPlane"], at, |control_plane, at| {
        topology_health_check_up(control_plane, at)?;
        node_timeouts_up(control_plane, at)?;
        drop_definition_from(control_plane, &["variables", "overrides"], at)
    })?;
    each_item(
        topology,
        &["workers", "machineDeployments"],
        at,
        |deployment, at| {
            topology_health_check_up(deployment, at)?;
            node_timeouts_up(deployment, at)?;
            drop_definition_from(deployment, &["variables", "overrides"], at)?;
            move_value(
                deployment,
                &["strategy", "rollingUpdate", "deletePolicy"],
                &["deletion", "order"],
                at,
            )?;
            move_value(
                deployment,
                &["strategy", "remediation", "maxInFlight"],
                &["healthCheck", "remediation", "maxInFlight"],
                at,
            )?;
            move_value(deployment, &["strategy"], &["rollout", "strategy"], at)
        },
    )?;
    each_item(topology, &["workers", "machinePools"], at, |pool, at| {
        node_timeouts_up(pool, at)?;
        drop_definition_from(pool, &["variables", "overrides"], at)
    })
}

fn topology_down(topology: &mut Value, at: &str) -> Result<(), ConvertError> {
    move_value(topology, &["classRef", "name"], &["class"], at)?;
    move_value(
        topology,
        &["classRef", "namespace"],
        &["classNamespace"],
        at,
    )?;
    with_value(topology, &["controlPlane"], at, |control_plane, at| {
        node_timeouts_down(control_plane, at)?;
        topology_health_check_down(control_plane, at)
    })?;
    each_item(
        topology,
        &["workers", "machineDeployments"],
        at,
        |deployment, at| {
            move_value(deployment, &["rollout", "strategy"], &["strategy"], at)?;
            move_value(
                deployment,
                &["healthCheck", "remediation", "maxInFlight"],
                &["strategy", "remediation", "maxInFlight"],
                at,
            )?;
            move_value(
                deployment,
                &["deletion", "order"],
                &["strategy", "rollingUpdate", "deletePolicy"],
                at,
            )?;
            node_timeouts_down(deployment, at)?;
            topology_health_check_down(deployment, at)
        },
    )?;
    each_item(topology, &["workers", "machinePools"], at, |pool, at| {
        node_timeouts_down(pool, at)
    })
}

/// Machine, v1beta1 → v1beta2.
pub(super) fn machine_up(object: &mut Value) -> Result<(), ConvertError> {
    if let Some(spec) = spec_mut(object) {
        machine_spec_up(spec, "spec")?;
    }
    status_up(object, &MACHINE_STATUS)?;
    // The node is named; the rest of the reference was always `v1`/`Node`.
    if let Some(node) = get_mut(object, &["status", "nodeRef"]) {
        let node = node
            .as_object_mut()
            .ok_or_else(|| ConvertError::not_an_object("status.nodeRef"))?;
        node.retain(|field, _| {
            ![
                "apiVersion",
                "kind",
                "namespace",
                "uid",
                "resourceVersion",
                "fieldPath",
            ]
            .contains(&field.as_str())
        });
    }
    Ok(())
}

/// Machine, v1beta2 → v1beta1.
pub(super) fn machine_down(object: &mut Value) -> Result<(), ConvertError> {
    let namespace = namespace_of(object);
    if let Some(spec) = spec_mut(object) {
        machine_spec_down(spec, namespace.as_deref(), "spec")?;
        take(spec, &["minReadySeconds"]);
    }
    if let Some(node) = get_mut(object, &["status", "nodeRef"]) {
        let node = node
            .as_object_mut()
            .ok_or_else(|| ConvertError::not_an_object("status.nodeRef"))?;
        let mut reference = serde_json::Map::new();
        reference.insert("apiVersion".into(), "v1".into());
        reference.insert("kind".into(), "Node".into());
        reference.extend(std::mem::take(node));
        *node = reference;
    }
    if let Some(status) = object.get_mut("status") {
        take(status, &["failureDomain"]);
        // v1beta1 has no Updating phase; upstream reports such Machines as Running.
        if let Some(phase) = status.get_mut("phase")
            && *phase == "Updating"
        {
            *phase = Value::from("Running");
        }
    }
    status_down(object, &MACHINE_STATUS)
}

/// MachineSet, v1beta1 → v1beta2.
pub(super) fn machine_set_up(object: &mut Value) -> Result<(), ConvertError> {
    if let Some(spec) = spec_mut(object) {
        rename(spec, "machineNamingStrategy", "machineNaming");
        move_value(spec, &["deletePolicy"], &["deletion", "order"], "spec")?;
        move_value(
            spec,
            &["minReadySeconds"],
            &["template", "spec", "minReadySeconds"],
            "spec",
        )?;
        with_value(spec, &["template", "spec"], "spec", machine_spec_up)?;
    }
    status_up(object, &MACHINE_SET_STATUS)
}

/// MachineSet, v1beta2 → v1beta1.
pub(super) fn machine_set_down(object: &mut Value) -> Result<(), ConvertError> {
    let namespace = namespace_of(object);
    if let Some(spec) = spec_mut(object) {
        rename(spec, "machineNaming", "machineNamingStrategy");
        move_value(spec, &["deletion", "order"], &["deletePolicy"], "spec")?;
        move_value(
            spec,
            &["template", "spec", "minReadySeconds"],
            &["minReadySeconds"],
            "spec",
        )?;
        with_value(spec, &["template", "spec"], "spec", |machine, at| {
            machine_spec_down(machine, namespace.as_deref(), at)
        })?;
    }
    status_down(object, &MACHINE_SET_STATUS)
}

/// MachineDeployment, v1beta1 → v1beta2.
pub(super) fn machine_deployment_up(object: &mut Value) -> Result<(), ConvertError> {
    if let Some(spec) = spec_mut(object) {
        rename(spec, "machineNamingStrategy", "machineNaming");
        move_value(
            spec,
            &["minReadySeconds"],
            &["template", "spec", "minReadySeconds"],
            "spec",
        )?;
        // Removed in v1beta2 (the stash keeps them).
        take(spec, &["progressDeadlineSeconds"]);
        take(spec, &["revisionHistoryLimit"]);
        move_value(spec, &["rolloutAfter"], &["rollout", "after"], "spec")?;
        move_value(
            spec,
            &["strategy", "rollingUpdate", "deletePolicy"],
            &["deletion", "order"],
            "spec",
        )?;
        move_value(spec, &["strategy", "remediation"], &["remediation"], "spec")?;
        move_value(spec, &["strategy"], &["rollout", "strategy"], "spec")?;
        with_value(spec, &["template", "spec"], "spec", machine_spec_up)?;
    }
    status_up(object, &MACHINE_DEPLOYMENT_STATUS)
}

/// MachineDeployment, v1beta2 → v1beta1.
pub(super) fn machine_deployment_down(object: &mut Value) -> Result<(), ConvertError> {
    let namespace = namespace_of(object);
    if let Some(spec) = spec_mut(object) {
        rename(spec, "machineNaming", "machineNamingStrategy");
        move_value(
            spec,
            &["template", "spec", "minReadySeconds"],
            &["minReadySeconds"],
            "spec",
        )?;
        move_value(spec, &["rollout", "after"], &["rolloutAfter"], "spec")?;
        move_value(spec, &["rollout", "strategy"], &["strategy"], "spec")?;
        move_value(spec, &["remediation"], &["strategy", "remediation"], "spec")?;
        move_value(
            spec,
            &["deletion", "order"],
            &["strategy", "rollingUpdate", "deletePolicy"],
            "spec",
        )?;
        with_value(spec, &["template", "spec"], "spec", |machine, at| {
            machine_spec_down(machine, namespace.as_deref(), at)
        })?;
    }
    status_down(object, &MACHINE_DEPLOYMENT_STATUS)
}

/// MachineHealthCheck, v1beta1 → v1beta2.
pub(super) fn machine_health_check_up(object: &mut Value) -> Result<(), ConvertError> {
    if let Some(spec) = spec_mut(object) {
        health_check_up(spec, "spec")?;
    }
    status_up(object, &CONDITIONS_ONLY)
}

/// MachineHealthCheck, v1beta2 → v1beta1.
pub(super) fn machine_health_check_down(object: &mut Value) -> Result<(), ConvertError> {
    if let Some(spec) = spec_mut(object) {
        health_check_down(spec, "spec")?;
    }
    status_down(object, &CONDITIONS_ONLY)
}

/// ClusterResourceSet, v1beta1 → v1beta2: only the conditions moved.
pub(super) fn cluster_resource_set_up(object: &mut Value) -> Result<(), ConvertError> {
    status_up(object, &CONDITIONS_ONLY)
}

/// ClusterResourceSet, v1beta2 → v1beta1.
pub(super) fn cluster_resource_set_down(object: &mut Value) -> Result<(), ConvertError> {
    status_down(object, &CONDITIONS_ONLY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn machine_deployment_strategy_splits_three_ways() {
        let mut object = json!({"spec": {"minReadySeconds": 15, "rolloutAfter": "2030-07-23T10:56:54Z",
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0, "deletePolicy": "Oldest"},
                "remediation": {"maxInFlight": 3}},
            "template": {"spec": {"clusterName": "c", "nodeDrainTimeout": "20s"}}}});
        machine_deployment_up(&mut object).unwrap();
        assert_eq!(
            object,
            json!({"spec": {
                "template": {"spec": {"clusterName": "c", "minReadySeconds": 15, "deletion": {"nodeDrainTimeoutSeconds": 20}}},
                "rollout": {"after": "2030-07-23T10:56:54Z",
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
                "deletion": {"order": "Oldest"},
                "remediation": {"maxInFlight": 3}}})
        );
    }

    #[test]
    fn machine_phases_unknown_to_v1beta1_read_as_running() {
        let mut object = json!({"status": {"phase": "Updating", "nodeRef": {"name": "n"}, "failureDomain": "a"}});
        machine_down(&mut object).unwrap();
        assert_eq!(
            object,
            json!({"status": {"phase": "Running", "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": "n"}}})
        );
    }

    #[test]
    fn topology_health_checks_and_strategies() {
        let mut topology = json!({"class": "cc", "classNamespace": "ns", "rolloutAfter": "2030-01-01T00:00:00Z",
            "controlPlane": {"nodeDrainTimeout": "20s", "machineHealthCheck": {"enable": true, "nodeStartupTimeout": "5m",
                "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "300s"}], "maxUnhealthy": "40%"}},
            "workers": {"machineDeployments": [{"name": "md", "class": "w",
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"deletePolicy": "Newest"}, "remediation": {"maxInFlight": 2}},
                "machineHealthCheck": {"unhealthyRange": "[1-3]"}}]}});
        topology_up(&mut topology, "spec.topology").unwrap();
        assert_eq!(
            topology,
            json!({"classRef": {"name": "cc", "namespace": "ns"},
                "controlPlane": {"healthCheck": {"enabled": true, "checks": {"nodeStartupTimeoutSeconds": 300,
                    "unhealthyNodeConditions": [{"type": "Ready", "status": "False", "timeoutSeconds": 300}]},
                    "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": "40%"}}},
                    "deletion": {"nodeDrainTimeoutSeconds": 20}},
                "workers": {"machineDeployments": [{"name": "md", "class": "w",
                    "healthCheck": {"remediation": {"triggerIf": {"unhealthyInRange": "[1-3]"}, "maxInFlight": 2}},
                    "deletion": {"order": "Newest"},
                    "rollout": {"strategy": {"type": "RollingUpdate"}}}]}})
        );
    }
}
