//! Scaling: the first Machine, joins one at a time, scaling down, and taking the pass's step.
//!
//! Its decision phases bracket the others: first a Machine being deleted is waited for and, with no
//! Machine at all, the first is created (with the init configuration until the control plane is
//! initialised); after remediation, nothing changes until the control plane is initialised and
//! every Machine has a Node (one change at a time, so a join never races another); after the
//! rollout, the Machines are brought to `spec.replicas` (join one, or remove the oldest).
//!
//! It also takes the step the phases decided, whichever decided it: creating a Machine (annotated
//! with the spec hash and its kubeadm role; [`super::machines`] gives it its KubeadmConfig and
//! infra machine) or removing one, after [`super::etcd`] took its member out of etcd. It reports
//! that in `Scaling` and with an Event.

use super::machines::{Member, not_ready_because, oldest, spec_hash};
use super::{
    ANNOTATION_ROLE, ANNOTATION_SPEC_HASH, ControlPlaneError, Decision, LABEL_CONTROL_PLANE_NAME,
    Pass, PhaseOutcome, Refusal, Requeue, Step, api_error, etcd, machine_resource,
};
use capstan_model::capi::v1beta2::Machine;
use capstan_model::kubeadm::v1beta2::KubeadmControlPlane;
use capstan_model::meta::{Condition, LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE};
use capstan_runtime::EventType;
use capstan_runtime::conditions::{self, FALSE, TRUE, UNKNOWN};
use capstan_workload::{ClusterKey, EtcdMembership};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

/// Waits while a Machine is being deleted: its etcd member and Node are going.
pub(super) fn wait_for_deletions(members: &[Member]) -> Decision {
    members
        .iter()
        .find(|m| m.deleting)
        .map_or(Decision::Continue, |deleting| {
            Decision::Decided(Step::Wait(format!(
                "Machine {} is being deleted",
                deleting.name()
            )))
        })
}

/// Without any Machine, creates the first: it runs `kubeadm init` unless the control plane was
/// initialised before (its Machines were all removed), when it joins.
pub(super) fn create_first(members: &[Member], initialized: bool) -> Decision {
    if members.is_empty() {
        Decision::Decided(Step::Create { init: !initialized })
    } else {
        Decision::Continue
    }
}

/// Waits until the first Machine initialised the control plane: nothing joins before.
pub(super) fn wait_for_initialization(initialized: bool) -> Decision {
    if initialized {
        Decision::Continue
    } else {
        Decision::Decided(Step::Wait(
            "waiting for the first control-plane Machine to initialize the cluster".into(),
        ))
    }
}

/// Waits until every Machine has a Node, saying what the first without one waits for itself.
pub(super) fn wait_for_nodes(members: &[Member]) -> Decision {
    let Some(pending) = members.iter().find(|m| !m.ready) else {
        return Decision::Continue;
    };
    let machine = pending.name();
    let mut message = format!("waiting for Machine {machine} to get a Node before the next change");
    if let Some(why) = not_ready_because(&pending.machine) {
        message.push_str(": ");
        message.push_str(&why);
    }
    Decision::Decided(Step::WaitForMachine { machine, message })
}

/// Brings the Machines to `replicas`: one more, or the oldest removed; continues when there.
pub(super) fn to_replicas(members: &[Member], replicas: i64) -> Decision {
    let count = i64::try_from(members.len()).unwrap_or(i64::MAX);
    if count < replicas {
        Decision::Decided(Step::Create { init: false })
    } else if count > replicas {
        Decision::Decided(oldest(members).map_or(Step::Settled, Step::Remove))
    } else {
        Decision::Continue
    }
}

/// What taking the step did, for status.
pub(super) struct Taken {
    /// `Scaling`: what was created or removed, or what the pass waits for.
    pub(super) scaling: Condition,
    /// `EtcdClusterHealthy` when etcd refused a removal; otherwise status says it is healthy.
    pub(super) etcd_healthy: Option<Condition>,
    /// The machine template turned out unusable while creating a Machine; the message says why.
    invalid_template: Option<String>,
}

impl Taken {
    /// `SpecAccepted` as judged before the step, unless creating found the template unusable.
    pub(super) fn spec_accepted(&self, accepted: Condition, generation: Option<i64>) -> Condition {
        match &self.invalid_template {
            Some(message) => conditions::condition(
                "SpecAccepted",
                FALSE,
                "InvalidMachineTemplate",
                message.clone(),
                generation,
            ),
            None => accepted,
        }
    }
}

/// Takes the pass's step: creates or removes a Machine, and reports it.
pub(super) async fn take(
    pass: &Pass<'_>,
    step: &Step,
    members: &[Member],
    cluster_name: &str,
    key: &ClusterKey,
    membership: Option<&dyn EtcdMembership>,
) -> Result<PhaseOutcome<Taken>, ControlPlaneError> {
    let generation = pass.generation;
    let mut taken = Taken {
        scaling: conditions::condition("Scaling", FALSE, "NotScaling", "", generation),
        etcd_healthy: None,
        invalid_template: None,
    };
    match step {
        Step::Create { init } => match create(pass, cluster_name, *init).await? {
            Creation::Created(machine) => {
                let what = if *init {
                    "to run kubeadm init"
                } else {
                    "to join the control plane"
                };
                let message = format!("created Machine {machine} {what}");
                taken.scaling = conditions::condition(
                    "Scaling",
                    TRUE,
                    "ScalingUp",
                    message.clone(),
                    generation,
                );
                pass.context
                    .publish(
                        pass.kcp,
                        EventType::Normal,
                        "MachineCreated",
                        "Scale",
                        message,
                    )
                    .await;
            }
            Creation::InvalidTemplate(message) => taken.invalid_template = Some(message),
        },
        Step::Remove(machine) => {
            // Named by the decision from these members; a miss is looked at again soon.
            let Some(member) = members.iter().find(|m| &m.name() == machine) else {
                return Ok(PhaseOutcome::Stop(Requeue::Progress));
            };
            match remove(pass, member, key, membership).await? {
                Removal::Removed(removed) => {
                    taken.scaling = conditions::condition(
                        "Scaling",
                        TRUE,
                        "ScalingDown",
                        format!("removing Machine {removed}"),
                        generation,
                    );
                    pass.context
                        .publish(
                            pass.kcp,
                            EventType::Normal,
                            "MachineRemoved",
                            "Scale",
                            format!("removed Machine {removed} (and its etcd member)"),
                        )
                        .await;
                }
                Removal::Refused(refusal) => {
                    taken.etcd_healthy = Some(etcd_refused(pass, refusal).await)
                }
            }
        }
        Step::Wait(message) | Step::WaitForMachine { message, .. } => {
            taken.scaling =
                conditions::condition("Scaling", UNKNOWN, "Waiting", message.clone(), generation);
        }
        Step::Refuse(_) | Step::Settled => {}
    }
    Ok(PhaseOutcome::Continue(taken))
}

/// `EtcdClusterHealthy` for a removal etcd refused, with a Warning Event when its message is new
/// (the refusal repeats every pass until someone repairs etcd).
async fn etcd_refused(pass: &Pass<'_>, refusal: Refusal) -> Condition {
    let condition = conditions::condition(
        "EtcdClusterHealthy",
        FALSE,
        refusal.reason,
        refusal.message.clone(),
        pass.generation,
    );
    if conditions::get(&pass.previous, "EtcdClusterHealthy").and_then(|c| c.message.as_deref())
        != Some(refusal.message.as_str())
    {
        pass.context
            .publish(
                pass.kcp,
                EventType::Warning,
                refusal.reason,
                "Scale",
                refusal.message,
            )
            .await;
    }
    condition
}

/// What creating a Machine came to.
enum Creation {
    /// Created, with this name.
    Created(String),
    /// The machine template cannot make one; the message says what to do.
    InvalidTemplate(String),
}

/// A new Machine's name: the control plane's and five random characters (no vowels, as Kubernetes'
/// generated names, so no word is spelt).
fn machine_name(kcp_name: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect();
    format!("{kcp_name}-{suffix}")
}

/// The Machine `name` of `kcp` in cluster `cluster`: the machine template's metadata, the
/// control-plane labels, the spec hash and kubeadm role, and references to a KubeadmConfig and an
/// infra machine of its own name. `Err` says what is wrong with the machine template.
fn machine_object(
    kcp: &KubeadmControlPlane,
    kcp_spec: &Value,
    cluster: &str,
    namespace: &str,
    name: &str,
    init: bool,
) -> Result<Value, String> {
    let Some(template_ref) = kcp_spec.pointer("/machineTemplate/spec/infrastructureRef") else {
        return Err("spec.machineTemplate.spec.infrastructureRef is missing; name the infra machine template".into());
    };
    let template_kind = template_ref
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(kind) = template_kind
        .strip_suffix("Template")
        .filter(|k| !k.is_empty())
    else {
        return Err(format!(
            "spec.machineTemplate.spec.infrastructureRef.kind {template_kind:?} is not a …Template kind; name the infra machine template"
        ));
    };
    let kcp_name = kcp.name_any();
    let metadata = |field: &str| {
        kcp_spec
            .pointer(&format!("/machineTemplate/metadata/{field}"))
            .cloned()
            .unwrap_or_else(|| json!({}))
    };
    let mut labels = metadata("labels");
    if let Value::Object(map) = &mut labels {
        map.insert(LABEL_CLUSTER_NAME.into(), json!(cluster));
        map.insert(LABEL_CONTROL_PLANE.into(), json!(""));
        map.insert(LABEL_CONTROL_PLANE_NAME.into(), json!(kcp_name));
    }
    let mut annotations = metadata("annotations");
    if let Value::Object(map) = &mut annotations {
        map.insert(ANNOTATION_SPEC_HASH.into(), json!(spec_hash(kcp_spec)));
        let role = if init { "init" } else { "join" };
        map.insert(ANNOTATION_ROLE.into(), json!(role));
    }
    let mut spec = json!({
        "clusterName": cluster,
        "version": kcp.spec.version,
        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
        "infrastructureRef": {"apiGroup": template_ref.get("apiGroup").cloned().unwrap_or(Value::Null), "kind": kind, "name": name},
    });
    if let Some(deletion) = kcp_spec.pointer("/machineTemplate/spec/deletion") {
        spec["deletion"] = deletion.clone();
    }
    Ok(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
                "kind": "KubeadmControlPlane",
                "name": kcp_name,
                "uid": kcp.uid().unwrap_or_default(),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    }))
}

/// Creates a Machine of the control plane; `init` makes it the one that runs `kubeadm init`.
async fn create(pass: &Pass<'_>, cluster: &str, init: bool) -> Result<Creation, ControlPlaneError> {
    let namespace = pass.namespace.as_str();
    let name = machine_name(&pass.name);
    let object = match machine_object(pass.kcp, &pass.spec, cluster, namespace, &name, init) {
        Ok(object) => object,
        Err(message) => return Ok(Creation::InvalidTemplate(message)),
    };
    let object: DynamicObject = serde_json::from_value(object).map_err(|e| {
        api_error("building", "Machine", namespace, &name)(kube::Error::SerdeError(e))
    })?;
    let machines: Api<DynamicObject> =
        Api::namespaced_with(pass.client().clone(), namespace, &machine_resource());
    machines
        .create(&PostParams::default(), &object)
        .await
        .map_err(api_error("creating", "Machine", namespace, &name))?;
    Ok(Creation::Created(name))
}

/// What removing a Machine came to.
enum Removal {
    /// Its Machine is being deleted (and its etcd member is gone); this is its name.
    Removed(String),
    /// etcd refused; nothing was removed.
    Refused(Refusal),
}

/// Takes `member` out of etcd and deletes its Machine, unless etcd refuses (see
/// [`etcd::release`]). Without etcd access, or before the Machine has a Node (so no member), only
/// the Machine is deleted.
async fn remove(
    pass: &Pass<'_>,
    member: &Member,
    key: &ClusterKey,
    membership: Option<&dyn EtcdMembership>,
) -> Result<Removal, ControlPlaneError> {
    let name = member.name();
    if let (Some(membership), Some(node)) = (membership, member.node())
        && let Err(refusal) = etcd::release(membership, key, &name, &node).await
    {
        return Ok(Removal::Refused(refusal));
    }
    let machines: Api<Machine> = Api::namespaced(pass.client().clone(), &pass.namespace);
    match machines.delete(&name, &DeleteParams::background()).await {
        Ok(_) => Ok(Removal::Removed(name)),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Removal::Removed(name)),
        Err(e) => Err(api_error("deleting", "Machine", &pass.namespace, &name)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::machines::tests::member;

    #[test]
    fn init_then_join_one_at_a_time() {
        let first = member("a", false, true, "2026-01-01T00:00:00Z");
        let joined = member("a", true, true, "2026-01-01T00:00:00Z");
        let three = [
            joined.clone(),
            member("b", true, true, "2026-01-01T00:01:00Z"),
            member("c", true, true, "2026-01-01T00:02:00Z"),
        ];
        let create = |init| Decision::Decided(Step::Create { init });
        // (case, members, initialised, what creating the first Machine decides)
        let cases: [(&str, &[Member], bool, Decision); 5] = [
            ("no Machine yet: init", &[], false, create(true)),
            (
                "no Machine, initialised before: join",
                &[],
                true,
                create(false),
            ),
            (
                "a first Machine without a Node",
                std::slice::from_ref(&first),
                false,
                Decision::Continue,
            ),
            (
                "a first Machine with a Node",
                std::slice::from_ref(&joined),
                true,
                Decision::Continue,
            ),
            ("three Machines", &three, true, Decision::Continue),
        ];
        for (case, members, initialized, want) in cases {
            assert_eq!(create_first(members, initialized), want, "{case}");
        }
        assert!(matches!(
            wait_for_initialization(false),
            Decision::Decided(Step::Wait(_))
        ));
        assert_eq!(wait_for_initialization(true), Decision::Continue);
        assert!(matches!(
            wait_for_nodes(std::slice::from_ref(&first)),
            Decision::Decided(Step::WaitForMachine { machine, .. }) if machine == "a"
        ));
        assert_eq!(wait_for_nodes(&three), Decision::Continue);
    }

    #[test]
    fn scaling_to_replicas_adds_one_or_removes_the_oldest() {
        let three = [
            member("b", true, true, "2026-01-01T00:01:00Z"),
            member("a", true, true, "2026-01-01T00:00:00Z"),
            member("c", true, true, "2026-01-01T00:02:00Z"),
        ];
        let cases = [
            (5, Decision::Decided(Step::Create { init: false })),
            (3, Decision::Continue),
            (1, Decision::Decided(Step::Remove("a".into()))),
        ];
        for (replicas, want) in cases {
            assert_eq!(to_replicas(&three, replicas), want, "{replicas} replicas");
        }
    }

    #[test]
    fn a_deletion_in_progress_is_waited_for() {
        let mut deleting = member("b", true, true, "2026-01-01T00:01:00Z");
        deleting.deleting = true;
        let members = [member("a", true, true, "2026-01-01T00:00:00Z"), deleting];
        assert_eq!(
            wait_for_deletions(&members),
            Decision::Decided(Step::Wait("Machine b is being deleted".into()))
        );
        assert_eq!(wait_for_deletions(&members[..1]), Decision::Continue);
    }

    #[test]
    fn a_new_machine_is_made_from_the_machine_template() {
        let mut kcp = KubeadmControlPlane::new("cp", None, Default::default());
        kcp.spec.version = "v1.31.2".into();
        let spec = json!({
            "machineTemplate": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                "spec": {
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3MachineTemplate", "name": "t"},
                    "deletion": {"nodeDrainTimeoutSeconds": 60},
                },
            },
        });
        let machine = machine_object(&kcp, &spec, "c", "ns", "cp-abcde", false).unwrap();
        assert_eq!(
            machine["metadata"]["labels"],
            json!({"team": "a", LABEL_CLUSTER_NAME: "c", LABEL_CONTROL_PLANE: "", LABEL_CONTROL_PLANE_NAME: "cp"})
        );
        assert_eq!(
            machine["metadata"]["annotations"],
            json!({"note": "x", ANNOTATION_SPEC_HASH: spec_hash(&spec), ANNOTATION_ROLE: "join"})
        );
        assert_eq!(
            machine["spec"],
            json!({
                "clusterName": "c",
                "version": "v1.31.2",
                "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "cp-abcde"}},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Machine", "name": "cp-abcde"},
                "deletion": {"nodeDrainTimeoutSeconds": 60},
            })
        );
        let init = machine_object(&kcp, &spec, "c", "ns", "cp-abcde", true).unwrap();
        assert_eq!(init["metadata"]["annotations"][ANNOTATION_ROLE], "init");
    }

    #[test]
    fn an_unusable_machine_template_says_what_to_fix() {
        let kcp = KubeadmControlPlane::new("cp", None, Default::default());
        let cases = [
            (
                json!({}),
                "spec.machineTemplate.spec.infrastructureRef is missing",
            ),
            (
                json!({"machineTemplate": {"spec": {"infrastructureRef": {"kind": "Metal3Machine"}}}}),
                "kind \"Metal3Machine\" is not a …Template kind",
            ),
            (
                json!({"machineTemplate": {"spec": {"infrastructureRef": {"kind": "Template"}}}}),
                "kind \"Template\" is not a …Template kind",
            ),
        ];
        for (spec, want) in cases {
            let message = machine_object(&kcp, &spec, "c", "ns", "cp-x", false).unwrap_err();
            assert!(message.contains(want), "{spec}: {message}");
        }
    }

    #[test]
    fn machine_names_have_five_generated_characters() {
        let name = machine_name("cp");
        let suffix = name.strip_prefix("cp-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix
                .bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
    }
}
