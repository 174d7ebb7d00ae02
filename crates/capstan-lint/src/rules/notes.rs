//! Notes on what lint did not analyse: objects of kinds it does not know (built-in kinds such as
//! Deployments, other providers' kinds), one note per apiVersion and kind.

use std::collections::BTreeMap;

use capstan_model::path::FieldPath;

use super::Ctx;
use super::cilium::is_cilium_agent;
use crate::catalogue::id;
use crate::diagnostic::Diagnostic;
use crate::index::{Entry, View};

/// Notes every kind lint does not analyse.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    let mut groups: BTreeMap<(&str, &str), Vec<&Entry<'_>>> = BTreeMap::new();
    for entry in &ctx.index.entries {
        if matches!(entry.view, View::Foreign) && !is_cilium_agent(entry) {
            groups
                .entry((entry.id.api_version.as_str(), entry.id.kind.as_str()))
                .or_default()
                .push(entry);
        }
    }
    for ((api_version, kind), entries) in groups {
        let Some(first) = entries.first() else {
            continue;
        };
        let message = match entries.len() {
            1 => format!("{} ({api_version}) is not analysed", first.id),
            n => format!("{n} objects of kind {kind} ({api_version}) are not analysed"),
        };
        out.push(
            Diagnostic::new(id::NOT_ANALYSED, message, first.at(&FieldPath::root()))
                .why("lint checks Cluster API, kubeadm, Metal3, CAPM3, Metal3 IPAM and Cilium BGP kinds; objects of other kinds are only used to resolve references"),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::diagnostic::Severity;
    use crate::test_support::lint_text;

    #[test]
    fn foreign_kinds_get_one_note_per_kind() {
        let report = lint_text(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b}\n---\n\
             apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: c}\n",
        );
        let notes: Vec<_> = report
            .diagnostics
            .iter()
            .filter(|d| d.rule == id::NOT_ANALYSED)
            .collect();
        assert_eq!(notes.len(), 2);
        assert!(notes.iter().all(|d| d.severity == Severity::Note));
        assert!(!report.has_errors());
        assert!(
            lint_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
                .diagnostics
                .is_empty()
        );
    }
}
