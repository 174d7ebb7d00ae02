//! v1beta1 ⇄ v1beta2 conversion of whole objects: capi-1 as its users write it (three control
//! planes, kube-vip static pod files, preKubeadmCommands, skipPhases, podSubnet, Metal3MachineTemplates
//! with hostSelector and image) and objects in upstream's current v1beta2 shape. Every round trip must
//! give back the original exactly, every converted object must validate against the upstream CRD
//! schema of its version, extra fields must survive, and garbage must be an error, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::OnceLock;

use capstan_model::convert::{CONVERSION_DATA_ANNOTATION, ConvertError, convert};
use capstan_schema::{CrdSet, validate};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// The upstream CRDs, loaded once.
fn crds() -> &'static CrdSet {
    static CRDS: OnceLock<CrdSet> = OnceLock::new();
    CRDS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/crds");
        CrdSet::load_dir(&dir).expect("reference CRDs load")
    })
}

fn objects(text: &str) -> Vec<Value> {
    capstan_manifest::load_str("fixture.yaml", text)
        .expect("fixture parses")
        .into_iter()
        .map(|object| object.value)
        .collect()
}

fn describe(object: &Value) -> String {
    format!(
        "{} {}",
        object["apiVersion"].as_str().unwrap_or("?"),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// Validates against the upstream schema of the object's own apiVersion and kind.
fn assert_valid(object: &Value) {
    let api_version = object["apiVersion"].as_str().unwrap();
    let kind = object["kind"].as_str().unwrap();
    let schema = crds()
        .schema_for(api_version, kind)
        .unwrap_or_else(|| panic!("no schema for {api_version} {kind}"));
    let violations: Vec<String> = validate(schema, object)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        violations.is_empty(),
        "{kind} {} is not a valid {api_version}:\n  {}\n{}",
        describe(object),
        violations.join("\n  "),
        serde_json::to_string_pretty(object).unwrap()
    );
}

fn other_version(api_version: &str) -> String {
    match api_version.rsplit_once('/') {
        Some((group, "v1beta1")) => format!("{group}/v1beta2"),
        Some((group, _)) => format!("{group}/v1beta1"),
        None => panic!("{api_version} has no group"),
    }
}

fn conversion_data(object: &Value) -> Option<Value> {
    object["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION]
        .as_str()
        .map(|text| serde_json::from_str(text).unwrap())
}

/// Converts to the other version and back, checking validity on the way; returns the converted
/// object.
fn assert_round_trip(original: &Value) -> Value {
    let api_version = original["apiVersion"].as_str().unwrap();
    let target = other_version(api_version);
    let converted = convert(original.clone(), &target)
        .unwrap_or_else(|e| panic!("{}: {e}", describe(original)));
    assert_eq!(converted["apiVersion"], target.as_str());
    assert_valid(&converted);
    let back = convert(converted.clone(), api_version)
        .unwrap_or_else(|e| panic!("{} back: {e}", describe(original)));
    assert_eq!(
        &back,
        original,
        "{} did not survive the round trip; via\n{}",
        describe(original),
        serde_json::to_string_pretty(&converted).unwrap()
    );
    converted
}

const CAPI_1_V1BETA1: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: capi-1
  namespace: default
  labels:
    cni: cilium
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["10.244.0.0/16"]
    services:
      cidrBlocks: ["10.96.0.0/12"]
    serviceDomain: cluster.local
  controlPlaneEndpoint:
    host: 10.250.250.29
    port: 6443
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1beta1
    kind: KubeadmControlPlane
    name: capi-1
    namespace: default
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: Metal3Cluster
    name: capi-1
    namespace: default
status:
  phase: Provisioned
  observedGeneration: 2
  infrastructureReady: true
  controlPlaneReady: true
  failureDomains:
    rack-b:
      attributes:
        rack: b
    rack-a:
      controlPlane: true
      attributes:
        rack: a
  conditions:
  - type: Ready
    status: "True"
    lastTransitionTime: "2025-11-10T09:12:44Z"
  - type: ControlPlaneInitialized
    status: "True"
    lastTransitionTime: "2025-11-10T09:05:02Z"
  v1beta2:
    conditions:
    - type: Available
      status: "True"
      reason: Available
      message: ""
      lastTransitionTime: "2025-11-10T09:12:44Z"
      observedGeneration: 2
    controlPlane:
      desiredReplicas: 3
      replicas: 3
      readyReplicas: 3
      availableReplicas: 3
      upToDateReplicas: 3
    workers:
      desiredReplicas: 1
      replicas: 1
      readyReplicas: 1
      availableReplicas: 1
      upToDateReplicas: 1
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3Cluster
metadata:
  name: capi-1
  namespace: default
spec:
  controlPlaneEndpoint:
    host: 10.250.250.29
    port: 6443
  noCloudProvider: true
status:
  ready: true
  lastUpdated: "2025-11-10T09:01:13Z"
  conditions:
  - type: Ready
    status: "True"
    lastTransitionTime: "2025-11-10T09:01:13Z"
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: capi-1
  namespace: default
spec:
  replicas: 3
  version: v1.30.6
  machineTemplate:
    metadata:
      labels:
        cluster.x-k8s.io/role: control-plane
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
      kind: Metal3MachineTemplate
      name: capi-1-controlplane
      namespace: default
    nodeDrainTimeout: 5m
  rolloutStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
  remediationStrategy:
    maxRetry: 3
    retryPeriod: 2m
    minHealthyPeriod: 1h0m0s
  kubeadmConfigSpec:
    clusterConfiguration:
      networking:
        podSubnet: 10.244.0.0/16
        serviceSubnet: 10.96.0.0/12
      apiServer:
        certSANs:
        - 10.250.250.29
        - capi-1.cluster.example
        extraArgs:
          audit-log-maxage: "30"
          profiling: "false"
        timeoutForControlPlane: 4m0s
      controllerManager:
        extraArgs:
          bind-address: 0.0.0.0
      scheduler:
        extraArgs:
          bind-address: 0.0.0.0
      etcd:
        local:
          extraArgs:
            listen-metrics-urls: http://0.0.0.0:2381
    initConfiguration:
      skipPhases:
      - addon/kube-proxy
      nodeRegistration:
        name: '{{ ds.meta_data.name }}'
        kubeletExtraArgs:
          node-labels: metal3.io/uuid={{ ds.meta_data.uuid }}
          provider-id: metal3://{{ ds.meta_data.providerid }}
    joinConfiguration:
      controlPlane: {}
      skipPhases:
      - addon/kube-proxy
      nodeRegistration:
        name: '{{ ds.meta_data.name }}'
        kubeletExtraArgs:
          node-labels: metal3.io/uuid={{ ds.meta_data.uuid }}
          provider-id: metal3://{{ ds.meta_data.providerid }}
    files:
    - path: /etc/kubernetes/manifests/kube-vip.yaml
      owner: root:root
      permissions: "0644"
      content: |
        apiVersion: v1
        kind: Pod
        metadata:
          name: kube-vip
          namespace: kube-system
        spec:
          containers:
          - name: kube-vip
            image: ghcr.io/kube-vip/kube-vip:v1.0.1
            args: [manager]
            env:
            - name: vip_arp
              value: "true"
            - name: port
              value: "6443"
            - name: vip_interface
              value: ens2
            - name: address
              value: "10.250.250.29"
            - name: vip_subnet
              value: "32"
            - name: cp_enable
              value: "true"
            - name: vip_leaderelection
              value: "true"
            volumeMounts:
            - mountPath: /etc/kubernetes/admin.conf
              name: kubeconfig
          hostNetwork: true
          volumes:
          - name: kubeconfig
            hostPath:
              path: /etc/kubernetes/admin.conf
    - path: /usr/local/bin/kube-vip-super-admin.sh
      owner: root:root
      permissions: "0755"
      content: |
        #!/bin/bash
        # Kubernetes 1.29+: admin.conf lacks cluster-admin until kubeadm init finishes.
        if [ -f /run/kubeadm/kubeadm.yaml ]; then
          sed -i 's#path: /etc/kubernetes/admin.conf#path: /etc/kubernetes/super-admin.conf#' \
            /etc/kubernetes/manifests/kube-vip.yaml
        fi
    preKubeadmCommands:
    - /usr/local/bin/kube-vip-super-admin.sh
    - for i in $(seq 1 12); do getent hosts registry.k8s.io && break; sleep 5; done
    postKubeadmCommands:
    - kubectl --kubeconfig /etc/kubernetes/admin.conf label node "$(hostname -s)" node-role.kubernetes.io/control-plane= --overwrite
    users:
    - name: jweber
      sudo: ALL=(ALL) NOPASSWD:ALL
      sshAuthorizedKeys:
      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1c3RlcmFwaWV4YW1wbGVrZXlmb3Jkb2NzMDAx jweber@laptop
status:
  initialized: true
  ready: true
  replicas: 3
  readyReplicas: 3
  updatedReplicas: 3
  unavailableReplicas: 0
  version: v1.30.6
  selector: cluster.x-k8s.io/cluster-name=capi-1,cluster.x-k8s.io/control-plane
  observedGeneration: 1
  lastRemediation:
    machine: capi-1-x7k2p
    retryCount: 1
    timestamp: "2025-11-10T10:00:00Z"
  conditions:
  - type: Ready
    status: "True"
    lastTransitionTime: "2025-11-10T09:12:44Z"
  - type: MachinesReady
    status: "False"
    severity: Warning
    reason: Draining
    message: capi-1-x7k2p is being drained
    lastTransitionTime: "2025-11-10T10:01:00Z"
  v1beta2:
    availableReplicas: 3
    readyReplicas: 3
    upToDateReplicas: 3
    conditions:
    - type: Available
      status: "True"
      reason: Available
      message: ""
      lastTransitionTime: "2025-11-10T09:12:44Z"
      observedGeneration: 1
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata:
  name: capi-1-controlplane
  namespace: default
spec:
  template:
    spec:
      automatedCleaningMode: metadata
      dataTemplate:
        name: capi-1-controlplane-metadata
      image:
        url: http://netboot.cluster.example/fedora-43-ext4-k8s.raw
        checksum: http://netboot.cluster.example/fedora-43-ext4-k8s.raw.sha256sum
        checksumType: sha256
        format: raw
      hostSelector:
        matchLabels:
          cluster.x-k8s.io/cluster-name: capi-1
          cluster.x-k8s.io/role: control-plane
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata:
  name: capi-1-workers
  namespace: default
spec:
  nodeReuse: false
  template:
    spec:
      image:
        url: http://netboot.cluster.example/fedora-43-ext4-k8s.raw
        checksum: http://netboot.cluster.example/fedora-43-ext4-k8s.raw.sha256sum
        checksumType: sha256
        format: raw
      hostSelector:
        matchLabels:
          cluster.x-k8s.io/cluster-name: capi-1
          cluster.x-k8s.io/role: worker
        matchExpressions:
        - key: hardware.example/gpu
          operator: DoesNotExist
          values: []
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: capi-1-workers
  namespace: default
  labels:
    cluster.x-k8s.io/cluster-name: capi-1
spec:
  clusterName: capi-1
  replicas: 1
  minReadySeconds: 30
  progressDeadlineSeconds: 600
  revisionHistoryLimit: 1
  selector:
    matchLabels:
      cluster.x-k8s.io/cluster-name: capi-1
      cluster.x-k8s.io/deployment-name: capi-1-workers
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
      deletePolicy: Oldest
    remediation:
      maxInFlight: 1
  template:
    metadata:
      labels:
        cluster.x-k8s.io/cluster-name: capi-1
        cluster.x-k8s.io/deployment-name: capi-1-workers
    spec:
      clusterName: capi-1
      version: v1.30.6
      nodeDrainTimeout: 10m0s
      nodeDeletionTimeout: 30s
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: capi-1-workers
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: Metal3MachineTemplate
        name: capi-1-workers
status:
  phase: Running
  observedGeneration: 1
  selector: cluster.x-k8s.io/cluster-name=capi-1,cluster.x-k8s.io/deployment-name=capi-1-workers
  replicas: 1
  availableReplicas: 1
  readyReplicas: 1
  updatedReplicas: 1
  unavailableReplicas: 0
  conditions:
  - type: Available
    status: "True"
    lastTransitionTime: "2025-11-10T09:30:00Z"
  v1beta2:
    availableReplicas: 1
    readyReplicas: 1
    upToDateReplicas: 1
    conditions:
    - type: Available
      status: "True"
      reason: Available
      message: ""
      lastTransitionTime: "2025-11-10T09:30:00Z"
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: capi-1-workers
  namespace: default
spec:
  template:
    spec:
      joinConfiguration:
        skipPhases:
        - addon/kube-proxy
        nodeRegistration:
          name: '{{ ds.meta_data.name }}'
          kubeletExtraArgs:
            node-labels: node-role.kubernetes.io/worker=,metal3.io/uuid={{ ds.meta_data.uuid }}
            provider-id: metal3://{{ ds.meta_data.providerid }}
      preKubeadmCommands:
      - for i in $(seq 1 12); do getent hosts registry.k8s.io && break; sleep 5; done
      users:
      - name: jweber
        sudo: ALL=(ALL) NOPASSWD:ALL
        sshAuthorizedKeys:
        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1c3RlcmFwaWV4YW1wbGVrZXlmb3Jkb2NzMDAx jweber@laptop
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfig
metadata:
  name: capi-1-x7k2p
  namespace: default
  labels:
    cluster.x-k8s.io/cluster-name: capi-1
    cluster.x-k8s.io/control-plane: ""
spec:
  clusterConfiguration:
    apiVersion: kubeadm.k8s.io/v1beta3
    kind: ClusterConfiguration
    clusterName: capi-1
    kubernetesVersion: v1.30.6
    controlPlaneEndpoint: 10.250.250.29:6443
    networking:
      podSubnet: 10.244.0.0/16
      serviceSubnet: 10.96.0.0/12
      dnsDomain: cluster.local
    apiServer:
      certSANs:
      - 10.250.250.29
  initConfiguration:
    apiVersion: kubeadm.k8s.io/v1beta3
    kind: InitConfiguration
    skipPhases:
    - addon/kube-proxy
    bootstrapTokens:
    - token: abcdef.0123456789abcdef
      ttl: 24h0m0s
      usages: [signing, authentication]
    nodeRegistration:
      name: '{{ ds.meta_data.name }}'
      kubeletExtraArgs:
        provider-id: metal3://{{ ds.meta_data.providerid }}
  joinConfiguration:
    apiVersion: kubeadm.k8s.io/v1beta3
    kind: JoinConfiguration
    discovery:
      timeout: 5m0s
    nodeRegistration:
      name: '{{ ds.meta_data.name }}'
  useExperimentalRetryJoin: true
status:
  ready: true
  dataSecretName: capi-1-x7k2p
  observedGeneration: 1
  conditions:
  - type: Ready
    status: "True"
    lastTransitionTime: "2025-11-10T09:02:00Z"
  v1beta2:
    conditions:
    - type: Ready
      status: "True"
      reason: Ready
      message: ""
      lastTransitionTime: "2025-11-10T09:02:00Z"
---
apiVersion: addons.cluster.x-k8s.io/v1beta1
kind: ClusterResourceSet
metadata:
  name: cilium-cni-crs
  namespace: default
spec:
  strategy: ApplyOnce
  clusterSelector:
    matchLabels:
      cni: cilium
  resources:
  - name: cilium-cni-manifests
    kind: ConfigMap
status:
  observedGeneration: 1
  conditions:
  - type: ResourcesApplied
    status: "True"
    lastTransitionTime: "2025-11-10T09:14:00Z"
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Machine
metadata:
  name: capi-1-x7k2p
  namespace: default
  labels:
    cluster.x-k8s.io/cluster-name: capi-1
    cluster.x-k8s.io/control-plane: ""
spec:
  clusterName: capi-1
  version: v1.30.6
  providerID: metal3://default/node-0/capi-1-controlplane-9mzfx
  nodeDrainTimeout: 5m
  bootstrap:
    configRef:
      apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
      kind: KubeadmConfig
      name: capi-1-x7k2p
      namespace: default
      uid: 6f1c9a3e-43a1-4d8e-9f0b-2a7c5d0e1b23
    dataSecretName: capi-1-x7k2p
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: Metal3Machine
    name: capi-1-controlplane-9mzfx
    namespace: default
status:
  phase: Running
  bootstrapReady: true
  infrastructureReady: true
  observedGeneration: 2
  lastUpdated: "2025-11-10T09:10:00Z"
  nodeRef:
    apiVersion: v1
    kind: Node
    name: node-0
    uid: 0a1b2c3d-0000-4000-8000-000000000000
  addresses:
  - type: InternalIP
    address: 10.250.250.30
  nodeInfo:
    architecture: amd64
    bootID: 8d4f8d5e-0b4e-4d6c-9d1b-6f7a2c9e0a11
    containerRuntimeVersion: containerd://1.7.23
    kernelVersion: 6.11.4-301.fc43.x86_64
    kubeProxyVersion: v1.30.6
    kubeletVersion: v1.30.6
    machineID: 3c6a2b1e0f9d4c8b8a7e6d5c4b3a2910
    operatingSystem: linux
    osImage: Fedora Linux 43 (Server Edition)
    systemUUID: 3c6a2b1e-0f9d-4c8b-8a7e-6d5c4b3a2910
  conditions:
  - type: Ready
    status: "True"
    lastTransitionTime: "2025-11-10T09:10:00Z"
  v1beta2:
    conditions:
    - type: Ready
      status: "True"
      reason: Ready
      message: ""
      lastTransitionTime: "2025-11-10T09:10:00Z"
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineSet
metadata:
  name: capi-1-workers-7d9c6
  namespace: default
spec:
  clusterName: capi-1
  replicas: 1
  minReadySeconds: 30
  deletePolicy: Oldest
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: capi-1-workers
  template:
    metadata:
      labels:
        cluster.x-k8s.io/deployment-name: capi-1-workers
    spec:
      clusterName: capi-1
      version: v1.30.6
      nodeVolumeDetachTimeout: 1m30s
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: capi-1-workers
          namespace: default
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: Metal3MachineTemplate
        name: capi-1-workers
        namespace: default
status:
  replicas: 1
  availableReplicas: 1
  readyReplicas: 1
  fullyLabeledReplicas: 1
  observedGeneration: 1
  selector: cluster.x-k8s.io/deployment-name=capi-1-workers
  v1beta2:
    availableReplicas: 1
    readyReplicas: 1
    upToDateReplicas: 1
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineHealthCheck
metadata:
  name: capi-1-workers-unhealthy-5m
  namespace: default
spec:
  clusterName: capi-1
  maxUnhealthy: 40%
  nodeStartupTimeout: 20m
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: capi-1-workers
  unhealthyConditions:
  - type: Ready
    status: Unknown
    timeout: 300s
  - type: Ready
    status: "False"
    timeout: 5m0s
  remediationTemplate:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: Metal3RemediationTemplate
    name: capi-1-workers-remediation
    namespace: default
status:
  expectedMachines: 1
  currentHealthy: 1
  remediationsAllowed: 1
  observedGeneration: 1
  targets:
  - capi-1-workers-7d9c6-kx2vw
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3Machine
metadata:
  name: capi-1-controlplane-9mzfx
  namespace: default
spec:
  providerID: metal3://default/node-0/capi-1-controlplane-9mzfx
  automatedCleaningMode: metadata
  dataTemplate:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: Metal3DataTemplate
    name: capi-1-controlplane-metadata
    namespace: default
  image:
    url: http://netboot.cluster.example/fedora-43-ext4-k8s.raw
    checksum: http://netboot.cluster.example/fedora-43-ext4-k8s.raw.sha256sum
    checksumType: sha256
    format: raw
  hostSelector:
    matchLabels:
      cluster.x-k8s.io/role: control-plane
status:
  ready: true
  phase: Running
  lastUpdated: "2025-11-10T09:08:00Z"
  renderedData:
    name: capi-1-controlplane-metadata-0
    namespace: default
  userData:
    name: capi-1-x7k2p
    namespace: default
  addresses:
  - type: InternalIP
    address: 10.250.250.30
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3DataTemplate
metadata:
  name: capi-1-controlplane-metadata
  namespace: default
spec:
  clusterName: capi-1
  templateReference: capi-1-controlplane-metadata-old
  metaData:
    objectNames:
    - key: name
      object: machine
    - key: local-hostname
      object: machine
    strings:
    - key: role
      value: control-plane
    ipAddressesFromIPPool:
    - key: ip
      name: capi-1-pool
      apiGroup: ipam.metal3.io
      kind: IPPool
  networkData:
    links:
      ethernets:
      - type: phy
        id: ens2
        macAddress:
          fromHostInterface: ens2
    networks:
      ipv4:
      - id: baremetal
        link: ens2
        ipAddressFromIPPool: capi-1-pool
        routes:
        - network: 0.0.0.0
          prefix: 0
          gateway:
            string: 10.250.250.1
    services:
      dns:
      - 10.250.250.1
status:
  lastUpdated: "2025-11-10T09:00:00Z"
  indexes:
    capi-1-controlplane-9mzfx: 0
    capi-1-controlplane-k2l4d: 1
"#;

const UPSTREAM_V1BETA2: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: capi-1
  namespace: default
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["10.244.0.0/16"]
    services:
      cidrBlocks: ["10.96.0.0/12"]
  controlPlaneEndpoint:
    host: 10.250.250.29
    port: 6443
  controlPlaneRef:
    apiGroup: controlplane.cluster.x-k8s.io
    kind: KubeadmControlPlane
    name: capi-1
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: Metal3Cluster
    name: capi-1
status:
  phase: Provisioned
  observedGeneration: 2
  initialization:
    infrastructureProvisioned: true
    controlPlaneInitialized: true
  failureDomains:
  - name: rack-a
    controlPlane: true
  conditions:
  - type: Available
    status: "True"
    reason: Available
    message: ""
    lastTransitionTime: "2025-11-10T09:12:44Z"
    observedGeneration: 2
  controlPlane:
    desiredReplicas: 3
    replicas: 3
    readyReplicas: 3
    availableReplicas: 3
    upToDateReplicas: 3
  workers:
    desiredReplicas: 1
    replicas: 1
  deprecated:
    v1beta1:
      conditions:
      - type: Ready
        status: "True"
        lastTransitionTime: "2025-11-10T09:12:44Z"
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: blue
  namespace: default
spec:
  topology:
    classRef:
      name: metal3-kubeadm
      namespace: classes
    version: v1.31.4
    controlPlane:
      replicas: 3
      healthCheck:
        enabled: true
        checks:
          nodeStartupTimeoutSeconds: 600
          unhealthyNodeConditions:
          - type: Ready
            status: Unknown
            timeoutSeconds: 300
        remediation:
          triggerIf:
            unhealthyLessThanOrEqualTo: 33%
      deletion:
        nodeDrainTimeoutSeconds: 300
    workers:
      machineDeployments:
      - class: default-worker
        name: md-0
        replicas: 2
        rollout:
          strategy:
            type: RollingUpdate
            rollingUpdate:
              maxSurge: 1
              maxUnavailable: 0
        deletion:
          order: Oldest
          nodeDeletionTimeoutSeconds: 10
        healthCheck:
          remediation:
            maxInFlight: 1
            triggerIf:
              unhealthyInRange: "[0-2]"
    variables:
    - name: vip
      value: 10.250.250.40
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: capi-1
  namespace: default
spec:
  replicas: 3
  version: v1.31.4
  machineNaming:
    template: "{{ .kubeadmControlPlane.name }}-{{ .random }}"
  machineTemplate:
    metadata:
      labels:
        cluster.x-k8s.io/role: control-plane
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: Metal3MachineTemplate
        name: capi-1-controlplane
      deletion:
        nodeDrainTimeoutSeconds: 300
        nodeDeletionTimeoutSeconds: 10
  rollout:
    after: "2030-07-23T10:56:54Z"
    before:
      certificatesExpiryDays: 21
    strategy:
      type: RollingUpdate
      rollingUpdate:
        maxSurge: 1
  remediation:
    maxRetry: 5
    minHealthyPeriodSeconds: 3600
    retryPeriodSeconds: 90
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        certSANs:
        - 10.250.250.29
        extraArgs:
        - name: audit-log-maxage
          value: "30"
        - name: profiling
          value: "false"
      controllerManager:
        extraArgs:
        - name: bind-address
          value: 0.0.0.0
      etcd:
        local:
          extraArgs:
          - name: listen-metrics-urls
            value: http://0.0.0.0:2381
      certificateValidityPeriodDays: 365
      caCertificateValidityPeriodDays: 3650
    initConfiguration:
      skipPhases:
      - addon/kube-proxy
      bootstrapTokens:
      - token: abcdef.0123456789abcdef
        ttlSeconds: 86400
      nodeRegistration:
        name: '{{ ds.meta_data.name }}'
        kubeletExtraArgs:
        - name: provider-id
          value: metal3://{{ ds.meta_data.providerid }}
      timeouts:
        controlPlaneComponentHealthCheckSeconds: 240
        kubeletHealthCheckSeconds: 120
        kubernetesAPICallSeconds: 60
        etcdAPICallSeconds: 120
        tlsBootstrapSeconds: 300
        discoverySeconds: 300
    joinConfiguration:
      controlPlane: {}
      skipPhases:
      - addon/kube-proxy
      nodeRegistration:
        name: '{{ ds.meta_data.name }}'
        kubeletExtraArgs:
        - name: provider-id
          value: metal3://{{ ds.meta_data.providerid }}
      timeouts:
        controlPlaneComponentHealthCheckSeconds: 240
        tlsBootstrapSeconds: 300
    files:
    - path: /etc/kubernetes/manifests/kube-vip.yaml
      owner: root:root
      permissions: "0644"
      content: |
        apiVersion: v1
        kind: Pod
        metadata:
          name: kube-vip
          namespace: kube-system
    preKubeadmCommands:
    - for i in $(seq 1 12); do getent hosts registry.k8s.io && break; sleep 5; done
status:
  initialization:
    controlPlaneInitialized: true
  replicas: 3
  availableReplicas: 3
  readyReplicas: 3
  upToDateReplicas: 3
  version: v1.31.4
  selector: cluster.x-k8s.io/cluster-name=capi-1,cluster.x-k8s.io/control-plane
  observedGeneration: 3
  lastRemediation:
    machine: capi-1-x7k2p
    retryCount: 1
    time: "2025-11-10T10:00:00Z"
  conditions:
  - type: Available
    status: "True"
    reason: Available
    message: ""
    lastTransitionTime: "2025-11-10T09:12:44Z"
  deprecated:
    v1beta1:
      readyReplicas: 3
      updatedReplicas: 3
      unavailableReplicas: 0
      conditions:
      - type: Ready
        status: "True"
        lastTransitionTime: "2025-11-10T09:12:44Z"
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata:
  name: capi-1-workers
  namespace: default
spec:
  clusterName: capi-1
  replicas: 2
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: capi-1-workers
  machineNaming:
    template: "{{ .machineSet.name }}-{{ .random }}"
  rollout:
    after: "2030-07-23T10:56:54Z"
    strategy:
      type: RollingUpdate
      rollingUpdate:
        maxSurge: 1
        maxUnavailable: 0
  deletion:
    order: Newest
  remediation:
    maxInFlight: 50%
  template:
    metadata:
      labels:
        cluster.x-k8s.io/deployment-name: capi-1-workers
    spec:
      clusterName: capi-1
      version: v1.31.4
      minReadySeconds: 15
      bootstrap:
        configRef:
          apiGroup: bootstrap.cluster.x-k8s.io
          kind: KubeadmConfigTemplate
          name: capi-1-workers
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: Metal3MachineTemplate
        name: capi-1-workers
      deletion:
        nodeDrainTimeoutSeconds: 600
        nodeVolumeDetachTimeoutSeconds: 90
status:
  replicas: 2
  availableReplicas: 2
  readyReplicas: 2
  upToDateReplicas: 2
  phase: Running
  deprecated:
    v1beta1:
      availableReplicas: 2
      readyReplicas: 2
      updatedReplicas: 2
      unavailableReplicas: 0
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineSet
metadata:
  name: capi-1-workers-7d9c6
  namespace: default
spec:
  clusterName: capi-1
  replicas: 2
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: capi-1-workers
  deletion:
    order: Oldest
  template:
    spec:
      clusterName: capi-1
      minReadySeconds: 15
      bootstrap:
        dataSecretName: capi-1-workers-bootstrap
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: Metal3MachineTemplate
        name: capi-1-workers
status:
  replicas: 2
  upToDateReplicas: 2
  deprecated:
    v1beta1:
      fullyLabeledReplicas: 2
      failureReason: InvalidConfiguration
      failureMessage: nothing is wrong, this is a test
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: capi-1-x7k2p
  namespace: default
spec:
  clusterName: capi-1
  version: v1.31.4
  minReadySeconds: 10
  bootstrap:
    configRef:
      apiGroup: bootstrap.cluster.x-k8s.io
      kind: KubeadmConfig
      name: capi-1-x7k2p
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: Metal3Machine
    name: capi-1-controlplane-9mzfx
  deletion:
    nodeDrainTimeoutSeconds: 300
status:
  phase: Updating
  failureDomain: rack-a
  initialization:
    bootstrapDataSecretCreated: true
    infrastructureProvisioned: true
  nodeRef:
    name: node-0
  conditions:
  - type: Ready
    status: "True"
    reason: Ready
    message: ""
    lastTransitionTime: "2025-11-10T09:10:00Z"
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineHealthCheck
metadata:
  name: capi-1-workers-unhealthy-5m
  namespace: default
spec:
  clusterName: capi-1
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: capi-1-workers
  checks:
    nodeStartupTimeoutSeconds: 1200
    unhealthyNodeConditions:
    - type: Ready
      status: Unknown
      timeoutSeconds: 300
    unhealthyMachineConditions:
    - type: NodeHealthy
      status: "False"
      timeoutSeconds: 600
  remediation:
    triggerIf:
      unhealthyInRange: "[0-2]"
    templateRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
      kind: Metal3RemediationTemplate
      name: capi-1-workers-remediation
status:
  expectedMachines: 2
  currentHealthy: 2
  remediationsAllowed: 2
  conditions:
  - type: RemediationAllowed
    status: "True"
    reason: RemediationAllowed
    message: ""
    lastTransitionTime: "2025-11-10T09:30:00Z"
---
apiVersion: addons.cluster.x-k8s.io/v1beta2
kind: ClusterResourceSet
metadata:
  name: cilium-cni-crs
  namespace: default
spec:
  strategy: Reconcile
  clusterSelector:
    matchLabels:
      cni: cilium
  resources:
  - name: cilium-cni-manifests
    kind: ConfigMap
status:
  conditions:
  - type: ResourcesApplied
    status: "True"
    reason: Applied
    message: ""
    lastTransitionTime: "2025-11-10T09:14:00Z"
  deprecated:
    v1beta1:
      conditions:
      - type: ResourcesApplied
        status: "True"
        lastTransitionTime: "2025-11-10T09:14:00Z"
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: capi-1-workers
  namespace: default
spec:
  template:
    metadata:
      labels:
        cluster.x-k8s.io/deployment-name: capi-1-workers
    spec:
      joinConfiguration:
        nodeRegistration:
          name: '{{ ds.meta_data.name }}'
          kubeletExtraArgs:
          - name: node-labels
            value: node-role.kubernetes.io/worker=,metal3.io/uuid={{ ds.meta_data.uuid }}
          - name: provider-id
            value: metal3://{{ ds.meta_data.providerid }}
        timeouts:
          tlsBootstrapSeconds: 90
      preKubeadmCommands:
      - for i in $(seq 1 12); do getent hosts registry.k8s.io && break; sleep 5; done
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfig
metadata:
  name: capi-1-x7k2p
  namespace: default
spec:
  initConfiguration:
    nodeRegistration:
      name: '{{ ds.meta_data.name }}'
status:
  initialization:
    dataSecretCreated: true
  dataSecretName: capi-1-x7k2p
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: Metal3Cluster
metadata:
  name: capi-1
  namespace: default
spec:
  controlPlaneEndpoint:
    host: 10.250.250.29
    port: 6443
  cloudProviderEnabled: false
  failureDomains:
  - name: rack-a
    controlPlane: true
    attributes:
      rack: a
status:
  initialization:
    provisioned: true
  conditions:
  - type: Ready
    status: "True"
    reason: Ready
    message: ""
    lastTransitionTime: "2025-11-10T09:01:13Z"
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: Metal3MachineTemplate
metadata:
  name: capi-1-controlplane
  namespace: default
spec:
  template:
    metadata:
      labels:
        cluster.x-k8s.io/role: control-plane
    spec:
      dataTemplate:
        name: capi-1-controlplane-metadata
      image:
        url: http://netboot.cluster.example/fedora-43-ext4-k8s.raw
        checksum: http://netboot.cluster.example/fedora-43-ext4-k8s.raw.sha256sum
        checksumType: sha256
        diskFormat: raw
      hostSelector:
        matchLabels:
          cluster.x-k8s.io/role: control-plane
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: Metal3Machine
metadata:
  name: capi-1-controlplane-9mzfx
  namespace: default
spec:
  providerID: metal3://default/node-0/capi-1-controlplane-9mzfx
  dataTemplate:
    name: capi-1-controlplane-metadata
  image:
    url: http://netboot.cluster.example/fedora-43-ext4-k8s.raw
    diskFormat: qcow2
status:
  initialization:
    provisioned: true
  renderedData:
    name: capi-1-controlplane-metadata-0
  deprecated:
    v1beta1:
      failureReason: CreateError
      failureMessage: a test, not a failure
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: Metal3DataTemplate
metadata:
  name: capi-1-controlplane-metadata
  namespace: default
spec:
  clusterName: capi-1
  metaData:
    objectNames:
    - key: name
      object: machine
    prefixesFromPool:
    - key: prefix
      name: capi-1-pool
    gatewaysFromPool:
    - key: gateway
      name: capi-1-pool
      apiGroup: ipam.metal3.io
      kind: IPPool
  networkData:
    links:
      ethernets:
      - type: phy
        id: ens2
        macAddress:
          fromHostInterface: ens2
status:
  indexes:
  - name: capi-1-controlplane-9mzfx
    index: 0
"#;

fn capi_1() -> Vec<Value> {
    objects(CAPI_1_V1BETA1)
}

fn upstream() -> Vec<Value> {
    objects(UPSTREAM_V1BETA2)
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects.iter().find(|o| o["kind"] == kind).unwrap()
}

#[test]
fn the_fixtures_are_valid_in_their_own_version() {
    let all: Vec<Value> = capi_1().into_iter().chain(upstream()).collect();
    let kinds: std::collections::BTreeSet<(String, String)> = all
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_owned(),
                o["apiVersion"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // Every kind with a real conversion, in both versions.
    assert_eq!(kinds.len(), 26, "{kinds:?}");
    for object in &all {
        assert_valid(object);
    }
}

#[test]
fn capi_1_round_trips_through_v1beta2_exactly() {
    for object in capi_1() {
        assert_round_trip(&object);
    }
}

#[test]
fn upstream_v1beta2_round_trips_through_v1beta1_exactly() {
    for object in upstream() {
        assert_round_trip(&object);
    }
}

#[test]
fn capi_1_control_plane_in_v1beta2() {
    let objects = capi_1();
    let kcp = assert_round_trip(find(&objects, "KubeadmControlPlane"));
    let spec = &kcp["spec"];
    assert_eq!(
        spec["machineTemplate"]["spec"]["infrastructureRef"],
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3MachineTemplate", "name": "capi-1-controlplane"})
    );
    assert_eq!(
        spec["machineTemplate"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"],
        300
    );
    assert_eq!(
        spec["machineTemplate"]["metadata"]["labels"]["cluster.x-k8s.io/role"],
        "control-plane"
    );
    assert_eq!(spec["rollout"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
    assert_eq!(
        spec["remediation"],
        json!({"maxRetry": 3, "retryPeriodSeconds": 120, "minHealthyPeriodSeconds": 3600})
    );
    let kubeadm = &spec["kubeadmConfigSpec"];
    assert!(kubeadm["clusterConfiguration"].get("networking").is_none());
    assert_eq!(
        kubeadm["clusterConfiguration"]["apiServer"]["extraArgs"],
        json!([{"name": "audit-log-maxage", "value": "30"}, {"name": "profiling", "value": "false"}])
    );
    assert_eq!(
        kubeadm["initConfiguration"]["timeouts"]["controlPlaneComponentHealthCheckSeconds"],
        240
    );
    assert_eq!(
        kubeadm["joinConfiguration"]["timeouts"]["controlPlaneComponentHealthCheckSeconds"],
        240
    );
    assert_eq!(
        kubeadm["initConfiguration"]["skipPhases"],
        json!(["addon/kube-proxy"])
    );
    assert_eq!(kubeadm["files"].as_array().unwrap().len(), 2);
    assert_eq!(
        kcp["status"]["initialization"]["controlPlaneInitialized"],
        true
    );
    assert_eq!(
        kcp["status"]["lastRemediation"]["time"],
        "2025-11-10T10:00:00Z"
    );
    assert_eq!(kcp["status"]["conditions"][0]["type"], "Available");
    assert_eq!(
        kcp["status"]["deprecated"]["v1beta1"]["conditions"][1]["reason"],
        "Draining"
    );
    // What v1beta2 has no place for, and only that, is stashed.
    assert_eq!(
        conversion_data(&kcp).unwrap(),
        json!({
            "/spec/machineTemplate/nodeDrainTimeout": {"value": "5m", "replaces": "5m0s"},
            "/spec/remediationStrategy/retryPeriod": {"value": "2m", "replaces": "2m0s"},
            "/spec/kubeadmConfigSpec/clusterConfiguration/networking": {"value": {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12"}},
            "/status/ready": {"value": true},
        })
    );
}

#[test]
fn capi_1_workers_and_templates_in_v1beta2() {
    let objects = capi_1();
    let deployment = assert_round_trip(find(&objects, "MachineDeployment"));
    let spec = &deployment["spec"];
    assert_eq!(
        spec["rollout"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    assert_eq!(spec["deletion"]["order"], "Oldest");
    assert_eq!(spec["remediation"]["maxInFlight"], 1);
    assert_eq!(spec["template"]["spec"]["minReadySeconds"], 30);
    assert_eq!(
        spec["template"]["spec"]["deletion"],
        json!({"nodeDrainTimeoutSeconds": 600, "nodeDeletionTimeoutSeconds": 30})
    );
    assert_eq!(
        spec["template"]["spec"]["bootstrap"]["configRef"]["apiGroup"],
        "bootstrap.cluster.x-k8s.io"
    );
    assert_eq!(deployment["status"]["upToDateReplicas"], 1);
    assert_eq!(
        deployment["status"]["deprecated"]["v1beta1"]["updatedReplicas"],
        1
    );

    let template = objects
        .iter()
        .find(|o| o["metadata"]["name"] == "capi-1-workers" && o["kind"] == "Metal3MachineTemplate")
        .unwrap();
    let template = assert_round_trip(template);
    let machine = &template["spec"]["template"]["spec"];
    assert_eq!(machine["image"]["diskFormat"], "raw");
    assert!(machine["image"].get("format").is_none());
    assert_eq!(
        machine["hostSelector"]["matchLabels"]["cluster.x-k8s.io/role"],
        "worker"
    );
    assert_eq!(conversion_data(&template), None);

    let bootstrap = assert_round_trip(find(&objects, "KubeadmConfigTemplate"));
    assert_eq!(
        bootstrap["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]
            [0],
        json!({"name": "node-labels", "value": "node-role.kubernetes.io/worker=,metal3.io/uuid={{ ds.meta_data.uuid }}"})
    );
    assert_eq!(conversion_data(&bootstrap), None);
}

#[test]
fn upstream_control_plane_in_v1beta1() {
    let objects = upstream();
    let kcp = find(&objects, "KubeadmControlPlane");
    let older = convert(kcp.clone(), "controlplane.cluster.x-k8s.io/v1beta1").unwrap();
    assert_valid(&older);
    let spec = &older["spec"];
    assert_eq!(
        spec["machineTemplate"]["infrastructureRef"],
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3MachineTemplate",
            "name": "capi-1-controlplane", "namespace": "default"})
    );
    assert_eq!(spec["machineTemplate"]["nodeDrainTimeout"], "5m0s");
    assert_eq!(spec["machineTemplate"]["nodeDeletionTimeout"], "10s");
    assert_eq!(spec["rolloutAfter"], "2030-07-23T10:56:54Z");
    assert_eq!(spec["rolloutBefore"]["certificatesExpiryDays"], 21);
    assert_eq!(
        spec["remediationStrategy"],
        json!({"maxRetry": 5, "minHealthyPeriod": "1h0m0s", "retryPeriod": "1m30s"})
    );
    assert_eq!(
        spec["machineNamingStrategy"]["template"],
        "{{ .kubeadmControlPlane.name }}-{{ .random }}"
    );
    let kubeadm = &spec["kubeadmConfigSpec"];
    assert_eq!(
        kubeadm["clusterConfiguration"]["apiServer"]["timeoutForControlPlane"],
        "4m0s"
    );
    assert_eq!(
        kubeadm["clusterConfiguration"]["apiServer"]["extraArgs"],
        json!({"audit-log-maxage": "30", "profiling": "false"})
    );
    assert_eq!(
        kubeadm["initConfiguration"]["bootstrapTokens"][0]["ttl"],
        "24h0m0s"
    );
    assert_eq!(kubeadm["joinConfiguration"]["discovery"]["timeout"], "5m0s");
    assert_eq!(older["status"]["initialized"], true);
    assert_eq!(older["status"]["readyReplicas"], 3);
    assert_eq!(older["status"]["v1beta2"]["upToDateReplicas"], 3);
    // The timeouts v1beta1 cannot express wait in the annotation.
    let stash = conversion_data(&older).unwrap();
    assert_eq!(
        stash["/spec/kubeadmConfigSpec/initConfiguration/timeouts/kubeletHealthCheckSeconds"],
        json!({"value": 120})
    );
    assert_eq!(
        stash["/spec/kubeadmConfigSpec/clusterConfiguration/certificateValidityPeriodDays"],
        Value::Null,
        "fields both versions have are not stashed"
    );
}

#[test]
fn duplicate_kubelet_args_survive_the_trip_through_a_map() {
    let objects = upstream();
    // Upstream's CRD refuses a repeated name (a CEL rule), but one stored through an older
    // definition must not be lost by conversion either.
    let mut template = find(&objects, "KubeadmConfigTemplate").clone();
    template["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"] = json!([
        {"name": "node-labels", "value": "node-role.kubernetes.io/worker="},
        {"name": "node-labels", "value": "metal3.io/uuid={{ ds.meta_data.uuid }}"}
    ]);
    let template = &template;
    let older = convert(template.clone(), "bootstrap.cluster.x-k8s.io/v1beta1").unwrap();
    // A map keeps the last of a repeated name; the list as written is stashed.
    assert_eq!(
        older["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"],
        json!({"node-labels": "metal3.io/uuid={{ ds.meta_data.uuid }}"})
    );
    assert_eq!(
        convert(older, "bootstrap.cluster.x-k8s.io/v1beta2").unwrap(),
        *template
    );
}

#[test]
fn references_get_the_version_each_kind_serves() {
    let objects = upstream();
    let cluster = find(&objects, "Cluster");
    let older = convert(cluster.clone(), "cluster.x-k8s.io/v1beta1").unwrap();
    assert_eq!(
        older["spec"]["controlPlaneRef"],
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": "capi-1", "namespace": "default"})
    );
    assert_eq!(
        older["spec"]["infrastructureRef"]["apiVersion"],
        "infrastructure.cluster.x-k8s.io/v1beta1"
    );
    assert_eq!(
        older["status"]["failureDomains"],
        json!({"rack-a": {"controlPlane": true}})
    );
    assert_eq!(older["status"]["controlPlaneReady"], true);
    assert_eq!(older["status"]["v1beta2"]["workers"]["replicas"], 1);
}

#[test]
fn a_converted_object_edited_in_the_other_version_keeps_the_edit() {
    let objects = capi_1();
    let kcp = find(&objects, "KubeadmControlPlane");
    let mut newer = convert(kcp.clone(), "controlplane.cluster.x-k8s.io/v1beta2").unwrap();
    newer["spec"]["replicas"] = json!(5);
    newer["spec"]["machineTemplate"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"] = json!(120);
    let older = convert(newer, "controlplane.cluster.x-k8s.io/v1beta1").unwrap();
    assert_eq!(older["spec"]["replicas"], 5);
    assert_eq!(older["spec"]["machineTemplate"]["nodeDrainTimeout"], "2m0s");
    // Untouched fields come back as written, and the annotation is gone.
    assert_eq!(older["spec"]["remediationStrategy"]["retryPeriod"], "2m");
    assert_eq!(
        older["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["networking"]["podSubnet"],
        "10.244.0.0/16"
    );
    assert!(older["metadata"].get("annotations").is_none());
}

#[test]
fn other_kinds_and_same_versions_only_get_their_api_version() {
    let binding = json!({"apiVersion": "addons.cluster.x-k8s.io/v1beta1", "kind": "ClusterResourceSetBinding",
        "metadata": {"name": "capi-1"}, "spec": {"clusterName": "capi-1", "bindings": []}});
    let converted = convert(binding.clone(), "addons.cluster.x-k8s.io/v1beta2").unwrap();
    assert_eq!(converted["apiVersion"], "addons.cluster.x-k8s.io/v1beta2");
    assert_eq!(converted["spec"], binding["spec"]);
    for object in capi_1() {
        let same = object["apiVersion"].as_str().unwrap().to_owned();
        assert_eq!(convert(object.clone(), &same).unwrap(), object);
    }
}

#[test]
fn garbage_in_known_fields_is_an_error() {
    let objects = capi_1();
    let kcp = find(&objects, "KubeadmControlPlane");
    for (pointer, garbage, message) in [
        (
            "/spec/machineTemplate/nodeDrainTimeout",
            json!("five minutes"),
            "spec.machineTemplate.nodeDrainTimeout: \"five minutes\" is not a duration",
        ),
        (
            "/spec/kubeadmConfigSpec/clusterConfiguration/apiServer/extraArgs",
            json!(["--v=5"]),
            "spec.kubeadmConfigSpec.clusterConfiguration.apiServer.extraArgs must be an object",
        ),
        (
            "/spec/machineTemplate/infrastructureRef",
            json!("capi-1-controlplane"),
            "spec.machineTemplate.infrastructureRef must be an object",
        ),
        (
            "/spec/kubeadmConfigSpec/initConfiguration/nodeRegistration/kubeletExtraArgs/node-labels",
            json!(true),
            "spec.kubeadmConfigSpec.initConfiguration.nodeRegistration.kubeletExtraArgs.node-labels must be a string",
        ),
        ("/status", json!("Ready"), "status must be an object"),
    ] {
        let mut broken = kcp.clone();
        *broken.pointer_mut(pointer).unwrap() = garbage;
        let err = convert(broken, "controlplane.cluster.x-k8s.io/v1beta2").unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    assert_eq!(
        convert(
            json!("KubeadmControlPlane"),
            "controlplane.cluster.x-k8s.io/v1beta2"
        ),
        Err(ConvertError::NotAnObject("the object".into()))
    );
}

// ---------------------------------------------------------------------------------------------
// Properties.

/// Any JSON without floats (the stash is JSON text; integers and strings survive it bit for bit).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-z0-9/.~:-]{0,12}".prop_map(Value::String),
        Just(json!("5m")),
        Just(json!("1m30s")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-zA-Z/~.-]{1,10}", inner), 0..4)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// JSON Pointers of every object inside `value`.
fn object_pointers(value: &Value, pointer: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                object_pointers(child, format!("{pointer}/{escaped}"), out);
            }
            out.push(pointer);
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                object_pointers(child, format!("{pointer}/{index}"), out);
            }
        }
        _ => {}
    }
}

fn all_fixtures() -> &'static [Value] {
    static ALL: OnceLock<Vec<Value>> = OnceLock::new();
    ALL.get_or_init(|| capi_1().into_iter().chain(upstream()).collect())
}

/// A fixture with `value` at `key` of one of its objects (chosen by `which`), or replacing that
/// object's field (chosen by `slot`) when `replace` is set.
fn edited(
    fixture: usize,
    which: usize,
    key: &str,
    value: Value,
    replace: bool,
    slot: usize,
) -> Value {
    let mut object = all_fixtures()[fixture % all_fixtures().len()].clone();
    let mut pointers = Vec::new();
    object_pointers(&object, String::new(), &mut pointers);
    pointers.retain(|p| {
        !p.starts_with("/metadata") || p == "/metadata/annotations" || p == "/metadata/labels"
    });
    let pointer = &pointers[which % pointers.len()];
    let target = object
        .pointer_mut(pointer)
        .unwrap()
        .as_object_mut()
        .unwrap();
    // The identity of the object stays: only its content is edited.
    let identity = |field: &str| pointer.is_empty() && (field == "apiVersion" || field == "kind");
    if replace && !target.is_empty() {
        let field = target.keys().nth(slot % target.len()).unwrap().clone();
        if !identity(&field) {
            target.insert(field, value);
        }
    } else if !identity(key) {
        target.insert(key.to_owned(), value);
    }
    object
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Unknown fields at the top of spec, status and the object survive both round trips.
    #[test]
    fn extra_fields_survive(fixture in 0usize..64, place in 0usize..3, key in "x[A-Za-z0-9]{0,8}", value in json_value()) {
        let mut object = all_fixtures()[fixture % all_fixtures().len()].clone();
        let container = match place {
            0 => &mut object,
            1 => &mut object["spec"],
            _ => object.as_object_mut().unwrap().entry("status").or_insert_with(|| json!({})),
        };
        container.as_object_mut().unwrap().insert(key, value);
        let api_version = object["apiVersion"].as_str().unwrap().to_owned();
        let converted = convert(object.clone(), &other_version(&api_version)).unwrap();
        let back = convert(converted, &api_version).unwrap();
        prop_assert_eq!(back, object);
    }

    /// Anything added or replaced anywhere converts to an error or round-trips exactly; nothing panics.
    #[test]
    fn edits_anywhere_round_trip_or_fail(
        fixture in 0usize..64,
        which in any::<usize>(),
        key in "[a-zA-Z]{1,12}",
        value in json_value(),
        replace in any::<bool>(),
        slot in any::<usize>(),
    ) {
        let object = edited(fixture, which, &key, value, replace, slot);
        let api_version = object["apiVersion"].as_str().unwrap().to_owned();
        if let Ok(converted) = convert(object.clone(), &other_version(&api_version))
            && let Ok(back) = convert(converted, &api_version)
        {
            prop_assert_eq!(back, object);
        }
    }

    /// Arbitrary JSON claiming to be a converted kind never panics.
    #[test]
    fn garbage_never_panics(fixture in 0usize..64, body in json_value(), spec in json_value(), status in json_value()) {
        let template = &all_fixtures()[fixture % all_fixtures().len()];
        let api_version = template["apiVersion"].as_str().unwrap().to_owned();
        let mut object = match body {
            Value::Object(map) => Value::Object(map),
            other => json!({"x": other}),
        };
        object["apiVersion"] = template["apiVersion"].clone();
        object["kind"] = template["kind"].clone();
        object["spec"] = spec;
        object["status"] = status;
        let _ = convert(object.clone(), &other_version(&api_version));
        object["metadata"] = json!({"annotations": {CONVERSION_DATA_ANNOTATION: r#"{"/spec/a":{"value":1},"/0/~2":{"replaces":[]}}"#}});
        let _ = convert(object, &other_version(&api_version));
    }
}
