//! `bootstrap.cluster.x-k8s.io` and `controlplane.cluster.x-k8s.io`: the kubeadm config spec (shared
//! by KubeadmConfig, KubeadmConfigTemplate and KubeadmControlPlane) and KubeadmControlPlane itself.

use serde_json::{Map, Value};

use super::ConvertError;
use super::common::{
    StatusShape, contract_reference_down, contract_reference_up, namespace_of, node_timeouts_down,
    node_timeouts_up, seconds_down, seconds_up, status_down, status_up,
};
use super::tree::{each_item, join, move_value, put, rename, take, with_value};

const KUBEADM_CONFIG_STATUS: StatusShape = StatusShape {
    deprecated: &["failureReason", "failureMessage"],
    v1beta2: &[],
    initialization: &[("ready", "dataSecretCreated")],
};

const KUBEADM_CONTROL_PLANE_STATUS: StatusShape = StatusShape {
    deprecated: &[
        "readyReplicas",
        "updatedReplicas",
        "unavailableReplicas",
        "failureReason",
        "failureMessage",
    ],
    v1beta2: &["availableReplicas", "readyReplicas", "upToDateReplicas"],
    initialization: &[("initialized", "controlPlaneInitialized")],
};

/// Where kubeadm's `extraArgs` maps live in a `clusterConfiguration`.
const EXTRA_ARGS: [&[&str]; 4] = [
    &["apiServer", "extraArgs"],
    &["controllerManager", "extraArgs"],
    &["scheduler", "extraArgs"],
    &["etcd", "local", "extraArgs"],
];

/// Fields v1beta2 dropped from `clusterConfiguration`: set on the Cluster, or by CAPI itself.
const DROPPED_CLUSTER_CONFIGURATION: [&str; 5] = [
    "apiVersion",
    "kind",
    "clusterName",
    "kubernetesVersion",
    "networking",
];

/// `{"v": "5"}` → `[{"name": "v", "value": "5"}]`, in the map's order.
fn args_up(container: &mut Value, path: &[&str], at: &str) -> Result<(), ConvertError> {
    with_value(container, path, at, |args, at| {
        let Value::Object(map) = args else {
            return Err(ConvertError::not_an_object(at));
        };
        let mut list = Vec::with_capacity(map.len());
        for (name, value) in std::mem::take(map) {
            if !value.is_string() {
                return Err(ConvertError::WrongType {
                    path: join(at, &name),
                    expected: "a string",
                });
            }
            let mut arg = Map::new();
            arg.insert("name".into(), Value::String(name));
            arg.insert("value".into(), value);
            list.push(Value::Object(arg));
        }
        *args = Value::Array(list);
        Ok(())
    })
}

/// `[{"name": "v", "value": "5"}]` → `{"v": "5"}`; a repeated name keeps its last value, a missing
/// value is `""` (as upstream converts them).
fn args_down(container: &mut Value, path: &[&str], at: &str) -> Result<(), ConvertError> {
    with_value(container, path, at, |args, at| {
        let Value::Array(list) = args else {
            return Err(ConvertError::WrongType {
                path: at.to_owned(),
                expected: "a list",
            });
        };
        let mut map = Map::new();
        for (index, arg) in list.iter().enumerate() {
            let arg_path = format!("{at}[{index}]");
            let Some(Value::String(name)) = arg.get("name") else {
                return Err(ConvertError::WrongType {
                    path: join(&arg_path, "name"),
                    expected: "a string",
                });
            };
            let value = match arg.get("value") {
                None => Value::String(String::new()),
                Some(value @ Value::String(_)) => value.clone(),
                Some(_) => {
                    return Err(ConvertError::WrongType {
                        path: join(&arg_path, "value"),
                        expected: "a string",
                    });
                }
            };
            map.insert(name.clone(), value);
        }
        *args = Value::Object(map);
        Ok(())
    })
}

/// A `KubeadmConfigSpec`, v1beta1 → v1beta2.
pub(super) fn kubeadm_spec_up(spec: &mut Value, at: &str) -> Result<(), ConvertError> {
    take(spec, &["useExperimentalRetryJoin"]);
    let init_timeouts = [
        "initConfiguration",
        "timeouts",
        "controlPlaneComponentHealthCheckSeconds",
    ];
    let join_timeouts = [
        "joinConfiguration",
        "timeouts",
        "controlPlaneComponentHealthCheckSeconds",
    ];
    with_value(
        spec,
        &["clusterConfiguration", "apiServer"],
        at,
        |api_server, at| {
            seconds_up(
                api_server,
                "timeoutForControlPlane",
                &["timeoutForControlPlane"],
                at,
            )
        },
    )?;
    // One v1beta1 timeout becomes the same timeout for init and for join.
    if let Some(seconds) = take(
        spec,
        &[
            "clusterConfiguration",
            "apiServer",
            "timeoutForControlPlane",
        ],
    ) {
        put(spec, &init_timeouts, seconds.clone(), at)?;
        put(spec, &join_timeouts, seconds, at)?;
    }
    with_value(spec, &["clusterConfiguration"], at, |configuration, at| {
        for field in DROPPED_CLUSTER_CONFIGURATION {
            take(configuration, &[field]);
        }
        for path in EXTRA_ARGS {
            args_up(configuration, path, at)?;
        }
        Ok(())
    })?;
    with_value(spec, &["initConfiguration"], at, |init, at| {
        take(init, &["apiVersion"]);
        take(init, &["kind"]);
        each_item(init, &["bootstrapTokens"], at, |token, at| {
            seconds_up(token, "ttl", &["ttlSeconds"], at)
        })?;
        args_up(init, &["nodeRegistration", "kubeletExtraArgs"], at)
    })?;
    with_value(spec, &["joinConfiguration"], at, |join, at| {
        take(join, &["apiVersion"]);
        take(join, &["kind"]);
        with_value(join, &["discovery"], at, |discovery, at| {
            seconds_up(discovery, "timeout", &["timeout"], at)
        })?;
        move_value(
            join,
            &["discovery", "timeout"],
            &["timeouts", "tlsBootstrapSeconds"],
            at,
        )?;
        args_up(join, &["nodeRegistration", "kubeletExtraArgs"], at)
    })?;
    // Configurations that held only fields v1beta2 dropped are dropped with them.
    for configuration in [
        "clusterConfiguration",
        "initConfiguration",
        "joinConfiguration",
    ] {
        remove_if_empty(spec, configuration);
    }
    Ok(())
}

fn remove_if_empty(container: &mut Value, key: &str) {
    if let Some(map) = container.as_object_mut()
        && map
            .get(key)
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        map.remove(key);
    }
}

/// A `KubeadmConfigSpec`, v1beta2 → v1beta1.
pub(super) fn kubeadm_spec_down(spec: &mut Value, at: &str) -> Result<(), ConvertError> {
    with_value(spec, &["clusterConfiguration"], at, |configuration, at| {
        for path in EXTRA_ARGS {
            args_down(configuration, path, at)?;
        }
        Ok(())
    })?;
    move_value(
        spec,
        &[
            "initConfiguration",
            "timeouts",
            "controlPlaneComponentHealthCheckSeconds",
        ],
        &[
            "clusterConfiguration",
            "apiServer",
            "timeoutForControlPlane",
        ],
        at,
    )?;
    with_value(
        spec,
        &["clusterConfiguration", "apiServer"],
        at,
        |api_server, at| {
            seconds_down(
                api_server,
                &["timeoutForControlPlane"],
                "timeoutForControlPlane",
                at,
            )
        },
    )?;
    move_value(
        spec,
        &["joinConfiguration", "timeouts", "tlsBootstrapSeconds"],
        &["joinConfiguration", "discovery", "timeout"],
        at,
    )?;
    with_value(
        spec,
        &["joinConfiguration", "discovery"],
        at,
        |discovery, at| seconds_down(discovery, &["timeout"], "timeout", at),
    )?;
    // The other timeouts have no v1beta1 field (the stash keeps them).
    take(spec, &["initConfiguration", "timeouts"]);
    take(spec, &["joinConfiguration", "timeouts"]);
    with_value(spec, &["initConfiguration"], at, |init, at| {
        each_item(init, &["bootstrapTokens"], at, |token, at| {
            seconds_down(token, &["ttlSeconds"], "ttl", at)
        })?;
        args_down(init, &["nodeRegistration", "kubeletExtraArgs"], at)
    })?;
    with_value(spec, &["joinConfiguration"], at, |join, at| {
        args_down(join, &["nodeRegistration", "kubeletExtraArgs"], at)
    })
}

/// KubeadmConfig, v1beta1 → v1beta2.
pub(super) fn kubeadm_config_up(object: &mut Value) -> Result<(), ConvertError> {
    with_value(object, &["spec"], "", kubeadm_spec_up)?;
    status_up(object, &KUBEADM_CONFIG_STATUS)
}

/// KubeadmConfig, v1beta2 → v1beta1.
pub(super) fn kubeadm_config_down(object: &mut Value) -> Result<(), ConvertError> {
    with_value(object, &["spec"], "", kubeadm_spec_down)?;
    status_down(object, &KUBEADM_CONFIG_STATUS)
}

/// KubeadmConfigTemplate, v1beta1 → v1beta2.
pub(super) fn kubeadm_config_template_up(object: &mut Value) -> Result<(), ConvertError> {
    with_value(object, &["spec", "template", "spec"], "", kubeadm_spec_up)
}

/// KubeadmConfigTemplate, v1beta2 → v1beta1.
pub(super) fn kubeadm_config_template_down(object: &mut Value) -> Result<(), ConvertError> {
    with_value(object, &["spec", "template", "spec"], "", kubeadm_spec_down)
}

/// Fields of a KubeadmControlPlane `machineTemplate` that v1beta2 moved under `machineTemplate.spec`
/// (`deletion` holding the converted node timeouts).
const MACHINE_TEMPLATE_SPEC_FIELDS: [&str; 4] =
    ["infrastructureRef", "deletion", "readinessGates", "taints"];

/// KubeadmControlPlane, v1beta1 → v1beta2.
pub(super) fn kubeadm_control_plane_up(object: &mut Value) -> Result<(), ConvertError> {
    if let Some(spec) = object.get_mut("spec") {
        with_value(spec, &["kubeadmConfigSpec"], "spec", kubeadm_spec_up)?;
        // Required in v1beta1, optional (and never empty) in v1beta2.
        remove_if_empty(spec, "kubeadmConfigSpec");
        rename(spec, "machineNamingStrategy", "machineNaming");
        with_value(spec, &["machineTemplate"], "spec", |template, at| {
            contract_reference_up(template, "infrastructureRef", at)?;
            node_timeouts_up(template, at)?;
            let template_map = template
                .as_object_mut()
                .ok_or_else(|| ConvertError::not_an_object(at))?;
            let mut machine = Map::new();
            for field in MACHINE_TEMPLATE_SPEC_FIELDS {
                if let Some(value) = template_map.remove(field) {
                    machine.insert(field.to_owned(), value);
                }
            }
            if machine.is_empty() {
                return Ok(());
            }
            put(template, &["spec"], Value::Object(machine), at)
        })?;
        move_value(spec, &["rolloutAfter"], &["rollout", "after"], "spec")?;
        move_value(spec, &["rolloutBefore"], &["rollout", "before"], "spec")?;
        move_value(spec, &["rolloutStrategy"], &["rollout", "strategy"], "spec")?;
        with_value(spec, &["remediationStrategy"], "spec", |remediation, at| {
            seconds_up(
                remediation,
                "minHealthyPeriod",
                &["minHealthyPeriodSeconds"],
                at,
            )?;
            seconds_up(remediation, "retryPeriod", &["retryPeriodSeconds"], at)
        })?;
        rename(spec, "remediationStrategy", "remediation");
    }
    if let Some(status) = object.get_mut("status") {
        // Dropped in v1beta2 (the stash keeps it).
        take(status, &["ready"]);
        with_value(status, &["lastRemediation"], "status", |remediation, _| {
            rename(remediation, "timestamp", "time");
            Ok(())
        })?;
    }
    status_up(object, &KUBEADM_CONTROL_PLANE_STATUS)
}

/// KubeadmControlPlane, v1beta2 → v1beta1.
pub(super) fn kubeadm_control_plane_down(object: &mut Value) -> Result<(), ConvertError> {
    let namespace = namespace_of(object);
    if let Some(spec) = object.get_mut("spec") {
        with_value(spec, &["kubeadmConfigSpec"], "spec", kubeadm_spec_down)?;
        if let Some(spec) = spec.as_object_mut() {
            spec.entry("kubeadmConfigSpec")
                .or_insert_with(|| Value::Object(Map::new()));
        }
        rename(spec, "machineNaming", "machineNamingStrategy");
        with_value(spec, &["machineTemplate"], "spec", |template, at| {
            let machine_at = join(at, "spec");
            let Some(mut machine) = take(template, &["spec"]) else {
                return Ok(());
            };
            contract_reference_down(
                &mut machine,
                "infrastructureRef",
                namespace.as_deref(),
                &machine_at,
            )?;
            node_timeouts_down(&mut machine, &machine_at)?;
            let Value::Object(machine) = machine else {
                return Err(ConvertError::not_an_object(&machine_at));
            };
            for (field, value) in machine {
                put(template, &[&field], value, at)?;
            }
            Ok(())
        })?;
        move_value(spec, &["rollout", "after"], &["rolloutAfter"], "spec")?;
        move_value(spec, &["rollout", "before"], &["rolloutBefore"], "spec")?;
        move_value(spec, &["rollout", "strategy"], &["rolloutStrategy"], "spec")?;
        with_value(spec, &["remediation"], "spec", |remediation, at| {
            seconds_down(
                remediation,
                &["minHealthyPeriodSeconds"],
                "minHealthyPeriod",
                at,
            )?;
            seconds_down(remediation, &["retryPeriodSeconds"], "retryPeriod", at)
        })?;
        rename(spec, "remediation", "remediationStrategy");
    }
    with_value(
        object,
        &["status", "lastRemediation"],
        "",
        |remediation, _| {
            rename(remediation, "time", "timestamp");
            Ok(())
        },
    )?;
    status_down(object, &KUBEADM_CONTROL_PLANE_STATUS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn extra_args_keep_their_order() {
        let mut configuration =
            json!({"apiServer": {"extraArgs": {"v": "5", "audit-log-path": "-"}}});
        args_up(&mut configuration, &["apiServer", "extraArgs"], "").unwrap();
        assert_eq!(
            configuration,
            json!({"apiServer": {"extraArgs": [{"name": "v", "value": "5"}, {"name": "audit-log-path", "value": "-"}]}})
        );
        args_down(&mut configuration, &["apiServer", "extraArgs"], "").unwrap();
        assert_eq!(
            configuration,
            json!({"apiServer": {"extraArgs": {"v": "5", "audit-log-path": "-"}}})
        );
    }

    #[test]
    fn bad_extra_args_are_errors() {
        let mut configuration = json!({"apiServer": {"extraArgs": {"v": 5}}});
        assert_eq!(
            args_up(&mut configuration, &["apiServer", "extraArgs"], "spec")
                .unwrap_err()
                .to_string(),
            "spec.apiServer.extraArgs.v must be a string"
        );
        let mut configuration = json!({"apiServer": {"extraArgs": [{"value": "5"}]}});
        assert_eq!(
            args_down(&mut configuration, &["apiServer", "extraArgs"], "spec")
                .unwrap_err()
                .to_string(),
            "spec.apiServer.extraArgs[0].name must be a string"
        );
    }

    #[test]
    fn timeouts_move_between_cluster_and_node_configurations() {
        let mut spec = json!({"clusterConfiguration": {"apiServer": {"timeoutForControlPlane": "4m0s"}},
            "joinConfiguration": {"discovery": {"timeout": "5m0s", "bootstrapToken": {"token": "t"}}}});
        kubeadm_spec_up(&mut spec, "spec").unwrap();
        assert_eq!(
            spec,
            json!({"initConfiguration": {"timeouts": {"controlPlaneComponentHealthCheckSeconds": 240}},
                "joinConfiguration": {"discovery": {"bootstrapToken": {"token": "t"}},
                    "timeouts": {"controlPlaneComponentHealthCheckSeconds": 240, "tlsBootstrapSeconds": 300}}})
        );
        kubeadm_spec_down(&mut spec, "spec").unwrap();
        assert_eq!(
            spec,
            json!({"clusterConfiguration": {"apiServer": {"timeoutForControlPlane": "4m0s"}},
                "joinConfiguration": {"discovery": {"timeout": "5m0s", "bootstrapToken": {"token": "t"}}}})
        );
    }
}
