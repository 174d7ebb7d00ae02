//! Diagnostics and the report: what a finding says, where it points, and how it is printed — in
//! compiler style for people and as JSON (a stable schema) for tools.

use std::fmt::Write as _;

use capstan_manifest::LoadedObject;
use capstan_model::path::FieldPath;
use serde_json::{Value, json};

use crate::catalogue;

/// How serious a finding is. Errors make `capstan lint` exit 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The set will not work as written.
    Error,
    /// Likely a mistake, or fragile; the set may still work.
    Warning,
    /// Information only (for example, objects lint does not analyse).
    Note,
}

impl Severity {
    /// The lower-case name used in output (`error`, `warning`, `note`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Note => "note",
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The object a location is in, as written in the manifest.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// `apiVersion` as written.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.namespace`, when set.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A place in the manifest set: `file:line`, the field path in the object, and for findings inside
/// a document embedded in a string field (a static pod in `files[].content`, a manifest in a
/// ConfigMap), the path inside that embedded document.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    /// The file as given on the command line (or `<stdin>`).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// The field in the top-level object (`spec.kubeadmConfigSpec.files[0].content`).
    pub path: String,
    /// The field inside the embedded document, when the finding is in one.
    pub embedded_path: Option<String>,
    /// The top-level object, when the object has an identity.
    pub object: Option<ObjectRef>,
}

impl Location {
    /// The location of `path` in `object`.
    pub(crate) fn of(object: &LoadedObject, path: &FieldPath) -> Self {
        Self {
            file: object.origin.file.clone(),
            line: object.line_of(path),
            path: path_text(path),
            embedded_path: None,
            object: object_ref(object),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "file": self.file,
            "line": self.line,
            "path": self.path,
            "embeddedPath": self.embedded_path,
            "object": self.object.as_ref().map(|o| json!({
                "apiVersion": o.api_version,
                "kind": o.kind,
                "namespace": o.namespace,
                "name": o.name,
            })),
        })
    }

    /// `file:line (Kind ns/name, path)`, as the human format prints it.
    fn render(&self) -> String {
        let mut out = format!("{}:{}", self.file, self.line);
        let mut context: Vec<String> = Vec::new();
        if let Some(object) = &self.object {
            context.push(object.to_string());
        }
        if !self.path.is_empty() {
            context.push(self.path.clone());
        }
        if let Some(inner) = &self.embedded_path {
            context.push(format!("embedded {inner}"));
        }
        if !context.is_empty() {
            let _ = write!(out, " ({})", context.join(", "));
        }
        out
    }
}

/// The path as diagnostics print it: empty for the object itself.
pub(crate) fn path_text(path: &FieldPath) -> String {
    if path.is_root() {
        String::new()
    } else {
        path.to_string()
    }
}

/// The identity of an object as written, if it has one.
pub(crate) fn object_ref(object: &LoadedObject) -> Option<ObjectRef> {
    let id = object.id().ok()?;
    Some(ObjectRef {
        api_version: id.api_version,
        kind: id.kind,
        namespace: id.namespace,
        name: id.name,
    })
}

/// Another place that explains a finding (the other half of a duplicate, the object referenced).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Related {
    /// What this place is, in a few words.
    pub message: String,
    /// Where it is.
    pub location: Location,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The rule's id (`kube-vip-vip-address`); see [`crate::catalogue`].
    pub rule: &'static str,
    /// How serious this finding is; usually the rule's severity, lower where evidence is weaker.
    pub severity: Severity,
    /// What is wrong, in one line.
    pub message: String,
    /// Why it matters: the failure it leads to.
    pub why: Option<String>,
    /// What to change.
    pub hint: Option<String>,
    /// Where the problem is.
    pub location: Location,
    /// Other places involved.
    pub related: Vec<Related>,
}

impl Diagnostic {
    /// A finding of rule `rule` at `location`, with the rule's default severity.
    pub(crate) fn new(rule: &'static str, message: impl Into<String>, location: Location) -> Self {
        let severity = catalogue::explain(rule).map_or(Severity::Error, |info| info.severity);
        Self {
            rule,
            severity,
            message: message.into(),
            why: None,
            hint: None,
            location,
            related: Vec::new(),
        }
    }

    /// Adds the reason this finding matters.
    #[must_use]
    pub(crate) fn why(mut self, why: impl Into<String>) -> Self {
        self.why = Some(why.into());
        self
    }

    /// Adds what to change.
    #[must_use]
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Adds another place involved.
    #[must_use]
    pub(crate) fn related(mut self, message: impl Into<String>, location: Location) -> Self {
        self.related.push(Related {
            message: message.into(),
            location,
        });
        self
    }

    /// Overrides the severity (weaker evidence than the rule usually has).
    #[must_use]
    pub(crate) fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    fn to_json(&self) -> Value {
        json!({
            "rule": self.rule,
            "severity": self.severity.as_str(),
            "message": self.message,
            "why": self.why,
            "hint": self.hint,
            "location": self.location.to_json(),
            "related": self.related.iter().map(|r| json!({
                "message": r.message,
                "location": r.location.to_json(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// The outcome of linting a set: every finding, ordered by file, line and rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The findings.
    pub diagnostics: Vec<Diagnostic>,
}

/// Identifies the JSON output format; bumped only on incompatible changes.
pub const JSON_SCHEMA: &str = "capstan.lint/v1";

impl Report {
    /// A report of `diagnostics`, sorted for stable output.
    pub(crate) fn new(mut diagnostics: Vec<Diagnostic>) -> Self {
        diagnostics.sort_by(|a, b| {
            (
                &a.location.file,
                a.location.line,
                a.severity,
                a.rule,
                &a.message,
            )
                .cmp(&(
                    &b.location.file,
                    b.location.line,
                    b.severity,
                    b.rule,
                    &b.message,
                ))
        });
        diagnostics.dedup();
        Self { diagnostics }
    }

    /// Whether any finding is an error (`capstan lint` then exits 1).
    pub fn has_errors(&self) -> bool {
        self.error_count() > 0
    }

    /// The number of errors.
    pub fn error_count(&self) -> usize {
        self.count(Severity::Error)
    }

    /// The number of warnings.
    pub fn warning_count(&self) -> usize {
        self.count(Severity::Warning)
    }

    /// The number of notes.
    pub fn note_count(&self) -> usize {
        self.count(Severity::Note)
    }

    fn count(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    }

    /// One line: `2 errors, 1 warning, 0 notes`.
    pub fn summary(&self) -> String {
        let plural = |n: usize, word: &str| {
            if n == 1 {
                format!("{n} {word}")
            } else {
                format!("{n} {word}s")
            }
        };
        format!(
            "{}, {}, {}",
            plural(self.error_count(), "error"),
            plural(self.warning_count(), "warning"),
            plural(self.note_count(), "note")
        )
    }

    /// The report as JSON:
    ///
    /// ```text
    /// { "schema": "capstan.lint/v1",
    ///   "summary": { "errors": 1, "warnings": 0, "notes": 0 },
    ///   "diagnostics": [ { "rule", "severity", "message", "why", "hint",
    ///                      "location": { "file", "line", "path", "embeddedPath",
    ///                                    "object": { "apiVersion", "kind", "namespace", "name" } },
    ///                      "related": [ { "message", "location" } ] } ] }
    /// ```
    ///
    /// `why`, `hint`, `embeddedPath`, `object` and `namespace` are `null` when absent.
    pub fn to_json(&self) -> Value {
        json!({
            "schema": JSON_SCHEMA,
            "summary": {
                "errors": self.error_count(),
                "warnings": self.warning_count(),
                "notes": self.note_count(),
            },
            "diagnostics": self.diagnostics.iter().map(Diagnostic::to_json).collect::<Vec<_>>(),
        })
    }

    /// The report in compiler style, one block per finding and a summary line; ANSI colours only
    /// when `color` is true.
    pub fn render_human(&self, color: bool) -> String {
        let paint = |code: &str, text: &str| {
            if color {
                format!("\x1b[{code}m{text}\x1b[0m")
            } else {
                text.to_owned()
            }
        };
        let mut out = String::new();
        for d in &self.diagnostics {
            let code = match d.severity {
                Severity::Error => "1;31",
                Severity::Warning => "1;33",
                Severity::Note => "1;36",
            };
            let head = format!("{}[{}]", d.severity, d.rule);
            let _ = writeln!(out, "{}: {}", paint(code, &head), paint("1", &d.message));
            let _ = writeln!(out, "  {} {}", paint("1;34", "-->"), d.location.render());
            if let Some(why) = &d.why {
                let _ = writeln!(out, "   {} why: {why}", paint("1;34", "="));
            }
            if let Some(hint) = &d.hint {
                let _ = writeln!(out, "   {} hint: {hint}", paint("1;34", "="));
            }
            for related in &d.related {
                let _ = writeln!(
                    out,
                    "   {} see: {}: {}",
                    paint("1;34", "="),
                    related.location.render(),
                    related.message
                );
            }
            out.push('\n');
        }
        let summary = format!("capstan lint: {}", self.summary());
        let summary = if self.has_errors() {
            paint("1;31", &summary)
        } else {
            paint("1", &summary)
        };
        let _ = writeln!(out, "{summary}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::id;

    fn location() -> Location {
        Location {
            file: "out/cluster/cluster.yaml".into(),
            line: 57,
            path: "spec.kubeadmConfigSpec.files[0].content".into(),
            embedded_path: None,
            object: Some(ObjectRef {
                api_version: "controlplane.cluster.x-k8s.io/v1beta1".into(),
                kind: "KubeadmControlPlane".into(),
                namespace: Some("default".into()),
                name: "capi-1".into(),
            }),
        }
    }

    fn sample() -> Report {
        Report::new(vec![
            Diagnostic::new(
                id::KUBE_VIP_VIP_ADDRESS,
                "kube-vip uses `vip_address`, which kube-vip resolves as a hostname",
                location(),
            )
            .why("with a CIDR suffix (\"10.250.250.29/32\") the lookup fails: `lookup 10.250.250.29/32: no such host`")
            .hint("set `address: 10.250.250.29` and `vip_subnet: \"32\"` instead"),
        ])
    }

    #[test]
    fn human_output_is_compiler_style() {
        let text = sample().render_human(false);
        let expected = "error[kube-vip-vip-address]: kube-vip uses `vip_address`, which kube-vip resolves as a hostname\n  --> out/cluster/cluster.yaml:57 (KubeadmControlPlane default/capi-1, spec.kubeadmConfigSpec.files[0].content)\n   = why: with a CIDR suffix (\"10.250.250.29/32\") the lookup fails: `lookup 10.250.250.29/32: no such host`\n   = hint: set `address: 10.250.250.29` and `vip_subnet: \"32\"` instead\n\ncapstan lint: 1 error, 0 warnings, 0 notes\n";
        assert_eq!(text, expected);
        assert!(!text.contains('\x1b'));
        assert!(sample().render_human(true).contains("\x1b[1;31m"));
    }

    #[test]
    fn json_has_a_stable_shape() {
        let report = sample();
        let json = report.to_json();
        assert_eq!(json["schema"], JSON_SCHEMA);
        assert_eq!(json["summary"]["errors"], 1);
        let d = &json["diagnostics"][0];
        assert_eq!(d["rule"], "kube-vip-vip-address");
        assert_eq!(d["severity"], "error");
        assert_eq!(d["location"]["line"], 57);
        assert_eq!(d["location"]["object"]["kind"], "KubeadmControlPlane");
        assert!(d["hint"].is_string());
        assert!(d["related"].as_array().is_some_and(Vec::is_empty));
        assert!(report.has_errors());
        assert_eq!((report.error_count(), report.warning_count()), (1, 0));
    }

    #[test]
    fn reports_sort_and_deduplicate() {
        let mut later = location();
        later.line = 90;
        let a = Diagnostic::new(id::DANGLING_REFERENCE, "b", later);
        let b = Diagnostic::new(id::DANGLING_REFERENCE, "a", location());
        let report = Report::new(vec![a.clone(), b.clone(), a]);
        assert_eq!(report.diagnostics, vec![b, report.diagnostics[1].clone()]);
        assert_eq!(report.diagnostics.len(), 2);
        assert_eq!(Report::default().summary(), "0 errors, 0 warnings, 0 notes");
    }
}
