//! The KVM infrastructure provider, on `capstan-infra`'s contract layer: Cluster API machines as
//! libvirt domains on hypervisors you own.
//!
//! - [`cluster`]: KVMCluster — its hypervisors (libvirt URIs and pools) are the cluster's failure
//!   domains; provisioned once they are valid and `spec.controlPlaneEndpoint` is set.
//! - [`machine`]: KVMMachine — placement with capacity checks, a qcow2 overlay on a base image
//!   fetched once per hypervisor and verified, extra volumes, a cloud-init NoCloud medium, the
//!   domain, `libvirt://HYPERVISOR/UUID` providerIDs on the machine and its Node; deletion removes
//!   the domain and everything it owned.
//! - [`driver`]: the libvirt driver — coarse, idempotent verbs with one config and one error type.
//! - [`image`]: base images from `file://`, `http://` and `https://` URLs, streamed into a pool
//!   and verified as they pass.
//! - [`media`]: the NoCloud medium (meta-data, network-config, multipart user-data).
//!
//! KVMMachineTemplate needs no controller: CAPI clones it.

pub mod cluster;
pub mod driver;
pub mod image;
pub mod machine;
pub mod media;

pub use cluster::KvmClusterProvider;
pub use driver::Driver;
pub use machine::KvmMachineProvider;

use capstan_infra::{InfraClusterController, InfraMachineController};
use capstan_runtime::{Task, controller_task};
use capstan_workload::SharedWorkloadAccess;
use std::sync::Arc;

/// Why a KVM step failed (retried with backoff). Hypervisor problems are not errors: they become
/// conditions that name the hypervisor and what to do.
#[derive(Debug, thiserror::Error)]
pub enum KvmError {
    #[error("{verb} {kind} {namespace}/{name}")]
    Api {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
}

pub(crate) fn api(
    verb: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> KvmError {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |source| KvmError::Api {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

/// The KVM controllers: KVMCluster and KVMMachine, sharing one `driver`.
pub fn controllers(
    driver: Arc<Driver>,
    workloads: Option<SharedWorkloadAccess>,
) -> Vec<Box<dyn Task>> {
    vec![
        controller_task(InfraClusterController::new(KvmClusterProvider)),
        controller_task(InfraMachineController::new(KvmMachineProvider::new(
            driver, workloads,
        ))),
    ]
}
