//! Helpers for the unit tests: loading YAML text and a clean capi-1 set to derive failing cases from.

use capstan_manifest::LoadedObject;

use crate::diagnostic::{Diagnostic, Report};
use crate::{LintOptions, lint};

/// A complete, clean capi-1 set (3 control planes, 1 worker, kube-vip, Cilium with BGP through a
/// ClusterResourceSet, hosts with inspection data and networkData). Rule tests edit one thing in it.
pub(crate) const BASE: &str = include_str!("../tests/fixtures/capi-1-good.yaml");

/// Loads YAML text; panics on invalid YAML (test input is fixed).
pub(crate) fn load(text: &str) -> Vec<LoadedObject> {
    capstan_manifest::load_str("test.yaml", text).expect("test YAML loads")
}

/// Lints YAML text as a whole set.
pub(crate) fn lint_text(text: &str) -> Report {
    lint(load(text), &LintOptions::default())
}

/// Lints YAML text with `--partial`.
pub(crate) fn lint_text_partial(text: &str) -> Report {
    lint(
        load(text),
        &LintOptions {
            partial: true,
            schemas: None,
        },
    )
}

/// Whether the report has a finding of `rule`.
pub(crate) fn has_rule(report: &Report, rule: &str) -> bool {
    report.diagnostics.iter().any(|d| d.rule == rule)
}

/// The rule ids of diagnostics, in order.
pub(crate) fn rules_of(diagnostics: &[Diagnostic]) -> Vec<&'static str> {
    diagnostics.iter().map(|d| d.rule).collect()
}
