//! Typed resource model: Cluster API, Metal3, IPAM, Cilium BGP and OpenStack `network_data.json`.

pub mod path;

pub use path::{FieldPath, PathSegment};
