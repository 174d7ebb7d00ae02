//! The set under analysis: every object with its identity and a typed view that hides the
//! differences between API versions (v1beta1 `apiVersion` references and v1beta2 `apiGroup`
//! references, moved fields), so that rules are written once.
//!
//! Building the index is also where the object-level rules run: identity, duplicates, unknown kinds
//! and versions, and deserialisation into the typed model (wrong field types, with the field's
//! path and line). Unknown fields are the schema's to judge (`rules::schema`).

use std::collections::{BTreeMap, HashMap};

use capstan_manifest::{LoadedObject, ObjectId};
use capstan_model::capi::{v1beta1 as capi1, v1beta2 as capi2};
use capstan_model::capm3::{
    self, Metal3ClusterSpec, Metal3DataTemplateSpec, Metal3MachineSpec, Metal3MachineTemplateSpec,
};
use capstan_model::cilium;
use capstan_model::ipam::IpPoolSpec;
use capstan_model::kinds::{self, KindError};
use capstan_model::kubeadm::{self, KubeadmConfigSpec};
use capstan_model::meta::{
    ContractVersionedObjectReference, LabelSelector, ObjectReference, SecretReference, group_of,
};
use capstan_model::metal3::BareMetalHost;
use capstan_model::path::FieldPath;
use capstan_model::{core, ipam, metal3};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::catalogue::id;
use crate::diagnostic::{Diagnostic, Location};

/// A reference from one object to another, in either version's form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ref {
    /// The referenced group; `None` when the reference does not say (a v1beta1 reference without
    /// `apiVersion`).
    pub group: Option<String>,
    pub kind: String,
    pub name: String,
    /// Only v1beta1 references may name another namespace.
    pub namespace: Option<String>,
    /// Where the reference is in the referring object.
    pub path: FieldPath,
}

impl Ref {
    fn from_v1beta1(reference: &ObjectReference, path: FieldPath) -> Self {
        Self {
            group: reference
                .api_version
                .as_deref()
                .filter(|v| !v.is_empty())
                .map(|v| group_of(v).to_owned()),
            kind: reference.kind.clone().unwrap_or_default(),
            name: reference.name.clone().unwrap_or_default(),
            namespace: reference.namespace.clone().filter(|ns| !ns.is_empty()),
            path,
        }
    }

    fn from_v1beta2(reference: &ContractVersionedObjectReference, path: FieldPath) -> Self {
        Self {
            group: Some(reference.api_group.clone()),
            kind: reference.kind.clone(),
            name: reference.name.clone(),
            namespace: None,
            path,
        }
    }

    /// A reference to a Secret (`{name, namespace}`).
    pub fn secret(reference: &SecretReference, path: FieldPath) -> Option<Self> {
        let name = reference.name.clone().filter(|n| !n.is_empty())?;
        Some(Self {
            group: Some(String::new()),
            kind: "Secret".to_owned(),
            name,
            namespace: reference.namespace.clone().filter(|ns| !ns.is_empty()),
            path,
        })
    }

    /// A reference by name to an object of a fixed kind.
    pub fn named(group: &str, kind: &str, name: &str, path: FieldPath) -> Self {
        Self {
            group: Some(group.to_owned()),
            kind: kind.to_owned(),
            name: name.to_owned(),
            namespace: None,
            path,
        }
    }

    /// `Kind name` (with the group when it is not the core group), for messages.
    pub fn describe(&self) -> String {
        match self.group.as_deref() {
            Some(g) if !g.is_empty() => format!("{}.{} {}", self.kind, g, self.name),
            _ => format!("{} {}", self.kind, self.name),
        }
    }
}

/// A Cluster, either version.
#[derive(Clone, Debug)]
pub(crate) struct ClusterView {
    /// `spec.clusterNetwork.pods.cidrBlocks`.
    pub pod_cidrs: Vec<String>,
    /// `spec.controlPlaneEndpoint.host`, when set.
    pub endpoint_host: Option<String>,
    pub infrastructure_ref: Option<Ref>,
    pub control_plane_ref: Option<Ref>,
}

/// Where the pod CIDRs of a Cluster are.
pub(crate) const CLUSTER_PODS_PATH: &str = "spec.clusterNetwork.pods.cidrBlocks";

/// A KubeadmControlPlane, either version.
#[derive(Clone, Debug)]
pub(crate) struct ControlPlaneView {
    pub replicas: Option<i32>,
    pub version: String,
    pub infrastructure_ref: Ref,
    pub config: KubeadmConfigSpec,
}

/// Where a KubeadmControlPlane's KubeadmConfigSpec is.
pub(crate) const KCP_CONFIG_PATH: &str = "spec.kubeadmConfigSpec";
/// Where a KubeadmConfigTemplate's KubeadmConfigSpec is.
pub(crate) const KCT_CONFIG_PATH: &str = "spec.template.spec";
/// Where a Metal3MachineTemplate's Metal3MachineSpec is.
pub(crate) const M3MT_SPEC_PATH: &str = "spec.template.spec";

impl ControlPlaneView {
    /// Whether etcd is external (`clusterConfiguration.etcd.external`).
    pub fn external_etcd(&self) -> bool {
        self.config
            .cluster_configuration
            .as_ref()
            .and_then(|c| c.etcd.as_ref())
            .and_then(|e| e.get("external"))
            .is_some_and(|e| !e.is_null())
    }

    /// `clusterConfiguration.networking.podSubnet`, when set (v1beta1 only).
    pub fn pod_subnet(&self) -> Option<&str> {
        self.config
            .cluster_configuration
            .as_ref()
            .and_then(|c| c.networking.as_ref())
            .and_then(|n| n.pod_subnet.as_deref())
            .filter(|s| !s.is_empty())
    }
}

/// A MachineDeployment, either version.
#[derive(Clone, Debug)]
pub(crate) struct DeploymentView {
    pub cluster_name: String,
    pub replicas: Option<i32>,
    pub selector: LabelSelector,
    pub template_labels: BTreeMap<String, String>,
    pub version: Option<String>,
    pub bootstrap_ref: Option<Ref>,
    pub infrastructure_ref: Ref,
}

/// A MachineHealthCheck, either version.
#[derive(Clone, Debug)]
pub(crate) struct HealthCheckView {
    pub cluster_name: String,
    pub remediation_ref: Option<Ref>,
}

/// A ClusterResourceSet, either version.
#[derive(Clone, Debug)]
pub(crate) struct ResourceSetView {
    pub selector: LabelSelector,
    pub resources: Vec<capi1::ResourceRef>,
}

/// The typed view of one object.
#[derive(Clone, Debug)]
pub(crate) enum View {
    Cluster(ClusterView),
    ControlPlane(Box<ControlPlaneView>),
    Deployment(Box<DeploymentView>),
    HealthCheck(HealthCheckView),
    ResourceSet(ResourceSetView),
    ConfigTemplate(Box<KubeadmConfigSpec>),
    Metal3Cluster(Metal3ClusterSpec),
    MachineTemplate(Box<Metal3MachineSpec>),
    DataTemplate(Box<Metal3DataTemplateSpec>),
    Host(Box<BareMetalHost>),
    /// A Secret; rules read its raw JSON (to know paths), the typed form only validates it.
    Secret,
    /// A ConfigMap; as for Secrets, rules read the raw JSON.
    ConfigMap,
    IpPool(Box<IpPoolSpec>),
    /// Cilium BGP objects; the Cilium rules read them as JSON, as they do embedded ones.
    BgpClusterConfig,
    BgpPeerConfig,
    BgpAdvertisement,
    /// A known kind that no rule inspects beyond deserialising it.
    Checked,
    /// A known kind that failed to deserialise (already reported).
    Invalid,
    /// A kind lint does not know (a built-in or another provider's kind).
    Foreign,
}

/// One object of the set.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    pub obj: &'a LoadedObject,
    pub id: ObjectId,
    pub view: View,
    /// Position in [`Index::entries`].
    pub pos: usize,
}

impl Entry<'_> {
    pub fn namespace(&self) -> Option<&str> {
        self.id.namespace.as_deref()
    }

    pub fn name(&self) -> &str {
        &self.id.name
    }

    pub fn group(&self) -> &str {
        self.id.group()
    }

    /// The location of `path` in this object.
    pub fn at(&self, path: &FieldPath) -> Location {
        Location::of(self.obj, path)
    }

    /// The location of a dotted path in this object.
    pub fn at_str(&self, path: &str) -> Location {
        Location::of(self.obj, &FieldPath::parse(path))
    }

    /// The labels of this object.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.obj
            .value
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Whether two namespaces can be the same. An absent namespace means "wherever the set is
/// applied", which matches any namespace: CAPM3's own templates leave it out on some objects and
/// set it on others.
pub(crate) fn same_namespace(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// Every object of the set with its view, and lookups by name.
pub(crate) struct Index<'a> {
    pub entries: Vec<Entry<'a>>,
    by_name: HashMap<String, Vec<usize>>,
}

impl<'a> Index<'a> {
    /// Indexes `objects`, reporting object-level problems into `out`.
    pub fn build(objects: &'a [LoadedObject], out: &mut Vec<Diagnostic>) -> Self {
        let mut entries = Vec::with_capacity(objects.len());
        let mut first_seen: HashMap<capstan_manifest::ObjectKey, usize> = HashMap::new();
        for obj in objects {
            let id = match obj.id() {
                Ok(id) => id,
                Err(err) => {
                    out.push(
                        Diagnostic::new(
                            id::MISSING_IDENTITY,
                            err.to_string(),
                            Location::of(obj, &FieldPath::parse("metadata.name")),
                        )
                        .hint("give the object a non-empty string `metadata.name`"),
                    );
                    continue;
                }
            };
            let key = id.key();
            if let Some(&first) = first_seen.get(&key) {
                let first: &Entry<'_> = &entries[first];
                out.push(
                    Diagnostic::new(
                        id::DUPLICATE_OBJECT,
                        format!("{} is defined twice", id),
                        Location::of(obj, &FieldPath::root()),
                    )
                    .why("`kubectl apply` applies both definitions and the last one wins")
                    .hint("remove one of the two definitions, or rename one")
                    .related("first definition", first.at(&FieldPath::root())),
                );
                continue;
            }
            first_seen.insert(key, entries.len());
            let view = view_of(obj, &id, out);
            let pos = entries.len();
            entries.push(Entry { obj, id, view, pos });
        }
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            by_name.entry(e.id.name.clone()).or_default().push(i);
        }
        Self { entries, by_name }
    }

    /// Objects named `name` that can be in `namespace`.
    pub fn named<'s, 'n>(
        &'s self,
        name: &str,
        namespace: Option<&'n str>,
    ) -> impl Iterator<Item = &'s Entry<'a>> + use<'s, 'n, 'a> {
        self.by_name
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.entries.get(i))
            .filter(move |e| same_namespace(e.namespace(), namespace))
    }

    /// The object of `kind` (in `group`, when given) named `name` that can be in `namespace`.
    pub fn find(
        &self,
        group: Option<&str>,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
    ) -> Option<&Entry<'a>> {
        self.named(name, namespace)
            .find(|e| e.id.kind == kind && group.is_none_or(|g| g == e.group()))
    }

    /// The object a reference names, resolved from an object in `from_namespace`.
    pub fn resolve(&self, reference: &Ref, from_namespace: Option<&str>) -> Option<&Entry<'a>> {
        let namespace = reference.namespace.as_deref().or(from_namespace);
        self.find(
            reference.group.as_deref(),
            &reference.kind,
            &reference.name,
            namespace,
        )
    }

    /// Every object whose view `pick` accepts, with the picked part.
    pub fn each<'s, T: 's>(
        &'s self,
        pick: impl Fn(&'s View) -> Option<&'s T> + 's,
    ) -> impl Iterator<Item = (&'s Entry<'a>, &'s T)> + 's {
        self.entries
            .iter()
            .filter_map(move |e| pick(&e.view).map(|t| (e, t)))
    }

    pub fn clusters(&self) -> impl Iterator<Item = (&Entry<'a>, &ClusterView)> {
        self.each(|v| match v {
            View::Cluster(c) => Some(c),
            _ => None,
        })
    }

    pub fn control_planes(&self) -> impl Iterator<Item = (&Entry<'a>, &ControlPlaneView)> {
        self.each(|v| match v {
            View::ControlPlane(c) => Some(c.as_ref()),
            _ => None,
        })
    }

    pub fn deployments(&self) -> impl Iterator<Item = (&Entry<'a>, &DeploymentView)> {
        self.each(|v| match v {
            View::Deployment(d) => Some(d.as_ref()),
            _ => None,
        })
    }

    pub fn hosts(&self) -> impl Iterator<Item = (&Entry<'a>, &BareMetalHost)> {
        self.each(|v| match v {
            View::Host(h) => Some(h.as_ref()),
            _ => None,
        })
    }

    pub fn machine_templates(&self) -> impl Iterator<Item = (&Entry<'a>, &Metal3MachineSpec)> {
        self.each(|v| match v {
            View::MachineTemplate(t) => Some(t.as_ref()),
            _ => None,
        })
    }

    pub fn resource_sets(&self) -> impl Iterator<Item = (&Entry<'a>, &ResourceSetView)> {
        self.each(|v| match v {
            View::ResourceSet(r) => Some(r),
            _ => None,
        })
    }

    /// The Cluster named `name` that can be in `namespace`.
    pub fn cluster(
        &self,
        name: &str,
        namespace: Option<&str>,
    ) -> Option<(&Entry<'a>, &ClusterView)> {
        self.named(name, namespace).find_map(|e| match &e.view {
            View::Cluster(c) => Some((e, c)),
            _ => None,
        })
    }

    /// The KubeadmControlPlane of a Cluster (through its controlPlaneRef).
    pub fn control_plane_of(
        &self,
        cluster: &Entry<'a>,
        view: &ClusterView,
    ) -> Option<(&Entry<'a>, &ControlPlaneView)> {
        let reference = view.control_plane_ref.as_ref()?;
        let target = self.resolve(reference, cluster.namespace())?;
        match &target.view {
            View::ControlPlane(c) => Some((target, c.as_ref())),
            _ => None,
        }
    }

    /// The Metal3MachineTemplate a reference names, if it is one.
    pub fn machine_template(
        &self,
        reference: &Ref,
        from_namespace: Option<&str>,
    ) -> Option<(&Entry<'a>, &Metal3MachineSpec)> {
        let target = self.resolve(reference, from_namespace)?;
        match &target.view {
            View::MachineTemplate(t) => Some((target, t.as_ref())),
            _ => None,
        }
    }

    /// The BareMetalHosts a Metal3MachineTemplate can claim: hosts in its namespace matching its
    /// hostSelector (no selector matches every host).
    pub fn hosts_for(&self, template: &Entry<'a>, spec: &Metal3MachineSpec) -> Vec<&Entry<'a>> {
        self.hosts()
            .filter(|(host, _)| same_namespace(host.namespace(), template.namespace()))
            .filter(|(host, _)| {
                spec.host_selector
                    .as_ref()
                    .is_none_or(|s| s.matches(&host.labels()))
            })
            .map(|(host, _)| host)
            .collect()
    }
}

/// Real upstream kinds in groups lint knows, which capstan does not model: noted, not errors.
const UPSTREAM_ONLY_KINDS: &[(&str, &str)] = &[
    ("cluster.x-k8s.io", "ClusterClass"),
    ("cluster.x-k8s.io", "MachinePool"),
    ("cluster.x-k8s.io", "MachineDrainRule"),
    (
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlaneTemplate",
    ),
    ("infrastructure.cluster.x-k8s.io", "Metal3ClusterTemplate"),
    ("infrastructure.cluster.x-k8s.io", "Metal3Data"),
    ("infrastructure.cluster.x-k8s.io", "Metal3DataClaim"),
    ("infrastructure.cluster.x-k8s.io", "Metal3Remediation"),
    (
        "infrastructure.cluster.x-k8s.io",
        "Metal3RemediationTemplate",
    ),
    ("metal3.io", "DataImage"),
    ("metal3.io", "PreprovisioningImage"),
    ("metal3.io", "FirmwareSchema"),
    ("metal3.io", "HostFirmwareSettings"),
    ("metal3.io", "HostFirmwareComponents"),
    ("metal3.io", "BMCEventSubscription"),
    ("metal3.io", "HostUpdatePolicy"),
];

/// Groups that other projects share (the core group's built-in kinds; every infrastructure provider uses
/// `infrastructure.cluster.x-k8s.io`; Cilium has many kinds besides BGP). An unknown kind there is
/// only an error when it looks like a misspelling of a kind lint knows.
const SHARED_GROUPS: &[&str] = &[
    "",
    "infrastructure.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
    "cilium.io",
];

/// The Cluster API groups, where a kind of one written under another is a mistake, not another
/// provider's kind.
const CAPI_GROUPS: &[&str] = &[
    "cluster.x-k8s.io",
    "addons.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
    "infrastructure.cluster.x-k8s.io",
];

/// The group a kind belongs to, when it is written under another Cluster API group (`Cluster`
/// under `infrastructure.cluster.x-k8s.io`, as in one published KVM design).
fn wrong_group(group: &str, kind: &str) -> Option<&'static str> {
    if !CAPI_GROUPS.contains(&group) {
        return None;
    }
    kinds::KINDS
        .iter()
        .find(|k| k.kind == kind && k.group != group && CAPI_GROUPS.contains(&k.group))
        .map(|k| k.group)
}

/// What a Cluster API group holds, for messages.
fn group_holds(group: &str) -> String {
    let held: Vec<&str> = kinds::KINDS
        .iter()
        .filter(|k| k.group == group)
        .map(|k| k.kind)
        .collect();
    if group == "infrastructure.cluster.x-k8s.io" {
        format!(
            "{group} holds the infrastructure providers' kinds ({}), which the Cluster's infrastructureRef names",
            held.join(", ")
        )
    } else {
        format!("{group} holds {}", held.join(", "))
    }
}

/// Levenshtein distance, case-insensitive, for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev.last().copied().unwrap_or(0)
}

/// The known kind of `group` closest to `kind`, if it is close enough to be a misspelling. In the
/// core group, where lint knows only a few of many built-in kinds, only a difference in case is.
fn near_kind(group: &str, kind: &str) -> Option<&'static str> {
    let limit = if group.is_empty() { 0 } else { 2 };
    kinds::KINDS
        .iter()
        .filter(|k| k.group == group)
        .map(|k| (edit_distance(k.kind, kind), k.kind))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| k)
}

fn view_of(obj: &LoadedObject, id: &ObjectId, out: &mut Vec<Diagnostic>) -> View {
    let group = id.group();
    let kind = id.kind.as_str();
    match kinds::lookup(&id.api_version, kind) {
        Ok(_) => typed_view(obj, group, kind, id.version(), out),
        Err(err @ KindError::UnknownVersion { .. }) => {
            out.push(
                Diagnostic::new(
                    id::UNKNOWN_KIND,
                    err.to_string(),
                    Location::of(obj, &FieldPath::parse("apiVersion")),
                )
                .why("the API server rejects objects in versions it does not serve")
                .hint(if id.version() == "v1alpha4" && capstan_model::convert::v1alpha4::handles(group, kind) {
                    "write the object in one of the served versions: `capstan convert FILE` rewrites Cluster API v1alpha4 and v1beta1 manifests as v1beta2".to_owned()
                } else {
                    "write the object in one of the served versions".to_owned()
                }),
            );
            View::Invalid
        }
        Err(err @ KindError::UnknownKind { .. }) => {
            if let Some(home) = wrong_group(group, kind) {
                out.push(
                    Diagnostic::new(
                        id::WRONG_API_GROUP,
                        format!("{kind} is not a kind of {group}: {kind} belongs to {home}"),
                        Location::of(obj, &FieldPath::parse("apiVersion")),
                    )
                    .why(format!(
                        "{group} serves no {kind}, so the API server rejects the object (or, where a provider's group has no such kind, nothing ever reconciles it); {}",
                        group_holds(group)
                    ))
                    .hint(format!(
                        "write `apiVersion: {home}/v1beta2` (or `{home}/v1beta1`); objects written for v1alpha4 can then be rewritten by `capstan convert`"
                    )),
                );
                return View::Invalid;
            }
            let upstream = UPSTREAM_ONLY_KINDS.contains(&(group, kind));
            if upstream || !kinds::is_known_group(group) {
                return View::Foreign;
            }
            let near = near_kind(group, kind);
            if SHARED_GROUPS.contains(&group) && near.is_none() {
                return View::Foreign;
            }
            let mut d = Diagnostic::new(
                id::UNKNOWN_KIND,
                err.to_string(),
                Location::of(obj, &FieldPath::parse("kind")),
            )
            .why(format!(
                "{group} serves no kind {kind}; the API server rejects the object"
            ));
            if let Some(near) = near {
                d = d.hint(format!("did you mean `kind: {near}`?"));
            }
            out.push(d);
            View::Invalid
        }
    }
}

/// Deserialises `obj` into `T`, reporting the first field that does not fit. Fields `T` does not
/// have are the schema's to judge (`rules::schema`): the model names only the fields capstan acts
/// on of the kinds it shares with upstream.
pub(crate) fn typed<T: DeserializeOwned>(
    obj: &LoadedObject,
    out: &mut Vec<Diagnostic>,
) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(&obj.value) {
        Ok(t) => Some(t),
        Err(err) => {
            let path = field_path(err.path());
            let kind = obj
                .value
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("object");
            out.push(
                Diagnostic::new(
                    id::INVALID_FIELD,
                    format!("`{path}`: {}", err.inner()),
                    Location::of(obj, &path),
                )
                .why(format!(
                    "a {kind} with this field is rejected by the API server or by its controller"
                ))
                .hint("write the field with the type the kind's API defines"),
            );
            None
        }
    }
}

/// A `serde_path_to_error` path as a [`FieldPath`].
pub(crate) fn field_path(path: &serde_path_to_error::Path) -> FieldPath {
    let mut out = FieldPath::root();
    for segment in path.iter() {
        out = match segment {
            serde_path_to_error::Segment::Seq { index } => out.index(*index),
            serde_path_to_error::Segment::Map { key } => out.key(key.clone()),
            serde_path_to_error::Segment::Enum { .. } => continue,
            serde_path_to_error::Segment::Unknown => break,
        };
    }
    out
}

fn typed_view(
    obj: &LoadedObject,
    group: &str,
    kind: &str,
    version: &str,
    out: &mut Vec<Diagnostic>,
) -> View {
    let v1 = version == "v1beta1";
    let view = match (group, kind) {
        ("cluster.x-k8s.io", "Cluster") => {
            if v1 {
                typed::<capi1::Cluster>(obj, out).map(|c| View::Cluster(cluster_v1(&c.spec)))
            } else {
                typed::<capi2::Cluster>(obj, out).map(|c| View::Cluster(cluster_v2(&c.spec)))
            }
        }
        ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane") => {
            if v1 {
                typed::<kubeadm::v1beta1::KubeadmControlPlane>(obj, out).map(|k| {
                    View::ControlPlane(Box::new(ControlPlaneView {
                        replicas: k.spec.replicas,
                        version: k.spec.version,
                        infrastructure_ref: Ref::from_v1beta1(
                            &k.spec.machine_template.infrastructure_ref,
                            FieldPath::parse("spec.machineTemplate.infrastructureRef"),
                        ),
                        config: k.spec.kubeadm_config_spec,
                    }))
                })
            } else {
                typed::<kubeadm::v1beta2::KubeadmControlPlane>(obj, out).map(|k| {
                    View::ControlPlane(Box::new(ControlPlaneView {
                        replicas: k.spec.replicas,
                        version: k.spec.version,
                        infrastructure_ref: Ref::from_v1beta2(
                            &k.spec.machine_template.spec.infrastructure_ref,
                            FieldPath::parse("spec.machineTemplate.spec.infrastructureRef"),
                        ),
                        config: k.spec.kubeadm_config_spec,
                    }))
                })
            }
        }
        ("cluster.x-k8s.io", "MachineDeployment") => {
            if v1 {
                typed::<capi1::MachineDeployment>(obj, out).map(|md| {
                    let spec = md.spec;
                    let t = spec.template.spec;
                    View::Deployment(Box::new(DeploymentView {
                        cluster_name: spec.cluster_name,
                        replicas: spec.replicas,
                        selector: spec.selector,
                        template_labels: spec.template.metadata.labels,
                        version: t.version,
                        bootstrap_ref: t.bootstrap.config_ref.as_ref().map(|r| {
                            Ref::from_v1beta1(
                                r,
                                FieldPath::parse("spec.template.spec.bootstrap.configRef"),
                            )
                        }),
                        infrastructure_ref: Ref::from_v1beta1(
                            &t.infrastructure_ref,
                            FieldPath::parse("spec.template.spec.infrastructureRef"),
                        ),
                    }))
                })
            } else {
                typed::<capi2::MachineDeployment>(obj, out).map(|md| {
                    let spec = md.spec;
                    let t = spec.template.spec;
                    View::Deployment(Box::new(DeploymentView {
                        cluster_name: spec.cluster_name,
                        replicas: spec.replicas,
                        selector: spec.selector,
                        template_labels: spec.template.metadata.labels,
                        version: t.version,
                        bootstrap_ref: t.bootstrap.config_ref.as_ref().map(|r| {
                            Ref::from_v1beta2(
                                r,
                                FieldPath::parse("spec.template.spec.bootstrap.configRef"),
                            )
                        }),
                        infrastructure_ref: Ref::from_v1beta2(
                            &t.infrastructure_ref,
                            FieldPath::parse("spec.template.spec.infrastructureRef"),
                        ),
                    }))
                })
            }
        }
        ("cluster.x-k8s.io", "MachineHealthCheck") => {
            if v1 {
                typed::<capi1::MachineHealthCheck>(obj, out).map(|m| {
                    View::HealthCheck(HealthCheckView {
                        cluster_name: m.spec.cluster_name,
                        remediation_ref: m.spec.remediation_template.as_ref().map(|r| {
                            Ref::from_v1beta1(r, FieldPath::parse("spec.remediationTemplate"))
                        }),
                    })
                })
            } else {
                typed::<capi2::MachineHealthCheck>(obj, out).map(|m| {
                    let path = FieldPath::parse("spec.remediation.templateRef");
                    let remediation_ref = m
                        .spec
                        .remediation
                        .as_ref()
                        .and_then(|r| r.get("templateRef"))
                        .and_then(|t| serde_json::from_value::<ObjectReference>(t.clone()).ok())
                        .map(|r| Ref::from_v1beta1(&r, path));
                    View::HealthCheck(HealthCheckView {
                        cluster_name: m.spec.cluster_name,
                        remediation_ref,
                    })
                })
            }
        }
        ("addons.cluster.x-k8s.io", "ClusterResourceSet") => {
            if v1 {
                typed::<capi1::ClusterResourceSet>(obj, out)
                    .map(|c| View::ResourceSet(resource_set(c.spec)))
            } else {
                typed::<capi2::ClusterResourceSet>(obj, out)
                    .map(|c| View::ResourceSet(resource_set(c.spec)))
            }
        }
        ("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate") => {
            if v1 {
                typed::<kubeadm::v1beta1::KubeadmConfigTemplate>(obj, out)
                    .map(|t| View::ConfigTemplate(Box::new(t.spec.template.spec)))
            } else {
                typed::<kubeadm::v1beta2::KubeadmConfigTemplate>(obj, out)
                    .map(|t| View::ConfigTemplate(Box::new(t.spec.template.spec)))
            }
        }
        ("infrastructure.cluster.x-k8s.io", "Metal3Cluster") => {
            if v1 {
                typed::<capm3::v1beta1::Metal3Cluster>(obj, out)
                    .map(|c| View::Metal3Cluster(c.spec))
            } else {
                typed::<capm3::v1beta2::Metal3Cluster>(obj, out)
                    .map(|c| View::Metal3Cluster(c.spec))
            }
        }
        ("infrastructure.cluster.x-k8s.io", "Metal3MachineTemplate") => {
            let spec: Option<Metal3MachineTemplateSpec> = if v1 {
                typed::<capm3::v1beta1::Metal3MachineTemplate>(obj, out).map(|t| t.spec)
            } else {
                typed::<capm3::v1beta2::Metal3MachineTemplate>(obj, out).map(|t| t.spec)
            };
            spec.map(|s| View::MachineTemplate(Box::new(s.template.spec)))
        }
        ("infrastructure.cluster.x-k8s.io", "Metal3DataTemplate") => {
            if v1 {
                typed::<capm3::v1beta1::Metal3DataTemplate>(obj, out)
                    .map(|t| View::DataTemplate(Box::new(t.spec)))
            } else {
                typed::<capm3::v1beta2::Metal3DataTemplate>(obj, out)
                    .map(|t| View::DataTemplate(Box::new(t.spec)))
            }
        }
        ("metal3.io", "BareMetalHost") => {
            typed::<metal3::BareMetalHost>(obj, out).map(|h| View::Host(Box::new(h)))
        }
        ("ipam.metal3.io", "IPPool") => {
            typed::<ipam::IPPool>(obj, out).map(|p| View::IpPool(Box::new(p.spec)))
        }
        ("cilium.io", "CiliumBGPClusterConfig") => {
            typed::<cilium::CiliumBGPClusterConfig>(obj, out).map(|_| View::BgpClusterConfig)
        }
        ("cilium.io", "CiliumBGPPeerConfig") => {
            typed::<cilium::CiliumBGPPeerConfig>(obj, out).map(|_| View::BgpPeerConfig)
        }
        ("cilium.io", "CiliumBGPAdvertisement") => {
            typed::<cilium::CiliumBGPAdvertisement>(obj, out).map(|_| View::BgpAdvertisement)
        }
        ("", "Secret") => typed::<core::Secret>(obj, out).map(|_| View::Secret),
        ("", "ConfigMap") => typed::<core::ConfigMap>(obj, out).map(|_| View::ConfigMap),
        ("", "Namespace") => typed::<core::Namespace>(obj, out).map(|_| View::Checked),
        ("", "Pod") => typed::<core::Pod>(obj, out).map(|_| View::Checked),
        ("", "Event") => typed::<core::Event>(obj, out).map(|_| View::Checked),
        _ => checked_view(obj, group, kind, v1, out),
    };
    view.unwrap_or(View::Invalid)
}

/// Kinds no rule reads beyond their types: deserialise to catch wrong field types.
fn checked_view(
    obj: &LoadedObject,
    group: &str,
    kind: &str,
    v1: bool,
    out: &mut Vec<Diagnostic>,
) -> Option<View> {
    let ok = match (group, kind, v1) {
        ("cluster.x-k8s.io", "Machine", true) => typed::<capi1::Machine>(obj, out).is_some(),
        ("cluster.x-k8s.io", "Machine", false) => typed::<capi2::Machine>(obj, out).is_some(),
        ("cluster.x-k8s.io", "MachineSet", true) => typed::<capi1::MachineSet>(obj, out).is_some(),
        ("cluster.x-k8s.io", "MachineSet", false) => typed::<capi2::MachineSet>(obj, out).is_some(),
        ("addons.cluster.x-k8s.io", "ClusterResourceSetBinding", true) => {
            typed::<capi1::ClusterResourceSetBinding>(obj, out).is_some()
        }
        ("addons.cluster.x-k8s.io", "ClusterResourceSetBinding", false) => {
            typed::<capi2::ClusterResourceSetBinding>(obj, out).is_some()
        }
        ("bootstrap.cluster.x-k8s.io", "KubeadmConfig", true) => {
            typed::<kubeadm::v1beta1::KubeadmConfig>(obj, out).is_some()
        }
        ("bootstrap.cluster.x-k8s.io", "KubeadmConfig", false) => {
            typed::<kubeadm::v1beta2::KubeadmConfig>(obj, out).is_some()
        }
        ("infrastructure.cluster.x-k8s.io", "Metal3Machine", true) => {
            typed::<capm3::v1beta1::Metal3Machine>(obj, out).is_some()
        }
        ("infrastructure.cluster.x-k8s.io", "Metal3Machine", false) => {
            typed::<capm3::v1beta2::Metal3Machine>(obj, out).is_some()
        }
        ("metal3.io", "HardwareData", _) => typed::<metal3::HardwareData>(obj, out).is_some(),
        ("ipam.metal3.io", "IPClaim", _) => typed::<ipam::IPClaim>(obj, out).is_some(),
        ("ipam.metal3.io", "IPAddress", _) => typed::<ipam::IPAddress>(obj, out).is_some(),
        // A kind added to the model's catalogue that lint has no type for yet.
        _ => true,
    };
    ok.then_some(View::Checked)
}

fn cluster_v1(spec: &capi1::ClusterSpec) -> ClusterView {
    ClusterView {
        pod_cidrs: pod_cidrs(spec.cluster_network.as_ref()),
        endpoint_host: endpoint(spec.control_plane_endpoint.as_ref()),
        infrastructure_ref: spec
            .infrastructure_ref
            .as_ref()
            .map(|r| Ref::from_v1beta1(r, FieldPath::parse("spec.infrastructureRef"))),
        control_plane_ref: spec
            .control_plane_ref
            .as_ref()
            .map(|r| Ref::from_v1beta1(r, FieldPath::parse("spec.controlPlaneRef"))),
    }
}

fn cluster_v2(spec: &capi2::ClusterSpec) -> ClusterView {
    ClusterView {
        pod_cidrs: pod_cidrs(spec.cluster_network.as_ref()),
        endpoint_host: endpoint(spec.control_plane_endpoint.as_ref()),
        infrastructure_ref: spec
            .infrastructure_ref
            .as_ref()
            .map(|r| Ref::from_v1beta2(r, FieldPath::parse("spec.infrastructureRef"))),
        control_plane_ref: spec
            .control_plane_ref
            .as_ref()
            .map(|r| Ref::from_v1beta2(r, FieldPath::parse("spec.controlPlaneRef"))),
    }
}

fn pod_cidrs(network: Option<&capi1::ClusterNetwork>) -> Vec<String> {
    network
        .and_then(|n| n.pods.as_ref())
        .map(|p| p.cidr_blocks.clone())
        .unwrap_or_default()
}

fn endpoint(endpoint: Option<&capi1::ApiEndpoint>) -> Option<String> {
    endpoint.map(|e| e.host.clone()).filter(|h| !h.is_empty())
}

fn resource_set(spec: capi1::ClusterResourceSetSpec) -> ResourceSetView {
    ResourceSetView {
        selector: spec.cluster_selector,
        resources: spec.resources,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{load, rules_of};

    #[test]
    fn unknown_kinds_and_versions_are_errors_in_known_groups() {
        let objects = load(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Clustr\nmetadata: {name: a}\n---\n\
             apiVersion: cluster.x-k8s.io/v1alpha3\nkind: Cluster\nmetadata: {name: b}\n---\n\
             apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: Metal3Clustr\nmetadata: {name: c}\n",
        );
        let mut out = Vec::new();
        let index = Index::build(&objects, &mut out);
        assert_eq!(rules_of(&out), vec![id::UNKNOWN_KIND; 3]);
        assert!(
            out[2]
                .hint
                .as_deref()
                .is_some_and(|h| h.contains("Metal3Cluster"))
        );
        assert!(
            index
                .entries
                .iter()
                .all(|e| matches!(e.view, View::Invalid))
        );
    }

    #[test]
    fn foreign_and_upstream_only_kinds_are_not_errors() {
        let objects = load(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n---\n\
             apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: DockerCluster\nmetadata: {name: b}\n---\n\
             apiVersion: cluster.x-k8s.io/v1beta1\nkind: ClusterClass\nmetadata: {name: c}\n---\n\
             apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: d}\n",
        );
        let mut out = Vec::new();
        let index = Index::build(&objects, &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert!(
            index
                .entries
                .iter()
                .all(|e| matches!(e.view, View::Foreign))
        );
    }

    #[test]
    fn wrong_field_types_point_at_the_field() {
        let objects = load(
            "apiVersion: controlplane.cluster.x-k8s.io/v1beta1\nkind: KubeadmControlPlane\nmetadata: {name: a}\nspec:\n  version: v1.31.0\n  replicas: three\n",
        );
        let mut out = Vec::new();
        Index::build(&objects, &mut out);
        assert_eq!(rules_of(&out), vec![id::INVALID_FIELD]);
        assert_eq!(out[0].location.line, 6);
        assert_eq!(out[0].location.path, "spec.replicas");
        // The same object with a number is fine.
        let objects = load(
            "apiVersion: controlplane.cluster.x-k8s.io/v1beta1\nkind: KubeadmControlPlane\nmetadata: {name: a}\nspec:\n  version: v1.31.0\n  replicas: 3\n",
        );
        let mut out = Vec::new();
        let index = Index::build(&objects, &mut out);
        assert!(out.is_empty());
        assert_eq!(index.control_planes().count(), 1);
    }

    #[test]
    fn duplicates_and_nameless_objects_are_reported() {
        let objects = load(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: x}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: x}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: y}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {labels: {a: b}}\n",
        );
        let mut out = Vec::new();
        let index = Index::build(&objects, &mut out);
        let mut rules = rules_of(&out);
        rules.sort_unstable();
        assert_eq!(rules, vec![id::DUPLICATE_OBJECT, id::MISSING_IDENTITY]);
        assert_eq!(index.entries.len(), 2);
        let dup = out
            .iter()
            .find(|d| d.rule == id::DUPLICATE_OBJECT)
            .expect("dup");
        assert_eq!(dup.related[0].location.line, 1);
    }

    #[test]
    fn references_resolve_across_absent_namespaces() {
        let objects = load(
            "apiVersion: ipam.metal3.io/v1alpha1\nkind: IPPool\nmetadata: {name: pool1}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: a}\n",
        );
        let mut out = Vec::new();
        let index = Index::build(&objects, &mut out);
        assert!(
            index
                .find(Some("ipam.metal3.io"), "IPPool", "pool1", Some("metal3"))
                .is_some()
        );
        assert!(index.find(Some(""), "Secret", "s", Some("a")).is_some());
        assert!(index.find(Some(""), "Secret", "s", Some("b")).is_none());
        assert!(index.find(None, "Secret", "s", None).is_some());
        assert_eq!(edit_distance("Metal3Clustr", "Metal3Cluster"), 1);
    }
}
