//! Kubernetes' own kinds as a workload cluster needs them: Nodes, Pods, Services, Endpoints and
//! EndpointSlices, ServiceAccounts, the `apps/v1` workloads, PodDisruptionBudgets, RBAC and
//! CertificateSigningRequests, next to the core kinds capstan already served (Namespace, Secret,
//! ConfigMap, Event, Pod, Lease), and ResourceQuota for per-namespace object counts
//! ([`quotas`]).
//!
//! Their schemas are Kubernetes' own, generated from the `k8s-openapi` types (so they validate and
//! prune as kube-apiserver's typed decoding does and `kubectl explain` shows the upstream
//! documentation); defaulting follows kube-apiserver for the fields clients read back; printer
//! columns are the ones `kubectl get` shows against kube-apiserver.
//! Storing is all these kinds do: nothing schedules or runs a Pod.

pub mod defaults;
pub mod namespaces;
pub mod quotas;
pub mod schemas;
pub mod subresources;
pub mod tokens;

use capstan_model::kinds::KindInfo;
use capstan_model::resource::Scope;
use serde_json::{Value, json};

macro_rules! builtin {
    ($group:literal, $kind:literal, $plural:literal, [$($short:literal),*], $scope:ident, [$($cat:literal),*]) => {
        KindInfo {
            group: $group,
            kind: $kind,
            plural: $plural,
            singular: "",
            short_names: &[$($short),*],
            scope: Scope::$scope,
            versions: &["v1"],
            storage_version: "v1",
            categories: &[$($cat),*],
        }
    };
}

/// The kinds added for workload clusters (the singular name is the lower-case kind, filled in by
/// [`singular`]).
pub const KINDS: &[KindInfo] = &[
    builtin!("", "Node", "nodes", ["no"], Cluster, []),
    builtin!("", "Service", "services", ["svc"], Namespaced, ["all"]),
    builtin!("", "Endpoints", "endpoints", ["ep"], Namespaced, []),
    builtin!(
        "",
        "ResourceQuota",
        "resourcequotas",
        ["quota"],
        Namespaced,
        []
    ),
    builtin!(
        "",
        "ServiceAccount",
        "serviceaccounts",
        ["sa"],
        Namespaced,
        []
    ),
    builtin!(
        "discovery.k8s.io",
        "EndpointSlice",
        "endpointslices",
        [],
        Namespaced,
        []
    ),
    builtin!(
        "apps",
        "Deployment",
        "deployments",
        ["deploy"],
        Namespaced,
        ["all"]
    ),
    builtin!(
        "apps",
        "DaemonSet",
        "daemonsets",
        ["ds"],
        Namespaced,
        ["all"]
    ),
    builtin!(
        "apps",
        "StatefulSet",
        "statefulsets",
        ["sts"],
        Namespaced,
        ["all"]
    ),
    builtin!(
        "apps",
        "ReplicaSet",
        "replicasets",
        ["rs"],
        Namespaced,
        ["all"]
    ),
    builtin!(
        "policy",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        ["pdb"],
        Namespaced,
        []
    ),
    builtin!(
        "rbac.authorization.k8s.io",
        "Role",
        "roles",
        [],
        Namespaced,
        []
    ),
    builtin!(
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "clusterroles",
        [],
        Cluster,
        []
    ),
    builtin!(
        "rbac.authorization.k8s.io",
        "RoleBinding",
        "rolebindings",
        [],
        Namespaced,
        []
    ),
    builtin!(
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        [],
        Cluster,
        []
    ),
    builtin!(
        "certificates.k8s.io",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        ["csr"],
        Cluster,
        []
    ),
];

/// The singular resource name Kubernetes uses: the lower-case kind.
pub fn singular(info: &KindInfo) -> String {
    if info.singular.is_empty() {
        info.kind.to_ascii_lowercase()
    } else {
        info.singular.to_owned()
    }
}

/// Whether `(group, kind)` is one of Kubernetes' own kinds (typed, with an upstream schema).
pub fn is_typed(group: &str, kind: &str) -> bool {
    schemas::has_schema(group, kind)
}

/// Whether the kind has a `status` subresource, when this module decides it.
pub fn has_status(group: &str, kind: &str) -> Option<bool> {
    match (group, kind) {
        ("", "Node" | "Service" | "Pod" | "Namespace" | "ResourceQuota")
        | ("apps", _)
        | ("policy", "PodDisruptionBudget")
        | ("certificates.k8s.io", _) => Some(true),
        ("", "Endpoints" | "ServiceAccount")
        | ("discovery.k8s.io", _)
        | ("rbac.authorization.k8s.io", _) => Some(false),
        _ => None,
    }
}

/// The `scale` subresource of a kind (CRD form), for the workloads and for Cluster API's scalable
/// kinds, so `kubectl scale deploy|sts|rs|md|ms|kcp` works.
pub fn scale(group: &str, kind: &str) -> Option<Value> {
    let selector = match (group, kind) {
        ("apps", "Deployment" | "StatefulSet" | "ReplicaSet") => ".status.selector",
        ("cluster.x-k8s.io", "MachineDeployment" | "MachineSet")
        | ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane") => ".status.selector",
        _ => return None,
    };
    Some(json!({
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": selector,
    }))
}

/// Printer columns of Kubernetes' own kinds: those `kubectl get` prints against kube-apiserver, the
/// computed ones (`READY 1/3`, `PORT(S) 80/TCP`, `DATA 2`) as `=FUNCTION:ARGUMENTS` (see
/// [`crate::table`]).
pub fn printer_columns(group: &str, kind: &str) -> Option<Vec<Value>> {
    let col = |name: &str, type_: &str, path: &str, priority: i32| json!({"name": name, "type": type_, "jsonPath": path, "priority": priority});
    let age = col("Age", "date", ".metadata.creationTimestamp", 0);
    // `-o wide` of the workload kinds.
    let containers = col(
        "Containers",
        "string",
        "=join:.spec.template.spec.containers,name",
        1,
    );
    let images = col(
        "Images",
        "string",
        "=join:.spec.template.spec.containers,image",
        1,
    );
    let selector = col("Selector", "string", "=selector:.spec.selector", 1);
    Some(match (group, kind) {
        ("", "Node") => vec![
            col(
                "Ready",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].status",
                0,
            ),
            col("Unschedulable", "boolean", ".spec.unschedulable", 0),
            age,
            col("Version", "string", ".status.nodeInfo.kubeletVersion", 0),
            col(
                "Internal-IP",
                "string",
                ".status.addresses[?(@.type==\"InternalIP\")].address",
                1,
            ),
            col("Provider-ID", "string", ".spec.providerID", 1),
        ],
        ("", "Pod") => vec![
            col("Ready", "string", "=pod-ready", 0),
            col("Status", "string", ".status.phase", 0),
            col("Restarts", "integer", "=pod-restarts", 0),
            age,
            col("IP", "string", "=or-none:.status.podIP", 1),
            col("Node", "string", "=or-none:.spec.nodeName", 1),
        ],
        ("", "Service") => vec![
            col("Type", "string", ".spec.type", 0),
            col("Cluster-IP", "string", ".spec.clusterIP", 0),
            col("External-IP", "string", "=external-ips", 0),
            col("Port(s)", "string", "=ports:.spec.ports", 0),
            age,
            col("Selector", "string", "=selector:.spec.selector", 1),
        ],
        ("", "Endpoints") => vec![
            col("Endpoints", "string", ".subsets[*].addresses[*].ip", 0),
            age,
        ],
        ("", "ServiceAccount") => vec![col("Secrets", "integer", "=count:.secrets", 0), age],
        ("", "ResourceQuota") => vec![age, col("Request", "string", "=quota-usage:.status", 0)],
        ("", "ConfigMap") => vec![col("Data", "integer", "=count:.data,.binaryData", 0), age],
        ("", "Secret") => vec![
            col("Type", "string", ".type", 0),
            col("Data", "integer", "=count:.data", 0),
            age,
        ],
        ("", "Event") => vec![
            col("Last Seen", "string", "=event-last-seen", 0),
            col("Type", "string", ".type", 0),
            col("Reason", "string", ".reason", 0),
            col("Object", "string", "=event-object", 0),
            col("Subobject", "string", ".involvedObject.fieldPath", 1),
            col("Source", "string", "=event-source", 1),
            col("Message", "string", ".message", 0),
            col("First Seen", "string", "=event-first-seen", 1),
            col("Count", "integer", "=event-count", 1),
            json!({"name": "Name", "type": "string", "format": "name", "jsonPath": ".metadata.name", "priority": 1}),
        ],
        ("discovery.k8s.io", "EndpointSlice") => vec![
            col("AddressType", "string", ".addressType", 0),
            col("Ports", "string", ".ports[*].port", 0),
            col("Endpoints", "string", ".endpoints[*].addresses[0]", 0),
            age,
        ],
        ("apps", "Deployment") => vec![
            col(
                "Ready",
                "string",
                "=ratio:.status.readyReplicas,.spec.replicas",
                0,
            ),
            col("Up-to-date", "integer", "=int:.status.updatedReplicas", 0),
            col("Available", "integer", "=int:.status.availableReplicas", 0),
            age,
            containers.clone(),
            images.clone(),
            selector.clone(),
        ],
        ("apps", "DaemonSet") => vec![
            col(
                "Desired",
                "integer",
                "=int:.status.desiredNumberScheduled",
                0,
            ),
            col(
                "Current",
                "integer",
                "=int:.status.currentNumberScheduled",
                0,
            ),
            col("Ready", "integer", "=int:.status.numberReady", 0),
            col(
                "Up-to-date",
                "integer",
                "=int:.status.updatedNumberScheduled",
                0,
            ),
            col("Available", "integer", "=int:.status.numberAvailable", 0),
            col(
                "Node Selector",
                "string",
                "=selector:.spec.template.spec.nodeSelector",
                0,
            ),
            age,
            containers.clone(),
            images.clone(),
            selector.clone(),
        ],
        ("apps", "StatefulSet") => vec![
            col(
                "Ready",
                "string",
                "=ratio:.status.readyReplicas,.spec.replicas",
                0,
            ),
            age,
            containers.clone(),
            images.clone(),
        ],
        ("apps", "ReplicaSet") => vec![
            col("Desired", "integer", "=int:.spec.replicas", 0),
            col("Current", "integer", "=int:.status.replicas", 0),
            col("Ready", "integer", "=int:.status.readyReplicas", 0),
            age,
            containers.clone(),
            images.clone(),
            selector.clone(),
        ],
        ("policy", "PodDisruptionBudget") => vec![
            col("Min Available", "string", "=or-na:.spec.minAvailable", 0),
            col(
                "Max Unavailable",
                "string",
                "=or-na:.spec.maxUnavailable",
                0,
            ),
            col(
                "Allowed Disruptions",
                "integer",
                "=int:.status.disruptionsAllowed",
                0,
            ),
            age,
        ],
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => {
            vec![col("Created At", "date", ".metadata.creationTimestamp", 0)]
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => vec![
            col("Role", "string", ".roleRef.name", 0),
            age,
            col("Users", "string", ".subjects[?(@.kind==\"User\")].name", 1),
            col(
                "Groups",
                "string",
                ".subjects[?(@.kind==\"Group\")].name",
                1,
            ),
            col(
                "ServiceAccounts",
                "string",
                ".subjects[?(@.kind==\"ServiceAccount\")].name",
                1,
            ),
        ],
        ("certificates.k8s.io", "CertificateSigningRequest") => vec![
            age,
            col("SignerName", "string", ".spec.signerName", 0),
            col("Requestor", "string", ".spec.username", 0),
            col("Condition", "string", ".status.conditions[*].type", 0),
        ],
        _ => return None,
    })
}
