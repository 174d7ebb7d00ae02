//! A real Kubernetes cluster from capstan's own bootstrap data: nothing of the workload cluster is
//! simulated or stood in for.
//!
//! Real: `capstan serve` without simulation; sushy-tools' Redfish emulator backed by libvirt; two
//! QEMU machines (software emulation), inspected and provisioned over virtual media through the
//! provisioning ramdisk, with the node image `capstan image build` makes from the Kubernetes
//! binaries `scripts/peers.sh` builds (Debian 12, systemd, cloud-init, containerd 1.6, kubelet,
//! kubeadm; every image kubeadm wants imported, nothing pulled); on them, real cloud-init running
//! the KubeadmConfig user data capstan rendered: real `kubeadm init` (kubeadm v1beta4, with
//! capstan's cluster CA, etcd CA, front-proxy CA and service-account key) on the control plane and
//! real `kubeadm join` (capstan's bootstrap token, the discovery hash of capstan's CA) on the
//! worker; the real kubelet, kube-apiserver, etcd, controller-manager, scheduler, kube-proxy and
//! CoreDNS they start; the bridge CNI plugin, configured by a file of the bootstrap data.
//!
//! The machines share a bridge of the test's network namespace with the host (dnsmasq leases each
//! its fixed address, the host is their gateway), as machines on one LAN: capstan reaches the
//! workload API server and its etcd at the control plane's address, as on real hardware.
//!
//! Checked, from the real workload API: both Nodes Ready with the Machines' providerIDs; the API
//! server's certificate signed by `<cluster>-ca` and answering for the control-plane endpoint; the
//! Machines Running with nodeRefs; the ClusterResourceSet's objects (the Cilium manifests `capstan
//! render` writes for capi-1) accepted by the real API server; a pause Pod Running on the worker;
//! the MachineHealthCheck counting the worker healthy from the real Node's conditions; the
//! KubeadmControlPlane's `EtcdClusterHealthy` from the real etcd's one member; clusterctl's
//! `describe cluster` tree and `get kubeconfig` (a kubeconfig the real API server accepts). Then
//! scaling the workers to zero drains the worker through the real eviction API (the Node
//! cordoned, a PodDisruptionBudget's refusal shown on the Machine until the budget goes, the Pod
//! evicted, the Node removed) and brings its host back to `available` while the control plane
//! still serves; deleting the Cluster brings the control plane's host back too. Phase times are
//! printed (`--nocapture`).

use super::{
    PASSWORD, apply, build_ramdisk, capstan, capstan_bin, kubectl_json, status_and_output,
};
use crate::node_image::build_node_image;
use crate::real_cluster::{host_yaml, items, until};
use crate::testbed::{self, Bridge, Libvirt, Nic, Serve, Sushy, Vm, VmShape, run_ok};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CLUSTER: &str = "rk";
const VERSION: &str = "v1.35.4";
const BRIDGE: &str = "capstan-rk0";
const HOST_ADDRESS: &str = "10.77.0.1";
const CONTROL_PLANE: (&str, &str, &str) = ("rk-cp", "52:54:00:c7:00:10", "10.77.0.10");
const WORKER: (&str, &str, &str) = ("rk-worker", "52:54:00:c7:00:11", "10.77.0.11");
/// The pause Deployment the test runs on the worker.
const PAUSE: &str = "e2e-pause";

/// The bridge CNI plugin's configuration for one node's Pod subnet: a `files` entry of the
/// bootstrap data (a YAML list item, unindented).
fn cni_file(subnet: &str) -> String {
    let conflist = format!(
        r#"{{"cniVersion": "1.0.0", "name": "capstan-e2e", "plugins": [{{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{subnet}"}}]], "routes": [{{"dst": "0.0.0.0/0"}}]}}}}, {{"type": "portmap", "capabilities": {{"portMappings": true}}}}]}}"#
    );
    format!(
        "- path: /etc/cni/net.d/10-capstan-e2e.conflist\n  permissions: \"0644\"\n  content: '{conflist}'\n"
    )
}

/// The machines' kubelet registration: the host's name, and the label Metal3 finds the Node by.
const NODE_REGISTRATION: &str = "nodeRegistration:
  name: '{{ ds.meta_data.name }}'
  kubeletExtraArgs:
  - name: node-labels
    value: 'metal3.io/uuid={{ ds.meta_data.uuid }}'
";

/// `text` with every line indented by `spaces`.
fn indent(text: &str, spaces: usize) -> String {
    let pad = " ".repeat(spaces);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

fn machine_template(name: &str, role: &str, image_url: &str, checksum: &str) -> String {
    format!(
        r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata:
  name: {name}
spec:
  template:
    spec:
      automatedCleaningMode: metadata
      image:
        url: {image_url}
        checksum: {checksum}
        checksumType: sha256
        format: qcow2
      hostSelector:
        matchLabels:
          e2e.capstan.dev/role: {role}
"#
    )
}

/// The Cluster, its control plane and its worker pool, in Cluster API v1beta2 (whose kubeadm
/// `timeouts` reach kubeadm v1beta4: software emulation makes the static pods slow to start).
fn cluster_yaml(labels: &str, image_url: &str, checksum: &str) -> String {
    let endpoint = CONTROL_PLANE.2;
    let mut yaml = format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: {CLUSTER}
  labels:
{labels}spec:
  clusterNetwork:
    pods:
      cidrBlocks: [10.244.0.0/16]
    services:
      cidrBlocks: [10.96.0.0/12]
  controlPlaneRef:
    apiGroup: controlplane.cluster.x-k8s.io
    kind: KubeadmControlPlane
    name: {CLUSTER}-control-plane
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: Metal3Cluster
    name: {CLUSTER}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3Cluster
metadata:
  name: {CLUSTER}
spec:
  controlPlaneEndpoint:
    host: {endpoint}
    port: 6443
  cloudProviderEnabled: false
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: {CLUSTER}-control-plane
spec:
  replicas: 1
  version: {VERSION}
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: Metal3MachineTemplate
        name: {CLUSTER}-control-plane
  kubeadmConfigSpec:
    initConfiguration:
{init_registration}      timeouts:
        controlPlaneComponentHealthCheckSeconds: 1500
        kubeletHealthCheckSeconds: 900
        kubernetesAPICallSeconds: 600
        etcdAPICallSeconds: 600
    joinConfiguration:
{join_registration}    files:
{cni}---
"#,
        init_registration = indent(NODE_REGISTRATION, 6),
        join_registration = indent(NODE_REGISTRATION, 6),
        cni = indent(&cni_file("10.244.0.0/24"), 4),
    );
    yaml.push_str(&machine_template(
        &format!("{CLUSTER}-control-plane"),
        "control-plane",
        image_url,
        checksum,
    ));
    yaml.push_str("---\n");
    yaml.push_str(&machine_template(
        &format!("{CLUSTER}-workers"),
        "worker",
        image_url,
        checksum,
    ));
    yaml.push_str(&format!(
        r#"---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: {CLUSTER}-workers
spec:
  template:
    spec:
      joinConfiguration:
{node_registration}        timeouts:
          tlsBootstrapSeconds: 900
          kubeletHealthCheckSeconds: 900
      files:
{cni}---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata:
  name: {CLUSTER}-workers
spec:
  clusterName: {CLUSTER}
  replicas: 1
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: {CLUSTER}-workers
  template:
    metadata:
      labels:
        cluster.x-k8s.io/deployment-name: {CLUSTER}-workers
    spec:
      clusterName: {CLUSTER}
      version: {VERSION}
      # Cilium's operator tolerates every taint, so it comes back on the cordoned Node and holds
      # the drain until this timeout (the default is 600 s): kept short, as teams set it.
      deletion:
        nodeDrainTimeoutSeconds: 240
      bootstrap:
        configRef:
          apiGroup: bootstrap.cluster.x-k8s.io
          kind: KubeadmConfigTemplate
          name: {CLUSTER}-workers
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: Metal3MachineTemplate
        name: {CLUSTER}-workers
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineHealthCheck
metadata:
  name: {CLUSTER}-workers
spec:
  clusterName: {CLUSTER}
  maxUnhealthy: 100%
  # Bare metal under software emulation: writing the image, rebooting and `kubeadm join` take
  # longer than the default 10 minutes on a loaded 2-core machine (a CI run saw the first worker
  # remediated and the replacement too late). 30 minutes, what `capstan render` writes.
  nodeStartupTimeout: 30m
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: {CLUSTER}-workers
  unhealthyConditions:
    - type: Ready
      status: "False"
      timeout: 600s
    - type: Ready
      status: Unknown
      timeout: 600s
"#,
        node_registration = indent(NODE_REGISTRATION, 8),
        cni = indent(&cni_file("10.244.1.0/24"), 6),
    ));
    yaml
}

/// The pause Deployment: one replica on the worker, the image the node image already holds.
/// A budget that keeps the pause Pod: its eviction is refused while this exists.
fn pdb_yaml() -> String {
    format!(
        r#"apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {PAUSE}
  namespace: default
spec:
  minAvailable: 1
  selector:
    matchLabels:
      app: {PAUSE}
"#
    )
}

fn pause_yaml(image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {PAUSE}
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels:
      app: {PAUSE}
  template:
    metadata:
      labels:
        app: {PAUSE}
    spec:
      nodeSelector:
        kubernetes.io/hostname: {worker}
      containers:
        - name: pause
          image: {image}
          imagePullPolicy: Never
"#,
        worker = WORKER.0,
    )
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    status_and_output(&out)
}

/// `kubectl get -o json` that may fail (the workload API while it comes up or goes away).
fn try_items(kubeconfig: &Path, args: &[&str]) -> Result<Vec<Value>, String> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json", "--request-timeout=20s"]);
    let (ok, out) = kubectl(kubeconfig, &all);
    if !ok {
        return Err(out);
    }
    let list: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn machine_with(machines: &[Value], control_plane: bool) -> Option<&Value> {
    machines.iter().find(|m| {
        m["metadata"]["labels"]
            .get("cluster.x-k8s.io/control-plane")
            .is_some()
            == control_plane
    })
}

fn phase_of(machine: Option<&Value>) -> String {
    machine.map_or_else(
        || "no Machine yet".to_owned(),
        |m| {
            format!(
                "phase {} conditions {}",
                m["status"]["phase"], m["status"]["conditions"]
            )
        },
    )
}

/// The last lines of a machine's console, for a failure message.
fn console_tail(vm: &Vm) -> String {
    format!(
        "{}'s console, last lines:\n{}",
        vm.name,
        testbed::last_lines(&vm.serial(), 60)
    )
}

fn peers_bin() -> PathBuf {
    for binary in ["kubeadm", "kubelet", "kubectl", "kube-apiserver", "etcd"] {
        capstan_testkit::peers::binary(binary);
    }
    capstan_testkit::peers::bin_dir()
}

#[test]
fn a_real_kubernetes_cluster_comes_up_from_capstans_bootstrap_data_and_goes_away() {
    let started = Instant::now();
    let peers = peers_bin();
    let tempdir = tempfile::Builder::new()
        .prefix("capstan-e2e-kubernetes")
        .tempdir()
        .unwrap();
    // CAPSTAN_E2E_KEEP=1 keeps the work directory (serve.log, the consoles) for a look afterwards.
    let (work, _removed_at_the_end) = if std::env::var_os("CAPSTAN_E2E_KEEP").is_some() {
        (tempdir.keep(), None)
    } else {
        (tempdir.path().to_owned(), Some(tempdir))
    };
    let work = work.as_path();
    let data = work.join("data");
    let images = work.join("images");
    let mut phases: Vec<(String, f64)> = Vec::new();

    let t = Instant::now();
    build_ramdisk(&data.join("ramdisk"));
    build_node_image(&peers, &images);
    let image = format!("node-{VERSION}.qcow2");
    let sums = std::fs::read_to_string(images.join(format!("{image}.sha256"))).unwrap();
    let checksum = sums.split_whitespace().next().unwrap().to_owned();
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(images.join(format!("node-{VERSION}.json"))).unwrap(),
    )
    .unwrap();
    let pause_image = manifest["sandboxImage"].as_str().unwrap().to_owned();
    phases.push((
        "ramdisk and node image built".to_owned(),
        t.elapsed().as_secs_f64(),
    ));

    // What `capstan render` writes for capi-1's Cilium: the ClusterResourceSet and its ConfigMap.
    let rendered = work.join("rendered");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/capi-1.yaml");
    let (ok, out) = capstan(
        &[
            "render",
            example.to_str().unwrap(),
            "-o",
            rendered.to_str().unwrap(),
        ],
        Path::new("/dev/null"),
    );
    assert!(ok, "{out}");
    let cilium = std::fs::read_to_string(rendered.join("cluster/cilium.yaml")).unwrap();
    let bridge = Bridge::start(
        BRIDGE,
        HOST_ADDRESS,
        &[(CONTROL_PLANE.1, CONTROL_PLANE.2), (WORKER.1, WORKER.2)],
    );
    let libvirt = Libvirt::ensure();
    let sushy = Sushy::start(&libvirt, "admin", PASSWORD, None);
    let cp_vm = Vm::define_with(
        &libvirt,
        work,
        &format!("capstan-e2e-{}", CONTROL_PLANE.0),
        VmShape {
            memory_mib: 2560,
            vcpus: 2,
            disk_gib: 10,
        },
        CONTROL_PLANE.1,
        Nic::Bridge(&bridge.name),
    );
    let worker_vm = Vm::define_with(
        &libvirt,
        work,
        &format!("capstan-e2e-{}", WORKER.0),
        VmShape {
            memory_mib: 1536,
            vcpus: 1,
            disk_gib: 10,
        },
        WORKER.1,
        Nic::Bridge(&bridge.name),
    );
    let provisioning_port = testbed::free_port();
    let provisioning = format!("{}:{provisioning_port}", bridge.host);
    let serve_args: Vec<String> = [
        "--provisioning-listen",
        &provisioning,
        "--agent-url",
        &format!("http://{provisioning}"),
        "--media-url",
        &format!("http://{provisioning}"),
        "--images-dir",
        images.to_str().unwrap(),
        "--boot-timeout",
        "1500",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let log = work.join("serve.log");
    let serve = Serve::start(&capstan_bin(), &data, &serve_args, &log);
    let kc = serve.kubeconfig.clone();

    let applied = Instant::now();
    for (vm, (name, mac, _), role) in [
        (&cp_vm, CONTROL_PLANE, "control-plane"),
        (&worker_vm, WORKER, "worker"),
    ] {
        let yaml = host_yaml(name, &sushy.system_address(&vm.uuid), mac, role);
        apply(&kc, work, &format!("{name}.yaml"), &yaml);
    }
    apply(&kc, work, "cilium.yaml", &cilium);
    // The Cluster carries the labels the rendered ClusterResourceSet selects.
    let sets = items(&kc, "clusterresourcesets.addons.cluster.x-k8s.io");
    assert_eq!(
        sets.len(),
        1,
        "cluster/cilium.yaml's ClusterResourceSet: {sets:#?}"
    );
    let crs_name = name_of(&sets[0]).to_owned();
    let labels: String = sets[0]["spec"]["clusterSelector"]["matchLabels"]
        .as_object()
        .expect("the ClusterResourceSet selects clusters by labels")
        .iter()
        .map(|(k, v)| format!("    {k}: {v}\n"))
        .collect();
    let image_url = format!("http://{provisioning}/images/{image}");
    apply(
        &kc,
        work,
        "cluster.yaml",
        &cluster_yaml(&labels, &image_url, &checksum),
    );

    // The control plane: real kubeadm init, then the Machine Running from the real Node.
    let consoles = || format!("{}\n{}", console_tail(&cp_vm), console_tail(&worker_vm));
    let machines_of = |kc: &Path| items(kc, "machines.cluster.x-k8s.io");
    until(
        "control plane Machine Running",
        Duration::from_secs(2400),
        || {
            let machines = machines_of(&kc);
            match machine_with(&machines, true) {
                Some(m) if m["status"]["phase"] == "Running" => Ok(()),
                other => Err(format!(
                    "{}\n{}\ndnsmasq's log:\n{}",
                    phase_of(other),
                    consoles(),
                    testbed::last_lines(&bridge.log(), 20)
                )),
            }
        },
    );
    phases.push((
        "apply → control plane Machine Running".to_owned(),
        applied.elapsed().as_secs_f64(),
    ));
    // The first worker Machine is the one that must come up: one replaced on the way (remediated
    // by the MachineHealthCheck) fails the test at once, saying why, instead of waiting out the
    // replacement.
    let mut first_worker: Option<String> = None;
    until("worker Machine Running", Duration::from_secs(1800), || {
        let machines = machines_of(&kc);
        let worker = machine_with(&machines, false);
        if let Some(m) = worker {
            let first = first_worker.get_or_insert_with(|| name_of(m).to_owned());
            if first != name_of(m) {
                let (_, checks) = kubectl(
                    &kc,
                    &["get", "machinehealthchecks.cluster.x-k8s.io", "-o", "json"],
                );
                let (_, events) = kubectl(&kc, &["get", "events", "-o", "wide"]);
                panic!(
                    "worker Machine {first} was replaced by {} before it ran: {}\n\
                     MachineHealthChecks: {checks}\nEvents:\n{events}\n{}",
                    name_of(m),
                    phase_of(Some(m)),
                    consoles()
                );
            }
        }
        match worker {
            Some(m) if m["status"]["phase"] == "Running" => Ok(()),
            other => Err(format!("{}\n{}", phase_of(other), consoles())),
        }
    });
    phases.push((
        "apply → worker Machine Running".to_owned(),
        applied.elapsed().as_secs_f64(),
    ));

    let (ok, workload_config) = capstan(&["kubeconfig", CLUSTER], &kc);
    assert!(ok, "{workload_config}");
    let workload = work.join("workload.kubeconfig");
    std::fs::write(&workload, &workload_config).unwrap();

    // A real kube-apiserver, serving a certificate capstan's cluster CA signed for the endpoint.
    let ca_secret = kubectl_json(&kc, &["get", "secret", &format!("{CLUSTER}-ca")]);
    let ca_pem = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(ca_secret["data"]["tls.crt"].as_str().unwrap())
            .unwrap()
    };
    let ca_file = work.join("cluster-ca.crt");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let version: Value = serde_json::from_str(&run_ok(
        Command::new("curl")
            .args(["--silent", "--show-error", "--fail", "--cacert"])
            .arg(&ca_file)
            .arg(format!("https://{}:6443/version", CONTROL_PLANE.2)),
    ))
    .unwrap();
    assert_eq!(version["gitVersion"], VERSION, "{version}");

    // Both Nodes Ready, by the real kubelets, with the Machines' providerIDs and nodeRefs.
    let t = Instant::now();
    until("2 Nodes Ready", Duration::from_secs(900), || {
        let nodes = try_items(&workload, &["nodes"])?;
        let ready = nodes
            .iter()
            .filter(|n| condition(n, "Ready").is_some_and(|c| c["status"] == "True"))
            .count();
        if ready == 2 {
            Ok(())
        } else {
            Err(format!(
                "{ready} of {} Nodes Ready: {:#}",
                nodes.len(),
                nodes
                    .iter()
                    .map(|n| condition(n, "Ready").cloned().unwrap_or(Value::Null))
                    .collect::<Vec<_>>()
                    .into_iter()
                    .collect::<Value>()
            ))
        }
    });
    phases.push((
        "2 Nodes Ready (after the worker Machine Running)".to_owned(),
        t.elapsed().as_secs_f64(),
    ));
    phases.push((
        "apply → 2 Nodes Ready".to_owned(),
        applied.elapsed().as_secs_f64(),
    ));
    // capstan's own work for these two machines: its controllers' reconcile time (their metrics)
    // and the whole server's CPU time, which includes serving the image to both machines.
    let (ok, metrics) = kubectl(&kc, &["get", "--raw", "/metrics"]);
    assert!(ok, "{metrics}");
    let sum_of = |suffix: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.split(['{', ' '])
                    .next()
                    .is_some_and(|n| n.ends_with(suffix))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let reconcile_seconds = sum_of("_controller_reconcile_duration_seconds_sum");
    let reconciles = sum_of("_controller_reconciles_total");
    let serve_cpu = serve.cpu_seconds();
    // What shipping the image costs the server, measured by one more download of it: the rest
    // of its CPU time is capstan's own work (controllers, API, boot media, agent callbacks).
    let (ok, out) = status_and_output(
        &Command::new("curl")
            .args(["-sSf", "-o", "/dev/null", &image_url])
            .output()
            .unwrap(),
    );
    assert!(ok, "{out}");
    let image_cpu = serve.cpu_seconds() - serve_cpu;
    println!(
        "e2e: capstan's work up to 2 Nodes Ready: {reconciles} reconciles taking {reconcile_seconds:.2} s \
         ({:.2} s a machine); capstan serve's CPU time {serve_cpu:.1} s, of which serving the image \
         twice {:.1} s: {:.2} s of CPU a machine besides the image",
        reconcile_seconds / 2.0,
        2.0 * image_cpu,
        (serve_cpu - 2.0 * image_cpu) / 2.0,
    );
    let nodes = try_items(&workload, &["nodes"]).unwrap();
    let machines = machines_of(&kc);
    assert_eq!(machines.len(), 2, "{machines:#?}");
    for machine in &machines {
        let provider_id = machine["spec"]["providerID"].as_str().unwrap_or_default();
        let node_ref = machine["status"]["nodeRef"]["name"]
            .as_str()
            .unwrap_or_default();
        let node = nodes
            .iter()
            .find(|n| name_of(n) == node_ref)
            .unwrap_or_else(|| {
                panic!(
                    "Machine {}'s nodeRef {node_ref:?} is no Node: {nodes:#?}",
                    name_of(machine)
                )
            });
        assert!(
            provider_id.starts_with("metal3://") && node["spec"]["providerID"] == provider_id,
            "Machine {} has providerID {provider_id:?}, its Node {:?}",
            name_of(machine),
            node["spec"]["providerID"]
        );
        let kubelet = node["status"]["nodeInfo"]["kubeletVersion"].clone();
        assert_eq!(kubelet, VERSION, "the kubelet of {node_ref}");
    }
    // What the real cluster shows, for the simulated backend to follow (docs/clusters.md): the
    // Nodes as their kubelets and kubeadm wrote them, the static pods, the bootstrap tokens
    // (their keys and expiry, never their values).
    for node in &nodes {
        let conditions: Vec<String> = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| format!("{}={} ({})", c["type"], c["status"], c["reason"]))
            .collect();
        println!(
            "e2e: real Node {}: created {} labels {} taints {} addresses {} conditions {}",
            name_of(node),
            node["metadata"]["creationTimestamp"],
            node["metadata"]["labels"],
            node["spec"]["taints"],
            node["status"]["addresses"],
            conditions.join(", ")
        );
    }
    for pod in try_items(&workload, &["pods", "-n", "kube-system"]).unwrap_or_default() {
        println!(
            "e2e: real kube-system Pod {}: phase {} labels {} annotations {} owners {}",
            name_of(&pod),
            pod["status"]["phase"],
            pod["metadata"]["labels"],
            pod["metadata"]["annotations"]
                .as_object()
                .map(|a| a.keys().cloned().collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
            pod["metadata"]["ownerReferences"]
        );
    }
    for secret in try_items(&workload, &["secrets", "-n", "kube-system"]).unwrap_or_default() {
        if secret["type"] == "bootstrap.kubernetes.io/token" {
            let keys: Vec<String> = secret["data"]
                .as_object()
                .map(|d| d.keys().cloned().collect())
                .unwrap_or_default();
            println!(
                "e2e: real bootstrap token Secret {}: keys {keys:?}",
                name_of(&secret)
            );
        }
    }
    let names: Vec<&str> = nodes.iter().map(name_of).collect();
    assert!(
        names.contains(&CONTROL_PLANE.0) && names.contains(&WORKER.0),
        "Nodes named from the hosts' meta data: {names:?}"
    );

    // The ClusterResourceSet applied the Cilium manifests into the real API server.
    until(
        "the ClusterResourceSet's objects in the workload cluster",
        Duration::from_secs(600),
        || {
            let bindings = items(&kc, "clusterresourcesetbindings.addons.cluster.x-k8s.io");
            let applied = bindings.iter().any(|b| {
                b["spec"]["bindings"].as_array().is_some_and(|sets| {
                    sets.iter().any(|s| {
                        s["clusterResourceSetName"] == crs_name
                            && s["resources"].as_array().is_some_and(|r| {
                                !r.is_empty() && r.iter().all(|r| r["applied"] == true)
                            })
                    })
                })
            });
            let daemonsets = try_items(&workload, &["daemonsets", "-A"])?;
            let cilium = daemonsets.iter().any(|d| name_of(d) == "cilium");
            if applied && cilium {
                Ok(())
            } else {
                Err(format!(
                    "applied {applied}, cilium DaemonSet {cilium}: {:#}",
                    Value::Array(bindings)
                ))
            }
        },
    );

    // A Pod on the worker: containerd runs the pause image, the bridge plugin gives it an address.
    let t = Instant::now();
    apply(&workload, work, "pause.yaml", &pause_yaml(&pause_image));
    let mut pause_pod = Value::Null;
    until(
        "the pause Pod Running on the worker",
        Duration::from_secs(600),
        || {
            let pods = try_items(&workload, &["pods", "-l", &format!("app={PAUSE}")])?;
            match pods.first() {
                Some(p) if p["status"]["phase"] == "Running" => {
                    pause_pod = p.clone();
                    Ok(())
                }
                other => Err(format!("{other:#?}")),
            }
        },
    );
    phases.push(("pause Pod Running".to_owned(), t.elapsed().as_secs_f64()));
    assert_eq!(pause_pod["spec"]["nodeName"], WORKER.0);
    let pod_ip = pause_pod["status"]["podIP"].as_str().unwrap_or_default();
    assert!(
        pod_ip.starts_with("10.244.1."),
        "the Pod's address: {pod_ip:?}"
    );

    // The MachineHealthCheck sees the real Node's conditions: the worker counts healthy.
    until(
        "the MachineHealthCheck's count",
        Duration::from_secs(300),
        || {
            let mhc = kubectl_json(
                &kc,
                &[
                    "get",
                    "machinehealthchecks.cluster.x-k8s.io",
                    &format!("{CLUSTER}-workers"),
                ],
            );
            if mhc["status"]["expectedMachines"] == 1 && mhc["status"]["currentHealthy"] == 1 {
                Ok(())
            } else {
                Err(format!("{:#}", mhc["status"]))
            }
        },
    );

    // The real etcd: its one member, healthy, on the KubeadmControlPlane.
    until("EtcdClusterHealthy", Duration::from_secs(300), || {
        let kcp = kubectl_json(
            &kc,
            &[
                "get",
                "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io",
                &format!("{CLUSTER}-control-plane"),
            ],
        );
        match condition(&kcp, "EtcdClusterHealthy") {
            Some(c) if c["status"] == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    // clusterctl (Cluster API v1.14) against capstan serve: its tree of this cluster, and the
    // kubeconfig it hands out reaching the real API server.
    let clusterctl = |args: &[&str]| {
        let out = Command::new(peers.join("clusterctl"))
            .args(args)
            .arg("--kubeconfig")
            .arg(&kc)
            .output()
            .unwrap();
        let (ok, text) = status_and_output(&out);
        assert!(ok, "clusterctl {args:?}: {text}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // A Machine's Ready follows its Node on the Machine's next pass (at most a minute once
    // Running; docs/clusters.md), so the tree may show the worker NotReady for that long after
    // the Node went Ready.
    let mut tree = String::new();
    until(
        "clusterctl's tree all ready",
        Duration::from_secs(180),
        || {
            tree = clusterctl(&["describe", "cluster", CLUSTER, "--grouping=false"]);
            let ready = |object: &str, replicas: &str| {
                tree.lines()
                    .find(|l| l.contains(object))
                    .is_some_and(|l| l.contains(replicas) && l.contains("True"))
            };
            if ready(&format!("Cluster default/{CLUSTER} "), "2/2")
                && ready(
                    &format!("KubeadmControlPlane default/{CLUSTER}-control-plane"),
                    "1/1",
                )
                && ready(
                    &format!("MachineDeployment default/{CLUSTER}-workers"),
                    "1/1",
                )
            {
                Ok(())
            } else {
                Err(tree.clone())
            }
        },
    );
    println!("e2e: clusterctl describe cluster {CLUSTER}:\n{tree}");
    let clusterctl_config = work.join("clusterctl.kubeconfig");
    std::fs::write(
        &clusterctl_config,
        clusterctl(&["get", "kubeconfig", CLUSTER]),
    )
    .unwrap();
    let nodes = try_items(&clusterctl_config, &["nodes"]).unwrap();
    assert_eq!(nodes.len(), 2, "{nodes:#?}");
    phases.push((
        "checks of the running cluster".to_owned(),
        t.elapsed().as_secs_f64(),
    ));

    // Scale-down: the worker's Machine drains its Node through the real eviction API. A
    // PodDisruptionBudget first holds the Pod (the API server answers 429, which a plain delete
    // would not meet), and the Machine says so; once it goes the Pod is evicted, the Node was
    // cordoned, the Node is removed and the host goes back to `available` while the control plane
    // still serves. (Deleting the whole Cluster drains nothing, as upstream: its workloads go with
    // it.)
    let t = Instant::now();
    let pause_uid = pause_pod["metadata"]["uid"].as_str().unwrap().to_owned();
    apply(&workload, work, "pdb.yaml", &pdb_yaml());
    let (ok, out) = kubectl(
        &kc,
        &[
            "patch",
            "machinedeployments.cluster.x-k8s.io",
            &format!("{CLUSTER}-workers"),
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":0}}"#,
        ],
    );
    assert!(ok, "{out}");
    until(
        "the worker cordoned, its Pod held by the budget",
        // Within the drain timeout: after it the drain gives up and the hold is never seen.
        Duration::from_secs(240),
        || {
            let nodes = try_items(&workload, &["nodes"])?;
            let worker = nodes.iter().find(|n| name_of(n) == WORKER.0);
            let cordoned = worker.is_some_and(|n| n["spec"]["unschedulable"] == true);
            let machines = machines_of(&kc);
            let deleting = machine_with(&machines, false)
                .and_then(|m| condition(m, "Deleting"))
                .cloned()
                .unwrap_or(Value::Null);
            let held = deleting["reason"] == "DrainingNode"
                && deleting["message"].as_str().is_some_and(|m| {
                    m.contains(&format!("Pod default/{PAUSE}-")) && m.contains("cannot be evicted")
                });
            let pods = try_items(&workload, &["pods", "-l", &format!("app={PAUSE}")])?;
            let running = pods.iter().any(|p| {
                p["metadata"]["uid"] == pause_uid.as_str()
                    && p["metadata"]["deletionTimestamp"].is_null()
            });
            if cordoned && held && running {
                Ok(())
            } else {
                Err(format!(
                    "cordoned {cordoned}, held {held}, Pod running {running}: {deleting:#}"
                ))
            }
        },
    );
    // The MachineDeployment's drain timeout reached the Machine.
    let machines = machines_of(&kc);
    let worker_machine = machine_with(&machines, false)
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        worker_machine["spec"]["deletion"]["nodeDrainTimeoutSeconds"], 240,
        "{worker_machine:#}"
    );
    phases.push((
        "scale-down → drain held by the budget".to_owned(),
        t.elapsed().as_secs_f64(),
    ));
    let (ok, out) = kubectl(
        &workload,
        &[
            "delete",
            "poddisruptionbudgets.policy",
            PAUSE,
            "-n",
            "default",
        ],
    );
    assert!(ok, "{out}");
    until("the worker's Pod evicted", Duration::from_secs(600), || {
        let pods = try_items(&workload, &["pods", "-l", &format!("app={PAUSE}")])?;
        let original = pods
            .iter()
            .find(|p| p["metadata"]["uid"] == pause_uid.as_str());
        match original {
            None => Ok(()),
            Some(p) => Err(format!("{:#}", p["status"])),
        }
    });
    // The control plane never started going while the worker drained.
    let machines = machines_of(&kc);
    let control_plane = machine_with(&machines, true)
        .cloned()
        .unwrap_or(Value::Null);
    assert!(
        control_plane["metadata"]["deletionTimestamp"].is_null(),
        "{control_plane:#}"
    );
    phases.push((
        "budget removed → Pod evicted".to_owned(),
        t.elapsed().as_secs_f64(),
    ));
    until(
        "the worker's host available, its Node removed",
        Duration::from_secs(1800),
        || {
            let hosts = items(&kc, "baremetalhosts.metal3.io");
            let host = hosts
                .iter()
                .find(|h| name_of(h) == WORKER.0)
                .map(|h| h["status"]["provisioning"]["state"].clone())
                .unwrap_or(Value::Null);
            let nodes = try_items(&workload, &["nodes"])?;
            let node = nodes.iter().any(|n| name_of(n) == WORKER.0);
            let machines = machines_of(&kc);
            let worker_machine = machine_with(&machines, false).is_some();
            if host == "available" && !node && !worker_machine {
                Ok(())
            } else {
                Err(format!(
                    "host {host}, Node {node}, Machine {worker_machine}\n{}",
                    consoles()
                ))
            }
        },
    );
    phases.push((
        "scale-down → worker host available".to_owned(),
        t.elapsed().as_secs_f64(),
    ));

    // Deletion: the Cluster goes, and the control plane's host with it.
    let t = Instant::now();
    let (ok, out) = kubectl(
        &kc,
        &[
            "delete",
            "clusters.cluster.x-k8s.io",
            CLUSTER,
            "--wait=false",
        ],
    );
    assert!(ok, "{out}");
    until("the Cluster gone", Duration::from_secs(1800), || {
        let clusters = items(&kc, "clusters.cluster.x-k8s.io");
        if clusters.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{:#}\n{}",
                Value::Array(clusters),
                phase_of(machines_of(&kc).first())
            ))
        }
    });
    phases.push((
        "delete → Cluster gone".to_owned(),
        t.elapsed().as_secs_f64(),
    ));
    until("both hosts available", Duration::from_secs(1800), || {
        let hosts = items(&kc, "baremetalhosts.metal3.io");
        let states: Vec<String> = hosts
            .iter()
            .map(|h| format!("{} {}", name_of(h), h["status"]["provisioning"]["state"]))
            .collect();
        if hosts.len() == 2
            && hosts
                .iter()
                .all(|h| h["status"]["provisioning"]["state"] == "available")
        {
            Ok(())
        } else {
            Err(format!("{states:?}\n{}", consoles()))
        }
    });
    phases.push((
        "delete → both hosts available".to_owned(),
        t.elapsed().as_secs_f64(),
    ));
    drop(serve);
    drop(bridge);

    println!("e2e: phase times (seconds since the phase began):");
    for (what, seconds) in &phases {
        println!("e2e:   {what:<52} {seconds:>7.1}");
    }
    println!("e2e: total {:.1} s", started.elapsed().as_secs_f64());
}
