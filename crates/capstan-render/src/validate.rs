//! Semantic checks of a spec, all at once: every problem is collected (not only the first), each
//! with the `file:line` and field it is about. A spec that passes becomes a [`Plan`]: the same
//! settings parsed into typed values with defaults applied, which rendering consumes without
//! further checks.
//!
//! Errors stop rendering; warnings (an even number of control-plane replicas, a VIP outside every
//! host subnet, …) are reported with the bundle.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use capstan_model::agent::check_download_url;
use capstan_model::capm3::HostSelector;
use capstan_model::path::FieldPath;
use capstan_model::version::KubernetesVersion;
use ipnet::IpNet;

use crate::error::Problem;
use crate::network::{
    AddressKind, BondLink, HostAddress, HostInterfaces, Phy, ResolverSettings, StaticRoute,
    VlanLink, vlan_name,
};
use crate::spec::{
    BmcCredentials, ChecksumType, Host, IntOrPercent, Machines, Role, RootDeviceHints, Spec, Vm,
    VmIpPool, WorkerPool,
};
use crate::{LABEL_CLUSTER, LABEL_POOL, LABEL_ROLE};

/// The outcome of checking a spec: the plan (when there are no errors), and the warnings.
#[derive(Debug)]
pub(crate) struct Checked<'s> {
    pub plan: Option<Plan<'s>>,
    pub errors: Vec<Problem>,
    pub warnings: Vec<Problem>,
}

/// A checked spec, parsed.
#[derive(Debug)]
pub(crate) struct Plan<'s> {
    pub spec: &'s Spec,
    pub version: KubernetesVersion,
    pub vip: IpAddr,
    pub pod_cidr: IpNet,
    pub service_cidr: IpNet,
    /// Given or inferred from the checksum's length; `None` for a checksum URL without a type.
    pub checksum_type: Option<ChecksumType>,
    pub hosts: Vec<HostPlan<'s>>,
    pub pools: Vec<PoolPlan<'s>>,
    pub bgp: Option<BgpPlan>,
}

/// A checked host.
#[derive(Debug)]
pub(crate) struct HostPlan<'s> {
    pub host: &'s Host,
    /// Index in `spec.hosts`, for messages.
    pub index: usize,
    /// Labels of its BareMetalHost: capstan's selection labels plus the host's own.
    pub labels: BTreeMap<String, String>,
    pub boot_mac: String,
    /// The first static address: the node address BGP routers peer with.
    pub node_ip: IpAddr,
    pub interfaces: HostInterfaces,
    pub credentials: &'s BmcCredentials,
    /// Path of the credentials in the spec (the host's own or the defaults'), for messages.
    pub credentials_path: FieldPath,
    pub disable_certificate_verification: Option<bool>,
    pub root_device_hints: Option<&'s RootDeviceHints>,
}

/// A checked worker pool.
#[derive(Debug)]
pub(crate) struct PoolPlan<'s> {
    pub pool: &'s WorkerPool,
    /// The Metal3MachineTemplate's host selector.
    pub host_selector: BTreeMap<String, String>,
}

/// Checked BGP settings.
#[derive(Debug)]
pub(crate) struct BgpPlan {
    pub local_asn: u32,
    pub peers: Vec<PeerPlan>,
    pub peer_group: String,
    pub router_id: Option<String>,
}

/// One upstream router.
#[derive(Debug)]
pub(crate) struct PeerPlan {
    pub address: IpAddr,
    pub asn: u32,
    /// Name of the peer in the CiliumBGPClusterConfig.
    pub name: String,
    /// Name of its CiliumBGPPeerConfig.
    pub config_name: String,
}

/// The host selector of the control-plane machines.
pub(crate) fn control_plane_selector(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_CLUSTER.to_owned(), cluster.to_owned()),
        (
            LABEL_ROLE.to_owned(),
            Role::ControlPlane.as_str().to_owned(),
        ),
    ])
}

/// The host selector of a worker pool's machines.
pub(crate) fn pool_selector(cluster: &str, pool: &WorkerPool) -> BTreeMap<String, String> {
    let mut selector = pool.host_selector.clone();
    selector.insert(LABEL_CLUSTER.to_owned(), cluster.to_owned());
    selector.insert(LABEL_ROLE.to_owned(), Role::Worker.as_str().to_owned());
    selector.insert(LABEL_POOL.to_owned(), pool.name.clone());
    selector
}

/// Checks a spec.
pub(crate) fn check(spec: &Spec) -> Checked<'_> {
    let mut checker = Checker {
        spec,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let plan = checker.plan();
    Checked {
        plan: if checker.errors.is_empty() {
            plan
        } else {
            None
        },
        errors: checker.errors,
        warnings: checker.warnings,
    }
}

struct Checker<'s> {
    spec: &'s Spec,
    errors: Vec<Problem>,
    warnings: Vec<Problem>,
}

fn path(text: &str) -> FieldPath {
    FieldPath::parse(text)
}

impl<'s> Checker<'s> {
    fn error(&mut self, at: &FieldPath, message: impl Into<String>) {
        let problem = self.spec.source.problem(at, message);
        self.errors.push(problem);
    }

    fn warn(&mut self, at: &FieldPath, message: impl Into<String>) {
        let problem = self.spec.source.problem(at, message);
        self.warnings.push(problem);
    }

    /// Runs every check; returns a plan when every part could be parsed (the caller drops it if
    /// any error was recorded).
    fn plan(&mut self) -> Option<Plan<'s>> {
        let spec = self.spec;
        self.check_names();
        let version = self.check_version();
        let (pod_cidr, service_cidr) = self.check_cluster_networks();
        let vip = self.check_vip(pod_cidr.as_ref(), service_cidr.as_ref());
        let checksum_type = self.check_image();
        self.check_users();
        self.check_dns_wait();
        self.check_health_check();
        let pools = self.check_pools();
        self.check_kvm();
        let hosts = self.check_hosts(pod_cidr.as_ref(), service_cidr.as_ref());
        self.check_replicas(&hosts, &pools);
        if let Some(vip) = vip {
            self.check_vip_against_hosts(vip, &hosts);
        }
        let bgp = self.check_bgp();
        Some(Plan {
            spec,
            version: version?,
            vip: vip?,
            pod_cidr: pod_cidr?,
            service_cidr: service_cidr?,
            checksum_type,
            hosts,
            pools,
            bgp,
        })
    }

    fn check_names(&mut self) {
        let spec = self.spec;
        if !is_dns1123_label(&spec.name) {
            self.error(
                &path("name"),
                format!(
                    "{:?} is not a valid cluster name; use lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters",
                    spec.name
                ),
            );
        } else if let Some(refusal) = derived_name_refusal(
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            &crate::cluster::Names::new(&spec.name).control_plane(),
        ) {
            self.error(
                &path("name"),
                format!(
                    "the control plane's name `{}-control-plane` {refusal}; shorten the cluster name",
                    spec.name
                ),
            );
        } else if spec.name.len() > 30 {
            // The MachineDeployments are `<cluster>-<pool>`, whose names have a bound of their own.
            self.warn(
                &path("name"),
                "long cluster names leave little room for pool names: `<cluster>-<pool>` must fit the MachineDeployment name limit",
            );
        }
        if !is_dns1123_label(&spec.namespace) {
            self.error(
                &path("namespace"),
                format!(
                    "{:?} is not a valid namespace; use lowercase letters, digits and '-', at most 63 characters",
                    spec.namespace
                ),
            );
        }
    }

    fn check_version(&mut self) -> Option<KubernetesVersion> {
        match self.spec.kubernetes.version.parse::<KubernetesVersion>() {
            Ok(version) => {
                if !version.at_least(1, 28) {
                    self.warn(
                        &path("kubernetes.version"),
                        format!("{version} is older than the Kubernetes versions current Cluster API releases support (1.28 and later)"),
                    );
                }
                Some(version)
            }
            Err(err) => {
                self.error(&path("kubernetes.version"), err.to_string());
                None
            }
        }
    }

    fn parse_network(&mut self, at: &FieldPath, text: &str) -> Option<IpNet> {
        match text.parse::<IpNet>() {
            Ok(net) if net.trunc() == net => Some(net),
            Ok(net) => {
                self.error(
                    at,
                    format!(
                        "{text} has host bits set; write the network address, {}",
                        net.trunc()
                    ),
                );
                None
            }
            Err(_) => {
                self.error(
                    at,
                    format!(
                        "{text:?} is not a CIDR; write it as ADDRESS/PREFIX, e.g. 10.244.0.0/16"
                    ),
                );
                None
            }
        }
    }

    fn check_cluster_networks(&mut self) -> (Option<IpNet>, Option<IpNet>) {
        let kubernetes = &self.spec.kubernetes;
        let pods = self.parse_network(&path("kubernetes.podCidr"), &kubernetes.pod_cidr);
        let services =
            self.parse_network(&path("kubernetes.serviceCidr"), &kubernetes.service_cidr);
        if let (Some(p), Some(s)) = (pods, services)
            && overlaps(&p, &s)
        {
            self.error(
                &path("kubernetes.serviceCidr"),
                format!(
                    "the service network {s} overlaps the pod network {p}; choose disjoint ranges"
                ),
            );
        }
        (pods, services)
    }

    fn check_vip(&mut self, pods: Option<&IpNet>, services: Option<&IpNet>) -> Option<IpAddr> {
        let cp = &self.spec.control_plane;
        if cp.port == 0 {
            self.error(
                &path("controlPlane.port"),
                "port 0 is not a usable API server port",
            );
        }
        let Ok(vip) = cp.vip.parse::<IpAddr>() else {
            self.error(
                &path("controlPlane.vip"),
                format!("{:?} is not an IP address; the VIP is a bare address such as 10.250.250.29 (no prefix length)", cp.vip),
            );
            return None;
        };
        for (net, what) in [(pods, "pod"), (services, "service")] {
            if let Some(net) = net
                && net.contains(&vip)
            {
                self.error(
                        &path("controlPlane.vip"),
                        format!("the VIP {vip} is inside the {what} network {net}; use an address of the control-plane hosts' subnet"),
                    );
            }
        }
        if cp.kube_vip.image.trim().is_empty() {
            self.error(
                &path("controlPlane.kubeVip.image"),
                "the kube-vip image is empty",
            );
        }
        let lease = &cp.kube_vip;
        if lease.retry_period_seconds == 0
            || lease.retry_period_seconds >= lease.renew_deadline_seconds
            || lease.renew_deadline_seconds >= lease.lease_duration_seconds
        {
            self.error(
                &path("controlPlane.kubeVip"),
                "leader election needs 0 < retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds (defaults 1, 3, 5)",
            );
        }
        Some(vip)
    }

    fn check_image(&mut self) -> Option<ChecksumType> {
        let image = &self.spec.image;
        // The agent downloads the image (and a checksum file) itself: what it cannot fetch would
        // only fail at provisioning, after the host was booted for nothing.
        if let Err(err) = check_download_url(&image.url) {
            self.error(&path("image.url"), err.to_string());
        }
        let checksum = image.checksum.trim();
        if checksum.contains("://") {
            if let Err(err) = check_download_url(checksum) {
                self.error(&path("image.checksum"), err.to_string());
            }
            return image.checksum_type;
        }
        if checksum.is_empty() || !checksum.bytes().all(|b| b.is_ascii_hexdigit()) {
            self.error(
                &path("image.checksum"),
                "the checksum must be hex digits (md5, sha256 or sha512) or the URL of a checksum file",
            );
            return image.checksum_type;
        }
        match image.checksum_type {
            Some(kind) if kind.hex_len() != checksum.len() => {
                self.error(
                    &path("image.checksum"),
                    format!(
                        "a {} checksum has {} hex digits, this one has {}; check checksumType or the checksum",
                        kind.name(),
                        kind.hex_len(),
                        checksum.len()
                    ),
                );
                Some(kind)
            }
            Some(kind) => Some(kind),
            None => {
                let inferred = ChecksumType::for_hex_len(checksum.len());
                if inferred.is_none() {
                    self.error(
                        &path("image.checksum"),
                        format!(
                            "{} hex digits is not the length of an md5 (32), sha256 (64) or sha512 (128) checksum",
                            checksum.len()
                        ),
                    );
                }
                inferred
            }
        }
    }

    /// The KVM side: `kvm` is there when machines run on VMs, and reads.
    fn check_kvm(&mut self) {
        let spec = self.spec;
        let control_plane_on_vms = spec.control_plane.machines == Machines::Kvm;
        let mut groups: Vec<(FieldPath, Option<&Vm>, u32)> = Vec::new();
        if control_plane_on_vms {
            groups.push((
                path("controlPlane"),
                spec.control_plane.vm.as_ref(),
                spec.control_plane.replicas,
            ));
        }
        for (i, pool) in spec.worker_pools.iter().enumerate() {
            if pool.machines == Machines::Kvm {
                groups.push((
                    path("workerPools").index(i),
                    pool.vm.as_ref(),
                    pool.replicas,
                ));
            } else if pool.vm.is_some() {
                self.warn(
                    &path("workerPools").index(i).key("vm"),
                    "`vm` is only used with `machines: kvm`; this pool runs on bare-metal hosts",
                );
            }
        }
        if !control_plane_on_vms && spec.control_plane.vm.is_some() {
            self.warn(
                &path("controlPlane.vm"),
                "`vm` is only used with `machines: kvm`; the control plane runs on bare-metal hosts",
            );
        }
        let Some(kvm) = &spec.kvm else {
            if let Some((at, _, _)) = groups.first() {
                self.error(
                    &at.key("machines"),
                    "machines run as KVM VMs but the spec has no `kvm` section: list the hypervisors and the VMs' base image there",
                );
            }
            return;
        };
        if groups.is_empty() {
            self.warn(
                &path("kvm"),
                "no machines run on KVM (`machines: kvm` on the control plane or a pool), so `kvm` is not used",
            );
        }
        let mut names = HashSet::new();
        if kvm.hypervisors.is_empty() {
            self.error(
                &path("kvm.hypervisors"),
                "list at least one hypervisor (name and libvirt uri)",
            );
        }
        for (i, hypervisor) in kvm.hypervisors.iter().enumerate() {
            let at = path("kvm.hypervisors").index(i);
            if !is_dns1123_label(&hypervisor.name) {
                self.error(
                    &at.key("name"),
                    format!("{:?} is not a valid hypervisor name; use lowercase letters, digits and '-'", hypervisor.name),
                );
            }
            if !names.insert(hypervisor.name.as_str()) {
                self.error(
                    &at.key("name"),
                    format!("hypervisor {:?} is listed twice", hypervisor.name),
                );
            }
            let scheme = hypervisor.uri.split("://").next().unwrap_or_default();
            if !hypervisor.uri.contains("://") || !LIBVIRT_SCHEMES.contains(&scheme) {
                self.error(
                    &at.key("uri"),
                    format!(
                        "{:?} is not a libvirt URI capstan can use; write one of {}:// (e.g. qemu+ssh://root@hv1/system)",
                        hypervisor.uri,
                        LIBVIRT_SCHEMES.join("://, ")
                    ),
                );
            }
            if let Some(kind) = &hypervisor.domain_type
                && kind != "kvm"
                && kind != "qemu"
            {
                self.error(
                    &at.key("domainType"),
                    format!("{kind:?} is not a domain type; write kvm or qemu"),
                );
            }
        }
        if control_plane_on_vms
            && !kvm.hypervisors.is_empty()
            && kvm
                .hypervisors
                .iter()
                .all(|h| h.control_plane == Some(false))
        {
            self.error(
                &path("controlPlane.machines"),
                "the control plane runs on KVM VMs but every hypervisor has `controlPlane: false`",
            );
        }
        if !kvm.image.url.starts_with("file://") {
            self.error(
                &path("kvm.image.url"),
                format!("{:?} is not a file:// URL: the VMs' base image is read from the host running capstan", kvm.image.url),
            );
        }
        let digits = match kvm.image.checksum_type.as_deref() {
            None | Some("sha256") => 64,
            Some("sha512") => 128,
            Some(other) => {
                self.error(
                    &path("kvm.image.checksumType"),
                    format!("{other:?} is not sha256 or sha512"),
                );
                0
            }
        };
        let checksum = kvm.image.checksum.trim();
        if digits > 0
            && (checksum.len() != digits || !checksum.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            self.error(
                &path("kvm.image.checksum"),
                format!("the base image's checksum must be {digits} hex digits"),
            );
        }
        if let Some(format) = kvm.image.format.as_deref()
            && format != "qcow2"
            && format != "raw"
        {
            self.error(
                &path("kvm.image.format"),
                format!("{format:?} is not qcow2 or raw"),
            );
        }
        for (i, server) in kvm.dns_servers.iter().enumerate() {
            if server.parse::<IpAddr>().is_err() {
                self.error(
                    &path("kvm.dnsServers").index(i),
                    format!("{server:?} is not an IP address"),
                );
            }
        }
        for (at, vm, replicas) in groups {
            let Some(vm) = vm else { continue };
            let at = at.key("vm");
            for (field, value) in [
                ("memory", &vm.memory),
                ("disk", &vm.disk),
                ("dockerVolumeSize", &vm.docker_volume_size),
            ] {
                if let Some(value) = value
                    && let Err(err) = capstan_model::kvm::quantity_bytes(value)
                {
                    self.error(&at.key(field), err.to_string());
                }
            }
            if vm.cpu == Some(0) {
                self.error(&at.key("cpu"), "a VM needs at least 1 vCPU");
            }
            for (n, network) in vm.networks.iter().enumerate() {
                let at = at.key("networks").index(n);
                if network.network.is_some() && network.bridge.is_some() {
                    self.error(&at, "set `network` or `bridge`, not both");
                }
                if let Some(address) = &network.address
                    && address.parse::<IpNet>().is_err()
                {
                    self.error(
                        &at.key("address"),
                        format!("{address:?} is not an address with a prefix length (10.0.0.5/24)"),
                    );
                }
                if let Some(gateway) = &network.gateway
                    && gateway.parse::<IpAddr>().is_err()
                {
                    self.error(
                        &at.key("gateway"),
                        format!("{gateway:?} is not an IP address"),
                    );
                }
                if network.address.is_some() && replicas > 1 {
                    self.error(
                        &at.key("address"),
                        format!("every one of the {replicas} VMs would get this address: give the group an `ipPool` (a range the VMs take one address each from) instead"),
                    );
                }
                if let Some(pool) = &network.ip_pool {
                    if network.address.is_some() {
                        self.error(
                            &at.key("ipPool"),
                            "set `address` (one VM) or `ipPool` (one address each from a range), not both",
                        );
                    }
                    self.check_vm_ip_pool(&at.key("ipPool"), pool, replicas);
                }
            }
        }
    }

    /// A VM group's address range: addresses of one family, in order, with room for every
    /// replica (and one more for rolling upgrades), and not holding the VIP.
    fn check_vm_ip_pool(&mut self, at: &FieldPath, pool: &VmIpPool, replicas: u32) {
        let (Ok(start), Ok(end)) = (pool.start.parse::<IpAddr>(), pool.end.parse::<IpAddr>())
        else {
            for (field, value) in [("start", &pool.start), ("end", &pool.end)] {
                if value.parse::<IpAddr>().is_err() {
                    self.error(&at.key(field), format!("{value:?} is not an IP address"));
                }
            }
            return;
        };
        let max_prefix = if start.is_ipv4() { 32 } else { 128 };
        if pool.prefix == 0 || pool.prefix > max_prefix {
            self.error(
                &at.key("prefix"),
                format!("prefix {} is not between 1 and {max_prefix}", pool.prefix),
            );
        }
        let Some(size) = range_size(start, end) else {
            self.error(
                &at.key("end"),
                format!("{end} does not come after {start} in the same address family"),
            );
            return;
        };
        if size < u128::from(replicas) {
            self.error(
                at,
                format!(
                    "{start}..{end} holds {size} addresses for {replicas} VMs: widen the range"
                ),
            );
        } else if size == u128::from(replicas) {
            self.warn(
                at,
                format!("{start}..{end} holds exactly {replicas} addresses: a rolling upgrade adds a VM before it removes one, leave at least one spare"),
            );
        }
        if let Ok(vip) = self.spec.control_plane.vip.parse::<IpAddr>()
            && range_size(start, vip).is_some()
            && range_size(vip, end).is_some()
        {
            self.error(
                at,
                format!("the control-plane endpoint {vip} is inside {start}..{end}: a VM would take the VIP; move one of them"),
            );
        }
    }

    fn check_users(&mut self) {
        let mut seen = HashSet::new();
        for (i, user) in self.spec.users.iter().enumerate() {
            let at = path("users").index(i);
            let valid_name = !user.name.is_empty()
                && user.name.len() <= 32
                && user.name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                })
                && !user.name.starts_with('-');
            if !valid_name {
                self.error(
                    &at.key("name"),
                    format!("{:?} is not a valid login name; use lowercase letters, digits, '_' and '-'", user.name),
                );
            }
            if !seen.insert(user.name.as_str()) {
                self.error(
                    &at.key("name"),
                    format!("user {:?} is listed twice", user.name),
                );
            }
            for (k, key) in user.ssh_authorized_keys.iter().enumerate() {
                let mut fields = key.split_whitespace();
                let looks_like_key = matches!(
                    (fields.next(), fields.next()),
                    (Some(kind), Some(_)) if kind.starts_with("ssh-") || kind.starts_with("ecdsa-") || kind.starts_with("sk-")
                );
                if !looks_like_key {
                    self.error(
                        &at.key("sshAuthorizedKeys").index(k),
                        "not an SSH public key; paste a line of a .pub file (`ssh-ed25519 AAAA... comment`)",
                    );
                }
            }
            if user.sudo.as_deref().is_some_and(|s| s.contains('\n')) {
                self.error(&at.key("sudo"), "a sudo rule is one line");
            }
        }
    }

    fn check_dns_wait(&mut self) {
        let wait = &self.spec.dns_wait;
        if !wait.enabled {
            return;
        }
        // The host name is written into a shell command line.
        let valid = !wait.host.is_empty()
            && wait.host.len() <= 253
            && wait
                .host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            && !wait.host.starts_with('-');
        if !valid {
            self.error(
                &path("dnsWait.host"),
                format!(
                    "{:?} is not a host name; use letters, digits, '.' and '-'",
                    wait.host
                ),
            );
        }
        if wait.timeout_seconds == 0 {
            self.error(
                &path("dnsWait.timeoutSeconds"),
                "the timeout must be at least 1 second; set `enabled: false` to skip the wait",
            );
        }
    }

    fn check_health_check(&mut self) {
        let Some(check) = &self.spec.health_check else {
            return;
        };
        if check.unhealthy_timeout_seconds == 0 {
            self.error(
                &path("healthCheck.unhealthyTimeoutSeconds"),
                "must be at least 1 second",
            );
        }
        if check.node_startup_timeout_seconds < 30 {
            self.error(
                &path("healthCheck.nodeStartupTimeoutSeconds"),
                "must be at least 30 seconds (Cluster API's minimum); provisioning usually takes 10 to 20 minutes",
            );
        }
        if let Some(IntOrPercent::Percent(text)) = &check.max_unhealthy {
            let valid = text
                .strip_suffix('%')
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n <= 100);
            if !valid {
                self.error(
                    &path("healthCheck.maxUnhealthy"),
                    format!("{text:?} is neither a count nor a percentage such as \"40%\""),
                );
            }
        }
        if check.control_plane && self.spec.control_plane.replicas < 3 {
            self.warn(
                &path("healthCheck.controlPlane"),
                "with fewer than 3 control-plane replicas a control-plane machine cannot be replaced without losing etcd quorum; the control-plane check will not remediate",
            );
        }
    }

    fn check_pools(&mut self) -> Vec<PoolPlan<'s>> {
        let spec = self.spec;
        let mut seen = HashSet::new();
        let mut pools = Vec::new();
        for (i, pool) in spec.worker_pools.iter().enumerate() {
            let at = path("workerPools").index(i);
            if !is_dns1123_label(&pool.name) {
                self.error(
                    &at.key("name"),
                    format!(
                        "{:?} is not a valid pool name; use lowercase letters, digits and '-'",
                        pool.name
                    ),
                );
            } else if let Some(refusal) = derived_name_refusal(
                "cluster.x-k8s.io",
                "MachineDeployment",
                &crate::cluster::Names::new(&spec.name).pool(&pool.name),
            ) {
                self.error(
                    &at.key("name"),
                    format!(
                        "the MachineDeployment's name `{}-{}` {refusal}; shorten the pool or cluster name",
                        spec.name, pool.name
                    ),
                );
            }
            if !seen.insert(pool.name.as_str()) {
                self.error(
                    &at.key("name"),
                    format!("pool {:?} is defined twice", pool.name),
                );
            }
            for (key, value) in &pool.host_selector {
                let at = at.key("hostSelector").key(key.as_str());
                self.check_label(&at, key, value);
                if is_capstan_label(key) {
                    self.error(
                        &at,
                        format!(
                            "{key} is set by capstan from the pool; select on your own host labels"
                        ),
                    );
                }
            }
            pools.push(PoolPlan {
                pool,
                host_selector: pool_selector(&spec.name, pool),
            });
        }
        pools
    }

    fn check_label(&mut self, at: &FieldPath, key: &str, value: &str) {
        if !is_label_key(key) {
            self.error(
                at,
                format!("{key:?} is not a valid label key ([prefix/]name, name at most 63 characters of letters, digits, '-', '_', '.')"),
            );
        }
        if !is_label_value(value) {
            self.error(
                at,
                format!("{value:?} is not a valid label value (at most 63 characters of letters, digits, '-', '_', '.', starting and ending with a letter or digit)"),
            );
        }
    }

    fn check_hosts(&mut self, pods: Option<&IpNet>, services: Option<&IpNet>) -> Vec<HostPlan<'s>> {
        let spec = self.spec;
        if spec.hosts.is_empty() {
            self.error(
                &path("hosts"),
                "no hosts: list the machines the cluster runs on",
            );
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut bmc_addresses: HashMap<&str, usize> = HashMap::new();
        let mut ips: HashMap<IpAddr, String> = HashMap::new();
        let mut macs: HashMap<String, String> = HashMap::new();
        let mut plans = Vec::new();
        for (index, host) in spec.hosts.iter().enumerate() {
            let at = path("hosts").index(index);
            if !is_dns1123_subdomain(&host.name) {
                self.error(
                    &at.key("name"),
                    format!(
                        "{:?} is not a valid host name; use lowercase letters, digits, '-' and '.'",
                        host.name
                    ),
                );
            } else if let Some(refusal) =
                derived_name_refusal("metal3.io", "BareMetalHost", &host.name)
            {
                self.error(
                    &at.key("name"),
                    format!("the BareMetalHost's name {:?} {refusal}", host.name),
                );
            }
            if let Some(first) = names.insert(host.name.as_str(), index) {
                self.error(
                    &at.key("name"),
                    format!(
                        "host name {:?} is already used by hosts[{first}]",
                        host.name
                    ),
                );
            }
            if let Some(first) = bmc_addresses.insert(host.bmc.address.as_str(), index) {
                self.error(
                    &at.key("bmc").key("address"),
                    format!("BMC address {:?} is already used by hosts[{first}]; every host has its own BMC", host.bmc.address),
                );
            }
            let pool = self.host_pool(index, host);
            let labels = self.host_labels(index, host, pool);
            self.check_bmc(index, host);
            let credentials = self.host_credentials(index, host);
            let interfaces = self.check_host_network(index, host, pods, services);
            let node_ip = interfaces.as_ref().and_then(|i| {
                i.addresses.iter().find_map(|a| match a.kind {
                    AddressKind::Static(net) => Some(net.addr()),
                    AddressKind::Dhcp4 => None,
                })
            });
            if let Some(interfaces) = &interfaces {
                if node_ip.is_none() {
                    self.error(
                        &at.key("network").key("addresses"),
                        "a host needs at least one static address (`cidr`): it is the node's address and BGP routers peer with it",
                    );
                }
                for address in &interfaces.addresses {
                    if let AddressKind::Static(net) = address.kind {
                        let owner = format!("hosts[{index}] ({})", host.name);
                        if let Some(first) = ips.get(&net.addr()) {
                            self.error(
                                &at.key("network").key("addresses"),
                                format!("address {} is already used by {first}", net.addr()),
                            );
                        } else {
                            ips.insert(net.addr(), owner);
                        }
                    }
                }
                for phy in &interfaces.phys {
                    let owner = format!("hosts[{index}] ({})", host.name);
                    if let Some(first) = macs.get(&phy.mac) {
                        self.error(
                            &at.key("network").key("links"),
                            format!("MAC address {} is already used by {first}", phy.mac),
                        );
                    } else {
                        macs.insert(phy.mac.clone(), owner);
                    }
                }
            }
            let boot_mac = self.boot_mac(index, host, interfaces.as_ref());
            let root_device_hints = host
                .root_device_hints
                .as_ref()
                .or(spec.host_defaults.root_device_hints.as_ref());
            let disable_certificate_verification =
                host.bmc.disable_certificate_verification.or(spec
                    .host_defaults
                    .bmc
                    .as_ref()
                    .and_then(|b| b.disable_certificate_verification));
            if let (
                Some(labels),
                Some(interfaces),
                Some(node_ip),
                Some(boot_mac),
                Some((credentials, credentials_path)),
            ) = (labels, interfaces, node_ip, boot_mac, credentials)
            {
                plans.push(HostPlan {
                    host,
                    index,
                    labels,
                    boot_mac,
                    node_ip,
                    interfaces,
                    credentials,
                    credentials_path,
                    disable_certificate_verification,
                    root_device_hints,
                });
            }
        }
        plans
    }

    /// The pool of a worker host (`None` for control-plane hosts and on errors).
    fn host_pool(&mut self, index: usize, host: &'s Host) -> Option<&'s str> {
        let spec = self.spec;
        let at = path("hosts").index(index);
        match (host.role, &host.pool) {
            (Role::ControlPlane, Some(_)) => {
                self.warn(
                    &at.key("pool"),
                    "control-plane hosts are not in worker pools; the pool is ignored",
                );
                None
            }
            (Role::ControlPlane, None) => None,
            (Role::Worker, Some(pool)) => {
                if spec.worker_pools.iter().any(|p| &p.name == pool) {
                    Some(pool.as_str())
                } else {
                    let known = spec
                        .worker_pools
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ");
                    self.error(
                        &at.key("pool"),
                        format!(
                            "pool {pool:?} is not defined in workerPools (defined: {})",
                            if known.is_empty() { "none" } else { &known }
                        ),
                    );
                    None
                }
            }
            (Role::Worker, None) => match spec.worker_pools.as_slice() {
                [only] => Some(only.name.as_str()),
                [] => {
                    self.error(
                        &at.key("role"),
                        "this host is a worker but workerPools is empty; add a worker pool or make it a control-plane host",
                    );
                    None
                }
                _ => {
                    self.error(
                        &at.key("pool"),
                        "there are several worker pools; say which one this host belongs to",
                    );
                    None
                }
            },
        }
    }

    fn host_labels(
        &mut self,
        index: usize,
        host: &Host,
        pool: Option<&str>,
    ) -> Option<BTreeMap<String, String>> {
        let spec = self.spec;
        let at = path("hosts").index(index).key("labels");
        let mut ok = true;
        for (key, value) in &host.labels {
            let before = self.errors.len();
            self.check_label(&at.key(key.as_str()), key, value);
            if is_capstan_label(key) {
                self.error(
                    &at.key(key.as_str()),
                    format!("{key} is set by capstan from the host's role and pool; remove it"),
                );
            }
            ok &= self.errors.len() == before;
        }
        if host.role == Role::Worker && pool.is_none() {
            return None;
        }
        let mut labels = host.labels.clone();
        labels.insert(
            capstan_model::meta::LABEL_CLUSTER_NAME.to_owned(),
            spec.name.clone(),
        );
        labels.insert(LABEL_CLUSTER.to_owned(), spec.name.clone());
        labels.insert(LABEL_ROLE.to_owned(), host.role.as_str().to_owned());
        if let Some(pool) = pool {
            labels.insert(LABEL_POOL.to_owned(), pool.to_owned());
        }
        ok.then_some(labels)
    }

    /// The address's scheme must be one capstan's drivers serve (their own list): an address
    /// Metal3 knows but capstan cannot drive would only fail at registration.
    fn check_bmc(&mut self, index: usize, host: &Host) {
        let at = path("hosts").index(index).key("bmc").key("address");
        if let Err(err) = capstan_drivers::scheme_of(&host.bmc.address) {
            self.error(&at, err.to_string());
        }
    }

    fn host_credentials(
        &mut self,
        index: usize,
        host: &'s Host,
    ) -> Option<(&'s BmcCredentials, FieldPath)> {
        let spec = self.spec;
        let (credentials, at) = match (
            &host.bmc.credentials,
            spec.host_defaults
                .bmc
                .as_ref()
                .and_then(|b| b.credentials.as_ref()),
        ) {
            (Some(own), _) => (
                own,
                path("hosts").index(index).key("bmc").key("credentials"),
            ),
            (None, Some(shared)) => (shared, path("hostDefaults.bmc.credentials")),
            (None, None) => {
                self.error(
                    &path("hosts").index(index).key("bmc"),
                    "no BMC credentials: set bmc.credentials here or hostDefaults.bmc.credentials",
                );
                return None;
            }
        };
        // Shared credentials are checked once, at the first host that uses them.
        let first_user = spec.hosts.iter().position(|h| h.bmc.credentials.is_none());
        if host.bmc.credentials.is_some() || first_user == Some(index) {
            if credentials.username.is_empty() {
                self.error(&at.key("username"), "the BMC user name is empty");
            }
            let given = [
                credentials.password.is_some(),
                credentials.password_file.is_some(),
                credentials.password_env.is_some(),
            ]
            .into_iter()
            .filter(|given| *given)
            .count();
            if given != 1 {
                self.error(
                    &at,
                    "give the BMC password exactly one way: password, passwordFile or passwordEnv",
                );
            }
        }
        Some((credentials, at))
    }

    fn boot_mac(
        &mut self,
        index: usize,
        host: &Host,
        interfaces: Option<&HostInterfaces>,
    ) -> Option<String> {
        let at = path("hosts").index(index);
        match &host.boot_mac_address {
            Some(text) => {
                let Some(mac) = parse_mac(text) else {
                    self.error(
                        &at.key("bootMacAddress"),
                        format!(
                            "{text:?} is not a MAC address; write six hex pairs separated by ':'"
                        ),
                    );
                    return None;
                };
                if let Some(interfaces) = interfaces
                    && !interfaces.phys.iter().any(|p| p.mac == mac)
                {
                    self.warn(
                        &at.key("bootMacAddress"),
                        format!("{mac} is not the MAC of any of this host's network.links"),
                    );
                }
                Some(mac)
            }
            None => {
                let first = interfaces
                    .and_then(|i| i.phys.first())
                    .map(|p| p.mac.clone());
                if first.is_none() && interfaces.is_some() {
                    self.error(
                        &at.key("bootMacAddress"),
                        "no boot MAC address: set bootMacAddress or list the host's NICs in network.links",
                    );
                }
                first
            }
        }
    }

    fn check_mtu(&mut self, at: &FieldPath, mtu: Option<u32>) {
        if let Some(mtu) = mtu
            && !(68..=65535).contains(&mtu)
        {
            self.error(at, format!("MTU {mtu} is outside 68..65535"));
        }
    }

    /// Parses and checks a host's network; `None` when it has errors.
    #[allow(clippy::too_many_lines)] // One pass over the host's interfaces keeps the checks in order.
    fn check_host_network(
        &mut self,
        index: usize,
        host: &Host,
        pods: Option<&IpNet>,
        services: Option<&IpNet>,
    ) -> Option<HostInterfaces> {
        let spec = self.spec;
        let before = self.errors.len();
        let at = path("hosts").index(index).key("network");
        let network = &host.network;
        let links_path = format!("hosts[{index}].network.links");
        let mut interfaces = HostInterfaces::default();
        // Interface name → MAC, for bonds and VLANs to take their parent's MAC.
        let mut macs: HashMap<String, String> = HashMap::new();
        let mut mtus: HashMap<String, Option<u32>> = HashMap::new();

        if network.links.is_empty() {
            self.error(
                &at.key("links"),
                "list at least one physical NIC (name and MAC)",
            );
        }
        for (i, link) in network.links.iter().enumerate() {
            let lat = at.key("links").index(i);
            self.check_interface_name(&lat.key("name"), &link.name);
            if macs.contains_key(&link.name) {
                self.error(
                    &lat.key("name"),
                    format!("interface {:?} is defined twice", link.name),
                );
            }
            self.check_mtu(&lat.key("mtu"), link.mtu);
            let mac = match parse_mac(&link.mac) {
                Some(mac) => mac,
                None => {
                    self.error(
                        &lat.key("mac"),
                        format!(
                            "{:?} is not a MAC address; write six hex pairs separated by ':'",
                            link.mac
                        ),
                    );
                    String::new()
                }
            };
            if !mac.is_empty() && interfaces.phys.iter().any(|p| p.mac == mac) {
                self.error(
                    &lat.key("mac"),
                    format!("MAC address {mac} is listed twice"),
                );
            }
            macs.insert(link.name.clone(), mac.clone());
            mtus.insert(link.name.clone(), link.mtu);
            interfaces.phys.push(Phy {
                name: link.name.clone(),
                mac,
                mtu: link.mtu,
            });
        }

        let mut bonded: HashMap<&str, String> = HashMap::new();
        for (i, bond) in network.bonds.iter().enumerate() {
            let bat = at.key("bonds").index(i);
            let expected = format!("bond{i}");
            if bond.name != expected {
                self.error(
                    &bat.key("name"),
                    format!(
                        "cloud-init names the bonds of network_data.json bond0, bond1, … in the order they are listed, so this bond will be {expected:?} on the host; name it {expected:?}"
                    ),
                );
            }
            if macs.contains_key(&bond.name) {
                self.error(
                    &bat.key("name"),
                    format!("interface {:?} is defined twice", bond.name),
                );
            }
            self.check_mtu(&bat.key("mtu"), bond.mtu);
            if bond.links.is_empty() {
                self.error(&bat.key("links"), "a bond needs at least one member link");
            }
            for (m, member) in bond.links.iter().enumerate() {
                let mat = bat.key("links").index(m);
                if !network.links.iter().any(|l| &l.name == member) {
                    self.error(
                        &mat,
                        format!(
                            "link {member:?} is not defined in {links_path}; add it there (name and MAC) or correct the name"
                        ),
                    );
                } else if let Some(other) = bonded.insert(member.as_str(), bond.name.clone()) {
                    self.error(
                        &mat,
                        format!("link {member:?} is already a member of {other}"),
                    );
                }
            }
            if bond.lacp_rate.is_some() && bond.mode != crate::spec::BondMode::Lacp {
                self.warn(
                    &bat.key("lacpRate"),
                    "lacpRate only applies to mode 802.3ad",
                );
            }
            let mac = bond
                .links
                .first()
                .and_then(|first| macs.get(first))
                .cloned()
                .unwrap_or_default();
            macs.insert(bond.name.clone(), mac.clone());
            mtus.insert(bond.name.clone(), bond.mtu);
            interfaces.bonds.push(BondLink {
                name: bond.name.clone(),
                mode: bond.mode,
                members: bond.links.clone(),
                mac,
                mtu: bond.mtu,
                miimon: bond.miimon,
                lacp_rate: bond.lacp_rate,
                xmit_hash_policy: bond.xmit_hash_policy,
                updelay: bond.updelay,
                downdelay: bond.downdelay,
            });
        }

        for (i, vlan) in network.vlans.iter().enumerate() {
            let vat = at.key("vlans").index(i);
            if !(1..=4094).contains(&vlan.id) {
                self.error(
                    &vat.key("id"),
                    format!("VLAN ID {} is outside 1..4094", vlan.id),
                );
            }
            self.check_mtu(&vat.key("mtu"), vlan.mtu);
            let name = vlan_name(&vlan.link, vlan.id);
            let Some(parent_mac) = macs.get(&vlan.link).cloned() else {
                self.error(
                    &vat.key("link"),
                    format!(
                        "{:?} is not defined in {links_path} or hosts[{index}].network.bonds; define it or correct the name",
                        vlan.link
                    ),
                );
                continue;
            };
            if bonded.contains_key(vlan.link.as_str()) {
                self.error(
                    &vat.key("link"),
                    format!("{:?} is a bond member; put the VLAN on the bond", vlan.link),
                );
            }
            if name.len() > 15 {
                self.error(
                    &vat,
                    format!("the VLAN's interface name {name:?} is longer than the kernel's 15 characters"),
                );
            }
            if macs.contains_key(&name) {
                self.error(&vat, format!("VLAN {name} is defined twice"));
            }
            if let (Some(mtu), Some(Some(parent_mtu))) = (vlan.mtu, mtus.get(&vlan.link))
                && mtu > *parent_mtu
            {
                self.warn(
                    &vat.key("mtu"),
                    format!(
                        "MTU {mtu} is larger than the MTU {parent_mtu} of {}",
                        vlan.link
                    ),
                );
            }
            macs.insert(name.clone(), parent_mac.clone());
            mtus.insert(name, vlan.mtu);
            interfaces.vlans.push(VlanLink {
                id: vlan.id,
                parent: vlan.link.clone(),
                mac: parent_mac,
                mtu: vlan.mtu,
            });
        }

        if network.addresses.is_empty() {
            self.error(
                &at.key("addresses"),
                "list at least one address (the node's address)",
            );
        }
        let mut gateway_families = HashSet::new();
        for (i, address) in network.addresses.iter().enumerate() {
            let aat = at.key("addresses").index(i);
            if !macs.contains_key(&address.link) {
                self.error(
                    &aat.key("link"),
                    format!(
                        "{:?} is not an interface of this host (its links, bonds and VLANs)",
                        address.link
                    ),
                );
            } else if let Some(bond) = bonded.get(address.link.as_str()) {
                self.error(
                    &aat.key("link"),
                    format!(
                        "{:?} is a member of {bond}; put the address on the bond",
                        address.link
                    ),
                );
            }
            let kind = match (&address.cidr, address.dhcp) {
                (Some(_), true) => {
                    self.error(&aat, "give either cidr or dhcp: true, not both");
                    None
                }
                (None, false) => {
                    self.error(
                        &aat,
                        "give the address as cidr (10.0.0.5/24) or set dhcp: true",
                    );
                    None
                }
                (None, true) => Some(AddressKind::Dhcp4),
                (Some(text), false) => {
                    self.check_static_address(&aat.key("cidr"), text, pods, services)
                }
            };
            let gateway = address.gateway.as_ref().and_then(|text| {
                let gat = aat.key("gateway");
                let Ok(gateway) = text.parse::<IpAddr>() else {
                    self.error(&gat, format!("{text:?} is not an IP address"));
                    return None;
                };
                match &kind {
                    Some(AddressKind::Static(net)) => {
                        if !net.contains(&gateway) {
                            self.error(
                                &gat,
                                format!("the gateway {gateway} is outside the subnet {} of this address; it must be reachable directly", net.trunc()),
                            );
                        } else if gateway == net.addr() {
                            self.error(&gat, "the gateway is this host's own address");
                        }
                    }
                    Some(AddressKind::Dhcp4) => {
                        self.error(&gat, "a DHCP address gets its gateway from DHCP; remove gateway");
                    }
                    None => {}
                }
                if !gateway_families.insert(gateway.is_ipv4()) {
                    self.error(
                        &gat,
                        "a second default gateway for the same IP family; a host has one default route per family (use routes for the others)",
                    );
                }
                Some(gateway)
            });
            if let Some(kind) = kind {
                interfaces.addresses.push(HostAddress {
                    link: address.link.clone(),
                    kind,
                    gateway,
                });
            }
        }

        for (i, route) in network.routes.iter().enumerate() {
            let rat = at.key("routes").index(i);
            let to = self.parse_network(&rat.key("to"), &route.to);
            let Ok(via) = route.via.parse::<IpAddr>() else {
                self.error(
                    &rat.key("via"),
                    format!("{:?} is not an IP address", route.via),
                );
                continue;
            };
            let reachable = interfaces.addresses.iter().any(|a| match a.kind {
                AddressKind::Static(net) => net.contains(&via),
                AddressKind::Dhcp4 => false,
            });
            if !reachable {
                self.error(
                    &rat.key("via"),
                    format!("the gateway {via} is not inside the subnet of any static address of this host"),
                );
            }
            if let Some(to) = to {
                interfaces.routes.push(StaticRoute { to, via });
            }
        }

        let (dns, dns_path) = match (&network.dns, &spec.host_defaults.dns) {
            (Some(own), _) => (Some(own), at.key("dns")),
            (None, Some(shared)) => (Some(shared), path("hostDefaults.dns")),
            (None, None) => (None, at.key("dns")),
        };
        if let Some(dns) = dns {
            let mut resolver = ResolverSettings::default();
            for (i, server) in dns.nameservers.iter().enumerate() {
                match server.parse::<IpAddr>() {
                    Ok(ip) => resolver.nameservers.push(ip),
                    Err(_) => self.error(
                        &dns_path.key("nameservers").index(i),
                        format!("{server:?} is not an IP address"),
                    ),
                }
            }
            for (i, domain) in dns.search.iter().enumerate() {
                let valid = !domain.is_empty()
                    && domain
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
                if !valid {
                    self.error(
                        &dns_path.key("search").index(i),
                        format!("{domain:?} is not a domain name"),
                    );
                }
                resolver.search.push(domain.clone());
            }
            interfaces.dns = resolver;
        } else if !network.addresses.iter().any(|a| a.dhcp) {
            self.warn(
                &at.key("dns"),
                "no DNS servers for this host (network.dns or hostDefaults.dns); image pulls will fail unless the OS image configures a resolver",
            );
        }

        (self.errors.len() == before).then_some(interfaces)
    }

    fn check_interface_name(&mut self, at: &FieldPath, name: &str) {
        let valid = !name.is_empty()
            && name.len() <= 15
            && name != "."
            && name != ".."
            && name
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
        if !valid {
            self.error(
                at,
                format!(
                    "{name:?} is not an interface name (1 to 15 characters, no spaces, '/' or ':')"
                ),
            );
        }
    }

    fn check_static_address(
        &mut self,
        at: &FieldPath,
        text: &str,
        pods: Option<&IpNet>,
        services: Option<&IpNet>,
    ) -> Option<AddressKind> {
        let Ok(net) = text.parse::<IpNet>() else {
            self.error(
                at,
                format!(
                    "{text:?} is not an address with prefix length; write it as 10.250.250.20/24"
                ),
            );
            return None;
        };
        let host_bits = u32::from(net.max_prefix_len() - net.prefix_len());
        if host_bits >= 2 {
            if net.addr() == net.network() {
                self.error(
                    at,
                    format!(
                        "{} is the network address of {}, not a host address inside the prefix",
                        net.addr(),
                        net.trunc()
                    ),
                );
            } else if net.addr().is_ipv4() && net.addr() == net.broadcast() {
                self.error(
                    at,
                    format!(
                        "{} is the broadcast address of {}, not a host address inside the prefix",
                        net.addr(),
                        net.trunc()
                    ),
                );
            }
        }
        for (cluster_net, what, field) in [
            (pods, "pod", "kubernetes.podCidr"),
            (services, "service", "kubernetes.serviceCidr"),
        ] {
            if let Some(cluster_net) = cluster_net
                && overlaps(cluster_net, &net.trunc())
            {
                self.error(
                        at,
                        format!("the host network {} overlaps the {what} network {cluster_net} ({field}); choose disjoint ranges", net.trunc()),
                    );
            }
        }
        Some(AddressKind::Static(net))
    }

    fn check_replicas(&mut self, hosts: &[HostPlan<'s>], pools: &[PoolPlan<'s>]) {
        let spec = self.spec;
        let replicas = spec.control_plane.replicas;
        let cp_hosts = spec
            .hosts
            .iter()
            .filter(|h| h.role == Role::ControlPlane)
            .count();
        if replicas == 0 {
            self.error(
                &path("controlPlane.replicas"),
                "a cluster needs at least 1 control-plane replica",
            );
        } else if replicas.is_multiple_of(2) {
            self.warn(
                &path("controlPlane.replicas"),
                format!("{replicas} control-plane replicas tolerate no more failures than {}; etcd needs a majority, so use an odd number", replicas - 1),
            );
        }
        let on_hosts = spec.control_plane.machines.is_bare_metal();
        if on_hosts && usize::try_from(replicas).unwrap_or(usize::MAX) > cp_hosts {
            self.error(
                &path("controlPlane.replicas"),
                format!("{replicas} control-plane replicas but only {cp_hosts} hosts with role control-plane; add hosts or lower replicas"),
            );
        }
        if !on_hosts && cp_hosts > 0 {
            self.warn(
                &path("controlPlane.machines"),
                format!("the control plane runs on KVM VMs, so the {cp_hosts} hosts with role control-plane are not used by this cluster"),
            );
        }
        for (i, pool) in pools.iter().enumerate() {
            if !pool.pool.machines.is_bare_metal() {
                continue;
            }
            let matching = hosts
                .iter()
                .filter(|h| {
                    HostSelector {
                        match_labels: pool.host_selector.clone(),
                        match_expressions: Vec::new(),
                    }
                    .matches(&h.labels)
                })
                .count();
            let wanted = pool.pool.replicas;
            if usize::try_from(wanted).unwrap_or(usize::MAX) > matching {
                self.error(
                    &path("workerPools").index(i).key("replicas"),
                    format!(
                        "{wanted} replicas but only {matching} worker hosts in pool {:?}{}; add hosts or lower replicas",
                        pool.pool.name,
                        if pool.pool.host_selector.is_empty() { "" } else { " with the pool's hostSelector labels" }
                    ),
                );
            }
        }
    }

    fn check_vip_against_hosts(&mut self, vip: IpAddr, hosts: &[HostPlan<'s>]) {
        let spec = self.spec;
        for host in hosts {
            for address in &host.interfaces.addresses {
                if let AddressKind::Static(net) = address.kind
                    && net.addr() == vip
                {
                    self.error(
                            &path("controlPlane.vip"),
                            format!("the VIP {vip} is the address of hosts[{}] ({}); the VIP must be an unused address", host.index, host.host.name),
                        );
                }
            }
        }
        // Which interface holds the VIP's subnet on each control-plane host.
        let mut carriers: Vec<(String, Option<String>)> = Vec::new();
        for host in hosts.iter().filter(|h| h.host.role == Role::ControlPlane) {
            let carrier = host.interfaces.addresses.iter().find_map(|a| match a.kind {
                AddressKind::Static(net) if net.contains(&vip) => Some(a.link.clone()),
                _ => None,
            });
            carriers.push((host.host.name.clone(), carrier));
        }
        let in_any_subnet = hosts.iter().any(|h| {
            h.interfaces.addresses.iter().any(|a| match a.kind {
                AddressKind::Static(net) => net.contains(&vip),
                AddressKind::Dhcp4 => false,
            })
        });
        if !hosts.is_empty() && !in_any_subnet && spec.control_plane.machines.is_bare_metal() {
            self.warn(
                &path("controlPlane.vip"),
                format!("the VIP {vip} is outside every host subnet; kube-vip in ARP mode announces it on the control-plane hosts' own subnet"),
            );
        }
        match &spec.control_plane.kube_vip.interface {
            Some(name) => {
                for host in hosts.iter().filter(|h| h.host.role == Role::ControlPlane) {
                    let has = host.interfaces.phys.iter().any(|p| &p.name == name)
                        || host.interfaces.bonds.iter().any(|b| &b.name == name)
                        || host.interfaces.vlans.iter().any(|v| &v.name() == name);
                    if !has {
                        self.error(
                            &path("controlPlane.kubeVip.interface"),
                            format!(
                                "control-plane host {} has no interface {name:?}",
                                host.host.name
                            ),
                        );
                    }
                }
            }
            None if in_any_subnet => {
                let named: Vec<&str> = carriers.iter().filter_map(|(_, c)| c.as_deref()).collect();
                let first = named.first().copied();
                if named.len() != carriers.len() {
                    let missing: Vec<&str> = carriers
                        .iter()
                        .filter(|(_, c)| c.is_none())
                        .map(|(h, _)| h.as_str())
                        .collect();
                    self.warn(
                        &path("controlPlane.vip"),
                        format!("control-plane hosts {} have no address in the VIP's subnet; kube-vip cannot hold the VIP there", missing.join(", ")),
                    );
                } else if named.iter().any(|n| Some(*n) != first) {
                    self.warn(
                        &path("controlPlane.kubeVip"),
                        format!("the VIP's subnet is on differently named interfaces ({}); the kube-vip manifest is the same on every control-plane node, so set kubeVip.interface and rename the interfaces alike", named.join(", ")),
                    );
                }
            }
            None => {}
        }
    }

    fn check_asn(&mut self, at: &FieldPath, asn: u64) -> Option<u32> {
        match u32::try_from(asn) {
            Ok(0 | 23456 | 65535 | u32::MAX) => {
                self.error(at, format!("AS {asn} is reserved; use a private AS such as 64512-65534 or 4200000000-4294967294"));
                None
            }
            Ok(asn) => Some(asn),
            Err(_) => {
                self.error(at, format!("AS {asn} is larger than 4294967295"));
                None
            }
        }
    }

    fn check_bgp(&mut self) -> Option<BgpPlan> {
        let spec = self.spec;
        let bgp = spec.bgp.as_ref()?;
        let local_asn = self.check_asn(&path("bgp.localAsn"), bgp.local_asn);
        if bgp.peers.is_empty() {
            self.error(&path("bgp.peers"), "list the routers the nodes peer with");
        }
        if !(1..=255).contains(&bgp.ebgp_multihop) {
            self.error(&path("bgp.ebgpMultihop"), "must be 1 to 255");
        }
        if !(3..=65535).contains(&bgp.hold_time_seconds) {
            self.error(&path("bgp.holdTimeSeconds"), "must be 3 to 65535");
        }
        if bgp.keep_alive_time_seconds == 0 || bgp.keep_alive_time_seconds > bgp.hold_time_seconds {
            self.error(
                &path("bgp.keepAliveTimeSeconds"),
                "must be at least 1 and at most holdTimeSeconds",
            );
        }
        if bgp.graceful_restart_seconds > 4095 {
            self.error(
                &path("bgp.gracefulRestartSeconds"),
                "must be 0 (off) to 4095",
            );
        }
        let router = &bgp.router;
        if !(1..=255).contains(&router.ebgp_multihop) {
            self.error(&path("bgp.router.ebgpMultihop"), "must be 1 to 255");
        }
        let peer_group = router.peer_group.clone().unwrap_or_else(|| {
            spec.name
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>()
                .to_ascii_uppercase()
        });
        let valid_group = !peer_group.is_empty()
            && peer_group.len() <= 64
            && peer_group
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && peer_group.parse::<IpAddr>().is_err();
        if !valid_group {
            self.error(
                &path("bgp.router.peerGroup"),
                format!("{peer_group:?} is not a usable FRR peer-group name; use letters, digits, '_' and '-'"),
            );
        }
        if let Some(source) = &router.update_source {
            let valid = !source.is_empty()
                && source
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
            if !valid {
                self.error(
                    &path("bgp.router.updateSource"),
                    format!("{source:?} is neither an address nor an interface name"),
                );
            }
        }
        if let Some(id) = &router.router_id {
            if id.parse::<std::net::Ipv4Addr>().is_err() {
                self.error(
                    &path("bgp.router.routerId"),
                    format!(
                        "{id:?} is not a router ID; FRR router IDs are written as IPv4 addresses"
                    ),
                );
            }
            if bgp.peers.len() > 1 {
                self.error(
                    &path("bgp.router.routerId"),
                    "with several routers each gets its own configuration and uses its address as router ID; remove routerId",
                );
            }
        }
        let mut peers = Vec::new();
        let mut seen = HashSet::new();
        for (i, peer) in bgp.peers.iter().enumerate() {
            let pat = path("bgp.peers").index(i);
            let asn = self.check_asn(&pat.key("asn"), peer.asn);
            let Ok(address) = peer.address.parse::<IpAddr>() else {
                self.error(
                    &pat.key("address"),
                    format!("{:?} is not an IP address", peer.address),
                );
                continue;
            };
            if !seen.insert(address) {
                self.error(
                    &pat.key("address"),
                    format!("router {address} is listed twice"),
                );
            }
            if router.router_id.is_none() && address.is_ipv6() {
                self.error(
                    &path("bgp.router.routerId"),
                    format!("router {address} is IPv6; set routerId to its IPv4 router ID"),
                );
            }
            if let Some(asn) = asn {
                let shares_asn = bgp.peers.iter().filter(|p| p.asn == u64::from(asn)).count() > 1;
                let name = if shares_asn {
                    format!(
                        "peer-{asn}-{}",
                        address.to_string().replace([':', '.'], "-")
                    )
                } else {
                    format!("peer-{asn}")
                };
                peers.push(PeerPlan {
                    address,
                    asn,
                    name,
                    config_name: format!("peer-{asn}"),
                });
            }
        }
        Some(BgpPlan {
            local_asn: local_asn?,
            peers,
            peer_group,
            router_id: router.router_id.clone(),
        })
    }
}

/// Whether two networks share any address.
/// libvirt URI schemes the KVM provider connects with.
const LIBVIRT_SCHEMES: &[&str] = &[
    "qemu",
    "qemu+ssh",
    "qemu+tls",
    "qemu+tcp",
    "qemu+unix",
    "test",
];

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

fn is_capstan_label(key: &str) -> bool {
    [
        LABEL_CLUSTER,
        LABEL_ROLE,
        LABEL_POOL,
        capstan_model::meta::LABEL_CLUSTER_NAME,
    ]
    .contains(&key)
}

/// A lower-case, colon-separated MAC address, or `None`.
pub(crate) fn parse_mac(text: &str) -> Option<String> {
    let parts: Vec<&str> = text.split(':').collect();
    let valid = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    valid.then(|| text.to_ascii_lowercase())
}

/// Why the API server would refuse a `group`/`kind` object named `name` (the bound on names
/// capstan derives other names from), when it would.
fn derived_name_refusal(group: &str, kind: &str, name: &str) -> Option<String> {
    capstan_model::names::name_limit(group, kind).and_then(|limit| limit.refusal(name))
}

/// RFC 1123 label: 1-63 of `[a-z0-9-]`, alphanumeric at both ends.
pub(crate) fn is_dns1123_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub(crate) fn is_dns1123_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_dns1123_label)
}

fn is_label_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

fn is_label_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_label_name(name),
        None => is_label_name(key),
    }
}

fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_label_name(value)
}

/// How many addresses `start..=end` holds; `None` when `end` comes before `start` or the two are
/// of different families.
pub(crate) fn range_size(start: IpAddr, end: IpAddr) -> Option<u128> {
    let (start, end) = match (start, end) {
        (IpAddr::V4(start), IpAddr::V4(end)) => {
            (u128::from(u32::from(start)), u128::from(u32::from(end)))
        }
        (IpAddr::V6(start), IpAddr::V6(end)) => (u128::from(start), u128::from(end)),
        _ => return None,
    };
    end.checked_sub(start).map(|d| d.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_sizes() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(range_size(ip("10.0.0.40"), ip("10.0.0.42")), Some(3));
        assert_eq!(range_size(ip("10.0.0.40"), ip("10.0.0.40")), Some(1));
        assert_eq!(range_size(ip("10.0.0.42"), ip("10.0.0.40")), None);
        assert_eq!(range_size(ip("10.0.0.40"), ip("fd00::1")), None);
        assert_eq!(range_size(ip("fd00::1"), ip("fd00::100")), Some(256));
    }

    #[test]
    fn name_rules() {
        assert!(is_dns1123_label("capi-1"));
        assert!(!is_dns1123_label("Capi"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(""));
        assert!(is_dns1123_subdomain("node-1.lab"));
        assert!(!is_dns1123_subdomain("node_1"));
        assert!(is_label_key("example.com/rack"));
        assert!(is_label_key("rack"));
        assert!(!is_label_key("Example.com/rack"));
        assert!(!is_label_key("a/b/c"));
        assert!(is_label_value(""));
        assert!(!is_label_value("-x"));
    }

    #[test]
    fn macs_are_normalised() {
        assert_eq!(
            parse_mac("52:54:00:AA:bb:0C").as_deref(),
            Some("52:54:00:aa:bb:0c")
        );
        assert_eq!(parse_mac("52-54-00-aa-bb-0c"), None);
        assert_eq!(parse_mac("52:54:00:aa:bb"), None);
    }

    #[test]
    fn overlap() {
        let a: IpNet = "10.0.0.0/8".parse().unwrap();
        let b: IpNet = "10.1.0.0/16".parse().unwrap();
        let c: IpNet = "192.168.0.0/16".parse().unwrap();
        assert!(overlaps(&a, &b));
        assert!(overlaps(&b, &a));
        assert!(!overlaps(&a, &c));
    }
}
