//! The Metal3 infrastructure provider, on `capstan-infra`'s contract layer.
//!
//! - [`cluster`]: Metal3Cluster — provisioned once `spec.controlPlaneEndpoint` is set; failure
//!   domains from its spec.
//! - [`machine`]: Metal3Machine — claims an `available` BareMetalHost matching `hostSelector`
//!   (never one already consumed, never two machines on one host), configures image, userData,
//!   metaData and networkData, reports `metal3://NS/HOST/M3M` once the host is `provisioned`, sets
//!   the same providerID on the workload Node labelled `metal3.io/uuid=<host uid>`, and on deletion
//!   deprovisions the host and releases it once it is `available` again.
//! - [`data`]: Metal3DataTemplate → Metal3DataClaim → Metal3Data, addresses from IPPools through
//!   IPClaims (served by capstan's IPAM controller).
//! - [`host`]: host selection, the providerID format, the networkData choice (pure, table-tested).
//!
//! Metal3MachineTemplate and Metal3DataTemplate need no controller of their own: CAPI clones the
//! first, [`data`] reads the second.

pub mod cluster;
pub mod data;
pub mod host;
pub mod machine;

pub use cluster::Metal3ClusterProvider;
pub use machine::Metal3MachineProvider;

use capstan_infra::{InfraClusterController, InfraMachineController};
use capstan_runtime::{Task, controller_task};
use capstan_workload::SharedWorkloadAccess;
use kube::ResourceExt;

/// Why a Metal3 step failed (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Metal3Error {
    #[error("{verb} {kind} {namespace}/{name}")]
    Api {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("reading BareMetalHosts")]
    Cache(#[from] capstan_runtime::watches::WatchError),
}

pub(crate) fn api(
    verb: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> Metal3Error {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |source| Metal3Error::Api {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

/// `Ok` also when the write lost to a concurrent one (409): the watch brings the next pass.
pub(crate) fn tolerate_conflict<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err),
    }
}

/// The owner Machine's name of a Metal3Machine.
pub(crate) fn owner_machine(
    machine: &capstan_model::capm3::v1beta2::Metal3Machine,
) -> Option<String> {
    capstan_infra::machine::owner_machine_name(&machine.metadata)
        .or_else(|| machine.labels().get("cluster.x-k8s.io/machine").cloned())
}

/// The Metal3 controllers: Metal3Cluster and Metal3Machine (which also renders Metal3Data).
pub fn controllers(workloads: Option<SharedWorkloadAccess>) -> Vec<Box<dyn Task>> {
    vec![
        controller_task(InfraClusterController::new(Metal3ClusterProvider)),
        controller_task(InfraMachineController::new(Metal3MachineProvider::new(
            workloads,
        ))),
    ]
}
