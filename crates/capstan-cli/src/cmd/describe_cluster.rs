//! `capstan describe cluster NAME`: the tree `clusterctl describe cluster` shows — the Cluster, its
//! infrastructure, the control plane with its Machines, the workers by MachineDeployment — each with
//! READY / SEVERITY / REASON / SINCE / MESSAGE; then, when anything is not ready (the Cluster may
//! still be available: a rollout that waits leaves it so), the root cause (the deepest failing
//! object, its last error, its last Warning Event and, for a Machine that finds no host, who waits
//! for it and what to add), and each Machine's
//! timeline: host provisioning (the BareMetalHost's `operationHistory`) → bootstrap steps (the
//! KubeadmConfig's conditions) → Node Ready, with timestamps; and when the certificates expire: the
//! admin kubeconfig's client certificate (recorded on the KubeadmControlPlane, so the Secret is not
//! read) and each control-plane Machine's (`machine.cluster.x-k8s.io/certificates-expiry` on the
//! Machine, else on its KubeadmConfig).
//!
//! [`build`] is a pure function of the fetched objects and the time, so the tree is tested without a
//! server; [`fetch`] is the thin layer that reads the objects. Secrets are never read, so none can be
//! shown; `-o json|yaml` prints the same tree as data.

use crate::client::{self, get_json};
use crate::output::{Exit, Style, out, outln};
use serde::Serialize;
use serde_json::Value;

/// The objects the tree is built from (as the API returns them, v1beta2 for Cluster API kinds).
#[derive(Debug, Default)]
pub struct Objects {
    pub cluster: Value,
    pub infrastructure: Option<Value>,
    pub control_plane: Option<Value>,
    pub machine_deployments: Vec<Value>,
    pub machines: Vec<Value>,
    pub infra_machines: Vec<Value>,
    pub hosts: Vec<Value>,
    pub bootstrap_configs: Vec<Value>,
    /// Events of the namespace (`v1` or `events.k8s.io/v1` shape).
    pub events: Vec<Value>,
}

/// One row of the tree.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeNode {
    /// What the row shows (`ControlPlane - KubeadmControlPlane/capi-1`).
    pub display: String,
    pub kind: String,
    pub name: String,
    /// `True`, `False`, `Unknown` or empty (no readiness reported).
    pub ready: String,
    /// Empty when ready; `Info` while progressing; `Warning`; `Error` for failures.
    pub severity: String,
    pub reason: String,
    /// The readiness condition's last transition.
    pub last_transition: Option<String>,
    pub message: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<TreeNode>,
}

/// The deepest failing object of a chain.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RootCause {
    /// From the Cluster down to the failing object (`Cluster/a`, `Machine/b`, ...).
    pub path: Vec<String>,
    pub reason: String,
    /// The object's last error (`errorMessage`, failure message, or its condition message).
    pub error: String,
    pub last_warning_event: Option<EventSummary>,
    /// What holds the chain up and what to do, when capstan knows (a Machine that waits for a
    /// host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// An Event, as shown.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EventSummary {
    pub time: String,
    pub reason: String,
    pub message: String,
}

/// One step in a Machine's life.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct TimelineEntry {
    pub time: String,
    /// `host`, `bootstrap` or `node`.
    pub stage: String,
    pub what: String,
}

/// A Machine's timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timeline {
    pub machine: String,
    pub entries: Vec<TimelineEntry>,
}

/// When one object's certificates expire.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CertificateExpiry {
    /// `Secret/NAME` (the admin kubeconfig's client certificate) or `Machine/NAME`.
    pub object: String,
    /// RFC 3339.
    pub expires: String,
}

/// Everything `describe cluster` shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Description {
    pub tree: TreeNode,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub root_causes: Vec<RootCause>,
    pub timelines: Vec<Timeline>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertificateExpiry>,
}

/// Annotation (KubeadmConfig, Machine) with when a machine's certificates expire.
const ANNOTATION_CERTIFICATES_EXPIRY: &str = "machine.cluster.x-k8s.io/certificates-expiry";
/// Annotation (KubeadmControlPlane) with when the admin kubeconfig's client certificate expires.
const ANNOTATION_KUBECONFIG_EXPIRY: &str = "controlplane.capstan.io/kubeconfig-certificate-expiry";

/// The recorded certificate expiries: the admin kubeconfig's, then each control-plane Machine's.
pub fn certificates(objects: &Objects) -> Vec<CertificateExpiry> {
    let annotation = |object: &Value, key: &str| {
        object["metadata"]["annotations"][key]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    };
    let mut out = Vec::new();
    if let Some(expires) = objects
        .control_plane
        .as_ref()
        .and_then(|cp| annotation(cp, ANNOTATION_KUBECONFIG_EXPIRY))
    {
        out.push(CertificateExpiry {
            object: format!("Secret/{}-kubeconfig", name_of(&objects.cluster)),
            expires,
        });
    }
    let mut machines: Vec<&Value> = objects
        .machines
        .iter()
        .filter(|m| label(m, "cluster.x-k8s.io/control-plane").is_some())
        .collect();
    machines.sort_by_key(|m| name_of(m));
    for machine in machines {
        let config_name = machine["spec"]["bootstrap"]["configRef"]["name"]
            .as_str()
            .map_or_else(|| name_of(machine), str::to_owned);
        let expires = annotation(machine, ANNOTATION_CERTIFICATES_EXPIRY).or_else(|| {
            find(&objects.bootstrap_configs, "", &config_name)
                .and_then(|c| annotation(c, ANNOTATION_CERTIFICATES_EXPIRY))
        });
        if let Some(expires) = expires {
            out.push(CertificateExpiry {
                object: format!("Machine/{}", name_of(machine)),
                expires,
            });
        }
    }
    out
}

/// `in 364d`, `in 5h`, or `expired 3d ago`.
fn until(time: &str, now: jiff::Timestamp) -> String {
    let Ok(then) = time.parse::<jiff::Timestamp>() else {
        return String::new();
    };
    if then < now {
        format!("expired {} ago", since(Some(time), now))
    } else {
        let secs = then.as_second() - now.as_second();
        let left = match secs {
            s if s < 120 => format!("{s}s"),
            s if s < 2 * 3600 => format!("{}m", s / 60),
            s if s < 2 * 86_400 => format!("{}h", s / 3600),
            s => format!("{}d", s / 86_400),
        };
        format!("in {left}")
    }
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn kind_of(object: &Value) -> String {
    object["kind"].as_str().unwrap_or_default().to_owned()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn conditions(object: &Value) -> Vec<Value> {
    object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn condition<'a>(list: &'a [Value], type_: &str) -> Option<&'a Value> {
    list.iter().find(|c| c["type"] == type_)
}

/// The severity of a not-ready state: a reason that says work is under way is `Info`.
fn severity_for(status: &str, reason: &str, explicit: &str) -> String {
    if status == "True" || status.is_empty() {
        return String::new();
    }
    if !explicit.is_empty() {
        return explicit.to_owned();
    }
    let progressing = [
        "Waiting",
        "Provisioning",
        "Deleting",
        "Scaling",
        "Registering",
        "Inspecting",
        "Preparing",
        "Pending",
    ]
    .iter()
    .any(|p| reason.starts_with(p))
        || reason.ends_with("InProgress");
    if status == "Unknown" || progressing {
        "Info".to_owned()
    } else {
        "Warning".to_owned()
    }
}

/// A row for `object` from its readiness condition (the first of `types` present).
fn row(display: String, object: &Value, types: &[&str]) -> TreeNode {
    let list = conditions(object);
    let found = types.iter().find_map(|t| condition(&list, t));
    let (ready, reason, message, since, explicit) = match found {
        Some(c) => (
            text(&c["status"]),
            text(&c["reason"]),
            text(&c["message"]),
            c["lastTransitionTime"].as_str().map(str::to_owned),
            text(&c["severity"]),
        ),
        None => Default::default(),
    };
    // An object that reports a failure outright is an error whatever its conditions say.
    let failure = [
        &object["status"]["failureMessage"],
        &object["status"]["errorMessage"],
        &object["status"]["deprecated"]["v1beta1"]["failureMessage"],
    ]
    .into_iter()
    .find_map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned));
    let (ready, severity, message) = match failure {
        Some(failure) => ("False".to_owned(), "Error".to_owned(), failure),
        None => {
            let severity = severity_for(&ready, &reason, &explicit);
            (ready, severity, message)
        }
    };
    TreeNode {
        display,
        kind: kind_of(object),
        name: name_of(object),
        ready,
        severity,
        reason,
        last_transition: since,
        message,
        children: Vec::new(),
    }
}

/// A BareMetalHost's row: ready once provisioned, an error when it reports one.
fn host_row(host: &Value) -> TreeNode {
    let state = text(&host["status"]["provisioning"]["state"]);
    let error = text(&host["status"]["errorMessage"]);
    let error_type = text(&host["status"]["errorType"]);
    let (ready, severity, reason, message) = if !error.is_empty() {
        (
            "False",
            "Error",
            if error_type.is_empty() {
                "Error".to_owned()
            } else {
                error_type
            },
            error,
        )
    } else if state == "provisioned" {
        ("True", "", "Provisioned".to_owned(), String::new())
    } else {
        (
            "False",
            "Info",
            capitalise(&state),
            format!("host is {state}"),
        )
    };
    let since = ["provision", "inspect", "register"]
        .iter()
        .find_map(|op| {
            let metric = &host["status"]["operationHistory"][op];
            non_empty(&metric["end"]).or(non_empty(&metric["start"]))
        })
        .map(str::to_owned);
    TreeNode {
        display: format!("BareMetalHost/{}", name_of(host)),
        kind: "BareMetalHost".into(),
        name: name_of(host),
        ready: ready.into(),
        severity: severity.into(),
        reason,
        last_transition: since,
        message,
        children: Vec::new(),
    }
}

fn non_empty(value: &Value) -> Option<&str> {
    value.as_str().filter(|t| !t.is_empty())
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|f| f.to_uppercase().collect::<String>() + chars.as_str())
        .unwrap_or_default()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| (kind.is_empty() || o["kind"] == kind) && o["metadata"]["name"] == name)
}

/// The host consumed by `infra_machine` (its `consumerRef`).
fn host_of<'a>(hosts: &'a [Value], infra_machine: &Value) -> Option<&'a Value> {
    hosts.iter().find(|h| {
        h["spec"]["consumerRef"]["kind"] == infra_machine["kind"]
            && h["spec"]["consumerRef"]["name"] == infra_machine["metadata"]["name"]
    })
}

/// A Machine with its infrastructure machine and host beneath it.
fn machine_row(objects: &Objects, machine: &Value) -> TreeNode {
    let mut node = row(format!("Machine/{}", name_of(machine)), machine, &["Ready"]);
    let reference = &machine["spec"]["infrastructureRef"];
    if let Some(infra) = find(
        &objects.infra_machines,
        &text(&reference["kind"]),
        &text(&reference["name"]),
    ) {
        let mut infra_node = row(
            format!(
                "MachineInfrastructure - {}/{}",
                kind_of(infra),
                name_of(infra)
            ),
            infra,
            &["Ready"],
        );
        if let Some(host) = host_of(&objects.hosts, infra) {
            infra_node.children.push(host_row(host));
        }
        node.children.push(infra_node);
    }
    node
}

/// Machines under a parent: the ready ones collapsed into one row (as clusterctl groups them), the
/// others each with their infrastructure and host.
fn machine_rows(objects: &Objects, machines: &[&Value]) -> Vec<TreeNode> {
    let rows: Vec<TreeNode> = machines.iter().map(|m| machine_row(objects, m)).collect();
    let all_ready = |n: &TreeNode| {
        n.ready == "True"
            && n.children
                .iter()
                .all(|c| c.ready == "True" && c.children.iter().all(|h| h.ready == "True"))
    };
    let (ready, other): (Vec<TreeNode>, Vec<TreeNode>) = rows.into_iter().partition(all_ready);
    let mut out = Vec::new();
    if ready.len() > 1 {
        let names: Vec<&str> = ready.iter().map(|n| n.name.as_str()).collect();
        out.push(TreeNode {
            display: format!("{} Machines...", ready.len()),
            kind: "Machine".into(),
            name: String::new(),
            ready: "True".into(),
            last_transition: ready.iter().filter_map(|n| n.last_transition.clone()).max(),
            message: format!("See {}", names.join(", ")),
            ..TreeNode::default()
        });
    } else {
        out.extend(ready);
    }
    out.extend(other);
    out
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["labels"][key].as_str()
}

/// The tree of the cluster.
pub fn tree(objects: &Objects) -> TreeNode {
    let cluster = &objects.cluster;
    let mut root = row(
        format!("Cluster/{}", name_of(cluster)),
        cluster,
        &["Available", "Ready"],
    );
    if let Some(infra) = &objects.infrastructure {
        root.children.push(row(
            format!(
                "ClusterInfrastructure - {}/{}",
                kind_of(infra),
                name_of(infra)
            ),
            infra,
            &["Ready"],
        ));
    }
    let is_control_plane = |m: &&Value| label(m, "cluster.x-k8s.io/control-plane").is_some();
    if let Some(cp) = &objects.control_plane {
        let mut node = row(
            format!("ControlPlane - {}/{}", kind_of(cp), name_of(cp)),
            cp,
            &["Available", "Ready"],
        );
        let machines: Vec<&Value> = objects.machines.iter().filter(is_control_plane).collect();
        node.children = machines.iter().map(|m| machine_row(objects, m)).collect();
        root.children.push(node);
    }
    let mut workers = TreeNode {
        display: "Workers".into(),
        ..TreeNode::default()
    };
    for deployment in &objects.machine_deployments {
        let name = name_of(deployment);
        let mut node = row(
            format!("MachineDeployment/{name}"),
            deployment,
            &["Available", "Ready"],
        );
        let machines: Vec<&Value> = objects
            .machines
            .iter()
            .filter(|m| label(m, "cluster.x-k8s.io/deployment-name") == Some(name.as_str()))
            .collect();
        node.children = machine_rows(objects, &machines);
        workers.children.push(node);
    }
    let others: Vec<&Value> = objects
        .machines
        .iter()
        .filter(|m| !is_control_plane(m) && label(m, "cluster.x-k8s.io/deployment-name").is_none())
        .collect();
    workers
        .children
        .extend(others.iter().map(|m| machine_row(objects, m)));
    if !workers.children.is_empty() {
        root.children.push(workers);
    }
    root
}

fn event_target(event: &Value) -> (String, String) {
    let target = if event["regarding"].is_object() {
        &event["regarding"]
    } else {
        &event["involvedObject"]
    };
    (text(&target["kind"]), text(&target["name"]))
}

fn event_time(event: &Value) -> String {
    [
        "lastTimestamp",
        "deprecatedLastTimestamp",
        "eventTime",
        "firstTimestamp",
    ]
    .iter()
    .find_map(|k| event[k].as_str().filter(|s| !s.is_empty()))
    .unwrap_or_default()
    .to_owned()
}

/// The last Warning Event about `kind`/`name`.
fn last_warning(events: &[Value], kind: &str, name: &str) -> Option<EventSummary> {
    events
        .iter()
        .filter(|e| e["type"] == "Warning" && event_target(e) == (kind.to_owned(), name.to_owned()))
        .max_by_key(|e| event_time(e))
        .map(|e| EventSummary {
            time: event_time(e),
            reason: text(&e["reason"]),
            message: e["message"]
                .as_str()
                .or(e["note"].as_str())
                .unwrap_or_default()
                .to_owned(),
        })
}

/// The deepest not-ready objects of the tree, each with the path to it.
pub fn root_causes(tree: &TreeNode, events: &[Value]) -> Vec<RootCause> {
    fn walk(node: &TreeNode, path: &mut Vec<String>, found: &mut Vec<(Vec<String>, TreeNode)>) {
        let failing = !node.ready.is_empty() && node.ready != "True";
        if !node.kind.is_empty() {
            path.push(
                node.display
                    .rsplit(" - ")
                    .next()
                    .unwrap_or(&node.display)
                    .to_owned(),
            );
        }
        let before = found.len();
        for child in &node.children {
            walk(child, path, found);
        }
        if failing && found.len() == before {
            found.push((path.clone(), node.clone()));
        }
        if !node.kind.is_empty() {
            path.pop();
        }
    }
    let mut found = Vec::new();
    walk(tree, &mut Vec::new(), &mut found);
    found
        .into_iter()
        .map(|(path, node)| RootCause {
            path,
            reason: node.reason.clone(),
            error: node.message.clone(),
            last_warning_event: last_warning(events, &node.kind, &node.name),
            hint: None,
        })
        .collect()
}

/// The Metal3 reason of an infrastructure machine that found no host to claim.
const REASON_NO_AVAILABLE_HOST: &str = "NoAvailableHost";

/// A `hostSelector` as the Metal3 provider names it: `matchLabels {a=b} and matchExpressions
/// [k in (x, y)]`.
fn describe_selector(selector: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(labels) = selector["matchLabels"]
        .as_object()
        .filter(|l| !l.is_empty())
    {
        let pairs: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        parts.push(format!("matchLabels {{{}}}", pairs.join(", ")));
    }
    if let Some(expressions) = selector["matchExpressions"]
        .as_array()
        .filter(|e| !e.is_empty())
    {
        let texts: Vec<String> = expressions
            .iter()
            .map(|e| {
                let values: Vec<&str> = e["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if values.is_empty() {
                    format!("{} {}", text(&e["key"]), text(&e["operator"]))
                } else {
                    format!(
                        "{} {} ({})",
                        text(&e["key"]),
                        text(&e["operator"]),
                        values.join(", ")
                    )
                }
            })
            .collect();
        parts.push(format!("matchExpressions [{}]", texts.join("; ")));
    }
    if parts.is_empty() {
        "an empty hostSelector (any host)".to_owned()
    } else {
        parts.join(" and ")
    }
}

fn condition_is_true(object: &Value, type_: &str) -> bool {
    condition(&conditions(object), type_).is_some_and(|c| c["status"] == "True")
}

/// An integer field that may be written as a number or a string (`maxSurge: "1"`).
fn int_field(value: &Value, default: i64) -> i64 {
    value
        .as_i64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(default)
}

/// What to do when the failing object of `cause` is an infrastructure machine that finds no
/// host: who waits for it (the KubeadmControlPlane's or MachineDeployment's rollout, or a scale-up)
/// and what lets it go on. Only what capstan does is offered: `maxSurge: 0` replaces
/// control-plane Machines in place only with 3 or more replicas (fewer lose etcd quorum, so the
/// KubeadmControlPlane refuses it, as upstream's does).
fn host_hint(objects: &Objects, cause: &RootCause) -> Option<String> {
    if cause.reason != REASON_NO_AVAILABLE_HOST {
        return None;
    }
    let infra_name = cause.path.last()?.split_once('/')?.1;
    let machine_name = cause
        .path
        .iter()
        .rev()
        .find_map(|p| p.strip_prefix("Machine/"))?;
    let machine = find(&objects.machines, "", machine_name)?;
    let infra = find(&objects.infra_machines, "", infra_name)?;
    let selector = describe_selector(&infra["spec"]["hostSelector"]);
    let namespace = text(&machine["metadata"]["namespace"]);
    let place = if namespace.is_empty() {
        String::new()
    } else {
        format!(" in namespace {namespace}")
    };
    let add = format!(
        "add a BareMetalHost matching {selector}{place} (it is claimed once available), or free one"
    );
    if label(machine, "cluster.x-k8s.io/control-plane").is_some()
        && let Some(cp) = &objects.control_plane
    {
        let owner = format!("{}/{}", kind_of(cp), name_of(cp));
        if !condition_is_true(cp, "RollingOut") {
            return Some(format!(
                "{owner} waits for a host for Machine/{machine_name}: {add}"
            ));
        }
        let replicas = int_field(&cp["spec"]["replicas"], 1);
        let surge = int_field(
            &cp["spec"]["rollout"]["strategy"]["rollingUpdate"]["maxSurge"],
            1,
        );
        let in_place = if replicas >= 3 {
            "; or set spec.rollout.strategy.rollingUpdate.maxSurge (v1beta1: \
             spec.rolloutStrategy.rollingUpdate.maxSurge) to 0 to replace Machines in place, one \
             at a time, without a spare host"
                .to_owned()
        } else {
            format!(
                "; replacing in place (maxSurge 0) needs 3 or more replicas, since removing a \
                 Machine first would lose etcd quorum, so with {replicas} the rollout needs the \
                 host"
            )
        };
        return Some(format!(
            "{owner}'s rollout waits for a host for Machine/{machine_name}: with maxSurge \
             {surge} it adds a Machine before it removes an outdated one, and no matching host is \
             free. {}{in_place}",
            capitalise(&add)
        ));
    }
    if let Some(deployment) = label(machine, "cluster.x-k8s.io/deployment-name")
        .and_then(|d| find(&objects.machine_deployments, "", d))
        && condition_is_true(deployment, "RollingOut")
    {
        return Some(format!(
            "MachineDeployment/{}'s rollout waits for a host for Machine/{machine_name}: {add}; or \
             set spec.rollout.strategy.rollingUpdate maxSurge 0 and maxUnavailable 1 (v1beta1: \
             spec.strategy.rollingUpdate) to replace Machines in place, one at a time",
            name_of(deployment)
        ));
    }
    Some(format!("Machine/{machine_name} waits for a host: {add}"))
}

/// Each Machine's steps: host operations, bootstrap conditions, Node Ready.
pub fn timelines(objects: &Objects) -> Vec<Timeline> {
    let mut out = Vec::new();
    for machine in &objects.machines {
        let mut entries = Vec::new();
        let reference = &machine["spec"]["infrastructureRef"];
        if let Some(host) = find(
            &objects.infra_machines,
            &text(&reference["kind"]),
            &text(&reference["name"]),
        )
        .and_then(|infra| host_of(&objects.hosts, infra))
        {
            let host_name = name_of(host);
            for op in ["register", "inspect", "provision", "deprovision"] {
                let metric = &host["status"]["operationHistory"][op];
                for (edge, verb) in [("start", "started"), ("end", "finished")] {
                    if let Some(time) = metric[edge].as_str().filter(|t| !t.is_empty()) {
                        entries.push(TimelineEntry {
                            time: time.to_owned(),
                            stage: "host".into(),
                            what: format!("BareMetalHost/{host_name} {op} {verb}"),
                        });
                    }
                }
            }
        }
        let bootstrap = &machine["spec"]["bootstrap"]["configRef"];
        if let Some(config) = find(
            &objects.bootstrap_configs,
            &text(&bootstrap["kind"]),
            &text(&bootstrap["name"]),
        ) {
            for c in conditions(config) {
                let Some(time) = c["lastTransitionTime"].as_str() else {
                    continue;
                };
                let mut what = format!(
                    "{}/{} {}={}",
                    kind_of(config),
                    name_of(config),
                    text(&c["type"]),
                    text(&c["status"])
                );
                for key in ["reason", "message"] {
                    let value = text(&c[key]);
                    if !value.is_empty() {
                        what.push_str(&format!(" {value}"));
                    }
                }
                entries.push(TimelineEntry {
                    time: time.to_owned(),
                    stage: "bootstrap".into(),
                    what,
                });
            }
        }
        let machine_conditions = conditions(machine);
        for type_ in ["NodeReady", "NodeHealthy"] {
            if let Some(c) = condition(&machine_conditions, type_)
                && c["status"] == "True"
                && let Some(time) = c["lastTransitionTime"].as_str()
            {
                let node = text(&machine["status"]["nodeRef"]["name"]);
                entries.push(TimelineEntry {
                    time: time.to_owned(),
                    stage: "node".into(),
                    what: format!("Node/{node} Ready"),
                });
                break;
            }
        }
        entries.sort();
        out.push(Timeline {
            machine: name_of(machine),
            entries,
        });
    }
    out
}

/// The whole description.
pub fn build(objects: &Objects) -> Description {
    let tree = tree(objects);
    // Of anything not ready, the Cluster included: a rollout that waits leaves the Cluster
    // available, and its cause is below it.
    let mut root_causes = root_causes(&tree, &objects.events);
    for cause in &mut root_causes {
        cause.hint = host_hint(objects, cause);
    }
    Description {
        tree,
        root_causes,
        timelines: timelines(objects),
        certificates: certificates(objects),
    }
}

/// `5s`, `3m`, `2h`, `4d`: how long ago `time` was at `now`.
pub fn since(time: Option<&str>, now: jiff::Timestamp) -> String {
    let Some(then) = time.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return String::new();
    };
    let secs = now.as_second().saturating_sub(then.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// The text rendering: the tree table, root causes and timelines.
pub fn render_text(description: &Description, now: jiff::Timestamp, style: &Style) -> String {
    let mut rows: Vec<[String; 6]> = Vec::new();
    fn flatten(
        node: &TreeNode,
        prefix: &str,
        last: bool,
        top: bool,
        now: jiff::Timestamp,
        rows: &mut Vec<[String; 6]>,
    ) {
        let branch = if top {
            String::new()
        } else if last {
            format!("{prefix}└─")
        } else {
            format!("{prefix}├─")
        };
        rows.push([
            format!("{branch}{}", node.display),
            node.ready.clone(),
            node.severity.clone(),
            node.reason.clone(),
            since(node.last_transition.as_deref(), now),
            node.message.lines().next().unwrap_or_default().to_owned(),
        ]);
        let child_prefix = if top {
            String::new()
        } else if last {
            format!("{prefix}  ")
        } else {
            format!("{prefix}│ ")
        };
        for (i, child) in node.children.iter().enumerate() {
            flatten(
                child,
                &child_prefix,
                i + 1 == node.children.len(),
                false,
                now,
                rows,
            );
        }
    }
    flatten(&description.tree, "", true, true, now, &mut rows);
    // ★ marks each root cause in the tree.
    for cause in &description.root_causes {
        let Some(target) = cause.path.last() else {
            continue;
        };
        for row in &mut rows {
            let name = &row[0];
            let is_target = name
                .strip_suffix(target.as_str())
                .is_some_and(|head| head.is_empty() || head.ends_with(['─', ' ']));
            if is_target && !row[5].starts_with('★') {
                row[5] = format!("★ {}", row[5]).trim_end().to_owned();
            }
        }
    }
    let header = ["NAME", "READY", "SEVERITY", "REASON", "SINCE", "MESSAGE"].map(str::to_owned);
    let widths: Vec<usize> = (0..5)
        .map(|i| {
            rows.iter()
                .chain([&header])
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (n, r) in std::iter::once(&header).chain(rows.iter()).enumerate() {
        let mut line = String::new();
        for (i, width) in widths.iter().enumerate() {
            let cell = &r[i];
            let pad = " ".repeat(width - cell.chars().count() + 2);
            let shown = match (n, i, cell.as_str(), r[2].as_str()) {
                (0, ..) => cell.clone(),
                (_, 1, "True", _) => style.ok(cell),
                (_, 1 | 2, "False" | "Error" | "Warning", "Error") => style.error(cell),
                (_, 1 | 2, "False" | "Warning", _) => style.warning(cell),
                _ => cell.clone(),
            };
            line.push_str(&shown);
            line.push_str(&pad);
        }
        line.push_str(&r[5]);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if !description.root_causes.is_empty() {
        out.push_str(&format!("\n{}\n", style.error("★ Root cause")));
        for cause in &description.root_causes {
            out.push_str(&format!("  {}\n", cause.path.join(" → ")));
            if !cause.reason.is_empty() || !cause.error.is_empty() {
                out.push_str(&format!("    {}: {}\n", cause.reason, cause.error));
            }
            if let Some(event) = &cause.last_warning_event {
                out.push_str(&format!(
                    "    last Warning Event {} {}: {}\n",
                    event.time, event.reason, event.message
                ));
            }
            if let Some(hint) = &cause.hint {
                out.push_str(&format!("    → {hint}\n"));
            }
        }
    }
    let timelines: Vec<&Timeline> = description
        .timelines
        .iter()
        .filter(|t| !t.entries.is_empty())
        .collect();
    if !timelines.is_empty() {
        out.push_str("\n★ Machine timelines\n");
        for timeline in timelines {
            out.push_str(&format!("  Machine/{}\n", timeline.machine));
            for entry in &timeline.entries {
                out.push_str(&format!(
                    "    {:<20}  {:<9}  {}\n",
                    entry.time, entry.stage, entry.what
                ));
            }
        }
    }
    if !description.certificates.is_empty() {
        out.push_str("\nCertificates\n");
        let width = description
            .certificates
            .iter()
            .map(|c| c.object.len())
            .max()
            .unwrap_or(0);
        for certificate in &description.certificates {
            out.push_str(&format!(
                "  {:<width$}  expires {}  ({})\n",
                certificate.object,
                certificate.expires,
                until(&certificate.expires, now)
            ));
        }
    }
    out
}

/// Reads the objects of cluster `name` in `namespace`.
pub async fn fetch(client: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<Objects> {
    let cluster = get_json(
        client,
        &format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}/clusters/{name}"),
        None,
    )
    .await?;
    // Kinds a cluster may not have (or a server may not serve) read as empty.
    let list = |path: String| async move {
        get_json(client, &path, None)
            .await
            .map(|v| v["items"].as_array().cloned().unwrap_or_default())
            .unwrap_or_default()
    };
    let by_reference = |reference: Value| async move {
        let kind = reference["kind"].as_str()?.to_owned();
        let ref_name = reference["name"].as_str()?.to_owned();
        let resource = client::resolve(client, &kind).await.ok()?;
        get_json(
            client,
            &resource.path(Some(namespace), Some(&ref_name)),
            None,
        )
        .await
        .ok()
    };
    let infrastructure = by_reference(cluster["spec"]["infrastructureRef"].clone()).await;
    let control_plane = by_reference(cluster["spec"]["controlPlaneRef"].clone()).await;
    // By `spec.clusterName` rather than the label: objects made by hand may lack the label.
    let of_cluster = |items: Vec<Value>| -> Vec<Value> {
        items
            .into_iter()
            .filter(|o| o["spec"]["clusterName"] == name)
            .collect()
    };
    let capi =
        |plural: &str| format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}/{plural}");
    let machines = of_cluster(list(capi("machines")).await);
    let machine_deployments = of_cluster(list(capi("machinedeployments")).await);
    let mut infra_machines = Vec::new();
    let mut kinds: Vec<String> = machines
        .iter()
        .filter_map(|m| {
            m["spec"]["infrastructureRef"]["kind"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    for kind in kinds {
        if let Ok(resource) = client::resolve(client, &kind).await {
            // Matched by name from the Machines' references: a provider may not label them.
            infra_machines.extend(list(resource.path(Some(namespace), None)).await);
        }
    }
    let hosts = list(format!(
        "/apis/metal3.io/v1alpha1/namespaces/{namespace}/baremetalhosts"
    ))
    .await;
    let bootstrap_configs = list(format!(
        "/apis/bootstrap.cluster.x-k8s.io/v1beta2/namespaces/{namespace}/kubeadmconfigs"
    ))
    .await;
    let events = list(format!("/api/v1/namespaces/{namespace}/events")).await;
    Ok(Objects {
        cluster,
        infrastructure,
        control_plane,
        machine_deployments,
        machines,
        infra_machines,
        hosts,
        bootstrap_configs,
        events,
    })
}

/// Runs `capstan describe cluster NAME`.
pub fn run(
    name: &str,
    namespace: &str,
    output: Option<&str>,
    connect: &client::ConnectArgs,
    style: &Style,
) -> anyhow::Result<Exit> {
    connect.run(|client| async move {
        let objects = fetch(&client, namespace, name).await?;
        let description = build(&objects);
        match output {
            Some("json") => outln!("{}", serde_json::to_string_pretty(&description)?),
            Some("yaml") => out!(
                "{}",
                capstan_manifest::to_yaml(&serde_json::to_value(&description)?)
            ),
            Some(other) => anyhow::bail!("-o {other}: use json or yaml (or nothing for the tree)"),
            None => out!(
                "{}",
                render_text(&description, jiff::Timestamp::now(), style)
            ),
        }
        Ok(Exit::Ok)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-01-01T01:00:00Z";

    fn cond(type_: &str, status: &str, reason: &str, message: &str, time: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": time})
    }

    fn machine(name: &str, labels: Value, ready: &str, host_kind_name: &str) -> Value {
        json!({
            "kind": "Machine",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "infrastructureRef": {"kind": "Metal3Machine", "name": host_kind_name},
                "bootstrap": {"configRef": {"kind": "KubeadmConfig", "name": name}},
            },
            "status": {"nodeRef": {"name": name}, "conditions": [
                cond("Ready", ready, if ready == "True" { "Ready" } else { "NotReady" }, "", "2026-01-01T00:30:00Z"),
                cond("NodeReady", ready, "", "", "2026-01-01T00:30:00Z"),
            ]},
        })
    }

    fn infra(name: &str, ready: &str) -> Value {
        json!({"kind": "Metal3Machine", "metadata": {"name": name}, "status": {"conditions": [cond("Ready", ready, "", "", "2026-01-01T00:20:00Z")]}})
    }

    fn host(name: &str, consumer: &str, state: &str, error: &str) -> Value {
        json!({
            "kind": "BareMetalHost",
            "metadata": {"name": name},
            "spec": {"consumerRef": {"kind": "Metal3Machine", "name": consumer}},
            "status": {
                "provisioning": {"state": state},
                "errorMessage": error,
                "errorType": if error.is_empty() { "" } else { "provisioning error" },
                "operationHistory": {
                    "register": {"start": "2026-01-01T00:01:00Z", "end": "2026-01-01T00:02:00Z"},
                    "provision": {"start": "2026-01-01T00:05:00Z", "end": ""},
                },
            },
        })
    }

    fn objects() -> Objects {
        let cp =
            json!({"cluster.x-k8s.io/control-plane": "", "cluster.x-k8s.io/cluster-name": "c"});
        let md = json!({"cluster.x-k8s.io/deployment-name": "c-md", "cluster.x-k8s.io/cluster-name": "c"});
        Objects {
            cluster: json!({"kind": "Cluster", "metadata": {"name": "c"}, "status": {"conditions": [
                cond("Available", "False", "NotAvailable", "* Workers: 1 Machine not ready", "2026-01-01T00:10:00Z"),
            ]}}),
            infrastructure: Some(
                json!({"kind": "Metal3Cluster", "metadata": {"name": "c"}, "status": {"conditions": [cond("Ready", "True", "", "", "2026-01-01T00:00:30Z")]}}),
            ),
            control_plane: Some(
                json!({"kind": "KubeadmControlPlane", "metadata": {"name": "c"}, "status": {"conditions": [cond("Available", "True", "", "", "2026-01-01T00:40:00Z")]}}),
            ),
            machine_deployments: vec![
                json!({"kind": "MachineDeployment", "metadata": {"name": "c-md"}, "status": {"conditions": [
                    cond("Available", "False", "WaitingForAvailableMachines", "1 of 3 not ready", "2026-01-01T00:50:00Z"),
                ]}}),
            ],
            machines: vec![
                machine("c-cp-1", cp, "True", "m-cp-1"),
                machine("c-md-1", md.clone(), "True", "m-md-1"),
                machine("c-md-2", md.clone(), "True", "m-md-2"),
                machine("c-md-3", md, "False", "m-md-3"),
            ],
            infra_machines: vec![
                infra("m-cp-1", "True"),
                infra("m-md-1", "True"),
                infra("m-md-2", "True"),
                infra("m-md-3", "False"),
            ],
            hosts: vec![
                host("h0", "m-cp-1", "provisioned", ""),
                host("h1", "m-md-1", "provisioned", ""),
                host("h2", "m-md-2", "provisioned", ""),
                host("h3", "m-md-3", "provisioning", "image checksum mismatch"),
            ],
            bootstrap_configs: vec![
                json!({"kind": "KubeadmConfig", "metadata": {"name": "c-cp-1"}, "status": {"conditions": [
                    cond("DataSecretAvailable", "True", "", "", "2026-01-01T00:03:00Z"),
                ]}}),
            ],
            events: vec![
                json!({"type": "Warning", "reason": "ProvisioningError", "message": "old", "involvedObject": {"kind": "BareMetalHost", "name": "h3"}, "lastTimestamp": "2026-01-01T00:06:00Z"}),
                json!({"type": "Warning", "reason": "ProvisioningError", "note": "image checksum mismatch", "regarding": {"kind": "BareMetalHost", "name": "h3"}, "eventTime": "2026-01-01T00:07:00Z"}),
                json!({"type": "Normal", "reason": "Registered", "message": "x", "involvedObject": {"kind": "BareMetalHost", "name": "h3"}, "lastTimestamp": "2026-01-01T00:09:00Z"}),
            ],
        }
    }

    #[test]
    fn tree_groups_ready_workers_and_shows_the_failing_chain() {
        let now: jiff::Timestamp = NOW.parse().unwrap();
        let text = render_text(&build(&objects()), now, &Style { color: false });
        let expected = "\
NAME                                                  READY  SEVERITY  REASON                       SINCE  MESSAGE
Cluster/c                                             False  Warning   NotAvailable                 50m    * Workers: 1 Machine not ready
├─ClusterInfrastructure - Metal3Cluster/c             True                                          59m
├─ControlPlane - KubeadmControlPlane/c                True                                          20m
│ └─Machine/c-cp-1                                    True             Ready                        30m
│   └─MachineInfrastructure - Metal3Machine/m-cp-1    True                                          40m
│     └─BareMetalHost/h0                              True             Provisioned                  55m
└─Workers
  └─MachineDeployment/c-md                            False  Info      WaitingForAvailableMachines  10m    1 of 3 not ready
    ├─2 Machines...                                   True                                          30m    See c-md-1, c-md-2
    └─Machine/c-md-3                                  False  Warning   NotReady                     30m
      └─MachineInfrastructure - Metal3Machine/m-md-3  False  Warning                                40m
        └─BareMetalHost/h3                            False  Error     provisioning error           55m    ★ image checksum mismatch

★ Root cause
  Cluster/c → MachineDeployment/c-md → Machine/c-md-3 → Metal3Machine/m-md-3 → BareMetalHost/h3
    provisioning error: image checksum mismatch
    last Warning Event 2026-01-01T00:07:00Z ProvisioningError: image checksum mismatch

★ Machine timelines
";
        assert!(text.starts_with(expected), "{text}");
        // No colour codes without colour.
        assert!(!text.contains('\x1b'));
        let coloured = render_text(&build(&objects()), now, &Style { color: true });
        assert!(coloured.contains("\x1b[1;31mError\x1b[0m"));
    }

    #[test]
    fn root_cause_is_the_deepest_failing_object_with_its_last_warning() {
        let description = build(&objects());
        assert_eq!(description.root_causes.len(), 1);
        let cause = &description.root_causes[0];
        assert_eq!(
            cause.path.last().map(String::as_str),
            Some("BareMetalHost/h3")
        );
        assert_eq!(cause.error, "image checksum mismatch");
        let event = cause.last_warning_event.clone().unwrap();
        assert_eq!(
            (event.time.as_str(), event.message.as_str()),
            ("2026-01-01T00:07:00Z", "image checksum mismatch")
        );
    }

    #[test]
    fn timeline_orders_host_bootstrap_and_node_steps() {
        let description = build(&objects());
        let cp = description
            .timelines
            .iter()
            .find(|t| t.machine == "c-cp-1")
            .unwrap();
        let steps: Vec<(&str, &str)> = cp
            .entries
            .iter()
            .map(|e| (e.stage.as_str(), e.what.as_str()))
            .collect();
        assert_eq!(
            steps,
            [
                ("host", "BareMetalHost/h0 register started"),
                ("host", "BareMetalHost/h0 register finished"),
                ("bootstrap", "KubeadmConfig/c-cp-1 DataSecretAvailable=True"),
                ("host", "BareMetalHost/h0 provision started"),
                ("node", "Node/c-cp-1 Ready"),
            ]
        );
    }

    #[test]
    fn all_green_has_no_root_cause_and_serialises() {
        let mut objects = objects();
        objects.cluster["status"]["conditions"] = json!([cond(
            "Available",
            "True",
            "Available",
            "",
            "2026-01-01T00:59:00Z"
        )]);
        objects.machine_deployments[0]["status"]["conditions"] =
            json!([cond("Available", "True", "", "", "2026-01-01T00:59:00Z")]);
        let md = json!({"cluster.x-k8s.io/deployment-name": "c-md", "cluster.x-k8s.io/cluster-name": "c"});
        objects.machines[3] = machine("c-md-3", md, "True", "m-md-3");
        objects.infra_machines[3] = infra("m-md-3", "True");
        objects.hosts[3] = host("h3", "m-md-3", "provisioned", "");
        let description = build(&objects);
        assert!(
            description.root_causes.is_empty(),
            "{:?}",
            description.root_causes
        );
        let json = serde_json::to_value(&description).unwrap();
        assert_eq!(json["tree"]["display"], "Cluster/c");
        assert!(json.get("rootCauses").is_none());
    }

    /// capi-1 cut to one control-plane replica on its only host, asked for a new version: the
    /// surge Machine's Metal3Machine finds no host while the Cluster stays available.
    fn rollout_waiting_for_a_host(replicas: i64) -> Objects {
        let cp =
            json!({"cluster.x-k8s.io/control-plane": "", "cluster.x-k8s.io/cluster-name": "c"});
        let no_host = "no available BareMetalHost matches matchLabels {role=cp} (1 BareMetalHost in namespace default, 1 matching: 0 available, 1 claimed): add a BareMetalHost matching it or free one (delete a Machine, or wait for one to finish deprovisioning), or change spec.hostSelector";
        let mut waiting = machine("c-cp-2", cp.clone(), "False", "m-cp-2");
        waiting["metadata"]["namespace"] = json!("default");
        waiting["status"] = json!({"conditions": [
            cond("Ready", "False", "NotReady", "", "2026-01-01T00:58:00Z"),
        ]});
        let mut m3m = infra("m-cp-2", "False");
        m3m["status"]["conditions"] = json!([
            cond(
                "Ready",
                "False",
                "NoAvailableHost",
                no_host,
                "2026-01-01T00:58:00Z"
            ),
            cond(
                "AssociateBareMetalHost",
                "False",
                "AssociateBareMetalHostFailed",
                no_host,
                "2026-01-01T00:58:00Z"
            ),
        ]);
        m3m["spec"]["hostSelector"] = json!({"matchLabels": {"role": "cp"}});
        Objects {
            cluster: json!({"kind": "Cluster", "metadata": {"name": "c"}, "status": {"conditions": [
                cond("Available", "True", "Available", "", "2026-01-01T00:10:00Z"),
            ]}}),
            control_plane: Some(json!({
                "kind": "KubeadmControlPlane", "metadata": {"name": "c-cp"},
                "spec": {"replicas": replicas, "version": "v1.32.1"},
                "status": {"conditions": [
                    cond("Available", "True", "Available", "", "2026-01-01T00:40:00Z"),
                    cond("RollingOut", "True", "RollingOut", "1 of 2 Machines are not up to date", "2026-01-01T00:58:00Z"),
                ]},
            })),
            machines: vec![machine("c-cp-1", cp, "True", "m-cp-1"), waiting],
            infra_machines: vec![infra("m-cp-1", "True"), m3m],
            hosts: vec![host("h0", "m-cp-1", "provisioned", "")],
            events: vec![
                json!({"type": "Warning", "reason": "NoAvailableHost", "message": no_host, "involvedObject": {"kind": "Metal3Machine", "name": "m-cp-2"}, "lastTimestamp": "2026-01-01T00:58:00Z"}),
            ],
            ..Objects::default()
        }
    }

    #[test]
    fn a_rollout_waiting_for_a_host_is_a_root_cause_though_the_cluster_is_available() {
        let description = build(&rollout_waiting_for_a_host(1));
        assert_eq!(description.tree.ready, "True");
        assert_eq!(
            description.root_causes.len(),
            1,
            "{:?}",
            description.root_causes
        );
        let cause = &description.root_causes[0];
        assert_eq!(
            cause.path,
            [
                "Cluster/c",
                "KubeadmControlPlane/c-cp",
                "Machine/c-cp-2",
                "Metal3Machine/m-cp-2"
            ]
        );
        assert_eq!(cause.reason, "NoAvailableHost");
        assert_eq!(
            cause.hint.as_deref(),
            Some(
                "KubeadmControlPlane/c-cp's rollout waits for a host for Machine/c-cp-2: with \
                 maxSurge 1 it adds a Machine before it removes an outdated one, and no matching \
                 host is free. Add a BareMetalHost matching matchLabels {role=cp} in namespace \
                 default (it is claimed once available), or free one; replacing in place \
                 (maxSurge 0) needs 3 or more replicas, since removing a Machine first would lose \
                 etcd quorum, so with 1 the rollout needs the host"
            )
        );
        let text = render_text(&description, NOW.parse().unwrap(), &Style { color: false });
        assert!(text.contains("★ Root cause"), "{text}");
        assert!(
            text.contains("    → KubeadmControlPlane/c-cp's rollout waits for a host"),
            "{text}"
        );
        let json = serde_json::to_value(&description).unwrap();
        assert!(json["rootCauses"][0]["hint"].is_string(), "{json}");
    }

    #[test]
    fn with_three_replicas_the_hint_offers_max_surge_zero() {
        let description = build(&rollout_waiting_for_a_host(3));
        let hint = description.root_causes[0].hint.clone().unwrap_or_default();
        assert!(
            hint.contains("or set spec.rollout.strategy.rollingUpdate.maxSurge (v1beta1: spec.rolloutStrategy.rollingUpdate.maxSurge) to 0"),
            "{hint}"
        );
        assert!(!hint.contains("needs 3 or more replicas"), "{hint}");
        // Not a rollout: a scale-up waits for the host the same way, without the strategy.
        let mut objects = rollout_waiting_for_a_host(3);
        if let Some(cp) = objects.control_plane.as_mut() {
            cp["status"]["conditions"][1]["status"] = json!("False");
        }
        let hint = build(&objects).root_causes[0]
            .hint
            .clone()
            .unwrap_or_default();
        assert!(
            hint.starts_with("KubeadmControlPlane/c-cp waits for a host for Machine/c-cp-2: add a BareMetalHost matching matchLabels {role=cp}"),
            "{hint}"
        );
        assert!(!hint.contains("maxSurge"), "{hint}");
    }

    #[test]
    fn certificate_expiries_are_shown_with_the_machine_override_first() {
        let mut objects = objects();
        let cp_names: Vec<String> = objects
            .machines
            .iter()
            .filter(|m| label(m, "cluster.x-k8s.io/control-plane").is_some())
            .map(name_of)
            .collect();
        assert!(!cp_names.is_empty());
        objects.control_plane.as_mut().unwrap()["metadata"]["annotations"] =
            json!({ANNOTATION_KUBECONFIG_EXPIRY: "2026-06-30T00:00:00Z"});
        objects.bootstrap_configs = cp_names
            .iter()
            .map(|n| json!({"metadata": {"name": n, "annotations": {ANNOTATION_CERTIFICATES_EXPIRY: "2027-01-01T00:00:00Z"}}}))
            .collect();
        let overridden = objects
            .machines
            .iter_mut()
            .find(|m| name_of(m) == cp_names[0])
            .unwrap();
        overridden["metadata"]["annotations"] =
            json!({ANNOTATION_CERTIFICATES_EXPIRY: "2025-12-31T00:00:00Z"});
        let description = build(&objects);
        assert_eq!(description.certificates[0].object, "Secret/c-kubeconfig");
        assert_eq!(
            description.certificates[1],
            CertificateExpiry {
                object: format!("Machine/{}", cp_names[0]),
                expires: "2025-12-31T00:00:00Z".into(),
            }
        );
        assert_eq!(description.certificates.len(), 1 + cp_names.len());
        let text = render_text(&description, NOW.parse().unwrap(), &Style { color: false });
        assert!(text.contains("Certificates\n"), "{text}");
        assert!(
            text.contains("expires 2026-06-30T00:00:00Z  (in 179d)"),
            "{text}"
        );
        assert!(text.contains("(expired 25h ago)"), "{text}");
    }

    #[test]
    fn since_is_compact() {
        let now: jiff::Timestamp = NOW.parse().unwrap();
        assert_eq!(since(Some("2026-01-01T00:59:30Z"), now), "30s");
        assert_eq!(since(Some("2026-01-01T00:00:00Z"), now), "60m");
        assert_eq!(since(Some("2025-12-31T00:00:00Z"), now), "25h");
        assert_eq!(since(Some("2025-12-01T00:00:00Z"), now), "31d");
        assert_eq!(since(None, now), "");
    }
}
