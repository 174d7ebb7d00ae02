//! Bad input never panics: random objects with random field types, real manifests with random
//! subtrees replaced, and mangled embedded documents all lint to a report.

use capstan_lint::{LintOptions, lint};
use capstan_manifest::{LoadedObject, Origin, load_str};
use proptest::prelude::*;
use serde_json::{Map, Value};

const BASE: &str = include_str!("fixtures/capi-1-good.yaml");
const SEED: &str = include_str!("fixtures/seed-capi-1.yaml");
const CAPM3: &str = include_str!("fixtures/capm3-template.yaml");

/// Keys the rules look for, so random objects reach deep into them.
const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "labels",
    "spec",
    "status",
    "replicas",
    "version",
    "machineTemplate",
    "infrastructureRef",
    "controlPlaneRef",
    "bootstrap",
    "configRef",
    "kubeadmConfigSpec",
    "files",
    "content",
    "encoding",
    "path",
    "preKubeadmCommands",
    "containers",
    "env",
    "value",
    "image",
    "data",
    "stringData",
    "networkData",
    "links",
    "networks",
    "routes",
    "gateway",
    "ip_address",
    "netmask",
    "bond_links",
    "vlan_link",
    "link",
    "id",
    "type",
    "ethernet_mac_address",
    "hardware",
    "nics",
    "mac",
    "bmc",
    "address",
    "credentialsName",
    "hostSelector",
    "matchLabels",
    "matchExpressions",
    "operator",
    "values",
    "selector",
    "template",
    "clusterName",
    "clusterNetwork",
    "pods",
    "cidrBlocks",
    "controlPlaneEndpoint",
    "host",
    "checksum",
    "checksumType",
    "format",
    "resources",
    "clusterSelector",
    "bgpInstances",
    "peers",
    "peerConfigRef",
    "families",
    "advertisements",
    "skipPhases",
    "initConfiguration",
    "clusterConfiguration",
    "podSubnet",
    "dataTemplate",
    "apiGroup",
    "url",
];

const API_VERSIONS: &[(&str, &str)] = &[
    ("cluster.x-k8s.io/v1beta1", "Cluster"),
    ("cluster.x-k8s.io/v1beta2", "Cluster"),
    ("cluster.x-k8s.io/v1beta1", "MachineDeployment"),
    ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
    ("cluster.x-k8s.io/v1beta2", "MachineHealthCheck"),
    (
        "controlplane.cluster.x-k8s.io/v1beta1",
        "KubeadmControlPlane",
    ),
    (
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
    ),
    (
        "bootstrap.cluster.x-k8s.io/v1beta1",
        "KubeadmConfigTemplate",
    ),
    (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "Metal3MachineTemplate",
    ),
    (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "Metal3DataTemplate",
    ),
    ("infrastructure.cluster.x-k8s.io/v1beta1", "Metal3Cluster"),
    ("addons.cluster.x-k8s.io/v1beta1", "ClusterResourceSet"),
    ("metal3.io/v1alpha1", "BareMetalHost"),
    ("ipam.metal3.io/v1alpha1", "IPPool"),
    ("cilium.io/v2", "CiliumBGPPeerConfig"),
    ("v1", "Secret"),
    ("v1", "ConfigMap"),
    ("apps/v1", "DaemonSet"),
    ("cluster.x-k8s.io/v1alpha3", "Clustr"),
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[ -~]{0,24}".prop_map(Value::String),
        prop::sample::select(vec![
            "10.250.250.29/32", "v1.29.0", "v1.31", "ens2", "52:54:00:aa:00:01", "true", "vip_address",
            "kube-vip", "super-admin.conf", "redfish://x", "vmware://x", "addon/kube-proxy",
            "255.255.255.0", "255.0.255.0", "::1", "0.0.0.0", "10.244.0.0/16", "", "Secret",
            "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - image: kube-vip\n    env:\n    - name: vip_address\n",
            "{\"links\": [{\"id\": 1}], \"networks\": 5}", "a: [unclosed", "IT0=",
        ])
        .prop_map(|s| Value::String(s.to_owned())),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 64, 6, |inner| {
        let key = prop_oneof![
            prop::sample::select(KEYS).prop_map(str::to_owned),
            "[a-z]{1,6}"
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

fn random_object() -> impl Strategy<Value = LoadedObject> {
    (
        prop::sample::select(API_VERSIONS),
        "[a-z]{1,3}",
        json(),
        json(),
    )
        .prop_map(|((api_version, kind), name, spec, status)| {
            let value = serde_json::json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {"name": name, "namespace": "default", "labels": {"cni": "cilium"}},
                "spec": spec,
                "status": status,
            });
            LoadedObject::new(value, Origin::new("fuzz.yaml", 1))
        })
}

/// Replaces the subtree at a pseudo-random path of `value` with `replacement`.
fn replace_somewhere(value: &mut Value, choice: usize, replacement: Value) {
    let descend = !choice.is_multiple_of(4);
    match value {
        Value::Object(map) if descend && !map.is_empty() => {
            let i = choice % map.len();
            if let Some(child) = map.values_mut().nth(i) {
                replace_somewhere(child, choice / 3, replacement);
            }
        }
        Value::Array(items) if descend && !items.is_empty() => {
            let i = choice % items.len();
            if let Some(child) = items.get_mut(i) {
                replace_somewhere(child, choice / 3, replacement);
            }
        }
        _ => *value = replacement,
    }
}

fn fixture_objects() -> Vec<LoadedObject> {
    [BASE, SEED, CAPM3]
        .iter()
        .flat_map(|text| load_str("fixture.yaml", text).expect("fixture loads"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_objects_do_not_panic(objects in prop::collection::vec(random_object(), 0..12), partial in any::<bool>()) {
        let report = lint(objects, &LintOptions { partial, schemas: None });
        let _ = report.render_human(true);
        let _ = report.to_json();
    }

    #[test]
    fn mangled_manifests_do_not_panic(
        edits in prop::collection::vec((any::<usize>(), any::<usize>(), json()), 1..8),
        partial in any::<bool>(),
    ) {
        let mut objects = fixture_objects();
        for (which, path, replacement) in edits {
            let i = which % objects.len();
            if let Some(object) = objects.get_mut(i) {
                replace_somewhere(&mut object.value, path, replacement);
            }
        }
        let report = lint(objects, &LintOptions { partial, schemas: None });
        let _ = report.render_human(false);
    }

    #[test]
    fn mangled_text_does_not_panic(cuts in prop::collection::vec((any::<usize>(), "[ -~\n]{0,8}"), 1..6)) {
        // Mangle the text, including block scalars, and lint whatever still loads.
        let mut text = BASE.to_owned();
        for (at, insert) in cuts {
            let mut at = at % text.len().max(1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.insert_str(at, &insert);
        }
        if let Ok(objects) = load_str("fuzz.yaml", &text) {
            let _ = lint(objects, &LintOptions::default());
        }
    }
}
