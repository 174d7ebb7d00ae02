//! Providers mixed in one cluster, on the embedded default: the control plane on KVMMachines
//! (libvirt VMs on libvirt's simulated `test:///default` hypervisor inside the server) and the
//! workers on Metal3Machines (`fake://` bare-metal hosts), with one Cluster, one KVMCluster as its
//! infrastructure and no second infrastructure cluster pointing at the first's endpoint.
//!
//! The bundle is capstan's own capi-1 bundle (`capstan render --fake-bmcs`) with the control plane
//! moved to VMs: the Cluster's infrastructureRef and the KubeadmControlPlane's machine template
//! name KVM kinds, and one control-plane replica. Real: the API server, every controller, the
//! libvirt driver (the test hypervisor is libvirt's own), the CLI and kubectl. Simulated (by
//! capstan-sim): the guests and hosts running their bootstrap data, and the workload cluster.
//!
//! Checked: both Machines Running with Nodes, providerIDs `libvirt://hv/UUID` and
//! `metal3://default/HOST/…`, `describe cluster` showing both kinds in one tree, and deleting
//! the Cluster removing the VM and releasing the host.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

mod support;

use support::*;

const KVM: &str = r#"
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: KVMCluster
metadata:
  name: capi-1
  namespace: default
  labels:
    cluster.x-k8s.io/cluster-name: capi-1
spec:
  controlPlaneEndpoint:
    host: "10.250.250.29"
    port: 6443
  hypervisors:
  - name: hv
    uri: test:///default
    pool: default-pool
  dnsServers: [10.250.250.1]
  ntpServers: [10.250.250.1]
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4
kind: KVMMachineTemplate
metadata:
  name: capi-1-control-plane-vm
  namespace: default
spec:
  template:
    spec:
      resources:
        cpu: 1
        memory: 256Mi
        disk: 2Gi
        dockerVolumeSize: 1Gi
"#;

/// The capi-1 cluster documents with the control plane on KVM.
fn mixed(cluster_yaml: &str) -> String {
    let replaced = cluster_yaml
        .replace(
            "    kind: Metal3Cluster\n    name: capi-1",
            "    kind: KVMCluster\n    name: capi-1",
        )
        .replace("  replicas: 3\n  version:", "  replicas: 1\n  version:")
        .replace(
            "      kind: Metal3MachineTemplate\n      name: capi-1-control-plane\n",
            "      kind: KVMMachineTemplate\n      name: capi-1-control-plane-vm\n",
        );
    let documents: Vec<&str> = replaced
        .split("\n---\n")
        .filter(|d| !d.contains("\nkind: Metal3Cluster\n"))
        .collect();
    format!("{}{KVM}", documents.join("\n---\n"))
}

#[test]
fn a_kvm_control_plane_and_bare_metal_workers_make_one_cluster() {
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("bundle");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/capi-1.yaml");
    render(&example, &bundle, &[]);
    let cluster_yaml = std::fs::read_to_string(bundle.join("cluster/cluster.yaml")).unwrap();
    let mixed_yaml = work.path().join("mixed.yaml");
    std::fs::write(&mixed_yaml, mixed(&cluster_yaml)).unwrap();
    assert!(
        std::fs::read_to_string(&mixed_yaml)
            .unwrap()
            .contains("kind: KVMMachineTemplate\n      name: capi-1-control-plane-vm")
    );
    let server = Serve::start_in(work.path());
    let (kc, log) = (server.kubeconfig.clone(), server.log.clone());
    apply(
        &kc,
        &[
            &bundle.join("hosts/capi-1-worker-0.yaml"),
            &bundle.join("cluster/cilium.yaml"),
            &mixed_yaml,
        ],
    );
    wait_machines_running(&kc, &log, 2, Duration::from_secs(240));
    let machines = items(&kc, "machines.cluster.x-k8s.io");
    let ids: Vec<&str> = machines
        .iter()
        .filter_map(|m| m["spec"]["providerID"].as_str())
        .collect();
    assert!(
        ids.iter().any(|id| id.starts_with("libvirt://hv/")),
        "{ids:?}"
    );
    assert!(
        ids.iter()
            .any(|id| id.starts_with("metal3://default/capi-1-worker-0/")),
        "{ids:?}"
    );
    let vms = items(&kc, "kvmmachines");
    assert_eq!(vms.len(), 1);
    assert_eq!(
        vms[0]["status"]["domainState"], "running",
        "{}",
        vms[0]["status"]
    );
    let (ok, tree) = capstan(&kc, &["describe", "cluster", "capi-1"]);
    assert!(ok, "describe: {tree}");
    assert!(tree.contains("KVMCluster/capi-1"), "{tree}");
    assert!(
        tree.contains("KVMMachine/") && tree.contains("Metal3Machine/"),
        "{tree}"
    );

    let (ok, out) = capstan(&kc, &["delete", "cluster", "capi-1"]);
    assert!(ok, "delete: {out}");
    until(
        "every Machine and KVMMachine gone",
        Duration::from_secs(120),
        &log,
        || {
            let left =
                items(&kc, "machines.cluster.x-k8s.io").len() + items(&kc, "kvmmachines").len();
            if left == 0 {
                Ok(())
            } else {
                Err(format!("{left} left"))
            }
        },
    );
    let events = items(&kc, "events");
    assert!(
        events.iter().any(|e| e["reason"] == "VMDeleted"),
        "no VMDeleted event: the VM's removal was not reported"
    );
}

/// clusterctl's variable substitution: `${NAME}` from `values`, `${NAME:=default}` from `values`
/// or the default; a variable with neither fails the test.
fn substitute(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        let inner = &rest[start + 2..end];
        let (name, default) = match inner.split_once(":=") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        let value = values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .or(default)
            .unwrap_or_else(|| panic!("variable {name} has no value and no default"));
        out.push_str(value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_clusterctl_template_applies_with_the_designs_defaults() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("provider");
    let (ok, out) = capstan(
        Path::new("/dev/null"),
        &["clusterctl-template", "-o", dir.to_str().unwrap()],
    );
    assert!(ok, "clusterctl-template: {out}");
    let components = std::fs::read_to_string(dir.join("infrastructure-components.yaml")).unwrap();
    assert_eq!(
        components
            .matches("cluster.x-k8s.io/provider: infrastructure-kvm")
            .count(),
        3,
        "{components}"
    );
    for kind in ["KVMCluster", "KVMMachine", "KVMMachineTemplate"] {
        assert!(
            components.contains(&format!("kind: {kind}\n")),
            "{kind} missing"
        );
    }
    assert!(
        std::fs::read_to_string(dir.join("metadata.yaml"))
            .unwrap()
            .contains("contract: v1beta1")
    );
    let template = std::fs::read_to_string(dir.join("cluster-template.yaml")).unwrap();
    for variable in [
        "${KUBERNETES_VERSION}",
        "${CONTROL_PLANE_MACHINE_COUNT:=3}",
        "${WORKER_MACHINE_COUNT:=3}",
        "${CONTROL_PLANE_MACHINE_CPUS:=4}",
        "${WORKER_MACHINE_CPUS:=4}",
        "${CONTROL_PLANE_MACHINE_MEMORY:=8GB}",
        "${WORKER_MACHINE_MEMORY:=8GB}",
        "${CONTROL_PLANE_DOCKER_VOLUME_SIZE_GB:=40}",
        "${CONTROL_PLANE_VOLUME_SIZE_GB:=40}",
        "${DOCKER_VOLUME_SIZE_GB:=40}",
        "${VOLUME_SIZE_GB:=40}",
        "${POD_IP_RANGE:=172.24.0.0/16}",
        "${SERVICE_IP_RANGE:=172.31.0.0/16}",
    ] {
        assert!(template.contains(variable), "{variable} missing");
    }
    let cluster = substitute(
        &template,
        &[
            ("CLUSTER_NAME", "tmpl"),
            ("NAMESPACE", "default"),
            ("KUBERNETES_VERSION", "v1.31.4"),
            ("CONTROL_PLANE_ENDPOINT_HOST", "10.0.0.10"),
            ("KVM_HYPERVISOR_URI", "test:///default"),
            ("KVM_POOL", "default-pool"),
            ("KVM_IMAGE_URL", "file:///nonexistent/base.qcow2"),
            ("KVM_IMAGE_CHECKSUM", "00"),
        ],
    );
    let file = work.path().join("cluster.yaml");
    std::fs::write(&file, cluster).unwrap();
    let server = Serve::start_in(work.path());
    let (kc, log) = (server.kubeconfig.clone(), server.log.clone());
    apply(&kc, &[&file]);
    // The design's sizes, read through v1alpha4: 8GB control planes do not fit the 3 GiB test
    // hypervisor, and the KVMMachine says so.
    until(
        "a control-plane KVMMachine that does not fit",
        Duration::from_secs(120),
        &log,
        || {
            let vms = items(&kc, "kvmmachines");
            let reasons: Vec<String> = vms
                .iter()
                .flat_map(|m| {
                    m["status"]["conditions"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .filter(|c| c["type"] == "Ready")
                .map(|c| format!("{}: {}", c["reason"], c["message"]))
                .collect();
            if reasons
                .iter()
                .any(|r| r.contains("NoHypervisorFits") && r.contains("7629 MiB of memory asked"))
            {
                Ok(())
            } else {
                Err(format!("{reasons:?}"))
            }
        },
    );
    let templates = items(&kc, "kvmmachinetemplates");
    let cp = templates
        .iter()
        .find(|t| name(t) == "tmpl-control-plane")
        .unwrap();
    assert_eq!(cp["spec"]["template"]["spec"]["resources"]["cpu"], 4);
}

/// `examples/mixed.yaml` pointed at libvirt's `test:///default` hypervisor (its pool, a base image
/// written here with its sha256, VMs small enough for its 3 GiB), its Cilium manifest path made
/// absolute; with `reverse`, the control plane on the bare-metal host and the pool on VMs.
fn mixed_spec(dir: &Path, reverse: bool) -> std::path::PathBuf {
    use sha2::Digest;
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let text = std::fs::read_to_string(examples.join("mixed.yaml")).unwrap();
    let image = dir.join("base.qcow2");
    let bytes = b"capstan test base image\n".repeat(64);
    std::fs::write(&image, &bytes).unwrap();
    let digest: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let vm = "  vm:\n    cpu: 2\n    memory: 4Gi\n    disk: 20Gi\n    dockerVolumeSize: 10Gi\n    networks:\n      - {bridge: br0, address: 10.250.250.40/24, gateway: 10.250.250.1}\n";
    let small_vm = "vm: {cpu: 1, memory: 256Mi, disk: 2Gi, dockerVolumeSize: 1Gi}\n";
    let mut edited = text
        .replace(
            "uri: qemu+ssh://root@hv1.lab.example.com/system\n      pool: default\n",
            "uri: test:///default\n      pool: default-pool\n",
        )
        .replace(
            "url: file:///var/lib/capstan/images/debian-12-k8s-v1.31.4.qcow2",
            &format!("url: file://{}", image.display()),
        )
        .replace(
            "checksum: 0f7c3a52e3c2b1c69d1c4c3f2a3b9e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7",
            &format!("checksum: {digest}"),
        )
        .replace(
            "manifest: cilium/cilium-manifests.yaml",
            &format!(
                "manifest: {}",
                examples.join("cilium/cilium-manifests.yaml").display()
            ),
        );
    edited = if reverse {
        edited
            .replace(&format!("  machines: kvm\n{vm}"), "")
            .replace(
                "  - name: metal\n    replicas: 1\n",
                &format!("  - name: metal\n    replicas: 1\n    machines: kvm\n    {small_vm}"),
            )
            .replace(
                "  - name: mixed-worker-0\n    role: worker\n",
                "  - name: mixed-worker-0\n    role: control-plane\n",
            )
    } else {
        edited.replace(vm, &format!("  {small_vm}"))
    };
    assert!(edited.contains("test:///default") && edited.contains(&digest));
    assert_eq!(edited.contains("role: control-plane"), reverse, "{edited}");
    assert!(!edited.contains("4Gi"), "{edited}");
    let path = dir.join("mixed.yaml");
    std::fs::write(&path, edited).unwrap();
    path
}

/// Renders the mixed spec, applies the bundle to `capstan serve --simulate-workloads` and waits
/// for both Machines; returns their providerIDs.
fn rendered_mixed_cluster_comes_up(reverse: bool) -> Vec<String> {
    let work = tempfile::tempdir().unwrap();
    let spec = mixed_spec(work.path(), reverse);
    let bundle = work.path().join("bundle");
    render(&spec, &bundle, &[]);
    let cluster_yaml = std::fs::read_to_string(bundle.join("cluster/cluster.yaml")).unwrap();
    assert!(
        cluster_yaml.contains("kind: KVMMachineTemplate"),
        "{cluster_yaml}"
    );
    assert_eq!(cluster_yaml.contains("kind: Metal3Cluster"), reverse);
    let (ok, lint) = capstan(Path::new("/dev/null"), &["lint", bundle.to_str().unwrap()]);
    assert!(ok, "the rendered bundle does not lint clean: {lint}");
    let server = Serve::start_in(work.path());
    let (kc, log) = (server.kubeconfig.clone(), server.log.clone());
    apply(
        &kc,
        &[
            &bundle.join("hosts"),
            &bundle.join("cluster/cilium.yaml"),
            &bundle.join("cluster/cluster.yaml"),
        ],
    );
    let machines = wait_machines_running(&kc, &log, 2, Duration::from_secs(240));
    let (ok, tree) = capstan(&kc, &["describe", "cluster", "mixed"]);
    assert!(ok, "describe: {tree}");
    assert!(
        tree.contains("KVMMachine/") && tree.contains("Metal3Machine/"),
        "{tree}"
    );
    machines
        .iter()
        .filter_map(|m| m["spec"]["providerID"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_rendered_kvm_control_plane_with_bare_metal_workers_comes_up() {
    let ids = rendered_mixed_cluster_comes_up(false);
    assert!(
        ids.iter().any(|id| id.starts_with("libvirt://hv1/")),
        "{ids:?}"
    );
    assert!(
        ids.iter()
            .any(|id| id.starts_with("metal3://default/mixed-worker-0/")),
        "{ids:?}"
    );
}

#[test]
fn a_rendered_bare_metal_control_plane_with_kvm_workers_comes_up() {
    let ids = rendered_mixed_cluster_comes_up(true);
    assert!(
        ids.iter().any(|id| id.starts_with("libvirt://hv1/")),
        "{ids:?}"
    );
    assert!(
        ids.iter()
            .any(|id| id.starts_with("metal3://default/mixed-worker-0/")),
        "{ids:?}"
    );
}
