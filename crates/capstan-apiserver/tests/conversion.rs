//! Version conversion through the API with kubectl: a KubeadmControlPlane applied as v1beta1 is
//! stored as v1beta2, reads back in either version, and re-applying it changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use capstan_model::convert::CONVERSION_DATA_ANNOTATION;
use serde_json::{Value, json};
use std::path::Path;
use support::{Server, kubectl, ok, start};

fn get_json(server: &Server, resource: &str) -> Value {
    serde_json::from_str(&ok(&kubectl(
        server,
        &["get", resource, "capi-1", "-o", "json"],
        None,
    )))
    .unwrap()
}

const KCP_V1BETA1: &str = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: capi-1
  namespace: default
spec:
  replicas: 3
  version: v1.30.6
  machineTemplate:
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
  kubeadmConfigSpec:
    clusterConfiguration:
      networking:
        podSubnet: 10.244.0.0/16
      apiServer:
        extraArgs:
          audit-log-maxage: "30"
        timeoutForControlPlane: 4m0s
    initConfiguration:
      skipPhases:
      - addon/kube-proxy
      nodeRegistration:
        name: '{{ ds.meta_data.name }}'
        kubeletExtraArgs:
          node-labels: metal3.io/uuid={{ ds.meta_data.uuid }}
    joinConfiguration:
      controlPlane: {}
      skipPhases:
      - addon/kube-proxy
      nodeRegistration:
        name: '{{ ds.meta_data.name }}'
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
"#;

#[test]
fn kubeadm_control_plane_applied_as_v1beta1_reads_back_in_both_versions() {
    let server = start();
    // The upstream CRD, so that both versions are validated against their real schemas.
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../../../shared/reference/crds/cluster-api/controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml",
    );
    ok(&kubectl(
        &server,
        &["apply", "-f", crd.to_str().unwrap()],
        None,
    ));
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(KCP_V1BETA1)));

    let newer = get_json(
        &server,
        "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io",
    );
    assert_eq!(newer["apiVersion"], "controlplane.cluster.x-k8s.io/v1beta2");
    let spec = &newer["spec"];
    assert_eq!(
        spec["machineTemplate"]["spec"]["infrastructureRef"],
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3MachineTemplate", "name": "capi-1-controlplane"})
    );
    assert_eq!(
        spec["machineTemplate"]["spec"]["deletion"]["nodeDrainTimeoutSeconds"],
        300
    );
    assert_eq!(spec["rollout"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
    let kubeadm = &spec["kubeadmConfigSpec"];
    assert_eq!(
        kubeadm["clusterConfiguration"]["apiServer"]["extraArgs"],
        json!([{"name": "audit-log-maxage", "value": "30"}])
    );
    assert!(kubeadm["clusterConfiguration"].get("networking").is_none());
    assert_eq!(
        kubeadm["initConfiguration"]["timeouts"]["controlPlaneComponentHealthCheckSeconds"],
        240
    );
    assert_eq!(
        kubeadm["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"],
        json!([{"name": "node-labels", "value": "metal3.io/uuid={{ ds.meta_data.uuid }}"}])
    );
    assert_eq!(
        kubeadm["joinConfiguration"]["skipPhases"],
        json!(["addon/kube-proxy"])
    );
    // What v1beta2 cannot hold waits in the conversion annotation.
    let stash: Value = serde_json::from_str(
        newer["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        stash["/spec/kubeadmConfigSpec/clusterConfiguration/networking"]["value"]["podSubnet"],
        "10.244.0.0/16"
    );
    assert_eq!(
        stash["/spec/machineTemplate/nodeDrainTimeout"]["value"],
        "5m"
    );

    // Read as v1beta1, the spec is exactly what was applied, and the annotation is gone.
    let older = get_json(
        &server,
        "kubeadmcontrolplanes.v1beta1.controlplane.cluster.x-k8s.io",
    );
    assert_eq!(older["apiVersion"], "controlplane.cluster.x-k8s.io/v1beta1");
    let applied = capstan_manifest::load_str("kcp.yaml", KCP_V1BETA1).unwrap()[0]
        .value
        .clone();
    assert_eq!(older["spec"], applied["spec"]);
    assert!(
        older["metadata"]["annotations"]
            .get(CONVERSION_DATA_ANNOTATION)
            .is_none()
    );

    // Because reads give back what was written, re-applying is a no-op.
    let again = ok(&kubectl(&server, &["apply", "-f", "-"], Some(KCP_V1BETA1)));
    assert!(again.contains("unchanged"), "{again}");
    assert_eq!(
        get_json(
            &server,
            "kubeadmcontrolplanes.v1beta1.controlplane.cluster.x-k8s.io"
        )["metadata"]["generation"],
        1
    );

    // An edit made in v1beta2 shows in v1beta1; what it did not touch stays as written.
    ok(&kubectl(
        &server,
        &[
            "patch",
            "kubeadmcontrolplanes.v1beta2.controlplane.cluster.x-k8s.io",
            "capi-1",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":5,"machineTemplate":{"spec":{"deletion":{"nodeDrainTimeoutSeconds":120}}}}}"#,
        ],
        None,
    ));
    let edited = get_json(
        &server,
        "kubeadmcontrolplanes.v1beta1.controlplane.cluster.x-k8s.io",
    );
    assert_eq!(edited["spec"]["replicas"], 5);
    assert_eq!(
        edited["spec"]["machineTemplate"]["nodeDrainTimeout"],
        "2m0s"
    );
    assert_eq!(
        edited["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["networking"]["podSubnet"],
        "10.244.0.0/16"
    );
}

#[test]
fn an_unparseable_duration_is_refused_with_the_field_named() {
    let server = start();
    let bad = KCP_V1BETA1.replace("nodeDrainTimeout: 5m", "nodeDrainTimeout: five minutes");
    let out = kubectl(&server, &["apply", "-f", "-"], Some(&bad));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("spec.machineTemplate.nodeDrainTimeout: \"five minutes\" is not a duration"),
        "{stderr}"
    );
}
