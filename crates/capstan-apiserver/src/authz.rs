//! Authorization: RBAC as kube-apiserver evaluates it, on every request.
//!
//! A request's attributes (user, verb, API group, resource and subresource, namespace, name — or a
//! non-resource path) are allowed when the user is in `system:masters`, or when a rule of a role
//! bound to the user allows them: ClusterRoleBindings grant their ClusterRole everywhere,
//! RoleBindings grant their Role or ClusterRole in their namespace. Rules match as in
//! `rbac/v1`: `*` wildcards for verbs, groups and resources, `resource/subresource` and
//! `*/subresource`, `resourceNames`, and `nonResourceURLs` with a trailing `*` as a prefix. A
//! ClusterRole with an `aggregationRule` has, besides its own rules, those of every ClusterRole its
//! selectors pick (evaluated when authorizing, transitively), so `admin`/`edit`/`view` grow with the
//! roles labelled to aggregate into them.
//!
//! The default roles and bindings kube-apiserver creates (see [`default_policy`]) are written at
//! start: created when missing and brought up to date while they keep
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`.

use crate::ApiState;
use crate::authn::{MASTERS_GROUP, UserInfo};
use crate::status::ApiError;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};

const RBAC: &str = "rbac.authorization.k8s.io";

/// Why the policy could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    #[error("reading {resource}")]
    Store {
        resource: &'static str,
        source: capstan_store::StoreError,
    },
}

impl From<AuthzError> for ApiError {
    fn from(err: AuthzError) -> Self {
        let AuthzError::Store { resource, source } = err;
        ApiError::Internal(format!("authorizing: reading {resource}: {source}"))
    }
}

/// The resource part of a request's attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped requests and all-namespace lists.
    pub namespace: String,
    pub name: String,
}

/// What a request asks to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    /// `None`: a non-resource request for `path`.
    pub resource: Option<ResourceAttributes>,
    pub path: String,
}

/// One `rbac/v1` PolicyRule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

impl Rule {
    pub fn from_value(value: &Value) -> Self {
        Self {
            verbs: strings(&value["verbs"]),
            api_groups: strings(&value["apiGroups"]),
            resources: strings(&value["resources"]),
            resource_names: strings(&value["resourceNames"]),
            non_resource_urls: strings(&value["nonResourceURLs"]),
        }
    }

    /// The rule as `rbac/v1` JSON (and as SelfSubjectRulesReview reports it).
    pub fn to_value(&self) -> Value {
        let mut rule = json!({"verbs": self.verbs});
        let mut set = |key: &str, list: &[String]| {
            if !list.is_empty() {
                rule[key] = json!(list);
            }
        };
        set("apiGroups", &self.api_groups);
        set("resources", &self.resources);
        set("resourceNames", &self.resource_names);
        set("nonResourceURLs", &self.non_resource_urls);
        rule
    }

    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == "*" || v == verb)
    }

    /// Whether this rule allows `attributes`.
    pub fn allows(&self, attributes: &Attributes) -> bool {
        if !self.verb_matches(&attributes.verb) {
            return false;
        }
        match &attributes.resource {
            Some(r) => {
                let group = self.api_groups.iter().any(|g| g == "*" || *g == r.group);
                let combined = if r.subresource.is_empty() {
                    r.resource.clone()
                } else {
                    format!("{}/{}", r.resource, r.subresource)
                };
                let resource = self.resources.iter().any(|rule| {
                    rule == "*"
                        || *rule == combined
                        || (!r.subresource.is_empty()
                            && rule.strip_prefix("*/") == Some(r.subresource.as_str()))
                });
                let name = self.resource_names.is_empty() || self.resource_names.contains(&r.name);
                group && resource && name
            }
            None => self.non_resource_urls.iter().any(|url| {
                url == "*"
                    || *url == attributes.path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|prefix| attributes.path.starts_with(prefix))
            }),
        }
    }
}

/// What RBAC grants, kept between decisions: the cluster-scoped objects (ClusterRoles and
/// ClusterRoleBindings) and the rules each user holds in each namespace. All of it is keyed on the
/// store's last change of the four RBAC resources, read before loading: any write to one of them,
/// by a request or by the server itself (a namespace's deletion removing its RoleBindings), makes
/// the next decision load afresh, and a load racing with a write is kept under the older key.
#[derive(Default)]
pub struct RbacCache {
    cached: std::sync::Mutex<Cached>,
}

/// The store's last change of each RBAC resource.
type RbacVersions = [u64; 4];

/// At most this many users × namespaces are remembered; beyond it the remembered rules start over.
const REMEMBERED_GRANTS: usize = 4_096;

#[derive(Default)]
struct Cached {
    versions: RbacVersions,
    cluster: Option<std::sync::Arc<ClusterPolicy>>,
    /// Rules (and evaluation errors) by user and namespace.
    grants: HashMap<GrantKey, std::sync::Arc<Grants>>,
}

/// Whom a binding can name: the username and groups; and the namespace asked about.
#[derive(Clone, PartialEq, Eq, Hash)]
struct GrantKey {
    username: String,
    groups: Vec<String>,
    namespace: String,
}

/// The rules a user holds in a namespace, and why some bindings naming the user grant nothing.
type Grants = (Vec<Rule>, Vec<String>);

/// ClusterRoles by name and ClusterRoleBindings.
struct ClusterPolicy {
    cluster_roles: HashMap<String, Value>,
    cluster_role_bindings: Vec<Value>,
}

impl RbacCache {
    fn versions(state: &ApiState) -> RbacVersions {
        [
            "clusterroles",
            "clusterrolebindings",
            "roles",
            "rolebindings",
        ]
        .map(|resource| state.store.last_change(&format!("{RBAC}/{resource}")))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.cached.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This cache as of `versions`: emptied when they moved since it was filled.
    fn at(&self, versions: RbacVersions) -> std::sync::MutexGuard<'_, Cached> {
        let mut cached = self.lock();
        if cached.versions != versions {
            *cached = Cached {
                versions,
                ..Cached::default()
            };
        }
        cached
    }

    async fn cluster(&self, state: &ApiState) -> Result<std::sync::Arc<ClusterPolicy>, AuthzError> {
        let versions = Self::versions(state);
        if let Some(policy) = &self.at(versions).cluster {
            return Ok(policy.clone());
        }
        let policy = std::sync::Arc::new(ClusterPolicy {
            cluster_roles: by_name(list(state, "clusterroles", None).await?),
            cluster_role_bindings: list(state, "clusterrolebindings", None).await?,
        });
        // Kept only under the versions read before loading (another decision may have moved on).
        let mut cached = self.lock();
        if cached.versions == versions {
            cached.cluster = Some(policy.clone());
        }
        Ok(policy)
    }

    /// The rules `user` holds in `namespace` (cluster-wide ones included).
    async fn grants(
        &self,
        state: &ApiState,
        user: &UserInfo,
        namespace: &str,
    ) -> Result<std::sync::Arc<Grants>, AuthzError> {
        let versions = Self::versions(state);
        let key = GrantKey {
            username: user.username.clone(),
            groups: user.groups.clone(),
            namespace: namespace.to_owned(),
        };
        if let Some(grants) = self.at(versions).grants.get(&key) {
            return Ok(grants.clone());
        }
        let grants = std::sync::Arc::new(Policy::load(state, namespace).await?.rules_for(user));
        let mut cached = self.lock();
        if cached.versions == versions {
            if cached.grants.len() >= REMEMBERED_GRANTS {
                cached.grants.clear();
            }
            cached.grants.insert(key, grants.clone());
        }
        Ok(grants)
    }
}

/// The RBAC objects a decision reads.
struct Policy {
    cluster: std::sync::Arc<ClusterPolicy>,
    /// The Roles and RoleBindings of the namespace asked about.
    roles: HashMap<String, Value>,
    role_bindings: Vec<Value>,
}

async fn list(
    state: &ApiState,
    resource: &'static str,
    namespace: Option<&str>,
) -> Result<Vec<Value>, AuthzError> {
    let page = state
        .store
        .list(
            format!("{RBAC}/{resource}"),
            namespace.map(str::to_owned),
            None,
            None,
            None,
        )
        .await
        .map_err(|source| AuthzError::Store { resource, source })?;
    // An undecodable row grants nothing.
    Ok(page.items.iter().filter_map(|o| o.value().ok()).collect())
}

fn by_name(objects: Vec<Value>) -> HashMap<String, Value> {
    objects
        .into_iter()
        .filter_map(|o| Some((o["metadata"]["name"].as_str()?.to_owned(), o)))
        .collect()
}

impl Policy {
    async fn load(state: &ApiState, namespace: &str) -> Result<Self, AuthzError> {
        let (roles, role_bindings) = if namespace.is_empty() {
            (HashMap::new(), Vec::new())
        } else {
            (
                by_name(list(state, "roles", Some(namespace)).await?),
                list(state, "rolebindings", Some(namespace)).await?,
            )
        };
        Ok(Self {
            cluster: state.rbac_cache.cluster(state).await?,
            roles,
            role_bindings,
        })
    }

    /// The rules of ClusterRole `name`, aggregated ones included; `None` when it does not exist.
    fn cluster_role_rules(&self, name: &str) -> Option<Vec<Rule>> {
        let mut rules = Vec::new();
        let mut seen = HashSet::new();
        self.collect_cluster_role(name, &mut seen, &mut rules)
            .then_some(rules)
    }

    fn collect_cluster_role(
        &self,
        name: &str,
        seen: &mut HashSet<String>,
        rules: &mut Vec<Rule>,
    ) -> bool {
        let Some(role) = self.cluster.cluster_roles.get(name) else {
            return false;
        };
        if !seen.insert(name.to_owned()) {
            return true;
        }
        rules.extend(
            role["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .map(Rule::from_value),
        );
        let selectors = role["aggregationRule"]["clusterRoleSelectors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if selectors.is_empty() {
            return true;
        }
        let mut members: Vec<&String> = self
            .cluster
            .cluster_roles
            .iter()
            .filter(|(other, _)| *other != name)
            .filter(|(_, other)| {
                let labels = crate::selectors::labels_of(other);
                selectors
                    .iter()
                    .any(|s| crate::builtin::subresources::selects(s, &labels))
            })
            .map(|(other, _)| other)
            .collect();
        members.sort();
        for member in members {
            self.collect_cluster_role(member, seen, rules);
        }
        true
    }

    /// The rules a binding grants, or why it grants nothing.
    fn binding_rules(&self, binding: &Value) -> Result<Vec<Rule>, String> {
        let role_ref = &binding["roleRef"];
        let name = role_ref["name"].as_str().unwrap_or_default();
        match role_ref["kind"].as_str() {
            Some("ClusterRole") => self
                .cluster_role_rules(name)
                .ok_or_else(|| format!("clusterrole.{RBAC} \"{name}\" not found")),
            Some("Role") => self
                .roles
                .get(name)
                .map(|role| {
                    role["rules"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(Rule::from_value)
                        .collect()
                })
                .ok_or_else(|| format!("role.{RBAC} \"{name}\" not found")),
            other => Err(format!("unknown roleRef kind {other:?}")),
        }
    }

    /// Every rule granted to `user` in `namespace` (cluster-wide ones included), and the reasons
    /// some bindings that name the user grant nothing.
    fn rules_for(&self, user: &UserInfo) -> (Vec<Rule>, Vec<String>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        for binding in &self.cluster.cluster_role_bindings {
            if binds(binding, user, "") {
                match self.binding_rules(binding) {
                    Ok(granted) => rules.extend(granted),
                    Err(e) => errors.push(e),
                }
            }
        }
        for binding in &self.role_bindings {
            let namespace = binding["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default();
            if binds(binding, user, namespace) {
                match self.binding_rules(binding) {
                    Ok(granted) => rules.extend(granted),
                    Err(e) => errors.push(e),
                }
            }
        }
        (rules, errors)
    }
}

/// Whether one of `binding`'s subjects is `user`.
fn binds(binding: &Value, user: &UserInfo, binding_namespace: &str) -> bool {
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|subject| {
            let name = subject["name"].as_str().unwrap_or_default();
            match subject["kind"].as_str() {
                Some("User") => user.username == name,
                Some("Group") => user.in_group(name),
                Some("ServiceAccount") => {
                    let namespace = subject["namespace"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(binding_namespace);
                    !namespace.is_empty()
                        && user.username == format!("system:serviceaccount:{namespace}:{name}")
                }
                _ => false,
            }
        })
}

/// An authorization decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Denied; `reason` explains what RBAC could not evaluate (empty when nothing allows it).
    Deny {
        reason: String,
    },
}

/// Decides whether `user` may do what `attributes` describe.
pub async fn authorize(
    state: &ApiState,
    user: &UserInfo,
    attributes: &Attributes,
) -> Result<Decision, AuthzError> {
    if user.in_group(MASTERS_GROUP) {
        return Ok(Decision::Allow);
    }
    let namespace = attributes
        .resource
        .as_ref()
        .map(|r| r.namespace.as_str())
        .unwrap_or_default();
    let grants = state.rbac_cache.grants(state, user, namespace).await?;
    let (rules, errors) = grants.as_ref();
    if rules.iter().any(|rule| rule.allows(attributes)) {
        return Ok(Decision::Allow);
    }
    let reason = if errors.is_empty() {
        String::new()
    } else {
        format!("RBAC: {}", errors.join(", "))
    };
    let (group, resource, namespace) = attributes
        .resource
        .as_ref()
        .map(|r| (r.group.as_str(), r.resource.as_str(), r.namespace.as_str()))
        .unwrap_or_default();
    tracing::info!(user = %user.username, verb = %attributes.verb, group, resource, namespace, path = %attributes.path, "RBAC denied a request");
    Ok(Decision::Deny { reason })
}

/// The rules `user` has in `namespace` (for SelfSubjectRulesReview), and evaluation errors.
pub async fn rules_for(
    state: &ApiState,
    user: &UserInfo,
    namespace: &str,
) -> Result<(Vec<Rule>, Vec<String>), AuthzError> {
    if user.in_group(MASTERS_GROUP) {
        let all = Rule {
            verbs: vec!["*".into()],
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            ..Rule::default()
        };
        let paths = Rule {
            verbs: vec!["*".into()],
            non_resource_urls: vec!["*".into()],
            ..Rule::default()
        };
        return Ok((vec![all, paths], Vec::new()));
    }
    Ok(state
        .rbac_cache
        .grants(state, user, namespace)
        .await?
        .as_ref()
        .clone())
}

/// The single-verb, single-resource, single-name pieces of a rule, as requests a holder of the rule
/// could make; a rule is covered when each of its pieces is allowed.
fn atoms(rule: &Rule) -> Vec<Attributes> {
    let mut out = Vec::new();
    for verb in &rule.verbs {
        for url in &rule.non_resource_urls {
            out.push(Attributes {
                verb: verb.clone(),
                resource: None,
                path: url.clone(),
            });
        }
        for group in &rule.api_groups {
            for resource in &rule.resources {
                let (resource, subresource) = resource
                    .split_once('/')
                    .map_or((resource.as_str(), ""), |(r, s)| (r, s));
                let names: Vec<String> = if rule.resource_names.is_empty() {
                    vec![String::new()]
                } else {
                    rule.resource_names.clone()
                };
                for name in names {
                    out.push(Attributes {
                        verb: verb.clone(),
                        resource: Some(ResourceAttributes {
                            group: group.clone(),
                            resource: resource.to_owned(),
                            subresource: subresource.to_owned(),
                            name,
                            ..ResourceAttributes::default()
                        }),
                        path: String::new(),
                    });
                }
            }
        }
    }
    out
}

/// Refuses a write of a Role, ClusterRole or binding that would grant `user` (a non-admin)
/// permissions it does not hold, as kube-apiserver's RBAC storage does: allowed when the user
/// may `escalate` (roles) or `bind` (the role a binding names), or already holds every rule.
/// `object` is the object as it would be stored.
pub async fn confirm_no_escalation(
    state: &ApiState,
    user: &UserInfo,
    plural: &str,
    namespace: &str,
    object: &Value,
) -> Result<(), ApiError> {
    if user.in_group(MASTERS_GROUP) {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let policy = Policy::load(state, namespace).await?;
    let (requested, shortcut) = match plural {
        "roles" | "clusterroles" => {
            let mut rules: Vec<Rule> = object["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .map(Rule::from_value)
                .collect();
            // An aggregation rule can gather anything: it needs full authority.
            if !object["aggregationRule"]["clusterRoleSelectors"]
                .as_array()
                .is_none_or(Vec::is_empty)
            {
                rules.push(Rule::from_value(
                    &json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
                ));
                rules.push(Rule::from_value(
                    &json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
                ));
            }
            let escalate = ResourceAttributes {
                group: RBAC.into(),
                resource: plural.into(),
                namespace: namespace.into(),
                name: name.into(),
                ..ResourceAttributes::default()
            };
            (rules, ("escalate", escalate))
        }
        _ => {
            let role_ref = &object["roleRef"];
            let role_name = role_ref["name"].as_str().unwrap_or_default();
            let kind = role_ref["kind"].as_str().unwrap_or_default();
            let rules = match kind {
                "ClusterRole" => policy.cluster_role_rules(role_name),
                "Role" => policy.roles.get(role_name).map(|role| {
                    role["rules"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(Rule::from_value)
                        .collect()
                }),
                _ => None,
            };
            let Some(rules) = rules else {
                return Err(ApiError::NotFound {
                    group: RBAC.into(),
                    resource: format!("{}s", kind.to_ascii_lowercase()),
                    name: role_name.to_owned(),
                });
            };
            let bind = ResourceAttributes {
                group: RBAC.into(),
                resource: format!("{}s", kind.to_ascii_lowercase()),
                namespace: namespace.into(),
                name: role_name.into(),
                ..ResourceAttributes::default()
            };
            (rules, ("bind", bind))
        }
    };
    let (verb, resource) = shortcut;
    let shortcut = Attributes {
        verb: verb.into(),
        resource: Some(resource),
        path: String::new(),
    };
    let (held, _) = policy.rules_for(user);
    if held.iter().any(|r| r.allows(&shortcut)) {
        return Ok(());
    }
    let missing: Vec<&Rule> = requested
        .iter()
        .filter(|rule| {
            !atoms(rule)
                .iter()
                .all(|atom| held.iter().any(|h| h.allows(atom)))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = missing.iter().map(|r| r.to_value().to_string()).collect();
    Err(ApiError::Forbidden {
        group: RBAC.into(),
        resource: plural.into(),
        name: name.into(),
        message: format!(
            "user {:?} (groups={:?}) is attempting to grant RBAC permissions not currently held:\n{}",
            user.username,
            user.groups,
            listed.join("\n")
        ),
    })
}

/// kube-apiserver's message for a denied request (`User "x" cannot list resource "y" in API group
/// "z" in the namespace "n"`), wrapped as a 403 `Forbidden` Status.
pub fn forbidden(user: &UserInfo, attributes: &Attributes, reason: &str) -> ApiError {
    let mut message = match &attributes.resource {
        None => format!(
            "User {:?} cannot {} path {:?}",
            user.username, attributes.verb, attributes.path
        ),
        Some(r) => {
            let resource = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let scope = if r.namespace.is_empty() {
                "at the cluster scope".to_owned()
            } else {
                format!("in the namespace {:?}", r.namespace)
            };
            format!(
                "User {:?} cannot {} resource {:?} in API group {:?} {scope}",
                user.username, attributes.verb, resource, r.group
            )
        }
    };
    if !reason.is_empty() {
        message = format!("{message}: {reason}");
    }
    let (group, resource, name) = attributes
        .resource
        .as_ref()
        .map(|r| (r.group.clone(), r.resource.clone(), r.name.clone()))
        .unwrap_or_default();
    ApiError::Forbidden {
        group,
        resource,
        name,
        message,
    }
}

fn read() -> Vec<&'static str> {
    vec!["get", "list", "watch"]
}

fn write() -> Vec<&'static str> {
    vec!["create", "delete", "deletecollection", "patch", "update"]
}

fn rule(groups: &[&str], resources: &[&str], verbs: Vec<&str>) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn paths(urls: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

fn cluster_role(name: &str, labels: Value, rules: Vec<Value>, aggregate_to: Option<&str>) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    let mut role = json!({
        "apiVersion": format!("{RBAC}/v1"),
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "rules": rules,
    });
    if let Some(label) = aggregate_to {
        role["aggregationRule"] =
            json!({"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]});
    }
    role
}

fn cluster_role_binding(name: &str, role: &str, groups: &[&str]) -> Value {
    json!({
        "apiVersion": format!("{RBAC}/v1"),
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
        "subjects": groups.iter().map(|g| json!({"apiGroup": RBAC, "kind": "Group", "name": g})).collect::<Vec<_>>(),
    })
}

/// Whether `group` is one of capstan's own API groups (Cluster API, Metal3, IPAM, Cilium).
fn is_capstan_group(group: &str) -> bool {
    !group.is_empty() && !group.ends_with(".k8s.io") && !matches!(group, "apps" | "policy")
}

/// The user the controllers inside `capstan serve` act as (bound to ClusterRole
/// [`CONTROLLERS_USER`] by [`default_policy`]).
pub const CONTROLLERS_USER: &str = "capstan:controllers";

/// The identity of the in-process controllers.
pub fn controllers_identity() -> UserInfo {
    UserInfo::new(CONTROLLERS_USER, &[])
}

/// The default ClusterRoles and ClusterRoleBindings: kube-apiserver's that matter here
/// (`cluster-admin`; `admin`, `edit`, `view` by aggregation; discovery, basic-user and
/// public-info for every authenticated user; monitoring; node bootstrapping and CSR roles;
/// auth-delegator), plus capstan's kinds aggregated into `view` and `edit`.
pub fn default_policy() -> Vec<Value> {
    let aggregate =
        |to: &str| json!({format!("rbac.authorization.k8s.io/aggregate-to-{to}"): "true"});
    let mut capstan_groups: Vec<&str> = capstan_model::kinds::KINDS
        .iter()
        .map(|k| k.group)
        .filter(|g| is_capstan_group(g))
        .collect();
    capstan_groups.sort_unstable();
    capstan_groups.dedup();
    let core_read = [
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "persistentvolumeclaims/status",
        "pods",
        "replicationcontrollers",
        "replicationcontrollers/scale",
        "serviceaccounts",
        "services",
        "services/status",
    ];
    let core_status = [
        "bindings",
        "events",
        "limitranges",
        "namespaces/status",
        "pods/log",
        "pods/status",
        "replicationcontrollers/status",
        "resourcequotas",
        "resourcequotas/status",
    ];
    let apps = [
        "controllerrevisions",
        "daemonsets",
        "daemonsets/status",
        "deployments",
        "deployments/scale",
        "deployments/status",
        "replicasets",
        "replicasets/scale",
        "replicasets/status",
        "statefulsets",
        "statefulsets/scale",
        "statefulsets/status",
    ];
    let view_rules = vec![
        rule(&[""], &core_read, read()),
        rule(&[""], &core_status, read()),
        rule(&[""], &["namespaces"], read()),
        rule(&["discovery.k8s.io"], &["endpointslices"], read()),
        rule(&["apps"], &apps, read()),
        rule(
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            read(),
        ),
        rule(&["coordination.k8s.io"], &["leases"], read()),
        rule(&["events.k8s.io"], &["events"], read()),
    ];
    let edit_rules = vec![
        rule(
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
            write(),
        ),
        rule(&[""], &["pods/eviction"], vec!["create"]),
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            write(),
        ),
        rule(&[""], &["serviceaccounts/token"], vec!["create"]),
        rule(&[""], &["secrets"], read()),
        rule(&[""], &["serviceaccounts"], vec!["impersonate"]),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            write(),
        ),
        rule(&["policy"], &["poddisruptionbudgets"], write()),
        rule(&["discovery.k8s.io"], &["endpointslices"], write()),
        rule(&["coordination.k8s.io"], &["leases"], write()),
    ];
    let admin_rules = vec![
        rule(&[RBAC], &["rolebindings", "roles"], {
            let mut verbs = read();
            verbs.extend(write());
            verbs
        }),
        rule(
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
            vec!["create"],
        ),
    ];
    let capstan_view = vec![rule(&capstan_groups, &["*"], read())];
    let capstan_edit = vec![rule(&capstan_groups, &["*"], write())];
    let discovery_urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ];
    let public_urls = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let csr = "certificates.k8s.io";
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            vec![rule(&["*"], &["*"], vec!["*"]), paths(&["*"], &["*"])],
            None,
        ),
        cluster_role(
            "admin",
            json!({}),
            Vec::new(),
            Some("rbac.authorization.k8s.io/aggregate-to-admin"),
        ),
        cluster_role(
            "edit",
            aggregate("admin"),
            Vec::new(),
            Some("rbac.authorization.k8s.io/aggregate-to-edit"),
        ),
        cluster_role(
            "view",
            aggregate("edit"),
            Vec::new(),
            Some("rbac.authorization.k8s.io/aggregate-to-view"),
        ),
        cluster_role(
            "system:aggregate-to-admin",
            aggregate("admin"),
            admin_rules,
            None,
        ),
        cluster_role(
            "system:aggregate-to-edit",
            aggregate("edit"),
            edit_rules,
            None,
        ),
        cluster_role(
            "system:aggregate-to-view",
            aggregate("view"),
            view_rules,
            None,
        ),
        cluster_role(
            "capstan:aggregate-to-edit",
            aggregate("edit"),
            capstan_edit,
            None,
        ),
        cluster_role(
            "capstan:aggregate-to-view",
            aggregate("view"),
            capstan_view,
            None,
        ),
        cluster_role(
            "system:discovery",
            json!({}),
            vec![paths(&discovery_urls, &["get"])],
            None,
        ),
        cluster_role(
            "system:public-info-viewer",
            json!({}),
            vec![paths(&public_urls, &["get"])],
            None,
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            json!({}),
            vec![paths(
                &[
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
                &["get"],
            )],
            None,
        ),
        cluster_role(
            "system:basic-user",
            json!({}),
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    vec!["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    vec!["create"],
                ),
            ],
            None,
        ),
        cluster_role(
            "system:monitoring",
            json!({}),
            vec![paths(
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/readyz",
                    "/readyz/*",
                ],
                &["get"],
            )],
            None,
        ),
        cluster_role(
            "system:auth-delegator",
            json!({}),
            vec![
                rule(
                    &["authentication.k8s.io"],
                    &["tokenreviews"],
                    vec!["create"],
                ),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    vec!["create"],
                ),
            ],
            None,
        ),
        cluster_role(
            "system:node-bootstrapper",
            json!({}),
            vec![rule(
                &[csr],
                &["certificatesigningrequests"],
                vec!["create", "get", "list", "watch"],
            )],
            None,
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            json!({}),
            vec![rule(
                &[csr],
                &["certificatesigningrequests/nodeclient"],
                vec!["create"],
            )],
            None,
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            json!({}),
            vec![rule(
                &[csr],
                &["certificatesigningrequests/selfnodeclient"],
                vec!["create"],
            )],
            None,
        ),
        // What capstan's controllers need on the management API: their own kinds, the Secrets
        // and ConfigMaps those reference (BMC credentials, bootstrap data, kubeconfigs, addons),
        // Events, and Leases for leader election; reading CRDs. Not RBAC, not CRD writes, not
        // other groups — except what the garbage collector needs on every kind, as
        // kube-controller-manager's `system:controller:generic-garbage-collector` has it: read and
        // watch (the owner graph), patch and update (dropping owner references and its finalizers)
        // and delete (dependents of deleted owners). It creates nothing.
        cluster_role(
            CONTROLLERS_USER,
            json!({}),
            vec![
                rule(
                    &["*"],
                    &["*"],
                    vec!["get", "list", "watch", "patch", "update", "delete"],
                ),
                rule(&capstan_groups, &["*"], vec!["*"]),
                rule(&[""], &["configmaps", "events", "secrets"], vec!["*"]),
                rule(&[""], &["namespaces"], read()),
                rule(&["events.k8s.io"], &["events"], vec!["*"]),
                rule(&["coordination.k8s.io"], &["leases"], vec!["*"]),
                rule(
                    &["apiextensions.k8s.io"],
                    &["customresourcedefinitions"],
                    read(),
                ),
            ],
            None,
        ),
        {
            let mut binding = cluster_role_binding(CONTROLLERS_USER, CONTROLLERS_USER, &[]);
            binding["subjects"] =
                json!([{"apiGroup": RBAC, "kind": "User", "name": CONTROLLERS_USER}]);
            binding
        },
        cluster_role_binding("cluster-admin", "cluster-admin", &[MASTERS_GROUP]),
        cluster_role_binding(
            "system:discovery",
            "system:discovery",
            &[crate::authn::AUTHENTICATED_GROUP],
        ),
        cluster_role_binding(
            "system:basic-user",
            "system:basic-user",
            &[crate::authn::AUTHENTICATED_GROUP],
        ),
        cluster_role_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[
                crate::authn::AUTHENTICATED_GROUP,
                crate::authn::UNAUTHENTICATED_GROUP,
            ],
        ),
        cluster_role_binding(
            "system:monitoring",
            "system:monitoring",
            &["system:monitoring"],
        ),
        cluster_role_binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            &["system:serviceaccounts"],
        ),
    ]
}

/// What `kubeadm init` adds so that nodes join with a bootstrap token (group
/// `system:bootstrappers:kubeadm:default-node-token`): CSR creation and auto-approval, and reading
/// Nodes. A simulated or embedded control plane that plays `kubeadm init` applies these.
pub fn kubeadm_init_policy() -> Vec<Value> {
    let group = "system:bootstrappers:kubeadm:default-node-token";
    let mut get_nodes = cluster_role(
        "kubeadm:get-nodes",
        json!({}),
        vec![rule(&[""], &["nodes"], vec!["get"])],
        None,
    );
    get_nodes["metadata"]["labels"] = json!({});
    let mut objects = vec![get_nodes];
    for (name, role) in [
        ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper"),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        ),
        ("kubeadm:get-nodes", "kubeadm:get-nodes"),
    ] {
        let mut binding = cluster_role_binding(name, role, &[group]);
        binding["metadata"]["labels"] = json!({});
        objects.push(binding);
    }
    objects
}

/// Writes [`default_policy`] into the store: missing objects are created; existing ones that keep
/// `rbac.authorization.kubernetes.io/autoupdate: "true"` are brought up to date.
pub async fn ensure_default_policy(
    store: &capstan_store::Store,
) -> Result<(), capstan_store::StoreError> {
    for mut object in default_policy() {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let plural = format!("{}s", kind.to_ascii_lowercase());
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let key = capstan_store::ObjectKey::new(format!("{RBAC}/{plural}"), "", name);
        match store.get(key.clone()).await? {
            None => match crate::lifecycle::prepare_create(&mut object, None, &kind) {
                Ok(_) => match store.create(key, object).await {
                    Ok(_) | Err(capstan_store::StoreError::AlreadyExists(_)) => {}
                    Err(err) => return Err(err),
                },
                Err(error) => {
                    tracing::error!(%kind, name = %key.name, %error, "a default RBAC object is not valid");
                }
            },
            Some(current) => {
                let old = current.value()?;
                let autoupdate =
                    old["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"]
                        .as_str()
                        == Some("true");
                let same = ["rules", "aggregationRule", "roleRef", "subjects"]
                    .iter()
                    .all(|field| old[*field] == object[*field]);
                if !autoupdate || same {
                    continue;
                }
                let mut updated = old.clone();
                for field in ["rules", "aggregationRule", "roleRef", "subjects"] {
                    if let Some(obj) = updated.as_object_mut() {
                        match object.get(field) {
                            Some(value) => {
                                obj.insert(field.to_owned(), value.clone());
                            }
                            None => {
                                obj.remove(field);
                            }
                        }
                    }
                }
                if crate::lifecycle::prepare_update(
                    &old,
                    &mut updated,
                    crate::lifecycle::WriteScope::Main {
                        status_subresource: false,
                    },
                    &kind,
                )
                .is_ok()
                {
                    match store
                        .update(key, updated, Some(current.resource_version))
                        .await
                    {
                        Ok(_) | Err(capstan_store::StoreError::Conflict { .. }) => {}
                        Err(err) => return Err(err),
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn attrs(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource: Some(ResourceAttributes {
                group: group.into(),
                version: "v1".into(),
                resource: resource.into(),
                subresource: sub.into(),
                namespace: ns.into(),
                name: name.into(),
            }),
            path: String::new(),
        }
    }

    #[tokio::test]
    async fn a_grant_is_gone_once_its_binding_is_whoever_removes_it() {
        // The server removes a namespace's RoleBindings itself when the namespace is deleted, not
        // through a request: remembered grants follow the store, whichever path wrote it.
        let dir = tempfile::tempdir().unwrap();
        let store =
            capstan_store::Store::open(&dir.path().join("state.db"), Default::default()).unwrap();
        let server = crate::ApiServer::new(
            store.clone(),
            std::sync::Arc::new(crate::conversion::ModelConverter),
            crate::Auth { tokens: Vec::new() },
        )
        .await
        .unwrap();
        let state = server.state();
        let alice = UserInfo::new("alice", &[]);
        let read = attrs("list", "", "configmaps", "", "team", "");
        let decide = || authorize(&state, &alice, &read);
        assert_ne!(decide().await.unwrap(), Decision::Allow);
        let key =
            capstan_store::ObjectKey::new(format!("{RBAC}/rolebindings"), "team", "alice-view");
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "alice-view", "namespace": "team"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": RBAC, "kind": "User", "name": "alice"}],
        });
        let created = store.create(key.clone(), binding).await.unwrap();
        assert_eq!(decide().await.unwrap(), Decision::Allow);
        // Asked again, the remembered grant answers; still allowed.
        assert_eq!(decide().await.unwrap(), Decision::Allow);
        store
            .delete(key, Some(created.resource_version))
            .await
            .unwrap();
        assert_ne!(decide().await.unwrap(), Decision::Allow);
        // Another namespace never shared the grant.
        let elsewhere = attrs("list", "", "configmaps", "", "other", "");
        assert_ne!(
            authorize(&state, &alice, &elsewhere).await.unwrap(),
            Decision::Allow
        );
    }

    #[test]
    fn rules_match_as_rbac_v1_specifies() {
        let r = |v: Value| Rule::from_value(&v);
        let pods = r(json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}));
        assert!(pods.allows(&attrs("get", "", "pods", "", "a", "p")));
        assert!(!pods.allows(&attrs("delete", "", "pods", "", "a", "p")));
        assert!(!pods.allows(&attrs("get", "apps", "pods", "", "a", "p")));
        assert!(!pods.allows(&attrs("get", "", "pods", "log", "a", "p")));
        let sub = r(json!({"apiGroups": [""], "resources": ["*/status"], "verbs": ["*"]}));
        assert!(sub.allows(&attrs("update", "", "pods", "status", "a", "p")));
        assert!(!sub.allows(&attrs("update", "", "pods", "", "a", "p")));
        let named = r(
            json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["x"], "verbs": ["get"]}),
        );
        assert!(named.allows(&attrs("get", "", "secrets", "", "a", "x")));
        assert!(!named.allows(&attrs("get", "", "secrets", "", "a", "y")));
        assert!(!named.allows(&attrs("list", "", "secrets", "", "a", "")));
        let urls = r(json!({"nonResourceURLs": ["/apis/*", "/version"], "verbs": ["get"]}));
        let path = |p: &str| Attributes {
            verb: "get".into(),
            resource: None,
            path: p.into(),
        };
        assert!(urls.allows(&path("/apis/apps/v1")));
        assert!(urls.allows(&path("/version")));
        assert!(!urls.allows(&path("/metrics")));
        assert!(!urls.allows(&attrs("get", "", "pods", "", "", "")));
    }

    #[test]
    fn forbidden_messages_are_kube_apiservers() {
        let user = UserInfo::new("jane", &[]);
        let err = forbidden(&user, &attrs("list", "", "secrets", "", "team-a", ""), "");
        assert_eq!(
            err.to_string(),
            r#"secrets is forbidden: User "jane" cannot list resource "secrets" in API group "" in the namespace "team-a""#
        );
        let err = forbidden(
            &user,
            &attrs("get", "cluster.x-k8s.io", "clusters", "", "", "c1"),
            "",
        );
        assert_eq!(
            err.to_string(),
            r#"clusters.cluster.x-k8s.io "c1" is forbidden: User "jane" cannot get resource "clusters" in API group "cluster.x-k8s.io" at the cluster scope"#
        );
        let err = forbidden(
            &user,
            &Attributes {
                verb: "get".into(),
                resource: None,
                path: "/metrics".into(),
            },
            "",
        );
        assert_eq!(
            err.to_string(),
            r#"forbidden: User "jane" cannot get path "/metrics""#
        );
    }

    #[test]
    fn the_default_policy_aggregates_view_into_edit_into_admin() {
        let policy = Policy {
            cluster: std::sync::Arc::new(ClusterPolicy {
                cluster_roles: by_name(
                    default_policy()
                        .into_iter()
                        .filter(|o| o["kind"] == "ClusterRole")
                        .collect(),
                ),
                cluster_role_bindings: Vec::new(),
            }),
            roles: HashMap::new(),
            role_bindings: Vec::new(),
        };
        let allows = |role: &str, a: &Attributes| {
            policy
                .cluster_role_rules(role)
                .unwrap()
                .iter()
                .any(|r| r.allows(a))
        };
        let list_pods = attrs("list", "", "pods", "", "a", "");
        let get_secret = attrs("get", "", "secrets", "", "a", "s");
        let create_role = attrs("create", RBAC, "roles", "", "a", "");
        let list_bmh = attrs("list", "metal3.io", "baremetalhosts", "", "a", "");
        let patch_cluster = attrs("patch", "cluster.x-k8s.io", "clusters", "", "a", "c");
        assert!(allows("view", &list_pods) && allows("view", &list_bmh));
        assert!(!allows("view", &get_secret) && !allows("view", &patch_cluster));
        assert!(allows("edit", &get_secret) && allows("edit", &patch_cluster));
        assert!(allows("edit", &list_pods) && !allows("edit", &create_role));
        assert!(allows("admin", &create_role) && allows("admin", &list_pods));
        assert!(policy.cluster_role_rules("nope").is_none());
    }
}
