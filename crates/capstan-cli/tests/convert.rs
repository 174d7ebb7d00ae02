//! `capstan convert`: Cluster API manifests from v1alpha4 / v1beta1 to v1beta2.
//!
//! Inputs: the KVM design's example cluster (seed 003, v1alpha4), the capi-1 bundle `capstan
//! render` writes in v1beta1 (the README's), CAPM3's clusterctl template (a fixture), and small
//! hand-written manifests for comments and bad input. Every converted object is converted back by
//! the API server's own conversion (`ModelConverter`) and compared with the input; the converted
//! seed example is applied to a real `capstan serve`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use capstan_apiserver::conversion::{Converter, ModelConverter};
use serde_json::Value;

mod support;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn convert(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("convert")
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn documents(text: &str) -> Vec<Value> {
    capstan_manifest::parse_documents("t.yaml", text)
        .unwrap()
        .into_iter()
        .map(|d| d.value)
        .filter(|v| !v.is_null())
        .collect()
}

/// What reads the same in v1beta2, written one way: references written as v1beta1 name a version,
/// the v1beta2 form only the group (the version read back is the one the referenced kind serves),
/// so references are compared by group; a reference's namespace is always the object's own in
/// v1beta2; durations are compared by length (`5m` reads back as `5m0s`).
fn normalized(value: &mut Value, own_namespace: Option<&str>) {
    match value {
        Value::Object(map) => {
            let is_reference = map.contains_key("kind") && map.contains_key("name");
            if is_reference && !map.contains_key("metadata") {
                if let Some(Value::String(api_version)) = map.get("apiVersion") {
                    let group = api_version.split('/').next().unwrap_or_default().to_owned();
                    map.insert("apiVersion".into(), Value::String(group));
                }
                if map.get("namespace").and_then(Value::as_str) == own_namespace {
                    map.remove("namespace");
                }
            }
            map.values_mut().for_each(|v| normalized(v, own_namespace));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| normalized(v, own_namespace)),
        Value::String(text) => {
            let has_unit = text.ends_with(['s', 'm', 'h']);
            if has_unit && let Ok(nanos) = capstan_model::convert::parse_nanos(text) {
                *text = format!("{nanos}ns");
            }
        }
        _ => {}
    }
}

/// Converts every output object back to its input's version with the server's conversion and
/// compares (v1alpha4 inputs are compared in v1beta1, which has the same fields).
fn round_trips(input: &[Value], output: &[Value]) {
    assert_eq!(input.len(), output.len());
    for (before, after) in input.iter().zip(output) {
        let api_version = before["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = before["kind"].as_str().unwrap_or_default();
        let is_capi = group.ends_with("cluster.x-k8s.io");
        if !is_capi || version == "v1beta2" {
            assert_eq!(before, after, "{kind} should pass through unchanged");
            continue;
        }
        assert!(
            after["apiVersion"].as_str().unwrap().ends_with("/v1beta2"),
            "{after}"
        );
        let served_back = if kind.starts_with("KVM") {
            version
        } else {
            "v1beta1"
        };
        let mut back = ModelConverter
            .convert(group, kind, after.clone(), served_back)
            .unwrap();
        let mut expected = before.clone();
        expected["apiVersion"] = Value::String(format!("{group}/{served_back}"));
        // v1beta2 takes kubeadm's networking from the Cluster: it comes back only as the
        // Cluster says, so it is compared with the Cluster's.
        if let Some(networking) = expected
            .pointer_mut("/spec/kubeadmConfigSpec/clusterConfiguration")
            .and_then(Value::as_object_mut)
            .and_then(|c| c.remove("networking"))
        {
            let cluster = input.iter().find(|o| o["kind"] == "Cluster").unwrap();
            let network = &cluster["spec"]["clusterNetwork"];
            assert_eq!(networking["podSubnet"], network["pods"]["cidrBlocks"][0]);
            assert_eq!(
                networking["serviceSubnet"],
                network["services"]["cidrBlocks"][0]
            );
            let spec = expected["spec"]["kubeadmConfigSpec"]
                .as_object_mut()
                .unwrap();
            if spec["clusterConfiguration"].as_object().unwrap().is_empty() {
                spec.remove("clusterConfiguration");
            }
        }
        let namespace = before["metadata"]["namespace"].as_str();
        normalized(&mut back, namespace);
        normalized(&mut expected, namespace);
        assert_eq!(back, expected, "{kind} does not round-trip");
    }
}

#[test]
fn the_kvm_designs_example_is_refused_with_reasons_then_converts_once_fixed() {
    let fixture = fixtures().join("seed-003-kvm-example.yaml");
    let original = std::fs::read_to_string(&fixture).unwrap();
    let out = convert(&[fixture.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "nothing may be written: {}",
        text(&out.stdout)
    );
    let cluster_line = original
        .lines()
        .position(|l| l == "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4")
        .unwrap()
        + 1;
    assert!(
        stderr.contains(&format!(
            "seed-003-kvm-example.yaml:{cluster_line}: apiVersion: Cluster is not a kind of infrastructure.cluster.x-k8s.io: it belongs to cluster.x-k8s.io"
        )),
        "{stderr}"
    );
    let template_line = original
        .lines()
        .position(|l| l == "  infrastructureTemplate:")
        .unwrap()
        + 1;
    assert!(
        stderr.contains(&format!(
            "seed-003-kvm-example.yaml:{template_line}: spec.infrastructureTemplate:"
        )) && stderr.contains("spec.machineTemplate.infrastructureRef"),
        "{stderr}"
    );

    // Fixed as the refusals say: the Cluster in its own group, the control plane's template where
    // v1alpha4 keeps it (and its replicas and version at the spec's level).
    let fixed = original
        .replacen(
            "kind: Cluster\napiVersion: infrastructure.cluster.x-k8s.io/v1alpha4",
            "kind: Cluster\napiVersion: cluster.x-k8s.io/v1alpha4",
            1,
        )
        .replace(
            "spec:\n  infrastructureTemplate:\n    apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4\n    kind: KVMMachineTemplate\n    name: example-control-plane\n",
            "spec:\n  replicas: 1\n  version: v1.21.2\n  machineTemplate:\n    infrastructureRef:\n      apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4\n      kind: KVMMachineTemplate\n      name: example-control-plane\n",
        )
        .replace("    replicas: 1\n    version: v1.21.2\n", "");
    // The design's MachineDeployment names its Cluster only by label: convert fills the
    // clusterName fields v1beta2 requires from it (checked below, and by the apply at the end).
    assert_ne!(fixed, original);
    assert!(!fixed.contains("clusterName"), "{fixed}");
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("example.yaml");
    std::fs::write(&path, &fixed).unwrap();
    let out = convert(&[path.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let converted = text(&out.stdout);
    let label_line = fixed
        .lines()
        .position(|l| l == "    cluster.x-k8s.io/cluster-name: example")
        .unwrap()
        + 1;
    assert!(
        text(&out.stderr).contains(&format!(
            "note: {}:{label_line}: MachineDeployment example-worker: spec.clusterName set to \"example\", from metadata.labels[\"cluster.x-k8s.io/cluster-name\"]",
            path.display()
        )),
        "{}",
        text(&out.stderr)
    );
    for comment in [
        "#### KVMCluster\n",
        "#### MachineDeployment (worker)\n",
        "# The full example",
    ] {
        assert!(
            converted.contains(comment),
            "{comment:?} lost:\n{converted}"
        );
    }
    let mut before = documents(&fixed);
    let after = documents(&converted);
    let deployment = after
        .iter()
        .find(|o| o["kind"] == "MachineDeployment")
        .unwrap();
    assert_eq!(deployment["spec"]["clusterName"], "example");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["clusterName"],
        "example"
    );
    // Round trips as the input with the fields filled.
    for object in before
        .iter_mut()
        .filter(|o| o["kind"] == "MachineDeployment")
    {
        object["spec"]["clusterName"] = "example".into();
        object["spec"]["template"]["spec"]["clusterName"] = "example".into();
    }
    round_trips(&before, &after);
    assert!(
        after
            .iter()
            .filter(|o| o["kind"] != "Release")
            .all(|o| o["apiVersion"].as_str().unwrap().ends_with("/v1beta2")),
        "{converted}"
    );
    let kcp = after
        .iter()
        .find(|o| o["kind"] == "KubeadmControlPlane")
        .unwrap();
    assert_eq!(
        kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"],
        serde_json::json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMMachineTemplate", "name": "example-control-plane"})
    );
    assert_eq!(
        kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"],
        serde_json::json!([{"name": "cloud-provider", "value": "kvm"}])
    );
    assert!(
        converted.contains("kind: Release\nmetadata:\n  name: v20.0.0\n"),
        "{converted}"
    );

    // The converted objects apply to capstan's API as they are (all but the Release, whose
    // group the server does not serve).
    let applicable: Vec<&str> = converted
        .split("\n---\n")
        .filter(|d| !d.contains("kind: Release"))
        .collect();
    let manifest = work.path().join("converted.yaml");
    std::fs::write(&manifest, applicable.join("\n---\n")).unwrap();
    let server = support::Serve::start_with(
        &work.path().join("data"),
        &work.path().join("serve.log"),
        &[],
    );
    let (ok, out) = support::capstan(
        &server.kubeconfig,
        &["apply", "-f", manifest.to_str().unwrap()],
    );
    assert!(ok, "apply: {out}");
    let stored = support::get(&server.kubeconfig, "kubeadmcontrolplanes", "example");
    assert_eq!(stored["spec"]["replicas"], 1);
    let templates = support::items(&server.kubeconfig, "kvmmachinetemplates");
    assert_eq!(templates.len(), 2);
    let stored = support::get(&server.kubeconfig, "machinedeployments", "example-worker");
    assert_eq!(stored["spec"]["clusterName"], "example");
}

/// The seed's MachineDeployment alone, as the design wrote it.
fn seed_machine_deployment() -> String {
    let seed = std::fs::read_to_string(fixtures().join("seed-003-kvm-example.yaml")).unwrap();
    let document = seed
        .split("\n---\n")
        .find(|d| d.contains("kind: MachineDeployment"))
        .unwrap()
        .to_owned();
    assert!(document.contains("apiVersion: cluster.x-k8s.io/v1alpha4"));
    assert!(!document.contains("clusterName"), "{document}");
    document
}

#[test]
fn a_missing_cluster_name_is_filled_from_the_cluster_label_or_refused() {
    let work = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let path = work.path().join(name);
        std::fs::write(&path, body).unwrap();
        path
    };
    // Only the template's label left: both fields come from it.
    let seed = seed_machine_deployment();
    let template_only = seed.replacen(
        "  labels:\n    cluster.x-k8s.io/cluster-name: example\n",
        "",
        1,
    );
    assert_ne!(template_only, seed);
    let path = write("template-label.yaml", &template_only);
    let out = convert(&[path.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let deployment = &documents(&text(&out.stdout))[0];
    assert_eq!(deployment["apiVersion"], "cluster.x-k8s.io/v1beta2");
    assert_eq!(deployment["spec"]["clusterName"], "example");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["clusterName"],
        "example"
    );
    let label_line = template_only
        .lines()
        .position(|l| l == "        cluster.x-k8s.io/cluster-name: example")
        .unwrap()
        + 1;
    for field in ["spec.clusterName", "spec.template.spec.clusterName"] {
        assert!(
            stderr.contains(&format!(
                "template-label.yaml:{label_line}: MachineDeployment example-worker: {field} set to \"example\", from spec.template.metadata.labels[\"cluster.x-k8s.io/cluster-name\"]"
            )),
            "{field}: {stderr}"
        );
    }

    // Nothing names the Cluster: refused at the spec, nothing written.
    let unnamed = template_only.replace("cluster.x-k8s.io/cluster-name: example", "pool: worker");
    assert!(!unnamed.contains("cluster-name"), "{unnamed}");
    let path = write("unnamed.yaml", &unnamed);
    let before = std::fs::read_to_string(&path).unwrap();
    let out = convert(&["-i", path.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let spec_line = unnamed.lines().position(|l| l == "spec:").unwrap() + 1;
    assert!(
        stderr.contains(&format!(
            "unnamed.yaml:{spec_line}: spec.clusterName: spec.clusterName and spec.template.spec.clusterName are required in v1beta2 and nothing in the object names its Cluster"
        )) && stderr.contains("fix: set spec.clusterName and spec.template.spec.clusterName to the name of the Cluster"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was written"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);

    // Labels that name two Clusters: no guess.
    let disagreeing = seed.replacen(
        "      labels:\n        cluster.x-k8s.io/cluster-name: example\n",
        "      labels:\n        cluster.x-k8s.io/cluster-name: other\n",
        1,
    );
    assert_ne!(disagreeing, seed);
    let path = write("disagreeing.yaml", &disagreeing);
    let out = convert(&[path.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains("the Cluster labels disagree") && stderr.contains("\"other\""),
        "{stderr}"
    );
}

#[test]
fn the_capi_1_bundle_converts_and_matches_the_v1beta2_rendering() {
    let work = tempfile::tempdir().unwrap();
    let spec = support::capi_1_spec(work.path(), |t| t);
    let v1 = work.path().join("v1beta1");
    let v2 = work.path().join("v1beta2");
    support::render(&spec, &v1, &[]);
    support::render(&spec, &v2, &["--api-version", "v1beta2"]);
    for file in ["cluster/cluster.yaml", "cluster/cilium.yaml"] {
        let input = std::fs::read_to_string(v1.join(file)).unwrap();
        let path = v1.join(file);
        let out = convert(&[path.to_str().unwrap()], None);
        assert!(out.status.success(), "{file}: {}", text(&out.stderr));
        let converted = text(&out.stdout);
        assert!(
            converted.starts_with("# Generated by capstan render."),
            "{converted}"
        );
        round_trips(&documents(&input), &documents(&converted));
        let rendered = std::fs::read_to_string(v2.join(file)).unwrap();
        assert_eq!(
            documents(&converted),
            documents(&rendered),
            "{file}: converting the v1beta1 bundle does not give the v1beta2 bundle"
        );
        // In place: the same text, atomically replacing the file.
        let copy = work.path().join("copy.yaml");
        std::fs::write(&copy, &input).unwrap();
        let out = convert(&["-i", copy.to_str().unwrap()], None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(out.stdout.is_empty());
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), converted);
        let leftovers: Vec<_> = std::fs::read_dir(work.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("capstan-convert"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}

#[test]
fn capm3s_clusterctl_template_converts_its_v1beta1_objects() {
    // The template as clusterctl reads it, its two block variables (whole lines of YAML) left
    // empty; the other `${VARIABLES}` are strings to YAML and stay as they are.
    let template =
        std::fs::read_to_string(fixtures().join("capm3-clusterctl-cluster.yaml")).unwrap();
    let input = template
        .replace("${CTLPLANE_KUBEADM_EXTRA_CONFIG}\n", "")
        .replace("${WORKERS_KUBEADM_EXTRA_CONFIG}\n", "");
    assert_ne!(input, template);
    let work = tempfile::tempdir().unwrap();
    let fixture = work.path().join("cluster-template.yaml");
    std::fs::write(&fixture, &input).unwrap();
    let out = convert(&[fixture.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let converted = text(&out.stdout);
    let before = documents(&input);
    let after = documents(&converted);
    round_trips(&before, &after);
    assert!(
        before
            .iter()
            .any(|o| o["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1beta1")
    );
    assert!(
        after
            .iter()
            .all(|o| o["apiVersion"].as_str().unwrap().ends_with("/v1beta2")),
        "{converted}"
    );
    // The header comment and every v1beta2 document are kept as written.
    assert!(converted.starts_with("# The objects `clusterctl generate cluster` makes"));
    let first_v1beta2 = input.split("\n---\n").next().unwrap();
    assert!(converted.contains(first_v1beta2));
}

const COMMENTED: &str = "\
# workers, converted from v1beta1
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: w   # the pool
  namespace: default
spec:
  clusterName: c
  replicas: 2          # two workers
  selector:
    matchLabels: {pool: w}
  template:
    metadata:
      labels: {pool: w}
    spec:
      clusterName: c
      version: v1.31.4
      # drained for five minutes before deletion
      nodeDrainTimeout: 5m
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: w
      infrastructureRef:   # bare metal
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: Metal3MachineTemplate
        name: w
---
# not Cluster API: passes through
apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data:
  key: value   # kept
";

#[test]
fn comments_survive_and_stdin_goes_to_stdout() {
    let out = convert(&[], Some(COMMENTED));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let converted = text(&out.stdout);
    for kept in [
        "# workers, converted from v1beta1\n",
        "  name: w   # the pool\n",
        "  replicas: 2          # two workers\n",
        "      infrastructureRef:   # bare metal\n",
        "# not Cluster API: passes through\n",
        "  key: value   # kept\n",
        "    matchLabels: {pool: w}\n",
    ] {
        assert!(converted.contains(kept), "{kept:?} lost:\n{converted}");
    }
    assert!(
        converted.contains("      # drained for five minutes before deletion\n      deletion:\n        nodeDrainTimeoutSeconds: 300\n"),
        "{converted}"
    );
    assert!(
        converted.contains("        apiGroup: infrastructure.cluster.x-k8s.io\n        kind: Metal3MachineTemplate\n"),
        "{converted}"
    );
    round_trips(&documents(COMMENTED), &documents(&converted));
    assert!(text(&out.stderr).contains("<stdin>: 1 of 2 document(s) to v1beta2"));
}

#[test]
fn bad_input_is_refused_with_its_line_and_nothing_is_written() {
    let work = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let path = work.path().join(name);
        std::fs::write(&path, body).unwrap();
        path
    };

    // Malformed YAML: the seed's own control plane, as the design wrote it.
    let malformed = write(
        "malformed.yaml",
        "apiVersion: controlplane.cluster.x-k8s.io/v1alpha4\nkind: KubeadmControlPlane\nmetadata:\n  name: example\nspec:\n  kubeadmConfigSpec:\n    clusterConfiguration:\n      apiServer:\n        extraArgs:\n        cloud-provider: kvm\n     controllerManager:\n      extraArgs:\n        cloud-provider: kvm\n",
    );
    let out = convert(&["-i", malformed.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("malformed.yaml:11"), "{stderr}");

    // An apiVersion capstan does not know.
    let old = write(
        "old.yaml",
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Machine\nmetadata: {name: ok}\nspec: {clusterName: c}\n---\napiVersion: cluster.x-k8s.io/v1alpha3\nkind: Cluster\nmetadata: {name: c}\n",
    );
    let before = std::fs::read_to_string(&old).unwrap();
    let out = convert(&["-i", old.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("old.yaml:6: apiVersion: cluster.x-k8s.io/v1alpha3 is a version of Cluster capstan does not know"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&old).unwrap(),
        before,
        "a refused file must not be half converted"
    );

    // A field v1beta2 has no place for.
    let lossy = write(
        "lossy.yaml",
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment\nmetadata: {name: w}\nspec:\n  clusterName: c\n  progressDeadlineSeconds: 600\n  template:\n    spec:\n      clusterName: c\n      bootstrap: {dataSecretName: s}\n      infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: Metal3MachineTemplate, name: w}\n",
    );
    let out = convert(&[lossy.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains("lossy.yaml:6: spec.progressDeadlineSeconds: spec.progressDeadlineSeconds has no place in v1beta2")
            && stderr.contains("remove it"),
        "{stderr}"
    );

    // A duration v1beta2's whole seconds cannot hold, and kubeadm networking the Cluster does
    // not carry.
    let rounded = write(
        "rounded.yaml",
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Machine\nmetadata: {name: m}\nspec:\n  clusterName: c\n  nodeDrainTimeout: 1500ms\n  bootstrap: {dataSecretName: s}\n---\napiVersion: controlplane.cluster.x-k8s.io/v1beta1\nkind: KubeadmControlPlane\nmetadata: {name: c}\nspec:\n  version: v1.31.4\n  machineTemplate:\n    infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: Metal3MachineTemplate, name: c}\n  kubeadmConfigSpec:\n    clusterConfiguration:\n      networking: {podSubnet: 10.244.0.0/16}\n",
    );
    let out = convert(&[rounded.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("rounded.yaml:6: spec.nodeDrainTimeout"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "rounded.yaml:18: spec.kubeadmConfigSpec.clusterConfiguration.networking.podSubnet"
        ) && stderr.contains("clusterNetwork.pods.cidrBlocks"),
        "{stderr}"
    );

    // A Cluster API kind capstan does not model is refused; another provider's kind passes.
    let unmodelled = write(
        "class.yaml",
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: DockerCluster\nmetadata: {name: d}\n---\napiVersion: cluster.x-k8s.io/v1beta1\nkind: ClusterClass\nmetadata: {name: c}\n",
    );
    let out = convert(&[unmodelled.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "class.yaml:6: kind: ClusterClass (cluster.x-k8s.io) is not a kind capstan models"
        ),
        "{stderr}"
    );
    let other_provider = write(
        "docker.yaml",
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: DockerCluster\nmetadata: {name: d}\n",
    );
    let out = convert(&[other_provider.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        std::fs::read_to_string(&other_provider).unwrap()
    );
    assert!(text(&out.stderr).contains("another provider's kind"));

    // Standard input cannot be rewritten in place.
    let out = convert(&["-i", "-"], Some(COMMENTED));
    assert_eq!(out.status.code(), Some(2));
}
