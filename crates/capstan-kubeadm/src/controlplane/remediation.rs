//! Remediation: replacing a Machine a MachineHealthCheck handed over.
//!
//! A MachineHealthCheck hands a control-plane Machine to its owner by setting `OwnerRemediated`
//! False on it; the control plane removes it (through the same etcd quorum check as any removal)
//! and the scale-up that follows replaces it. Never the only Machine (replacing it would lose etcd
//! and the cluster), and only while every other Machine has a Node (one change at a time). It
//! decides right after a deletion in progress and the first Machine, before the wait for
//! initialisation (the Machine that never initialised may be the broken one) and before rollouts
//! (a broken Machine goes before healthy outdated ones).

use super::machines::Member;
use super::{Decision, Refusal, Step};
use capstan_model::capi::v1beta2::Machine;
use capstan_runtime::conditions::{self, FALSE};

/// Whether a MachineHealthCheck asked the owner to remediate `machine` (`OwnerRemediated` False).
pub(super) fn owner_remediates(machine: &Machine) -> bool {
    machine
        .status
        .as_ref()
        .and_then(|s| conditions::get(&s.conditions, "OwnerRemediated"))
        .is_some_and(|c| c.status == FALSE)
}

/// Remediation's decision phase: remove the first Machine handed over, refuse or wait when that is
/// not safe; continue when none is.
pub(super) fn decide(members: &[Member]) -> Decision {
    let Some(sick) = members.iter().find(|m| m.unhealthy) else {
        return Decision::Continue;
    };
    let name = sick.name();
    if members.len() < 2 {
        return Decision::Decided(Step::Refuse(Refusal {
            reason: "RemediationNotPossible",
            message: format!(
                "Machine {name} needs remediation, but it is the only control-plane Machine: replacing it would lose etcd and the cluster; repair the node, or scale to 3 replicas first"
            ),
        }));
    }
    if let Some(other) = members.iter().find(|m| !m.ready && !m.unhealthy) {
        return Decision::Decided(Step::Wait(format!(
            "Machine {name} needs remediation; waiting for Machine {} to get a Node first",
            other.name()
        )));
    }
    // The etcd quorum check of the removal still applies.
    Decision::Decided(Step::Remove(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::machines::tests::{cond, member, with_conditions};
    use serde_json::json;

    fn sick(name: &str, created: &str) -> Member {
        let mut member = member(name, false, true, created);
        member.unhealthy = true;
        member
    }

    #[test]
    fn remediation_replaces_one_machine_and_never_the_last() {
        let healthy = |name: &str, created: &str| member(name, true, true, created);
        let joining = member("c", false, true, "2026-01-01T00:02:00Z");
        let cases = [
            (
                "nothing handed over",
                vec![healthy("a", "2026-01-01T00:00:00Z")],
                None,
            ),
            (
                "the only Machine",
                vec![sick("a", "2026-01-01T00:00:00Z")],
                Some("refuse RemediationNotPossible"),
            ),
            (
                "the others have Nodes",
                vec![
                    sick("a", "2026-01-01T00:00:00Z"),
                    healthy("b", "2026-01-01T00:01:00Z"),
                    healthy("c", "2026-01-01T00:02:00Z"),
                ],
                Some("remove a"),
            ),
            (
                "another Machine is joining",
                vec![
                    sick("a", "2026-01-01T00:00:00Z"),
                    healthy("b", "2026-01-01T00:01:00Z"),
                    joining.clone(),
                ],
                Some("wait for c"),
            ),
            (
                "two handed over: the first listed, the other is not waited for",
                vec![
                    sick("b", "2026-01-01T00:01:00Z"),
                    sick("a", "2026-01-01T00:00:00Z"),
                    healthy("c", "2026-01-01T00:02:00Z"),
                ],
                Some("remove b"),
            ),
        ];
        for (case, members, want) in cases {
            let got = match decide(&members) {
                Decision::Continue => None,
                Decision::Decided(Step::Refuse(refusal)) => {
                    Some(format!("refuse {}", refusal.reason))
                }
                Decision::Decided(Step::Remove(name)) => Some(format!("remove {name}")),
                Decision::Decided(Step::Wait(message)) => {
                    assert_eq!(
                        message,
                        "Machine a needs remediation; waiting for Machine c to get a Node first"
                    );
                    Some("wait for c".into())
                }
                Decision::Decided(other) => panic!("{case}: {other:?}"),
            };
            assert_eq!(got.as_deref(), want, "{case}");
        }
    }

    #[test]
    fn owner_remediated_false_hands_the_machine_over() {
        let cases = [
            (json!([]), false),
            (
                json!([cond(
                    "OwnerRemediated",
                    "False",
                    "WaitingForRemediation",
                    ""
                )]),
                true,
            ),
            (json!([cond("OwnerRemediated", "True", "", "")]), false),
            (
                json!([cond("HealthCheckSucceeded", "False", "NodeNotReady", "")]),
                false,
            ),
        ];
        for (conditions, want) in cases {
            let member = with_conditions(
                member("a", true, true, "2026-01-01T00:00:00Z"),
                conditions.clone(),
            );
            assert_eq!(owner_remediates(&member.machine), want, "{conditions}");
        }
    }
}
