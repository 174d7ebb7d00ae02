//! [`KubeadmEtcd`] against a real three-member etcd cluster: etcd v3.6 processes (built by
//! `scripts/peers.sh` from the Go modules pinned in tools/peers/) on loopback, with mutual TLS from
//! an etcd CA exactly as kubeadm runs it. The management cluster (the `<cluster>-etcd` Secret) and
//! the workload API (kubeadm's annotated etcd static Pods) are capstan API servers in process; etcd
//! itself is real.
//!
//! The last two tests run the control plane's own removal sequence (quorum check, leader move,
//! member removal) against it.
//!
//! The binary comes from `capstan_testkit::peers` (`CAPSTAN_PEERS_BIN`, or the directory
//! `scripts/peers.sh --dir` names); without it the test fails and says to run `scripts/peers.sh`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use capstan_kubeadm::controlplane::etcd::release;
use capstan_workload::{EtcdMember, EtcdMembership};
use std::time::Duration;
use support::EtcdCluster;

fn names(members: &[EtcdMember]) -> Vec<&str> {
    let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    names
}

fn leader(members: &[EtcdMember]) -> Option<&str> {
    let leaders: Vec<&str> = members
        .iter()
        .filter(|m| m.leader)
        .map(|m| m.name.as_str())
        .collect();
    assert!(leaders.len() <= 1, "more than one leader: {members:?}");
    leaders.first().copied()
}

/// The members once they have elected a leader (a fresh cluster takes a moment).
async fn with_leader(cluster: &EtcdCluster, etcd: &capstan_etcd::KubeadmEtcd) -> Vec<EtcdMember> {
    cluster
        .until(Duration::from_secs(30), "a leader", || async {
            let members = etcd.members(&cluster.key).await.ok()?;
            leader(&members)?;
            Some(members)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_cluster_lists_its_members_healthy_with_one_leader() {
    let mut cluster = EtcdCluster::start(3).await;
    let etcd = cluster.membership().await;
    let members = with_leader(&cluster, &etcd).await;
    assert_eq!(names(&members), ["m0", "m1", "m2"]);
    assert!(members.iter().all(|m| m.healthy), "{members:?}");
    // The ids are etcd's own (random 64-bit), not positions.
    let ids: std::collections::BTreeSet<u64> = members.iter().map(|m| m.id).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|&id| id != 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_to_the_member_named() {
    let mut cluster = EtcdCluster::start(3).await;
    let etcd = cluster.membership().await;
    let members = with_leader(&cluster, &etcd).await;
    let current = leader(&members).unwrap().to_owned();
    let target = members
        .iter()
        .find(|m| m.name != current)
        .unwrap()
        .name
        .clone();
    etcd.move_leader(&cluster.key, &target).await.unwrap();
    // etcd answers the move once the transfer is done; every member agrees at once.
    let after = etcd.members(&cluster.key).await.unwrap();
    assert_eq!(leader(&after), Some(target.as_str()), "{after:?}");
    // Moving to the leader itself is a no-op, not an error.
    etcd.move_leader(&cluster.key, &target).await.unwrap();
    let err = etcd.move_leader(&cluster.key, "m9").await.unwrap_err();
    assert!(
        err.to_string().contains("no etcd member is called m9"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_member_shows_unhealthy_and_is_removed_once() {
    let mut cluster = EtcdCluster::start(3).await;
    let etcd = cluster.membership().await;
    with_leader(&cluster, &etcd).await;
    cluster.stop("m2");
    let members = cluster
        .until(Duration::from_secs(30), "m2 unhealthy", || async {
            let members = etcd.members(&cluster.key).await.ok()?;
            members
                .iter()
                .any(|m| m.name == "m2" && !m.healthy)
                .then_some(members)
        })
        .await;
    assert_eq!(
        names(&members),
        ["m0", "m1", "m2"],
        "a stopped member stays a member"
    );
    assert!(
        members.iter().filter(|m| m.name != "m2").all(|m| m.healthy),
        "{members:?}"
    );

    etcd.remove_member(&cluster.key, "m2").await.unwrap();
    assert_eq!(
        names(&etcd.members(&cluster.key).await.unwrap()),
        ["m0", "m1"]
    );
    // Idempotent: the member is gone, so removing it again succeeds.
    etcd.remove_member(&cluster.key, "m2").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_ca_is_refused_by_etcd() {
    let mut cluster = EtcdCluster::start(1).await;
    // A CA that did not sign etcd's certificates: capstan refuses the server, and etcd would refuse
    // capstan's client certificate.
    let etcd = cluster.membership_with_foreign_ca().await;
    let err = etcd.members(&cluster.key).await.unwrap_err().to_string();
    assert!(err.contains("TLS with etcd at https://127.0.0.1:"), "{err}");
    assert!(err.contains("etcd CA"), "{err}");
}

/// The control plane's own sequence before a Machine goes (`capstan_kubeadm::controlplane::etcd::
/// release`), against real etcd: leadership moved off the leaving member, then its member removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_moves_leadership_off_then_removes_the_member() {
    let mut cluster = EtcdCluster::start(3).await;
    let etcd = cluster.membership().await;
    let members = with_leader(&cluster, &etcd).await;
    let leaving = leader(&members).unwrap().to_owned();
    // Real etcd refuses a membership change until the member asked has been connected to every
    // other member for 5 s (its strict reconfiguration check) — right after a start or a leader
    // move. The control plane's next pass tries again, as this loop does; any other refusal fails.
    cluster
        .until(Duration::from_secs(30), "the member released", || async {
            match release(&etcd, &cluster.key, "machine-of-leader", &leaving).await {
                Ok(()) => Some(()),
                Err(refusal) => {
                    assert_eq!(refusal.reason, "EtcdMemberRemovalFailed", "{refusal:?}");
                    assert!(
                        refusal.message.contains("strict reconfiguration check"),
                        "{refusal:?}"
                    );
                    None
                }
            }
        })
        .await;
    let after = etcd.members(&cluster.key).await.unwrap();
    assert!(!names(&after).contains(&leaving.as_str()), "{after:?}");
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|m| m.healthy), "{after:?}");
    // The leader is one of the members that stay, chosen before the old one left.
    let new_leader = leader(&after).expect("a leader after the move");
    assert_ne!(new_leader, leaving);
    // A Node whose member is already gone releases at once.
    release(&etcd, &cluster.key, "machine-of-leader", &leaving)
        .await
        .unwrap();
}

/// A removal that would leave no healthy majority is refused and changes nothing; removing the dead
/// member itself (a remediation) is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_refuses_a_removal_that_would_lose_quorum() {
    let mut cluster = EtcdCluster::start(3).await;
    let etcd = cluster.membership().await;
    with_leader(&cluster, &etcd).await;
    cluster.stop("m2");
    cluster
        .until(Duration::from_secs(30), "m2 unhealthy", || async {
            let members = etcd.members(&cluster.key).await.ok()?;
            members
                .iter()
                .any(|m| m.name == "m2" && !m.healthy)
                .then_some(())
        })
        .await;
    let refusal = release(&etcd, &cluster.key, "machine-m0", "m0")
        .await
        .unwrap_err();
    assert_eq!(refusal.reason, "EtcdQuorumAtRisk");
    assert_eq!(
        refusal.message,
        "removing Machine machine-m0 (etcd member m0) would leave 1 healthy of 2 etcd members, fewer than the quorum of 2; repair the unhealthy members first"
    );
    assert_eq!(
        names(&etcd.members(&cluster.key).await.unwrap()),
        ["m0", "m1", "m2"]
    );

    release(&etcd, &cluster.key, "machine-m2", "m2")
        .await
        .unwrap();
    let after = etcd.members(&cluster.key).await.unwrap();
    assert_eq!(names(&after), ["m0", "m1"]);
    assert!(after.iter().all(|m| m.healthy), "{after:?}");
}
