//! The rendered bundles of both examples, in both API versions, judged by the real consumers:
//! the upstream CRD schemas, cloud-init, FRR's parser, and capstan's own manifest reader.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use capstan_render::CapiVersion;
use common::{EXAMPLES, VERSIONS, objects, of_kind, render, render_example};
use serde_json::Value;

#[test]
fn every_object_validates_against_its_upstream_crd() {
    let crds = capstan_schema::CrdSet::load_dir(&common::crds_dir())
        .unwrap_or_else(|err| panic!("reference CRDs: {err}"));
    for example in EXAMPLES {
        for version in VERSIONS {
            let bundle = render_example(example, version);
            let mut kinds = BTreeSet::new();
            for (file, object) in objects(&bundle) {
                let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
                let kind = object["kind"].as_str().unwrap_or_default().to_owned();
                let name = &object["metadata"]["name"];
                kinds.insert(format!("{api_version} {kind}"));
                if api_version == "v1" && (kind == "Secret" || kind == "ConfigMap") {
                    continue;
                }
                let schema = crds.schema_for(&api_version, &kind).unwrap_or_else(|| {
                    panic!("{example} {version:?} {file}: no CRD schema for {api_version} {kind}")
                });
                let violations = capstan_schema::validate(schema, &object);
                assert!(
                    violations.is_empty(),
                    "{example} {version:?} {file}: {kind} {name}: {violations:#?}"
                );
            }
            let group_version = version.as_str();
            for expected in [
                format!("cluster.x-k8s.io/{group_version} Cluster"),
                format!("controlplane.cluster.x-k8s.io/{group_version} KubeadmControlPlane"),
                format!("infrastructure.cluster.x-k8s.io/{group_version} Metal3Cluster"),
                format!("infrastructure.cluster.x-k8s.io/{group_version} Metal3MachineTemplate"),
                format!("addons.cluster.x-k8s.io/{group_version} ClusterResourceSet"),
                "metal3.io/v1alpha1 BareMetalHost".to_owned(),
                "cilium.io/v2 CiliumBGPClusterConfig".to_owned(),
                "cilium.io/v2 CiliumBGPPeerConfig".to_owned(),
                "cilium.io/v2 CiliumBGPAdvertisement".to_owned(),
            ] {
                assert!(
                    kinds.contains(&expected),
                    "{example}: no {expected} in {kinds:?}"
                );
            }
            if example == "capi-1.yaml" {
                for expected in [
                    format!("cluster.x-k8s.io/{group_version} MachineDeployment"),
                    format!("cluster.x-k8s.io/{group_version} MachineHealthCheck"),
                    format!("bootstrap.cluster.x-k8s.io/{group_version} KubeadmConfigTemplate"),
                ] {
                    assert!(kinds.contains(&expected), "{example}: no {expected}");
                }
            }
        }
    }
}

#[test]
fn rendering_is_deterministic() {
    for example in EXAMPLES {
        for version in VERSIONS {
            // Loaded and rendered twice from scratch: no state, no hash-map order leaks out.
            let first = render_example(example, version);
            let second = render_example(example, version);
            assert_eq!(first, second, "{example} {version:?}");
            let paths: Vec<_> = first.files.iter().map(|f| f.path.clone()).collect();
            let mut sorted = paths.clone();
            sorted.sort();
            assert_eq!(paths, sorted);
        }
    }
    let written = |bundle: &capstan_render::Bundle| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        capstan_render::write_bundle(bundle, &out).unwrap();
        let mut files = Vec::new();
        for file in &bundle.files {
            files.push(std::fs::read(out.join(&file.path)).unwrap());
        }
        files.push(std::fs::read(out.join(capstan_render::MARKER_FILE)).unwrap());
        files
    };
    let bundle = render_example("capi-1.yaml", CapiVersion::V1beta1);
    assert_eq!(
        written(&bundle),
        written(&render_example("capi-1.yaml", CapiVersion::V1beta1))
    );
}

#[test]
fn bundle_layout() {
    let bundle = render_example("capi-1.yaml", CapiVersion::V1beta1);
    let paths: Vec<String> = bundle
        .files
        .iter()
        .map(|f| f.path.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        paths,
        [
            "README.md",
            "cluster/cilium.yaml",
            "cluster/cluster.yaml",
            "hosts/capi-1-cp-0.yaml",
            "hosts/capi-1-cp-1.yaml",
            "hosts/capi-1-cp-2.yaml",
            "hosts/capi-1-worker-0.yaml",
            "router/frr.conf",
            "workload/cilium-bgp.yaml",
        ]
    );
    for file in &bundle.files {
        let is_host = file.path.starts_with("hosts");
        assert_eq!(file.secret, is_host, "{}", file.path.display());
    }
}

#[test]
fn written_bundle_reads_back_without_duplicates() {
    for example in EXAMPLES {
        let bundle = render_example(example, CapiVersion::V1beta2);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("bundle");
        capstan_render::write_bundle(&bundle, &out).unwrap();
        let loaded = capstan_manifest::load_path(&out).unwrap_or_else(|err| panic!("{err}"));
        let yaml_objects = objects(&bundle).len();
        assert_eq!(loaded.len(), yaml_objects);
        capstan_manifest::ObjectSet::new(loaded).unwrap_or_else(|err| panic!("{example}: {err}"));
    }
}

#[test]
fn management_objects_are_namespaced_and_labelled() {
    for example in EXAMPLES {
        for version in VERSIONS {
            let bundle = render_example(example, version);
            let cluster = if example == "capi-1.yaml" {
                "capi-1"
            } else {
                "super"
            };
            for (file, object) in objects(&bundle) {
                if file.starts_with("workload/") {
                    assert!(object["metadata"].get("namespace").is_none(), "{file}");
                    continue;
                }
                assert_eq!(
                    object["metadata"]["namespace"], "default",
                    "{file}: {object}"
                );
                assert_eq!(
                    object["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], cluster,
                    "{file}: {}",
                    object["metadata"]["name"]
                );
            }
        }
    }
}

fn bmh<'a>(objects: &'a [(String, Value)], name: &str) -> &'a Value {
    of_kind(objects, "BareMetalHost")
        .find(|o| o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no BareMetalHost {name}"))
}

#[test]
fn hosts_are_selected_by_the_templates() {
    for version in VERSIONS {
        let bundle = render_example("capi-1.yaml", version);
        let all = objects(&bundle);
        let host = bmh(&all, "capi-1-worker-0");
        assert_eq!(host["spec"]["online"], true);
        assert!(
            host["spec"].get("image").is_none(),
            "CAPM3 sets the image when claiming"
        );
        assert_eq!(host["spec"]["bootMACAddress"], "52:54:00:6c:3c:13");
        assert_eq!(
            host["spec"]["bmc"]["credentialsName"],
            "capi-1-worker-0-bmc-secret"
        );
        assert_eq!(
            host["spec"]["networkData"]["name"],
            "capi-1-worker-0-network-data"
        );
        let labels = host["metadata"]["labels"].as_object().unwrap();
        for template in of_kind(&all, "Metal3MachineTemplate") {
            let selector = template["spec"]["template"]["spec"]["hostSelector"]["matchLabels"]
                .as_object()
                .unwrap();
            let matches = selector.iter().all(|(k, v)| labels.get(k) == Some(v));
            let is_worker_template = template["metadata"]["name"] == "capi-1-workers";
            assert_eq!(matches, is_worker_template, "{template}");
            // The cluster-name label is removed by CAPM3 on release, so it must not select.
            assert!(!selector.contains_key("cluster.x-k8s.io/cluster-name"));
        }
        let deployment = of_kind(&all, "MachineDeployment").next().unwrap();
        assert_eq!(
            deployment["spec"]["selector"]["matchLabels"],
            deployment["spec"]["template"]["metadata"]["labels"]
        );
        assert_eq!(deployment["spec"]["replicas"], 1);
        assert_eq!(deployment["spec"]["template"]["spec"]["version"], "v1.31.4");
        let secret = of_kind(&all, "Secret")
            .find(|o| o["metadata"]["name"] == "capi-1-worker-0-bmc-secret")
            .unwrap();
        assert_eq!(secret["data"]["username"], "YWRtaW4=");
        assert_eq!(secret["data"]["password"], "cGFzc3dvcmQ=");
    }
}

#[test]
fn control_plane_shape_per_version() {
    let v1 = objects(&render_example("capi-1.yaml", CapiVersion::V1beta1));
    let kcp = of_kind(&v1, "KubeadmControlPlane").next().unwrap();
    let config = &kcp["spec"]["kubeadmConfigSpec"];
    assert_eq!(
        config["clusterConfiguration"]["networking"]["podSubnet"],
        "10.244.0.0/16"
    );
    assert_eq!(
        config["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]["node-labels"],
        "metal3.io/uuid={{ ds.meta_data.uuid }}"
    );
    assert_eq!(
        config["initConfiguration"]["skipPhases"][0],
        "addon/kube-proxy"
    );
    assert_eq!(
        config["joinConfiguration"]["skipPhases"][0],
        "addon/kube-proxy"
    );
    assert_eq!(
        kcp["spec"]["machineTemplate"]["infrastructureRef"]["apiVersion"],
        "infrastructure.cluster.x-k8s.io/v1beta1"
    );
    let template = of_kind(&v1, "Metal3MachineTemplate").next().unwrap();
    assert_eq!(
        template["spec"]["template"]["spec"]["image"]["format"],
        "raw"
    );

    let v2 = objects(&render_example("capi-1.yaml", CapiVersion::V1beta2));
    let kcp = of_kind(&v2, "KubeadmControlPlane").next().unwrap();
    let config = &kcp["spec"]["kubeadmConfigSpec"];
    assert!(config.get("clusterConfiguration").is_none());
    assert_eq!(
        config["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"][0],
        serde_json::json!({"name": "node-labels", "value": "metal3.io/uuid={{ ds.meta_data.uuid }}"})
    );
    assert_eq!(
        kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["apiGroup"],
        "infrastructure.cluster.x-k8s.io"
    );
    let template = of_kind(&v2, "Metal3MachineTemplate").next().unwrap();
    assert_eq!(
        template["spec"]["template"]["spec"]["image"]["diskFormat"],
        "raw"
    );
    let cluster = of_kind(&v2, "Cluster").next().unwrap();
    assert_eq!(
        cluster["spec"]["clusterNetwork"]["pods"]["cidrBlocks"][0],
        "10.244.0.0/16"
    );
    assert_eq!(
        cluster["spec"]["controlPlaneEndpoint"]["host"],
        "10.250.250.29"
    );
    assert_eq!(cluster["metadata"]["labels"]["cni"], "cilium");
    let mhc = of_kind(&v2, "MachineHealthCheck").next().unwrap();
    assert_eq!(
        mhc["spec"]["checks"]["unhealthyNodeConditions"][0]["timeoutSeconds"],
        300
    );
    assert_eq!(
        mhc["spec"]["remediation"]["triggerIf"]["unhealthyLessThanOrEqualTo"],
        "40%"
    );
    let v1_mhc = of_kind(&v1, "MachineHealthCheck").next().unwrap();
    assert_eq!(
        v1_mhc["spec"]["unhealthyConditions"][1]["status"],
        "Unknown"
    );
    assert_eq!(v1_mhc["spec"]["unhealthyConditions"][1]["timeout"], "300s");
}

fn kube_vip_manifest(all: &[(String, Value)]) -> String {
    let kcp = of_kind(all, "KubeadmControlPlane").next().unwrap();
    kcp["spec"]["kubeadmConfigSpec"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/etc/kubernetes/manifests/kube-vip.yaml")
        .and_then(|f| f["content"].as_str())
        .unwrap()
        .to_owned()
}

fn env_of(pod: &Value) -> Vec<(String, Option<String>)> {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn kube_vip_static_pod() {
    let all = objects(&render_example("capi-1.yaml", CapiVersion::V1beta1));
    let text = kube_vip_manifest(&all);
    let pod = &capstan_manifest::load_str("kube-vip.yaml", &text).unwrap()[0].value;
    let env = env_of(pod);
    let get = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.clone())
    };
    assert_eq!(get("address").as_deref(), Some("10.250.250.29"));
    assert!(get("vip_address").is_none());
    assert_eq!(get("vip_subnet").as_deref(), Some("32"));
    assert_eq!(get("port").as_deref(), Some("6443"));
    assert_eq!(get("vip_arp").as_deref(), Some("true"));
    assert_eq!(get("cp_enable").as_deref(), Some("true"));
    assert_eq!(get("vip_leaderelection").as_deref(), Some("true"));
    assert!(get("vip_interface").is_none(), "capi-1 names no interface");
    assert_eq!(pod["spec"]["hostNetwork"], true);
    assert_eq!(
        pod["spec"]["volumes"][0]["hostPath"]["path"],
        "/etc/kubernetes/admin.conf"
    );
    assert_eq!(
        pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"],
        serde_json::json!(["NET_ADMIN", "NET_RAW"])
    );

    let super_all = objects(&render_example("super.yaml", CapiVersion::V1beta1));
    let super_pod =
        &capstan_manifest::load_str("k.yaml", &kube_vip_manifest(&super_all)).unwrap()[0].value;
    assert!(
        env_of(super_pod).contains(&("vip_interface".to_owned(), Some("bond0.2000".to_owned())))
    );
}

#[test]
fn super_admin_workaround_follows_the_kubernetes_version() {
    for (version, expected) in [("v1.31.4", true), ("v1.29.0", true), ("v1.28.9", false)] {
        let mut spec = common::load_example("capi-1.yaml");
        spec.kubernetes.version = version.to_owned();
        let all = objects(&render(&spec, CapiVersion::V1beta1));
        let kcp = of_kind(&all, "KubeadmControlPlane").next().unwrap();
        let config = &kcp["spec"]["kubeadmConfigSpec"];
        let has_file = config["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "/etc/kube-vip-prepare.sh");
        let pre = config["preKubeadmCommands"].to_string();
        let post = config["postKubeadmCommands"].to_string();
        assert_eq!(has_file, expected, "{version}");
        assert_eq!(pre.contains("kube-vip-prepare.sh"), expected, "{version}");
        assert_eq!(
            post.contains("kube-vip-prepare.sh --restore"),
            expected,
            "{version}"
        );
        // The DNS wait runs first, on every version.
        assert!(
            config["preKubeadmCommands"][0]
                .as_str()
                .unwrap()
                .contains("capstan-wait-for-dns.sh registry.k8s.io 60")
        );
        // Workers never run the kube-vip script.
        for template in of_kind(&all, "KubeadmConfigTemplate") {
            assert!(!template.to_string().contains("kube-vip"), "{version}");
        }
    }
}

/// The kube-vip script run for real against the rendered manifest: init switches the host path to
/// super-admin.conf, `--restore` switches it back, a joining node keeps admin.conf.
#[test]
fn kube_vip_prepare_script_rewrites_the_rendered_manifest() {
    let sh = common::require_tool("sh");
    let all = objects(&render_example("capi-1.yaml", CapiVersion::V1beta1));
    let manifest_text = kube_vip_manifest(&all);
    let dir = tempfile::tempdir().unwrap();
    let script = common::write(
        dir.path(),
        "kube-vip-prepare.sh",
        capstan_render::bootstrap::KUBE_VIP_PREPARE_SCRIPT,
    );
    let manifest = common::write(dir.path(), "manifests/kube-vip.yaml", &manifest_text);
    let init_config = dir.path().join("kubeadm.yaml");
    let host_path = || {
        let text = std::fs::read_to_string(&manifest).unwrap();
        let pod = capstan_manifest::load_str("k.yaml", &text)
            .unwrap()
            .remove(0)
            .value;
        (
            pod["spec"]["volumes"][0]["hostPath"]["path"]
                .as_str()
                .unwrap()
                .to_owned(),
            pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
                .as_str()
                .unwrap()
                .to_owned(),
        )
    };
    let run_script = |arg: Option<&str>| {
        let mut command = Command::new(&sh);
        command
            .arg(&script)
            .env("KUBE_VIP_MANIFEST", &manifest)
            .env("KUBEADM_INIT_CONFIG", &init_config);
        if let Some(arg) = arg {
            command.arg(arg);
        }
        common::run(&mut command);
    };
    // A joining node: no init configuration, nothing changes.
    run_script(None);
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), manifest_text);
    // The init node.
    std::fs::write(&init_config, "kind: InitConfiguration\n").unwrap();
    run_script(None);
    assert_eq!(
        host_path(),
        (
            "/etc/kubernetes/super-admin.conf".to_owned(),
            "/etc/kubernetes/admin.conf".to_owned()
        )
    );
    run_script(Some("--restore"));
    assert_eq!(std::fs::read_to_string(&manifest).unwrap(), manifest_text);
    // No temporary file is left in the static pod directory.
    let left: Vec<_> = std::fs::read_dir(manifest.parent().unwrap())
        .unwrap()
        .collect();
    assert_eq!(left.len(), 1);
}

#[test]
fn dns_wait_script_succeeds_and_fails_clearly() {
    let sh = common::require_tool("sh");
    common::require_tool("getent");
    let dir = tempfile::tempdir().unwrap();
    let script = common::write(
        dir.path(),
        "wait.sh",
        capstan_render::bootstrap::DNS_WAIT_SCRIPT,
    );
    common::run(Command::new(&sh).arg(&script).arg("localhost").arg("5"));
    let output = Command::new(&sh)
        .arg(&script)
        .arg("capstan-test.invalid")
        .arg("1")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("capstan-test.invalid did not resolve within 1 seconds"),
        "{stderr}"
    );
}

/// The cloud-config CAPI's kubeadm bootstrapper would assemble passes `cloud-init schema`.
#[test]
fn assembled_cloud_config_passes_cloud_init_schema() {
    let cloud_init = common::require_tool("cloud-init");
    let all = objects(&render_example("capi-1.yaml", CapiVersion::V1beta1));
    let kcp = of_kind(&all, "KubeadmControlPlane").next().unwrap();
    let config: capstan_model::kubeadm::KubeadmConfigSpec =
        serde_json::from_value(kcp["spec"]["kubeadmConfigSpec"].clone()).unwrap();
    let cloud_config = capstan_render::bootstrap::approximate_cloud_config(&config);
    let text = format!(
        "#cloud-config\n{}",
        capstan_manifest::to_yaml(&cloud_config)
    );
    let dir = tempfile::tempdir().unwrap();
    let path = common::write(dir.path(), "user-data", &text);
    let output = common::run(Command::new(cloud_init).args(["schema", "-c"]).arg(&path));
    assert!(output.contains("Valid"), "{output}");
}

#[test]
fn nothing_jinja_would_expand_by_accident() {
    // CABPK renders cloud-config as a Jinja template; only the Metal3 metadata lookups may appear.
    for example in EXAMPLES {
        let all = objects(&render_example(example, CapiVersion::V1beta1));
        for kind in ["KubeadmControlPlane", "KubeadmConfigTemplate"] {
            for object in of_kind(&all, kind) {
                let text = object
                    .to_string()
                    .replace("{{ ds.meta_data.name }}", "")
                    .replace("{{ ds.meta_data.uuid }}", "");
                for marker in ["{{", "{%", "{#"] {
                    assert!(!text.contains(marker), "{example} {kind}: {marker}");
                }
            }
        }
    }
}
