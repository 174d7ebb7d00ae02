//! Typed resource model: Cluster API, Metal3, IPAM, Cilium BGP and OpenStack `network_data.json`.
//!
//! Every kind capstan reads or writes has a typed form here, per served version. The types cover the
//! fields capstan acts on; readers of arbitrary manifests (lint, the API server) keep the original JSON
//! alongside, so nothing a user wrote is lost by going through these types. Full structural validation
//! is the job of `capstan-schema`, against CRD schemas.

pub mod agent;
pub mod capi;
pub mod capm3;
pub mod cilium;
pub mod convert;
pub mod core;
pub mod ipam;
pub mod kinds;
pub mod kubeadm;
pub mod kvm;
pub mod meta;
pub mod metal3;
pub mod names;
pub mod network_data;
pub mod path;
pub mod resource;
pub mod version;

pub use path::{FieldPath, PathSegment};
pub use resource::{Resource, Scope};
