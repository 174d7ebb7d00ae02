//! Validation against CRD schemas (`--schemas DIR`): every object whose apiVersion and kind have a
//! schema in the given CRDs is checked as the API server would check it, one finding per violation,
//! at the violating field's line.
//!
//! For kinds with a `/status` subresource the API server ignores `status` in what is applied, so
//! violations under `status` (a hand-written partial status, say) are not reported.

use capstan_schema::{CrdSet, validate};

use crate::catalogue::id;
use crate::diagnostic::Diagnostic;
use crate::index::Index;

/// Validates every object of the set that has a schema in `schemas`.
pub(crate) fn check(index: &Index<'_>, schemas: &CrdSet, out: &mut Vec<Diagnostic>) {
    for entry in &index.entries {
        let Some(version) = schemas.version_for(&entry.id.api_version, &entry.id.kind) else {
            continue;
        };
        let Some(schema) = &version.schema else {
            continue;
        };
        let status_ignored = version.subresources.status;
        for violation in validate(schema, &entry.obj.value) {
            let in_status = matches!(
                violation.path.segments().first(),
                Some(capstan_model::path::PathSegment::Key(k)) if k == "status"
            );
            if status_ignored && in_status {
                continue;
            }
            let path = if violation.path.is_root() {
                "the object".to_owned()
            } else {
                format!("`{}`", violation.path)
            };
            out.push(
                Diagnostic::new(
                    id::SCHEMA_VIOLATION,
                    format!("{path}: {}", violation.message),
                    entry.at(&violation.path),
                )
                .why(format!(
                    "the API server validates {} against this schema and rejects the object",
                    entry.id.kind
                ))
                .hint("change the field as the message says; the CRD schema is the authority"),
            );
        }
    }
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
        check(&index, &crds(), &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].rule, id::SCHEMA_VIOLATION);
        assert_eq!(out[0].location.line, 5);
        assert_eq!(out[0].location.path, "spec.size");
    }

    #[test]
    fn valid_objects_pass() {
        let objects = load(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec:\n  size: 2\n",
        );
        let mut out = Vec::new();
        let index = Index::build(&objects, &mut out);
        check(&index, &crds(), &mut out);
        assert!(out.is_empty(), "{out:?}");
    }
}
