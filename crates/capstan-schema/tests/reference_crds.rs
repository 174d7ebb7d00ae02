//! The upstream CRDs load, and hand-written objects validate against them as the API server
//! would judge them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use capstan_manifest::load_str;
use capstan_model::path::FieldPath;
use capstan_schema::{
    CrdSet, Schema, ViolationKind, apply_defaults, prune, validate, validate_report,
};
use serde_json::Value;

fn reference_dir() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/reference/crds"
    ))
    .to_path_buf()
}

/// The reference CRDs, loaded once for all tests.
fn crds() -> &'static CrdSet {
    static CRDS: OnceLock<CrdSet> = OnceLock::new();
    CRDS.get_or_init(|| CrdSet::load_dir(&reference_dir()).expect("reference CRDs load"))
}

fn object(text: &str) -> Value {
    let mut objects = load_str("test.yaml", text).expect("test object parses");
    assert_eq!(objects.len(), 1);
    objects.remove(0).value
}

fn schema_of<'a>(crds: &'a CrdSet, value: &Value) -> &'a Schema {
    let api_version = value["apiVersion"].as_str().expect("apiVersion");
    let kind = value["kind"].as_str().expect("kind");
    crds.schema_for(api_version, kind)
        .unwrap_or_else(|| panic!("no schema for {api_version} {kind}"))
}

fn violations(crds: &CrdSet, value: &Value) -> Vec<(String, ViolationKind)> {
    validate(schema_of(crds, value), value)
        .into_iter()
        .map(|v| (v.path.to_string(), v.kind))
        .collect()
}

const CLUSTER_V1BETA1: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: capi-1
  namespace: default
  labels:
    cluster.x-k8s.io/cluster-name: capi-1
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["10.244.0.0/16"]
    services:
      cidrBlocks: ["10.96.0.0/12"]
    serviceDomain: cluster.local
  controlPlaneEndpoint:
    host: 192.168.111.249
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
"#;

const CLUSTER_V1BETA2: &str = r#"
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
    serviceDomain: cluster.local
  controlPlaneEndpoint:
    host: 192.168.111.249
    port: 6443
  controlPlaneRef:
    apiGroup: controlplane.cluster.x-k8s.io
    kind: KubeadmControlPlane
    name: capi-1
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: Metal3Cluster
    name: capi-1
"#;

const BARE_METAL_HOST: &str = r#"
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: node-0
  namespace: metal3
spec:
  online: true
  bootMACAddress: "00:5c:52:31:3a:9c"
  bootMode: UEFI
  automatedCleaningMode: metadata
  bmc:
    address: redfish-virtualmedia://192.168.111.1:8000/redfish/v1/Systems/1
    credentialsName: node-0-bmc-secret
  rootDeviceHints:
    deviceName: /dev/sda
    minSizeGigabytes: 100
"#;

const KUBEADM_CONTROL_PLANE_V1BETA1: &str = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: capi-1
  namespace: default
spec:
  replicas: 3
  version: v1.29.0
  rolloutStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
  machineTemplate:
    nodeDrainTimeout: 0s
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
      kind: Metal3MachineTemplate
      name: capi-1-controlplane
  kubeadmConfigSpec:
    initConfiguration:
      nodeRegistration:
        name: "{{ ds.meta_data.name }}"
        kubeletExtraArgs:
          node-labels: "metal3.io/uuid={{ ds.meta_data.uuid }}"
    joinConfiguration:
      controlPlane: {}
      nodeRegistration:
        name: "{{ ds.meta_data.name }}"
    files:
      - path: /etc/keepalived/keepalived.conf
        owner: root:root
        permissions: "0644"
        content: |
          vrrp_instance VI_1 {
            state MASTER
          }
    preKubeadmCommands:
      - systemctl enable --now keepalived
    users:
      - name: metal3
        sshAuthorizedKeys:
          - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample metal3@example
        sudo: "ALL=(ALL) NOPASSWD:ALL"
"#;

#[test]
fn every_reference_crd_loads_with_a_schema_for_each_served_version() {
    let crds = crds();
    assert!(crds.len() >= 30, "only {} CRDs loaded", crds.len());
    for crd in crds {
        assert!(
            crd.served_versions().count() > 0,
            "{} serves nothing",
            crd.name
        );
        assert_eq!(
            crd.versions.iter().filter(|v| v.storage).count(),
            1,
            "{} has not exactly one storage version",
            crd.name
        );
        for version in crd.served_versions() {
            assert!(
                version.schema.is_some(),
                "{} {} has no schema",
                crd.name,
                version.name
            );
        }
    }
    for (api_version, kind) in [
        ("cluster.x-k8s.io/v1beta1", "Cluster"),
        ("cluster.x-k8s.io/v1beta2", "Cluster"),
        (
            "controlplane.cluster.x-k8s.io/v1beta1",
            "KubeadmControlPlane",
        ),
        ("metal3.io/v1alpha1", "BareMetalHost"),
        ("infrastructure.cluster.x-k8s.io/v1beta1", "Metal3Cluster"),
        ("ipam.metal3.io/v1alpha1", "IPPool"),
        ("cilium.io/v2", "CiliumBGPClusterConfig"),
    ] {
        assert!(
            crds.schema_for(api_version, kind).is_some(),
            "{api_version} {kind}"
        );
    }
}

#[test]
fn every_reference_pattern_compiles() {
    let crds = crds();
    let mut patterns = 0;
    for crd in crds {
        for version in &crd.versions {
            let Some(schema) = &version.schema else {
                continue;
            };
            let mut stack = vec![schema];
            while let Some(node) = stack.pop() {
                if let Some(pattern) = &node.pattern {
                    patterns += 1;
                    assert!(
                        pattern.regex().is_some(),
                        "{} {}: {}",
                        crd.name,
                        version.name,
                        pattern.source
                    );
                }
                stack.extend(node.properties.values());
                stack.extend(node.items.as_deref());
                if let Some(capstan_schema::AdditionalProperties::Schema(s)) =
                    &node.additional_properties
                {
                    stack.push(s);
                }
                stack.extend(&node.all_of);
                stack.extend(&node.any_of);
                stack.extend(&node.one_of);
            }
        }
    }
    assert!(patterns > 100, "only {patterns} patterns seen");
}

#[test]
fn valid_objects_have_no_violations() {
    let crds = crds();
    for text in [
        CLUSTER_V1BETA1,
        CLUSTER_V1BETA2,
        BARE_METAL_HOST,
        KUBEADM_CONTROL_PLANE_V1BETA1,
    ] {
        let value = object(text);
        assert_eq!(violations(crds, &value), [], "{text}");
    }
}

/// Applies `edit` to a valid object and expects exactly one violation.
fn expect_one(text: &str, edit: impl FnOnce(&mut Value), path: &str, kind: ViolationKind) {
    let crds = crds();
    let mut value = object(text);
    edit(&mut value);
    let found = validate(schema_of(crds, &value), &value);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(
        (found[0].path.to_string(), found[0].kind),
        (path.to_owned(), kind)
    );
}

#[test]
fn wrong_type_is_reported_at_the_field() {
    expect_one(
        CLUSTER_V1BETA2,
        |v| v["spec"]["controlPlaneEndpoint"]["port"] = "6443".into(),
        "spec.controlPlaneEndpoint.port",
        ViolationKind::WrongType,
    );
    expect_one(
        KUBEADM_CONTROL_PLANE_V1BETA1,
        |v| v["spec"]["replicas"] = 1.5.into(),
        "spec.replicas",
        ViolationKind::WrongType,
    );
}

#[test]
fn missing_required_field_is_reported() {
    expect_one(
        CLUSTER_V1BETA2,
        |v| {
            v["spec"]["infrastructureRef"]
                .as_object_mut()
                .map(|m| m.remove("name"));
        },
        "spec.infrastructureRef.name",
        ViolationKind::Required,
    );
    expect_one(
        KUBEADM_CONTROL_PLANE_V1BETA1,
        |v| {
            v["spec"].as_object_mut().map(|m| m.remove("version"));
        },
        "spec.version",
        ViolationKind::Required,
    );
}

#[test]
fn unknown_field_is_reported() {
    expect_one(
        CLUSTER_V1BETA1,
        |v| v["spec"]["controlPlaneEndpoint"]["hostname"] = "x".into(),
        "spec.controlPlaneEndpoint.hostname",
        ViolationKind::UnknownField,
    );
    expect_one(
        BARE_METAL_HOST,
        |v| v["spec"]["bmc"]["password"] = "x".into(),
        "spec.bmc.password",
        ViolationKind::UnknownField,
    );
}

#[test]
fn bad_enum_is_reported() {
    expect_one(
        BARE_METAL_HOST,
        |v| v["spec"]["bootMode"] = "BIOS".into(),
        "spec.bootMode",
        ViolationKind::Enum,
    );
}

#[test]
fn pattern_mismatch_is_reported() {
    expect_one(
        CLUSTER_V1BETA2,
        |v| v["spec"]["infrastructureRef"]["name"] = "Capi_1".into(),
        "spec.infrastructureRef.name",
        ViolationKind::Pattern,
    );
    expect_one(
        BARE_METAL_HOST,
        |v| v["spec"]["bootMACAddress"] = "not-a-mac".into(),
        "spec.bootMACAddress",
        ViolationKind::Pattern,
    );
}

#[test]
fn range_violation_is_reported() {
    expect_one(
        CLUSTER_V1BETA2,
        |v| v["spec"]["controlPlaneEndpoint"]["port"] = 70000.into(),
        "spec.controlPlaneEndpoint.port",
        ViolationKind::Range,
    );
}

#[test]
fn cel_rules_of_reference_schemas_are_listed() {
    let crds = crds();
    let with_rules = crds
        .iter()
        .flat_map(|crd| &crd.versions)
        .filter_map(|v| v.schema.as_ref())
        .filter(|s| !s.validation_rules().is_empty())
        .count();
    assert!(with_rules > 0, "the reference CRDs carry CEL rules");
    let value = object(CLUSTER_V1BETA2);
    let report = validate_report(schema_of(crds, &value), &value);
    assert!(report.is_valid());
    assert!(report.unchecked_patterns.is_empty());
}

#[test]
fn defaults_and_pruning_with_a_reference_schema() {
    let crds = crds();
    let mut value = object(KUBEADM_CONTROL_PLANE_V1BETA1);
    value["spec"]
        .as_object_mut()
        .map(|m| m.remove("rolloutStrategy"));
    value["spec"]["extra"] = "x".into();
    value["status"] = serde_json::json!({"ready": true, "bogus": 1});
    let schema = schema_of(crds, &value);
    apply_defaults(schema, &mut value);
    assert_eq!(
        value["spec"]["rolloutStrategy"],
        serde_json::json!({"rollingUpdate": {"maxSurge": 1}, "type": "RollingUpdate"})
    );
    let removed = prune(schema, &mut value);
    assert_eq!(
        removed,
        [
            FieldPath::parse("spec.extra"),
            FieldPath::parse("status.bogus")
        ]
    );
    assert_eq!(violations(crds, &value), []);
}
