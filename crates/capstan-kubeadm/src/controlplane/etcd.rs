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
/// [`plan_removal`] says. `Err` says why the Machine must stay.
pub(super) async fn release(
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
}
