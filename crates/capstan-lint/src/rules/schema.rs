//! Admission, as the API server does it: every object of a kind with a schema is defaulted,
//! pruned of the fields the schema does not define and validated against it, and each field the
//! server would refuse is an error at its line. The schema is the kind's CRD from `--schemas DIR`
//! when one is given, else the one `capstan serve` itself admits capstan's kinds with
//! ([`capstan_schema::kinds`]): one validator for lint and the server, not a second set of checks.
//!
//! - A pruned field is an `unknown-field` error: `kubectl apply` and `capstan apply` ask for strict
//!   field validation, under which the server refuses the object naming the field (without it,
//!   the field would be dropped and never take effect).
//! - A violation of the pruned object (a pattern, an enum, a bound, a required field, a CEL rule) is
//!   a `schema-violation` error, unless the typed model already reported the same field as an
//!   `invalid-field`.
//!
//! For kinds with a `/status` subresource the server ignores `status` in what is applied, so
//! nothing under `status` (a `kubectl get -o yaml` dump's, say) is reported.

use capstan_model::kinds;
use capstan_model::path::{FieldPath, PathSegment};
use capstan_schema::{AdditionalProperties, CrdSet, Schema};

use crate::catalogue::id;
use crate::diagnostic::Diagnostic;
use crate::index::{Entry, Index, edit_distance};

/// Where an object's schema comes from, for messages.
#[derive(Clone, Copy)]
enum Source {
    /// A CRD of `--schemas DIR`.
    Crd,
    /// The schema `capstan serve` admits the kind with.
    Served,
}

/// Admits every object of the set that has a schema: its CRD in `crds`, else capstan's own.
pub(crate) fn check(index: &Index<'_>, crds: Option<&CrdSet>, out: &mut Vec<Diagnostic>) {
    for entry in &index.entries {
        let crd = crds.and_then(|c| c.version_for(&entry.id.api_version, &entry.id.kind));
        let (schema, status_ignored, source) = match crd {
            Some(version) => {
                let Some(schema) = &version.schema else {
                    continue;
                };
                (schema, version.subresources.status, Source::Crd)
            }
            None => {
                let Ok(info) = kinds::lookup(&entry.id.api_version, &entry.id.kind) else {
                    continue;
                };
                let Some(schema) =
                    capstan_schema::kinds::compiled(info.group, info.kind, entry.id.version())
                else {
                    continue;
                };
                (schema, info.has_status_subresource(), Source::Served)
            }
        };
        admit(entry, schema, status_ignored, source, out);
    }
}

fn in_status(path: &FieldPath) -> bool {
    matches!(path.segments().first(), Some(PathSegment::Key(k)) if k == "status")
}

/// What the API server does with the object before it stores it: defaults, prunes, validates.
fn admit(
    entry: &Entry<'_>,
    schema: &Schema,
    status_ignored: bool,
    source: Source,
    out: &mut Vec<Diagnostic>,
) {
    let kind = &entry.id.kind;
    let mut object = entry.obj.value.clone();
    capstan_schema::apply_defaults(schema, &mut object);
    for path in capstan_schema::prune(schema, &mut object) {
        if status_ignored && in_status(&path) {
            continue;
        }
        let hint = match near_field(schema, &path) {
            Some(near) => format!("did you mean `{near}`? Fix the spelling, or remove the field"),
            None => "fix the spelling, or remove the field".to_owned(),
        };
        out.push(
            Diagnostic::new(
                id::UNKNOWN_FIELD,
                format!("`{path}` is not a field of {kind} {}", entry.id.api_version),
                entry.at(&path),
            )
            .why(format!(
                "`kubectl apply` and `capstan apply` validate fields strictly: the API server refuses the {kind} with `unknown field \"{path}\"` (without strict validation it drops the field, and the setting never takes effect){}",
                match source {
                    Source::Crd => "; the kind's CRD in --schemas says so",
                    Source::Served => "",
                }
            ))
            .hint(hint),
        );
    }
    for violation in capstan_schema::validate(schema, &object) {
        if status_ignored && in_status(&violation.path) {
            continue;
        }
        let field = if violation.path.is_root() {
            "the object".to_owned()
        } else {
            format!("`{}`", violation.path)
        };
        out.push(
            Diagnostic::new(
                id::SCHEMA_VIOLATION,
                format!("{field}: {}", violation.message),
                entry.at(&violation.path),
            )
            .why(format!(
                "the API server validates {kind} against {} and refuses the object",
                match source {
                    Source::Crd => "the CRD's schema in --schemas",
                    Source::Served => "its schema of the kind",
                }
            ))
            .hint("change the field as the message says"),
        );
    }
}

/// The field the schema defines beside an unknown one that is close enough to be its intended
/// spelling (`bootMACAdress` → `bootMACAddress`).
fn near_field(schema: &Schema, path: &FieldPath) -> Option<String> {
    let (last, parents) = path.segments().split_last()?;
    let PathSegment::Key(unknown) = last else {
        return None;
    };
    let mut node = schema;
    for segment in parents {
        node = match segment {
            PathSegment::Key(key) => match node.properties.get(key) {
                Some(child) => child,
                None => match &node.additional_properties {
                    Some(AdditionalProperties::Schema(child)) => child,
                    _ => return None,
                },
            },
            PathSegment::Index(_) => node.items.as_deref()?,
        };
    }
    node.properties
        .keys()
        .map(|name| (edit_distance(name, unknown), name))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, name)| name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::load;

    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
";

    fn crds() -> CrdSet {
        CrdSet::from_objects(&load(CRD)).expect("crd")
    }

    #[test]
    fn violations_point_at_fields() {
        let objects = load(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec:\n  size: 0\n",
        );
        let mut out = Vec::new();
        let index = Index::build(&objects, &mut out);
        check(&index, Some(&crds()), &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].rule, id::SCHEMA_VIOLATION);
        assert_eq!(out[0].location.line, 5);
        assert_eq!(out[0].location.path, "spec.size");
    }

    #[test]
    fn misspelt_fields_are_errors_without_schemas() {
        let report = crate::test_support::lint_text(
            "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata: {name: h}\nspec:\n  onlin: true\nstatus:\n  anything: goes\n",
        );
        let unknown: Vec<_> = report
            .diagnostics
            .iter()
            .filter(|d| d.rule == id::UNKNOWN_FIELD)
            .collect();
        assert_eq!(unknown.len(), 1, "{}", report.render_human(false));
        assert_eq!(unknown[0].severity, crate::diagnostic::Severity::Error);
        assert_eq!(unknown[0].location.line, 5);
        assert_eq!(unknown[0].location.path, "spec.onlin");
        assert_eq!(
            unknown[0].hint.as_deref(),
            Some("did you mean `online`? Fix the spelling, or remove the field")
        );
        // Core kinds are the API server's own, not judged here; nor is a status the server
        // ignores.
        let report = crate::test_support::lint_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nimmutable: true\nnope: 1\n",
        );
        assert!(
            report.diagnostics.is_empty(),
            "{}",
            report.render_human(false)
        );
    }

    #[test]
    fn a_wrong_type_is_reported_once() {
        let report = crate::test_support::lint_text(
            "apiVersion: controlplane.cluster.x-k8s.io/v1beta1\nkind: KubeadmControlPlane\nmetadata: {name: a}\nspec:\n  version: v1.31.0\n  replicas: three\n",
        );
        let at_replicas: Vec<_> = report
            .diagnostics
            .iter()
            .filter(|d| d.location.path == "spec.replicas")
            .map(|d| d.rule)
            .collect();
        assert_eq!(
            at_replicas,
            vec![id::INVALID_FIELD],
            "{}",
            report.render_human(false)
        );
    }

    #[test]
    fn valid_objects_pass() {
        let objects = load(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec:\n  size: 2\n",
        );
        let mut out = Vec::new();
        let index = Index::build(&objects, &mut out);
        check(&index, Some(&crds()), &mut out);
        assert!(out.is_empty(), "{out:?}");
    }
}
