//! Cilium and the ClusterResourceSets that install it, plus the pod CIDR agreement between a
//! Cluster and its KubeadmControlPlane.
//!
//! A Cilium install is the set of documents a ClusterResourceSet applies (every key of every
//! ConfigMap/Secret it names, parsed as a multi-document manifest) together with the Clusters it
//! selects; Cilium objects written directly in the set (a `cilium-config` ConfigMap, the `cilium`
//! DaemonSet, BGP objects) form one more install, tied to the Cluster when the set has exactly one.

use std::collections::BTreeSet;

use capstan_model::cilium::{BgpClusterConfigSpec, BgpPeerConfigSpec};
use capstan_model::meta::{LabelSelector, selector_matches};
use capstan_model::path::FieldPath;
use ipnet::IpNet;
use serde_json::Value;

use super::Ctx;
use crate::catalogue::id;
use crate::diagnostic::{Diagnostic, Location};
use crate::embedded::{self, EmbeddedDoc, Encoding};
use crate::index::{CLUSTER_PODS_PATH, ClusterView, Entry, KCP_CONFIG_PATH, View, same_namespace};

/// A document of an install: embedded in a ConfigMap/Secret, or a top-level object.
enum Doc<'i, 'a> {
    Embedded(EmbeddedDoc<'a>),
    TopLevel(&'i Entry<'a>),
}

impl Doc<'_, '_> {
    fn value(&self) -> &Value {
        match self {
            Self::Embedded(d) => &d.doc.value,
            Self::TopLevel(e) => &e.obj.value,
        }
    }

    fn at(&self, path: &str) -> Location {
        let path = FieldPath::parse(path);
        match self {
            Self::Embedded(d) => d.at(&path),
            Self::TopLevel(e) => e.at(&path),
        }
    }

    fn kind(&self) -> &str {
        self.value()
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.value()
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    fn labels(&self) -> std::collections::BTreeMap<String, String> {
        self.value()
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `data.KEY` of a ConfigMap document, as a string.
    fn data(&self, key: &str) -> Option<&str> {
        self.value().get("data")?.get(key)?.as_str()
    }
}

/// Whether a top-level object is Cilium's agent DaemonSet (analysed here, so not "not analysed").
pub(crate) fn is_cilium_agent(entry: &Entry<'_>) -> bool {
    entry.id.kind == "DaemonSet" && entry.name() == "cilium"
}

fn is_top_level_cilium(entry: &Entry<'_>) -> bool {
    is_cilium_agent(entry)
        || (matches!(entry.view, View::ConfigMap) && entry.name() == "cilium-config")
}

struct Install<'i, 'a> {
    docs: Vec<Doc<'i, 'a>>,
    clusters: Vec<(&'i Entry<'a>, &'i ClusterView)>,
}

/// Runs the Cilium, ClusterResourceSet and pod CIDR rules.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    let mut installs = resource_set_installs(ctx, out);
    let top: Vec<Doc<'_, '_>> = ctx
        .index
        .entries
        .iter()
        .filter(|e| is_top_level_cilium(e))
        .map(Doc::TopLevel)
        .collect();
    if !top.is_empty() {
        let clusters: Vec<_> = ctx.index.clusters().collect();
        installs.push(Install {
            docs: top,
            clusters: if clusters.len() == 1 {
                clusters
            } else {
                Vec::new()
            },
        });
    }
    for install in &installs {
        cilium_config(ctx, install, out);
    }
    bgp(ctx, &installs, out);
    pod_cidrs(ctx, out);
}

fn resource_set_installs<'i, 'a>(
    ctx: &'i Ctx<'i, 'a>,
    out: &mut Vec<Diagnostic>,
) -> Vec<Install<'i, 'a>> {
    let mut installs = Vec::new();
    for (crs, view) in ctx.index.resource_sets() {
        let clusters: Vec<_> = ctx
            .index
            .clusters()
            .filter(|(c, _)| same_namespace(c.namespace(), crs.namespace()))
            .filter(|(c, _)| selects(&view.selector, &c.labels()))
            .collect();
        if clusters.is_empty() && !ctx.partial {
            out.push(
                Diagnostic::new(
                    id::CRS_SELECTS_NO_CLUSTER,
                    format!("{} selects no Cluster in its namespace", crs.id),
                    crs.at_str("spec.clusterSelector"),
                )
                .why("its resources (often the CNI) are applied to no cluster; nodes stay NotReady without a CNI")
                .hint("add the selector's labels to the Cluster's metadata.labels, or fix the selector"),
            );
        }
        let mut docs = Vec::new();
        for (r, resource) in view.resources.iter().enumerate() {
            let kind = if resource.kind.is_empty() {
                "Secret"
            } else {
                resource.kind.as_str()
            };
            let Some(target) = ctx
                .index
                .find(Some(""), kind, &resource.name, crs.namespace())
            else {
                if !ctx.partial {
                    out.push(
                        Diagnostic::new(
                            id::CRS_RESOURCE_MISSING,
                            format!("{} names {kind} {}, which is not in the set", crs.id, resource.name),
                            crs.at(&FieldPath::parse("spec.resources").index(r)),
                        )
                        .why("the ClusterResourceSet controller waits for it and applies nothing to the workload cluster")
                        .hint(format!("add {kind} {} to the set, or fix the name", resource.name)),
                    );
                }
                continue;
            };
            for (section, encoding) in [
                (
                    "data",
                    if kind == "Secret" {
                        Encoding::Base64
                    } else {
                        Encoding::Plain
                    },
                ),
                ("stringData", Encoding::Plain),
            ] {
                let keys: Vec<String> = target
                    .obj
                    .value
                    .get(section)
                    .and_then(Value::as_object)
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                for key in keys {
                    let field = FieldPath::root().key(section).key(key);
                    docs.extend(
                        embedded::documents(target.obj, &field, encoding)
                            .into_iter()
                            .map(Doc::Embedded),
                    );
                }
            }
        }
        installs.push(Install { docs, clusters });
    }
    installs
}

/// Whether a ClusterResourceSet selector selects `labels`; an empty selector selects nothing.
fn selects(selector: &LabelSelector, labels: &std::collections::BTreeMap<String, String>) -> bool {
    let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    !empty && selector_matches(selector, labels)
}

fn agent_has_service_host(doc: &Doc<'_, '_>) -> bool {
    let Some(spec) = doc.value().pointer("/spec/template/spec") else {
        return false;
    };
    ["containers", "initContainers"].iter().any(|list| {
        spec.get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("env")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|e| {
                        e.get("name").and_then(Value::as_str) == Some("KUBERNETES_SERVICE_HOST")
                    })
            })
    })
}

fn cilium_config(ctx: &Ctx<'_, '_>, install: &Install<'_, '_>, out: &mut Vec<Diagnostic>) {
    let Some(config) = install
        .docs
        .iter()
        .find(|d| d.kind() == "ConfigMap" && d.name() == "cilium-config")
    else {
        return;
    };
    let replaces_kube_proxy = matches!(
        config.data("kube-proxy-replacement"),
        Some("true" | "strict")
    );
    if replaces_kube_proxy {
        let in_config = config
            .data("k8s-service-host")
            .is_some_and(|h| !h.is_empty());
        let in_agent = install
            .docs
            .iter()
            .filter(|d| d.kind() == "DaemonSet" && d.name() == "cilium")
            .any(agent_has_service_host);
        if !in_config && !in_agent {
            let endpoint = install
                .clusters
                .first()
                .and_then(|(_, c)| c.endpoint_host.clone())
                .unwrap_or_else(|| "the control-plane endpoint".to_owned());
            out.push(
                Diagnostic::new(
                    id::CILIUM_K8S_SERVICE_HOST,
                    "Cilium replaces kube-proxy but has no k8sServiceHost: it will look for the API server at the kubernetes Service (10.96.0.1:443)",
                    config.at("data.kube-proxy-replacement"),
                )
                .why("nothing serves the kubernetes Service until Cilium runs, so the agents hang in Init with `dial tcp 10.96.0.1:443: i/o timeout`")
                .hint(format!("render Cilium with `k8sServiceHost={endpoint}` and `k8sServicePort=6443`, which sets KUBERNETES_SERVICE_HOST on the agent")),
            );
        }
        for (cluster, view) in &install.clusters {
            kube_proxy_skipped(ctx, cluster, view, config, out);
        }
    }
    if let Some(text) = config.data("ipv4-native-routing-cidr") {
        let Ok(native) = text.trim().parse::<IpNet>() else {
            return;
        };
        for (cluster, view) in &install.clusters {
            for (i, cidr) in view.pod_cidrs.iter().enumerate() {
                let Ok(pods) = cidr.trim().parse::<IpNet>() else {
                    continue;
                };
                if !matches!(pods, IpNet::V4(_)) || native.contains(&pods) {
                    continue;
                }
                out.push(
                    Diagnostic::new(
                        id::CILIUM_NATIVE_ROUTING_CIDR,
                        format!("Cilium's ipv4-native-routing-cidr {native} does not contain the pod CIDR {pods} of {}", cluster.id),
                        config.at("data.ipv4-native-routing-cidr"),
                    )
                    .why("pod traffic outside the native-routing CIDR is masqueraded, so pods on different nodes cannot reach each other directly")
                    .hint(format!("render Cilium with `ipv4NativeRoutingCIDR={pods}`"))
                    .related("pod CIDR", cluster.at(&FieldPath::parse(CLUSTER_PODS_PATH).index(i))),
                );
            }
        }
    }
}

fn kube_proxy_skipped(
    ctx: &Ctx<'_, '_>,
    cluster: &Entry<'_>,
    view: &ClusterView,
    config: &Doc<'_, '_>,
    out: &mut Vec<Diagnostic>,
) {
    let Some((kcp_entry, kcp)) = ctx.index.control_plane_of(cluster, view) else {
        return;
    };
    let skipped = kcp.config.init_configuration.as_ref().is_some_and(|i| {
        i.skip_phases
            .iter()
            .any(|p| p == "addon/kube-proxy" || p == "addon/all" || p == "addon")
    });
    if skipped {
        return;
    }
    out.push(
        Diagnostic::new(
            id::KUBE_PROXY_NOT_SKIPPED,
            format!("Cilium replaces kube-proxy, but {} still installs it", kcp_entry.id),
            kcp_entry.at(&FieldPath::parse(KCP_CONFIG_PATH).key("initConfiguration")),
        )
        .why("kube-proxy and Cilium then both program service rules, and kube-proxy's iptables rules can shadow Cilium's")
        .hint("add `addon/kube-proxy` to `initConfiguration.skipPhases`")
        .related("kube-proxy replacement", config.at("data.kube-proxy-replacement")),
    );
}

fn bgp(ctx: &Ctx<'_, '_>, installs: &[Install<'_, '_>], out: &mut Vec<Diagnostic>) {
    if ctx.partial {
        return;
    }
    let docs: Vec<&Doc<'_, '_>> = installs.iter().flat_map(|i| i.docs.iter()).collect();
    let top: Vec<Doc<'_, '_>> = ctx
        .index
        .entries
        .iter()
        .filter(|e| {
            matches!(
                e.view,
                View::BgpClusterConfig | View::BgpPeerConfig | View::BgpAdvertisement
            )
        })
        .map(Doc::TopLevel)
        .collect();
    let all: Vec<&Doc<'_, '_>> = docs.into_iter().chain(top.iter()).collect();
    let of_kind = |kind: &'static str| all.iter().copied().filter(move |d| d.kind() == kind);
    let peer_names: BTreeSet<&str> = of_kind("CiliumBGPPeerConfig").map(|d| d.name()).collect();
    let advert_labels: Vec<_> = of_kind("CiliumBGPAdvertisement")
        .map(|d| d.labels())
        .collect();
    for doc in of_kind("CiliumBGPClusterConfig") {
        let Some(spec) = doc
            .value()
            .get("spec")
            .and_then(|s| serde_json::from_value::<BgpClusterConfigSpec>(s.clone()).ok())
        else {
            continue;
        };
        for (i, instance) in spec.bgp_instances.iter().enumerate() {
            for (j, peer) in instance.peers.iter().enumerate() {
                let Some(reference) = &peer.peer_config_ref else {
                    continue;
                };
                if peer_names.contains(reference.name.as_str()) {
                    continue;
                }
                out.push(
                    Diagnostic::new(
                        id::BGP_PEER_CONFIG_MISSING,
                        format!("peer `{}` names CiliumBGPPeerConfig {}, which is not in the set", peer.name, reference.name),
                        doc.at(&format!("spec.bgpInstances[{i}].peers[{j}].peerConfigRef.name")),
                    )
                    .why("Cilium does not establish a session with a peer whose configuration is missing; nothing is advertised to that router")
                    .hint("create the CiliumBGPPeerConfig, or fix peerConfigRef.name"),
                );
            }
        }
    }
    for doc in of_kind("CiliumBGPPeerConfig") {
        let Some(spec) = doc
            .value()
            .get("spec")
            .and_then(|s| serde_json::from_value::<BgpPeerConfigSpec>(s.clone()).ok())
        else {
            continue;
        };
        for (k, family) in spec.families.iter().enumerate() {
            let Some(selector) = &family.advertisements else {
                continue;
            };
            if advert_labels
                .iter()
                .any(|labels| selector_matches(selector, labels))
            {
                continue;
            }
            out.push(
                Diagnostic::new(
                    id::BGP_ADVERTISEMENT_UNMATCHED,
                    format!(
                        "the {}/{} family of CiliumBGPPeerConfig {} selects no CiliumBGPAdvertisement",
                        family.afi,
                        family.safi,
                        doc.name()
                    ),
                    doc.at(&format!("spec.families[{k}].advertisements")),
                )
                .why("the session comes up but announces nothing, so pod CIDRs are not routed")
                .hint("label a CiliumBGPAdvertisement with the selector's labels (for example `advertise: bgp`)"),
            );
        }
    }
}

/// The CIDRs of a comma-separated list, normalised; entries that do not parse are kept as text.
fn cidr_set(items: impl Iterator<Item = String>) -> BTreeSet<String> {
    items
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<IpNet>()
                .map(|n| n.trunc().to_string())
                .unwrap_or(s)
        })
        .collect()
}

fn pod_cidrs(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for (cluster, view) in ctx.index.clusters() {
        if view.pod_cidrs.is_empty() {
            continue;
        }
        let Some((kcp_entry, kcp)) = ctx.index.control_plane_of(cluster, view) else {
            continue;
        };
        let Some(subnet) = kcp.pod_subnet() else {
            continue;
        };
        let from_cluster = cidr_set(view.pod_cidrs.iter().cloned());
        let from_kcp = cidr_set(subnet.split(',').map(str::to_owned));
        if from_cluster == from_kcp {
            continue;
        }
        out.push(
            Diagnostic::new(
                id::POD_CIDR_MISMATCH,
                format!(
                    "{} sets podSubnet {subnet}, but {} has pod CIDRs {}",
                    kcp_entry.id,
                    cluster.id,
                    view.pod_cidrs.join(", ")
                ),
                kcp_entry.at_str("spec.kubeadmConfigSpec.clusterConfiguration.networking.podSubnet"),
            )
            .why("kubeadm allocates node pod ranges from podSubnet while the CNI is configured from the Cluster; pods get addresses nothing routes")
            .hint(format!("set podSubnet to {} or remove it so Cluster API fills it in", view.pod_cidrs.join(",")))
            .related("Cluster pod CIDRs", cluster.at_str(CLUSTER_PODS_PATH)),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{BASE, has_rule, lint_text, lint_text_partial};

    #[test]
    fn kube_proxy_replacement_needs_service_host() {
        let bad = BASE.replacen(
            "- name: KUBERNETES_SERVICE_HOST",
            "- name: SOMETHING_ELSE",
            1,
        );
        assert_ne!(bad, BASE);
        let report = lint_text(&bad);
        let d = report
            .diagnostics
            .iter()
            .find(|d| d.rule == id::CILIUM_K8S_SERVICE_HOST)
            .expect("finding");
        assert!(
            d.hint
                .as_deref()
                .is_some_and(|h| h.contains("10.250.250.29"))
        );
        // Inside the ConfigMap's block scalar: points at the cilium-config key's own line.
        let line = BASE
            .lines()
            .position(|l| l.contains("kube-proxy-replacement:"))
            .expect("line")
            + 1;
        assert_eq!(d.location.line as usize, line);
        // A k8s-service-host in the config is enough.
        let ok = bad.replacen(
            "kube-proxy-replacement: \"true\"",
            "kube-proxy-replacement: \"true\"\n        k8s-service-host: 10.250.250.29",
            1,
        );
        assert!(!has_rule(&lint_text(&ok), id::CILIUM_K8S_SERVICE_HOST));
        assert!(!has_rule(&lint_text(BASE), id::CILIUM_K8S_SERVICE_HOST));
    }

    #[test]
    fn native_routing_cidr_must_contain_pods() {
        let bad = BASE.replacen(
            "ipv4-native-routing-cidr: 10.244.0.0/16",
            "ipv4-native-routing-cidr: 10.0.0.0/16",
            1,
        );
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::CILIUM_NATIVE_ROUTING_CIDR));
        let wider = BASE.replacen(
            "ipv4-native-routing-cidr: 10.244.0.0/16",
            "ipv4-native-routing-cidr: 10.0.0.0/8",
            1,
        );
        assert!(!has_rule(
            &lint_text(&wider),
            id::CILIUM_NATIVE_ROUTING_CIDR
        ));
    }

    #[test]
    fn pod_subnet_must_match_cluster() {
        let bad = BASE.replacen("podSubnet: 10.244.0.0/16", "podSubnet: 192.168.0.0/16", 1);
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::POD_CIDR_MISMATCH));
    }

    #[test]
    fn kube_proxy_must_be_skipped() {
        let bad = BASE.replacen("      - addon/kube-proxy\n", "      - preflight\n", 1);
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::KUBE_PROXY_NOT_SKIPPED));
    }

    #[test]
    fn resource_sets() {
        let bad = BASE.replacen(
            "    name: cilium-manifests\n",
            "    name: cilium-manifest\n",
            1,
        );
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::CRS_RESOURCE_MISSING));
        assert!(!has_rule(
            &lint_text_partial(&bad),
            id::CRS_RESOURCE_MISSING
        ));
        let bad = BASE.replacen("      cni: cilium\n", "      cni: calico\n", 1);
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::CRS_SELECTS_NO_CLUSTER));
    }

    #[test]
    fn bgp_references() {
        let bad = BASE.replacen("name: peer-65001\n", "name: peer-65002\n", 1);
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::BGP_PEER_CONFIG_MISSING));
        let bad = BASE.replacen("advertise: bgp\n", "advertise: none\n", 1);
        assert_ne!(bad, BASE);
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::BGP_ADVERTISEMENT_UNMATCHED),
            "{}",
            report.render_human(false)
        );
    }
}
