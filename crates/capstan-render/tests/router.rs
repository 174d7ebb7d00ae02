//! The upstream router's FRR configuration, parsed by FRR itself (`vtysh --dryrun`), and the Cilium
//! BGP objects it pairs with.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use capstan_render::CapiVersion;
use common::{EXAMPLES, objects, of_kind, render, render_example};

fn vtysh_accepts(config: &str) {
    let vtysh = common::require_tool("vtysh");
    let dir = tempfile::tempdir().unwrap();
    let path = common::write(dir.path(), "frr.conf", config);
    // --dryrun parses every line with FRR's own grammar and exits non-zero on the first error;
    // --config_dir keeps it away from the machine's own /etc/frr.
    common::run(
        Command::new(vtysh)
            .arg("--config_dir")
            .arg(dir.path())
            .arg("--dryrun")
            .arg("-f")
            .arg(&path),
    );
}

#[test]
fn vtysh_rejects_a_broken_configuration() {
    // The check below is only meaningful if FRR really parses the file.
    let vtysh = common::require_tool("vtysh");
    let dir = tempfile::tempdir().unwrap();
    let path = common::write(
        dir.path(),
        "bad.conf",
        "router bgp 65001\n neighbor GROUP remote-ass 1\n",
    );
    let status = Command::new(vtysh)
        .arg("--config_dir")
        .arg(dir.path())
        .arg("--dryrun")
        .arg("-f")
        .arg(&path)
        .output()
        .unwrap()
        .status;
    assert!(!status.success());
}

#[test]
fn frr_accepts_the_router_configuration() {
    for example in EXAMPLES {
        let spec = common::load_example(example);
        let bundle = render_example(example, CapiVersion::V1beta1);
        let config = &bundle
            .file("router/frr.conf")
            .expect("router/frr.conf")
            .contents;
        vtysh_accepts(config);

        let group = if example == "capi-1.yaml" {
            "CAPI1"
        } else {
            "SUPER"
        };
        let bgp = spec.bgp.as_ref().unwrap();
        let peer = &bgp.peers[0];
        assert!(
            config.contains(&format!("router bgp {}\n", peer.asn)),
            "{config}"
        );
        assert!(
            config.contains(&format!(" neighbor {group} peer-group\n")),
            "{config}"
        );
        assert!(
            config.contains(&format!(" neighbor {group} remote-as {}\n", bgp.local_asn)),
            "{config}"
        );
        assert!(config.contains(&format!(" neighbor {group} ebgp-multihop 255\n")));
        assert!(config.contains(&format!(
            "  neighbor {group} soft-reconfiguration inbound\n"
        )));
        assert!(
            config.contains(&format!("route-map {group}-OUT deny 10\n")),
            "receive-only"
        );
        assert!(!config.contains("update-source"), "only when given");
        let neighbor_lines: Vec<&str> = config
            .lines()
            .filter(|l| l.ends_with(&format!(" peer-group {group}")))
            .collect();
        let expected: Vec<String> = spec
            .hosts
            .iter()
            .map(|h| {
                let cidr = h.network.addresses[0].cidr.as_deref().unwrap();
                format!(
                    " neighbor {} peer-group {group}",
                    cidr.split('/').next().unwrap()
                )
            })
            .collect();
        assert_eq!(neighbor_lines, expected, "one neighbor line per node");
        if example == "capi-1.yaml" {
            assert!(config.contains(" bgp router-id 192.168.254.1\n"));
        }
    }
}

#[test]
fn announcing_router_and_update_source() {
    let mut spec = common::load_example("capi-1.yaml");
    let bgp = spec.bgp.as_mut().unwrap();
    bgp.router.receive_only = false;
    bgp.router.update_source = Some("192.168.254.1".to_owned());
    bgp.advertise_load_balancer_ips = true;
    let bundle = render(&spec, CapiVersion::V1beta1);
    let config = &bundle.file("router/frr.conf").unwrap().contents;
    vtysh_accepts(config);
    assert!(config.contains("route-map CAPI1-OUT permit 10\n"));
    assert!(config.contains(" neighbor CAPI1 update-source 192.168.254.1\n"));
    let all = objects(&bundle);
    let names: Vec<_> = of_kind(&all, "CiliumBGPAdvertisement")
        .map(|a| a["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["pod-cidr", "loadbalancer-ips"]);
}

#[test]
fn several_routers_get_one_configuration_each() {
    let mut spec = common::load_example("capi-1.yaml");
    let bgp = spec.bgp.as_mut().unwrap();
    bgp.router.router_id = None;
    bgp.peers.push(capstan_render::spec::BgpPeer {
        address: "192.168.254.2".to_owned(),
        asn: 65001,
    });
    let bundle = render(&spec, CapiVersion::V1beta1);
    for address in ["192.168.254.1", "192.168.254.2"] {
        let config = &bundle
            .file(&format!("router/frr-{address}.conf"))
            .unwrap_or_else(|| panic!("no configuration for {address}"))
            .contents;
        vtysh_accepts(config);
        assert!(config.contains(&format!(" bgp router-id {address}\n")));
    }
    let all = objects(&bundle);
    let cluster_config = of_kind(&all, "CiliumBGPClusterConfig").next().unwrap();
    let peers = cluster_config["spec"]["bgpInstances"][0]["peers"]
        .as_array()
        .unwrap();
    assert_eq!(peers.len(), 2);
    assert_ne!(peers[0]["name"], peers[1]["name"]);
    assert_eq!(
        of_kind(&all, "CiliumBGPPeerConfig").count(),
        1,
        "one config per peer AS"
    );
}

#[test]
fn cilium_bgp_objects_pair_with_the_router() {
    let all = objects(&render_example("capi-1.yaml", CapiVersion::V1beta1));
    let cluster_config = of_kind(&all, "CiliumBGPClusterConfig").next().unwrap();
    assert_eq!(
        cluster_config["spec"]["nodeSelector"]["matchLabels"]["kubernetes.io/os"],
        "linux"
    );
    let instance = &cluster_config["spec"]["bgpInstances"][0];
    assert_eq!(instance["name"], "65010");
    assert_eq!(instance["localASN"], 65010);
    assert_eq!(instance["peers"][0]["peerAddress"], "192.168.254.1");
    assert_eq!(instance["peers"][0]["peerASN"], 65001);
    let peer_config = of_kind(&all, "CiliumBGPPeerConfig").next().unwrap();
    assert_eq!(
        instance["peers"][0]["peerConfigRef"]["name"],
        peer_config["metadata"]["name"]
    );
    assert_eq!(peer_config["spec"]["ebgpMultihop"], 10);
    assert_eq!(peer_config["spec"]["gracefulRestart"]["enabled"], true);
    let family = &peer_config["spec"]["families"][0];
    assert_eq!(
        (family["afi"].as_str(), family["safi"].as_str()),
        (Some("ipv4"), Some("unicast"))
    );
    let advertisement = of_kind(&all, "CiliumBGPAdvertisement").next().unwrap();
    assert_eq!(
        family["advertisements"]["matchLabels"]["advertise"],
        advertisement["metadata"]["labels"]["advertise"]
    );
    assert_eq!(
        advertisement["spec"]["advertisements"][0]["advertisementType"],
        "PodCIDR"
    );
}
