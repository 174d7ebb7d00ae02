//! Kubernetes versions: every version must parse, and a MachineDeployment's workers must be no newer
//! than their control plane (by minor version) and at most `MAX_KUBELET_MINOR_SKEW` minors behind.

use capstan_model::path::FieldPath;
use capstan_model::version::{KubernetesVersion, MAX_KUBELET_MINOR_SKEW};

use super::Ctx;
use crate::catalogue::id;
use crate::diagnostic::Diagnostic;
use crate::index::Entry;

/// Parses a version, reporting one that does not parse.
fn parse(
    entry: &Entry<'_>,
    text: &str,
    path: &str,
    out: &mut Vec<Diagnostic>,
) -> Option<KubernetesVersion> {
    match text.parse::<KubernetesVersion>() {
        Ok(v) => Some(v),
        Err(err) => {
            out.push(
                Diagnostic::new(id::INVALID_VERSION, err.to_string(), entry.at(&FieldPath::parse(path)))
                    .why("Cluster API compares versions and picks images by them; a malformed version is rejected")
                    .hint("write the version as vMAJOR.MINOR.PATCH, e.g. v1.31.4"),
            );
            None
        }
    }
}

/// Runs the version rules.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for (entry, kcp) in ctx.index.control_planes() {
        parse(entry, &kcp.version, "spec.version", out);
    }
    for (entry, md) in ctx.index.deployments() {
        let Some(text) = md.version.as_deref() else {
            continue;
        };
        let path = "spec.template.spec.version";
        let Some(workers) = parse(entry, text, path, out) else {
            continue;
        };
        let Some((kcp_entry, kcp)) = ctx
            .index
            .cluster(&md.cluster_name, entry.namespace())
            .and_then(|(c, view)| ctx.index.control_plane_of(c, view))
        else {
            continue;
        };
        let Ok(control_plane) = kcp.version.parse::<KubernetesVersion>() else {
            continue;
        };
        let newer = (workers.major, workers.minor) > (control_plane.major, control_plane.minor);
        let behind = workers.minors_behind(&control_plane);
        let problem = if newer {
            format!("workers run {workers}, newer than the control plane's {control_plane}")
        } else if behind > MAX_KUBELET_MINOR_SKEW {
            format!(
                "workers run {workers}, more than {MAX_KUBELET_MINOR_SKEW} minor versions behind the control plane's {control_plane}"
            )
        } else {
            continue;
        };
        out.push(
            Diagnostic::new(id::VERSION_SKEW, problem, entry.at(&FieldPath::parse(path)))
                .why("a kubelet may not be newer than the API server nor lag it by more than three minor versions; kubeadm join refuses")
                .hint(format!("set the workers' version to {control_plane}, or within {MAX_KUBELET_MINOR_SKEW} minor versions below it"))
                .related("control-plane version", kcp_entry.at(&FieldPath::parse("spec.version"))),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{BASE, has_rule, lint_text};

    fn with_worker_version(version: &str) -> String {
        BASE.replacen(
            "      version: v1.31.4\n",
            &format!("      version: {version}\n"),
            1,
        )
    }

    #[test]
    fn skew() {
        assert_ne!(with_worker_version("v1.32.0"), BASE);
        assert!(has_rule(
            &lint_text(&with_worker_version("v1.32.0")),
            id::VERSION_SKEW
        ));
        assert!(has_rule(
            &lint_text(&with_worker_version("v1.27.3")),
            id::VERSION_SKEW
        ));
        assert!(!has_rule(
            &lint_text(&with_worker_version("v1.28.3")),
            id::VERSION_SKEW
        ));
        assert!(!has_rule(
            &lint_text(&with_worker_version("v1.31.9")),
            id::VERSION_SKEW
        ));
    }

    #[test]
    fn malformed_versions() {
        let report = lint_text(&with_worker_version("v1.31"));
        assert!(has_rule(&report, id::INVALID_VERSION));
        // Unquoted, YAML reads 1.31 as a number: a wrong field type.
        let report = lint_text(&with_worker_version("1.31"));
        assert!(has_rule(&report, id::INVALID_FIELD));
        let report = lint_text(&with_worker_version("\"1.31\""));
        assert!(has_rule(&report, id::INVALID_VERSION));
        assert!(!has_rule(&lint_text(BASE), id::INVALID_VERSION));
    }
}
