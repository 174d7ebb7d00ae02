//! Core Kubernetes kinds capstan reads and writes (Secret, ConfigMap, Namespace, Event, Pod), taken from
//! `k8s-openapi` so they match the Kubernetes API exactly.

pub use k8s_openapi::ByteString;
pub use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod, Secret};
