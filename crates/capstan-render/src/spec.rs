//! The cluster spec: the one YAML file a user writes to describe a cluster and the machines it runs on.
//!
//! Every type here is read with `deny_unknown_fields`, so a misspelt field is an error rather than a
//! silently ignored line. Addresses, CIDRs and MAC addresses are kept as the strings the user wrote;
//! [`crate::validate`] parses them and reports every problem at once, each with its `file:line`.
//! The doc comment of every field is the reference text of `docs/spec.md`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

use crate::source::Source;

/// A whole cluster: its Kubernetes settings, control plane, worker pools, OS image, networking add-ons
/// and the inventory of hosts it may run on.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Spec {
    /// Name of the cluster. Names the Cluster object and prefixes every other object's name. A
    /// DNS-1123 label: lowercase letters, digits and `-`, at most 63 characters.
    pub name: String,
    /// Namespace of the management cluster that holds the cluster's objects and its hosts. It must
    /// exist before the bundle is applied. Default: `default`.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Kubernetes version and the cluster's pod and service networks.
    pub kubernetes: Kubernetes,
    /// The control plane: replica count, API endpoint (the virtual IP kube-vip holds) and kube-vip
    /// settings.
    pub control_plane: ControlPlane,
    /// Pools of worker nodes; each becomes a MachineDeployment. Default: none (a cluster of
    /// control-plane nodes only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_pools: Vec<WorkerPool>,
    /// The OS image written to every host's disk.
    pub image: Image,
    /// Login users created on every node. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<User>,
    /// Waiting for DNS before kubeadm runs, so that image pulls do not fail on a resolver that is not
    /// up yet. Default: wait up to 60 seconds for `registry.k8s.io` to resolve.
    #[serde(default)]
    pub dns_wait: DnsWait,
    /// The Cilium CNI, installed into the new cluster by a ClusterResourceSet.
    pub cilium: Cilium,
    /// BGP between the cluster's nodes (Cilium BGP control plane) and an upstream router. Default:
    /// no BGP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<Bgp>,
    /// MachineHealthChecks that replace machines whose node stays unhealthy. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Settings shared by every host unless the host sets its own: BMC credentials, DNS, root
    /// device hints.
    #[serde(default)]
    pub host_defaults: HostDefaults,
    /// The KVM hypervisors, base image and node settings for machines that run as VMs
    /// (`controlPlane.machines: kvm` or a pool's `machines: kvm`). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm: Option<Kvm>,
    /// The machines of the cluster, one BareMetalHost each.
    pub hosts: Vec<Host>,
    /// Where the spec was read from, for `file:line` in messages; empty for specs built in code.
    #[serde(skip)]
    pub(crate) source: Source,
}

fn default_namespace() -> String {
    "default".to_owned()
}

/// Kubernetes version and cluster networks.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Kubernetes {
    /// Kubernetes version, `vMAJOR.MINOR.PATCH` (`v1.31.4`). The OS image must carry matching
    /// kubeadm, kubelet and kubectl.
    pub version: String,
    /// Pod network (CIDR). Cilium's native-routing CIDR and the per-node pod ranges come from it; it
    /// must not overlap the service network or any host network. Default: `10.244.0.0/16`.
    #[serde(default = "default_pod_cidr")]
    pub pod_cidr: String,
    /// Service network (CIDR). Default: `10.96.0.0/12`.
    #[serde(default = "default_service_cidr")]
    pub service_cidr: String,
}

fn default_pod_cidr() -> String {
    "10.244.0.0/16".to_owned()
}

fn default_service_cidr() -> String {
    "10.96.0.0/12".to_owned()
}

/// The control plane.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControlPlane {
    /// Number of control-plane machines. Use an odd number (1, 3, 5): etcd needs a majority.
    /// At least this many hosts must have role `control-plane`.
    pub replicas: u32,
    /// The API server's virtual IP, held by kube-vip on one control-plane node at a time. An unused
    /// address in the control-plane hosts' subnet.
    pub vip: String,
    /// API server port, on the VIP and on every control-plane node. Default: `6443`.
    #[serde(default = "default_api_port")]
    pub port: u16,
    /// kube-vip, the static pod that holds the VIP. Default: the image below, no fixed interface.
    #[serde(default)]
    pub kube_vip: KubeVip,
    /// What the control-plane machines are: `bare-metal` hosts (the default) or `kvm` VMs on the
    /// hypervisors of `kvm`.
    #[serde(default, skip_serializing_if = "Machines::is_bare_metal")]
    pub machines: Machines,
    /// The VMs' size and NICs when `machines` is `kvm`. Default: 2 vCPUs, 2Gi, 20Gi, DHCP on
    /// the libvirt network `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<Vm>,
}

/// What a group of machines (the control plane, a worker pool) runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Machines {
    /// BareMetalHosts claimed through Metal3MachineTemplates.
    #[default]
    BareMetal,
    /// libvirt VMs through KVMMachineTemplates, on the hypervisors of `kvm`.
    Kvm,
}

impl Machines {
    /// Whether these are bare-metal hosts (the default).
    pub fn is_bare_metal(&self) -> bool {
        *self == Self::BareMetal
    }
}

/// A VM's size, NICs and extra volumes (a KVMMachineTemplate's spec).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Vm {
    /// Virtual CPUs. Default: 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    /// Memory, a quantity (`4Gi`). Default: 2Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Root disk size, a quantity. Default: 20Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
    /// Size of the container runtime's volume, a quantity. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_volume_size: Option<String>,
    /// NICs, in order. Default: one NIC on the libvirt network `default`, by DHCP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<VmNetwork>,
}

/// One NIC of a VM.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VmNetwork {
    /// A libvirt network. Default: `default` (unless `bridge` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// A host bridge instead of a libvirt network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<String>,
    /// A static address with prefix (`10.0.0.5/24`), for a group of one VM (every VM of the group
    /// would get it). Default: DHCP, or `ipPool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The gateway of a static address, or of the addresses of `ipPool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Static addresses for a group of several VMs: each VM takes its own from this range (an
    /// IPPool `<template>-nic<N>` rendered beside the group's KVMMachineTemplate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_pool: Option<VmIpPool>,
}

/// A range of addresses the VMs of a group take theirs from, one each.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VmIpPool {
    /// First address of the range (`10.0.0.40`).
    pub start: String,
    /// Last address of the range, included (`10.0.0.49`).
    pub end: String,
    /// Prefix length of the addresses (`24`).
    pub prefix: u8,
}

/// The KVM hypervisors VMs run on, their base image and node settings.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Kvm {
    /// The libvirt hypervisors; each is a failure domain.
    pub hypervisors: Vec<Hypervisor>,
    /// The base image of every VM's root disk.
    pub image: VmImage,
    /// DNS servers written into every VM's network config. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_servers: Vec<String>,
    /// NTP servers written into every VM's cloud-config. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ntp_servers: Vec<String>,
}

/// One libvirt hypervisor.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Hypervisor {
    /// Name: the failure domain and the `HYPERVISOR` of `libvirt://HYPERVISOR/UUID` provider IDs.
    pub name: String,
    /// libvirt URI (`qemu:///system`, `qemu+ssh://root@hv1/system`, `qemu+tls://hv1/system`).
    pub uri: String,
    /// Storage pool for the VMs' volumes. Default: `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Whether control-plane VMs may run here. Default: `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    /// libvirt domain type, `kvm` or `qemu` (software emulation). Default: `kvm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_type: Option<String>,
}

/// The base image of the VMs: a file on the management host, verified by its digest.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VmImage {
    /// `file://` URL of a qcow2 (or raw) image on the host running capstan.
    pub url: String,
    /// Hex sha256 (or sha512) digest of the image.
    pub checksum: String,
    /// `sha256` or `sha512`. Default: `sha256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_type: Option<String>,
    /// `qcow2` or `raw`. Default: `qcow2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

fn default_api_port() -> u16 {
    6443
}

/// kube-vip settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeVip {
    /// kube-vip image. Default: `ghcr.io/kube-vip/kube-vip:v1.0.1`.
    #[serde(default = "default_kube_vip_image")]
    pub image: String,
    /// Interface kube-vip announces the VIP on (`vip_interface`), the same name on every
    /// control-plane host. Default: unset, and kube-vip uses the interface that holds the address in
    /// the VIP's subnet; capstan checks that this interface has the same name on every
    /// control-plane host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Leader-election lease duration in seconds (`vip_leaseduration`). Default: `5`.
    #[serde(default = "default_lease_duration")]
    pub lease_duration_seconds: u32,
    /// Leader-election renew deadline in seconds (`vip_renewdeadline`). Default: `3`.
    #[serde(default = "default_renew_deadline")]
    pub renew_deadline_seconds: u32,
    /// Leader-election retry period in seconds (`vip_retryperiod`). Default: `1`.
    #[serde(default = "default_retry_period")]
    pub retry_period_seconds: u32,
}

impl Default for KubeVip {
    fn default() -> Self {
        Self {
            image: default_kube_vip_image(),
            interface: None,
            lease_duration_seconds: default_lease_duration(),
            renew_deadline_seconds: default_renew_deadline(),
            retry_period_seconds: default_retry_period(),
        }
    }
}

fn default_kube_vip_image() -> String {
    "ghcr.io/kube-vip/kube-vip:v1.0.1".to_owned()
}

fn default_lease_duration() -> u32 {
    5
}

fn default_renew_deadline() -> u32 {
    3
}

fn default_retry_period() -> u32 {
    1
}

/// A pool of identical worker nodes: a MachineDeployment with its templates.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkerPool {
    /// Pool name, a DNS-1123 label. The MachineDeployment is named `<cluster>-<pool>`.
    pub name: String,
    /// Number of worker machines. At least this many worker hosts must be in the pool.
    pub replicas: u32,
    /// Further labels a host must carry (in its `labels`) to be used by this pool, on top of being a
    /// worker of this pool. Default: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_selector: BTreeMap<String, String>,
    /// What the pool's machines are: `bare-metal` hosts (the default) or `kvm` VMs.
    #[serde(default, skip_serializing_if = "Machines::is_bare_metal")]
    pub machines: Machines,
    /// The VMs' size and NICs when `machines` is `kvm` (defaults as for the control plane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<Vm>,
}

/// The OS image written to each host's disk when a machine claims it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Image {
    /// URL the image is downloaded from (by Ironic), `http://` or `https://`.
    pub url: String,
    /// The image's checksum as hex digits, or the URL of a checksum file.
    pub checksum: String,
    /// Algorithm of `checksum`: `md5` (32 hex digits), `sha256` (64) or `sha512` (128). Default:
    /// inferred from the length of a hex checksum; unset for a checksum URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_type: Option<ChecksumType>,
    /// Disk format: `raw`, `qcow2`, `vdi`, `vmdk` or `live-iso`. Default: unset (Ironic detects it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DiskFormat>,
}

/// Checksum algorithms Metal3 accepts: the one type the agent protocol uses too.
pub use capstan_model::agent::ChecksumType;

/// Disk image formats Metal3 accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskFormat {
    /// A raw disk image.
    Raw,
    /// QEMU copy-on-write.
    Qcow2,
    /// VirtualBox.
    Vdi,
    /// VMware.
    Vmdk,
    /// A live ISO booted instead of written to disk.
    LiveIso,
}

impl DiskFormat {
    /// The name Metal3 uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Qcow2 => "qcow2",
            Self::Vdi => "vdi",
            Self::Vmdk => "vmdk",
            Self::LiveIso => "live-iso",
        }
    }
}

/// A login user created on every node.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct User {
    /// Login name.
    pub name: String,
    /// SSH public keys allowed to log in as this user (`ssh-ed25519 AAAA... comment`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
    /// sudo rule for this user, as a sudoers entry (`ALL=(ALL) NOPASSWD:ALL`). Default: no sudo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sudo: Option<String>,
}

/// Waiting for DNS before kubeadm runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DnsWait {
    /// Whether to wait at all. Default: `true`.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Host name that must resolve before kubeadm runs. Default: `registry.k8s.io`.
    #[serde(default = "default_dns_wait_host")]
    pub host: String,
    /// How long to wait, in seconds, before failing the node's bootstrap with a message. Default:
    /// `60`.
    #[serde(default = "default_dns_wait_timeout")]
    pub timeout_seconds: u32,
}

impl Default for DnsWait {
    fn default() -> Self {
        Self {
            enabled: true,
            host: default_dns_wait_host(),
            timeout_seconds: default_dns_wait_timeout(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_dns_wait_host() -> String {
    "registry.k8s.io".to_owned()
}

fn default_dns_wait_timeout() -> u32 {
    60
}

/// The Cilium CNI.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Cilium {
    /// Path of the Cilium manifest, relative to the spec file: the output of your own
    /// `cilium install --dry-run` (or `helm template`). `capstan render` prints the exact command.
    pub manifest: String,
    /// Cilium version for the printed `cilium install` command. Default: the version of the
    /// `cilium` image in the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// ClusterResourceSet strategy: `ApplyOnce` (install once, then hand over to other tools) or
    /// `Reconcile` (re-apply whenever the manifest changes). Default: `ApplyOnce`.
    #[serde(default)]
    pub strategy: CrsStrategy,
    /// What to do when the manifest lacks settings this cluster needs (API server endpoint = the
    /// VIP, kube-proxy replacement, native routing over the pod CIDR, BGP control plane): `true`
    /// patches them in and reports each fix; `false` refuses with the list. Default: `true`.
    #[serde(default = "default_true")]
    pub fix: bool,
}

impl Default for Cilium {
    fn default() -> Self {
        Self {
            manifest: String::new(),
            version: None,
            strategy: CrsStrategy::default(),
            fix: true,
        }
    }
}

/// How a ClusterResourceSet applies its resources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CrsStrategy {
    /// Apply once when the cluster comes up.
    #[default]
    ApplyOnce,
    /// Re-apply when the resources change.
    Reconcile,
}

impl CrsStrategy {
    /// The name CAPI uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApplyOnce => "ApplyOnce",
            Self::Reconcile => "Reconcile",
        }
    }
}

/// BGP: the nodes peer with upstream routers and announce their pod ranges (and optionally
/// LoadBalancer addresses).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Bgp {
    /// The cluster's autonomous system number (1 to 4294967295), used by every node.
    pub local_asn: u64,
    /// The routers every node peers with.
    pub peers: Vec<BgpPeer>,
    /// Also announce the addresses of LoadBalancer Services. Default: `false`.
    #[serde(default)]
    pub advertise_load_balancer_ips: bool,
    /// eBGP multihop TTL on the nodes' side, for routers that are not on the nodes' subnet.
    /// Default: `10`.
    #[serde(default = "default_node_multihop")]
    pub ebgp_multihop: u32,
    /// BGP hold time in seconds. Default: `90`.
    #[serde(default = "default_hold_time")]
    pub hold_time_seconds: u32,
    /// BGP keepalive interval in seconds. Default: `30`.
    #[serde(default = "default_keepalive")]
    pub keep_alive_time_seconds: u32,
    /// Graceful restart restart time in seconds; `0` turns graceful restart off. Default: `15`.
    #[serde(default = "default_restart_time")]
    pub graceful_restart_seconds: u32,
    /// The router side, rendered as an FRR configuration. Default: as described per field.
    #[serde(default)]
    pub router: Router,
}

fn default_node_multihop() -> u32 {
    10
}

fn default_hold_time() -> u32 {
    90
}

fn default_keepalive() -> u32 {
    30
}

fn default_restart_time() -> u32 {
    15
}

/// One upstream router.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BgpPeer {
    /// The router's address, as the nodes reach it.
    pub address: String,
    /// The router's autonomous system number.
    pub asn: u64,
}

/// The router side of BGP, rendered as FRR configuration (`router/frr.conf`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Router {
    /// `bgp router-id`. Default: the peer's address (IPv4 peers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_id: Option<String>,
    /// Name of the FRR peer-group holding the cluster's nodes. Default: the cluster name in upper
    /// case without punctuation (`capi-1` → `CAPI1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_group: Option<String>,
    /// Accept the nodes' routes but announce nothing to them. Default: `true`.
    #[serde(default = "default_true")]
    pub receive_only: bool,
    /// `update-source` of the peer-group (an address or interface of the router). Default: unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_source: Option<String>,
    /// eBGP multihop TTL on the router's side. Default: `255`.
    #[serde(default = "default_router_multihop")]
    pub ebgp_multihop: u32,
}

impl Default for Router {
    fn default() -> Self {
        Self {
            router_id: None,
            peer_group: None,
            receive_only: true,
            update_source: None,
            ebgp_multihop: default_router_multihop(),
        }
    }
}

fn default_router_multihop() -> u32 {
    255
}

/// MachineHealthChecks: machines whose node is not Ready for too long are replaced.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthCheck {
    /// Check the control-plane machines. Needs 3 or more control-plane replicas to be useful: a
    /// control plane with fewer replicas cannot replace a member without losing etcd quorum.
    /// Default: `true`.
    #[serde(default = "default_true")]
    pub control_plane: bool,
    /// Check the machines of every worker pool. Default: `true`.
    #[serde(default = "default_true")]
    pub workers: bool,
    /// How long a node may be `Ready: False` or `Ready: Unknown` before its machine is replaced, in
    /// seconds. Default: `300`.
    #[serde(default = "default_unhealthy_timeout")]
    pub unhealthy_timeout_seconds: u32,
    /// How long a new machine may take to become a node, in seconds. Bare-metal provisioning
    /// writes a whole disk image, so this is longer than Cluster API's default. Default: `1800`.
    #[serde(default = "default_node_startup_timeout")]
    pub node_startup_timeout_seconds: u32,
    /// Stop replacing machines when more than this many are unhealthy: a count (`2`) or a
    /// percentage (`"40%"`). Default: unset (no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unhealthy: Option<IntOrPercent>,
}

fn default_unhealthy_timeout() -> u32 {
    300
}

fn default_node_startup_timeout() -> u32 {
    1800
}

/// A count or a percentage (`"40%"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrPercent {
    /// A count.
    Count(u32),
    /// A percentage, written `"NN%"`.
    Percent(String),
}

/// Settings every host gets unless it sets its own.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostDefaults {
    /// BMC credentials and certificate checking shared by the hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc: Option<BmcDefaults>,
    /// DNS servers and search domains for hosts whose `network` has no `dns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// Root device hints for hosts without their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<RootDeviceHints>,
}

/// BMC settings shared by hosts.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BmcDefaults {
    /// Credentials for hosts whose `bmc` has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<BmcCredentials>,
    /// Skip TLS certificate verification of the BMCs (self-signed certificates). Default: `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_certificate_verification: Option<bool>,
}

/// One machine.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Host {
    /// Host name: names its BareMetalHost and, once provisioned, its Kubernetes node. Lowercase
    /// letters, digits, `-` and `.`.
    pub name: String,
    /// `control-plane` or `worker`.
    pub role: Role,
    /// The worker pool this host belongs to. Default: the only worker pool, when there is exactly
    /// one. Not used for control-plane hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Extra labels on the BareMetalHost (for pools' `hostSelector` and your own use). Default:
    /// none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// How to reach the host's BMC.
    pub bmc: Bmc,
    /// MAC address of the NIC the host boots from. Default: the MAC of the first entry of
    /// `network.links`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mac_address: Option<String>,
    /// Which disk to write the image to. Default: `hostDefaults.rootDeviceHints`, else Ironic's
    /// choice (the smallest disk of 4 GiB or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<RootDeviceHints>,
    /// The host's network configuration, written into its `networkData` as OpenStack
    /// `network_data.json` and applied by cloud-init on first boot.
    pub network: HostNetwork,
}

/// The role of a host in the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Runs the Kubernetes control plane (and etcd).
    #[default]
    ControlPlane,
    /// Runs workloads, in a worker pool.
    Worker,
}

impl Role {
    /// The name used in labels and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ControlPlane => "control-plane",
            Self::Worker => "worker",
        }
    }
}

/// A host's baseboard management controller.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Bmc {
    /// BMC address; its scheme names the driver, e.g.
    /// `redfish-virtualmedia+https://10.0.0.5/redfish/v1/Systems/1`, `ipmi://10.0.0.5:623`,
    /// `idrac-virtualmedia://10.0.0.5/redfish/v1/Systems/System.Embedded.1`.
    pub address: String,
    /// Login for the BMC. Default: `hostDefaults.bmc.credentials`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<BmcCredentials>,
    /// Skip TLS certificate verification of this BMC. Default:
    /// `hostDefaults.bmc.disableCertificateVerification`, else `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_certificate_verification: Option<bool>,
}

/// A BMC login. Give the password in exactly one way; it is written only into the host's BMC
/// Secret and never shown in messages.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BmcCredentials {
    /// User name.
    pub username: String,
    /// The password itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// A file holding the password (one trailing newline is ignored), relative to the spec file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<String>,
    /// An environment variable holding the password, read when rendering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
}

impl fmt::Debug for BmcCredentials {
    // The password must not reach logs or panic messages, whichever way it was given.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BmcCredentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("password_file", &self.password_file)
            .field("password_env", &self.password_env)
            .finish()
    }
}

/// Hints that pick the disk the image is written to; every hint given must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RootDeviceHints {
    /// Linux device name (`/dev/sda`) or a `/dev/disk/by-path/...` link; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// SCSI address (`0:0:0:0`); exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hctl: Option<String>,
    /// Device model; substring match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Device vendor; substring match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// Serial number; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    /// Smallest acceptable size in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size_gigabytes: Option<u32>,
    /// World wide name; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    /// World wide name with vendor extension; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_with_extension: Option<String>,
    /// Vendor extension of the world wide name; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_vendor_extension: Option<String>,
    /// `true` for spinning disks, `false` for solid state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
}

/// A host's network: physical links, bonds, VLANs, addresses, routes and DNS.
///
/// Interface names are the names the host's OS gives them (check them in the BareMetalHost's
/// inspection data: `kubectl get bmh HOST -o jsonpath='{.status.hardware.nics}'`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostNetwork {
    /// Physical NICs, identified by MAC address.
    pub links: Vec<PhysicalLink>,
    /// Bonds of physical links. cloud-init names bonds `bond0`, `bond1`, … in the order they are
    /// listed, so they must be named that way. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bonds: Vec<Bond>,
    /// VLANs on a physical link or a bond; a VLAN's interface is named `<link>.<id>`
    /// (`bond0.2000`). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vlans: Vec<Vlan>,
    /// IP addresses. The first static address is the host's node address (the one the BGP router
    /// peers with).
    pub addresses: Vec<Address>,
    /// Static routes besides the default route. Each goes through the address whose subnet holds
    /// its gateway. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<StaticRoute>,
    /// DNS servers and search domains. Default: `hostDefaults.dns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
}

/// A physical NIC.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PhysicalLink {
    /// Interface name (`ens2`, `enp1s0f0`).
    pub name: String,
    /// MAC address, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// MTU. Default: the OS default (1500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
}

/// A bond of physical links.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Bond {
    /// Bond name: `bond0` for the first bond, `bond1` for the second, …
    pub name: String,
    /// Bonding mode: `802.3ad`, `balance-rr`, `active-backup`, `balance-xor`, `broadcast`,
    /// `balance-tlb` or `balance-alb`.
    pub mode: BondMode,
    /// Names of the physical links in the bond (from `links`). The bond takes the MAC address of
    /// the first.
    pub links: Vec<String>,
    /// MTU. Default: the OS default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Link monitoring interval in milliseconds (`miimon`). Default: unset (the kernel's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miimon: Option<u32>,
    /// LACP rate for `802.3ad`: `slow` or `fast`. Default: unset (`slow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lacp_rate: Option<LacpRate>,
    /// Transmit hash policy: `layer2`, `layer2+3`, `layer3+4`, `encap2+3` or `encap3+4`. Default:
    /// unset (`layer2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xmit_hash_policy: Option<XmitHashPolicy>,
    /// Delay in milliseconds before enabling a recovered link (`updelay`). Default: unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updelay: Option<u32>,
    /// Delay in milliseconds before disabling a failed link (`downdelay`). Default: unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downdelay: Option<u32>,
}

/// Linux bonding modes (those of `network_data.json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum BondMode {
    /// IEEE 802.3ad LACP.
    #[default]
    #[serde(rename = "802.3ad")]
    Lacp,
    /// Round robin.
    #[serde(rename = "balance-rr")]
    BalanceRr,
    /// One active link, the others standing by.
    #[serde(rename = "active-backup")]
    ActiveBackup,
    /// Transmit hash.
    #[serde(rename = "balance-xor")]
    BalanceXor,
    /// Every frame on every link.
    #[serde(rename = "broadcast")]
    Broadcast,
    /// Adaptive transmit load balancing.
    #[serde(rename = "balance-tlb")]
    BalanceTlb,
    /// Adaptive load balancing.
    #[serde(rename = "balance-alb")]
    BalanceAlb,
}

impl BondMode {
    /// The name `network_data.json` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lacp => "802.3ad",
            Self::BalanceRr => "balance-rr",
            Self::ActiveBackup => "active-backup",
            Self::BalanceXor => "balance-xor",
            Self::Broadcast => "broadcast",
            Self::BalanceTlb => "balance-tlb",
            Self::BalanceAlb => "balance-alb",
        }
    }
}

/// LACP rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LacpRate {
    /// Every 30 seconds.
    Slow,
    /// Every second.
    Fast,
}

impl LacpRate {
    /// The kernel's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Slow => "slow",
            Self::Fast => "fast",
        }
    }
}

/// Bond transmit hash policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum XmitHashPolicy {
    /// MAC addresses.
    #[serde(rename = "layer2")]
    Layer2,
    /// MAC and IP addresses.
    #[serde(rename = "layer2+3")]
    Layer23,
    /// IP addresses and ports.
    #[serde(rename = "layer3+4")]
    Layer34,
    /// Inner MAC and IP addresses of encapsulated traffic.
    #[serde(rename = "encap2+3")]
    Encap23,
    /// Inner IP addresses and ports of encapsulated traffic.
    #[serde(rename = "encap3+4")]
    Encap34,
}

impl XmitHashPolicy {
    /// The kernel's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Layer2 => "layer2",
            Self::Layer23 => "layer2+3",
            Self::Layer34 => "layer3+4",
            Self::Encap23 => "encap2+3",
            Self::Encap34 => "encap3+4",
        }
    }
}

/// A VLAN.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Vlan {
    /// VLAN ID, 1 to 4094.
    pub id: u16,
    /// The physical link or bond the VLAN runs on.
    pub link: String,
    /// MTU. Default: the OS default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
}

/// An IP address on a link, bond or VLAN: static (`cidr`) or DHCP (`dhcp: true`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Address {
    /// The interface: a physical link, bond or VLAN (`bond0.2000`) name.
    pub link: String,
    /// Static address with its prefix length (`10.250.250.20/24`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    /// Take the address from DHCP (IPv4) instead. Default: `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dhcp: bool,
    /// Default gateway through this address; inside its subnet. At most one per IP family and host.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

/// A static route.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticRoute {
    /// Destination network (`192.168.254.0/24`).
    pub to: String,
    /// Gateway, inside the subnet of one of the host's static addresses.
    pub via: String,
}

/// DNS resolver settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Dns {
    /// DNS server addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// Search domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_types_know_their_lengths() {
        assert_eq!(ChecksumType::for_hex_len(64), Some(ChecksumType::Sha256));
        assert_eq!(ChecksumType::for_hex_len(32), Some(ChecksumType::Md5));
        assert_eq!(ChecksumType::for_hex_len(128), Some(ChecksumType::Sha512));
        assert_eq!(ChecksumType::for_hex_len(40), None);
    }

    #[test]
    fn credentials_debug_hides_the_password() {
        let credentials = BmcCredentials {
            username: "admin".into(),
            password: Some("hunter2".into()),
            ..BmcCredentials::default()
        };
        let shown = format!("{credentials:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("admin"));
    }

    #[test]
    fn enums_use_the_names_users_write() {
        let mode: BondMode = serde_json::from_value(serde_json::json!("802.3ad")).unwrap();
        assert_eq!(mode.as_str(), "802.3ad");
        let policy: XmitHashPolicy = serde_json::from_value(serde_json::json!("layer3+4")).unwrap();
        assert_eq!(policy.as_str(), "layer3+4");
        let role: Role = serde_json::from_value(serde_json::json!("control-plane")).unwrap();
        assert_eq!(role, Role::ControlPlane);
        let format: DiskFormat = serde_json::from_value(serde_json::json!("live-iso")).unwrap();
        assert_eq!(format.as_str(), "live-iso");
    }
}
