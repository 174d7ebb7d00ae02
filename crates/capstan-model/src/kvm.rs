//! The KVM infrastructure provider's kinds (`infrastructure.cluster.x-k8s.io`): KVMCluster,
//! KVMMachine and KVMMachineTemplate, served in `v1alpha4` (the shape of the team design capstan's
//! KVM provider follows: `resources.cpu`, `memory`, `disk`, `dockerVolumeSize`) and `v1beta2`, the
//! storage version.
//!
//! Both versions have the same shape: what capstan adds to the design's fields (hypervisors,
//! placement, base image, networks, extra volumes, DNS and NTP) is optional and accepted in either
//! version, so converting between them only rewrites `apiVersion` and loses nothing. Sizes are
//! Kubernetes quantities (`1Gi`, `20G`, `512Mi`), parsed by [`quantity_bytes`].

use crate::capm3::ApiEndpoint;
use crate::meta::Condition;
use crate::resource;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// What a quantity of bytes looks like in a KVM spec: a whole number with an optional decimal
/// or binary suffix, as [`quantity_bytes`] reads it (`20Gi`, `512Mi`, `8G`, `1024`).
pub const QUANTITY_PATTERN: &str = r"^[0-9]+(Ki|Mi|Gi|Ti|k|K|KB|M|MB|G|GB|T|TB)?$";

/// The sizes of a VM, as the design names them.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvmResources {
    /// Virtual CPUs (2 when unset).
    #[schemars(range(min = 1))]
    pub cpu: Option<u32>,
    /// Memory (a quantity: `1Gi`).
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub memory: Option<String>,
    /// The root disk (a quantity: `20Gi`).
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub disk: Option<String>,
    /// The container runtime's volume, mounted at `/var/lib/containerd` (a quantity: `5Gi`).
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub docker_volume_size: Option<String>,
}

/// The base image the root disk is backed by: fetched once per hypervisor into its pool.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvmImage {
    /// `file://`, `http://` or `https://` URL of a qcow2 (or raw) image.
    #[serde(default)]
    #[schemars(extend("x-capstan-required" = true), regex(pattern = r"^(file|https?)://.+"))]
    pub url: String,
    /// Hex digest of the image (`sha256sum IMAGE`); required.
    #[schemars(extend("x-capstan-required" = true), regex(pattern = r"^[0-9a-fA-F]+$"))]
    pub checksum: Option<String>,
    /// `sha256` (the default) or `sha512`.
    #[schemars(extend("enum" = ["sha256", "sha512"], "x-capstan-default" = "sha256"))]
    pub checksum_type: Option<String>,
    /// `qcow2` (the default) or `raw`.
    #[schemars(extend("enum" = ["qcow2", "raw"], "x-capstan-default" = "qcow2"))]
    pub format: Option<String>,
    /// Secret (in the machine's namespace) whose `ca.crt` holds the PEM CA certificates an
    /// `https://` image server's certificate may chain to, besides the system's.
    pub ca_secret_ref: Option<LocalSecretReference>,
}

/// One NIC: on a libvirt network or a host bridge.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvmNetwork {
    /// A libvirt network (`default`).
    pub network: Option<String>,
    /// A host bridge (`br0`), instead of a network.
    pub bridge: Option<String>,
    /// QEMU's user-mode networking instead (no bridge or libvirt network on the host; the guest
    /// reaches out through the hypervisor, nothing reaches in).
    pub user: Option<bool>,
    /// A static address with prefix (`192.168.122.10/24`) written into the node's network config.
    pub address: Option<String>,
    /// The default gateway for [`Self::address`].
    pub gateway: Option<String>,
    /// An IPPool (`ipam.metal3.io`, the machine's namespace) the static address comes from
    /// instead of [`Self::address`]: the machine claims one (an IPClaim it owns) and uses the
    /// address, prefix and gateway it is given, so each VM of a template gets its own.
    pub ip_pool_ref: Option<crate::meta::LocalObjectReference>,
}

/// An extra volume: formatted and mounted by cloud-init (kubelet, etcd, host volumes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvmVolume {
    /// Short name (`etcd`, `kubelet`, `data`): part of the volume's name in the pool.
    #[serde(default)]
    #[schemars(extend("x-capstan-required" = true), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))]
    pub name: String,
    /// A quantity (`10Gi`).
    #[serde(default)]
    #[schemars(extend("x-capstan-required" = true), regex(pattern = QUANTITY_PATTERN))]
    pub size: String,
    /// Where it is mounted in the guest (`/var/lib/etcd`): an absolute path.
    #[serde(default)]
    #[schemars(extend("x-capstan-required" = true), regex(pattern = "^/"))]
    pub mount_path: String,
}

/// KVMMachine spec (also the template spec of KVMMachineTemplate).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvmMachineSpec {
    /// `libvirt://HYPERVISOR/UUID`, set by the provider once the VM is defined.
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    /// CPU, memory and disk sizes.
    #[serde(default)]
    pub resources: KvmResources,
    /// The base image of the root disk.
    pub image: Option<KvmImage>,
    /// Pin the VM to the KVMCluster hypervisor of this name (else the one with most room).
    pub hypervisor: Option<String>,
    /// NICs, in order (one on the libvirt network `default` when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<KvmNetwork>,
    /// Extra volumes, formatted and mounted in the guest; names are unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub volumes: Vec<KvmVolume>,
    /// The failure domain (a KVMCluster hypervisor's name) the Machine asked for.
    pub failure_domain: Option<String>,
}

/// KVMMachine status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvmMachineStatus {
    pub ready: Option<bool>,
    pub initialization: Option<serde_json::Value>,
    pub addresses: Option<serde_json::Value>,
    pub failure_domain: Option<String>,
    /// The KVMCluster hypervisor the VM was placed on (kept for its lifetime).
    pub hypervisor: Option<String>,
    /// That hypervisor's libvirt URI when the VM was placed.
    #[serde(rename = "hypervisorURI")]
    pub hypervisor_uri: Option<String>,
    /// The storage pool of the VM's volumes on that hypervisor.
    pub pool: Option<String>,
    /// The libvirt domain's UUID.
    #[serde(rename = "domainUUID")]
    pub domain_uuid: Option<String>,
    /// The libvirt domain's state (`running`, `shut off`, …).
    pub domain_state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// KVMMachineTemplate spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KvmMachineTemplateSpec {
    #[serde(default)]
    pub template: KvmMachineTemplateResource,
}

/// The template body of a KVMMachineTemplate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KvmMachineTemplateResource {
    #[serde(default)]
    pub spec: KvmMachineSpec,
}

/// A reference to a Secret in the KVMCluster's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LocalSecretReference {
    /// The Secret's name.
    #[serde(default)]
    #[schemars(extend("x-capstan-required" = true), length(min = 1))]
    pub name: String,
}

/// One hypervisor a KVMCluster places VMs on: a libvirt connection and a storage pool. Each is a
/// failure domain of the cluster.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvmHypervisor {
    /// The failure domain's name and the `HYPERVISOR` of `libvirt://HYPERVISOR/UUID` providerIDs.
    #[serde(default)]
    #[schemars(extend("x-capstan-required" = true), length(min = 1))]
    pub name: String,
    /// libvirt URI: `qemu:///system`, `qemu+ssh://user@host/system`, `qemu+tls://host/system`,
    /// `test:///default` (libvirt's simulated hypervisor).
    #[serde(default)]
    #[schemars(extend("x-capstan-required" = true), regex(pattern = r"^[a-z][a-z0-9+.-]*://"))]
    pub uri: String,
    /// Storage pool for images, disks and cloud-init media (`default` when unset).
    #[schemars(length(min = 1))]
    pub pool: Option<String>,
    /// Secret with `username` and `password` for libvirt's SASL authentication.
    pub credentials_secret_ref: Option<LocalSecretReference>,
    /// Whether control-plane VMs may be placed here (default true).
    #[schemars(extend("x-capstan-default" = true))]
    pub control_plane: Option<bool>,
    /// libvirt domain type: `kvm` (the default, hardware virtualisation) or `qemu` (software
    /// emulation, where KVM is missing or does not work, e.g. nested without VT-x).
    #[schemars(extend("enum" = ["kvm", "qemu"]))]
    pub domain_type: Option<String>,
}

/// KVMCluster spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvmClusterSpec {
    /// Where the cluster's API server is reached (set by the user or by the control plane).
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The libvirt connections VMs are placed on, one failure domain each; names are unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub hypervisors: Vec<KvmHypervisor>,
    /// DNS servers written into every node's network config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
    /// NTP servers written into every node's cloud-config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ntp_servers: Vec<String>,
}

/// KVMCluster status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvmClusterStatus {
    pub ready: Option<bool>,
    pub initialization: Option<serde_json::Value>,
    pub failure_domains: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Why a quantity could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{value:?} is not a size: write a whole number with an optional suffix (Ki, Mi, Gi, Ti, k, M, G, T), e.g. 20Gi"
)]
pub struct QuantityError {
    pub value: String,
}

/// Bytes in a Kubernetes quantity (`20Gi`, `512Mi`, `8G`, `8GB`, `1024`).
pub fn quantity_bytes(value: &str) -> Result<u64, QuantityError> {
    let error = || QuantityError {
        value: value.to_owned(),
    };
    let text = value.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    let number: u64 = number.parse().map_err(|_| error())?;
    let multiplier: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" | "K" | "KB" => 1_000,
        "M" | "MB" => 1_000_000,
        "G" | "GB" => 1_000_000_000,
        "T" | "TB" => 1_000_000_000_000,
        _ => return Err(error()),
    };
    number.checked_mul(multiplier).ok_or_else(error)
}

/// Versioned kinds.
macro_rules! kvm_version {
    ($module:ident, $version:literal) => {
        #[doc = concat!("`infrastructure.cluster.x-k8s.io/", $version, "` KVM kinds.")]
        #[allow(clippy::upper_case_acronyms)]
        pub mod $module {
            use super::*;

            resource!(
                /// The KVM side of a Cluster: its hypervisors and control-plane endpoint.
                KVMCluster, KvmClusterSpec, KvmClusterStatus, "infrastructure.cluster.x-k8s.io", $version, "kvmclusters", Namespaced
            );
            resource!(
                /// The KVM side of a Machine: one libvirt domain.
                KVMMachine, KvmMachineSpec, KvmMachineStatus, "infrastructure.cluster.x-k8s.io", $version, "kvmmachines", Namespaced
            );
            resource!(
                /// Template of KVMMachines.
                KVMMachineTemplate, KvmMachineTemplateSpec, serde_json::Value, "infrastructure.cluster.x-k8s.io", $version, "kvmmachinetemplates", Namespaced
            );
        }
    };
}

kvm_version!(v1alpha4, "v1alpha4");
kvm_version!(v1beta2, "v1beta2");

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(quantity_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(quantity_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(quantity_bytes("8GB"), Ok(8_000_000_000));
        assert_eq!(quantity_bytes("1024"), Ok(1024));
        for bad in ["", "Gi", "1.5Gi", "1Xi", "-1", "99999999999999999999Ti"] {
            assert!(quantity_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_design_example_reads_in_both_versions() {
        let text = r#"{"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha4", "kind": "KVMMachineTemplate",
            "metadata": {"name": "example-worker"},
            "spec": {"template": {"spec": {"resources": {"cpu": 1, "memory": "1Gi", "disk": "20Gi", "dockerVolumeSize": "5Gi"}}}}}"#;
        let old: v1alpha4::KVMMachineTemplate = serde_json::from_str(text).unwrap();
        let resources = &old.spec.template.spec.resources;
        assert_eq!(resources.cpu, Some(1));
        assert_eq!(resources.docker_volume_size.as_deref(), Some("5Gi"));
        let new: v1beta2::KVMMachineTemplate = serde_json::from_str(text).unwrap();
        assert_eq!(new.spec.template.spec.resources, *resources);
    }
}
