//! Kubeadm bootstrap and control plane for capstan, along Cluster API's kubeadm providers.
//!
//! - [`certs`]: the cluster's CAs and service-account key pair (`<cluster>-ca`, `-etcd`, `-proxy`,
//!   `-sa`) and the admin `<cluster>-kubeconfig`, looked up or generated, never regenerated.
//! - [`kubeadm_api`]: kubeadm configuration documents in the API the node's Kubernetes version reads
//!   (v1beta3 for 1.22–1.30, v1beta4 from 1.31).
//! - [`cloudinit`]: the cloud-config in the layout Cluster API's kubeadm bootstrap provider emits,
//!   optionally reporting each bootstrap step back to capstan.
//! - [`report`]: the bootstrap report protocol and its HTTP endpoint.
//! - [`redact`]: what is removed from a report before anyone without Secret access reads it.
//! - [`bootstrap`]: the KubeadmConfig controller.
//! - [`controlplane`]: the KubeadmControlPlane controller.
//!
//! Both controllers read and write `v1beta2` objects (the embedded API converts other versions),
//! write only the status fields they own with merge patches, and reach workload clusters only
//! through `capstan-workload`'s `WorkloadAccess` and `EtcdMembership`.

pub mod bootstrap;
pub mod certs;
pub mod cloudinit;
pub mod controlplane;
pub mod kubeadm_api;
pub mod redact;
pub mod report;

use capstan_workload::{SharedEtcdMembership, SharedWorkloadAccess};

/// The kubeadm controllers as runtime tasks: the KubeadmConfig and KubeadmControlPlane controllers,
/// sharing one workload access and etcd membership. `report_base_url` is the base URL of the server
/// that mounts [`report::router`], reachable by nodes; `None` renders no bootstrap reporting.
pub fn controllers(
    workloads: Option<SharedWorkloadAccess>,
    etcd: Option<SharedEtcdMembership>,
    report_base_url: Option<String>,
) -> Vec<Box<dyn capstan_runtime::Task>> {
    vec![
        capstan_runtime::controller_task(bootstrap::BootstrapController::new(
            bootstrap::BootstrapSettings {
                workloads: workloads.clone(),
                report_base_url,
                ..bootstrap::BootstrapSettings::default()
            },
        )),
        capstan_runtime::controller_task(controlplane::ControlPlaneController::new(
            controlplane::ControlPlaneSettings { workloads, etcd },
        )),
    ]
}
