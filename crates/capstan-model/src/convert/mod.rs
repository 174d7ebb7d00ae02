//! Lossless conversion of Cluster API and CAPM3 objects between `v1beta1` and `v1beta2`.
//!
//! capstan stores each kind in one version (`v1beta2`) and serves both, so every read and write
//! converts. [`convert`] works on the JSON of arbitrary user objects, not on typed structs, so that
//! fields capstan's types do not model still come through.
//!
//! # Losslessness
//!
//! A round trip is exact in both directions: `v1beta1 → v1beta2 → v1beta1` and `v1beta2 → v1beta1 →
//! v1beta2` give back the original object, field for field. Each conversion is a plain field mapping
//! (tables below) followed by a check: the result is converted straight back with the plain mapping,
//! and whatever differs from the input (fields the target version has no place for, values that do
//! not survive the trip such as `5m` coming back as `5m0s`, reference namespaces, unknown fields,
//! list orders) is recorded in the `cluster.x-k8s.io/conversion-data` annotation of the result, as in
//! upstream Cluster API. Converting back applies that record and removes the annotation; a field
//! changed in between keeps its new value. The annotation's format is described in [`stash`]'s
//! documentation.
//!
//! Converting to the version an object already has returns it unchanged. Kinds not listed below,
//! and every other group, only get their `apiVersion` rewritten. Cluster API `v1alpha4` objects,
//! which capstan does not serve, are taken to `v1beta1` first by [`v1alpha4::to_v1beta1`]
//! (`capstan convert`).
//!
//! # Mappings
//!
//! Paths are relative to `spec` unless they start with `status`; `→` reads v1beta1 → v1beta2 and
//! every mapping is applied in reverse for v1beta2 → v1beta1. "Stashed" means the field has no
//! place in the other version and lives in the annotation.
//!
//! **References** (`corev1.ObjectReference` → `ContractVersionedObjectReference`): `apiVersion:
//! g/v` → `apiGroup: g`; `namespace`, `uid`, `resourceVersion`, `fieldPath` are dropped. Back, the
//! version is the one the referenced kind serves per [`crate::kinds`] (`v1beta1` if it has one, else
//! its storage version, e.g. `metal3.io/v1alpha1`; `v1beta1` for kinds capstan does not know) and
//! `namespace` is the referring object's, as upstream does. Applies to Cluster `controlPlaneRef`
//! and `infrastructureRef`, Machine specs' `bootstrap.configRef` and `infrastructureRef`, and
//! KubeadmControlPlane `machineTemplate.infrastructureRef`. MachineHealthCheck templates keep
//! `apiVersion` and only drop the four fields.
//!
//! **Durations** (`metav1.Duration` → `int32` seconds): Go durations (`1m30s`, `1.5h`) are parsed
//! and truncated to whole seconds; back they are written as Go writes them (`1m30s`, `5m0s`).
//!
//! | Kind | v1beta1 | v1beta2 |
//! |------|---------|---------|
//! | Machine specs¹ | `nodeDrainTimeout`, `nodeVolumeDetachTimeout`, `nodeDeletionTimeout` | `deletion.nodeDrainTimeoutSeconds`, `deletion.nodeVolumeDetachTimeoutSeconds`, `deletion.nodeDeletionTimeoutSeconds` |
//! | Machine | — | `minReadySeconds` (stashed) |
//! | Machine | `status.nodeRef` (full reference) | `status.nodeRef.name` |
//! | Machine | `status.bootstrapReady`, `status.infrastructureReady` | `status.initialization.bootstrapDataSecretCreated`, `.infrastructureProvisioned` |
//! | Machine | `status.phase: Running` | `status.phase: Updating` (read as `Running` in v1beta1, as upstream) |
//! | Machine | — | `status.failureDomain` (stashed) |
//! | MachineSet | `machineNamingStrategy` | `machineNaming` |
//! | MachineSet | `deletePolicy` | `deletion.order` |
//! | MachineSet | `minReadySeconds` | `template.spec.minReadySeconds` |
//! | MachineDeployment | `machineNamingStrategy` | `machineNaming` |
//! | MachineDeployment | `minReadySeconds` | `template.spec.minReadySeconds` |
//! | MachineDeployment | `rolloutAfter` | `rollout.after` |
//! | MachineDeployment | `strategy` (`type`, `rollingUpdate.maxSurge`, `.maxUnavailable`) | `rollout.strategy` |
//! | MachineDeployment | `strategy.rollingUpdate.deletePolicy` | `deletion.order` |
//! | MachineDeployment | `strategy.remediation` | `remediation` |
//! | MachineDeployment | `progressDeadlineSeconds`, `revisionHistoryLimit` (stashed) | — |
//! | MachineHealthCheck² | `nodeStartupTimeout` | `checks.nodeStartupTimeoutSeconds` |
//! | MachineHealthCheck² | `unhealthyConditions[].timeout` | `checks.unhealthyNodeConditions[].timeoutSeconds` |
//! | MachineHealthCheck² | `unhealthyMachineConditions[].timeout` | `checks.unhealthyMachineConditions[].timeoutSeconds` |
//! | MachineHealthCheck² | `unhealthyRange` | `remediation.triggerIf.unhealthyInRange` |
//! | MachineHealthCheck² | `maxUnhealthy` | `remediation.triggerIf.unhealthyLessThanOrEqualTo` |
//! | MachineHealthCheck² | `remediationTemplate` | `remediation.templateRef` |
//! | Cluster | `topology.class`, `topology.classNamespace` | `topology.classRef.name`, `.namespace` |
//! | Cluster | `topology.rolloutAfter`, every `variables[].definitionFrom` (stashed) | — |
//! | Cluster | `topology.{controlPlane,workers.machineDeployments[]}.machineHealthCheck` (`enable`, …²) | `….healthCheck` (`enabled`, …²) |
//! | Cluster | `topology.workers.machineDeployments[].strategy` | `….rollout.strategy`; `deletePolicy` → `….deletion.order`; `remediation.maxInFlight` → `….healthCheck.remediation.maxInFlight` |
//! | Cluster | `status.controlPlaneReady`, `status.infrastructureReady` | `status.initialization.controlPlaneInitialized`, `.infrastructureProvisioned` |
//! | Cluster, Metal3Cluster | `failureDomains` (spec and status): map by name | list of `{name, controlPlane, attributes}`, sorted by name |
//! | Kubeadm specs³ | `clusterConfiguration.{apiVersion,kind,clusterName,kubernetesVersion,networking}` (stashed; upstream takes them from the Cluster) | — |
//! | Kubeadm specs³ | `{init,join}Configuration.{apiVersion,kind}`, `useExperimentalRetryJoin` (stashed) | — |
//! | Kubeadm specs³ | `clusterConfiguration.{apiServer,controllerManager,scheduler,etcd.local}.extraArgs` and `{init,join}Configuration.nodeRegistration.kubeletExtraArgs`: map | list of `{name, value}` in the map's order (a repeated name keeps its last value going back; the list is stashed) |
//! | Kubeadm specs³ | `clusterConfiguration.apiServer.timeoutForControlPlane` | `initConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds` and the same under `joinConfiguration` (back from `initConfiguration`) |
//! | Kubeadm specs³ | `joinConfiguration.discovery.timeout` | `joinConfiguration.timeouts.tlsBootstrapSeconds` |
//! | Kubeadm specs³ | — | the other `timeouts` fields (stashed) |
//! | Kubeadm specs³ | `initConfiguration.bootstrapTokens[].ttl` | `….ttlSeconds` |
//! | KubeadmConfig | `status.ready` | `status.initialization.dataSecretCreated` |
//! | KubeadmControlPlane | `machineNamingStrategy` | `machineNaming` |
//! | KubeadmControlPlane | `machineTemplate.{infrastructureRef,readinessGates,taints}` and its node timeouts¹ | `machineTemplate.spec.{…}` |
//! | KubeadmControlPlane | `rolloutAfter`, `rolloutBefore`, `rolloutStrategy` | `rollout.after`, `rollout.before`, `rollout.strategy` |
//! | KubeadmControlPlane | `remediationStrategy` (`maxRetry`, `minHealthyPeriod`, `retryPeriod`) | `remediation` (`maxRetry`, `minHealthyPeriodSeconds`, `retryPeriodSeconds`) |
//! | KubeadmControlPlane | `status.initialized` | `status.initialization.controlPlaneInitialized` |
//! | KubeadmControlPlane | `status.ready` (stashed) | — |
//! | KubeadmControlPlane | `status.lastRemediation.timestamp` | `status.lastRemediation.time` |
//! | Metal3Cluster | `noCloudProvider` (stashed) | `cloudProviderEnabled: !noCloudProvider` unless set |
//! | Metal3Cluster, Metal3Machine | `status.ready` | `status.initialization.provisioned` |
//! | Metal3Machine⁴ | `image.format` | `image.diskFormat` |
//! | Metal3Machine⁴ | `dataTemplate` (full reference) | `dataTemplate` (`name`, `namespace`) |
//! | Metal3Machine | `status.renderedData` (full reference) | `status.renderedData` (`name`, `namespace`) |
//! | Metal3Machine | `status.phase` (stashed) | — |
//! | Metal3MachineTemplate | — | `template.metadata` (stashed) |
//! | Metal3DataTemplate | `metaData.{ipAddresses,prefixes,gateways,dnsServers}FromIPPool` | `metaData.{…}FromPool` (going back, a missing `apiGroup`/`kind` gets v1beta2's default, `ipam.metal3.io`/`IPPool`, as does a `fromPoolRef` in `networkData`) |
//! | Metal3DataTemplate | `networkData.links.bonds[].parameters`: map | list of `{name, value}` in the map's order |
//! | Metal3DataTemplate | `status.indexes`: map from name to index | list of `{name, index}` in the map's order |
//! | Metal3DataTemplate | `templateReference` (stashed) | — |
//!
//! ¹ Machine `spec`, MachineSet and MachineDeployment `template.spec`, KubeadmControlPlane
//! `machineTemplate`, and the Cluster topology's control plane, MachineDeployments and MachinePools.
//! ² Also the Cluster topology's `machineHealthCheck`s. ³ KubeadmConfig `spec`, KubeadmConfigTemplate
//! `template.spec`, KubeadmControlPlane `kubeadmConfigSpec`. ⁴ Also Metal3MachineTemplate
//! `template.spec`.
//!
//! **Status conditions and counters**, every kind above and ClusterResourceSet: v1beta1
//! `status.conditions` (CAPI conditions) → `status.deprecated.v1beta1.conditions`; v1beta1
//! `status.v1beta2.*` (its `conditions` are `metav1.Condition`s) → `status.*`. The fields whose
//! meaning changed move to `status.deprecated.v1beta1` the same way: `failureReason` and
//! `failureMessage` (Cluster, Machine, MachineSet, KubeadmConfig, KubeadmControlPlane, Metal3Cluster,
//! Metal3Machine); `availableReplicas`, `readyReplicas`, `fullyLabeledReplicas` (MachineSet);
//! `availableReplicas`, `readyReplicas`, `unavailableReplicas`, `updatedReplicas`
//! (MachineDeployment); `readyReplicas`, `updatedReplicas`, `unavailableReplicas`
//! (KubeadmControlPlane). The v1beta1 `status.v1beta2` block of a Cluster (`controlPlane`,
//! `workers`) and the v1beta2 counters (`availableReplicas`, `readyReplicas`, `upToDateReplicas`)
//! become top-level status fields.
//!
//! # Errors
//!
//! Input that is not an object, lacks `apiVersion`/`kind`, or has a mapped field of the wrong type
//! (a duration that does not parse, `extraArgs` that is not a map) is a [`ConvertError`] naming the
//! field. Nothing here panics on any input.

mod capi;
mod capm3;
mod common;
mod duration;
mod kubeadm;
pub mod stash;
mod tree;
pub mod v1alpha4;

use serde_json::Value;

pub use duration::{DurationError, format_seconds, parse_nanos, parse_seconds};
pub use stash::CONVERSION_DATA_ANNOTATION;

use stash::Stash;

/// Why an object could not be converted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    /// The object (or the part named) is not a JSON object.
    #[error("{0} must be an object")]
    NotAnObject(String),
    /// `apiVersion` or `kind` is missing or not a string.
    #[error("the object has no {0}")]
    MissingField(&'static str),
    /// The object and the target version are in different API groups.
    #[error("cannot convert {from} to {to}: different API groups")]
    GroupMismatch { from: String, to: String },
    /// A kind with a real conversion, asked for a version pair it does not have.
    #[error("{kind} converts only between v1beta1 and v1beta2, not from {from} to {to}")]
    UnsupportedVersion {
        kind: String,
        from: String,
        to: String,
    },
    /// A field has the wrong JSON type.
    #[error("{path} must be {expected}")]
    WrongType {
        path: String,
        expected: &'static str,
    },
    /// A duration field does not parse.
    #[error("{path}: {value:?} is not a duration")]
    InvalidDuration {
        path: String,
        value: String,
        #[source]
        source: DurationError,
    },
}

impl ConvertError {
    pub(crate) fn not_an_object(path: &str) -> Self {
        Self::NotAnObject(if path.is_empty() {
            "the object".to_owned()
        } else {
            path.to_owned()
        })
    }
}

/// One direction of one kind's mapping, editing the object in place.
type Mapping = fn(&mut Value) -> Result<(), ConvertError>;

/// A kind with a real conversion: its mappings from v1beta1 up to v1beta2 and back down.
struct KindMapping {
    group: &'static str,
    kind: &'static str,
    up: Mapping,
    down: Mapping,
}

const CORE: &str = "cluster.x-k8s.io";
const ADDONS: &str = "addons.cluster.x-k8s.io";
const BOOTSTRAP: &str = "bootstrap.cluster.x-k8s.io";
const CONTROL_PLANE: &str = "controlplane.cluster.x-k8s.io";
const INFRASTRUCTURE: &str = "infrastructure.cluster.x-k8s.io";

const MAPPINGS: &[KindMapping] = &[
    KindMapping {
        group: CORE,
        kind: "Cluster",
        up: capi::cluster_up,
        down: capi::cluster_down,
    },
    KindMapping {
        group: CORE,
        kind: "Machine",
        up: capi::machine_up,
        down: capi::machine_down,
    },
    KindMapping {
        group: CORE,
        kind: "MachineSet",
        up: capi::machine_set_up,
        down: capi::machine_set_down,
    },
    KindMapping {
        group: CORE,
        kind: "MachineDeployment",
        up: capi::machine_deployment_up,
        down: capi::machine_deployment_down,
    },
    KindMapping {
        group: CORE,
        kind: "MachineHealthCheck",
        up: capi::machine_health_check_up,
        down: capi::machine_health_check_down,
    },
    KindMapping {
        group: ADDONS,
        kind: "ClusterResourceSet",
        up: capi::cluster_resource_set_up,
        down: capi::cluster_resource_set_down,
    },
    KindMapping {
        group: BOOTSTRAP,
        kind: "KubeadmConfig",
        up: kubeadm::kubeadm_config_up,
        down: kubeadm::kubeadm_config_down,
    },
    KindMapping {
        group: BOOTSTRAP,
        kind: "KubeadmConfigTemplate",
        up: kubeadm::kubeadm_config_template_up,
        down: kubeadm::kubeadm_config_template_down,
    },
    KindMapping {
        group: CONTROL_PLANE,
        kind: "KubeadmControlPlane",
        up: kubeadm::kubeadm_control_plane_up,
        down: kubeadm::kubeadm_control_plane_down,
    },
    KindMapping {
        group: INFRASTRUCTURE,
        kind: "Metal3Cluster",
        up: capm3::metal3_cluster_up,
        down: capm3::metal3_cluster_down,
    },
    KindMapping {
        group: INFRASTRUCTURE,
        kind: "Metal3Machine",
        up: capm3::metal3_machine_up,
        down: capm3::metal3_machine_down,
    },
    KindMapping {
        group: INFRASTRUCTURE,
        kind: "Metal3MachineTemplate",
        up: capm3::metal3_machine_template_up,
        down: capm3::metal3_machine_template_down,
    },
    KindMapping {
        group: INFRASTRUCTURE,
        kind: "Metal3DataTemplate",
        up: capm3::metal3_data_template_up,
        down: capm3::metal3_data_template_down,
    },
];

const V1BETA2: &str = "v1beta2";

fn mapping(group: &str, kind: &str) -> Option<&'static KindMapping> {
    MAPPINGS.iter().find(|m| m.group == group && m.kind == kind)
}

/// Whether `group`/`kind` has a real conversion (as opposed to an `apiVersion` rewrite).
pub fn handles(group: &str, kind: &str) -> bool {
    mapping(group, kind).is_some()
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    (
        crate::meta::group_of(api_version),
        crate::meta::version_of(api_version),
    )
}

/// Converts `object` to `to_api_version` (`group/version`, in the object's own group). See the
/// module documentation for what changes and how round trips stay exact.
pub fn convert(mut object: Value, to_api_version: &str) -> Result<Value, ConvertError> {
    if !object.is_object() {
        return Err(ConvertError::not_an_object(""));
    }
    let from_api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(ConvertError::MissingField("apiVersion"))?
        .to_owned();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ConvertError::MissingField("kind"))?
        .to_owned();
    let (from_group, from_version) = split_api_version(&from_api_version);
    let (to_group, to_version) = split_api_version(to_api_version);
    if from_group != to_group {
        return Err(ConvertError::GroupMismatch {
            from: from_api_version,
            to: to_api_version.to_owned(),
        });
    }
    if from_version == to_version {
        return Ok(object);
    }
    let Some(mapping) = mapping(from_group, &kind) else {
        set_api_version(&mut object, to_api_version);
        return Ok(object);
    };
    let (forward, backward) = match (from_version, to_version) {
        (common::V1BETA1, V1BETA2) => (mapping.up, mapping.down),
        (V1BETA2, common::V1BETA1) => (mapping.down, mapping.up),
        _ => {
            return Err(ConvertError::UnsupportedVersion {
                kind,
                from: from_api_version,
                to: to_api_version.to_owned(),
            });
        }
    };

    // A stash written by an earlier conversion from the target version restores what that
    // version had and this one could not hold.
    let restore = stash::take(&mut object);
    let original = object;

    let mut converted = original.clone();
    forward(&mut converted)?;
    set_api_version(&mut converted, to_api_version);
    if let Some(restore) = &restore {
        restore.apply(&mut converted);
    }

    // Convert back exactly as the reverse conversion will, and keep what would not come back.
    // Writing a stash changes how the result reads back (the annotation is taken out, with any
    // container it leaves empty), so a stash is computed against the result read that way.
    let convert_back = |candidate: &Value| -> Result<Value, ConvertError> {
        let mut round_trip = candidate.clone();
        backward(&mut round_trip)?;
        set_api_version(&mut round_trip, &from_api_version);
        Ok(round_trip)
    };
    let mut lost = Stash::between(&convert_back(&converted)?, &original);
    if !lost.is_empty() {
        let mut as_read_back = converted.clone();
        if stash::strip(&mut as_read_back) {
            lost = Stash::between(&convert_back(&as_read_back)?, &original);
        }
        if !lost.is_empty() {
            stash::put(&mut converted, &lost).map_err(ConvertError::not_an_object)?;
        }
    }
    Ok(converted)
}

fn set_api_version(object: &mut Value, api_version: &str) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(object: &Value, via: &str) -> Value {
        let there = convert(object.clone(), via).unwrap();
        let back_to = object["apiVersion"].as_str().unwrap();
        convert(there, back_to).unwrap()
    }

    #[test]
    fn same_version_and_unknown_kinds() {
        let object =
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "spec": {"x": 1}});
        assert_eq!(
            convert(object.clone(), "cluster.x-k8s.io/v1beta1").unwrap(),
            object
        );
        let binding = json!({"apiVersion": "addons.cluster.x-k8s.io/v1beta1", "kind": "ClusterResourceSetBinding", "spec": {}});
        assert_eq!(
            convert(binding, "addons.cluster.x-k8s.io/v1beta2").unwrap(),
            json!({"apiVersion": "addons.cluster.x-k8s.io/v1beta2", "kind": "ClusterResourceSetBinding", "spec": {}})
        );
        assert!(!handles(
            "addons.cluster.x-k8s.io",
            "ClusterResourceSetBinding"
        ));
        assert!(handles(
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane"
        ));
    }

    #[test]
    fn garbage_is_an_error() {
        assert_eq!(
            convert(json!([1]), "cluster.x-k8s.io/v1beta2"),
            Err(ConvertError::NotAnObject("the object".into()))
        );
        assert_eq!(
            convert(json!({"kind": "Cluster"}), "cluster.x-k8s.io/v1beta2"),
            Err(ConvertError::MissingField("apiVersion"))
        );
        assert_eq!(
            convert(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta1"}),
                "cluster.x-k8s.io/v1beta2"
            ),
            Err(ConvertError::MissingField("kind"))
        );
        assert!(matches!(
            convert(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster"}),
                "addons.cluster.x-k8s.io/v1beta2"
            ),
            Err(ConvertError::GroupMismatch { .. })
        ));
        assert!(matches!(
            convert(
                json!({"apiVersion": "cluster.x-k8s.io/v1alpha4", "kind": "Cluster"}),
                "cluster.x-k8s.io/v1beta2"
            ),
            Err(ConvertError::UnsupportedVersion { .. })
        ));
        let err = convert(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "spec": {"nodeDrainTimeout": "soon"}}),
            "cluster.x-k8s.io/v1beta2",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.nodeDrainTimeout: \"soon\" is not a duration"
        );
    }

    #[test]
    fn what_v1beta2_cannot_hold_is_stashed_and_restored() {
        let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
            "metadata": {"name": "capi-1", "namespace": "default"},
            "spec": {"replicas": 3, "version": "v1.30.6",
                "machineTemplate": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                    "kind": "Metal3MachineTemplate", "name": "capi-1-controlplane"}, "nodeDrainTimeout": "5m"},
                "kubeadmConfigSpec": {"clusterConfiguration": {"networking": {"podSubnet": "10.244.0.0/16"}}}}});
        let converted = convert(kcp.clone(), "controlplane.cluster.x-k8s.io/v1beta2").unwrap();
        assert_eq!(
            converted["spec"]["machineTemplate"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"],
            300
        );
        assert!(
            converted["spec"].get("kubeadmConfigSpec").is_none(),
            "v1beta2 has no empty kubeadmConfigSpec"
        );
        let stash: Value = serde_json::from_str(
            converted["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            stash,
            json!({
                "/spec/kubeadmConfigSpec/clusterConfiguration": {"value": {"networking": {"podSubnet": "10.244.0.0/16"}}},
                "/spec/machineTemplate/nodeDrainTimeout": {"value": "5m", "replaces": "5m0s"},
                "/spec/machineTemplate/infrastructureRef/namespace": {"replaces": "default"},
            })
        );
        assert_eq!(
            convert(converted, "controlplane.cluster.x-k8s.io/v1beta1").unwrap(),
            kcp
        );
        assert_eq!(
            round_trip(&kcp, "controlplane.cluster.x-k8s.io/v1beta2"),
            kcp
        );
    }

    #[test]
    fn a_stash_does_not_undo_later_edits() {
        let machine = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "metadata": {"name": "m"},
            "spec": {"clusterName": "c", "nodeDrainTimeout": "5m"}});
        let mut converted = convert(machine, "cluster.x-k8s.io/v1beta2").unwrap();
        converted["spec"]["deletion"]["nodeDrainTimeoutSeconds"] = json!(600);
        let back = convert(converted, "cluster.x-k8s.io/v1beta1").unwrap();
        assert_eq!(back["spec"]["nodeDrainTimeout"], "10m0s");
        assert!(back["metadata"].get("annotations").is_none());
    }

    #[test]
    fn upstream_conversion_data_survives() {
        let upstream = r#"{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Machine"}"#;
        let machine = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m", "annotations": {CONVERSION_DATA_ANNOTATION: upstream}},
            "spec": {"clusterName": "c"}});
        // Nothing to stash: the annotation passes through untouched.
        let converted = convert(machine.clone(), "cluster.x-k8s.io/v1beta2").unwrap();
        assert_eq!(
            converted["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION],
            upstream
        );
        assert_eq!(
            convert(converted, "cluster.x-k8s.io/v1beta1").unwrap(),
            machine
        );
        // Something to stash: the stash takes the annotation's place and brings it back.
        let mut with_loss = machine.clone();
        with_loss["spec"]["nodeDrainTimeout"] = json!("5m");
        assert_eq!(
            round_trip(&with_loss, "cluster.x-k8s.io/v1beta2"),
            with_loss
        );
    }
}
