//! The Cilium manifest: checked, fixed (or refused), shipped by a ClusterResourceSet; and the
//! install command and Helm values that make a manifest needing no fixes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use capstan_render::{CapiVersion, RenderError, RenderOptions};
use common::{objects, of_kind, render, render_example};
use serde_json::Value;

/// The manifest inside `cluster/cilium.yaml`, parsed.
fn shipped_manifest(bundle: &capstan_render::Bundle) -> (String, Vec<Value>) {
    let all = objects(bundle);
    let config_map = of_kind(&all, "ConfigMap").next().expect("ConfigMap");
    let text = config_map["data"]["cilium.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    let values = capstan_manifest::load_str("cilium.yaml", &text)
        .unwrap()
        .into_iter()
        .map(|o| o.value)
        .collect();
    (text, values)
}

fn find<'a>(values: &'a [Value], kind: &str, name: &str) -> &'a Value {
    values
        .iter()
        .find(|v| v["kind"] == kind && v["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn env(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .map(str::to_owned)
}

#[test]
fn missing_api_endpoint_is_patched_in_and_reported() {
    let bundle = render_example("capi-1.yaml", CapiVersion::V1beta1);
    let (text, values) = shipped_manifest(&bundle);
    let daemon_set = find(&values, "DaemonSet", "cilium");
    let spec = &daemon_set["spec"]["template"]["spec"];
    for container in [
        &spec["containers"][0],
        &spec["initContainers"][0],
        &spec["initContainers"][3],
    ] {
        assert_eq!(
            env(container, "KUBERNETES_SERVICE_HOST").as_deref(),
            Some("10.250.250.29"),
            "{container}"
        );
        assert_eq!(
            env(container, "KUBERNETES_SERVICE_PORT").as_deref(),
            Some("6443")
        );
    }
    // Containers that never talk to the API are left alone.
    assert_eq!(
        env(&spec["initContainers"][1], "KUBERNETES_SERVICE_HOST"),
        None
    );
    let operator = find(&values, "Deployment", "cilium-operator");
    let container = &operator["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env(container, "KUBERNETES_SERVICE_HOST").as_deref(),
        Some("10.250.250.29")
    );

    // One notice per fix, each naming the manifest line.
    let fixes: Vec<&String> = bundle
        .notices
        .iter()
        .filter(|n| n.contains(": patched: "))
        .collect();
    assert_eq!(fixes.len(), 8, "{:#?}", bundle.notices);
    assert!(
        fixes
            .iter()
            .all(|n| n.contains("cilium/cilium-manifests.yaml:")),
        "{fixes:#?}"
    );

    // Documents without fixes are kept as written, comments included.
    assert!(text.contains("# Source: cilium/templates/cilium-configmap.yaml\n"));
    assert!(
        text.contains("  # If you want to run cilium in debug mode change this value to true\n")
    );
    assert!(text.contains("# Source: cilium/templates/cilium-agent/daemonset.yaml\n"));
    // The YAML 1.1 octal mode keeps its value (0400 = 256) through the rewrite.
    let volumes = daemon_set["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let projected = volumes
        .iter()
        .find(|v| v["name"] == "clustermesh-secrets")
        .unwrap();
    assert_eq!(projected["projected"]["defaultMode"], 256);
}

#[test]
fn crs_applies_the_manifest_to_this_cluster_only() {
    for version in common::VERSIONS {
        let all = objects(&render_example("capi-1.yaml", version));
        let crs = of_kind(&all, "ClusterResourceSet").next().unwrap();
        assert_eq!(crs["spec"]["strategy"], "ApplyOnce");
        assert_eq!(
            crs["spec"]["resources"][0],
            serde_json::json!({"name": "capi-1-cilium", "kind": "ConfigMap"})
        );
        let selector = crs["spec"]["clusterSelector"]["matchLabels"]
            .as_object()
            .unwrap();
        let cluster = of_kind(&all, "Cluster").next().unwrap();
        let labels = cluster["metadata"]["labels"].as_object().unwrap();
        assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
        assert_eq!(selector["cluster.x-k8s.io/cluster-name"], "capi-1");
        assert_eq!(selector["cni"], "cilium");
    }
}

#[test]
fn refusing_to_fix_lists_every_problem() {
    let mut spec = common::load_example("capi-1.yaml");
    spec.cilium.fix = false;
    let err = capstan_render::render(&spec, &common::examples_dir(), &RenderOptions::default())
        .unwrap_err();
    let problems = err.problems();
    // One problem per missing setting, then what to do about them.
    assert_eq!(problems.len(), 9, "{err}");
    let text = err.to_string();
    assert!(text.contains("the spec has 9 problems"), "{text}");
    assert!(
        text.contains("DaemonSet kube-system/cilium: spec.template.spec.containers[0].env"),
        "{text}"
    );
    assert!(text.contains("KUBERNETES_SERVICE_HOST of container \"cilium-agent\" is missing; set it to the control-plane endpoint \"10.250.250.29\""), "{text}");
    assert!(
        problems[..8].iter().all(|p| p
            .location
            .as_deref()
            .is_some_and(|l| l.contains("cilium-manifests.yaml:"))),
        "{problems:#?}"
    );
    let last = &problems[8];
    assert_eq!(last.field.as_deref(), Some("cilium.manifest"));
    assert!(
        last.location
            .as_deref()
            .is_some_and(|l| l.starts_with(&format!(
                "{}:",
                common::examples_dir().join("capi-1.yaml").display()
            ))),
        "{last:?}"
    );
    assert!(
        last.message
            .contains("cilium install --version 1.16.5 --namespace kube-system"),
        "{last:?}"
    );
    assert!(last.message.contains("or set cilium.fix: true"), "{last:?}");
}

#[test]
fn a_manifest_rendered_with_the_printed_command_needs_no_fixes() {
    // Take the fixed manifest as what `cilium install` would print with the right settings.
    let bundle = render_example("capi-1.yaml", CapiVersion::V1beta1);
    let (text, _) = shipped_manifest(&bundle);
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "cilium/cilium-manifests.yaml", &text);
    let mut spec = common::load_example("capi-1.yaml");
    spec.cilium.fix = false;
    let again = capstan_render::render(&spec, dir.path(), &RenderOptions::default())
        .unwrap_or_else(|err| panic!("{err}"));
    let (shipped, _) = shipped_manifest(&again);
    assert_eq!(
        shipped, text,
        "an acceptable manifest is shipped byte for byte"
    );
    assert!(again.notices.iter().all(|n| !n.contains("patched")));
}

#[test]
fn config_settings_are_fixed_too() {
    let sample = capstan_render::generate::SAMPLE_CILIUM_MANIFEST
        .replace(
            "kube-proxy-replacement: \"true\"",
            "kube-proxy-replacement: \"false\"",
        )
        .replace("  ipam: \"kubernetes\"\n", "")
        .replace(
            "ipv4-native-routing-cidr: 10.244.0.0/16",
            "ipv4-native-routing-cidr: 10.0.0.0/8",
        );
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "cilium/cilium-manifests.yaml", &sample);
    let spec = common::load_example("capi-1.yaml");
    let bundle = capstan_render::render(&spec, dir.path(), &RenderOptions::default()).unwrap();
    let (_, values) = shipped_manifest(&bundle);
    let data = &find(&values, "ConfigMap", "cilium-config")["data"];
    assert_eq!(data["kube-proxy-replacement"], "true");
    assert_eq!(data["ipam"], "kubernetes");
    assert_eq!(data["ipv4-native-routing-cidr"], "10.244.0.0/16");
    assert!(
        bundle.notices.iter().any(|n| n.contains("ConfigMap kube-system/cilium-config: data.ipam: patched: set to \"kubernetes\" (was missing)")),
        "{:#?}",
        bundle.notices
    );
    assert!(
        bundle
            .notices
            .iter()
            .any(|n| n
                .contains("data.kube-proxy-replacement: patched: set to \"true\" (was \"false\")")),
        "{:#?}",
        bundle.notices
    );
}

#[test]
fn unusable_manifests_are_refused() {
    let spec = common::load_example("capi-1.yaml");
    // Missing file: located at the spec's cilium.manifest line, with the command to run.
    let dir = tempfile::tempdir().unwrap();
    let err = capstan_render::render(&spec, dir.path(), &RenderOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("capi-1.yaml:"), "{text}");
    assert!(text.contains("cilium.manifest: cannot read"), "{text}");
    assert!(text.contains("cilium install"), "{text}");
    assert!(!err.is_unreadable());
    // Not Cilium at all.
    common::write(
        dir.path(),
        "cilium/cilium-manifests.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n",
    );
    let err = capstan_render::render(&spec, dir.path(), &RenderOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("no ConfigMap cilium-config"), "{text}");
    assert!(text.contains("no DaemonSet cilium"), "{text}");
}

#[test]
fn manifests_with_secrets_ship_in_a_secret() {
    let sample = format!(
        "{}---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cilium-ca\n  namespace: kube-system\ndata:\n  ca.crt: Y2E=\n",
        capstan_render::generate::SAMPLE_CILIUM_MANIFEST
    );
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "cilium/cilium-manifests.yaml", &sample);
    let spec = common::load_example("capi-1.yaml");
    let bundle = capstan_render::render(&spec, dir.path(), &RenderOptions::default()).unwrap();
    let file = bundle.file("cluster/cilium.yaml").unwrap();
    assert!(file.secret);
    let all = objects(&bundle);
    assert_eq!(of_kind(&all, "ConfigMap").count(), 0);
    let secret = of_kind(&all, "Secret")
        .find(|s| s["metadata"]["name"] == "capi-1-cilium")
        .unwrap();
    assert_eq!(secret["type"], "addons.cluster.x-k8s.io/resource-set");
    let crs = of_kind(&all, "ClusterResourceSet").next().unwrap();
    assert_eq!(crs["spec"]["resources"][0]["kind"], "Secret");
}

#[test]
fn install_command_and_helm_values() {
    let bundle = render_example("capi-1.yaml", CapiVersion::V1beta1);
    assert_eq!(
        bundle.cilium_install_command,
        "cilium install --version 1.16.5 --namespace kube-system \
         --set k8sServiceHost=10.250.250.29 --set k8sServicePort=6443 \
         --set kubeProxyReplacement=true --set routingMode=native \
         --set ipv4NativeRoutingCIDR=10.244.0.0/16 --set autoDirectNodeRoutes=true \
         --set ipam.mode=kubernetes --set bgpControlPlane.enabled=true \
         --dry-run > cilium/cilium-manifests.yaml"
    );
    let values = capstan_manifest::parse_documents("values.yaml", &bundle.cilium_helm_values)
        .unwrap()
        .remove(0)
        .value;
    assert_eq!(
        values,
        serde_json::json!({
            "k8sServiceHost": "10.250.250.29",
            "k8sServicePort": 6443,
            "kubeProxyReplacement": true,
            "routingMode": "native",
            "ipv4NativeRoutingCIDR": "10.244.0.0/16",
            "autoDirectNodeRoutes": true,
            "ipam": {"mode": "kubernetes"},
            "bgpControlPlane": {"enabled": true},
        })
    );
    let readme = &bundle.file("README.md").unwrap().contents;
    assert!(readme.contains(&bundle.cilium_install_command));

    // Without BGP the BGP control plane is not asked for.
    let mut spec = common::load_example("capi-1.yaml");
    spec.bgp = None;
    let bundle = render(&spec, CapiVersion::V1beta1);
    assert!(!bundle.cilium_install_command.contains("bgpControlPlane"));
    assert!(bundle.file("router/frr.conf").is_none());
    assert!(bundle.file("workload/cilium-bgp.yaml").is_none());
}

#[test]
fn version_mismatch_is_reported() {
    let mut spec = common::load_example("capi-1.yaml");
    spec.cilium.version = Some("1.17.0".to_owned());
    let bundle = render(&spec, CapiVersion::V1beta1);
    assert!(
        bundle
            .cilium_install_command
            .starts_with("cilium install --version 1.17.0 ")
    );
    assert!(
        bundle
            .notices
            .iter()
            .any(|n| n.contains("the manifest is Cilium 1.16.5, cilium.version says 1.17.0")),
        "{:#?}",
        bundle.notices
    );
}

#[test]
fn render_error_kinds() {
    let err =
        capstan_render::load_spec(std::path::Path::new("/nonexistent/spec.yaml")).unwrap_err();
    assert!(err.is_unreadable());
    assert!(matches!(err, RenderError::Read { .. }));
}
