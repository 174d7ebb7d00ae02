//! Certificates: the cluster's, and when each control-plane Machine's expire.
//!
//! First after the Cluster is found, the cluster's CAs (cluster, etcd, front proxy) and
//! service-account key pair are looked up or generated ([`certs::lookup_or_generate`], owned by the
//! control plane): the kubeconfig is signed by the cluster CA, and every Machine's bootstrap data
//! carries them, so nothing later can do without them.
//!
//! Once the Machines are listed, each one's certificate expiry is recorded on its KubeadmConfig
//! ([`ANNOTATION_CERTIFICATES_EXPIRY`]) from its Node's registration, when `kubeadm init|join` made
//! them; a Machine's own annotation is a user's override and wins. With
//! `spec.rollout.before.certificatesExpiryDays` (v1beta1 `rolloutBefore`) a Machine whose
//! certificates expire within that many days is outdated, which the rollout then acts on; so this
//! runs before the decision.

use super::machines::Member;
use super::{
    ANNOTATION_CERTIFICATES_EXPIRY, ControlPlaneError, NODE_CERTIFICATE_VALIDITY, Pass, api_error,
};
use crate::certs::{self, ClusterCertificates};
use capstan_model::capi::v1beta2::Machine;
use capstan_workload::{ClusterKey, SharedWorkloadAccess};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::HashMap;

/// The cluster's certificates, looked up or generated, owned by the control plane.
pub(super) async fn ensure(
    pass: &Pass<'_>,
    cluster_name: &str,
) -> Result<ClusterCertificates, ControlPlaneError> {
    Ok(certs::lookup_or_generate(
        pass.client(),
        pass.context.secrets(),
        &pass.namespace,
        cluster_name,
        Some(pass.owner_reference()),
    )
    .await?)
}

/// When a Machine's certificates expire: its own annotation (a user's override) else its
/// KubeadmConfig's; `None` when neither is set or parses.
pub fn certificates_expiry(
    machine_annotation: Option<&str>,
    config_annotation: Option<&str>,
) -> Option<jiff::Timestamp> {
    machine_annotation
        .and_then(|t| t.parse().ok())
        .or_else(|| config_annotation.and_then(|t| t.parse().ok()))
}

/// Whether certificates expiring at `expiry` expire within `days` days of `now`.
pub fn certificates_expire_within(
    expiry: jiff::Timestamp,
    now: jiff::Timestamp,
    days: i64,
) -> bool {
    expiry < now + jiff::SignedDuration::from_hours(days.saturating_mul(24))
}

/// `spec.rollout.before.certificatesExpiryDays`, when set and positive.
pub(super) fn certificates_expiry_days(spec: &Value) -> Option<i64> {
    spec.pointer("/rollout/before/certificatesExpiryDays")
        .and_then(Value::as_i64)
        .filter(|d| *d > 0)
}

/// RFC 3339 at whole seconds, as annotations carry times.
pub(super) fn rfc3339(at: jiff::Timestamp) -> String {
    at.round(jiff::Unit::Second).unwrap_or(at).to_string()
}

/// Records each Machine's certificate expiry (see [`record_expiries`]) and, with
/// `certificatesExpiryDays`, marks the Machines whose certificates expire within them as outdated.
pub(super) async fn judge_expiries(
    pass: &Pass<'_>,
    members: &mut [Member],
    selector: &str,
    key: &ClusterKey,
    workloads: Option<&SharedWorkloadAccess>,
) -> Result<(), ControlPlaneError> {
    let expiries = record_expiries(pass, members, selector, key, workloads).await?;
    if let Some(days) = certificates_expiry_days(&pass.spec) {
        mark_expiring(members, &expiries, jiff::Timestamp::now(), days);
    }
    Ok(())
}

/// Marks the members whose certificates expire within `days` of `now` as expiring, and so outdated.
fn mark_expiring(
    members: &mut [Member],
    expiries: &HashMap<String, jiff::Timestamp>,
    now: jiff::Timestamp,
    days: i64,
) {
    for member in members {
        if expiries
            .get(&member.name())
            .is_some_and(|e| certificates_expire_within(*e, now, days))
        {
            member.certificates_expiring = true;
            member.up_to_date = false;
        }
    }
}

/// The expiry a Machine or its KubeadmConfig already carries.
fn known_expiry(machine: &Machine, config: Option<&DynamicObject>) -> Option<jiff::Timestamp> {
    certificates_expiry(
        machine
            .annotations()
            .get(ANNOTATION_CERTIFICATES_EXPIRY)
            .map(String::as_str),
        config
            .and_then(|c| c.annotations().get(ANNOTATION_CERTIFICATES_EXPIRY))
            .map(String::as_str),
    )
}

/// When Node `node` registered, from the workload API; `None` when that cannot be read now.
async fn node_registered(workload: &Client, node: &str) -> Option<jiff::Timestamp> {
    let created = Api::<Node>::all(workload.clone())
        .get_opt(node)
        .await
        .ok()??
        .metadata
        .creation_timestamp?;
    created.0.to_string().parse().ok()
}

/// Records on the KubeadmConfig of each Machine that has a Node and no known certificate
/// expiry when its certificates expire: the Node's registration (right after `kubeadm
/// init|join` made them) plus [`NODE_CERTIFICATE_VALIDITY`]. Returns the expiry of each Machine
/// by name, recorded before or now.
async fn record_expiries(
    pass: &Pass<'_>,
    members: &[Member],
    selector: &str,
    key: &ClusterKey,
    workloads: Option<&SharedWorkloadAccess>,
) -> Result<HashMap<String, jiff::Timestamp>, ControlPlaneError> {
    let namespace = pass.namespace.as_str();
    let configs: Api<DynamicObject> = Api::namespaced_with(
        pass.client().clone(),
        namespace,
        &crate::bootstrap::kubeadm_config_resource(),
    );
    let listed = configs
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(api_error("listing", "KubeadmConfig", namespace, ""))?
        .items;
    let mut expiries = HashMap::new();
    let mut workload: Option<Client> = None;
    for member in members.iter().filter(|m| !m.deleting) {
        let name = member.name();
        let config_name = member
            .machine
            .spec
            .bootstrap
            .config_ref
            .as_ref()
            .map_or_else(|| name.clone(), |r| r.name.clone());
        let config = listed.iter().find(|c| c.name_any() == config_name);
        if let Some(expiry) = known_expiry(&member.machine, config) {
            expiries.insert(name, expiry);
            continue;
        }
        let (Some(node), Some(_)) = (member.node(), config) else {
            continue;
        };
        if workload.is_none() {
            // Recorded on a later pass, once the workload API answers.
            let Some(access) = workloads else { break };
            let Ok(client) = access.client(key).await else {
                break;
            };
            workload = Some(client);
        }
        let Some(workload) = &workload else { break };
        let Some(registered) = node_registered(workload, &node).await else {
            continue;
        };
        let expiry = registered + NODE_CERTIFICATE_VALIDITY;
        let patch =
            json!({"metadata": {"annotations": {ANNOTATION_CERTIFICATES_EXPIRY: rfc3339(expiry)}}});
        configs
            .patch(&config_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error(
                "annotating",
                "KubeadmConfig",
                namespace,
                &config_name,
            ))?;
        expiries.insert(name, expiry);
    }
    Ok(expiries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::machines::tests::member;

    #[test]
    fn certificate_expiry_prefers_the_machine_override_and_counts_days_from_the_clock() {
        let config = "2027-03-10T00:00:00Z";
        let machine = "2026-12-01T00:00:00Z";
        // (machine annotation, KubeadmConfig annotation, the expiry)
        let cases = [
            (Some(machine), Some(config), Some(machine)),
            (None, Some(config), Some(config)),
            (Some("not a time"), Some(config), Some(config)),
            (Some(machine), None, Some(machine)),
            (None, Some("not a time"), None),
            (None, None, None),
        ];
        for (on_machine, on_config, want) in cases {
            assert_eq!(
                certificates_expiry(on_machine, on_config),
                want.map(|t| t.parse().unwrap()),
                "{on_machine:?} {on_config:?}"
            );
        }
    }

    #[test]
    fn certificates_expire_within_the_days_from_the_clock() {
        let expiry: jiff::Timestamp = "2027-03-10T00:00:00Z".parse().unwrap();
        let day = jiff::SignedDuration::from_hours(24);
        let second = jiff::SignedDuration::from_secs(1);
        // certificatesExpiryDays 21: rolled from 21 days before the expiry, not a second earlier.
        let cases = [
            (expiry - day * 22, false),
            (expiry - day * 21, false),
            (expiry - day * 21 + second, true),
            (expiry, true),
            (expiry + day, true),
        ];
        for (now, want) in cases {
            assert_eq!(
                certificates_expire_within(expiry, now, 21),
                want,
                "at {now}"
            );
        }
    }

    #[test]
    fn certificates_expiry_days_is_positive_or_unset() {
        let cases = [
            (
                json!({"rollout": {"before": {"certificatesExpiryDays": 21}}}),
                Some(21),
            ),
            (
                json!({"rollout": {"before": {"certificatesExpiryDays": 0}}}),
                None,
            ),
            (
                json!({"rollout": {"before": {"certificatesExpiryDays": -3}}}),
                None,
            ),
            (json!({"rollout": {}}), None),
        ];
        for (spec, want) in cases {
            assert_eq!(certificates_expiry_days(&spec), want, "{spec}");
        }
    }

    #[test]
    fn only_machines_expiring_within_the_days_are_outdated() {
        let now: jiff::Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        let day = jiff::SignedDuration::from_hours(24);
        let mut members = [
            member("soon", true, true, "2026-01-01T00:00:00Z"),
            member("later", true, true, "2026-01-01T00:00:00Z"),
            member("unknown", true, true, "2026-01-01T00:00:00Z"),
        ];
        let expiries = HashMap::from([
            ("soon".to_owned(), now + day * 10),
            ("later".to_owned(), now + day * 300),
        ]);
        mark_expiring(&mut members, &expiries, now, 21);
        let judged: Vec<(String, bool, bool)> = members
            .iter()
            .map(|m| (m.name(), m.certificates_expiring, m.up_to_date))
            .collect();
        assert_eq!(
            judged,
            [
                ("soon".to_owned(), true, false),
                ("later".to_owned(), false, true),
                ("unknown".to_owned(), false, true),
            ]
        );
    }

    #[test]
    fn annotations_carry_whole_seconds() {
        let at: jiff::Timestamp = "2027-03-10T00:00:00.6Z".parse().unwrap();
        assert_eq!(rfc3339(at), "2027-03-10T00:00:01Z");
    }
}
