//! The etcd membership of workload clusters, as the KubeadmControlPlane needs it on real kubeadm
//! clusters: which members there are and whether each is healthy, who leads, moving leadership off
//! a member that is leaving, and removing a member before its Machine goes.
//!
//! - [`gateway`] speaks to one etcd member over etcd's v3 JSON gateway with a client certificate of
//!   the cluster's etcd CA.
//! - [`membership`] is [`KubeadmEtcd`], the real [`capstan_workload::EtcdMembership`]: it finds the
//!   members through the workload API (kubeadm's etcd static Pods) and the identity in the
//!   management cluster (`<cluster>-etcd`).
//!
//! The simulated backend (`capstan-sim`) implements the same trait for the clusters it plays; the
//! quorum arithmetic that decides whether a removal may happen lives in the control plane, over
//! either.

pub mod gateway;
pub mod membership;

pub use membership::KubeadmEtcd;
