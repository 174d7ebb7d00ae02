//! Whether upstream Cluster API or Metal3 controllers already run against a management cluster:
//! `capstan controllers` reconciles the same kinds, and two controllers on one object undo each
//! other's writes (claims, finalizers, status), so it refuses to start beside them.
//!
//! Evidence, either of: a Deployment with replicas above zero named as `clusterctl init` and the
//! Metal3 manifests name them, or a Lease with one of their leader-election ids renewed within
//! its duration (a stale Lease left by an uninstalled controller does not count).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// Deployments of upstream controllers, by name.
pub const UPSTREAM_DEPLOYMENTS: [&str; 6] = [
    "capi-controller-manager",
    "capi-kubeadm-bootstrap-controller-manager",
    "capi-kubeadm-control-plane-controller-manager",
    "capm3-controller-manager",
    "ipam-controller-manager",
    "baremetal-operator-controller-manager",
];

/// Leader-election Lease names of upstream controllers.
pub const UPSTREAM_LEASES: [&str; 5] = [
    "controller-leader-election-capi",
    "kubeadm-bootstrap-manager-leader-election-capi",
    "kubeadm-control-plane-manager-leader-election-capi",
    "controller-leader-election-capm3",
    "baremetal-operator",
];

/// Why the management cluster could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("listing {what} in the management cluster")]
    List {
        what: &'static str,
        source: kube::Error,
    },
}

/// One sign of an upstream controller, said as a user would look for it.
fn deployment_evidence(deployment: &Deployment) -> Option<String> {
    let name = deployment.name_any();
    let replicas = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    (UPSTREAM_DEPLOYMENTS.contains(&name.as_str()) && replicas > 0).then(|| {
        format!(
            "Deployment {}/{name} ({replicas} replica{})",
            deployment.namespace().unwrap_or_default(),
            if replicas == 1 { "" } else { "s" }
        )
    })
}

fn lease_evidence(lease: &Lease, now: jiff::Timestamp) -> Option<String> {
    let name = lease.name_any();
    if !UPSTREAM_LEASES.contains(&name.as_str()) {
        return None;
    }
    let spec = lease.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref()?.0;
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let age = now.duration_since(renewed).as_secs();
    (age <= duration).then(|| {
        format!(
            "Lease {}/{name} (held by {}, renewed {age} s ago)",
            lease.namespace().unwrap_or_default(),
            spec.holder_identity.as_deref().unwrap_or("?"),
        )
    })
}

/// Every sign that upstream controllers run against the cluster `client` reaches.
pub async fn find(client: &Client) -> Result<Vec<String>, UpstreamError> {
    let deployments = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| UpstreamError::List {
            what: "Deployments",
            source,
        })?;
    let leases = Api::<Lease>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| UpstreamError::List {
            what: "Leases",
            source,
        })?;
    let now = jiff::Timestamp::now();
    Ok(deployments
        .items
        .iter()
        .filter_map(deployment_evidence)
        .chain(leases.items.iter().filter_map(|l| lease_evidence(l, now)))
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn running_deployments_and_fresh_leases_count_stale_ones_do_not() {
        let running: Deployment = serde_json::from_value(json!({"metadata": {"name": "capi-controller-manager", "namespace": "capi-system"}, "spec": {"replicas": 1, "selector": {}, "template": {}}})).unwrap();
        let scaled_down: Deployment = serde_json::from_value(json!({"metadata": {"name": "capm3-controller-manager", "namespace": "capm3-system"}, "spec": {"replicas": 0, "selector": {}, "template": {}}})).unwrap();
        let other: Deployment =
            serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default"}}))
                .unwrap();
        assert_eq!(
            deployment_evidence(&running).unwrap(),
            "Deployment capi-system/capi-controller-manager (1 replica)"
        );
        assert!(deployment_evidence(&scaled_down).is_none());
        assert!(deployment_evidence(&other).is_none());
        let now: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let lease = |renewed: &str| -> Lease {
            serde_json::from_value(json!({"metadata": {"name": "controller-leader-election-capm3", "namespace": "capm3-system"},
                "spec": {"holderIdentity": "capm3-abc", "leaseDurationSeconds": 15, "renewTime": renewed}})).unwrap()
        };
        assert_eq!(
            lease_evidence(&lease("2026-01-01T00:00:50.000000Z"), now).unwrap(),
            "Lease capm3-system/controller-leader-election-capm3 (held by capm3-abc, renewed 10 s ago)"
        );
        assert!(lease_evidence(&lease("2026-01-01T00:00:00.000000Z"), now).is_none());
    }
}
