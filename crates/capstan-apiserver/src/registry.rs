//! The served resources: capstan's built-in kinds plus every CustomResourceDefinition stored in the
//! API. Built-in kinds are described by synthesised CRDs (so `capstan crds` can print them and so one
//! code path serves both); a stored CRD for the same group and plural replaces the built-in one, which
//! is how users install the full upstream schemas.

use capstan_model::kinds::{KINDS, KindInfo};
use capstan_model::resource::Scope;
use capstan_schema::{CrdInfo, CrdVersion, SchemaInterner};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A resolved request target: the kind's definition and the requested version.
#[derive(Clone)]
pub struct Served {
    pub crd: Arc<CrdInfo>,
    pub version: String,
}

impl Served {
    /// The requested version's definition.
    pub fn version(&self) -> Option<&CrdVersion> {
        self.crd.version(&self.version)
    }

    /// The storage key prefix: `group/plural`.
    pub fn storage_resource(&self) -> String {
        format!("{}/{}", self.crd.group, self.crd.plural)
    }

    /// `group/version`, or the version alone for the core group.
    pub fn api_version(&self) -> String {
        api_version(&self.crd.group, &self.version)
    }

    /// The version objects are stored in.
    pub fn storage_version(&self) -> String {
        self.crd
            .storage_version()
            .map_or_else(|| self.version.clone(), |v| v.name.clone())
    }

    /// Whether objects live in namespaces.
    pub fn namespaced(&self) -> bool {
        self.crd.scope == capstan_schema::Scope::Namespaced
    }

    /// Whether `status` is a subresource.
    pub fn has_status(&self) -> bool {
        self.version().is_some_and(|v| v.subresources.status)
    }
}

/// `group/version`, or the version alone for the core group.
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// All served kinds, by (group, plural).
#[derive(Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<(String, String), Arc<CrdInfo>>,
}

/// Why a CRD cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid CustomResourceDefinition")]
    Invalid(#[from] capstan_schema::CrdError),
}

impl Registry {
    /// The built-in kinds. Parsed once per process and shared (the definitions are behind `Arc`s),
    /// so many API servers in one process — the simulated workload clusters — cost little each.
    /// The kinds' schemas are parsed with one interner, so the sub-schemas they repeat (ObjectMeta,
    /// conditions, references, Kubernetes' own types) are held once; each synthesised definition
    /// is kept once, in its [`CrdInfo`].
    pub fn builtin() -> Result<Self, RegistryError> {
        static BUILTIN: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
        if let Some(registry) = BUILTIN.get() {
            return Ok(registry.clone());
        }
        let mut registry = Self::default();
        let mut interner = SchemaInterner::new();
        for info in served_kinds() {
            registry.insert(parse_builtin(&synthesised_crd(info), &mut interner)?);
        }
        Ok(BUILTIN.get_or_init(|| registry).clone())
    }

    /// The built-in definition of a kind, if it is one.
    fn builtin_kind(group: &str, plural: &str) -> Option<Arc<CrdInfo>> {
        let builtin = Self::builtin().ok()?;
        builtin
            .kinds
            .get(&(group.to_owned(), plural.to_owned()))
            .cloned()
    }

    /// Serves (or replaces) a kind.
    pub fn insert(&mut self, crd: CrdInfo) {
        self.kinds
            .insert((crd.group.clone(), crd.plural.clone()), Arc::new(crd));
    }

    /// Stops serving a kind defined by a stored CRD, restoring the built-in definition if there is one.
    pub fn remove(&mut self, group: &str, plural: &str) {
        self.kinds.remove(&(group.to_owned(), plural.to_owned()));
        if let Some(builtin) = Self::builtin_kind(group, plural) {
            self.kinds
                .insert((group.to_owned(), plural.to_owned()), builtin);
        }
    }

    /// Resolves `group`, `version` and `plural` to a served kind.
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Served> {
        let crd = self.kinds.get(&(group.to_owned(), plural.to_owned()))?;
        crd.version(version).filter(|v| v.served)?;
        Some(Served {
            crd: crd.clone(),
            version: version.to_owned(),
        })
    }

    /// Resolves by kind (for `capstan get KIND`, short names and singular names too).
    pub fn resolve_name(&self, name: &str) -> Option<Served> {
        let lower = name.to_ascii_lowercase();
        let (short, group) = lower
            .split_once('.')
            .map_or((lower.as_str(), None), |(s, g)| (s, Some(g)));
        let crd = self.kinds.values().find(|c| {
            group.is_none_or(|g| c.group == g)
                && (c.plural == short
                    || c.singular == short
                    || c.kind.to_ascii_lowercase() == short
                    || c.short_names.iter().any(|s| s == short))
        })?;
        let version = crd
            .storage_version()
            .or_else(|| crd.served_versions().next())?
            .name
            .clone();
        Some(Served {
            crd: crd.clone(),
            version,
        })
    }

    /// Every served kind.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<CrdInfo>> {
        self.kinds.values()
    }

    /// Served groups with their versions (preferred = storage version first), sorted with the core
    /// group excluded.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for crd in self.kinds.values().filter(|c| !c.group.is_empty()) {
            let entry = groups.entry(crd.group.clone()).or_default();
            let storage = crd.storage_version().map(|v| v.name.clone());
            for v in crd.served_versions() {
                if !entry.contains(&v.name) {
                    if Some(&v.name) == storage.as_ref() {
                        entry.insert(0, v.name.clone());
                    } else {
                        entry.push(v.name.clone());
                    }
                }
            }
        }
        groups
    }
}

/// Parses a synthesised CRD. CRDs cannot name the core group (its name is empty), so core kinds are
/// parsed under a placeholder group that is then cleared.
fn parse_builtin(crd: &Value, interner: &mut SchemaInterner) -> Result<CrdInfo, RegistryError> {
    if crd["spec"]["group"].as_str().is_some_and(str::is_empty) {
        let mut placeholder = crd.clone();
        placeholder["spec"]["group"] = json!("core");
        let mut info = CrdInfo::from_value_shared(&placeholder, interner)?;
        info.group = String::new();
        info.definition = crd.clone();
        return Ok(info);
    }
    Ok(CrdInfo::from_value_shared(crd, interner)?)
}

/// Printer columns for the built-in kinds, so `kubectl get` shows state at a glance.
fn printer_columns(kind: &str) -> Vec<Value> {
    let col = |name: &str, type_: &str, path: &str, priority: i32| json!({"name": name, "type": type_, "jsonPath": path, "priority": priority});
    let cluster = col(
        "Cluster",
        "string",
        ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        0,
    );
    let cluster_from_spec = col("Cluster", "string", ".spec.clusterName", 0);
    let age = col("Age", "date", ".metadata.creationTimestamp", 0);
    match kind {
        "Cluster" => vec![
            col("Phase", "string", ".status.phase", 0),
            col("Paused", "boolean", ".spec.paused", 1),
            age,
        ],
        "Machine" => vec![
            cluster_from_spec,
            col("NodeName", "string", ".status.nodeRef.name", 0),
            col("ProviderID", "string", ".spec.providerID", 0),
            col("Phase", "string", ".status.phase", 0),
            age,
            col("Version", "string", ".spec.version", 0),
        ],
        "MachineSet" | "MachineDeployment" => vec![
            cluster_from_spec,
            col("Replicas", "integer", ".status.replicas", 0),
            col("Ready", "integer", ".status.readyReplicas", 0),
            col("Phase", "string", ".status.phase", 0),
            age,
            col("Version", "string", ".spec.template.spec.version", 0),
        ],
        "KubeadmControlPlane" => vec![
            cluster,
            col("Initialized", "boolean", ".status.initialized", 0),
            col("Replicas", "integer", ".status.replicas", 0),
            col("Ready", "integer", ".status.readyReplicas", 0),
            age,
            col("Version", "string", ".spec.version", 0),
        ],
        "BareMetalHost" => vec![
            col("Status", "string", ".status.operationalStatus", 0),
            col("State", "string", ".status.provisioning.state", 0),
            col("Consumer", "string", ".spec.consumerRef.name", 0),
            col("Online", "boolean", ".spec.online", 0),
            col("Error", "string", ".status.errorType", 0),
            age,
            col("BMC", "string", ".spec.bmc.address", 1),
            col("Powered On", "boolean", ".status.poweredOn", 1),
            col("CPUs", "integer", ".status.hardware.cpu.count", 1),
            col("RAM MiB", "integer", ".status.hardware.ramMebibytes", 1),
            col("Boot MAC", "string", ".spec.bootMACAddress", 1),
        ],
        "Metal3Machine" => vec![
            cluster,
            col("Provider ID", "string", ".spec.providerID", 0),
            col("Ready", "boolean", ".status.ready", 0),
            age,
        ],
        "Metal3Cluster" => vec![
            cluster,
            col("Ready", "boolean", ".status.ready", 0),
            col("Endpoint", "string", ".spec.controlPlaneEndpoint.host", 0),
            age,
        ],
        "IPPool" => vec![
            col("Cluster", "string", ".spec.clusterName", 0),
            col("Prefix", "string", ".spec.namePrefix", 0),
            age,
        ],
        "IPClaim" => vec![
            col("Pool", "string", ".spec.pool.name", 0),
            col("Address", "string", ".status.address.name", 0),
            col("Error", "string", ".status.errorMessage", 0),
            age,
        ],
        "IPAddress" => vec![
            col("Address", "string", ".spec.address", 0),
            col("Pool", "string", ".spec.pool.name", 0),
            col("Claim", "string", ".spec.claim.name", 0),
            age,
        ],
        "ClusterResourceSet" => vec![col("Strategy", "string", ".spec.strategy", 0), age],
        "Secret" => vec![col("Type", "string", ".type", 0), age],
        "Event" => vec![
            col("Type", "string", ".type", 0),
            col("Reason", "string", ".reason", 0),
            col("Object", "string", ".involvedObject.name", 0),
            col("Message", "string", ".message", 0),
            age,
        ],
        "Namespace" => vec![col("Status", "string", ".status.phase", 0), age],
        "Lease" => vec![col("Holder", "string", ".spec.holderIdentity", 0), age],
        _ => vec![age],
    }
}

fn synthesised_crd(info: &KindInfo) -> Value {
    let scope = match info.scope {
        Scope::Namespaced => "Namespaced",
        Scope::Cluster => "Cluster",
    };
    let status = crate::builtin::has_status(info.group, info.kind)
        .unwrap_or_else(|| info.has_status_subresource());
    let versions: Vec<Value> = info
        .versions
        .iter()
        .map(|v| {
            let schema = crate::builtin::schemas::schema(info.group, info.kind)
                .or_else(|| crate::kind_schemas::served_schema(info.group, info.kind, v))
                .unwrap_or_else(
                    || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            let columns = crate::builtin::printer_columns(info.group, info.kind)
                .unwrap_or_else(|| printer_columns(info.kind));
            let mut version = json!({
                "name": v,
                "served": true,
                "storage": *v == info.storage_version,
                "schema": {"openAPIV3Schema": schema},
                "additionalPrinterColumns": columns,
            });
            let mut subresources = serde_json::Map::new();
            if status {
                subresources.insert("status".into(), json!({}));
            }
            if let Some(scale) = crate::builtin::scale(info.group, info.kind) {
                subresources.insert("scale".into(), scale);
            }
            if !subresources.is_empty()
                && let Some(obj) = version.as_object_mut()
            {
                obj.insert("subresources".into(), Value::Object(subresources));
            }
            version
        })
        .collect();
    let mut metadata = json!({"name": if info.group.is_empty() { info.plural.to_owned() } else { format!("{}.{}", info.plural, info.group) }});
    let labels = contract_labels(info);
    if !labels.is_empty() {
        metadata["labels"] = Value::Object(labels);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": info.group,
            "scope": scope,
            "names": {
                "kind": info.kind,
                "listKind": format!("{}List", info.kind),
                "plural": info.plural,
                "singular": crate::builtin::singular(info),
                "shortNames": info.short_names,
                "categories": info.categories,
            },
            "versions": versions,
        }
    })
}

/// Cluster API's contract labels for a kind of a `*.cluster.x-k8s.io` group: for each contract
/// (`cluster.x-k8s.io/v1beta2`, `cluster.x-k8s.io/v1beta1`), the kind's versions that implement
/// it, `_`-separated. A reference that names only a group and kind (v1beta2's
/// `ContractVersionedObjectReference`) is resolved by these: clusterctl and upstream's controllers
/// read the CRD's label for their contract and take its newest version.
fn contract_labels(info: &KindInfo) -> serde_json::Map<String, Value> {
    let mut labels = serde_json::Map::new();
    if info.group != "cluster.x-k8s.io" && !info.group.ends_with(".cluster.x-k8s.io") {
        return labels;
    }
    let (current, older): (Vec<&str>, Vec<&str>) =
        info.versions.iter().partition(|v| **v == "v1beta2");
    if !current.is_empty() {
        labels.insert("cluster.x-k8s.io/v1beta2".into(), json!(current.join("_")));
    }
    if !older.is_empty() {
        labels.insert("cluster.x-k8s.io/v1beta1".into(), json!(older.join("_")));
    }
    labels
}

/// Kinds every Kubernetes API has that capstan's clients use: CRDs themselves, Leases for leader
/// election, and `events.k8s.io` Events as kube-runtime's recorder writes them.
const PLATFORM_KINDS: &[KindInfo] = &[
    KindInfo {
        group: "apiextensions.k8s.io",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        singular: "customresourcedefinition",
        short_names: &["crd", "crds"],
        scope: Scope::Cluster,
        versions: &["v1"],
        storage_version: "v1",
        categories: &["api-extensions"],
    },
    KindInfo {
        group: "coordination.k8s.io",
        kind: "Lease",
        plural: "leases",
        singular: "lease",
        short_names: &[],
        scope: Scope::Namespaced,
        versions: &["v1"],
        storage_version: "v1",
        categories: &[],
    },
    KindInfo {
        group: "events.k8s.io",
        kind: "Event",
        plural: "events",
        singular: "event",
        short_names: &["ev"],
        scope: Scope::Namespaced,
        versions: &["v1"],
        storage_version: "v1",
        categories: &[],
    },
];

/// Whether `group`/`plural` is one of Kubernetes' own resources this server serves natively (typed,
/// or part of the platform: CRDs, Leases, Events), which no CustomResourceDefinition may redefine.
pub fn is_kubernetes_resource(group: &str, plural: &str) -> bool {
    crate::builtin::KINDS
        .iter()
        .chain(PLATFORM_KINDS)
        .any(|k| k.group == group && k.plural == plural)
}

/// The synthesised CRDs of capstan's kinds and the platform kinds (what `capstan crds` prints for
/// the platform kinds). Kubernetes' own workload-cluster kinds are served too (see [`served_kinds`])
/// but are never CRDs in a real cluster, so they are not here.
pub fn builtin_crds() -> Vec<Value> {
    let Ok(builtin) = Registry::builtin() else {
        return Vec::new();
    };
    KINDS
        .iter()
        .chain(PLATFORM_KINDS)
        .filter_map(|info| {
            builtin
                .kinds
                .get(&(info.group.to_owned(), info.plural.to_owned()))
                .map(|crd| crd.definition.clone())
        })
        .collect()
}

/// The synthesised CRDs of capstan's own kinds (Cluster API, kubeadm, Metal3, KVM, IPAM, Cilium
/// BGP) and MachinePool's (served, every write refused): what a management cluster has
/// installed, without Kubernetes' own kinds capstan models (core and `policy`), which are never
/// CRDs.
pub fn capstan_crds() -> Vec<Value> {
    let Ok(builtin) = Registry::builtin() else {
        return Vec::new();
    };
    KINDS
        .iter()
        .filter(|info| info.group.contains('.') && !info.group.ends_with(".k8s.io"))
        .filter_map(|info| {
            builtin
                .kinds
                .get(&(info.group.to_owned(), info.plural.to_owned()))
                .map(|crd| crd.definition.clone())
        })
        .chain(std::iter::once(machine_pool_crd()))
        .collect()
}

/// What a write of a MachinePool is refused with.
pub const MACHINE_POOL_REFUSAL: &str = "capstan does not reconcile MachinePools: describe the \
     workers with a MachineDeployment (and its KubeadmConfigTemplate and infrastructure machine \
     template) instead";

/// Cluster API's MachinePool, which capstan does not reconcile: a definition of capstan's so that
/// tools which list a Cluster's machines by every kind Cluster API has (`clusterctl describe
/// cluster` lists MachinePools) find the kind, as on any management cluster, while every write of
/// one is refused (a validation rule on the root) saying what to use instead.
fn machine_pool_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "machinepools.cluster.x-k8s.io",
            "labels": {"cluster.x-k8s.io/v1beta2": "v1beta2"},
        },
        "spec": {
            "group": "cluster.x-k8s.io",
            "scope": "Namespaced",
            "names": {
                "kind": "MachinePool",
                "listKind": "MachinePoolList",
                "plural": "machinepools",
                "singular": "machinepool",
                "shortNames": ["mp"],
                "categories": ["cluster-api"],
            },
            "versions": [{
                "name": "v1beta2",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "x-kubernetes-validations": [{"rule": "false", "message": MACHINE_POOL_REFUSAL}],
                }},
                "subresources": {"status": {}},
            }],
        },
    })
}

/// Every built-in kind the API serves: capstan's, the platform's and Kubernetes' own.
fn served_kinds() -> impl Iterator<Item = &'static KindInfo> {
    KINDS
        .iter()
        .chain(PLATFORM_KINDS)
        .chain(crate::builtin::KINDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_api_kinds_carry_the_contract_labels() {
        let crds = capstan_crds();
        let labels = |name: &str| {
            crds.iter()
                .find(|c| c["metadata"]["name"] == name)
                .map(|c| c["metadata"]["labels"].clone())
                .unwrap_or(Value::Null)
        };
        assert_eq!(
            labels("kubeadmcontrolplanes.controlplane.cluster.x-k8s.io"),
            json!({"cluster.x-k8s.io/v1beta2": "v1beta2", "cluster.x-k8s.io/v1beta1": "v1beta1"})
        );
        assert_eq!(
            labels("kvmmachines.infrastructure.cluster.x-k8s.io"),
            json!({"cluster.x-k8s.io/v1beta2": "v1beta2", "cluster.x-k8s.io/v1beta1": "v1alpha4"})
        );
        assert_eq!(labels("baremetalhosts.metal3.io"), Value::Null);
        assert_eq!(
            labels("machinepools.cluster.x-k8s.io"),
            json!({"cluster.x-k8s.io/v1beta2": "v1beta2"})
        );
        assert!(
            !crds
                .iter()
                .any(|c| c["spec"]["group"] == "" || c["spec"]["group"] == "policy")
        );
        assert!(crds.len() > 20, "{}", crds.len());
    }

    #[test]
    fn builtins_resolve_by_path_and_name() {
        let r = Registry::builtin().unwrap();
        let c = r
            .resolve("cluster.x-k8s.io", "v1beta1", "clusters")
            .unwrap();
        assert_eq!(c.storage_version(), "v1beta2");
        assert!(c.has_status() && c.namespaced());
        assert!(
            r.resolve("cluster.x-k8s.io", "v1alpha3", "clusters")
                .is_none()
        );
        assert_eq!(r.resolve_name("bmh").unwrap().crd.kind, "BareMetalHost");
        assert_eq!(r.resolve_name("secrets").unwrap().crd.group, "");
        assert!(!r.resolve("", "v1", "secrets").unwrap().has_status());
        assert_eq!(
            r.groups()["cluster.x-k8s.io"],
            vec!["v1beta2".to_owned(), "v1beta1".to_owned()]
        );
    }

    #[test]
    fn the_cluster_column_names_the_cluster_from_its_label() {
        let r = Registry::builtin().unwrap();
        let object = json!({"metadata": {"name": "capi-1", "creationTimestamp": "2020-01-01T00:00:00Z",
            "labels": {"cluster.x-k8s.io/cluster-name": "capi-1"}}});
        for (group, plural) in [
            ("controlplane.cluster.x-k8s.io", "kubeadmcontrolplanes"),
            ("infrastructure.cluster.x-k8s.io", "metal3machines"),
            ("infrastructure.cluster.x-k8s.io", "metal3clusters"),
        ] {
            for version in ["v1beta1", "v1beta2"] {
                let served = r.resolve(group, version, plural).unwrap();
                let columns = &served.version().unwrap().additional_printer_columns;
                let table = crate::table::table(std::slice::from_ref(&object), columns, "1", None);
                let at = table["columnDefinitions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .position(|c| c["name"] == "Cluster")
                    .unwrap_or_else(|| panic!("{plural} {version}: no Cluster column"));
                assert_eq!(
                    table["rows"][0]["cells"][at], "capi-1",
                    "{plural} {version}: {table}"
                );
            }
        }
    }
}
