//! The Cluster a control plane belongs to: the one whose `spec.controlPlaneRef` names it.
//!
//! First, because everything after it is per cluster: the certificates and the kubeconfig are named
//! after the Cluster, the Machines are labelled with it and the workload cluster is reached by it.
//! Without one the pass ends after saying so (`Available` False `WaitingForCluster`) and waits for
//! a change: Clusters are watched, and one that comes to name the control plane wakes it.

use super::{ControlPlaneError, Pass, PhaseOutcome, Requeue, api_error, status};
use capstan_model::capi::v1beta2::Cluster;
use capstan_model::kubeadm::v1beta2::KubeadmControlPlane;
use capstan_model::meta::LABEL_CLUSTER_NAME;
use capstan_runtime::Context;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};

/// The control plane's Cluster; without one, the pass stops once status says so.
pub(super) async fn find(pass: &Pass<'_>) -> Result<PhaseOutcome<Cluster>, ControlPlaneError> {
    match find_cluster(pass.context, pass.kcp, &pass.namespace).await? {
        Some(cluster) => Ok(PhaseOutcome::Continue(cluster)),
        None => {
            status::write_waiting_for_cluster(pass).await?;
            Ok(PhaseOutcome::Stop(Requeue::OnChange))
        }
    }
}

/// Whether `cluster` names `kcp_name` as its control plane.
fn references(cluster: &Cluster, kcp_name: &str) -> bool {
    cluster
        .spec
        .control_plane_ref
        .as_ref()
        .is_some_and(|r| r.kind == "KubeadmControlPlane" && r.name == kcp_name)
}

/// The Cluster the control plane names (owner reference, else the cluster-name label), when that
/// is the one.
fn named_cluster(kcp: &KubeadmControlPlane) -> Option<String> {
    kcp.owner_references()
        .iter()
        .find(|o| o.kind == "Cluster")
        .map(|o| o.name.clone())
        .or_else(|| kcp.labels().get(LABEL_CLUSTER_NAME).cloned())
}

/// A Cluster read untyped, as the typed model.
fn typed(raw: &DynamicObject) -> Result<Cluster, ControlPlaneError> {
    serde_json::to_value(raw)
        .and_then(serde_json::from_value)
        .map_err(|source| ControlPlaneError::DecodeCluster {
            namespace: raw.namespace().unwrap_or_default(),
            name: raw.name_any(),
            source,
        })
}

async fn find_cluster(
    context: &Context,
    kcp: &KubeadmControlPlane,
    namespace: &str,
) -> Result<Option<Cluster>, ControlPlaneError> {
    let name = kcp.name_any();
    // The Cluster is usually named by an owner reference or the cluster-name label: one read
    // instead of a list of every Cluster in the namespace, from the process's table of Clusters,
    // which the Cluster trigger updates first.
    if let Some(named) = named_cluster(kcp)
        && let Some(raw) = context
            .clusters()
            .get(namespace, &named)
            .await
            .map_err(api_error("reading", "Cluster", namespace, &named))?
        && let cluster = typed(&raw)?
        && references(&cluster, &name)
    {
        return Ok(Some(cluster));
    }
    let clusters: Api<Cluster> = Api::namespaced(context.client().clone(), namespace);
    Ok(clusters
        .list(&ListParams::default())
        .await
        .map_err(api_error("listing", "Cluster", namespace, ""))?
        .items
        .into_iter()
        .find(|c| references(c, &name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::meta::ContractVersionedObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn the_cluster_is_the_one_whose_control_plane_ref_names_it() {
        let cluster = |kind: &str, name: &str| {
            let mut cluster = Cluster::new("c", None, Default::default());
            cluster.spec.control_plane_ref = Some(ContractVersionedObjectReference {
                api_group: "controlplane.cluster.x-k8s.io".into(),
                kind: kind.into(),
                name: name.into(),
            });
            cluster
        };
        let cases = [
            (cluster("KubeadmControlPlane", "cp"), true),
            (cluster("KubeadmControlPlane", "other"), false),
            (cluster("TalosControlPlane", "cp"), false),
            (Cluster::new("c", None, Default::default()), false),
        ];
        for (cluster, want) in cases {
            assert_eq!(
                references(&cluster, "cp"),
                want,
                "{:?}",
                cluster.spec.control_plane_ref
            );
        }
    }

    #[test]
    fn the_owner_reference_names_the_cluster_before_the_label() {
        let mut kcp = KubeadmControlPlane::new("cp", None, Default::default());
        assert_eq!(named_cluster(&kcp), None);
        kcp.labels_mut()
            .insert(LABEL_CLUSTER_NAME.into(), "by-label".into());
        assert_eq!(named_cluster(&kcp).as_deref(), Some("by-label"));
        kcp.owner_references_mut().push(OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Cluster".into(),
            name: "by-owner".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        });
        assert_eq!(named_cluster(&kcp).as_deref(), Some("by-owner"));
    }
}
