//! The control plane's Machines as a pass sees them, and what each is made from.
//!
//! Owns listing the Machines (labels `cluster.x-k8s.io/cluster-name`,
//! `cluster.x-k8s.io/control-plane`, `cluster.x-k8s.io/control-plane-name`), judging each one
//! (ready, up to date, being deleted, handed over for remediation) into a [`Member`], and making sure
//! each Machine without a Node has its KubeadmConfig and infra machine (same name, owned by the
//! Machine). The Machine is created first, so a restart between the creates only leaves work the
//! next pass finishes here. It runs after the kubeconfig (nothing here needs the workload cluster)
//! and before every decision, which all read the members; an unusable machine template found here
//! refuses the pass before the Machines are looked at.

use super::{
    ANNOTATION_ROLE, ControlPlaneError, Decision, LABEL_CONTROL_PLANE_NAME, Pass, Refusal, Step,
    api_error, remediation, rollout,
};
use capstan_model::capi::v1beta2::Machine;
use capstan_model::meta::{
    Condition, ContractVersionedObjectReference, LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE,
};
use capstan_runtime::conditions::{self, TRUE};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// One Machine as the decision sees it.
#[derive(Clone, Debug)]
pub(super) struct Member {
    pub(super) machine: Machine,
    pub(super) ready: bool,
    pub(super) up_to_date: bool,
    pub(super) deleting: bool,
    /// A MachineHealthCheck asked the owner to remediate it (`OwnerRemediated` False).
    pub(super) unhealthy: bool,
    /// Its certificates expire within `rollout.before.certificatesExpiryDays`.
    pub(super) certificates_expiring: bool,
}

impl Member {
    pub(super) fn name(&self) -> String {
        self.machine.name_any()
    }

    /// The name of its Node, once it has one.
    pub(super) fn node(&self) -> Option<String> {
        self.machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .and_then(|n| n.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

/// The name of the oldest of `candidates` (by creation, then name, so the choice is stable).
pub(super) fn oldest<'a>(candidates: impl IntoIterator<Item = &'a Member>) -> Option<String> {
    candidates
        .into_iter()
        .min_by_key(|m| {
            (
                m.machine.metadata.creation_timestamp.clone().map(|t| t.0),
                m.name(),
            )
        })
        .map(Member::name)
}

/// The conditions that say why a Machine is not ready, in the order it needs them.
const MACHINE_PREREQUISITES: [&str; 3] =
    ["BootstrapConfigReady", "InfrastructureReady", "NodeReady"];

/// Why `machine` is not ready, from its own conditions: the first of
/// [`MACHINE_PREREQUISITES`] that is not True, as `TYPE REASON: MESSAGE` (its message carries
/// the bootstrap config's or infrastructure machine's reason, e.g. a Metal3Machine's
/// `NoAvailableHost` and which hosts exist), else its `Ready` reason.
pub(super) fn not_ready_because(machine: &Machine) -> Option<String> {
    let conditions = machine.status.as_ref().map(|s| s.conditions.as_slice())?;
    let describe = |c: &Condition| {
        let mut text = c.type_.clone();
        if let Some(reason) = c.reason.as_deref().filter(|r| !r.is_empty()) {
            text.push(' ');
            text.push_str(reason);
        }
        if let Some(message) = c.message.as_deref().filter(|m| !m.is_empty()) {
            text.push_str(": ");
            text.push_str(message);
        }
        text
    };
    MACHINE_PREREQUISITES
        .iter()
        .filter_map(|t| conditions::get(conditions, t))
        .find(|c| c.status != TRUE)
        .or_else(|| conditions::get(conditions, "Ready").filter(|c| c.status != TRUE))
        .map(describe)
}

/// `value` with every object's keys sorted, so its hash does not depend on key order.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect::<Map<_, _>>(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The hash of what Machines are made from besides the version: the kubeadm config spec and the
/// machine template.
pub fn spec_hash(spec: &Value) -> String {
    let relevant = json!({
        "kubeadmConfigSpec": spec.get("kubeadmConfigSpec"),
        "infrastructureRef": spec.pointer("/machineTemplate/spec/infrastructureRef"),
        "metadata": spec.pointer("/machineTemplate/metadata"),
    });
    let digest = Sha256::digest(canonical(&relevant).to_string().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The kubeadm config spec of a new Machine: init (ClusterConfiguration + InitConfiguration) for the
/// first, join with `controlPlane` for the others.
pub fn machine_config_spec(kcp_spec: &Value, init: bool) -> Value {
    let mut spec = kcp_spec
        .get("kubeadmConfigSpec")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Value::Object(map) = &mut spec {
        if init {
            map.remove("joinConfiguration");
        } else {
            map.remove("initConfiguration");
            map.remove("clusterConfiguration");
            let join = map.entry("joinConfiguration").or_insert_with(|| json!({}));
            if let Value::Object(join) = join {
                join.entry("controlPlane").or_insert_with(|| json!({}));
            }
        }
    }
    spec
}

/// The label selector of the control plane `kcp_name`'s Machines in cluster `cluster_name`.
pub(super) fn selector(cluster_name: &str, kcp_name: &str) -> String {
    format!(
        "{LABEL_CLUSTER_NAME}={cluster_name},{LABEL_CONTROL_PLANE},{LABEL_CONTROL_PLANE_NAME}={kcp_name}"
    )
}

/// The control plane's Machines, each judged against the spec.
pub(super) async fn list(
    pass: &Pass<'_>,
    selector: &str,
) -> Result<Vec<Member>, ControlPlaneError> {
    let machines: Api<Machine> = Api::namespaced(pass.client().clone(), &pass.namespace);
    let listed = machines
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(api_error("listing", "Machine", &pass.namespace, ""))?
        .items;
    let hash = spec_hash(&pass.spec);
    let rollout_after = rollout::after(&pass.spec, jiff::Timestamp::now());
    Ok(listed
        .into_iter()
        .map(|machine| Member {
            ready: machine
                .status
                .as_ref()
                .and_then(|s| s.node_ref.as_ref())
                .is_some(),
            up_to_date: rollout::is_up_to_date(
                &machine,
                &pass.kcp.spec.version,
                &hash,
                rollout_after,
            ),
            deleting: machine.metadata.deletion_timestamp.is_some(),
            unhealthy: remediation::owner_remediates(&machine),
            certificates_expiring: false,
            machine,
        })
        .collect())
}

/// Gives each Machine without a Node the KubeadmConfig and infra machine it lacks (a Machine with a
/// Node had both). Returns what makes the machine template unusable, when something does.
pub(super) async fn complete(
    pass: &Pass<'_>,
    members: &[Member],
) -> Result<Option<Refusal>, ControlPlaneError> {
    let mut problem = None;
    for member in members.iter().filter(|m| !m.deleting && !m.ready) {
        if let Completion::InvalidTemplate(message) =
            complete_machine(pass, &member.machine).await?
        {
            problem = Some(Refusal {
                reason: "InvalidMachineTemplate",
                message,
            });
        }
    }
    Ok(problem)
}

/// The decision phase of the machine template: refuse while it is unusable.
pub(super) fn refuse_template(problem: Option<&Refusal>) -> Decision {
    problem.map_or(Decision::Continue, |refusal| {
        Decision::Decided(Step::Refuse(refusal.clone()))
    })
}

/// Whether a Machine has what it is made of.
enum Completion {
    Complete,
    /// The machine template cannot make its infra machine; the message says what to do.
    InvalidTemplate(String),
}

/// Creates the KubeadmConfig and infra machine of `machine` when missing.
async fn complete_machine(
    pass: &Pass<'_>,
    machine: &Machine,
) -> Result<Completion, ControlPlaneError> {
    let owner = OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        name: machine.name_any(),
        uid: machine.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    ensure_kubeadm_config(pass, machine, &owner).await?;
    ensure_infra_machine(pass, machine, &owner).await
}

/// Wraps a failure to build an object from JSON as the API failure it stands in for.
fn building_error(
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(serde_json::Error) -> ControlPlaneError {
    let build = api_error("building", kind, namespace, name);
    move |e| build(kube::Error::SerdeError(e))
}

/// Creates the KubeadmConfig of `machine` (named after it) from the control plane's spec: init for
/// the Machine annotated `init`, join for the others.
async fn ensure_kubeadm_config(
    pass: &Pass<'_>,
    machine: &Machine,
    owner: &OwnerReference,
) -> Result<(), ControlPlaneError> {
    let (name, namespace) = (machine.name_any(), pass.namespace.as_str());
    let configs: Api<DynamicObject> = Api::namespaced_with(
        pass.client().clone(),
        namespace,
        &crate::bootstrap::kubeadm_config_resource(),
    );
    if configs
        .get_opt(&name)
        .await
        .map_err(api_error("reading", "KubeadmConfig", namespace, &name))?
        .is_some()
    {
        return Ok(());
    }
    let init = machine
        .annotations()
        .get(ANNOTATION_ROLE)
        .map(String::as_str)
        == Some("init");
    let object = json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": {"name": name, "namespace": namespace, "labels": machine.labels(), "ownerReferences": [owner]},
        "spec": machine_config_spec(&pass.spec, init),
    });
    let object: DynamicObject = serde_json::from_value(object).map_err(building_error(
        "KubeadmConfig",
        namespace,
        &name,
    ))?;
    match configs.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
        Err(e) => Err(api_error("creating", "KubeadmConfig", namespace, &name)(e)),
    }
}

/// The infra machine template the control plane names, as `(kind, name)`.
fn template_reference(kcp_spec: &Value) -> (String, String) {
    let template_ref = kcp_spec.pointer("/machineTemplate/spec/infrastructureRef");
    let field = |field: &str| {
        template_ref
            .and_then(|r| r.get(field))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (field("kind"), field("name"))
}

/// The API resources of the infra machine `reference` names and of its template kind, as the
/// API serves them; `Err` says what to install or fix.
async fn infra_resources(
    client: &Client,
    reference: &ContractVersionedObjectReference,
    template_kind: &str,
) -> Result<(ApiResource, ApiResource), String> {
    let group = &reference.api_group;
    let discovered = kube::discovery::group(client, group).await.map_err(|err| {
        format!(
            "API group {group} of spec.machineTemplate.spec.infrastructureRef is not served ({err}); install its provider"
        )
    })?;
    match (
        discovered.recommended_kind(&reference.kind),
        discovered.recommended_kind(template_kind),
    ) {
        (Some((machine_kind, _)), Some((template_api, _))) => Ok((machine_kind, template_api)),
        _ => Err(format!(
            "API group {group} serves no {} or {template_kind}; check spec.machineTemplate.spec.infrastructureRef",
            reference.kind
        )),
    }
}

/// Creates the infra machine of `machine` (named after it) from the control plane's infra machine
/// template, unless it exists.
async fn ensure_infra_machine(
    pass: &Pass<'_>,
    machine: &Machine,
    owner: &OwnerReference,
) -> Result<Completion, ControlPlaneError> {
    let (name, namespace, client) = (machine.name_any(), pass.namespace.as_str(), pass.client());
    let (template_kind, template_name) = template_reference(&pass.spec);
    let (machine_kind, template_api) =
        match infra_resources(client, &machine.spec.infrastructure_ref, &template_kind).await {
            Ok(resources) => resources,
            Err(message) => return Ok(Completion::InvalidTemplate(message)),
        };
    let infra: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &machine_kind);
    if infra
        .get_opt(&name)
        .await
        .map_err(api_error("reading", "infra machine", namespace, &name))?
        .is_some()
    {
        return Ok(Completion::Complete);
    }
    let templates: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &template_api);
    let Some(template) = templates.get_opt(&template_name).await.map_err(api_error(
        "reading",
        "infra machine template",
        namespace,
        &template_name,
    ))?
    else {
        return Ok(Completion::InvalidTemplate(format!(
            "{template_kind} {namespace}/{template_name} named by spec.machineTemplate.spec.infrastructureRef does not exist; create it"
        )));
    };
    let object = infra_machine(
        &name,
        namespace,
        &machine_kind,
        &template,
        machine.labels(),
        owner,
    );
    let object: DynamicObject = serde_json::from_value(object).map_err(building_error(
        "infra machine",
        namespace,
        &name,
    ))?;
    match infra.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(Completion::Complete),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(Completion::Complete),
        Err(e) => Err(api_error("creating", "infra machine", namespace, &name)(e)),
    }
}

/// The infra machine `name` as `template` makes it: the template's metadata and spec, with the
/// Machine's labels on top of the template's.
fn infra_machine(
    name: &str,
    namespace: &str,
    kind: &ApiResource,
    template: &DynamicObject,
    machine_labels: &BTreeMap<String, String>,
    owner: &OwnerReference,
) -> Value {
    let mut labels = template
        .data
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Value::Object(map) = &mut labels {
        for (k, v) in machine_labels {
            map.insert(k.clone(), Value::String(v.clone()));
        }
    }
    json!({
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": template.data.pointer("/spec/template/metadata/annotations").cloned().unwrap_or_else(|| json!({})),
            "ownerReferences": [owner],
        },
        "spec": template.data.pointer("/spec/template/spec").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A Machine created at `created` (RFC 3339), as a member with no conditions.
    pub(in crate::controlplane) fn member(
        name: &str,
        ready: bool,
        up_to_date: bool,
        created: &str,
    ) -> Member {
        let mut machine = Machine::new(name, None, Default::default());
        machine.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created.parse().unwrap()),
        );
        Member {
            machine,
            ready,
            up_to_date,
            deleting: false,
            unhealthy: false,
            certificates_expiring: false,
        }
    }

    /// `member` with these `status.conditions`.
    pub(in crate::controlplane) fn with_conditions(
        mut member: Member,
        conditions: Value,
    ) -> Member {
        member.machine.status =
            Some(serde_json::from_value(json!({ "conditions": conditions })).unwrap());
        member
    }

    /// A condition as the API carries it.
    pub(in crate::controlplane) fn cond(
        type_: &str,
        status: &str,
        reason: &str,
        message: &str,
    ) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn hash_ignores_key_order_and_sees_changes() {
        let a = json!({"kubeadmConfigSpec": {"a": 1, "b": 2}, "machineTemplate": {"spec": {"infrastructureRef": {"name": "t"}}}});
        let b = json!({"machineTemplate": {"spec": {"infrastructureRef": {"name": "t"}}}, "kubeadmConfigSpec": {"b": 2, "a": 1}, "replicas": 5});
        assert_eq!(spec_hash(&a), spec_hash(&b));
        let c = json!({"kubeadmConfigSpec": {"a": 1, "b": 3}, "machineTemplate": {"spec": {"infrastructureRef": {"name": "t"}}}});
        assert_ne!(spec_hash(&a), spec_hash(&c));
    }

    #[test]
    fn first_machine_inits_the_rest_join() {
        let spec = json!({"kubeadmConfigSpec": {"clusterConfiguration": {}, "initConfiguration": {"a": 1}, "joinConfiguration": {"b": 2}, "files": []}});
        let init = machine_config_spec(&spec, true);
        assert!(init.get("joinConfiguration").is_none() && init.get("initConfiguration").is_some());
        let join = machine_config_spec(&spec, false);
        assert!(
            join.get("initConfiguration").is_none() && join.get("clusterConfiguration").is_none()
        );
        assert_eq!(join["joinConfiguration"]["controlPlane"], json!({}));
    }

    #[test]
    fn the_oldest_is_by_creation_then_by_name() {
        let cases = [
            (vec![], None),
            (
                vec![
                    member("b", true, true, "2026-01-01T00:01:00Z"),
                    member("c", true, true, "2026-01-01T00:00:00Z"),
                ],
                Some("c"),
            ),
            (
                vec![
                    member("b", true, true, "2026-01-01T00:00:00Z"),
                    member("a", true, true, "2026-01-01T00:00:00Z"),
                ],
                Some("a"),
            ),
        ];
        for (members, want) in cases {
            assert_eq!(oldest(&members).as_deref(), want, "{members:?}");
        }
    }

    #[test]
    fn a_machine_not_ready_says_its_first_prerequisite_that_is_not_true() {
        let cases = [
            (json!([]), None),
            (
                json!([
                    cond("BootstrapConfigReady", "True", "DataSecretAvailable", ""),
                    cond(
                        "InfrastructureReady",
                        "False",
                        "WaitingForInfrastructure",
                        "no host"
                    ),
                    cond("NodeReady", "Unknown", "WaitingForProviderID", "later"),
                ]),
                Some("InfrastructureReady WaitingForInfrastructure: no host"),
            ),
            (
                json!([
                    cond("BootstrapConfigReady", "True", "", ""),
                    cond("Ready", "False", "NotReady", ""),
                ]),
                Some("Ready NotReady"),
            ),
            (json!([cond("Ready", "True", "Ready", "")]), None),
        ];
        for (conditions, want) in cases {
            let member =
                with_conditions(member("a", false, true, "2026-01-01T00:00:00Z"), conditions);
            assert_eq!(not_ready_because(&member.machine).as_deref(), want);
        }
    }

    #[test]
    fn an_unusable_template_refuses_and_a_usable_one_continues() {
        assert_eq!(refuse_template(None), Decision::Continue);
        let refusal = Refusal {
            reason: "InvalidMachineTemplate",
            message: "create it".into(),
        };
        assert_eq!(
            refuse_template(Some(&refusal)),
            Decision::Decided(Step::Refuse(refusal.clone()))
        );
    }
}
