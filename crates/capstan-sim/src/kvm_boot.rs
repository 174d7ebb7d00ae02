//! The `sim-kvm-boot` controller: what a VM on a simulated hypervisor would do once it runs.
//!
//! libvirt's `test:///` driver runs domains that execute nothing, so on hypervisors with a
//! `test://` URI this controller plays the guest: once a KVMMachine is provisioned there, it reads
//! the owner Machine's bootstrap data as cloud-init would (meta data: the KVMMachine's UID as
//! `uuid`, its name as `hostname`, as the NoCloud medium says) and inits or joins the workload
//! cluster exactly as a `fake://` host does ([`crate::boot`]). Faults and delays use the same
//! annotations, on the KVMMachine.
//!
//! VMs on real hypervisors boot for real and are never played. As for a host with a real BMC, the
//! pass only makes sure their cluster's workload API is served where their nodes will dial it
//! ([`Simulator::serve_for_real_nodes`]), from the moment the VM is placed on a hypervisor, so it
//! answers before the guest runs `kubeadm`.

use crate::boot::boot;
use crate::{ANNOTATION_FAULT, SimError, Simulator};
use capstan_model::capi::v1beta2::Machine;
use capstan_model::kvm::v1beta2::KVMMachine;
use capstan_runtime::{Action, Context, Reconciler};
use capstan_workload::ClusterKey;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The controller's name.
pub const KVM_BOOT_CONTROLLER: &str = "sim-kvm-boot";

/// Boots provisioned KVMMachines on `test://` hypervisors into their workload clusters.
pub struct KvmBootController {
    sim: Arc<Simulator>,
}

impl KvmBootController {
    pub fn new(sim: Arc<Simulator>) -> Self {
        Self { sim }
    }
}

/// Whether `machine` is placed on a real hypervisor (any URI but libvirt's simulated `test`
/// driver, local or remote), whose guests boot for real.
pub fn is_placed_on_real_hypervisor(machine: &KVMMachine) -> bool {
    machine
        .status
        .as_ref()
        .and_then(|s| s.hypervisor_uri.as_deref())
        .is_some_and(|uri| !uri.starts_with("test:") && !uri.starts_with("test+"))
}

/// Whether `machine` runs on a simulated hypervisor and is provisioned.
pub fn is_simulated_and_running(machine: &KVMMachine) -> bool {
    let Some(status) = machine.status.as_ref() else {
        return false;
    };
    status
        .hypervisor_uri
        .as_deref()
        .is_some_and(|uri| uri.starts_with("test://"))
        && status
            .initialization
            .as_ref()
            .and_then(|i| i.get("provisioned"))
            .and_then(Value::as_bool)
            == Some(true)
}

fn error(
    verb: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> SimError {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |source| SimError::Management {
        verb,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

impl Reconciler for KvmBootController {
    type Object = KVMMachine;
    type Error = SimError;

    fn name(&self) -> &'static str {
        KVM_BOOT_CONTROLLER
    }

    fn concurrency(&self) -> u16 {
        8
    }

    async fn reconcile(
        &self,
        machine: Arc<KVMMachine>,
        context: Arc<Context>,
    ) -> Result<Action, SimError> {
        if machine.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        if is_placed_on_real_hypervisor(&machine) {
            return self.serve_for_real_vm(&machine, &context).await;
        }
        if !is_simulated_and_running(&machine) {
            return Ok(Action::await_change());
        }
        let fault = machine
            .annotations()
            .get(ANNOTATION_FAULT)
            .cloned()
            .unwrap_or_default();
        if fault == "never-join" {
            return Ok(Action::await_change());
        }
        let client = context.client();
        let namespace = machine.namespace().unwrap_or_default();
        let Some(owner) = capstan_infra_owner(&machine) else {
            return Ok(Action::await_change());
        };
        let Some(owner) = Api::<Machine>::namespaced(client.clone(), &namespace)
            .get_opt(&owner)
            .await
            .map_err(error("reading", "Machine", &namespace, &owner))?
        else {
            return Ok(Action::await_change());
        };
        let Some(secret_name) = owner.spec.bootstrap.data_secret_name.clone() else {
            return Ok(Action::await_change());
        };
        let secret = Api::<Secret>::namespaced(client.clone(), &namespace)
            .get_opt(&secret_name)
            .await
            .map_err(error("reading", "Secret", &namespace, &secret_name))?;
        let Some(data) = secret
            .and_then(|s| s.data)
            .and_then(|d| d.get("value").map(|v| v.0.clone()))
        else {
            return Ok(Action::await_change());
        };
        let name = machine.name_any();
        let mut meta = Map::new();
        meta.insert("uuid".into(), json!(machine.uid().unwrap_or_default()));
        meta.insert("name".into(), json!(name));
        meta.insert("hostname".into(), json!(name));
        meta.insert("local-hostname".into(), json!(name));
        let addresses: Vec<(String, String)> = machine
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter(|a| a["type"] == "InternalIP")
                    .filter_map(|a| {
                        Some(("InternalIP".to_owned(), a["address"].as_str()?.to_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let key = ClusterKey::new(namespace, owner.spec.cluster_name.clone());
        let version = owner.spec.version.clone();
        boot(
            &self.sim, &*machine, &context, &key, &data, &meta, &fault, &addresses, version,
        )
        .await
    }
}

impl KvmBootController {
    /// A VM that boots for real: its node registers itself, the workload API only has to be there.
    async fn serve_for_real_vm(
        &self,
        machine: &KVMMachine,
        context: &Context,
    ) -> Result<Action, SimError> {
        if !self.sim.settings().listen {
            return Ok(Action::await_change());
        }
        let namespace = machine.namespace().unwrap_or_default();
        let Some(owner) = capstan_infra_owner(machine) else {
            return Ok(Action::await_change());
        };
        let Some(owner) = Api::<Machine>::namespaced(context.client().clone(), &namespace)
            .get_opt(&owner)
            .await
            .map_err(error("reading", "Machine", &namespace, &owner))?
        else {
            return Ok(Action::await_change());
        };
        let key = ClusterKey::new(namespace, owner.spec.cluster_name.clone());
        if self.sim.serve_for_real_nodes(&key).await? {
            Ok(Action::await_change())
        } else {
            // The cluster's CA Secret or endpoint is not there yet.
            Ok(Action::requeue(SERVE_RETRY))
        }
    }
}

/// How soon a VM whose cluster's API cannot be served yet (no CA Secret or endpoint) looks again.
const SERVE_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// The owner Machine's name, from the owner references.
fn capstan_infra_owner(machine: &KVMMachine) -> Option<String> {
    machine
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.kind == "Machine" && r.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|r| r.name.clone())
}
