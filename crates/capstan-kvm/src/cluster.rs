//! KVMCluster: the [`InfraClusterProvider`] of the KVM provider. A KVM cluster's infrastructure
//! is its list of hypervisors and the endpoint people give it (a VIP kube-vip serves on the
//! control-plane VMs, or a load balancer), so it is provisioned once every hypervisor URI has a
//! scheme capstan speaks and `spec.controlPlaneEndpoint` has a host and a port. Each hypervisor is
//! a failure domain (control-plane eligible unless `controlPlane: false`).

use crate::KvmError;
use crate::driver;
use capstan_infra::{ClusterProvisioned, FailureDomain, InfraClusterProvider, Progress};
use capstan_model::capi::v1beta2::Cluster;
use capstan_model::kvm::KvmClusterSpec;
use capstan_model::kvm::v1beta2::KVMCluster;
use capstan_runtime::Context;
use std::collections::BTreeMap;

/// The KVMCluster controller's name.
pub const CLUSTER_CONTROLLER: &str = "kvmcluster";
/// The KVMCluster finalizer.
pub const CLUSTER_FINALIZER: &str = "kvmcluster.infrastructure.cluster.x-k8s.io";
/// The pool VMs use when a hypervisor names none.
pub const DEFAULT_POOL: &str = "default";

/// The KVMCluster side of the KVM provider.
#[derive(Clone, Debug, Default)]
pub struct KvmClusterProvider;

/// The failure domains of `spec`: one per hypervisor, sorted by name.
pub fn failure_domains(spec: &KvmClusterSpec) -> Vec<FailureDomain> {
    let mut domains: Vec<FailureDomain> = spec
        .hypervisors
        .iter()
        .map(|h| FailureDomain {
            name: h.name.clone(),
            control_plane: h.control_plane.unwrap_or(true),
            attributes: BTreeMap::from([(
                "pool".to_owned(),
                h.pool.clone().unwrap_or_else(|| DEFAULT_POOL.to_owned()),
            )]),
        })
        .collect();
    domains.sort_by(|a, b| a.name.cmp(&b.name));
    domains
}

/// What is wrong with `spec`'s hypervisors, as a condition reason and message; `None` when fine.
pub fn check_hypervisors(spec: &KvmClusterSpec) -> Option<(&'static str, String)> {
    if spec.hypervisors.is_empty() {
        return Some((
            "NoHypervisors",
            "spec.hypervisors is empty: list at least one libvirt connection (name, uri such as qemu:///system)".to_owned(),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (index, hypervisor) in spec.hypervisors.iter().enumerate() {
        if hypervisor.name.is_empty() {
            return Some((
                "InvalidHypervisor",
                format!(
                    "spec.hypervisors[{index}].name is empty: name each hypervisor (it becomes a failure domain)"
                ),
            ));
        }
        if !seen.insert(hypervisor.name.as_str()) {
            return Some((
                "InvalidHypervisor",
                format!(
                    "spec.hypervisors[{index}].name {:?} is used twice",
                    hypervisor.name
                ),
            ));
        }
        if let Err(error) = driver::check_uri(&hypervisor.uri) {
            return Some((
                "UnknownHypervisorScheme",
                format!("spec.hypervisors[{index}].uri: {error}"),
            ));
        }
    }
    None
}

impl InfraClusterProvider for KvmClusterProvider {
    type Cluster = KVMCluster;
    type Error = KvmError;

    fn name(&self) -> &'static str {
        CLUSTER_CONTROLLER
    }

    fn finalizer(&self) -> &'static str {
        CLUSTER_FINALIZER
    }

    async fn ensure(
        &self,
        cluster: &KVMCluster,
        _owner: &Cluster,
        _context: &Context,
    ) -> Result<Progress<ClusterProvisioned>, KvmError> {
        if let Some((reason, message)) = check_hypervisors(&cluster.spec) {
            return Ok(Progress::waiting(reason, message));
        }
        let endpoint = cluster.spec.control_plane_endpoint.as_ref();
        if endpoint.is_none_or(|e| e.host.is_empty() || e.port <= 0) {
            return Ok(Progress::waiting(
                "WaitingForControlPlaneEndpoint",
                "spec.controlPlaneEndpoint needs a host and a port: set them to the API VIP the control-plane VMs serve (e.g. with kube-vip) and 6443",
            ));
        }
        Ok(Progress::Done(ClusterProvisioned {
            control_plane_endpoint: None,
            failure_domains: failure_domains(&cluster.spec),
        }))
    }

    async fn release(
        &self,
        _cluster: &KVMCluster,
        _context: &Context,
    ) -> Result<Progress<()>, KvmError> {
        // VMs are released by their KVMMachines; base images stay in the pools as a cache.
        Ok(Progress::Done(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::kvm::KvmHypervisor;

    fn hypervisor(name: &str, uri: &str) -> KvmHypervisor {
        KvmHypervisor {
            name: name.into(),
            uri: uri.into(),
            ..KvmHypervisor::default()
        }
    }

    #[test]
    fn hypervisors_are_checked_with_a_reason() {
        let mut spec = KvmClusterSpec::default();
        assert_eq!(check_hypervisors(&spec).map(|c| c.0), Some("NoHypervisors"));
        spec.hypervisors = vec![
            hypervisor("hv1", "qemu:///system"),
            hypervisor("hv2", "vbox:///x"),
        ];
        let (reason, message) = check_hypervisors(&spec).unwrap_or_default();
        assert_eq!(reason, "UnknownHypervisorScheme");
        assert!(message.contains("spec.hypervisors[1].uri"), "{message}");
        spec.hypervisors[1] = hypervisor("hv1", "test:///default");
        assert_eq!(
            check_hypervisors(&spec).map(|c| c.0),
            Some("InvalidHypervisor")
        );
        spec.hypervisors[1].name = "hv2".into();
        assert_eq!(check_hypervisors(&spec), None);
        let domains = failure_domains(&spec);
        assert_eq!(domains.len(), 2);
        assert!(domains[0].control_plane);
        assert_eq!(
            domains[0].attributes.get("pool").map(String::as_str),
            Some("default")
        );
    }
}
