//! The admin kubeconfig (`<cluster>-kubeconfig`) and the control-plane endpoint it points at.
//!
//! Once the Cluster has a `spec.controlPlaneEndpoint` (the infrastructure cluster sets it), the
//! kubeconfig is written with a `kubernetes-admin` client certificate signed by the cluster CA, and
//! its client certificate is renewed when less than half of its year is left
//! ([`certs::ensure_kubeconfig`]); its expiry is recorded in [`ANNOTATION_KUBECONFIG_EXPIRY`] so it
//! shows without reading the Secret. It runs right after the certificates, whose CA it needs, and
//! before the Machines, because everything that reaches the workload cluster (initialisation,
//! bootstrap tokens, etcd) reaches it through this kubeconfig. Without an endpoint no Machine can be
//! made, so the pass waits ([`wait_for_endpoint`]), though only after a refused spec has said so.

use super::certificates::rfc3339;
use super::{
    ANNOTATION_KUBECONFIG_EXPIRY, ControlPlaneError, Decision, Pass, Step, api_error, kcp_resource,
};
use crate::certs::{self, ClusterCertificates, KubeconfigOutcome};
use capstan_model::capi::v1beta2::Cluster;
use capstan_runtime::EventType;
use capstan_workload::{ClusterKey, SharedWorkloadAccess};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

/// Whether the Cluster says where its control plane is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ControlPlaneEndpoint {
    /// `spec.controlPlaneEndpoint` has a host: the kubeconfig points there.
    Set,
    /// Not yet: no kubeconfig, and no Machine.
    Unset,
}

/// The port of an endpoint: kubeadm's 6443 when unset or out of range.
fn port(endpoint_port: i32) -> u16 {
    u16::try_from(endpoint_port)
        .ok()
        .filter(|p| *p != 0)
        .unwrap_or(6443)
}

/// Writes or renews the kubeconfig once the Cluster has an endpoint, and records its expiry.
pub(super) async fn reconcile(
    pass: &Pass<'_>,
    cluster: &Cluster,
    key: &ClusterKey,
    certificates: &ClusterCertificates,
    workloads: Option<&SharedWorkloadAccess>,
) -> Result<ControlPlaneEndpoint, ControlPlaneError> {
    let Some(endpoint) = cluster
        .spec
        .control_plane_endpoint
        .as_ref()
        .filter(|e| !e.host.is_empty())
    else {
        return Ok(ControlPlaneEndpoint::Unset);
    };
    let cluster_name = cluster.name_any();
    let outcome = certs::ensure_kubeconfig(
        pass.context,
        &pass.namespace,
        &cluster_name,
        &certs::server_url(&endpoint.host, port(endpoint.port)),
        &certificates.cluster_ca,
        Some(pass.owner_reference()),
        jiff::Timestamp::now(),
    )
    .await?;
    let expires = match outcome {
        KubeconfigOutcome::Created { expires } => Some(expires),
        KubeconfigOutcome::Kept { expires } => expires,
        KubeconfigOutcome::Renewed { previous, expires } => {
            // Clients cached from the old kubeconfig are rebuilt from the new one.
            if let Some(workloads) = workloads {
                workloads.forget(key);
            }
            pass.context
                .publish(
                    pass.kcp,
                    EventType::Normal,
                    "KubeconfigCertificateRenewed",
                    "RenewCertificates",
                    format!(
                        "renewed the client certificate of Secret {cluster_name}-kubeconfig, which expires at {}; the new one expires at {}",
                        rfc3339(previous),
                        rfc3339(expires)
                    ),
                )
                .await;
            Some(expires)
        }
        KubeconfigOutcome::NotOwned => None,
    };
    record_expiry(pass, expires.map(rfc3339)).await?;
    Ok(ControlPlaneEndpoint::Set)
}

/// Sets [`ANNOTATION_KUBECONFIG_EXPIRY`] to `wanted` (removes it for `None`) unless it says so.
async fn record_expiry(pass: &Pass<'_>, wanted: Option<String>) -> Result<(), ControlPlaneError> {
    let recorded = pass.kcp.annotations().get(ANNOTATION_KUBECONFIG_EXPIRY);
    if recorded == wanted.as_ref() {
        return Ok(());
    }
    let raw: Api<DynamicObject> =
        Api::namespaced_with(pass.client().clone(), &pass.namespace, &kcp_resource());
    raw.patch(
        &pass.name,
        &PatchParams::default(),
        &Patch::Merge(
            &json!({"metadata": {"annotations": {ANNOTATION_KUBECONFIG_EXPIRY: wanted}}}),
        ),
    )
    .await
    .map_err(api_error(
        "annotating",
        "KubeadmControlPlane",
        &pass.namespace,
        &pass.name,
    ))?;
    Ok(())
}

/// The endpoint's decision phase: wait until the Cluster has one.
pub(super) fn wait_for_endpoint(endpoint: ControlPlaneEndpoint, cluster_name: &str) -> Decision {
    match endpoint {
        ControlPlaneEndpoint::Set => Decision::Continue,
        ControlPlaneEndpoint::Unset => Decision::Decided(Step::Wait(format!(
            "Cluster {cluster_name} has no spec.controlPlaneEndpoint yet"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_without_a_port_is_reached_on_6443() {
        for (endpoint_port, want) in [
            (0, 6443),
            (-1, 6443),
            (70000, 6443),
            (443, 443),
            (6443, 6443),
        ] {
            assert_eq!(port(endpoint_port), want, "{endpoint_port}");
        }
    }

    #[test]
    fn the_pass_waits_for_the_endpoint() {
        assert_eq!(
            wait_for_endpoint(ControlPlaneEndpoint::Unset, "c"),
            Decision::Decided(Step::Wait(
                "Cluster c has no spec.controlPlaneEndpoint yet".into()
            ))
        );
        assert_eq!(
            wait_for_endpoint(ControlPlaneEndpoint::Set, "c"),
            Decision::Continue
        );
    }
}
