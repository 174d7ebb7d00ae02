//! Kubernetes structural-schema (openAPIV3Schema) validation of objects, with field paths.
