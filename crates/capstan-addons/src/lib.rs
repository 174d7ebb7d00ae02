//! Cluster API addons: the ClusterResourceSet controller.
//!
//! A ClusterResourceSet names ConfigMaps and Secrets whose data holds Kubernetes documents (a CNI
//! manifest, typically) and selects Clusters by label; once a selected Cluster's control plane is
//! initialised, the documents are applied into its workload API, and a ClusterResourceSetBinding per
//! Cluster records what was applied, when, and the content hash (so `Reconcile` re-applies on change
//! and `ApplyOnce` never does).
//!
//! - [`resources`]: reading the data of ConfigMaps and Secrets into documents, and the content hash;
//! - [`apply`]: discovery and server-side apply of each document into a workload cluster, each
//!   document's outcome recorded;
//! - [`binding`]: the binding entries and the apply-or-skip rule of each strategy;
//! - [`controller`]: the reconciler.
//!
//! Workload clusters are reached through `capstan-workload`'s [`capstan_workload::WorkloadAccess`].

pub mod apply;
pub mod binding;
pub mod controller;
pub mod resources;

pub use controller::{CONTROLLER, ClusterResourceSetController, FINALIZER};
