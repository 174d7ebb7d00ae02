//! `capstan clusterctl-template -o DIR`: the KVM provider's clusterctl provider contract — the files
//! a clusterctl provider repository holds: `cluster-template.yaml` (a KVM cluster with the
//! variables of the team design, `${NAME:=default}` where the design gives a default),
//! `metadata.yaml` (release series and contract) and `infrastructure-components.yaml` (the KVM
//! CustomResourceDefinitions, labelled `cluster.x-k8s.io/provider=infrastructure-kvm`).

use crate::output::{Exit, outln};
use anyhow::Context as _;
use serde_json::{Value, json};
use std::path::PathBuf;

/// Arguments of `capstan clusterctl-template`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory to write the three files to.
    #[arg(short = 'o', long = "output-dir")]
    output_dir: PathBuf,
}

/// The label clusterctl finds a provider's components by.
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
/// Its value for this provider.
pub const PROVIDER: &str = "infrastructure-kvm";

/// The workload cluster template.
pub const CLUSTER_TEMPLATE: &str = r#"# A KVM cluster for clusterctl: clusterctl generate cluster NAME --infrastructure kvm
# Variables (defaults after :=): NAMESPACE, KUBERNETES_VERSION, CONTROL_PLANE_ENDPOINT_HOST,
# KVM_HYPERVISOR_URI, KVM_IMAGE_URL, KVM_IMAGE_CHECKSUM and the sizes below.
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: ${CLUSTER_NAME}
  namespace: ${NAMESPACE}
  labels:
    cluster.x-k8s.io/cluster-name: ${CLUSTER_NAME}
spec:
  clusterNetwork:
    pods:
      cidrBlocks:
        - ${POD_IP_RANGE:=172.24.0.0/16}
    services:
      cidrBlocks:
        - ${SERVICE_IP_RANGE:=172.31.0.0/16}
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1beta1
    kind: KubeadmControlPlane
    name: ${CLUSTER_NAME}-control-plane
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4
    kind: KVMCluster
    name: ${CLUSTER_NAME}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4
kind: KVMCluster
metadata:
  name: ${CLUSTER_NAME}
  namespace: ${NAMESPACE}
  labels:
    cluster.x-k8s.io/cluster-name: ${CLUSTER_NAME}
spec:
  controlPlaneEndpoint:
    host: "${CONTROL_PLANE_ENDPOINT_HOST}"
    port: 6443
  hypervisors:
    - name: hv1
      uri: "${KVM_HYPERVISOR_URI:=qemu:///system}"
      pool: ${KVM_POOL:=default}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4
kind: KVMMachineTemplate
metadata:
  name: ${CLUSTER_NAME}-control-plane
  namespace: ${NAMESPACE}
spec:
  template:
    spec:
      resources:
        cpu: ${CONTROL_PLANE_MACHINE_CPUS:=4}
        memory: "${CONTROL_PLANE_MACHINE_MEMORY:=8GB}"
        disk: ${CONTROL_PLANE_VOLUME_SIZE_GB:=40}G
        dockerVolumeSize: ${CONTROL_PLANE_DOCKER_VOLUME_SIZE_GB:=40}G
      image:
        url: "${KVM_IMAGE_URL}"
        checksum: "${KVM_IMAGE_CHECKSUM}"
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: ${CLUSTER_NAME}-control-plane
  namespace: ${NAMESPACE}
spec:
  replicas: ${CONTROL_PLANE_MACHINE_COUNT:=3}
  version: ${KUBERNETES_VERSION}
  machineTemplate:
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4
      kind: KVMMachineTemplate
      name: ${CLUSTER_NAME}-control-plane
  kubeadmConfigSpec:
    initConfiguration:
      nodeRegistration:
        name: '{{ ds.meta_data.hostname }}'
    joinConfiguration:
      nodeRegistration:
        name: '{{ ds.meta_data.hostname }}'
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4
kind: KVMMachineTemplate
metadata:
  name: ${CLUSTER_NAME}-worker
  namespace: ${NAMESPACE}
spec:
  template:
    spec:
      resources:
        cpu: ${WORKER_MACHINE_CPUS:=4}
        memory: "${WORKER_MACHINE_MEMORY:=8GB}"
        disk: ${VOLUME_SIZE_GB:=40}G
        dockerVolumeSize: ${DOCKER_VOLUME_SIZE_GB:=40}G
      image:
        url: "${KVM_IMAGE_URL}"
        checksum: "${KVM_IMAGE_CHECKSUM}"
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: ${CLUSTER_NAME}-worker
  namespace: ${NAMESPACE}
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          name: '{{ ds.meta_data.hostname }}'
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: ${CLUSTER_NAME}-worker
  namespace: ${NAMESPACE}
  labels:
    cluster.x-k8s.io/cluster-name: ${CLUSTER_NAME}
spec:
  clusterName: ${CLUSTER_NAME}
  replicas: ${WORKER_MACHINE_COUNT:=3}
  selector:
    matchLabels:
      cluster.x-k8s.io/cluster-name: ${CLUSTER_NAME}
  template:
    metadata:
      labels:
        cluster.x-k8s.io/cluster-name: ${CLUSTER_NAME}
    spec:
      clusterName: ${CLUSTER_NAME}
      version: ${KUBERNETES_VERSION}
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: ${CLUSTER_NAME}-worker
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4
        kind: KVMMachineTemplate
        name: ${CLUSTER_NAME}-worker
"#;

/// The provider's release series and the CAPI contract each speaks.
pub const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Metadata
releaseSeries:
  - major: 0
    minor: 1
    contract: v1beta1
";

/// The KVM CRDs, labelled for clusterctl.
pub fn components() -> Vec<Value> {
    capstan_controllers::crds()
        .into_iter()
        .filter(|crd| {
            crd["spec"]["names"]["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("KVM"))
        })
        .map(|mut crd| {
            crd["metadata"]["labels"] = json!({
                PROVIDER_LABEL: PROVIDER,
                "cluster.x-k8s.io/v1beta1": "v1alpha4_v1beta2",
            });
            crd
        })
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<Exit> {
    std::fs::create_dir_all(&args.output_dir)
        .with_context(|| format!("creating {}", args.output_dir.display()))?;
    let files = [
        ("cluster-template.yaml", CLUSTER_TEMPLATE.to_owned()),
        ("metadata.yaml", METADATA.to_owned()),
        (
            "infrastructure-components.yaml",
            capstan_manifest::to_yaml_documents(&components()),
        ),
    ];
    for (name, contents) in files {
        let path = args.output_dir.join(name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        outln!("{}", path.display());
    }
    Ok(Exit::Ok)
}
