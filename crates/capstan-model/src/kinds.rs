//! The catalogue of kinds capstan knows: group, kind, plural, scope, served versions and the storage
//! version. Lint uses it to tell unknown kinds from known ones; the API server uses it for discovery.

use crate::resource::Scope;

/// Static facts about one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindInfo {
    pub group: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub scope: Scope,
    /// Served versions, oldest first.
    pub versions: &'static [&'static str],
    /// The version objects are stored in.
    pub storage_version: &'static str,
    /// `kubectl get` categories (`all`, `cluster-api`).
    pub categories: &'static [&'static str],
}

impl KindInfo {
    /// `group/version` for `version`, or just the version for the core group.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Whether objects of this kind have a `status` subresource, as upstream's CRDs give them: a
    /// create or update of the object itself then ignores `status` (Kubernetes' own kinds may
    /// differ; the API server knows those).
    pub fn has_status_subresource(&self) -> bool {
        !matches!(
            self.kind,
            "Secret" | "ConfigMap" | "Event" | "ClusterResourceSetBinding"
        ) && !self.kind.ends_with("Template")
            && !matches!(self.group, "cilium.io")
    }
}

const CAPI: &[&str] = &["cluster-api"];
const V1B1_V1B2: &[&str] = &["v1beta1", "v1beta2"];
/// The KVM provider's kinds: the design's `v1alpha4` and the current `v1beta2` (same shape).
const V1A4_V1B2: &[&str] = &["v1alpha4", "v1beta2"];

macro_rules! kind {
    ($group:expr, $kind:literal, $plural:literal, $singular:literal, [$($short:literal),*], $scope:ident, $versions:expr, $storage:literal, $cats:expr) => {
        KindInfo {
            group: $group,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            short_names: &[$($short),*],
            scope: Scope::$scope,
            versions: $versions,
            storage_version: $storage,
            categories: $cats,
        }
    };
}

/// Every kind capstan serves and analyses.
pub const KINDS: &[KindInfo] = &[
    kind!(
        "cluster.x-k8s.io",
        "Cluster",
        "clusters",
        "cluster",
        ["cl"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "cluster.x-k8s.io",
        "Machine",
        "machines",
        "machine",
        ["ma"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "cluster.x-k8s.io",
        "MachineSet",
        "machinesets",
        "machineset",
        ["ms"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "cluster.x-k8s.io",
        "MachineDeployment",
        "machinedeployments",
        "machinedeployment",
        ["md"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "cluster.x-k8s.io",
        "MachineHealthCheck",
        "machinehealthchecks",
        "machinehealthcheck",
        ["mhc"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "addons.cluster.x-k8s.io",
        "ClusterResourceSet",
        "clusterresourcesets",
        "clusterresourceset",
        ["crs"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "addons.cluster.x-k8s.io",
        "ClusterResourceSetBinding",
        "clusterresourcesetbindings",
        "clusterresourcesetbinding",
        ["crsb"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "bootstrap.cluster.x-k8s.io",
        "KubeadmConfig",
        "kubeadmconfigs",
        "kubeadmconfig",
        [],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "bootstrap.cluster.x-k8s.io",
        "KubeadmConfigTemplate",
        "kubeadmconfigtemplates",
        "kubeadmconfigtemplate",
        [],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
        "kubeadmcontrolplane",
        ["kcp"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "infrastructure.cluster.x-k8s.io",
        "Metal3Cluster",
        "metal3clusters",
        "metal3cluster",
        ["m3c"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "infrastructure.cluster.x-k8s.io",
        "Metal3Machine",
        "metal3machines",
        "metal3machine",
        ["m3m"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "infrastructure.cluster.x-k8s.io",
        "Metal3MachineTemplate",
        "metal3machinetemplates",
        "metal3machinetemplate",
        ["m3mt"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "infrastructure.cluster.x-k8s.io",
        "Metal3DataTemplate",
        "metal3datatemplates",
        "metal3datatemplate",
        ["m3dt"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "infrastructure.cluster.x-k8s.io",
        "Metal3DataClaim",
        "metal3dataclaims",
        "metal3dataclaim",
        ["m3dc"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "infrastructure.cluster.x-k8s.io",
        "Metal3Data",
        "metal3datas",
        "metal3data",
        ["m3d"],
        Namespaced,
        V1B1_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "infrastructure.cluster.x-k8s.io",
        "KVMCluster",
        "kvmclusters",
        "kvmcluster",
        ["kvmc"],
        Namespaced,
        V1A4_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "infrastructure.cluster.x-k8s.io",
        "KVMMachine",
        "kvmmachines",
        "kvmmachine",
        ["kvmm"],
        Namespaced,
        V1A4_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "infrastructure.cluster.x-k8s.io",
        "KVMMachineTemplate",
        "kvmmachinetemplates",
        "kvmmachinetemplate",
        ["kvmmt"],
        Namespaced,
        V1A4_V1B2,
        "v1beta2",
        CAPI
    ),
    kind!(
        "metal3.io",
        "BareMetalHost",
        "baremetalhosts",
        "baremetalhost",
        ["bmh", "bmhost"],
        Namespaced,
        &["v1alpha1"],
        "v1alpha1",
        &["metal3"]
    ),
    kind!(
        "metal3.io",
        "HardwareData",
        "hardwaredata",
        "hardwaredata",
        ["hd"],
        Namespaced,
        &["v1alpha1"],
        "v1alpha1",
        &["metal3"]
    ),
    kind!(
        "ipam.metal3.io",
        "IPPool",
        "ippools",
        "ippool",
        [],
        Namespaced,
        &["v1alpha1"],
        "v1alpha1",
        &["metal3"]
    ),
    kind!(
        "ipam.metal3.io",
        "IPClaim",
        "ipclaims",
        "ipclaim",
        [],
        Namespaced,
        &["v1alpha1"],
        "v1alpha1",
        &["metal3"]
    ),
    kind!(
        "ipam.metal3.io",
        "IPAddress",
        "ipaddresses",
        "ipaddress",
        [],
        Namespaced,
        &["v1alpha1"],
        "v1alpha1",
        &["metal3"]
    ),
    kind!(
        "cilium.io",
        "CiliumBGPClusterConfig",
        "ciliumbgpclusterconfigs",
        "ciliumbgpclusterconfig",
        ["cbgpcluster"],
        Cluster,
        &["v2"],
        "v2",
        &["cilium"]
    ),
    kind!(
        "cilium.io",
        "CiliumBGPPeerConfig",
        "ciliumbgppeerconfigs",
        "ciliumbgppeerconfig",
        ["cbgppeer"],
        Cluster,
        &["v2"],
        "v2",
        &["cilium"]
    ),
    kind!(
        "cilium.io",
        "CiliumBGPAdvertisement",
        "ciliumbgpadvertisements",
        "ciliumbgpadvertisement",
        ["cbgpadvert"],
        Cluster,
        &["v2"],
        "v2",
        &["cilium"]
    ),
    kind!(
        "",
        "Namespace",
        "namespaces",
        "namespace",
        ["ns"],
        Cluster,
        &["v1"],
        "v1",
        &[]
    ),
    kind!(
        "",
        "Secret",
        "secrets",
        "secret",
        [],
        Namespaced,
        &["v1"],
        "v1",
        &[]
    ),
    kind!(
        "",
        "ConfigMap",
        "configmaps",
        "configmap",
        ["cm"],
        Namespaced,
        &["v1"],
        "v1",
        &[]
    ),
    kind!(
        "",
        "Event",
        "events",
        "event",
        ["ev"],
        Namespaced,
        &["v1"],
        "v1",
        &[]
    ),
    kind!(
        "",
        "Node",
        "nodes",
        "node",
        ["no"],
        Cluster,
        &["v1"],
        "v1",
        &[]
    ),
    kind!(
        "policy",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        ["pdb"],
        Namespaced,
        &["v1"],
        "v1",
        &[]
    ),
    kind!(
        "",
        "Pod",
        "pods",
        "pod",
        ["po"],
        Namespaced,
        &["v1"],
        "v1",
        &["all"]
    ),
];

/// Why an `apiVersion`/`kind` pair is not known.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KindError {
    /// The kind is known but not in this version.
    #[error("{kind} is not served in {api_version}; known versions: {known}")]
    UnknownVersion {
        api_version: String,
        kind: String,
        known: String,
    },
    /// Nothing of this kind in this group.
    #[error("unknown kind {kind} in {api_version}")]
    UnknownKind { api_version: String, kind: String },
}

/// Looks up a kind by its `apiVersion` and `kind`.
pub fn lookup(api_version: &str, kind: &str) -> Result<&'static KindInfo, KindError> {
    let group = crate::meta::group_of(api_version);
    let version = crate::meta::version_of(api_version);
    let info = KINDS
        .iter()
        .find(|k| k.group == group && k.kind == kind)
        .ok_or_else(|| KindError::UnknownKind {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        })?;
    if info.versions.contains(&version) {
        Ok(info)
    } else {
        Err(KindError::UnknownVersion {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            known: info
                .versions
                .iter()
                .map(|v| info.api_version(v))
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Whether `group` is one of the API groups capstan owns (as opposed to built-in or foreign groups).
pub fn is_known_group(group: &str) -> bool {
    KINDS.iter().any(|k| k.group == group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        assert_eq!(
            lookup("cluster.x-k8s.io/v1beta1", "Cluster")
                .unwrap()
                .plural,
            "clusters"
        );
        assert_eq!(lookup("v1", "Secret").unwrap().scope, Scope::Namespaced);
        assert!(matches!(
            lookup("cluster.x-k8s.io/v1alpha3", "Cluster"),
            Err(KindError::UnknownVersion { .. })
        ));
        assert!(matches!(
            lookup("cluster.x-k8s.io/v1beta1", "Clutser"),
            Err(KindError::UnknownKind { .. })
        ));
    }

    #[test]
    fn plurals_are_unique_per_group() {
        for (i, a) in KINDS.iter().enumerate() {
            for b in &KINDS[i + 1..] {
                assert!(
                    !(a.group == b.group && a.plural == b.plural),
                    "{} {}",
                    a.kind,
                    b.kind
                );
            }
        }
    }
}
