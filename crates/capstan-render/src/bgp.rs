//! BGP on both ends: the Cilium BGP control plane (v2 API) objects applied to the workload cluster,
//! and the upstream router's FRR configuration.
//!
//! Every node runs one BGP instance (the cluster's ASN) peering with each router and announces its
//! own pod range (and, optionally, LoadBalancer addresses); the router puts all nodes in one
//! peer-group, one `neighbor` line per node, and by default only receives.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use capstan_model::cilium::{
    BgpAdvertisementEntry, BgpAdvertisementSpec, BgpClusterConfigSpec, BgpFamily,
    BgpGracefulRestart, BgpInstance, BgpPeer, BgpPeerConfigSpec, BgpTimers, CiliumBGPAdvertisement,
    CiliumBGPClusterConfig, CiliumBGPPeerConfig, PeerConfigReference,
};
use capstan_model::meta::{LabelSelector, LabelSelectorRequirement};
use serde_json::Value;

use crate::encode;
use crate::error::RenderError;
use crate::validate::{BgpPlan, PeerPlan, Plan};

/// Label that ties advertisements to the peer configs that announce them.
const ADVERTISE_LABEL: (&str, &str) = ("advertise", "bgp");

fn advertise_selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(
            ADVERTISE_LABEL.0.to_owned(),
            ADVERTISE_LABEL.1.to_owned(),
        )])),
        match_expressions: None,
    }
}

fn labelled(name: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(BTreeMap::from([(
            ADVERTISE_LABEL.0.to_owned(),
            ADVERTISE_LABEL.1.to_owned(),
        )])),
        ..Default::default()
    }
}

/// The objects of `workload/cilium-bgp.yaml` (cluster-scoped, for the workload cluster).
pub(crate) fn cilium_objects(plan: &Plan<'_>, bgp: &BgpPlan) -> Result<Vec<Value>, RenderError> {
    let Some(settings) = &plan.spec.bgp else {
        return Ok(Vec::new());
    };
    let mut objects = Vec::new();
    let cluster_config = CiliumBGPClusterConfig::new(
        "cilium-bgp",
        None,
        BgpClusterConfigSpec {
            // Every node, control plane and workers alike, announces its own pod range.
            node_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/os".to_owned(),
                    "linux".to_owned(),
                )])),
                match_expressions: None,
            }),
            bgp_instances: vec![BgpInstance {
                name: bgp.local_asn.to_string(),
                local_asn: Some(i64::from(bgp.local_asn)),
                local_port: None,
                peers: bgp
                    .peers
                    .iter()
                    .map(|peer| BgpPeer {
                        name: peer.name.clone(),
                        peer_asn: Some(i64::from(peer.asn)),
                        peer_address: Some(peer.address.to_string()),
                        peer_config_ref: Some(PeerConfigReference {
                            name: peer.config_name.clone(),
                        }),
                    })
                    .collect(),
            }],
        },
    );
    objects.push(encode(&cluster_config)?);

    let afi = if plan.pod_cidr.addr().is_ipv4() {
        "ipv4"
    } else {
        "ipv6"
    };
    let mut written = Vec::new();
    for peer in &bgp.peers {
        if written.contains(&peer.config_name) {
            continue;
        }
        written.push(peer.config_name.clone());
        let peer_config = CiliumBGPPeerConfig::new(
            peer.config_name.clone(),
            None,
            BgpPeerConfigSpec {
                timers: Some(BgpTimers {
                    connect_retry_time_seconds: None,
                    hold_time_seconds: Some(seconds(settings.hold_time_seconds)),
                    keep_alive_time_seconds: Some(seconds(settings.keep_alive_time_seconds)),
                }),
                // Multihop only applies to external peers.
                ebgp_multihop: (peer.asn != bgp.local_asn).then(|| seconds(settings.ebgp_multihop)),
                graceful_restart: Some(BgpGracefulRestart {
                    enabled: settings.graceful_restart_seconds > 0,
                    restart_time_seconds: (settings.graceful_restart_seconds > 0)
                        .then(|| seconds(settings.graceful_restart_seconds)),
                }),
                families: vec![BgpFamily {
                    afi: afi.to_owned(),
                    safi: "unicast".to_owned(),
                    advertisements: Some(advertise_selector()),
                }],
                auth_secret_ref: None,
                transport: None,
            },
        );
        objects.push(encode(&peer_config)?);
    }

    let mut pod_cidr = CiliumBGPAdvertisement::new(
        "pod-cidr",
        None,
        BgpAdvertisementSpec {
            advertisements: vec![BgpAdvertisementEntry {
                advertisement_type: "PodCIDR".to_owned(),
                ..BgpAdvertisementEntry::default()
            }],
        },
    );
    pod_cidr.metadata = labelled("pod-cidr");
    objects.push(encode(&pod_cidr)?);

    if settings.advertise_load_balancer_ips {
        let mut load_balancers = CiliumBGPAdvertisement::new(
            "loadbalancer-ips",
            None,
            BgpAdvertisementSpec {
                advertisements: vec![BgpAdvertisementEntry {
                    advertisement_type: "Service".to_owned(),
                    service: Some(serde_json::json!({"addresses": ["LoadBalancerIP"]})),
                    // Cilium announces only Services a selector matches; this one matches all.
                    selector: Some(LabelSelector {
                        match_labels: None,
                        match_expressions: Some(vec![LabelSelectorRequirement {
                            key: "somekey".to_owned(),
                            operator: "NotIn".to_owned(),
                            values: Some(vec!["never-used-value".to_owned()]),
                        }]),
                    }),
                    attributes: None,
                }],
            },
        );
        load_balancers.metadata = labelled("loadbalancer-ips");
        objects.push(encode(&load_balancers)?);
    }
    Ok(objects)
}

fn seconds(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// Path of the FRR configuration for `peer` within the bundle: `router/frr.conf` for the only
/// router, `router/frr-<address>.conf` for each of several.
pub(crate) fn frr_path(bgp: &BgpPlan, peer: &PeerPlan) -> String {
    if bgp.peers.len() == 1 {
        "router/frr.conf".to_owned()
    } else {
        format!("router/frr-{}.conf", peer.address)
    }
}

/// The FRR configuration of one router: a peer-group for the cluster's nodes, one neighbor line per
/// node, and (by default) receive-only filters. Meant to be merged into the router's
/// configuration (`vtysh -f`, or pasted).
pub(crate) fn frr_config(plan: &Plan<'_>, bgp: &BgpPlan, peer: &PeerPlan) -> String {
    let router = plan
        .spec
        .bgp
        .as_ref()
        .map(|b| b.router.clone())
        .unwrap_or_default();
    let group = &bgp.peer_group;
    let router_id = bgp
        .router_id
        .clone()
        .or_else(|| peer.address.is_ipv4().then(|| peer.address.to_string()));
    let family = if plan.pod_cidr.addr().is_ipv4() {
        "ipv4"
    } else {
        "ipv6"
    };
    let any = if family == "ipv4" {
        "0.0.0.0/0 le 32"
    } else {
        "::/0 le 128"
    };
    let prefix_list = if family == "ipv4" {
        "ip prefix-list"
    } else {
        "ipv6 prefix-list"
    };

    let mut text = String::new();
    // Writing to a String cannot fail; the results are ignored.
    let _ = writeln!(
        text,
        "! FRR configuration for router {} (AS {}): BGP with the nodes of cluster {} (AS {}).",
        peer.address, peer.asn, plan.spec.name, bgp.local_asn
    );
    let _ = writeln!(
        text,
        "! Generated by capstan render; merge it into the router's configuration, e.g. with `vtysh -f`."
    );
    let _ = writeln!(text, "!");
    let _ = writeln!(text, "{prefix_list} {group}-IN seq 5 permit {any}");
    let _ = writeln!(text, "!");
    if router.receive_only {
        let _ = writeln!(
            text,
            "! Receive-only: the nodes' routes are accepted, nothing is announced to them."
        );
        let _ = writeln!(text, "route-map {group}-OUT deny 10");
    } else {
        let _ = writeln!(text, "route-map {group}-OUT permit 10");
    }
    let _ = writeln!(text, "!");
    let _ = writeln!(text, "router bgp {}", peer.asn);
    if let Some(id) = router_id {
        let _ = writeln!(text, " bgp router-id {id}");
    }
    let _ = writeln!(text, " neighbor {group} peer-group");
    let _ = writeln!(text, " neighbor {group} remote-as {}", bgp.local_asn);
    if peer.asn != bgp.local_asn {
        let _ = writeln!(
            text,
            " neighbor {group} ebgp-multihop {}",
            router.ebgp_multihop
        );
    }
    if let Some(source) = &router.update_source {
        let _ = writeln!(text, " neighbor {group} update-source {source}");
    }
    for host in &plan.hosts {
        let _ = writeln!(text, " neighbor {} peer-group {group}", host.node_ip);
    }
    let _ = writeln!(text, " !");
    let _ = writeln!(text, " address-family {family} unicast");
    let _ = writeln!(text, "  neighbor {group} activate");
    let _ = writeln!(text, "  neighbor {group} soft-reconfiguration inbound");
    let _ = writeln!(text, "  neighbor {group} prefix-list {group}-IN in");
    let _ = writeln!(text, "  neighbor {group} route-map {group}-OUT out");
    let _ = writeln!(text, " exit-address-family");
    let _ = writeln!(text, "exit");
    let _ = writeln!(text, "!");
    text
}
