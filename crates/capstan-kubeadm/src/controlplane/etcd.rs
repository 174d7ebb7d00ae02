//! etcd before a control-plane Machine goes: the quorum check, the leader move, the member removal.
//!
//! Stacked etcd runs one member per control-plane Node, so deleting a Machine takes a member away.
//! Before any removal (a scale-down, a rollout or a remediation) the members left must still make a
//! quorum of the smaller cluster: a majority of them healthy. When they do, raft leadership is moved
//! off the member first (a leader that disappears costs an election), then the member is removed,
//! and only then is the Machine deleted: a member whose Machine is gone would count against the
//! quorum forever. Each refusal is a [`Refusal`] that [`super::scale`] reports in
//! `EtcdClusterHealthy`; the next pass tries again. etcd is reached only through
//! [`EtcdMembership`].

use super::Refusal;
use capstan_model::meta::Condition;
use capstan_runtime::conditions::{self, FALSE, TRUE, UNKNOWN};
use capstan_workload::{ClusterKey, EtcdMember, EtcdMembership};

/// What removing a Node's etcd member takes, from the members.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum MemberRemoval {
    /// The Node runs no member (it never joined etcd, or its member is gone): nothing to remove.
    NotAMember,
    /// Remove the member, first moving raft leadership to `move_leader_to` when it leads.
    Remove { move_leader_to: Option<String> },
}

/// What would be left of etcd without a member, when that is no quorum.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct QuorumAtRisk {
    /// Healthy members left.
    pub(super) healthy: usize,
    /// Members left.
    pub(super) remaining: usize,
    /// How many healthy members `remaining` members need.
    pub(super) quorum: usize,
}

/// The quorum of `members` members: a majority.
pub(super) fn quorum(members: usize) -> usize {
    members / 2 + 1
}

/// How to remove the member of `node` from `members`, or why that would lose quorum: the members
/// left must be some, and a quorum of them healthy. Leadership moves to the first healthy member
/// left.
pub(super) fn plan_removal(
    members: &[EtcdMember],
    node: &str,
) -> Result<MemberRemoval, QuorumAtRisk> {
    let Some(target) = members.iter().find(|m| m.name == node) else {
        return Ok(MemberRemoval::NotAMember);
    };
    let remaining: Vec<&EtcdMember> = members.iter().filter(|m| m.name != node).collect();
    let healthy = remaining.iter().filter(|m| m.healthy).count();
    let quorum = quorum(remaining.len());
    if remaining.is_empty() || healthy < quorum {
        return Err(QuorumAtRisk {
            healthy,
            remaining: remaining.len(),
            quorum,
        });
    }
    let move_leader_to = if target.leader {
        remaining.iter().find(|m| m.healthy).map(|m| m.name.clone())
    } else {
        None
    };
    Ok(MemberRemoval::Remove { move_leader_to })
}

/// Takes the etcd member of Machine `machine`'s Node `node` out of `key`'s etcd, as
/// [`plan_removal`] says. `Err` says why the Machine must stay. Public so that the real etcd
/// membership's tests run this very sequence against real etcd.
pub async fn release(
    etcd: &dyn EtcdMembership,
    key: &ClusterKey,
    machine: &str,
    node: &str,
) -> Result<(), Refusal> {
    let members = etcd.members(key).await.map_err(|err| Refusal {
        reason: "EtcdUnreachable",
        message: format!("cannot read etcd members before removing Machine {machine}: {err}"),
    })?;
    let move_leader_to = match plan_removal(&members, node) {
        Ok(MemberRemoval::NotAMember) => return Ok(()),
        Ok(MemberRemoval::Remove { move_leader_to }) => move_leader_to,
        Err(QuorumAtRisk {
            healthy,
            remaining,
            quorum,
        }) => {
            return Err(Refusal {
                reason: "EtcdQuorumAtRisk",
                message: format!(
                    "removing Machine {machine} (etcd member {node}) would leave {healthy} healthy of {remaining} etcd members, fewer than the quorum of {quorum}; repair the unhealthy members first"
                ),
            });
        }
    };
    if let Some(next) = move_leader_to {
        etcd.move_leader(key, &next).await.map_err(|err| Refusal {
            reason: "EtcdLeaderMoveFailed",
            message: format!("moving etcd leadership from {node} to {next}: {err}"),
        })?;
        tracing::info!(cluster = %key, from = %node, to = %next, "moved etcd leadership");
    }
    etcd.remove_member(key, node).await.map_err(|err| Refusal {
        reason: "EtcdMemberRemovalFailed",
        message: format!("removing etcd member {node}: {err}"),
    })?;
    tracing::info!(cluster = %key, member = %node, "removed etcd member");
    Ok(())
}

/// `EtcdClusterHealthy` from what etcd says of its members, read on every pass of an initialised
/// control plane (as upstream's reconcileEtcdMembers does): True when every member is healthy and
/// members and control-plane Nodes match one to one; False naming each unhealthy member, each member
/// no Machine runs and each Node without a member; Unknown when etcd cannot be read.
pub(super) async fn health(
    etcd: &dyn EtcdMembership,
    key: &ClusterKey,
    nodes: &[String],
    generation: Option<i64>,
) -> Condition {
    let members = etcd.members(key).await.map_err(|err| err.to_string());
    health_condition(
        members.as_deref().map_err(String::as_str),
        nodes,
        generation,
    )
}

/// The condition [`health`] writes, from the members (or why they could not be read) and the
/// Nodes of the control plane's Machines.
fn health_condition(
    members: Result<&[EtcdMember], &str>,
    nodes: &[String],
    generation: Option<i64>,
) -> Condition {
    const TYPE: &str = "EtcdClusterHealthy";
    let members = match members {
        Ok(members) => members,
        Err(err) => {
            return conditions::condition(
                TYPE,
                UNKNOWN,
                "InspectionFailed",
                format!("cannot read the etcd members: {err}"),
                generation,
            );
        }
    };
    let mut problems = Vec::new();
    for member in members {
        if member.name.is_empty() {
            problems.push(format!("etcd member {:x} has not started", member.id));
        } else if !member.healthy {
            problems.push(format!(
                "etcd member {} is unhealthy (it does not answer, reports errors or raised an alarm)",
                member.name
            ));
        }
        if !member.name.is_empty() && !nodes.contains(&member.name) {
            problems.push(format!(
                "etcd member {} has no control-plane Machine",
                member.name
            ));
        }
    }
    for node in nodes {
        if !members.iter().any(|m| m.name == *node) {
            problems.push(format!("Node {node} runs no etcd member"));
        }
    }
    if problems.is_empty() {
        conditions::condition(TYPE, TRUE, "Healthy", "", generation)
    } else {
        conditions::condition(TYPE, FALSE, "NotHealthy", problems.join("; "), generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_workload::WorkloadError;
    use futures::future::BoxFuture;
    use std::sync::Mutex;

    /// `spec` as members: one letter a member (`h` healthy, `u` unhealthy, upper case the
    /// leader), named `n0`, `n1`, … in order.
    fn members(spec: &str) -> Vec<EtcdMember> {
        spec.chars()
            .enumerate()
            .map(|(i, c)| EtcdMember {
                name: format!("n{i}"),
                id: u64::try_from(i).unwrap(),
                healthy: c.eq_ignore_ascii_case(&'h'),
                leader: c.is_ascii_uppercase(),
            })
            .collect()
    }

    #[test]
    fn quorum_is_a_majority() {
        for (members, want) in [
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 3),
            (5, 3),
            (6, 4),
            (7, 4),
        ] {
            assert_eq!(quorum(members), want, "{members} members");
        }
    }

    #[test]
    fn a_member_goes_only_while_a_quorum_of_the_rest_is_healthy() {
        let at_risk = |healthy, remaining, quorum| {
            Err(QuorumAtRisk {
                healthy,
                remaining,
                quorum,
            })
        };
        let remove = |to: Option<&str>| {
            Ok(MemberRemoval::Remove {
                move_leader_to: to.map(str::to_owned),
            })
        };
        // (members, the node removed, the plan)
        let cases = [
            ("Hhh", "n1", remove(None)),
            ("Hhh", "n0", remove(Some("n1"))),
            ("Huh", "n0", at_risk(1, 2, 2)),
            ("Huhhh", "n0", remove(Some("n2"))),
            ("Hhu", "n1", at_risk(1, 2, 2)),
            ("Hhu", "n2", remove(None)),
            ("H", "n0", at_risk(0, 0, 1)),
            ("Hh", "n1", remove(None)),
            ("Hu", "n0", at_risk(0, 1, 1)),
            ("Hhhhh", "n4", remove(None)),
            ("Hhhuu", "n1", at_risk(2, 4, 3)),
            ("Hhhhu", "n1", remove(None)),
            ("hhh", "node-x", Ok(MemberRemoval::NotAMember)),
            ("", "n0", Ok(MemberRemoval::NotAMember)),
        ];
        for (spec, node, want) in cases {
            assert_eq!(
                plan_removal(&members(spec), node),
                want,
                "{spec} without {node}"
            );
        }
    }

    /// An etcd that records what it is asked, and fails what it is told to.
    #[derive(Default)]
    struct Recorded {
        members: Vec<EtcdMember>,
        unreachable: bool,
        calls: Mutex<Vec<String>>,
    }

    impl EtcdMembership for Recorded {
        fn members<'a>(
            &'a self,
            _cluster: &'a ClusterKey,
        ) -> BoxFuture<'a, Result<Vec<EtcdMember>, WorkloadError>> {
            Box::pin(async move {
                if self.unreachable {
                    Err(WorkloadError::Other {
                        cluster: ClusterKey::new("ns", "c"),
                        reason: "down".into(),
                    })
                } else {
                    Ok(self.members.clone())
                }
            })
        }

        fn remove_member<'a>(
            &'a self,
            _cluster: &'a ClusterKey,
            name: &'a str,
        ) -> BoxFuture<'a, Result<(), WorkloadError>> {
            self.calls.lock().unwrap().push(format!("remove {name}"));
            Box::pin(async { Ok(()) })
        }

        fn move_leader<'a>(
            &'a self,
            _cluster: &'a ClusterKey,
            to: &'a str,
        ) -> BoxFuture<'a, Result<(), WorkloadError>> {
            self.calls.lock().unwrap().push(format!("lead {to}"));
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn release_moves_leadership_first_and_refuses_without_quorum() {
        let key = ClusterKey::new("ns", "c");
        // (members, node, etcd unreachable, the calls made, the refusal's reason)
        let cases = [
            ("Hhh", "n0", false, vec!["lead n1", "remove n0"], None),
            ("Hhh", "n2", false, vec!["remove n2"], None),
            ("hhh", "other", false, vec![], None),
            ("Hhu", "n1", false, vec![], Some("EtcdQuorumAtRisk")),
            ("Hhh", "n1", true, vec![], Some("EtcdUnreachable")),
        ];
        for (spec, node, unreachable, calls, refused) in cases {
            let etcd = Recorded {
                members: members(spec),
                unreachable,
                ..Recorded::default()
            };
            let released = release(&etcd, &key, "m", node).await;
            assert_eq!(
                released.err().map(|r| r.reason),
                refused,
                "{spec} without {node}"
            );
            assert_eq!(*etcd.calls.lock().unwrap(), calls, "{spec} without {node}");
        }
        let etcd = Recorded {
            members: members("Hhu"),
            ..Recorded::default()
        };
        let refusal = release(&etcd, &key, "cp-a", "n1").await.unwrap_err();
        assert_eq!(
            refusal.message,
            "removing Machine cp-a (etcd member n1) would leave 1 healthy of 2 etcd members, fewer than the quorum of 2; repair the unhealthy members first"
        );
    }

    #[test]
    fn etcd_health_names_every_mismatch() {
        let nodes = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        /// What, the members (or why they could not be read), the Nodes, status, message.
        type Case = (
            &'static str,
            Result<Vec<EtcdMember>, &'static str>,
            Vec<String>,
            &'static str,
            &'static str,
        );
        let cases: [Case; 5] = [
            (
                "all healthy",
                Ok(members("Hhh")),
                nodes(&["n0", "n1", "n2"]),
                TRUE,
                "",
            ),
            (
                "one unhealthy",
                Ok(members("Hhu")),
                nodes(&["n0", "n1", "n2"]),
                FALSE,
                "etcd member n2 is unhealthy (it does not answer, reports errors or raised an alarm)",
            ),
            (
                "a member without a Machine, a Node without a member",
                Ok(members("Hh")),
                nodes(&["n0", "x"]),
                FALSE,
                "etcd member n1 has no control-plane Machine; Node x runs no etcd member",
            ),
            (
                "no Nodes yet",
                Ok(members("H")),
                nodes(&[]),
                FALSE,
                "etcd member n0 has no control-plane Machine",
            ),
            (
                "unreachable",
                Err("no answer"),
                nodes(&["n0"]),
                UNKNOWN,
                "cannot read the etcd members: no answer",
            ),
        ];
        for (what, found, nodes, status, message) in cases {
            let condition = health_condition(found.as_deref().map_err(|e| *e), &nodes, Some(1));
            assert_eq!(condition.status, status, "{what}");
            assert_eq!(
                condition.message.as_deref().unwrap_or_default(),
                message,
                "{what}"
            );
        }
    }
}
