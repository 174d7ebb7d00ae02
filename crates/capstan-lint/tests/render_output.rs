//! capstan's own rendered bundles lint clean: both example specs and a generated cluster (bonds
//! and VLANs on every host), in both API versions, with the hosts, the Cilium ClusterResourceSet,
//! the cluster objects and the workload BGP objects linted together as one set.

use std::path::{Path, PathBuf};

use capstan_lint::{LintOptions, Report, lint};
use capstan_manifest::{LoadedObject, load_str};
use capstan_render::{CapiVersion, RenderOptions, load_spec, render};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// The YAML files of a rendered example, as (path, text).
fn rendered(example: &str, api_version: CapiVersion) -> Vec<(String, String)> {
    let spec_path = examples().join(example);
    let spec = load_spec(&spec_path).expect("example spec loads");
    let bundle = render(&spec, &examples(), &RenderOptions { api_version })
        .unwrap_or_else(|e| panic!("{example} renders: {e}"));
    bundle
        .files
        .iter()
        .filter(|f| {
            f.path
                .extension()
                .is_some_and(|e| e == "yaml" || e == "yml")
        })
        .map(|f| (f.path.to_string_lossy().into_owned(), f.contents.clone()))
        .collect()
}

/// The YAML files of a rendered generated cluster of `hosts` hosts.
fn rendered_generated(hosts: usize, api_version: CapiVersion) -> Vec<(String, String)> {
    use capstan_render::generate::{CILIUM_MANIFEST_PATH, SAMPLE_CILIUM_MANIFEST, generated_spec};
    let spec_dir = tempfile::tempdir().expect("temporary directory");
    let manifest = spec_dir.path().join(CILIUM_MANIFEST_PATH);
    if let Some(parent) = manifest.parent() {
        std::fs::create_dir_all(parent).expect("manifest directory");
    }
    std::fs::write(&manifest, SAMPLE_CILIUM_MANIFEST).expect("manifest");
    let bundle = render(
        &generated_spec(hosts),
        spec_dir.path(),
        &RenderOptions { api_version },
    )
    .unwrap_or_else(|e| panic!("generated spec renders: {e}"));
    bundle
        .files
        .iter()
        .filter(|f| {
            f.path
                .extension()
                .is_some_and(|e| e == "yaml" || e == "yml")
        })
        .map(|f| (f.path.to_string_lossy().into_owned(), f.contents.clone()))
        .collect()
}

fn load(files: &[(String, String)]) -> Vec<LoadedObject> {
    files
        .iter()
        .flat_map(|(name, text)| load_str(name, text).expect("rendered YAML loads"))
        .collect()
}

fn render_and_lint(example: &str, api_version: CapiVersion) -> Report {
    let objects = load(&rendered(example, api_version));
    let kinds: Vec<&str> = objects
        .iter()
        .filter_map(|o| o.value.get("kind").and_then(|k| k.as_str()))
        .collect();
    for kind in [
        "Cluster",
        "KubeadmControlPlane",
        "BareMetalHost",
        "ClusterResourceSet",
        "CiliumBGPPeerConfig",
    ] {
        assert!(kinds.contains(&kind), "{example} rendered no {kind}");
    }
    lint(objects, &LintOptions::default())
}

#[test]
fn rendered_examples_lint_clean() {
    for example in ["capi-1.yaml", "super.yaml"] {
        for api_version in [CapiVersion::V1beta1, CapiVersion::V1beta2] {
            let report = render_and_lint(example, api_version);
            assert!(
                report.diagnostics.is_empty(),
                "{example} ({}):\n{}",
                api_version.as_str(),
                report.render_human(false)
            );
        }
    }
}

#[test]
fn rendered_generated_cluster_lints_clean() {
    for api_version in [CapiVersion::V1beta1, CapiVersion::V1beta2] {
        let report = lint(
            load(&rendered_generated(40, api_version)),
            &LintOptions::default(),
        );
        assert!(
            report.diagnostics.is_empty(),
            "generated ({}):\n{}",
            api_version.as_str(),
            report.render_human(false)
        );
    }
}

#[test]
fn lint_sees_into_rendered_bundles() {
    // The same bundle with two pitfalls put back: lint must find them in rendered output too.
    let files: Vec<(String, String)> = rendered("capi-1.yaml", CapiVersion::V1beta1)
        .into_iter()
        .map(|(name, text)| {
            let text = text
                .replace("name: address", "name: vip_address")
                .replace("k8s-service-host", "k8s-service-hostname")
                .replace("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_HOSTNAME");
            (name, text)
        })
        .collect();
    let report = lint(load(&files), &LintOptions::default());
    let rules: Vec<&str> = report.diagnostics.iter().map(|d| d.rule).collect();
    assert!(
        rules.contains(&"kube-vip-vip-address"),
        "{}",
        report.render_human(false)
    );
    assert!(
        rules.contains(&"cilium-k8s-service-host"),
        "{}",
        report.render_human(false)
    );
}

#[test]
fn rendered_examples_match_the_upstream_schemas() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/crds");
    if !dir.is_dir() {
        return;
    }
    let schemas = capstan_schema::CrdSet::load_dir(&dir).expect("reference CRDs load");
    let options = LintOptions {
        partial: false,
        schemas: Some(schemas),
    };
    for example in ["capi-1.yaml", "super.yaml"] {
        for api_version in [CapiVersion::V1beta1, CapiVersion::V1beta2] {
            let report = lint(load(&rendered(example, api_version)), &options);
            assert!(
                report.diagnostics.is_empty(),
                "{example} ({}):\n{}",
                api_version.as_str(),
                report.render_human(false)
            );
        }
    }
}

/// The mixed example (control plane on a KVM VM, workers on bare metal) and its reverse (a
/// bare-metal control plane, the workers on VMs) lint without errors or warnings; without
/// hypervisors, the KVM machines are found to have none.
#[test]
fn rendered_mixed_clusters_lint_clean() {
    let reverse = |text: &str| {
        text.replace("  machines: kvm\n", "")
            .replace(
                "  - name: metal\n    replicas: 1\n",
                "  - name: metal\n    replicas: 1\n    machines: kvm\n",
            )
            .replace(
                "  - name: mixed-worker-0\n    role: worker\n",
                "  - name: mixed-worker-0\n    role: control-plane\n",
            )
    };
    let original = std::fs::read_to_string(examples().join("mixed.yaml")).expect("mixed.yaml");
    for (label, text) in [("mixed", original.clone()), ("reverse", reverse(&original))] {
        assert!(
            label == "mixed" || text != original,
            "the reverse spec is the same"
        );
        for api_version in [CapiVersion::V1beta1, CapiVersion::V1beta2] {
            let spec = capstan_render::parse_spec("mixed.yaml", &text).expect("spec reads");
            let bundle = render(&spec, &examples(), &RenderOptions { api_version })
                .unwrap_or_else(|e| panic!("{label} renders: {e}"));
            let files: Vec<(String, String)> = bundle
                .files
                .iter()
                .filter(|f| f.path.extension().is_some_and(|e| e == "yaml"))
                .map(|f| (f.path.to_string_lossy().into_owned(), f.contents.clone()))
                .collect();
            let report = lint(load(&files), &LintOptions::default());
            let serious: Vec<_> = report
                .diagnostics
                .iter()
                .filter(|d| d.severity != capstan_lint::Severity::Note)
                .collect();
            assert!(
                serious.is_empty(),
                "{label} ({}):\n{}",
                api_version.as_str(),
                report.render_human(false)
            );
            let without_hypervisors: Vec<(String, String)> = files
                .iter()
                .map(|(name, text)| {
                    let cut = text.find("  hypervisors:\n").map(|start| {
                        let end = text[start..]
                            .find("\n  dnsServers:")
                            .map_or(text.len(), |e| start + e + 1);
                        format!("{}{}", &text[..start], &text[end..])
                    });
                    (name.clone(), cut.unwrap_or_else(|| text.clone()))
                })
                .collect();
            let report = lint(load(&without_hypervisors), &LintOptions::default());
            assert!(
                report
                    .diagnostics
                    .iter()
                    .any(|d| d.rule == "no-hypervisors"),
                "{label}: {}",
                report.render_human(false)
            );
            // Without its BareMetalHost, the bare-metal side (the workers here, the control
            // plane in the reverse) has no host to run on.
            let without_hosts: Vec<(String, String)> = files
                .iter()
                .filter(|(name, _)| !name.starts_with("hosts/"))
                .cloned()
                .collect();
            assert!(without_hosts.len() < files.len());
            let report = lint(load(&without_hosts), &LintOptions::default());
            assert!(
                report
                    .diagnostics
                    .iter()
                    .any(|d| d.rule == "not-enough-hosts"),
                "{label}: {}",
                report.render_human(false)
            );
        }
    }
}
