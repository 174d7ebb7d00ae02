//! References between objects: Cluster, KubeadmControlPlane, MachineDeployment,
//! MachineHealthCheck, BareMetalHost, Metal3MachineTemplate and Metal3DataTemplate references
//! must name objects that are in the set (skipped with `--partial`) and of the kind the field
//! expects; `clusterName` must name a Cluster; a MachineDeployment's selector must match its
//! template's labels.
//!
//! Both reference forms are read: v1beta1 `{apiVersion, kind, name}` and v1beta2
//! `{apiGroup, kind, name}`.

use std::collections::BTreeMap;

use capstan_model::kinds::KINDS;
use capstan_model::meta::{LABEL_CLUSTER_NAME, LABEL_DEPLOYMENT_NAME, selector_matches};
use capstan_model::path::FieldPath;
use serde_json::Value;

use super::Ctx;
use crate::catalogue::id;
use crate::diagnostic::Diagnostic;
use crate::index::{Entry, KCP_CONFIG_PATH, KCT_CONFIG_PATH, M3MT_SPEC_PATH, Ref, View};

const INFRA: &str = "infrastructure.cluster.x-k8s.io";
const IPAM: &str = "ipam.metal3.io";

/// The machine templates of the infrastructure providers capstan serves.
const MACHINE_TEMPLATES: &[(&str, &str)] = &[
    (INFRA, "Metal3MachineTemplate"),
    (INFRA, "KVMMachineTemplate"),
];

/// Checks one reference: expected kinds (empty: any kind), existence.
fn check_ref(
    ctx: &Ctx<'_, '_>,
    from: &Entry<'_>,
    reference: &Ref,
    expected: &[(&str, &str)],
    out: &mut Vec<Diagnostic>,
) {
    if reference.kind.is_empty() && reference.name.is_empty() {
        return;
    }
    if !expected.is_empty() {
        let matches_expected = expected.iter().any(|(g, k)| {
            *k == reference.kind && reference.group.as_deref().is_none_or(|rg| rg == *g)
        });
        let known_kind = KINDS.iter().any(|k| {
            k.kind == reference.kind && reference.group.as_deref().is_none_or(|rg| rg == k.group)
        });
        if !matches_expected && known_kind {
            let wanted: Vec<String> = expected.iter().map(|(g, k)| format!("{k} ({g})")).collect();
            out.push(
                Diagnostic::new(
                    id::REFERENCE_KIND,
                    format!("`{}` names a {}, but this field takes a {}", reference.path, reference.kind, wanted.join(" or ")),
                    from.at(&reference.path.key("kind")),
                )
                .why("the controller rejects or mis-handles a reference of the wrong kind, and the object is never reconciled")
                .hint(format!("point the reference at a {}", wanted.join(" or "))),
            );
            return;
        }
    }
    if ctx.partial || ctx.index.resolve(reference, from.namespace()).is_some() {
        return;
    }
    let namespace = reference.namespace.as_deref().or(from.namespace());
    let mut d = Diagnostic::new(
        id::DANGLING_REFERENCE,
        format!("`{}` names {}, which is not in the set", reference.path, reference.describe()),
        from.at(&reference.path),
    )
    .why("the controller waits for an object that never appears, and nothing after this point is provisioned");
    let other = ctx
        .index
        .named(&reference.name, namespace)
        .find(|e| e.id.kind != reference.kind);
    d = match other {
        Some(other) => d
            .hint(format!(
                "an object of that name is a {}, not a {}",
                other.id.kind, reference.kind
            ))
            .related("object with this name", other.at(&FieldPath::root())),
        None => d.hint(format!(
            "add {} to the set, or fix the name",
            reference.describe()
        )),
    };
    out.push(d);
}

/// Checks a reference the field's kind requires: an empty one is reported even with `--partial`.
fn check_required(
    ctx: &Ctx<'_, '_>,
    from: &Entry<'_>,
    reference: &Ref,
    expected: &[(&str, &str)],
    out: &mut Vec<Diagnostic>,
) {
    if reference.kind.is_empty() && reference.name.is_empty() {
        out.push(
            Diagnostic::new(
                id::DANGLING_REFERENCE,
                format!("`{}` is not set", reference.path),
                from.at(&reference.path),
            )
            .why("the controller has no template to create machines from")
            .hint(format!(
                "set `{}` with apiGroup (v1beta2) or apiVersion (v1beta1), kind and name",
                reference.path
            )),
        );
        return;
    }
    check_ref(ctx, from, reference, expected, out);
}

fn check_cluster_name(
    ctx: &Ctx<'_, '_>,
    from: &Entry<'_>,
    name: &str,
    path: &str,
    out: &mut Vec<Diagnostic>,
) {
    if ctx.partial || name.is_empty() || ctx.index.cluster(name, from.namespace()).is_some() {
        return;
    }
    // A Cluster that is there but could not be read (a type error, reported on its own) is not
    // missing: saying so would send the reader after the wrong object.
    let unreadable_cluster = ctx.index.named(name, from.namespace()).any(|e| {
        matches!(e.view, View::Invalid)
            && e.id.kind == "Cluster"
            && e.id.group() == "cluster.x-k8s.io"
    });
    if unreadable_cluster {
        return;
    }
    out.push(
        Diagnostic::new(
            id::UNKNOWN_CLUSTER,
            format!("`clusterName: {name}` names no Cluster in the set"),
            from.at_str(path),
        )
        .why("objects of a missing Cluster are never reconciled")
        .hint("set clusterName to the Cluster's name, or add the Cluster"),
    );
}

/// Runs the reference rules.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for entry in &ctx.index.entries {
        match &entry.view {
            View::Cluster(c) => {
                if let Some(r) = &c.infrastructure_ref {
                    check_ref(
                        ctx,
                        entry,
                        r,
                        &[(INFRA, "Metal3Cluster"), (INFRA, "KVMCluster")],
                        out,
                    );
                }
                if let Some(r) = &c.control_plane_ref {
                    check_ref(
                        ctx,
                        entry,
                        r,
                        &[("controlplane.cluster.x-k8s.io", "KubeadmControlPlane")],
                        out,
                    );
                }
            }
            View::ControlPlane(kcp) => {
                check_required(ctx, entry, &kcp.infrastructure_ref, MACHINE_TEMPLATES, out);
                content_from(ctx, entry, &kcp.config, KCP_CONFIG_PATH, out);
            }
            View::Deployment(md) => {
                if let Some(r) = &md.bootstrap_ref {
                    check_ref(
                        ctx,
                        entry,
                        r,
                        &[("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate")],
                        out,
                    );
                }
                check_required(ctx, entry, &md.infrastructure_ref, MACHINE_TEMPLATES, out);
                check_cluster_name(ctx, entry, &md.cluster_name, "spec.clusterName", out);
                selector(entry, md, out);
            }
            View::HealthCheck(mhc) => {
                if let Some(r) = &mhc.remediation_ref {
                    check_ref(ctx, entry, r, &[], out);
                }
                check_cluster_name(ctx, entry, &mhc.cluster_name, "spec.clusterName", out);
            }
            View::ConfigTemplate(config) => content_from(ctx, entry, config, KCT_CONFIG_PATH, out),
            View::Host(host) => {
                let spec = &host.spec;
                let secrets = [
                    (spec.network_data.as_ref(), "spec.networkData"),
                    (spec.user_data.as_ref(), "spec.userData"),
                    (spec.meta_data.as_ref(), "spec.metaData"),
                ];
                for (reference, path) in secrets {
                    if let Some(r) = reference.and_then(|r| Ref::secret(r, FieldPath::parse(path)))
                    {
                        check_ref(ctx, entry, &r, &[], out);
                    }
                }
                if let Some(name) = spec
                    .preprovisioning_network_data_name
                    .as_deref()
                    .filter(|n| !n.is_empty())
                {
                    let r = Ref::named(
                        "",
                        "Secret",
                        name,
                        FieldPath::parse("spec.preprovisioningNetworkDataName"),
                    );
                    check_ref(ctx, entry, &r, &[], out);
                }
            }
            View::MachineTemplate(spec) => {
                let base = FieldPath::parse(M3MT_SPEC_PATH);
                if let Some(name) = spec.data_template.as_ref().and_then(|d| d.name.as_deref()) {
                    let mut r =
                        Ref::named(INFRA, "Metal3DataTemplate", name, base.key("dataTemplate"));
                    if let Some(kind) = spec.data_template.as_ref().and_then(|d| d.kind.as_deref())
                    {
                        r.kind = kind.to_owned();
                    }
                    r.namespace = spec
                        .data_template
                        .as_ref()
                        .and_then(|d| d.namespace.clone())
                        .filter(|n| !n.is_empty());
                    check_ref(ctx, entry, &r, &[(INFRA, "Metal3DataTemplate")], out);
                }
                let secrets = [
                    (spec.user_data.as_ref(), "userData"),
                    (spec.meta_data.as_ref(), "metaData"),
                    (spec.network_data.as_ref(), "networkData"),
                ];
                for (reference, key) in secrets {
                    if let Some(r) = reference.and_then(|r| Ref::secret(r, base.key(key))) {
                        check_ref(ctx, entry, &r, &[], out);
                    }
                }
            }
            View::DataTemplate(spec) => {
                check_cluster_name(ctx, entry, &spec.cluster_name, "spec.clusterName", out);
                for r in pool_refs(&entry.obj.value) {
                    check_ref(ctx, entry, &r, &[], out);
                }
            }
            View::IpPool(pool) => {
                if let Some(name) = pool.cluster_name.as_deref() {
                    check_cluster_name(ctx, entry, name, "spec.clusterName", out);
                }
            }
            _ => {}
        }
    }
}

/// Secrets named by `files[].contentFrom.secret.name`.
fn content_from(
    ctx: &Ctx<'_, '_>,
    entry: &Entry<'_>,
    config: &capstan_model::kubeadm::KubeadmConfigSpec,
    config_path: &str,
    out: &mut Vec<Diagnostic>,
) {
    for (i, file) in config.files.iter().enumerate() {
        let Some(name) = file
            .content_from
            .as_ref()
            .and_then(|c| c.pointer("/secret/name"))
            .and_then(Value::as_str)
        else {
            continue;
        };
        let path = FieldPath::parse(config_path)
            .key("files")
            .index(i)
            .key("contentFrom")
            .key("secret");
        check_ref(ctx, entry, &Ref::named("", "Secret", name, path), &[], out);
    }
}

/// The IPPools a Metal3DataTemplate takes addresses, gateways and DNS servers from.
fn pool_refs(value: &Value) -> Vec<Ref> {
    let mut refs = Vec::new();
    let pool = |name: &str, path: FieldPath| Ref::named(IPAM, "IPPool", name, path);
    let networks = FieldPath::parse("spec.networkData.networks");
    for family in ["ipv4", "ipv6"] {
        let list_path = networks.key(family);
        let items = list_path.lookup(value).and_then(Value::as_array);
        for (i, item) in items.into_iter().flatten().enumerate() {
            let item_path = list_path.index(i);
            if let Some(name) = item.get("ipAddressFromIPPool").and_then(Value::as_str) {
                refs.push(pool(name, item_path.key("ipAddressFromIPPool")));
            }
            let routes = item.get("routes").and_then(Value::as_array);
            for (j, route) in routes.into_iter().flatten().enumerate() {
                if let Some(name) = route.pointer("/gateway/fromIPPool").and_then(Value::as_str) {
                    refs.push(pool(
                        name,
                        item_path
                            .key("routes")
                            .index(j)
                            .key("gateway")
                            .key("fromIPPool"),
                    ));
                }
            }
        }
    }
    let dns = FieldPath::parse("spec.networkData.services.dnsFromIPPool");
    if let Some(name) = dns.lookup(value).and_then(Value::as_str) {
        refs.push(pool(name, dns));
    }
    let meta = FieldPath::parse("spec.metaData");
    for list in [
        "ipAddressesFromIPPool",
        "prefixesFromIPPool",
        "gatewaysFromIPPool",
        "dnsServersFromIPPool",
    ] {
        let list_path = meta.key(list);
        let items = list_path.lookup(value).and_then(Value::as_array);
        for (i, item) in items.into_iter().flatten().enumerate() {
            let Some(name) = item.get("name").and_then(Value::as_str) else {
                continue;
            };
            let mut r = pool(name, list_path.index(i));
            if let Some(kind) = item
                .get("kind")
                .and_then(Value::as_str)
                .filter(|k| !k.is_empty())
            {
                r.kind = kind.to_owned();
            }
            if let Some(group) = item
                .get("apiGroup")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
            {
                r.group = Some(group.to_owned());
            }
            refs.push(r);
        }
    }
    refs
}

/// A MachineDeployment's selector against its template labels, after Cluster API's defaulting
/// (which adds the cluster-name label to both, and the deployment-name label to both when the
/// selector is empty).
fn selector(entry: &Entry<'_>, md: &crate::index::DeploymentView, out: &mut Vec<Diagnostic>) {
    let mut selector = md.selector.clone();
    let mut labels: BTreeMap<String, String> = md.template_labels.clone();
    let mut match_labels = selector.match_labels.take().unwrap_or_default();
    let empty = match_labels.is_empty()
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    if empty {
        match_labels.insert(LABEL_DEPLOYMENT_NAME.to_owned(), entry.name().to_owned());
        labels.insert(LABEL_DEPLOYMENT_NAME.to_owned(), entry.name().to_owned());
    }
    if !md.cluster_name.is_empty() {
        match_labels.insert(LABEL_CLUSTER_NAME.to_owned(), md.cluster_name.clone());
        labels.insert(LABEL_CLUSTER_NAME.to_owned(), md.cluster_name.clone());
    }
    selector.match_labels = Some(match_labels);
    if selector_matches(&selector, &labels) {
        return;
    }
    out.push(
        Diagnostic::new(
            id::SELECTOR_MISMATCH,
            format!("the selector of {} does not match its template's labels", entry.id),
            entry.at_str("spec.selector"),
        )
        .why("the MachineDeployment would not own the Machines it creates; the API server rejects it (`selector does not match template labels`)")
        .hint("make spec.selector.matchLabels a subset of spec.template.metadata.labels")
        .related("template labels", entry.at_str("spec.template.metadata.labels")),
    );
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{BASE, has_rule, lint_text, lint_text_partial};

    #[test]
    fn dangling_references() {
        let bad = BASE.replacen("    name: capi-1-workers\n", "    name: capi-1-worker\n", 1);
        assert_ne!(bad, BASE);
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::DANGLING_REFERENCE),
            "{}",
            report.render_human(false)
        );
        assert!(!has_rule(&lint_text_partial(&bad), id::DANGLING_REFERENCE));
        let bad = BASE.replacen("name: capi-1-cp-0-network\n", "name: capi-1-cp-0-net\n", 1);
        assert!(has_rule(&lint_text(&bad), id::DANGLING_REFERENCE));
    }

    #[test]
    fn references_of_the_wrong_kind() {
        let bad = BASE.replacen(
            "    kind: Metal3Cluster\n",
            "    kind: Metal3MachineTemplate\n",
            1,
        );
        assert_ne!(bad, BASE);
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::REFERENCE_KIND),
            "{}",
            report.render_human(false)
        );
    }

    #[test]
    fn required_references() {
        // v1beta1 shape in a v1beta2 KubeadmControlPlane: the reference is not where v1beta2 reads it.
        let kcp = "apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata: {name: c}
spec:
  version: v1.33.0
  machineTemplate:
    infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: Metal3MachineTemplate, name: c}
";
        let report = lint_text_partial(kcp);
        assert!(
            has_rule(&report, id::DANGLING_REFERENCE),
            "{}",
            report.render_human(false)
        );
        let fixed = kcp.replace(
            "    infrastructureRef:",
            "    spec:\n      infrastructureRef:",
        );
        assert!(!has_rule(
            &lint_text_partial(&fixed),
            id::DANGLING_REFERENCE
        ));
    }

    #[test]
    fn v1beta2_references() {
        let v2 = "apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: c, namespace: n}
spec:
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: Metal3Cluster, name: c}
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: KubeadmControlPlane, name: c}
";
        let report = lint_text(v2);
        let dangling = report
            .diagnostics
            .iter()
            .filter(|d| d.rule == id::DANGLING_REFERENCE)
            .count();
        assert_eq!(dangling, 2, "{}", report.render_human(false));
    }

    #[test]
    fn a_cluster_with_a_type_error_is_not_also_unknown() {
        let bad = BASE.replacen(
            "    host: 10.250.250.29\n    port: 6443\n",
            "    host: 10.250.250.29\n    port: six-four-four-three\n",
            1,
        );
        assert_ne!(bad, BASE, "the fixture's Cluster header changed");
        let report = lint_text(&bad);
        let rules: Vec<&str> = report.diagnostics.iter().map(|d| d.rule).collect();
        assert!(
            rules.contains(&id::INVALID_FIELD),
            "{}",
            report.render_human(false)
        );
        assert!(
            !rules.contains(&id::UNKNOWN_CLUSTER),
            "{}",
            report.render_human(false)
        );
    }

    #[test]
    fn cluster_names_and_selectors() {
        let bad = BASE.replacen("  clusterName: capi-1\n", "  clusterName: capi-2\n", 1);
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::UNKNOWN_CLUSTER));
        let bad = BASE.replacen(
            "        nodepool: workers\n",
            "        nodepool: other\n",
            1,
        );
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::SELECTOR_MISMATCH));
    }
}
