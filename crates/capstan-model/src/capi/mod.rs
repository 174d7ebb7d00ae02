//! Cluster API core (`cluster.x-k8s.io`) and addons (`addons.cluster.x-k8s.io`) kinds, in the two
//! served versions: `v1beta1` (what most existing manifests use) and `v1beta2` (current upstream).
//!
//! The two versions differ in shape, not only in name: v1beta2 references carry `apiGroup` instead of
//! `apiVersion`, durations become `*Seconds` integers and rollout settings move under `rollout`.
//! Each version is its own set of types; conversion between them is explicit.

pub mod v1beta1;
pub mod v1beta2;

/// API group of the core Cluster API kinds.
pub const GROUP: &str = "cluster.x-k8s.io";
/// API group of ClusterResourceSet and its binding.
pub const ADDONS_GROUP: &str = "addons.cluster.x-k8s.io";
