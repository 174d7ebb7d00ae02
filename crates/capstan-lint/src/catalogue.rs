//! The rule catalogue: every rule's id, default severity, one-line summary, explanation and fix.
//! `capstan lint --explain ID` prints an entry; `docs/lint.md` documents the same rules.

use crate::diagnostic::Severity;

/// Static facts about one rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleInfo {
    /// Stable id, as printed in `error[ID]`.
    pub id: &'static str,
    /// Default severity; a finding with weaker evidence may be reported lower.
    pub severity: Severity,
    /// What the rule finds, in one line.
    pub summary: &'static str,
    /// Why it matters: the failure it prevents.
    pub explanation: &'static str,
    /// How to fix a finding.
    pub fix: &'static str,
}

impl std::fmt::Display for RuleInfo {
    /// The entry as `capstan lint --explain ID` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} ({}): {}", self.id, self.severity, self.summary)?;
        writeln!(f)?;
        writeln!(f, "why: {}", self.explanation)?;
        writeln!(f)?;
        writeln!(f, "fix: {}", self.fix)
    }
}

/// Rule ids, as constants so that a typo is a compile error.
pub mod id {
    pub const UNKNOWN_KIND: &str = "unknown-kind";
    pub const NOT_ANALYSED: &str = "not-analysed";
    pub const INVALID_FIELD: &str = "invalid-field";
    pub const UNKNOWN_FIELD: &str = "unknown-field";
    pub const SCHEMA_VIOLATION: &str = "schema-violation";
    pub const DUPLICATE_OBJECT: &str = "duplicate-object";
    pub const MISSING_IDENTITY: &str = "missing-identity";
    pub const KUBE_VIP_VIP_ADDRESS: &str = "kube-vip-vip-address";
    pub const KUBE_VIP_SUPER_ADMIN: &str = "kube-vip-super-admin";
    pub const UNKNOWN_INTERFACE: &str = "unknown-interface";
    pub const CILIUM_K8S_SERVICE_HOST: &str = "cilium-k8s-service-host";
    pub const CILIUM_NATIVE_ROUTING_CIDR: &str = "cilium-native-routing-cidr";
    pub const POD_CIDR_MISMATCH: &str = "pod-cidr-mismatch";
    pub const CRS_RESOURCE_MISSING: &str = "crs-resource-missing";
    pub const CRS_SELECTS_NO_CLUSTER: &str = "crs-selects-no-cluster";
    pub const KUBE_PROXY_NOT_SKIPPED: &str = "kube-proxy-not-skipped";
    pub const BGP_PEER_CONFIG_MISSING: &str = "bgp-peer-config-missing";
    pub const BGP_ADVERTISEMENT_UNMATCHED: &str = "bgp-advertisement-unmatched";
    pub const NETWORK_DATA_INVALID: &str = "network-data-invalid";
    pub const NETWORK_DATA_UNDEFINED_LINK: &str = "network-data-undefined-link";
    pub const NETWORK_DATA_GATEWAY: &str = "network-data-gateway";
    pub const NETWORK_DATA_MAC_UNKNOWN: &str = "network-data-mac-unknown";
    pub const DUPLICATE_HOST_IP: &str = "duplicate-host-ip";
    pub const VIP_IS_HOST_IP: &str = "vip-is-host-ip";
    pub const DANGLING_REFERENCE: &str = "dangling-reference";
    pub const REFERENCE_KIND: &str = "reference-kind";
    pub const SELECTOR_MISMATCH: &str = "selector-mismatch";
    pub const UNKNOWN_CLUSTER: &str = "unknown-cluster";
    pub const VERSION_SKEW: &str = "version-skew";
    pub const INVALID_VERSION: &str = "invalid-version";
    pub const IMAGE_CHECKSUM_LENGTH: &str = "image-checksum-length";
    pub const IMAGE_CHECKSUM_MISSING: &str = "image-checksum-missing";
    pub const BMC_ADDRESS_SCHEME: &str = "bmc-address-scheme";
    pub const BMC_CREDENTIALS: &str = "bmc-credentials";
    pub const UNSUPPORTED_SCHEME: &str = "unsupported-scheme";
    pub const EVEN_ETCD_MEMBERS: &str = "even-etcd-members";
    pub const NOT_ENOUGH_HOSTS: &str = "not-enough-hosts";
    pub const WRONG_API_GROUP: &str = "wrong-api-group";
    pub const NO_HYPERVISORS: &str = "no-hypervisors";
    pub const ENDPOINT_UNSERVED: &str = "endpoint-unserved";
    pub const IP_POOL_TOO_SMALL: &str = "ip-pool-too-small";
}

const fn rule(
    id: &'static str,
    severity: Severity,
    summary: &'static str,
    explanation: &'static str,
    fix: &'static str,
) -> RuleInfo {
    RuleInfo {
        id,
        severity,
        summary,
        explanation,
        fix,
    }
}

use Severity::{Error, Note, Warning};

static RULES: &[RuleInfo] = &[
    // Objects.
    rule(
        id::UNKNOWN_KIND,
        Error,
        "an object whose kind or version is not served by its API group",
        "The API server rejects objects of kinds it does not serve: a misspelt kind in a Cluster API or Metal3 group, or a version that group no longer serves (cluster.x-k8s.io/v1alpha3, say), fails at `kubectl apply` time, after the objects before it were already created.",
        "Fix the spelling of `kind`, or write the object in a served version (the message lists them).",
    ),
    rule(
        id::WRONG_API_GROUP,
        Error,
        "a Cluster API kind written under another Cluster API group",
        "Each Cluster API group serves its own kinds: Cluster, Machine and MachineDeployment are in cluster.x-k8s.io, KubeadmControlPlane in controlplane.cluster.x-k8s.io, the providers' KVMCluster or Metal3Cluster in infrastructure.cluster.x-k8s.io. A `Cluster` under `infrastructure.cluster.x-k8s.io` (as one published KVM design writes it) is rejected by the API server, and nothing would reconcile it: the Cluster is core Cluster API, and the infrastructure group holds the provider's KVMCluster that the Cluster's infrastructureRef names.",
        "Write the kind's own group in apiVersion (the message names it), e.g. `apiVersion: cluster.x-k8s.io/v1beta2` for a Cluster; `capstan convert` then rewrites older versions.",
    ),
    rule(
        id::NOT_ANALYSED,
        Note,
        "objects of kinds lint does not analyse (built-in and other providers' kinds)",
        "lint knows the Cluster API, kubeadm, Metal3, CAPM3, Metal3 IPAM and Cilium BGP kinds. Objects of other kinds (Deployments, other providers' kinds, ClusterClass) are kept in the set, so references to them resolve, but their contents are not checked.",
        "Nothing to fix; this note only says what lint did not look at.",
    ),
    rule(
        id::INVALID_FIELD,
        Error,
        "a field whose value has the wrong type or shape for its kind",
        "A string where a number belongs (`replicas: \"three\"`), a list where a mapping belongs, or a malformed base64 Secret value is rejected by the API server, or by the controller that reads the object.",
        "Write the field with the type the kind's API defines; the message names the field and the expected type.",
    ),
    rule(
        id::UNKNOWN_FIELD,
        Error,
        "a field the kind's schema does not define (a misspelling such as `spec.bootMACAdress`?)",
        "`kubectl apply` and `capstan apply` ask the API server for strict field validation, under which it refuses an object with a field its schema does not define, naming the field (`unknown field \"spec.bootMACAdress\"`); without it the server drops the field, and the setting never takes effect. Lint prunes each object with the schema `capstan serve` admits the kind with (capstan's model of the kind completed with the upstream CRD's, so every upstream field is known), or with the kind's CRD from `--schemas DIR`; fields under `status` of kinds with a status subresource, which the server ignores, and Kubernetes' own kinds are not judged.",
        "Fix the spelling (the hint names the field of that name the kind has), or remove the field.",
    ),
    rule(
        id::SCHEMA_VIOLATION,
        Error,
        "a value the kind's schema refuses: a pattern, enum, bound, required field or CEL rule",
        "Every object is validated as `capstan serve` validates it at admission, with the same schema: for capstan's kinds the one generated from its model and completed with the upstream CRD's (patterns, enums, bounds, required fields, CEL rules), or the kind's CRD from `--schemas DIR` for the kinds it defines. A `bootMACAddress` that is not six colon-separated hex octets (`52:54:00:zz:00:01`), an unknown `automatedCleaningMode` or a missing `spec.bmc.credentialsName` is refused at apply, naming the field. Violations under `status` of kinds with a status subresource are not reported: the server ignores `status` there.",
        "Change the field as the message says; the schema is the authority.",
    ),
    rule(
        id::DUPLICATE_OBJECT,
        Error,
        "the same object (group, kind, namespace, name) defined twice",
        "When an object appears twice, `kubectl apply` applies both and the last one silently wins, so half of the edits made to the set have no effect.",
        "Remove one of the two definitions, or rename one of them.",
    ),
    rule(
        id::MISSING_IDENTITY,
        Error,
        "an object without `metadata.name` (or with a namespace that is not a string)",
        "An object without a name cannot be created, and nothing can refer to it.",
        "Give the object a non-empty `metadata.name`.",
    ),
    // kube-vip.
    rule(
        id::KUBE_VIP_VIP_ADDRESS,
        Error,
        "kube-vip is configured with `vip_address`",
        "kube-vip treats `vip_address` as a name to resolve. With a CIDR suffix (`10.250.250.29/32`) the lookup fails (`lookup 10.250.250.29/32: no such host`) and kube-vip never claims the control-plane VIP, so `kubeadm init` times out waiting for the API server. Without a suffix it works only through a deprecated code path.",
        "Use the `address` variable with the bare IP and put the prefix length in `vip_subnet` (for example `address: 10.250.250.29`, `vip_subnet: \"32\"`).",
    ),
    rule(
        id::KUBE_VIP_SUPER_ADMIN,
        Error,
        "kube-vip on Kubernetes 1.29 or later without the switch to super-admin.conf at `kubeadm init`",
        "From Kubernetes 1.29, kubeadm's `admin.conf` is not bound to cluster-admin until `kubeadm init` finishes, so kube-vip (a static pod using that kubeconfig) cannot take its leader-election lease (`leases.coordination.k8s.io \"plndr-cp-lock\" is forbidden`). The VIP never comes up and the first control-plane node never finishes init. The reverse mistake is reported too: a manifest that mounts super-admin.conf itself breaks every joining control-plane node (only the init node has the file; elsewhere the mount becomes an empty directory), and before 1.29 kubeadm does not write the file at all.",
        "In `preKubeadmCommands`, on the init node only, point the kube-vip manifest at `/etc/kubernetes/super-admin.conf` (for example `sed -i 's#path: /etc/kubernetes/admin.conf#path: /etc/kubernetes/super-admin.conf#' /etc/kubernetes/manifests/kube-vip.yaml` when `/run/kubeadm/kubeadm.yaml` exists), and switch it back in `postKubeadmCommands`.",
    ),
    rule(
        id::UNKNOWN_INTERFACE,
        Error,
        "a network interface (kube-vip `vip_interface`, `ip`/`nmcli`/`dhclient` commands, `fromHostInterface`) that a targeted host does not have",
        "Interface names differ between machines (`ens2` on one libvirt VM, `ens3` on another, `eno1` on hardware). When a command or kube-vip names an interface the host does not have, the VIP is never announced or the node never gets its address. Only hosts whose inspection data (`status.hardware.nics`) is in the set are checked; interfaces defined by the host's networkData (bonds, VLANs) and interfaces the commands themselves create count as present.",
        "Use the interface name from `kubectl get bmh NAME -o jsonpath='{.status.hardware.nics[*].name}'`, or narrow the template's hostSelector to the hosts that have it.",
    ),
    // Cilium and ClusterResourceSets.
    rule(
        id::CILIUM_K8S_SERVICE_HOST,
        Error,
        "Cilium replaces kube-proxy but is not told the API server address (k8sServiceHost)",
        "With `kube-proxy-replacement: \"true\"` nothing serves the `kubernetes` Service (10.96.0.1:443) until Cilium runs, and Cilium needs the API server to start: its agents hang in `Init` with `dial tcp 10.96.0.1:443: i/o timeout`, and the cluster never gets a working network.",
        "Render Cilium with `k8sServiceHost` set to the control-plane endpoint (the VIP) and `k8sServicePort` to its port; this sets `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` on the agent DaemonSet.",
    ),
    rule(
        id::CILIUM_NATIVE_ROUTING_CIDR,
        Error,
        "Cilium's `ipv4-native-routing-cidr` does not contain the cluster's pod CIDR",
        "Cilium routes traffic inside the native-routing CIDR without masquerading and masquerades everything else. If the pod CIDR is not inside it, pod-to-pod traffic between nodes is masqueraded or dropped and BGP-advertised pod routes do not match what Cilium expects.",
        "Set `ipv4NativeRoutingCIDR` to the pod CIDR (`spec.clusterNetwork.pods.cidrBlocks`) or a range containing it, and re-render the Cilium manifest.",
    ),
    rule(
        id::POD_CIDR_MISMATCH,
        Error,
        "the Cluster's pod CIDR differs from the KubeadmControlPlane's `clusterConfiguration.networking.podSubnet`",
        "kubeadm allocates node pod ranges from `podSubnet`, while Cluster API and CNIs configured from the Cluster use `clusterNetwork.pods`. When they differ, nodes get pod ranges the CNI does not route.",
        "Make both the same, or remove `networking.podSubnet` from the KubeadmControlPlane so Cluster API fills it in from the Cluster.",
    ),
    rule(
        id::CRS_RESOURCE_MISSING,
        Error,
        "a ClusterResourceSet names a ConfigMap or Secret that is not in the set",
        "The ClusterResourceSet controller waits for the named resource; nothing is applied to the workload cluster (for a CNI: nodes stay NotReady). Skipped with `--partial`.",
        "Add the ConfigMap/Secret to the set, or fix the name in `spec.resources`.",
    ),
    rule(
        id::CRS_SELECTS_NO_CLUSTER,
        Warning,
        "a ClusterResourceSet whose clusterSelector matches no Cluster in its namespace",
        "A ClusterResourceSet applies only to Clusters in its own namespace whose labels match its selector (an empty selector matches none). If none match, its resources (often the CNI) are never installed. Skipped with `--partial`.",
        "Add the selector's labels to the Cluster's `metadata.labels` (for example `cni: cilium`), or fix the selector.",
    ),
    rule(
        id::KUBE_PROXY_NOT_SKIPPED,
        Warning,
        "Cilium replaces kube-proxy but kubeadm still installs kube-proxy",
        "With kube-proxy replacement, kube-proxy and Cilium both program service rules; kube-proxy's iptables rules can shadow Cilium's and the Cilium documentation requires a cluster without kube-proxy.",
        "Add `addon/kube-proxy` to `initConfiguration.skipPhases` of the KubeadmControlPlane (kubeadm join has no addon phase).",
    ),
    rule(
        id::BGP_PEER_CONFIG_MISSING,
        Error,
        "a CiliumBGPClusterConfig peer whose peerConfigRef names no CiliumBGPPeerConfig",
        "Cilium does not establish a session with a peer whose peer configuration is missing, so nothing is advertised to that router. Skipped with `--partial`.",
        "Create the CiliumBGPPeerConfig, or fix `peerConfigRef.name`.",
    ),
    rule(
        id::BGP_ADVERTISEMENT_UNMATCHED,
        Warning,
        "a CiliumBGPPeerConfig family whose advertisement selector matches no CiliumBGPAdvertisement",
        "A peer family announces only the CiliumBGPAdvertisements whose labels match its `advertisements` selector. If none match, the session comes up but advertises nothing (pod CIDRs are not routed). Skipped with `--partial`.",
        "Label the CiliumBGPAdvertisement with the selector's labels (for example `advertise: bgp`), or fix the selector.",
    ),
    // networkData.
    rule(
        id::NETWORK_DATA_INVALID,
        Error,
        "a networkData Secret without a `networkData` key, or whose content is not valid network_data.json",
        "The host's config drive carries the networkData as it is; cloud-init cannot parse it and the node boots without its static addresses.",
        "Put the OpenStack network_data.json document (JSON or YAML) under the key `networkData` in `stringData` (or base64 in `data`).",
    ),
    rule(
        id::NETWORK_DATA_UNDEFINED_LINK,
        Error,
        "networkData (a host's Secret or a Metal3DataTemplate) names a link — bond member, VLAN parent, network link — that it does not define",
        "cloud-init cannot attach a bond member, VLAN or address to a link that is not defined; the interface is not configured and the node is unreachable.",
        "Define the link in `links` (with its `ethernet_mac_address`), or correct the id.",
    ),
    rule(
        id::NETWORK_DATA_GATEWAY,
        Error,
        "a networkData address or IPPool range whose gateway is outside its subnet (or whose netmask is malformed)",
        "A route via a gateway that is not on the address's subnet cannot be installed (`Nexthop has invalid gateway`), so the node has no default route.",
        "Fix the IP address, netmask or gateway so that the gateway lies inside `ip_address/netmask`.",
    ),
    rule(
        id::NETWORK_DATA_MAC_UNKNOWN,
        Error,
        "a networkData link MAC that is neither the host's bootMACAddress nor one of its inspected NICs",
        "cloud-init matches links to interfaces by MAC; a link with a MAC the host does not have configures nothing. With inspection data (`status.hardware.nics`) every link MAC is checked (error). Without it, only a host with a single physical link is checked, against bootMACAddress, and reported as a warning, since the link may be a NIC that was never inspected. Comparison ignores case.",
        "Copy the MAC from `status.hardware.nics[].mac` (or from `spec.bootMACAddress` for the provisioning NIC).",
    ),
    rule(
        id::DUPLICATE_HOST_IP,
        Error,
        "the same static IP address on two hosts",
        "Two nodes with one address fight over it through ARP; at most one is reachable, and kubeadm join or etcd membership breaks in confusing ways.",
        "Give each host its own address in its networkData Secret.",
    ),
    rule(
        id::VIP_IS_HOST_IP,
        Error,
        "the control-plane endpoint (the VIP) is also a host's static address, or inside an IPPool range",
        "kube-vip announces the VIP on whichever control-plane node leads; if a host already owns that address (or a pool can hand it to one), traffic for the API server reaches the wrong machine whenever the leader is another node.",
        "Pick a VIP outside every host's static addresses (and outside DHCP/IPPool ranges).",
    ),
    // References.
    rule(
        id::DANGLING_REFERENCE,
        Error,
        "a reference to an object that is not in the set",
        "Controllers wait for referenced objects that never appear: a Cluster never gets its infrastructure, a MachineDeployment never creates Machines, a host never gets its network data or user data. Skipped with `--partial`.",
        "Add the referenced object to the set, or fix the reference's name (and namespace).",
    ),
    rule(
        id::REFERENCE_KIND,
        Error,
        "a reference that names the wrong kind for its field",
        "Each reference field accepts specific kinds (a Cluster's controlPlaneRef a KubeadmControlPlane, a MachineDeployment's infrastructureRef a Metal3MachineTemplate); the controller rejects or mis-handles any other kind.",
        "Point the reference at an object of the kind the field expects (the message says which).",
    ),
    rule(
        id::SELECTOR_MISMATCH,
        Error,
        "a MachineDeployment whose selector does not match its template's labels",
        "The MachineDeployment would not own the Machines it creates; the API server rejects it (`selector does not match template labels`).",
        "Make `spec.selector.matchLabels` a subset of `spec.template.metadata.labels`.",
    ),
    rule(
        id::UNKNOWN_CLUSTER,
        Error,
        "a `clusterName` that names no Cluster in the set",
        "Objects tied to a missing Cluster are never reconciled (MachineDeployments create no Machines, data templates and pools are never used). Skipped with `--partial`.",
        "Set `clusterName` to the name of the Cluster, or add the Cluster to the set.",
    ),
    // Versions.
    rule(
        id::VERSION_SKEW,
        Error,
        "worker Kubernetes version newer than the control plane, or further behind than kubelet skew allows",
        "A kubelet must not be newer than the API server, and may lag it by at most three minor versions; kubeadm join refuses otherwise and Cluster API blocks the rollout.",
        "Set the MachineDeployment's `spec.template.spec.version` to the KubeadmControlPlane's version, or within three minor versions below it.",
    ),
    rule(
        id::INVALID_VERSION,
        Error,
        "a Kubernetes version that is not `vMAJOR.MINOR.PATCH`",
        "Cluster API needs a semantic version with the leading `v` to pick images and compare versions; a version such as `1.31` is rejected.",
        "Write the version as `v1.31.4`.",
    ),
    // Images.
    rule(
        id::IMAGE_CHECKSUM_LENGTH,
        Error,
        "an image checksum whose length or characters do not fit its checksumType",
        "Ironic compares the downloaded image's digest with the checksum; a checksum of the wrong length (a sha256 digest labelled md5, a truncated copy) never matches and provisioning fails after the whole image was written.",
        "Use a hex digest of the right length (md5 32, sha256 64, sha512 128 characters), set checksumType to match, or give a checksum URL.",
    ),
    rule(
        id::IMAGE_CHECKSUM_MISSING,
        Error,
        "an image without a checksum (other than a live-iso)",
        "Metal3 requires a checksum for every disk image (only `live-iso` images boot without one); the host stays in provisioning with `checksum is required`.",
        "Set `checksum` (a hex digest or the URL of a checksum file) and `checksumType`.",
    ),
    // BMC.
    rule(
        id::BMC_ADDRESS_SCHEME,
        Error,
        "a BMC address with a scheme Metal3 does not know",
        "The bare-metal operator cannot pick a driver for an unknown scheme; the host stays in `registering` with an error.",
        "Use one of ipmi, redfish, redfish-virtualmedia, redfish-uefihttp, idrac, idrac-redfish, idrac-virtualmedia, ilo4, ilo4-virtualmedia, ilo5, ilo5-redfish, ilo5-virtualmedia, irmc, irmc-virtualmedia, ibmc or libvirt, optionally with `+http`/`+https`; capstan itself drives only `redfish-virtualmedia`, `redfish` and `fake` (see `unsupported-scheme`).",
    ),
    rule(
        id::UNSUPPORTED_SCHEME,
        Error,
        "a BareMetalHost BMC address or image URL whose scheme capstan cannot drive or download from",
        "capstan's BareMetalHost controller drives BMCs through its own drivers (Redfish with virtual media, and the simulated `fake://`), and the agent in its ramdisk downloads images and checksum files over plain HTTP: the ramdisk has no CA certificates to verify an HTTPS server with, and the checksum guards the image. A scheme Metal3 knows but capstan does not drive (`ipmi://`, `redfish-uefihttp://`, `idrac-virtualmedia://`, a bare host, which Metal3 takes for IPMI) leaves the host in `registering` with a registration error; an `https://` (or other non-HTTP) image or checksum URL, on a BareMetalHost, a Metal3MachineTemplate or a Metal3Machine, is refused before the host is booted and leaves it in `provisioning` with a provisioning error. Lint judges by the same lists registration and provisioning use.",
        "Use `redfish-virtualmedia://` (or `redfish://`, optionally `+http`/`+https`) for a Redfish BMC, `fake://` for a simulated one; serve the image and its checksum file over `http://` (or from `capstan serve`'s images directory, under `/images/`).",
    ),
    rule(
        id::BMC_CREDENTIALS,
        Error,
        "a BMC credentials Secret that is missing from the set, or lacks `username`/`password`",
        "The bare-metal operator cannot log in to the BMC; the host stays in `registering`. The missing-Secret part is skipped with `--partial`.",
        "Add a Secret named like `spec.bmc.credentialsName`, in the host's namespace, with `username` and `password` keys.",
    ),
    // Capacity and topology.
    rule(
        id::EVEN_ETCD_MEMBERS,
        Warning,
        "an even number of stacked-etcd control-plane replicas",
        "etcd needs a majority: 2 members tolerate no failure (like 1), 4 tolerate one (like 3). An even count adds a machine without adding fault tolerance and makes split votes possible.",
        "Use 1, 3 or 5 control-plane replicas (or an external etcd).",
    ),
    rule(
        id::NO_HYPERVISORS,
        Error,
        "KVM machines in a cluster whose KVMCluster is missing or lists no hypervisors",
        "A KubeadmControlPlane or MachineDeployment whose machine template is a KVMMachineTemplate gets its VMs on the hypervisors of its cluster's KVMCluster: the Cluster's infrastructureRef, or (when the Cluster's infrastructure is another provider, e.g. Metal3 for a bare-metal control plane) a KVMCluster labelled `cluster.x-k8s.io/cluster-name: <cluster>`. Without one, or with no hypervisor listed (none taking control-plane VMs, for the control plane), every KVMMachine waits with `NoHypervisorFits` and the pool never comes up.",
        "Add the KVMCluster (or the label) and list the libvirt hypervisors in spec.hypervisors; `capstan render` writes one for a spec with `hypervisors`.",
    ),
    rule(
        id::ENDPOINT_UNSERVED,
        Error,
        "a control-plane endpoint no machine will serve",
        "Workers join through the cluster's control-plane endpoint and the Cluster waits for its API there. No machine serves it when the Cluster has no control plane (no controlPlaneRef, or zero replicas); when it is written on a KVMCluster that only lends hypervisors to a cluster whose infrastructure is another provider (the endpoint is the one on the Cluster's own infrastructure cluster: no second infrastructure cluster pointing at the first one's endpoint is needed); or, as a warning, when a control plane on KVM VMs has no static pod announcing the address (kube-vip) and no VM holding it, so only a load balancer outside the manifests could.",
        "Give the Cluster a control plane with replicas; remove the endpoint from a KVMCluster that only lends hypervisors; announce the address with kube-vip in the KubeadmControlPlane's files, give a control-plane VM that static address, or point the endpoint at your load balancer.",
    ),
    rule(
        id::IP_POOL_TOO_SMALL,
        Error,
        "an IPPool with fewer addresses than the KVM machines whose templates take theirs from it",
        "Each KVMMachine of a KVMMachineTemplate whose NIC names an IPPool (`networks[].ipPoolRef`) claims one address of that pool; the replicas of the KubeadmControlPlane and MachineDeployments using such templates add up per pool. When the pool's ranges hold fewer, the remaining machines wait forever with `WaitingForIPAddress`. As a warning when no address is spare: a rolling upgrade adds a machine before it removes one. Skipped with `--partial`.",
        "Widen the IPPool's ranges (`capstan render`'s `ipPool.end`), or lower the replicas.",
    ),
    rule(
        id::NOT_ENOUGH_HOSTS,
        Warning,
        "fewer BareMetalHosts match a template's hostSelector than the replicas that need them",
        "Each Machine claims one host matching its Metal3MachineTemplate's hostSelector, in the template's namespace; when hosts run out, the remaining Machines wait forever in Provisioning. Skipped with `--partial`.",
        "Add or label more BareMetalHosts, widen the hostSelector, or lower the replicas.",
    ),
];

/// Every rule lint knows, in catalogue order.
pub fn catalogue() -> &'static [RuleInfo] {
    RULES
}

/// The catalogue entry of rule `id`.
pub fn explain(id: &str) -> Option<&'static RuleInfo> {
    RULES.iter().find(|r| r.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_well_formed() {
        for (i, a) in RULES.iter().enumerate() {
            assert!(
                a.id.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{}",
                a.id
            );
            assert!(!a.summary.is_empty() && !a.explanation.is_empty() && !a.fix.is_empty());
            for b in &RULES[i + 1..] {
                assert_ne!(a.id, b.id);
            }
        }
    }

    #[test]
    fn explain_finds_rules() {
        let info = explain(id::KUBE_VIP_VIP_ADDRESS).expect("known rule");
        assert_eq!(info.severity, Severity::Error);
        assert!(explain("no-such-rule").is_none());
        assert_eq!(
            explain(id::NOT_ENOUGH_HOSTS).map(|r| r.severity),
            Some(Severity::Warning)
        );
    }

    #[test]
    fn entries_print_for_explain() {
        let text = explain(id::EVEN_ETCD_MEMBERS).expect("rule").to_string();
        assert!(text.starts_with("even-etcd-members (warning): "));
        assert!(text.contains("\nwhy: etcd needs a majority"));
        assert!(text.contains("\nfix: "));
    }

    #[test]
    fn docs_list_every_rule() {
        let docs = include_str!("../../../docs/lint.md");
        for rule in RULES {
            assert!(
                docs.contains(&format!("`{}`", rule.id)),
                "docs/lint.md lacks {}",
                rule.id
            );
        }
    }
}
