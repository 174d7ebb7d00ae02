//! Machines on KVM VMs: the control plane (`controlPlane.machines: kvm`) or worker pools
//! (`workerPools[].machines: kvm`) get KVMMachineTemplates instead of Metal3MachineTemplates, and
//! the cluster a KVMCluster listing the spec's hypervisors.
//!
//! One Cluster, no second infrastructure cluster pointing at the first's endpoint:
//! - control plane on VMs: the KVMCluster (with the endpoint: the VIP kube-vip holds on the
//!   control-plane VMs) replaces the Metal3Cluster as the Cluster's `infrastructureRef`; bare-metal
//!   pools keep their Metal3MachineTemplates (Metal3Machines need no Metal3Cluster);
//! - control plane on bare metal, some pools on VMs: the Metal3Cluster stays the Cluster's
//!   infrastructure and a KVMCluster of the same name, labelled `cluster.x-k8s.io/cluster-name`,
//!   lends its hypervisors to the VMs, without an endpoint.
//!
//! The KVM kinds are written in `v1beta2` (they have no `v1beta1`); references to them from
//! `v1beta1` objects carry that `apiVersion`.

use capstan_model::capm3::ApiEndpoint;
use capstan_model::ipam::{IPPool, IpPoolSpec, Pool};
use capstan_model::kvm::{
    self, KvmClusterSpec, KvmHypervisor, KvmImage, KvmMachineSpec, KvmMachineTemplateResource,
    KvmMachineTemplateSpec, KvmNetwork, KvmResources,
};
use capstan_model::meta::LocalObjectReference;
use serde_json::{Value, json};

use crate::cluster::{Names, object_meta};
use crate::error::RenderError;
use crate::spec::{Kvm, Machines, Vm};
use crate::validate::Plan;
use crate::{CapiVersion, encode};

const INFRASTRUCTURE: &str = "infrastructure.cluster.x-k8s.io";
const KVM_API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta2";

/// Moves the machines the spec puts on VMs onto KVM (see the module documentation). `objects`
/// are those of `cluster/cluster.yaml`, all on bare metal.
pub(crate) fn place_on_vms(
    plan: &Plan<'_>,
    version: CapiVersion,
    objects: &mut Vec<Value>,
) -> Result<(), RenderError> {
    let spec = plan.spec;
    let Some(kvm) = &spec.kvm else {
        return Ok(());
    };
    let control_plane_on_vms = spec.control_plane.machines == Machines::Kvm;
    let pools_on_vms: Vec<_> = spec
        .worker_pools
        .iter()
        .filter(|p| p.machines == Machines::Kvm)
        .collect();
    if !control_plane_on_vms && pools_on_vms.is_empty() {
        return Ok(());
    }
    let names = Names::new(&spec.name);
    let kvm_cluster = encode(&kvm_cluster(plan, kvm, control_plane_on_vms))?;
    let metal3_cluster = objects
        .iter()
        .position(|o| is(o, "Metal3Cluster", &names.cluster()));
    match (control_plane_on_vms, metal3_cluster) {
        (true, Some(at)) => objects[at] = kvm_cluster,
        (false, Some(at)) => objects.insert(at + 1, kvm_cluster),
        (_, None) => objects.push(kvm_cluster),
    }
    for object in objects.iter_mut() {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match kind.as_str() {
            "Cluster" if control_plane_on_vms => {
                retarget(object, "/spec/infrastructureRef", "KVMCluster", version);
            }
            "KubeadmControlPlane" if control_plane_on_vms => {
                let at = match version {
                    CapiVersion::V1beta1 => "/spec/machineTemplate/infrastructureRef",
                    CapiVersion::V1beta2 => "/spec/machineTemplate/spec/infrastructureRef",
                };
                retarget(object, at, "KVMMachineTemplate", version);
            }
            "Metal3MachineTemplate" if control_plane_on_vms && name == names.control_plane() => {
                *object = encode(&machine_template(
                    plan,
                    kvm,
                    name,
                    spec.control_plane.vm.as_ref(),
                ))?;
            }
            "MachineDeployment" | "Metal3MachineTemplate" => {
                let Some(pool) = pools_on_vms.iter().find(|p| names.pool(&p.name) == name) else {
                    continue;
                };
                if kind == "MachineDeployment" {
                    retarget(
                        object,
                        "/spec/template/spec/infrastructureRef",
                        "KVMMachineTemplate",
                        version,
                    );
                } else {
                    *object = encode(&machine_template(plan, kvm, name, pool.vm.as_ref()))?;
                }
            }
            _ => {}
        }
    }
    // The address ranges of the VM groups, beside their templates.
    let mut groups = Vec::new();
    if control_plane_on_vms {
        groups.push((names.control_plane(), spec.control_plane.vm.as_ref()));
    }
    for pool in &pools_on_vms {
        groups.push((names.pool(&pool.name), pool.vm.as_ref()));
    }
    for (template, vm) in groups {
        for pool in ip_pools(plan, kvm, &template, vm) {
            objects.push(encode(&pool)?);
        }
    }
    Ok(())
}

/// The IPPool a VM group's NIC `index` takes its addresses from: `<template>-nic<index>`.
pub(crate) fn ip_pool_name(template: &str, index: usize) -> String {
    format!("{template}-nic{index}")
}

/// The IPPools of a VM group's NICs that have an `ipPool` (one address per VM, the gateway and
/// the KVM DNS servers handed out with each).
fn ip_pools(plan: &Plan<'_>, kvm: &Kvm, template: &str, vm: Option<&Vm>) -> Vec<IPPool> {
    let Some(vm) = vm else {
        return Vec::new();
    };
    vm.networks
        .iter()
        .enumerate()
        .filter_map(|(index, network)| {
            let range = network.ip_pool.as_ref()?;
            let name = ip_pool_name(template, index);
            let spec = IpPoolSpec {
                cluster_name: Some(plan.spec.name.clone()),
                name_prefix: name.clone(),
                pools: vec![Pool {
                    start: Some(range.start.clone()),
                    end: Some(range.end.clone()),
                    ..Pool::default()
                }],
                prefix: Some(i32::from(range.prefix)),
                gateway: network.gateway.clone(),
                dns_servers: (!kvm.dns_servers.is_empty()).then(|| kvm.dns_servers.clone()),
                ..IpPoolSpec::default()
            };
            let mut pool = IPPool::new(&name, None, spec);
            pool.metadata = object_meta(plan, name, &[]);
            Some(pool)
        })
        .collect()
}

fn is(object: &Value, kind: &str, name: &str) -> bool {
    object.get("kind").and_then(Value::as_str) == Some(kind)
        && object.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
}

/// Points a reference at a KVM kind, in the form of the referring object's version.
fn retarget(object: &mut Value, pointer: &str, kind: &str, version: CapiVersion) {
    let Some(reference) = object.pointer_mut(pointer).and_then(Value::as_object_mut) else {
        return;
    };
    reference.insert("kind".into(), json!(kind));
    match version {
        CapiVersion::V1beta1 => {
            reference.insert("apiVersion".into(), json!(KVM_API_VERSION));
        }
        CapiVersion::V1beta2 => {
            reference.insert("apiGroup".into(), json!(INFRASTRUCTURE));
        }
    }
}

fn kvm_cluster(plan: &Plan<'_>, kvm: &Kvm, with_endpoint: bool) -> kvm::v1beta2::KVMCluster {
    let name = plan.spec.name.clone();
    let spec = KvmClusterSpec {
        control_plane_endpoint: with_endpoint.then(|| ApiEndpoint {
            host: plan.vip.to_string(),
            port: i32::from(plan.spec.control_plane.port),
        }),
        hypervisors: kvm
            .hypervisors
            .iter()
            .map(|h| KvmHypervisor {
                name: h.name.clone(),
                uri: h.uri.clone(),
                pool: h.pool.clone(),
                credentials_secret_ref: None,
                control_plane: h.control_plane,
                domain_type: h.domain_type.clone(),
            })
            .collect(),
        dns_servers: kvm.dns_servers.clone(),
        ntp_servers: kvm.ntp_servers.clone(),
    };
    let mut cluster = kvm::v1beta2::KVMCluster::new(name.clone(), None, spec);
    // object_meta labels every object with its cluster (`cluster.x-k8s.io/cluster-name`), which is
    // also how a KVMCluster that is not the Cluster's infrastructure is found by its VMs.
    cluster.metadata = object_meta(plan, name, &[]);
    cluster
}

fn machine_template(
    plan: &Plan<'_>,
    kvm: &Kvm,
    name: String,
    vm: Option<&Vm>,
) -> kvm::v1beta2::KVMMachineTemplate {
    let default = Vm::default();
    let vm = vm.unwrap_or(&default);
    let spec = KvmMachineSpec {
        resources: KvmResources {
            cpu: Some(vm.cpu.unwrap_or(2)),
            memory: Some(vm.memory.clone().unwrap_or_else(|| "2Gi".to_owned())),
            disk: Some(vm.disk.clone().unwrap_or_else(|| "20Gi".to_owned())),
            docker_volume_size: vm.docker_volume_size.clone(),
        },
        image: Some(KvmImage {
            url: kvm.image.url.clone(),
            checksum: Some(kvm.image.checksum.trim().to_owned()),
            checksum_type: kvm.image.checksum_type.clone(),
            format: kvm.image.format.clone(),
            ca_secret_ref: None,
        }),
        networks: vm
            .networks
            .iter()
            .enumerate()
            .map(|(index, n)| KvmNetwork {
                network: n.network.clone(),
                bridge: n.bridge.clone(),
                user: None,
                address: n.address.clone(),
                // With a pool the gateway is the pool's, given with each address.
                gateway: n.gateway.clone().filter(|_| n.ip_pool.is_none()),
                ip_pool_ref: n.ip_pool.as_ref().map(|_| LocalObjectReference {
                    name: ip_pool_name(&name, index),
                }),
            })
            .collect(),
        ..KvmMachineSpec::default()
    };
    let mut template = kvm::v1beta2::KVMMachineTemplate::new(
        name.clone(),
        None,
        KvmMachineTemplateSpec {
            template: KvmMachineTemplateResource { spec },
        },
    );
    template.metadata = object_meta(plan, name, &[]);
    template
}
