//! Cluster API `v1alpha4` → `v1beta1`: the step before [`super::convert`] for manifests older than
//! the versions capstan serves (`capstan convert`).
//!
//! `v1beta1` is `v1alpha4` promoted: every `v1alpha4` field of the kinds below kept its name, type
//! and meaning in `v1beta1`, which only added fields (node deletion timeouts, `rolloutBefore`,
//! remediation strategies, …). So the step rewrites `apiVersion` and nothing else, and going back
//! is the same rewrite: no field is lost either way.
//!
//! What it refuses is what `v1alpha4` itself no longer had: `v1alpha3` KubeadmControlPlane fields
//! that `v1alpha4` moved under `spec.machineTemplate` (`infrastructureTemplate`,
//! `nodeDrainTimeout`) or renamed (`upgradeAfter`). An API server prunes such a field without a
//! word, so converting it silently would lose the control plane's machine template; the error names
//! the field and where it belongs.
//!
//! Infrastructure kinds are not handled here: a provider's `v1alpha4` is its own (CAPM3's
//! `v1alpha4` predates Cluster API `v1alpha4`; the KVM kinds serve `v1alpha4` directly).

use serde_json::Value;

/// Why a `v1alpha4` object was not converted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum V1alpha4Error {
    /// `apiVersion` or `kind` is missing or not a string, or the object is not an object.
    #[error("the object has no {0}")]
    MissingField(&'static str),
    /// The object is not a `v1alpha4` object of a kind this step converts.
    #[error("{api_version} {kind} is not a Cluster API v1alpha4 kind")]
    NotHandled { api_version: String, kind: String },
    /// Fields `v1alpha4` no longer had.
    #[error("{} v1alpha3 field(s) that v1alpha4 moved", .0.len())]
    Leftovers(Vec<Leftover>),
}

/// A `v1alpha3` field found in a `v1alpha4` object, and where `v1alpha4` keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// The field, dotted from the object's root (`spec.infrastructureTemplate`).
    pub path: &'static str,
    /// Where `v1alpha4` and later keep it (`spec.machineTemplate.infrastructureRef`).
    pub moved_to: &'static str,
}

/// The Cluster API groups whose `v1alpha4` this step converts, and their kinds.
const KINDS: &[(&str, &str)] = &[
    ("cluster.x-k8s.io", "Cluster"),
    ("cluster.x-k8s.io", "Machine"),
    ("cluster.x-k8s.io", "MachineSet"),
    ("cluster.x-k8s.io", "MachineDeployment"),
    ("cluster.x-k8s.io", "MachineHealthCheck"),
    ("addons.cluster.x-k8s.io", "ClusterResourceSet"),
    ("addons.cluster.x-k8s.io", "ClusterResourceSetBinding"),
    ("bootstrap.cluster.x-k8s.io", "KubeadmConfig"),
    ("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate"),
    ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"),
];

/// `v1alpha3` KubeadmControlPlane fields and their `v1alpha4` homes.
const KCP_LEFTOVERS: &[Leftover] = &[
    Leftover {
        path: "spec.infrastructureTemplate",
        moved_to: "spec.machineTemplate.infrastructureRef",
    },
    Leftover {
        path: "spec.nodeDrainTimeout",
        moved_to: "spec.machineTemplate.nodeDrainTimeout",
    },
    Leftover {
        path: "spec.upgradeAfter",
        moved_to: "spec.rolloutAfter",
    },
];

/// Whether `group`/`kind` in `v1alpha4` is converted by [`to_v1beta1`].
pub fn handles(group: &str, kind: &str) -> bool {
    KINDS.iter().any(|(g, k)| *g == group && *k == kind)
}

/// The `v1alpha3` fields `object` (a `v1alpha4` object) still has.
pub fn leftovers(object: &Value) -> Vec<Leftover> {
    if object.get("kind").and_then(Value::as_str) != Some("KubeadmControlPlane") {
        return Vec::new();
    }
    let Some(spec) = object.get("spec") else {
        return Vec::new();
    };
    KCP_LEFTOVERS
        .iter()
        .filter(|l| {
            l.path
                .strip_prefix("spec.")
                .is_some_and(|field| spec.get(field).is_some())
        })
        .cloned()
        .collect()
}

/// Converts a Cluster API `v1alpha4` object to `v1beta1` (see the module documentation).
pub fn to_v1beta1(mut object: Value) -> Result<Value, V1alpha4Error> {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(V1alpha4Error::MissingField("apiVersion"))?
        .to_owned();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(V1alpha4Error::MissingField("kind"))?
        .to_owned();
    let group = crate::meta::group_of(&api_version);
    if crate::meta::version_of(&api_version) != "v1alpha4" || !handles(group, &kind) {
        return Err(V1alpha4Error::NotHandled { api_version, kind });
    }
    let leftovers = leftovers(&object);
    if !leftovers.is_empty() {
        return Err(V1alpha4Error::Leftovers(leftovers));
    }
    let to = format!("{group}/v1beta1");
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(to));
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rewrites_the_version_only() {
        let md = json!({"apiVersion": "cluster.x-k8s.io/v1alpha4", "kind": "MachineDeployment",
            "metadata": {"name": "w"}, "spec": {"clusterName": "c", "template": {"spec": {
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "KVMMachineTemplate", "name": "w"}}}}});
        let up = to_v1beta1(md.clone()).unwrap();
        assert_eq!(up["apiVersion"], "cluster.x-k8s.io/v1beta1");
        let mut back = up;
        back["apiVersion"] = json!("cluster.x-k8s.io/v1alpha4");
        assert_eq!(back, md);
    }

    #[test]
    fn refuses_what_v1alpha4_moved() {
        let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha4", "kind": "KubeadmControlPlane",
            "spec": {"infrastructureTemplate": {"kind": "KVMMachineTemplate", "name": "cp"}, "replicas": 1}});
        let Err(V1alpha4Error::Leftovers(found)) = to_v1beta1(kcp) else {
            panic!("not refused");
        };
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, "spec.infrastructureTemplate");
        assert_eq!(found[0].moved_to, "spec.machineTemplate.infrastructureRef");
    }

    #[test]
    fn other_kinds_and_versions_are_not_handled() {
        for object in [
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "KVMCluster"}),
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "Cluster"}),
            json!({"apiVersion": "cluster.x-k8s.io/v1alpha3", "kind": "Cluster"}),
        ] {
            assert!(matches!(
                to_v1beta1(object),
                Err(V1alpha4Error::NotHandled { .. })
            ));
        }
        assert_eq!(
            to_v1beta1(json!({"kind": "Cluster"})),
            Err(V1alpha4Error::MissingField("apiVersion"))
        );
        assert_eq!(
            to_v1beta1(json!([1])),
            Err(V1alpha4Error::MissingField("apiVersion"))
        );
    }
}
