//! Cluster API core: the controllers of `cluster.x-k8s.io` kinds.
//!
//! They speak to providers only through the Cluster API contracts (fields on the referenced
//! infrastructure, bootstrap and control-plane objects), so any provider that honours the contracts
//! plugs in; they reach workload clusters through `capstan-workload`.

pub mod healthcheck;
