//! Providers mixed in one cluster: machine pools whose provider has nothing to run them on, and a
//! control-plane endpoint no machine will serve.
//!
//! - `no-hypervisors`: a KubeadmControlPlane or MachineDeployment whose machine template is a
//!   KVMMachineTemplate, in a cluster whose KVMCluster (the Cluster's `infrastructureRef`, else one
//!   labelled `cluster.x-k8s.io/cluster-name: <cluster>`) is missing or lists no hypervisors, or, for
//!   the control plane, lists none that takes control-plane VMs. (A Metal3MachineTemplate with no
//!   matching BareMetalHost is `not-enough-hosts`.) Skipped with `--partial`.
//! - `endpoint-unserved`: the cluster's control-plane endpoint (on the Cluster or its
//!   infrastructure cluster) with no control plane behind it (no `controlPlaneRef`, or zero
//!   replicas); a KVMCluster lent by label that carries an endpoint of its own (nothing serves it:
//!   the cluster's endpoint is the one on its own infrastructure cluster); and a control plane on
//!   KVM VMs whose endpoint address is neither announced by a static pod in the control plane's
//!   files (kube-vip) nor a static address of its VMs (a warning: a load balancer outside the set
//!   may serve it).
//!
//! The KVM kinds are read as JSON: both of their versions (`v1alpha4`, `v1beta2`) have one shape.

use capstan_model::meta::LABEL_CLUSTER_NAME;
use capstan_model::path::FieldPath;
use serde_json::Value;

use super::Ctx;
use crate::catalogue::id;
use crate::diagnostic::{Diagnostic, Severity};
use crate::index::{ClusterView, Entry, Index, Ref, View, same_namespace};

const INFRA: &str = "infrastructure.cluster.x-k8s.io";

/// The KVMCluster that gives a cluster its hypervisors, and how it was found.
struct Lender<'i, 'a> {
    entry: &'i Entry<'a>,
    /// Through the Cluster's `infrastructureRef` (not a label).
    is_infrastructure: bool,
}

fn is_kind(entry: &Entry<'_>, kind: &str) -> bool {
    entry.id.kind == kind && entry.id.group() == INFRA
}

/// The KVMCluster of the Cluster `cluster`.
fn kvm_cluster<'i, 'a>(
    index: &'i Index<'a>,
    cluster: &Entry<'_>,
    view: &ClusterView,
) -> Option<Lender<'i, 'a>> {
    if let Some(reference) = &view.infrastructure_ref
        && let Some(target) = index.resolve(reference, cluster.namespace())
        && is_kind(target, "KVMCluster")
    {
        return Some(Lender {
            entry: target,
            is_infrastructure: true,
        });
    }
    index
        .entries
        .iter()
        .filter(|e| is_kind(e, "KVMCluster"))
        .filter(|e| same_namespace(e.namespace(), cluster.namespace()))
        .find(|e| e.labels().get(LABEL_CLUSTER_NAME).map(String::as_str) == Some(cluster.name()))
        .map(|entry| Lender {
            entry,
            is_infrastructure: false,
        })
}

/// The hypervisors a KVMCluster lists: (name, takes control-plane VMs).
fn hypervisors(entry: &Entry<'_>) -> Vec<(String, bool)> {
    entry
        .obj
        .value
        .pointer("/spec/hypervisors")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|h| {
                    (
                        h.get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        h.get("controlPlane").and_then(Value::as_bool) != Some(false),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The KVMMachineTemplate a reference names, if it is one in the set.
fn kvm_template<'i, 'a>(
    index: &'i Index<'a>,
    reference: &Ref,
    from: &Entry<'_>,
) -> Option<&'i Entry<'a>> {
    index
        .resolve(reference, from.namespace())
        .filter(|t| is_kind(t, "KVMMachineTemplate"))
}

/// Runs the rules.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    if !ctx.partial {
        pools(ctx, out);
        vm_addresses(ctx, out);
    }
    endpoints(ctx, out);
}

/// How many addresses an IPPool's ranges hold; `None` when a range is not understood.
fn pool_size(pool: &capstan_model::ipam::IpPoolSpec) -> Option<u128> {
    use std::net::IpAddr;
    let mut total: u128 = 0;
    for range in &pool.pools {
        let start = range.start.as_deref()?.parse::<IpAddr>().ok()?;
        let end = range.end.as_deref()?.parse::<IpAddr>().ok()?;
        let size = match (start, end) {
            (IpAddr::V4(s), IpAddr::V4(e)) => {
                u128::from(u32::from(e)).checked_sub(u128::from(u32::from(s)))?
            }
            (IpAddr::V6(s), IpAddr::V6(e)) => u128::from(e).checked_sub(u128::from(s))?,
            _ => return None,
        };
        total = total.saturating_add(size.saturating_add(1));
    }
    Some(total)
}

/// An IPPool by namespace and name.
type PoolKey = (Option<String>, String);
/// Replicas taking addresses from a pool, and who asks for them.
type PoolDemand = (i64, Vec<(String, crate::diagnostic::Location)>);

/// IPPools named by KVMMachineTemplates' NICs hold an address for every machine of those
/// templates.
fn vm_addresses(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    // (pool namespace, pool name) → (replicas, who needs them)
    let mut demand: std::collections::BTreeMap<PoolKey, PoolDemand> =
        std::collections::BTreeMap::new();
    let mut users: Vec<(&Entry<'_>, &Ref, i32)> = Vec::new();
    for (entry, kcp) in ctx.index.control_planes() {
        users.push((entry, &kcp.infrastructure_ref, kcp.replicas.unwrap_or(1)));
    }
    for (entry, md) in ctx.index.deployments() {
        users.push((entry, &md.infrastructure_ref, md.replicas.unwrap_or(1)));
    }
    for (user, reference, replicas) in users {
        let Some(template) = kvm_template(ctx.index, reference, user) else {
            continue;
        };
        let networks = template
            .obj
            .value
            .pointer("/spec/template/spec/networks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let pools: std::collections::BTreeSet<String> = networks
            .iter()
            .filter_map(|n| n.pointer("/ipPoolRef/name").and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        for pool in pools {
            let need = demand
                .entry((template.namespace().map(str::to_owned), pool))
                .or_default();
            need.0 += i64::from(replicas.max(0));
            need.1
                .push((user.id.to_string(), user.at_str("spec.replicas")));
        }
    }
    if demand.is_empty() {
        return;
    }
    for (entry, pool) in ctx.index.each(|v| match v {
        View::IpPool(p) => Some(p.as_ref()),
        _ => None,
    }) {
        let key = (
            entry.namespace().map(str::to_owned),
            entry.name().to_owned(),
        );
        let Some((need, needed_by)) = demand.get(&key) else {
            continue;
        };
        let Some(have) = pool_size(pool) else {
            continue;
        };
        let need_u = u128::try_from(*need).unwrap_or(0);
        let (message, severity_warning) = if have < need_u {
            (
                format!(
                    "IPPool {} holds {have} addresses, but {need} KVM machines take theirs from it",
                    entry.id
                ),
                false,
            )
        } else if have == need_u {
            (
                format!(
                    "IPPool {} holds exactly the {need} addresses its KVM machines take: none is spare for a rolling upgrade",
                    entry.id
                ),
                true,
            )
        } else {
            continue;
        };
        let mut d = Diagnostic::new(id::IP_POOL_TOO_SMALL, message, entry.at_str("spec.pools"))
            .why(if severity_warning {
                "a rolling upgrade (KubeadmControlPlane, MachineDeployment) adds a machine before it removes one; that machine waits for an address"
            } else {
                "each KVMMachine claims one address of the pool; the rest wait with WaitingForIPAddress and never get a VM"
            })
            .hint("widen the pool's ranges, or lower the replicas");
        if severity_warning {
            d = d.with_severity(Severity::Warning);
        }
        for (name, location) in needed_by {
            d = d.related(format!("replicas of {name}"), location.clone());
        }
        out.push(d);
    }
}

fn pools(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    // (the pool, its reference, its cluster, whether it is the control plane)
    let mut users: Vec<(&Entry<'_>, &Ref, &Entry<'_>, &ClusterView, bool)> = Vec::new();
    for (cluster, view) in ctx.index.clusters() {
        if let Some((kcp, cp)) = ctx.index.control_plane_of(cluster, view) {
            users.push((kcp, &cp.infrastructure_ref, cluster, view, true));
        }
    }
    for (md_entry, md) in ctx.index.deployments() {
        if let Some((cluster, view)) = ctx.index.cluster(&md.cluster_name, md_entry.namespace()) {
            users.push((md_entry, &md.infrastructure_ref, cluster, view, false));
        }
    }
    for (user, reference, cluster, view, control_plane) in users {
        let Some(template) = kvm_template(ctx.index, reference, user) else {
            continue;
        };
        let what = if control_plane {
            "control-plane machines"
        } else {
            "this pool's machines"
        };
        let Some(lender) = kvm_cluster(ctx.index, cluster, view) else {
            out.push(
                Diagnostic::new(
                    id::NO_HYPERVISORS,
                    format!(
                        "{what} are KVM VMs ({}), but cluster {} has no KVMCluster to list hypervisors",
                        template.id.name,
                        cluster.name()
                    ),
                    user.at(&reference.path),
                )
                .why("a KVMMachine is placed on one of its cluster's KVMCluster hypervisors; without one it waits forever and the machine never gets a VM")
                .hint(format!(
                    "point the Cluster's infrastructureRef at a KVMCluster, or add a KVMCluster labelled `{LABEL_CLUSTER_NAME}: {}` with `spec.hypervisors`",
                    cluster.name()
                ))
                .related("the KVMMachineTemplate", template.at(&FieldPath::root())),
            );
            continue;
        };
        let listed = hypervisors(lender.entry);
        let usable = listed
            .iter()
            .filter(|(_, takes_control_plane)| !control_plane || *takes_control_plane)
            .count();
        if usable > 0 {
            continue;
        }
        let message = if listed.is_empty() {
            format!(
                "{what} are KVM VMs, but KVMCluster {} lists no hypervisors",
                lender.entry.id.name
            )
        } else {
            format!(
                "control-plane machines are KVM VMs, but every hypervisor of KVMCluster {} has `controlPlane: false`",
                lender.entry.id.name
            )
        };
        out.push(
            Diagnostic::new(id::NO_HYPERVISORS, message, user.at(&reference.path))
                .why("placement finds no hypervisor, so the KVMMachine stays `NoHypervisorFits` and the machine never gets a VM")
                .hint("list the libvirt hypervisors (`name`, `uri`, `pool`) in the KVMCluster's spec.hypervisors")
                .related("the KVMCluster", lender.entry.at_str("spec")),
        );
    }
}

/// `spec.controlPlaneEndpoint.host` of an object, as written.
fn endpoint_host(entry: &Entry<'_>) -> Option<String> {
    entry
        .obj
        .value
        .pointer("/spec/controlPlaneEndpoint/host")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
}

fn endpoints(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for (cluster, view) in ctx.index.clusters() {
        let infrastructure = view
            .infrastructure_ref
            .as_ref()
            .and_then(|r| ctx.index.resolve(r, cluster.namespace()));
        // The endpoint and where it is written.
        let endpoint = match (&view.endpoint_host, infrastructure) {
            (Some(host), _) => Some((host.clone(), cluster, "spec.controlPlaneEndpoint.host")),
            (None, Some(infra)) => {
                endpoint_host(infra).map(|h| (h, infra, "spec.controlPlaneEndpoint.host"))
            }
            (None, None) => None,
        };
        let control_plane = ctx.index.control_plane_of(cluster, view);
        if let Some((host, at, path)) = &endpoint {
            let replicas = control_plane.map(|(_, cp)| cp.replicas.unwrap_or(1));
            let unserved = match (&view.control_plane_ref, replicas) {
                (None, _) => Some("the Cluster has no controlPlaneRef".to_owned()),
                (Some(_), Some(0)) => Some("the control plane has 0 replicas".to_owned()),
                _ => None,
            };
            if let Some(reason) = unserved {
                out.push(
                    Diagnostic::new(
                        id::ENDPOINT_UNSERVED,
                        format!("no machine will serve the control-plane endpoint {host}: {reason}"),
                        at.at_str(path),
                    )
                    .why("workers join through the endpoint and the Cluster waits for its API; with no control-plane machine behind it nothing answers")
                    .hint("give the Cluster a controlPlaneRef to a KubeadmControlPlane with at least one replica"),
                );
            }
        }
        if let Some(lender) = kvm_cluster(ctx.index, cluster, view).filter(|l| !l.is_infrastructure)
            && let Some(lent_host) = endpoint_host(lender.entry)
        {
            let cluster_host = endpoint.as_ref().map(|(h, _, _)| h.as_str());
            let mut d = Diagnostic::new(
                id::ENDPOINT_UNSERVED,
                format!(
                    "KVMCluster {} only lends hypervisors to cluster {}, so nothing serves its endpoint {lent_host}",
                    lender.entry.id.name,
                    cluster.name()
                ),
                lender.entry.at_str("spec.controlPlaneEndpoint"),
            )
            .why("the cluster's endpoint is the one of its own infrastructure cluster; a second endpoint here is ignored, and a second infrastructure cluster pointing at the first one's endpoint is not needed with capstan")
            .hint("remove spec.controlPlaneEndpoint from this KVMCluster; it needs only spec.hypervisors");
            if cluster_host.is_some_and(|h| h != lent_host) {
                d = d.with_severity(Severity::Error);
            } else {
                d = d.with_severity(Severity::Warning);
            }
            out.push(d);
        }
        if let (Some((host, at, path)), Some((kcp, cp))) = (&endpoint, control_plane)
            && let Some(template) = kvm_template(ctx.index, &cp.infrastructure_ref, kcp)
        {
            let announced = cp.config.files.iter().any(|f| {
                f.content
                    .as_deref()
                    .is_some_and(|content| content.contains(host.as_str()))
            });
            let vm_address = template
                .obj
                .value
                .pointer("/spec/template/spec/networks")
                .and_then(Value::as_array)
                .is_some_and(|networks| {
                    networks.iter().any(|n| {
                        n.get("address")
                            .and_then(Value::as_str)
                            .and_then(|a| a.split('/').next())
                            == Some(host.as_str())
                    })
                });
            if !announced && !vm_address {
                out.push(
                    Diagnostic::new(
                        id::ENDPOINT_UNSERVED,
                        format!(
                            "no control-plane VM will serve the endpoint {host}: no static pod in the control plane's files announces it and no VM of {} has it as its address",
                            template.id.name
                        ),
                        at.at_str(path),
                    )
                    .with_severity(Severity::Warning)
                    .why("the API is reached at the endpoint; unless a load balancer outside these manifests forwards it to the control-plane VMs, joins and the Cluster's readiness wait for an address nobody holds")
                    .hint("put a kube-vip static pod holding this address in the KubeadmControlPlane's files (as `capstan render` does), give one VM this static address, or point the endpoint at your load balancer")
                    .related("the control plane's machine template", template.at(&FieldPath::root())),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{has_rule, lint_text};

    const MIXED: &str = "\
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: c, namespace: default}
spec:
  controlPlaneEndpoint: {host: 10.0.0.10, port: 6443}
  controlPlaneRef: {apiVersion: controlplane.cluster.x-k8s.io/v1beta1, kind: KubeadmControlPlane, name: c}
  infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: KVMCluster, name: c}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: KVMCluster
metadata: {name: c, namespace: default}
spec:
  controlPlaneEndpoint: {host: 10.0.0.10, port: 6443}
  hypervisors:
  - {name: hv, uri: 'test:///default'}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata: {name: c, namespace: default}
spec:
  replicas: 1
  version: v1.31.4
  machineTemplate:
    infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: KVMMachineTemplate, name: cp}
  kubeadmConfigSpec:
    files:
    - path: /etc/kubernetes/manifests/kube-vip.yaml
      content: 'address: 10.0.0.10'
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: KVMMachineTemplate
metadata: {name: cp, namespace: default}
spec:
  template:
    spec:
      resources: {cpu: 1}
";

    #[test]
    fn a_served_kvm_control_plane_is_clean() {
        let report = lint_text(MIXED);
        assert!(!has_rule(&report, id::NO_HYPERVISORS), "{report:?}");
        assert!(!has_rule(&report, id::ENDPOINT_UNSERVED), "{report:?}");
        assert!(!has_rule(&report, id::REFERENCE_KIND), "{report:?}");
    }

    #[test]
    fn no_hypervisors() {
        let none = MIXED.replace(
            "  hypervisors:\n  - {name: hv, uri: 'test:///default'}\n",
            "",
        );
        assert_ne!(none, MIXED);
        let report = lint_text(&none);
        let finding = report
            .diagnostics
            .iter()
            .find(|d| d.rule == id::NO_HYPERVISORS)
            .expect("no-hypervisors");
        // At the control plane's template reference, as every finding: file and line.
        let line = none
            .lines()
            .position(|l| l.contains("kind: KVMMachineTemplate, name: cp}"))
            .expect("reference line")
            + 1;
        assert_eq!(finding.location.line as usize, line, "{finding:?}");
        assert_eq!(
            finding.location.path,
            "spec.machineTemplate.infrastructureRef"
        );
        let workers_only = MIXED.replace(
            "{name: hv, uri: 'test:///default'}",
            "{name: hv, uri: 'test:///default', controlPlane: false}",
        );
        assert!(has_rule(&lint_text(&workers_only), id::NO_HYPERVISORS));
    }

    #[test]
    fn unserved_endpoints() {
        let no_vip = MIXED.replace("content: 'address: 10.0.0.10'", "content: 'nothing'");
        assert!(has_rule(&lint_text(&no_vip), id::ENDPOINT_UNSERVED));
        let static_address = no_vip.replace(
            "resources: {cpu: 1}",
            "resources: {cpu: 1}\n      networks: [{address: 10.0.0.10/24}]",
        );
        assert!(!has_rule(
            &lint_text(&static_address),
            id::ENDPOINT_UNSERVED
        ));
        let no_replicas = MIXED.replace("replicas: 1", "replicas: 0");
        assert!(has_rule(&lint_text(&no_replicas), id::ENDPOINT_UNSERVED));
    }

    #[test]
    fn a_kvm_cluster_that_only_lends_hypervisors_carries_no_endpoint() {
        // The bare-metal control plane's Metal3Cluster is the Cluster's infrastructure; the
        // KVMCluster found by its label lends hypervisors, and its endpoint is served by nothing.
        let lent = MIXED
            .replace(
                "infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: KVMCluster, name: c}",
                "infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: Metal3Cluster, name: c}",
            )
            .replace(
                "kind: KVMCluster\nmetadata: {name: c, namespace: default}",
                "kind: KVMCluster\nmetadata: {name: c, namespace: default, labels: {cluster.x-k8s.io/cluster-name: c}}",
            )
            .replace(
                "controlPlaneEndpoint: {host: 10.0.0.10, port: 6443}\n  hypervisors",
                "controlPlaneEndpoint: {host: 10.0.0.99, port: 6443}\n  hypervisors",
            )
            + "---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: Metal3Cluster\nmetadata: {name: c, namespace: default}\nspec:\n  controlPlaneEndpoint: {host: 10.0.0.10, port: 6443}\n";
        assert!(lent.contains("10.0.0.99") && lent.contains("labels: {cluster.x-k8s.io"));
        let lends = |d: &&crate::diagnostic::Diagnostic| {
            d.rule == id::ENDPOINT_UNSERVED && d.message.contains("only lends")
        };
        let report = lint_text(&lent);
        let finding = report
            .diagnostics
            .iter()
            .find(lends)
            .unwrap_or_else(|| panic!("{report:?}"));
        assert_eq!(finding.severity, crate::diagnostic::Severity::Error);
        let without_endpoint = lent.replace(
            "  controlPlaneEndpoint: {host: 10.0.0.99, port: 6443}\n",
            "",
        );
        assert_ne!(without_endpoint, lent);
        assert!(
            !lint_text(&without_endpoint)
                .diagnostics
                .iter()
                .any(|d| lends(&d))
        );
    }

    #[test]
    fn an_ip_pool_smaller_than_its_vms() {
        let with_pool = |end: &str, replicas: u32| {
            MIXED
                .replace("  replicas: 1\n", &format!("  replicas: {replicas}\n"))
                .replace(
                    "      resources: {cpu: 1}\n",
                    "      resources: {cpu: 1}\n      networks: [{bridge: br0, ipPoolRef: {name: cp-nic0}}]\n",
                )
                + &format!(
                    "---\napiVersion: ipam.metal3.io/v1alpha1\nkind: IPPool\nmetadata: {{name: cp-nic0, namespace: default}}\nspec:\n  namePrefix: cp-nic0\n  pools:\n  - {{start: 10.0.0.50, end: {end}}}\n  prefix: 24\n"
                )
        };
        let small = with_pool("10.0.0.51", 3);
        let report = lint_text(&small);
        let found: Vec<_> = report
            .diagnostics
            .iter()
            .filter(|d| d.rule == id::IP_POOL_TOO_SMALL)
            .collect();
        assert_eq!(found.len(), 1, "{}", report.render_human(false));
        assert!(
            found[0]
                .message
                .contains("holds 2 addresses, but 3 KVM machines"),
            "{}",
            found[0].message
        );
        assert_eq!(found[0].severity, crate::diagnostic::Severity::Error);
        let exact = lint_text(&with_pool("10.0.0.52", 3));
        let found: Vec<_> = exact
            .diagnostics
            .iter()
            .filter(|d| d.rule == id::IP_POOL_TOO_SMALL)
            .collect();
        assert_eq!(found.len(), 1, "{}", exact.render_human(false));
        assert_eq!(found[0].severity, crate::diagnostic::Severity::Warning);
        let roomy = lint_text(&with_pool("10.0.0.60", 3));
        assert!(
            !has_rule(&roomy, id::IP_POOL_TOO_SMALL),
            "{}",
            roomy.render_human(false)
        );
    }
}
