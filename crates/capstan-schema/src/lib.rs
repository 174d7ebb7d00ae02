//! Kubernetes structural-schema (`openAPIV3Schema`) validation of objects, with field paths.
//!
//! - [`CrdSet`] loads CustomResourceDefinitions (files or directories, via `capstan-manifest`)
//!   into plain typed data ([`CrdInfo`], [`CrdVersion`]) and finds the [`Schema`] for an
//!   `apiVersion` and kind.
//! - [`validate`] / [`validate_report`] check an object against a schema as the API server does
//!   for custom resources, reporting each [`Violation`] with the [`FieldPath`] of the field, so
//!   callers can turn it into `file:line`.
//! - [`apply_defaults`] and [`prune`] do structural defaulting and unknown-field pruning.
//! - [`kinds`] generates the structural schemas of capstan's own kinds from capstan-model's types
//!   (completed with the upstream CRDs' for the kinds shared with upstream): what `capstan serve`
//!   validates them with at admission, and `capstan lint` with the same functions, so the two
//!   cannot disagree.
//!
//! - CEL rules (`x-kubernetes-validations`) are evaluated with the object (and, on update, the
//!   stored object for transition rules), within kube-apiserver's cost limits; [`rule_errors`]
//!   lists the rules of a schema that do not compile, so that a definition carrying one is
//!   refused. Nothing here panics on any schema or value.
//!
//! [`FieldPath`]: capstan_model::path::FieldPath

mod cel;
mod crd;
mod defaults;
mod format;
pub mod kinds;
mod prune;
mod schema;
mod validate;

pub use cel::{
    CompiledCell, InvalidRule, PER_CALL_COST_LIMIT, REQUEST_COST_BUDGET, RuleError, RuleReason,
    rule_errors,
};
pub use crd::{
    CRD_API_VERSION, CrdError, CrdInfo, CrdSet, CrdVersion, PrinterColumn, ScaleSubresource, Scope,
    Subresources,
};
pub use defaults::apply_defaults;
pub use prune::prune;
pub use schema::{
    AdditionalProperties, ListType, MAX_SCHEMA_DEPTH, MapType, Pattern, Properties, PropertiesIter,
    Schema, SchemaError, SchemaInterner, SchemaType, ValidationRule,
};
pub use validate::{
    UncheckedPattern, UnevaluatedRule, ValidationReport, Violation, ViolationKind, validate,
    validate_report, validate_update,
};
