//! [`KubeadmEtcd`] against a real three-member etcd cluster: etcd v3.6 processes (built by
//! `scripts/peers.sh` from the Go modules pinned in tools/peers/) on loopback, with mutual TLS from
//! an etcd CA exactly as kubeadm runs it. The management cluster (the `<cluster>-etcd` Secret) and
//! the workload API (kubeadm's annotated etcd static Pods) are capstan API servers in process; etcd
//! itself is real.
//!
//! The binaries come from `CAPSTAN_PEERS_BIN`, or from the directory `scripts/peers.sh --dir`
//! names; without them the test fails and says to run `scripts/peers.sh`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_cluster_lists_its_members_healthy_with_one_leader() {
    let mut cluster = EtcdCluster::start(3).await;
    let etcd = cluster.membership().await;
    let members = cluster
        .until(Duration::from_secs(30), "a leader", || async {
            let members = etcd.members(&cluster.key).await.ok()?;
            leader(&members)?;
            Some(members)
        })
        .await;
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
    let members = cluster
        .until(Duration::from_secs(30), "a leader", || async {
            let members = etcd.members(&cluster.key).await.ok()?;
            leader(&members)?;
            Some(members)
        })
        .await;
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
    cluster
        .until(Duration::from_secs(30), "a leader", || async {
            leader(&etcd.members(&cluster.key).await.ok()?).map(|_| ())
        })
        .await;
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
