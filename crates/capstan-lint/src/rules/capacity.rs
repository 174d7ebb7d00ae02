//! Capacity and topology: an even number of stacked-etcd control-plane replicas, and templates with
//! fewer matching BareMetalHosts than the replicas that need them (KubeadmControlPlane replicas for
//! its template, the sum of MachineDeployment replicas for theirs; templates whose host sets overlap
//! are also checked together). Host counts are skipped with `--partial`.

use std::collections::{BTreeMap, BTreeSet};

use capstan_model::path::FieldPath;

use super::Ctx;
use crate::catalogue::id;
use crate::diagnostic::{Diagnostic, Location};
use crate::index::{Entry, M3MT_SPEC_PATH};

/// Demand on one Metal3MachineTemplate.
struct Demand {
    replicas: i64,
    /// Who needs the hosts, for messages.
    users: Vec<(String, Location)>,
}

/// Runs the capacity rules.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for (entry, kcp) in ctx.index.control_planes() {
        let replicas = kcp.replicas.unwrap_or(1);
        if replicas > 0 && replicas % 2 == 0 && !kcp.external_etcd() {
            out.push(
                Diagnostic::new(
                    id::EVEN_ETCD_MEMBERS,
                    format!("{replicas} control-plane replicas with stacked etcd"),
                    entry.at_str("spec.replicas"),
                )
                .why(format!(
                    "etcd needs a majority: {replicas} members tolerate as many failures as {}, and votes can split",
                    replicas - 1
                ))
                .hint(format!("use {} replicas", replicas + 1)),
            );
        }
    }
    if !ctx.partial {
        hosts(ctx, out);
    }
}

fn hosts(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    let position = |e: &Entry<'_>| Some(e.pos);
    let mut demand: BTreeMap<usize, Demand> = BTreeMap::new();
    for (entry, kcp) in ctx.index.control_planes() {
        if let Some(p) = ctx
            .index
            .machine_template(&kcp.infrastructure_ref, entry.namespace())
            .and_then(|(t, _)| position(t))
        {
            let d = demand.entry(p).or_insert(Demand {
                replicas: 0,
                users: Vec::new(),
            });
            d.replicas += i64::from(kcp.replicas.unwrap_or(1).max(0));
            d.users
                .push((entry.id.to_string(), entry.at_str("spec.replicas")));
        }
    }
    for (entry, md) in ctx.index.deployments() {
        if let Some(p) = ctx
            .index
            .machine_template(&md.infrastructure_ref, entry.namespace())
            .and_then(|(t, _)| position(t))
        {
            let d = demand.entry(p).or_insert(Demand {
                replicas: 0,
                users: Vec::new(),
            });
            d.replicas += i64::from(md.replicas.unwrap_or(1).max(0));
            d.users
                .push((entry.id.to_string(), entry.at_str("spec.replicas")));
        }
    }
    let mut pools: Vec<(usize, BTreeSet<usize>)> = Vec::new();
    for (&p, need) in &demand {
        let Some(template) = ctx.index.entries.get(p) else {
            continue;
        };
        let crate::index::View::MachineTemplate(spec) = &template.view else {
            continue;
        };
        let matched: BTreeSet<usize> = ctx
            .index
            .hosts_for(template, spec)
            .into_iter()
            .filter_map(position)
            .collect();
        let have = i64::try_from(matched.len()).unwrap_or(i64::MAX);
        if have < need.replicas {
            out.push(shortage(
                template,
                have,
                need.replicas,
                &need.users,
                "this template's hostSelector",
            ));
        } else {
            pools.push((p, matched));
        }
    }
    // Templates that individually have enough hosts may still compete for the same ones.
    let mut reported: BTreeSet<usize> = BTreeSet::new();
    for (i, (first, hosts)) in pools.iter().enumerate() {
        if reported.contains(first) {
            continue;
        }
        let mut group = vec![*first];
        let mut union = hosts.clone();
        for (other, other_hosts) in &pools[i + 1..] {
            if !other_hosts.is_disjoint(&union) {
                group.push(*other);
                union.extend(other_hosts.iter().copied());
            }
        }
        if group.len() < 2 {
            continue;
        }
        let need: i64 = group
            .iter()
            .filter_map(|p| demand.get(p))
            .map(|d| d.replicas)
            .sum();
        let have = i64::try_from(union.len()).unwrap_or(i64::MAX);
        if have >= need {
            continue;
        }
        let users: Vec<(String, Location)> = group
            .iter()
            .filter_map(|p| demand.get(p))
            .flat_map(|d| d.users.clone())
            .collect();
        if let Some(template) = ctx.index.entries.get(*first) {
            out.push(shortage(
                template,
                have,
                need,
                &users,
                "the hostSelectors of templates that share hosts",
            ));
        }
        reported.extend(group);
    }
}

fn shortage(
    template: &Entry<'_>,
    have: i64,
    need: i64,
    users: &[(String, Location)],
    what: &str,
) -> Diagnostic {
    let mut d = Diagnostic::new(
        id::NOT_ENOUGH_HOSTS,
        format!("{have} BareMetalHosts match {what}, but {need} replicas need one each"),
        template.at(&FieldPath::parse(M3MT_SPEC_PATH).key("hostSelector")),
    )
    .why("each Machine claims one matching host in the template's namespace; the rest wait in Provisioning forever")
    .hint("add or label more BareMetalHosts, widen the hostSelector, or lower the replicas");
    for (name, location) in users {
        d = d.related(format!("replicas of {name}"), location.clone());
    }
    d
}

#[cfg(test)]
mod tests {
    use crate::catalogue::id;
    use crate::test_support::{BASE, has_rule, lint_text, lint_text_partial};

    #[test]
    fn even_control_planes() {
        let bad = BASE.replacen("  replicas: 3\n", "  replicas: 4\n", 1);
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::EVEN_ETCD_MEMBERS));
        assert!(!has_rule(&lint_text(BASE), id::EVEN_ETCD_MEMBERS));
    }

    #[test]
    fn host_shortage() {
        let bad = BASE.replacen("  replicas: 1\n", "  replicas: 2\n", 1);
        assert_ne!(bad, BASE);
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::NOT_ENOUGH_HOSTS),
            "{}",
            report.render_human(false)
        );
        assert!(!has_rule(&lint_text_partial(&bad), id::NOT_ENOUGH_HOSTS));
        assert!(!has_rule(&lint_text(BASE), id::NOT_ENOUGH_HOSTS));
    }

    #[test]
    fn shared_hosts_are_counted_once() {
        // Both templates select every host: 3 + 1 replicas need 4 of the 4 hosts (fine), 3 + 2 do not.
        let shared = BASE
            .replace(
                "          cluster.x-k8s.io/role: control-plane\n",
                "          cluster.x-k8s.io/cluster-name: capi-1\n",
            )
            .replace(
                "          cluster.x-k8s.io/role: worker\n",
                "          cluster.x-k8s.io/cluster-name: capi-1\n",
            );
        assert_ne!(shared, BASE);
        assert!(!has_rule(&lint_text(&shared), id::NOT_ENOUGH_HOSTS));
        let bad = shared.replacen("  replicas: 1\n", "  replicas: 2\n", 1);
        let report = lint_text(&bad);
        assert!(
            has_rule(&report, id::NOT_ENOUGH_HOSTS),
            "{}",
            report.render_human(false)
        );
    }
}
