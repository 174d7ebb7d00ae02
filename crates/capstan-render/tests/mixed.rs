//! Mixed clusters (`machines: kvm`): what is rendered for a KVM control plane with bare-metal
//! workers and for the reverse, in both API versions, and the KVM settings that are refused, each
//! at its `file:line`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use capstan_render::{CapiVersion, RenderError, RenderOptions};
use serde_json::Value;

const NAME: &str = "examples/mixed.yaml";

fn example() -> String {
    std::fs::read_to_string(common::examples_dir().join("mixed.yaml")).unwrap()
}

fn render_text(
    text: &str,
    api_version: CapiVersion,
) -> Result<capstan_render::Bundle, RenderError> {
    let spec = capstan_render::parse_spec(NAME, text)?;
    capstan_render::render(
        &spec,
        &common::examples_dir(),
        &RenderOptions { api_version },
    )
}

/// The reverse of the example: the control plane on the host, the pool on VMs.
fn reverse(text: &str) -> String {
    let out = text
        .replacen("  machines: kvm\n", "", 1)
        .replace(
            "  - name: metal\n    replicas: 1\n",
            "  - name: metal\n    replicas: 1\n    machines: kvm\n",
        )
        .replace("    role: worker\n", "    role: control-plane\n");
    assert_ne!(out, text);
    out
}

fn one<'a>(objects: &'a [(String, Value)], kind: &'a str) -> &'a Value {
    let found: Vec<&Value> = common::of_kind(objects, kind).collect();
    assert_eq!(found.len(), 1, "{kind}: {found:?}");
    found[0]
}

#[test]
fn a_kvm_control_plane_gets_a_kvm_cluster_as_the_clusters_infrastructure() {
    for version in common::VERSIONS {
        let bundle = render_text(&example(), version).unwrap();
        let objects = common::objects(&bundle);
        assert_eq!(common::of_kind(&objects, "Metal3Cluster").count(), 0);
        let kvm_cluster = one(&objects, "KVMCluster");
        assert_eq!(
            kvm_cluster["apiVersion"],
            "infrastructure.cluster.x-k8s.io/v1beta2"
        );
        assert_eq!(
            kvm_cluster["spec"]["controlPlaneEndpoint"]["host"],
            "10.250.250.29"
        );
        assert_eq!(kvm_cluster["spec"]["hypervisors"][0]["name"], "hv1");
        let cluster = one(&objects, "Cluster");
        assert_eq!(cluster["spec"]["infrastructureRef"]["kind"], "KVMCluster");
        let kcp = one(&objects, "KubeadmControlPlane");
        let reference = match version {
            CapiVersion::V1beta1 => &kcp["spec"]["machineTemplate"]["infrastructureRef"],
            CapiVersion::V1beta2 => &kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"],
        };
        assert_eq!(reference["kind"], "KVMMachineTemplate");
        assert_eq!(reference["name"], "mixed-control-plane");
        let vm = one(&objects, "KVMMachineTemplate");
        let spec = &vm["spec"]["template"]["spec"];
        assert_eq!(spec["resources"]["memory"], "4Gi");
        assert_eq!(spec["resources"]["dockerVolumeSize"], "10Gi");
        assert_eq!(spec["networks"][0]["address"], "10.250.250.40/24");
        assert!(
            spec["image"]["url"]
                .as_str()
                .unwrap()
                .starts_with("file://")
        );
        let workers = one(&objects, "Metal3MachineTemplate");
        assert_eq!(workers["metadata"]["name"], "mixed-metal");
        // Only the bare-metal worker is a host.
        assert_eq!(common::of_kind(&objects, "BareMetalHost").count(), 1);
    }
}

#[test]
fn kvm_workers_borrow_hypervisors_from_a_labelled_kvm_cluster() {
    for version in common::VERSIONS {
        let bundle = render_text(&reverse(&example()), version).unwrap();
        let objects = common::objects(&bundle);
        let cluster = one(&objects, "Cluster");
        assert_eq!(
            cluster["spec"]["infrastructureRef"]["kind"],
            "Metal3Cluster"
        );
        let kvm_cluster = one(&objects, "KVMCluster");
        assert!(kvm_cluster["spec"].get("controlPlaneEndpoint").is_none());
        assert_eq!(
            kvm_cluster["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
            "mixed"
        );
        let deployment = one(&objects, "MachineDeployment");
        let reference = &deployment["spec"]["template"]["spec"]["infrastructureRef"];
        assert_eq!(reference["kind"], "KVMMachineTemplate");
        assert_eq!(
            one(&objects, "KVMMachineTemplate")["metadata"]["name"],
            "mixed-metal"
        );
        assert_eq!(
            one(&objects, "Metal3MachineTemplate")["metadata"]["name"],
            "mixed-control-plane"
        );
    }
}

#[test]
fn kvm_settings_that_cannot_work_are_refused_at_their_lines() {
    let text = example()
        .replace(
            "uri: qemu+ssh://root@hv1.lab.example.com/system",
            "uri: vbox://hv1/system",
        )
        .replace("    memory: 4Gi\n", "    memory: 4 gigs\n")
        .replace(
            "checksum: 0f7c3a52e3c2b1c69d1c4c3f2a3b9e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7",
            "checksum: abc",
        )
        .replace(
            "      pool: default\n",
            "      pool: default\n      controlPlane: false\n",
        );
    let line = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let message = render_text(&text, CapiVersion::V1beta1)
        .unwrap_err()
        .to_string();
    for expected in [
        format!("{NAME}:{}: kvm.hypervisors[0].uri", line("vbox://")),
        format!("{NAME}:{}: controlPlane.vm.memory", line("4 gigs")),
        format!("{NAME}:{}: kvm.image.checksum", line("checksum: abc")),
        format!("{NAME}:{}: controlPlane.machines", line("  machines: kvm")),
    ] {
        assert!(
            message.contains(&expected),
            "{expected:?} not in:\n{message}"
        );
    }
    // A bare-metal control plane with too few hosts is still counted; a VM one is not.
    let counted = reverse(&example()).replace("    role: control-plane\n", "    role: worker\n");
    let message = render_text(&counted, CapiVersion::V1beta1)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("control-plane replicas but only 0 hosts"),
        "{message}"
    );
}

/// The reverse of the example with its pool of VMs grown to `replicas`, each NIC's address from
/// `pool` (the `ipPool` YAML flow map).
fn vm_pool(replicas: u32, network: &str) -> String {
    let text = reverse(&example()).replace(
        "  - name: metal\n    replicas: 1\n    machines: kvm\n",
        &format!(
            "  - name: metal\n    replicas: {replicas}\n    machines: kvm\n    vm:\n      networks:\n        - {network}\n"
        ),
    );
    assert!(text.contains("    vm:\n      networks:"), "{text}");
    text
}

#[test]
fn each_vm_of_a_pool_takes_its_own_address_from_an_ip_pool() {
    let text = vm_pool(
        3,
        "{bridge: br0, gateway: 10.250.250.1, ipPool: {start: 10.250.250.50, end: 10.250.250.53, prefix: 24}}",
    );
    for version in common::VERSIONS {
        let bundle = render_text(&text, version).unwrap();
        let objects = common::objects(&bundle);
        let pool = one(&objects, "IPPool");
        assert_eq!(pool["apiVersion"], "ipam.metal3.io/v1alpha1");
        assert_eq!(pool["metadata"]["name"], "mixed-metal-nic0");
        assert_eq!(pool["metadata"]["namespace"], "default");
        assert_eq!(
            pool["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
            "mixed"
        );
        assert_eq!(pool["spec"]["clusterName"], "mixed");
        assert_eq!(pool["spec"]["pools"][0]["start"], "10.250.250.50");
        assert_eq!(pool["spec"]["pools"][0]["end"], "10.250.250.53");
        assert_eq!(pool["spec"]["prefix"], 24);
        assert_eq!(pool["spec"]["gateway"], "10.250.250.1");
        assert_eq!(pool["spec"]["dnsServers"][0], "10.250.250.1");
        let template = common::of_kind(&objects, "KVMMachineTemplate")
            .find(|t| t["metadata"]["name"] == "mixed-metal")
            .unwrap();
        let network = &template["spec"]["template"]["spec"]["networks"][0];
        assert_eq!(network["ipPoolRef"]["name"], "mixed-metal-nic0");
        assert_eq!(network["bridge"], "br0");
        assert!(network.get("address").is_none(), "{network}");
        assert!(network.get("gateway").is_none(), "{network}");
    }
    // Without ipPool there is no IPPool.
    let bundle = render_text(&reverse(&example()), CapiVersion::V1beta2).unwrap();
    assert_eq!(
        common::of_kind(&common::objects(&bundle), "IPPool").count(),
        0
    );
}

#[test]
fn vm_addresses_that_cannot_serve_the_pool_are_refused_at_their_lines() {
    let line =
        |text: &str, needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let cases = [
        // Three VMs, two addresses.
        (
            vm_pool(
                3,
                "{bridge: br0, ipPool: {start: 10.250.250.50, end: 10.250.250.51, prefix: 24}}",
            ),
            "holds 2 addresses for 3 VMs",
        ),
        // One address for three VMs.
        (
            vm_pool(3, "{bridge: br0, address: 10.250.250.50/24}"),
            "every one of the 3 VMs would get this address",
        ),
        // The VIP (10.250.250.29) inside the range.
        (
            vm_pool(
                2,
                "{bridge: br0, ipPool: {start: 10.250.250.20, end: 10.250.250.30, prefix: 24}}",
            ),
            "the control-plane endpoint 10.250.250.29 is inside",
        ),
        (
            vm_pool(
                2,
                "{bridge: br0, ipPool: {start: 10.250.250.60, end: 10.250.250.50, prefix: 24}}",
            ),
            "does not come after",
        ),
        (
            vm_pool(
                2,
                "{bridge: br0, address: 10.250.250.9/24, ipPool: {start: 10.250.250.50, end: 10.250.250.59, prefix: 24}}",
            ),
            "not both",
        ),
    ];
    for (text, expected) in cases {
        let message = render_text(&text, CapiVersion::V1beta2)
            .unwrap_err()
            .to_string();
        let at = format!(
            "{NAME}:{}: workerPools[0].vm.networks[0]",
            line(&text, "        - {bridge")
        );
        assert!(message.contains(&at), "{at:?} not in:\n{message}");
        assert!(
            message.contains(expected),
            "{expected:?} not in:\n{message}"
        );
    }
}
