//! Linting 1,000-host bundles. Target: under a second on one core.
//!
//! - A bundle generated here: a Cluster with kube-vip and Cilium, 3 control planes and 997 workers,
//!   1,000 BareMetalHosts with inspection data, their BMC and networkData Secrets.
//! - `capstan render`'s generated 1,000-host cluster (bonded NICs with a VLAN on every host).

use std::fmt::Write as _;
use std::hint::black_box;

use capstan_lint::{LintOptions, lint};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

const HOSTS: usize = 1000;
const CONTROL_PLANES: usize = 3;

fn cluster() -> String {
    let workers = HOSTS - CONTROL_PLANES;
    format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {{name: big, namespace: fleet, labels: {{cni: cilium}}}}
spec:
  clusterNetwork: {{pods: {{cidrBlocks: [10.244.0.0/16]}}}}
  controlPlaneEndpoint: {{host: 10.250.255.250, port: 6443}}
  controlPlaneRef: {{apiVersion: controlplane.cluster.x-k8s.io/v1beta1, kind: KubeadmControlPlane, name: big}}
  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: Metal3Cluster, name: big}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3Cluster
metadata: {{name: big, namespace: fleet}}
spec: {{controlPlaneEndpoint: {{host: 10.250.255.250, port: 6443}}}}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata: {{name: big, namespace: fleet}}
spec:
  replicas: {CONTROL_PLANES}
  version: v1.31.4
  machineTemplate:
    infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: Metal3MachineTemplate, name: big-cp}}
  kubeadmConfigSpec:
    initConfiguration: {{skipPhases: [addon/kube-proxy]}}
    files:
    - path: /etc/kubernetes/manifests/kube-vip.yaml
      content: |
        apiVersion: v1
        kind: Pod
        metadata: {{name: kube-vip, namespace: kube-system}}
        spec:
          containers:
          - name: kube-vip
            image: ghcr.io/kube-vip/kube-vip:v0.8.7
            env:
            - {{name: vip_interface, value: ens2}}
            - {{name: address, value: 10.250.255.250}}
            - {{name: vip_subnet, value: "32"}}
    preKubeadmCommands:
    - "sed -i 's#admin.conf#super-admin.conf#' /etc/kubernetes/manifests/kube-vip.yaml"
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata: {{name: big-cp, namespace: fleet}}
spec:
  template:
    spec:
      image: {{url: http://images/node.raw, checksum: http://images/node.raw.sha256sum, checksumType: sha256, format: raw}}
      hostSelector: {{matchLabels: {{role: control-plane}}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata: {{name: big-workers, namespace: fleet}}
spec:
  template:
    spec:
      image: {{url: http://images/node.raw, checksum: http://images/node.raw.sha256sum, checksumType: sha256, format: raw}}
      hostSelector: {{matchLabels: {{role: worker}}}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata: {{name: big-workers, namespace: fleet}}
spec:
  clusterName: big
  replicas: {workers}
  selector: {{matchLabels: {{pool: workers}}}}
  template:
    metadata: {{labels: {{pool: workers}}}}
    spec:
      clusterName: big
      version: v1.31.4
      bootstrap: {{configRef: {{apiVersion: bootstrap.cluster.x-k8s.io/v1beta1, kind: KubeadmConfigTemplate, name: big-workers}}}}
      infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: Metal3MachineTemplate, name: big-workers}}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata: {{name: big-workers, namespace: fleet}}
spec: {{template: {{spec: {{preKubeadmCommands: [ip link set dev ens2 up]}}}}}}
---
apiVersion: addons.cluster.x-k8s.io/v1beta1
kind: ClusterResourceSet
metadata: {{name: cilium, namespace: fleet}}
spec:
  clusterSelector: {{matchLabels: {{cni: cilium}}}}
  resources: [{{kind: ConfigMap, name: cilium}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: cilium, namespace: fleet}}
data:
  cilium.yaml: |
    apiVersion: v1
    kind: ConfigMap
    metadata: {{name: cilium-config, namespace: kube-system}}
    data:
      kube-proxy-replacement: "true"
      k8s-service-host: 10.250.255.250
      ipv4-native-routing-cidr: 10.244.0.0/16
"#
    )
}

fn host(i: usize) -> String {
    let role = if i < CONTROL_PLANES {
        "control-plane"
    } else {
        "worker"
    };
    let mac = format!(
        "52:54:{:02x}:{:02x}:{:02x}:01",
        i >> 16,
        (i >> 8) & 0xff,
        i & 0xff
    );
    let ip = format!("10.250.{}.{}", i / 250, i % 250 + 2);
    format!(
        r#"---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata: {{name: host-{i}, namespace: fleet, labels: {{role: {role}}}}}
spec:
  online: true
  bootMACAddress: "{mac}"
  bmc: {{address: "redfish-virtualmedia+https://10.0.{a}.{b}/redfish/v1/Systems/1", credentialsName: host-{i}-bmc}}
  networkData: {{name: host-{i}-network}}
status:
  hardware:
    nics:
    - {{name: ens2, mac: "{mac}"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: host-{i}-bmc, namespace: fleet}}
stringData: {{username: admin, password: secret}}
---
apiVersion: v1
kind: Secret
metadata: {{name: host-{i}-network, namespace: fleet}}
stringData:
  networkData: |
    {{"links": [{{"id": "ens2", "type": "phy", "ethernet_mac_address": "{mac}"}}],
     "networks": [{{"id": "n0", "type": "ipv4", "link": "ens2", "ip_address": "{ip}", "netmask": "255.255.0.0",
                   "routes": [{{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.250.0.1"}}]}}]}}
"#,
        a = i / 250,
        b = i % 250 + 2,
    )
}

/// The generated bundle as YAML text.
fn bundle() -> String {
    let mut text = cluster();
    for i in 0..HOSTS {
        let _ = write!(text, "{}", host(i));
    }
    text
}

fn bench(c: &mut Criterion) {
    let text = bundle();
    let objects = capstan_manifest::load_str("bundle.yaml", &text).expect("bundle loads");
    let options = LintOptions::default();
    let report = lint(objects.clone(), &options);
    assert!(
        report.diagnostics.is_empty(),
        "the generated bundle must be clean:\n{}",
        report.render_human(false)
    );
    c.bench_function("lint 1000-host bundle", |b| {
        b.iter_batched(
            || objects.clone(),
            |objects| black_box(lint(objects, &options)),
            BatchSize::LargeInput,
        );
    });
    c.bench_function("load + lint 1000-host bundle", |b| {
        b.iter(|| {
            let objects =
                capstan_manifest::load_str("bundle.yaml", black_box(&text)).expect("loads");
            black_box(lint(objects, &options))
        });
    });
}

/// The objects of `capstan render`'s generated 1,000-host cluster.
fn rendered_bundle() -> Vec<capstan_manifest::LoadedObject> {
    use capstan_render::generate::{CILIUM_MANIFEST_PATH, SAMPLE_CILIUM_MANIFEST, generated_spec};
    let spec_dir = tempfile::tempdir().expect("temporary directory");
    let manifest = spec_dir.path().join(CILIUM_MANIFEST_PATH);
    if let Some(parent) = manifest.parent() {
        std::fs::create_dir_all(parent).expect("manifest directory");
    }
    std::fs::write(&manifest, SAMPLE_CILIUM_MANIFEST).expect("manifest");
    let bundle = capstan_render::render(
        &generated_spec(HOSTS),
        spec_dir.path(),
        &capstan_render::RenderOptions::default(),
    )
    .expect("generated spec renders");
    bundle
        .files
        .iter()
        .filter(|f| f.path.extension().is_some_and(|e| e == "yaml"))
        .flat_map(|f| {
            capstan_manifest::load_str(&f.path.to_string_lossy(), &f.contents).expect("loads")
        })
        .collect()
}

fn bench_rendered(c: &mut Criterion) {
    let objects = rendered_bundle();
    let options = LintOptions::default();
    let report = lint(objects.clone(), &options);
    assert!(
        report.diagnostics.is_empty(),
        "the rendered bundle must be clean:\n{}",
        report.render_human(false)
    );
    c.bench_function("lint rendered 1000-host bundle", |b| {
        b.iter_batched(
            || objects.clone(),
            |objects| black_box(lint(objects, &options)),
            BatchSize::LargeInput,
        );
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench, bench_rendered
}
criterion_main!(benches);
