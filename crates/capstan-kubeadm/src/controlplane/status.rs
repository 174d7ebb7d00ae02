//! Status: what the control plane reports, and when it is looked at again.
//!
//! Written last, once per pass, from what the phases found and did (a pass that stops early writes
//! none, except [`write_waiting_for_cluster`]): `replicas`, `readyReplicas`, `availableReplicas`,
//! `upToDateReplicas` (and `updatedReplicas`), `version` (the oldest Machine's),
//! `initialization.controlPlaneInitialized` (and `initialized`, `ready`), `selector` (for `scale`),
//! the v1beta1 counts, and the conditions `SpecAccepted`, `Scaling`, `RollingOut`, `Available`,
//! `MachinesReady` and `EtcdClusterHealthy`. A pass that waits for a Machine to get a Node says why
//! that Machine is not ready (its first condition that is not True, which carries its bootstrap
//! config's or infrastructure machine's reason): in `Scaling`, in `MachinesReady`, and during a
//! rollout in `RollingOut` (`the rollout waits for Machine M to get a Node: InfrastructureReady …
//! NoAvailableHost: …`).
//!
//! It also owns whether the control plane is initialised ([`initialized`]), which the decision
//! reads before status is written: status remembers it once seen, as upstream's does.

use super::certificates::certificates_expiry_days;
use super::machines::{Member, not_ready_because};
use super::{ControlPlaneError, Pass, Requeue, Step, api_error};
use crate::kubeadm_api::KubeVersion;
use capstan_model::kubeadm::v1beta2::KubeadmControlPlane;
use capstan_model::meta::{Condition, LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE};
use capstan_runtime::conditions::{self, FALSE, TRUE, UNKNOWN};
use capstan_workload::{ClusterKey, SharedWorkloadAccess};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// Whether the control plane is initialised: status says so, or the workload API answers and has
/// `kube-system/kubeadm-config` (what `kubeadm init` writes). Not knowing counts as not yet.
pub(super) async fn initialized(
    pass: &Pass<'_>,
    key: &ClusterKey,
    workloads: Option<&SharedWorkloadAccess>,
) -> bool {
    if pass.remembered_initialized {
        return true;
    }
    let Some(workloads) = workloads else {
        return false;
    };
    let Ok(client) = workloads.client(key).await else {
        return false;
    };
    let maps: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    matches!(maps.get_opt("kubeadm-config").await, Ok(Some(_)))
}

async fn patch_status(pass: &Pass<'_>, status: &Value) -> Result<(), ControlPlaneError> {
    let kcps: Api<KubeadmControlPlane> = Api::namespaced(pass.client().clone(), &pass.namespace);
    kcps.patch_status(&pass.name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .map_err(api_error(
            "updating status of",
            "KubeadmControlPlane",
            &pass.namespace,
            &pass.name,
        ))?;
    Ok(())
}

/// The status of a control plane no Cluster names: `Available` False `WaitingForCluster`.
pub(super) async fn write_waiting_for_cluster(pass: &Pass<'_>) -> Result<(), ControlPlaneError> {
    let mut conds = pass.previous.clone();
    conditions::set_condition(
        &mut conds,
        conditions::condition(
            "Available",
            FALSE,
            "WaitingForCluster",
            format!(
                "no Cluster in {} names KubeadmControlPlane {} in spec.controlPlaneRef",
                pass.namespace, pass.name
            ),
            pass.generation,
        ),
        &pass.now,
    );
    patch_status(
        pass,
        &json!({"status": {"conditions": conds, "observedGeneration": pass.generation}}),
    )
    .await
}

/// What the pass found and did, as status reports it.
pub(super) struct Report<'a> {
    pub(super) members: &'a [Member],
    pub(super) step: &'a Step,
    pub(super) initialized: bool,
    /// `SpecAccepted`, as validation and taking the step left it.
    pub(super) accepted: Condition,
    /// `Scaling`, as taking the step left it.
    pub(super) scaling: Condition,
    /// `EtcdClusterHealthy` when etcd refused a removal.
    pub(super) etcd_healthy: Option<Condition>,
    pub(super) cluster_name: &'a str,
}

/// The replica counts: every Machine, and of those not being deleted the ready and up-to-date ones.
#[derive(Debug, PartialEq, Eq)]
struct Replicas {
    count: i32,
    ready: i32,
    up_to_date: i32,
}

fn replicas(members: &[Member]) -> Replicas {
    let count_of = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let live = || members.iter().filter(|m| !m.deleting);
    Replicas {
        count: count_of(members.len()),
        ready: count_of(live().filter(|m| m.ready).count()),
        up_to_date: count_of(live().filter(|m| m.up_to_date).count()),
    }
}

/// The oldest Kubernetes version of the Machines, as one of them spells it.
fn oldest_version(members: &[Member]) -> Option<String> {
    members
        .iter()
        .filter_map(|m| m.machine.spec.version.as_deref())
        .filter_map(|v| KubeVersion::parse(v).ok().map(|p| (p, v.to_owned())))
        .min_by_key(|(p, _)| *p)
        .map(|(_, v)| v)
}

/// `RollingOut`: True while a Machine not being deleted is outdated, saying how many, how many for
/// their certificates, and which Machine without a Node holds it up (a wait that needs a person
/// says so here).
fn rolling_out(
    members: &[Member],
    step: &Step,
    expiry_days: Option<i64>,
    generation: Option<i64>,
) -> Condition {
    let live: Vec<&Member> = members.iter().filter(|m| !m.deleting).collect();
    let outdated = live.iter().filter(|m| !m.up_to_date).count();
    if outdated == 0 {
        return conditions::condition("RollingOut", FALSE, "NotRollingOut", "", generation);
    }
    let mut message = format!("{outdated} of {} Machines are not up to date", live.len());
    let expiring = live.iter().filter(|m| m.certificates_expiring).count();
    if expiring > 0 {
        message.push_str(&format!(
            " ({expiring} with certificates expiring within {} days)",
            expiry_days.unwrap_or_default()
        ));
    }
    if let Step::WaitForMachine { machine, .. } = step
        && let Some(waited) = members.iter().find(|m| &m.name() == machine)
    {
        message.push_str(&format!(
            "; the rollout waits for Machine {machine} to get a Node"
        ));
        if let Some(why) = not_ready_because(&waited.machine) {
            message.push_str(": ");
            message.push_str(&why);
        }
    }
    conditions::condition("RollingOut", TRUE, "RollingOut", message, generation)
}

/// `Available`: True once initialised with a Machine that has a Node.
fn available(initialized: bool, ready: i32, generation: Option<i64>) -> Condition {
    if initialized && ready > 0 {
        conditions::condition("Available", TRUE, "Available", "", generation)
    } else if initialized {
        conditions::condition(
            "Available",
            FALSE,
            "NoReadyMachines",
            "no control-plane Machine has a Node",
            generation,
        )
    } else {
        conditions::condition(
            "Available",
            FALSE,
            "NotInitialized",
            "the workload API has no kube-system/kubeadm-config yet",
            generation,
        )
    }
}

/// `MachinesReady`, as upstream aggregates its Machines' `Ready`: True `Ready` when every one is,
/// True `NoReplicas` without Machines, else False `NotReady` (Unknown `ReadyUnknown` when none is
/// False) naming each Machine that is not, and why.
fn machines_ready(members: &[Member], generation: Option<i64>) -> Condition {
    if members.is_empty() {
        return conditions::condition("MachinesReady", TRUE, "NoReplicas", "", generation);
    }
    let mut lines = Vec::new();
    let mut any_false = false;
    for member in members {
        let ready = member
            .machine
            .status
            .as_ref()
            .and_then(|s| conditions::get(&s.conditions, "Ready"));
        match ready.map(|c| c.status.as_str()) {
            Some(TRUE) => continue,
            Some(FALSE) => any_false = true,
            _ => {}
        }
        let why =
            not_ready_because(&member.machine).unwrap_or_else(|| "no Ready condition yet".into());
        lines.push(format!("* Machine {}: {why}", member.name()));
    }
    if lines.is_empty() {
        return conditions::condition("MachinesReady", TRUE, "Ready", "", generation);
    }
    let (status, reason) = if any_false {
        (FALSE, "NotReady")
    } else {
        (UNKNOWN, "ReadyUnknown")
    };
    conditions::condition(
        "MachinesReady",
        status,
        reason,
        lines.join("\n"),
        generation,
    )
}

/// The pass's conditions on top of the ones it found, in the order they were always set.
fn conditions_of(pass: &Pass<'_>, report: Report<'_>, ready: i32) -> Vec<Condition> {
    let generation = pass.generation;
    let mut conds = pass.previous.clone();
    let rolling = rolling_out(
        report.members,
        report.step,
        certificates_expiry_days(&pass.spec),
        generation,
    );
    let etcd_healthy = report.etcd_healthy.unwrap_or_else(|| {
        conditions::condition("EtcdClusterHealthy", TRUE, "Healthy", "", generation)
    });
    for condition in [
        report.accepted,
        report.scaling,
        rolling,
        available(report.initialized, ready, generation),
        machines_ready(report.members, generation),
        etcd_healthy,
    ] {
        conditions::set_condition(&mut conds, condition, &pass.now);
    }
    conds
}

/// Writes the pass's status.
pub(super) async fn write(pass: &Pass<'_>, report: Report<'_>) -> Result<(), ControlPlaneError> {
    let Replicas {
        count,
        ready,
        up_to_date,
    } = replicas(report.members);
    let version = oldest_version(report.members);
    let initialized = report.initialized;
    let selector = format!(
        "{LABEL_CLUSTER_NAME}={},{LABEL_CONTROL_PLANE}",
        report.cluster_name
    );
    let conds = conditions_of(pass, report, ready);
    let status = json!({"status": {
        "replicas": count,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "upToDateReplicas": up_to_date,
        "updatedReplicas": up_to_date,
        "version": version,
        "initialized": initialized,
        "ready": initialized && ready > 0,
        "initialization": {"controlPlaneInitialized": initialized},
        // What v1beta1 readers see as readyReplicas, updatedReplicas, unavailableReplicas.
        "deprecated": {"v1beta1": {
            "readyReplicas": ready,
            "updatedReplicas": up_to_date,
            "unavailableReplicas": (count - ready).max(0),
        }},
        "selector": selector,
        "observedGeneration": pass.generation,
        "conditions": conds,
    }});
    patch_status(pass, &status).await
}

/// When to look again after a pass that took `step`: Machines are watched, so an initialised
/// control plane waiting on them needs polling only rarely; a settled one more rarely still;
/// anything else (a change, a refusal, waiting for initialisation) soon.
pub(super) fn requeue(step: &Step, initialized: bool) -> Requeue {
    match step {
        Step::Settled => Requeue::Settled,
        Step::Wait(_) | Step::WaitForMachine { .. } if initialized => Requeue::WaitingOnMachines,
        _ => Requeue::Progress,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::Refusal;
    use crate::controlplane::machines::tests::{cond, member, with_conditions};

    #[test]
    fn a_rollout_waiting_for_a_machine_says_why_the_machine_waits() {
        let no_host = "Metal3Machine b is not provisioned yet: NoAvailableHost: no available BareMetalHost matches matchLabels {role=cp} (1 BareMetalHost in namespace ns, 1 matching: 0 available, 1 claimed): …";
        let surge = with_conditions(
            member("b", false, true, "2026-01-01T00:01:00Z"),
            json!([
                cond("BootstrapConfigReady", "True", "DataSecretAvailable", ""),
                cond(
                    "InfrastructureReady",
                    "False",
                    "WaitingForInfrastructure",
                    no_host
                ),
                cond(
                    "NodeReady",
                    "Unknown",
                    "WaitingForProviderID",
                    "waiting for the providerID"
                ),
                cond("Ready", "False", "NotReady", ""),
            ]),
        );
        let old = with_conditions(
            member("a", true, false, "2026-01-01T00:00:00Z"),
            json!([cond("Ready", "True", "Ready", "")]),
        );
        let members = [old, surge];
        let step = crate::controlplane::decide(&members, 1, 1, true);
        let Step::WaitForMachine { machine, message } = &step else {
            panic!("not waiting for the Machine: {step:?}")
        };
        assert_eq!(machine, "b");
        assert_eq!(
            message,
            &format!(
                "waiting for Machine b to get a Node before the next change: InfrastructureReady WaitingForInfrastructure: {no_host}"
            )
        );
        let rolling = rolling_out(&members, &step, None, Some(2));
        assert_eq!(
            rolling.message.as_deref(),
            Some(
                format!(
                    "1 of 2 Machines are not up to date; the rollout waits for Machine b to get a Node: InfrastructureReady WaitingForInfrastructure: {no_host}"
                )
                .as_str()
            )
        );
        let ready = machines_ready(&members, Some(2));
        assert_eq!(ready.status, FALSE);
        assert_eq!(ready.reason.as_deref(), Some("NotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some(
                format!("* Machine b: InfrastructureReady WaitingForInfrastructure: {no_host}")
                    .as_str()
            )
        );
        assert_eq!(
            machines_ready(&members[..1], None).reason.as_deref(),
            Some("Ready")
        );
        assert_eq!(
            machines_ready(&[], None).reason.as_deref(),
            Some("NoReplicas")
        );
    }

    #[test]
    fn machines_ready_is_unknown_when_none_is_false() {
        let cases = [
            (
                json!([]),
                UNKNOWN,
                "ReadyUnknown",
                "* Machine a: no Ready condition yet",
            ),
            (
                json!([cond("Ready", "Unknown", "Pending", "")]),
                UNKNOWN,
                "ReadyUnknown",
                "* Machine a: Ready Pending",
            ),
            (
                json!([cond("Ready", "False", "NotReady", "drained")]),
                FALSE,
                "NotReady",
                "* Machine a: Ready NotReady: drained",
            ),
        ];
        for (conditions, status, reason, message) in cases {
            let members = [with_conditions(
                member("a", false, true, "2026-01-01T00:00:00Z"),
                conditions.clone(),
            )];
            let ready = machines_ready(&members, None);
            assert_eq!(
                (
                    ready.status.as_str(),
                    ready.reason.as_deref(),
                    ready.message.as_deref()
                ),
                (status, Some(reason), Some(message)),
                "{conditions}"
            );
        }
    }

    #[test]
    fn rolling_out_counts_live_outdated_machines_and_expiring_certificates() {
        let mut expiring = member("a", true, false, "2026-01-01T00:00:00Z");
        expiring.certificates_expiring = true;
        let mut deleting = member("d", true, false, "2026-01-01T00:00:00Z");
        deleting.deleting = true;
        let fresh = member("b", true, true, "2026-01-01T00:01:00Z");
        let cases = [
            (vec![fresh.clone()], None, "NotRollingOut", ""),
            (
                vec![fresh.clone(), deleting.clone()],
                None,
                "NotRollingOut",
                "",
            ),
            (
                vec![expiring.clone(), fresh.clone(), deleting],
                Some(21),
                "RollingOut",
                "1 of 2 Machines are not up to date (1 with certificates expiring within 21 days)",
            ),
            (
                vec![member("c", true, false, "2026-01-01T00:00:00Z"), fresh],
                None,
                "RollingOut",
                "1 of 2 Machines are not up to date",
            ),
        ];
        for (members, days, reason, message) in cases {
            let rolling = rolling_out(&members, &Step::Settled, days, None);
            assert_eq!(
                (rolling.reason.as_deref(), rolling.message.as_deref()),
                (Some(reason), Some(message)),
                "{message}"
            );
        }
    }

    #[test]
    fn counts_leave_out_machines_being_deleted_but_replicas_does_not() {
        let mut deleting = member("d", true, true, "2026-01-01T00:00:00Z");
        deleting.deleting = true;
        let mut members = vec![
            member("a", true, true, "2026-01-01T00:00:00Z"),
            member("b", false, false, "2026-01-01T00:01:00Z"),
            deleting,
        ];
        members[0].machine.spec.version = Some("v1.31.2".into());
        members[1].machine.spec.version = Some("v1.30.9".into());
        members[2].machine.spec.version = Some("v1.30.10".into());
        assert_eq!(
            replicas(&members),
            Replicas {
                count: 3,
                ready: 1,
                up_to_date: 1
            }
        );
        assert_eq!(oldest_version(&members).as_deref(), Some("v1.30.9"));
        assert_eq!(oldest_version(&[]), None);
    }

    #[test]
    fn available_needs_initialisation_and_a_node() {
        let cases = [
            (true, 1, TRUE, "Available"),
            (true, 0, FALSE, "NoReadyMachines"),
            (false, 1, FALSE, "NotInitialized"),
            (false, 0, FALSE, "NotInitialized"),
        ];
        for (initialized, ready, status, reason) in cases {
            let condition = available(initialized, ready, None);
            assert_eq!(
                (condition.status.as_str(), condition.reason.as_deref()),
                (status, Some(reason)),
                "initialised {initialized}, {ready} ready"
            );
        }
    }

    #[test]
    fn waits_on_watched_machines_are_polled_rarely() {
        let wait = Step::Wait("w".into());
        let wait_for_machine = Step::WaitForMachine {
            machine: "m".into(),
            message: "w".into(),
        };
        let refuse = Step::Refuse(Refusal {
            reason: "InvalidReplicas",
            message: "m".into(),
        });
        let cases = [
            (&Step::Settled, true, Requeue::Settled),
            (&Step::Settled, false, Requeue::Settled),
            (&wait, true, Requeue::WaitingOnMachines),
            (&wait, false, Requeue::Progress),
            (&wait_for_machine, true, Requeue::WaitingOnMachines),
            (&Step::Create { init: true }, false, Requeue::Progress),
            (&Step::Remove("m".into()), true, Requeue::Progress),
            (&refuse, true, Requeue::Progress),
        ];
        for (step, initialized, want) in cases {
            assert_eq!(
                requeue(step, initialized),
                want,
                "{step:?} initialised {initialized}"
            );
        }
    }
}
