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
    /// CRD schemas to validate objects against (`--schemas DIR`).
    pub schemas: Option<capstan_schema::CrdSet>,
}

/// Lints a set of objects. Problems in the set (duplicates, objects without names, unknown kinds)
/// are diagnostics; this function does not fail.
pub fn lint(objects: Vec<LoadedObject>, options: &LintOptions) -> Report {
    let mut out = Vec::new();
    let index = index::Index::build(&objects, &mut out);
    if let Some(schemas) = &options.schemas {
        rules::schema::check(&index, schemas, &mut out);
        // Where a CRD schema is given for the kind, it is the authority on fields: the model's
        // (possibly partial) view of the kind does not add its own unknown-field findings.
        out.retain(|d| {
            d.rule != rule_id::UNKNOWN_FIELD
                || d.location
                    .object
                    .as_ref()
                    .is_none_or(|o| schemas.version_for(&o.api_version, &o.kind).is_none())
        });
    }
    rules::run(&index, options.partial, &mut out);
    Report::new(out)
}
