//! `capstan lint`: static analysis of Cluster API + Metal3 manifest sets.
//!
//! [`lint`] takes loaded objects — hand-written manifests, `clusterctl generate` output, capstan's
//! own rendered bundles or a `kubectl get -o yaml` dump with BareMetalHost `status.hardware` — and
//! returns a [`Report`] of [`Diagnostic`]s, each with a rule id, severity, message, the reason it
//! matters, a fix, and a `file:line` location (inside embedded documents such as a kube-vip static
//! pod in `files[].content` or a Cilium manifest in a ConfigMap, the line in the block scalar).
//!
//! The objects given are taken to be the whole set: a reference to an object that is not there is
//! an error. With [`LintOptions::partial`] rules that need "not in the set" evidence (dangling
//! references, missing ClusterResourceSet resources and BMC Secrets, unknown clusters, host counts,
//! BGP references) are skipped.
//!
//! Every object of a kind with a schema is admitted as the API server would admit it (defaults,
//! pruning, validation), with the very schemas `capstan serve` uses for capstan's kinds
//! ([`capstan_schema::kinds`]) or the CRDs given: what the server refuses, lint reports as an error.
//!
//! Rules are listed in [`catalogue()`]; [`explain`] returns one entry. The rules are grouped by topic:
//! objects (kinds, types, duplicates, CRD schemas), kube-vip, interfaces, Cilium and
//! ClusterResourceSets, networkData, references, versions, images, BMCs, and capacity.
//!
//! Nothing here panics on input: every value is read through `Option`s and typed deserialisation.

mod catalogue;
mod diagnostic;
mod embedded;
mod index;
mod rules;
#[cfg(test)]
mod test_support;

pub use catalogue::{RuleInfo, catalogue, explain, id as rule_id};
pub use diagnostic::{Diagnostic, JSON_SCHEMA, Location, ObjectRef, Related, Report, Severity};

use capstan_manifest::LoadedObject;

/// How to lint.
#[derive(Clone, Debug, Default)]
pub struct LintOptions {
    /// The objects are part of a larger set: skip rules that need "not in the set" evidence.
    pub partial: bool,
    /// CRD schemas to validate objects against (`--schemas DIR`), instead of the schemas
    /// `capstan serve` admits capstan's kinds with, for the kinds they define.
    pub schemas: Option<capstan_schema::CrdSet>,
}

/// Lints a set of objects. Problems in the set (duplicates, objects without names, unknown kinds)
/// are diagnostics; this function does not fail.
pub fn lint(objects: Vec<LoadedObject>, options: &LintOptions) -> Report {
    let mut out = Vec::new();
    let index = index::Index::build(&objects, &mut out);
    let mut admission = Vec::new();
    rules::schema::check(&index, options.schemas.as_ref(), &mut admission);
    // A field the typed model could not read (`replicas: three`) is reported once, as the
    // `invalid-field` the model found, not again by the schema.
    let invalid: Vec<&Location> = out
        .iter()
        .filter(|d| d.rule == rule_id::INVALID_FIELD)
        .map(|d| &d.location)
        .collect();
    admission.retain(|d| {
        d.rule != rule_id::SCHEMA_VIOLATION || !invalid.iter().any(|at| covers(at, &d.location))
    });
    out.extend(admission);
    rules::run(&index, options.partial, &mut out);
    Report::new(out)
}

/// Whether `at` is the field `other` is about, or one of its ancestors, in the same object.
fn covers(at: &Location, other: &Location) -> bool {
    let under = other
        .path
        .strip_prefix(at.path.as_str())
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']));
    at.file == other.file && at.object == other.object && (at.path.is_empty() || under)
}
