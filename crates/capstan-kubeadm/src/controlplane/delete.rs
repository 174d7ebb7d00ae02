//! Deleting a control plane: its Machines go first.
//!
//! Runs instead of the phases once the KubeadmControlPlane is being deleted (the runtime calls it
//! while [`super::FINALIZER`] is on it). Every Machine of the control plane is deleted at once: the
//! cluster is going, so etcd's quorum no longer matters, and each Machine's own finalizer takes its
//! infrastructure down. The finalizer stays until the Machines are gone, so the Cluster's deletion
//! (which waits for its control plane) sees them go first.

use super::{ControlPlaneError, LABEL_CONTROL_PLANE_NAME, PROGRESS, api_error};
use capstan_model::capi::v1beta2::Machine;
use capstan_model::kubeadm::v1beta2::KubeadmControlPlane;
use capstan_runtime::{Action, Cleanup, Context};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};

/// Deletes the control plane's Machines; done once none is left.
pub(super) async fn cleanup(
    kcp: &KubeadmControlPlane,
    context: &Context,
) -> Result<Cleanup, ControlPlaneError> {
    let name = kcp.name_any();
    let namespace = kcp.namespace().unwrap_or_default();
    let machines: Api<Machine> = Api::namespaced(context.client().clone(), &namespace);
    let owned: Vec<Machine> = machines
        .list(&ListParams::default().labels(&format!("{LABEL_CONTROL_PLANE_NAME}={name}")))
        .await
        .map_err(api_error("listing", "Machine", &namespace, ""))?
        .items;
    if owned.is_empty() {
        return Ok(Cleanup::Done);
    }
    for machine in owned
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
    {
        match machines
            .delete(&machine.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => {
                return Err(api_error(
                    "deleting",
                    "Machine",
                    &namespace,
                    &machine.name_any(),
                )(e));
            }
        }
    }
    // The finalizer stays until the Machines are gone; this requeue is the retry.
    Ok(Cleanup::Pending(Action::requeue(PROGRESS)))
}
