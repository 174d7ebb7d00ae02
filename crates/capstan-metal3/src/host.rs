//! Choosing and describing BareMetalHosts: which hosts a Metal3Machine may claim, the providerID it
//! gets, which networkData a host keeps, and the message that explains an empty choice.
//!
//! Everything here is a pure function of the objects, so it is tested table by table.

use capstan_model::capm3::HostSelector;
use capstan_model::meta::ObjectReference;
use capstan_model::metal3::BareMetalHost;
use std::collections::BTreeMap;

/// Annotation on a Metal3Machine naming its host as `namespace/name` (as CAPM3 writes it).
pub const ANNOTATION_HOST: &str = "metal3.io/BareMetalHost";
/// Label of the workload Node carrying its host's uid (from `node-labels` in the bootstrap data).
pub const LABEL_UUID: &str = "metal3.io/uuid";
/// Label on a host placing it in a failure domain.
pub const LABEL_FAILURE_DOMAIN: &str = "infrastructure.cluster.x-k8s.io/failure-domain";
/// A paused host is left alone by every controller.
pub const ANNOTATION_HOST_PAUSED: &str = "baremetalhost.metal3.io/paused";
/// The provisioning state of a host that can be given an image.
pub const STATE_AVAILABLE: &str = "available";
/// The provisioning state of a host running its image.
pub const STATE_PROVISIONED: &str = "provisioned";

/// `metal3://NAMESPACE/HOST/METAL3MACHINE`, the providerID of a Metal3Machine and of its Node.
pub fn provider_id(namespace: &str, host: &str, machine: &str) -> String {
    format!("metal3://{namespace}/{host}/{machine}")
}

/// The provisioning state of `host`.
pub fn state(host: &BareMetalHost) -> &str {
    host.status
        .as_ref()
        .map_or("", |s| s.provisioning.state.as_str())
}

/// Whether `reference` (a host's consumerRef) names the Metal3Machine `namespace/name`; the API
/// version does not matter (the same object is served in several).
pub fn is_consumer(reference: Option<&ObjectReference>, namespace: &str, name: &str) -> bool {
    reference.is_some_and(|r| {
        r.kind.as_deref() == Some("Metal3Machine")
            && r.name.as_deref() == Some(name)
            && r.namespace.as_deref().unwrap_or(namespace) == namespace
    })
}

/// Why a host cannot be claimed, or `None` when it can.
pub fn unclaimable(host: &BareMetalHost) -> Option<&'static str> {
    if host.spec.consumer_ref.is_some() {
        return Some("consumed");
    }
    if host.metadata.deletion_timestamp.is_some() {
        return Some("being deleted");
    }
    if host
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_HOST_PAUSED))
    {
        return Some("paused");
    }
    let healthy = host.status.as_ref().is_some_and(|s| {
        s.error_type.as_deref().is_none_or(str::is_empty) && s.operational_status != "error"
    });
    if !healthy {
        return Some("in error");
    }
    if !matches!(state(host), STATE_AVAILABLE | "ready") {
        return Some("not available");
    }
    None
}

/// The labels of `host`, borrowed: candidates are chosen among every host of a namespace on each
/// claim, so no copy is made per host.
pub(crate) fn labels(host: &BareMetalHost) -> &BTreeMap<String, String> {
    static NONE: BTreeMap<String, String> = BTreeMap::new();
    host.metadata.labels.as_ref().unwrap_or(&NONE)
}

/// The hosts `selector` allows that can be claimed now, narrowed to `failure_domain`'s hosts when
/// some are labelled with it (as CAPM3 does).
pub fn candidates<'a>(
    hosts: &'a [BareMetalHost],
    selector: &HostSelector,
    failure_domain: Option<&str>,
) -> Vec<&'a BareMetalHost> {
    let claimable: Vec<&BareMetalHost> = hosts
        .iter()
        .filter(|h| unclaimable(h).is_none() && selector.matches(labels(h)))
        .collect();
    if let Some(domain) = failure_domain.filter(|d| !d.is_empty()) {
        let in_domain: Vec<&BareMetalHost> = claimable
            .iter()
            .copied()
            .filter(|h| labels(h).get(LABEL_FAILURE_DOMAIN).map(String::as_str) == Some(domain))
            .collect();
        if !in_domain.is_empty() {
            return in_domain;
        }
    }
    claimable
}

/// `hostSelector` as people write it: `matchLabels {a=b} and matchExpressions [k in (x, y)]`.
pub fn describe_selector(selector: &HostSelector) -> String {
    let mut parts = Vec::new();
    if !selector.match_labels.is_empty() {
        let labels: Vec<String> = selector
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        parts.push(format!("matchLabels {{{}}}", labels.join(", ")));
    }
    if !selector.match_expressions.is_empty() {
        let expressions: Vec<String> = selector
            .match_expressions
            .iter()
            .map(|e| {
                if e.values.is_empty() {
                    format!("{} {}", e.key, e.operator)
                } else {
                    format!("{} {} ({})", e.key, e.operator, e.values.join(", "))
                }
            })
            .collect();
        parts.push(format!("matchExpressions [{}]", expressions.join("; ")));
    }
    if parts.is_empty() {
        "an empty hostSelector (any host)".to_owned()
    } else {
        parts.join(" and ")
    }
}

/// How the hosts of a namespace stand against a `hostSelector`: what a message about an empty
/// choice counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostCounts {
    /// BareMetalHosts in the namespace.
    pub total: usize,
    /// Of those, the ones the selector matches.
    pub matching: usize,
    /// Of the matching ones, those that could be claimed now.
    pub available: usize,
    /// Of the matching ones, those another machine holds (`spec.consumerRef` set).
    pub claimed: usize,
    /// The other matching ones by why they are out (paused, in error, not available …).
    pub other: BTreeMap<&'static str, usize>,
}

impl HostCounts {
    pub fn of(hosts: &[BareMetalHost], selector: &HostSelector) -> Self {
        let mut counts = Self {
            total: hosts.len(),
            ..Self::default()
        };
        for host in hosts.iter().filter(|h| selector.matches(labels(h))) {
            counts.matching += 1;
            match unclaimable(host) {
                None => counts.available += 1,
                Some("consumed") => counts.claimed += 1,
                Some(reason) => *counts.other.entry(reason).or_default() += 1,
            }
        }
        counts
    }

    /// `3 BareMetalHosts in namespace ns, 2 matching: 0 available, 1 claimed, 1 paused`.
    fn describe(&self, namespace: &str) -> String {
        let plural = if self.total == 1 { "" } else { "s" };
        let mut text = format!(
            "{} BareMetalHost{plural} in namespace {namespace}, {} matching: {} available, {} claimed",
            self.total, self.matching, self.available, self.claimed
        );
        for (reason, n) in &self.other {
            text.push_str(&format!(", {n} {reason}"));
        }
        text
    }
}

/// Why no host could be chosen: the selector, how many hosts the namespace has, how many of them
/// the selector matches and how those stand (available, claimed, out for another reason), and
/// what to do.
pub fn no_host_message(
    hosts: &[BareMetalHost],
    selector: &HostSelector,
    namespace: &str,
) -> String {
    let counts = HostCounts::of(hosts, selector);
    let selector_text = describe_selector(selector);
    if counts.matching == 0 {
        return format!(
            "no BareMetalHost matches {selector_text} ({}): label hosts to match, or change \
             spec.hostSelector of the Metal3MachineTemplate",
            counts.describe(namespace)
        );
    }
    format!(
        "no available BareMetalHost matches {selector_text} ({}): add a BareMetalHost matching \
         it or free one (delete a Machine, or wait for one to finish deprovisioning), or change \
         spec.hostSelector",
        counts.describe(namespace)
    )
}

/// Which networkData a host gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkDataChoice {
    /// The host names its own networkData Secret (the recommended pattern): left as it is.
    KeepHosts,
    /// Point the host at the Secret rendered from the Metal3DataTemplate.
    Rendered(String),
    /// No networkData at all (DHCP).
    None,
}

/// The host keeps its own networkData unless it is one capstan rendered (`rendered_names` are the
/// Secrets a Metal3Data of this machine produces); otherwise the rendered one, if any.
pub fn network_data_choice(
    host_network_data: Option<&str>,
    rendered: Option<&str>,
    rendered_names: &[String],
) -> NetworkDataChoice {
    match host_network_data.filter(|n| !n.is_empty()) {
        Some(own) if !rendered_names.iter().any(|r| r == own) => NetworkDataChoice::KeepHosts,
        _ => match rendered {
            Some(name) => NetworkDataChoice::Rendered(name.to_owned()),
            None => NetworkDataChoice::None,
        },
    }
}

/// `status.addresses` from a host: its inspected NIC addresses (InternalIP) and hostname.
pub fn addresses(host: &BareMetalHost) -> Vec<capstan_infra::MachineAddress> {
    let mut out = Vec::new();
    if let Some(hardware) = host.status.as_ref().and_then(|s| s.hardware.as_ref()) {
        for ip in hardware.nics.iter().filter_map(|n| n.ip.as_deref()) {
            if !ip.is_empty()
                && !out
                    .iter()
                    .any(|a: &capstan_infra::MachineAddress| a.address == ip)
            {
                out.push(capstan_infra::MachineAddress::new("InternalIP", ip));
            }
        }
        if let Some(hostname) = hardware.hostname.as_deref().filter(|h| !h.is_empty()) {
            out.push(capstan_infra::MachineAddress::new("Hostname", hostname));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_model::capm3::HostSelectorRequirement;
    use serde_json::json;

    fn host(
        name: &str,
        labels: serde_json::Value,
        state: &str,
        consumer: Option<&str>,
    ) -> BareMetalHost {
        let mut spec = json!({"online": true});
        if let Some(c) = consumer {
            spec["consumerRef"] = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "Metal3Machine", "name": c, "namespace": "ns"});
        }
        serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": spec,
            "status": {"operationalStatus": "OK", "provisioning": {"state": state, "ID": ""}},
        }))
        .unwrap()
    }

    fn names(hosts: &[&BareMetalHost]) -> Vec<String> {
        hosts
            .iter()
            .map(|h| h.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn selection_table() {
        let hosts = vec![
            host("a", json!({"role": "cp"}), "available", None),
            host("b", json!({"role": "cp"}), "available", Some("m1")),
            host("c", json!({"role": "cp"}), "provisioned", None),
            host("d", json!({"role": "worker"}), "available", None),
            host(
                "e",
                json!({"role": "cp", LABEL_FAILURE_DOMAIN: "rack-2"}),
                "available",
                None,
            ),
            host("f", json!({}), "ready", None),
        ];
        let by_labels = |pairs: &[(&str, &str)]| HostSelector {
            match_labels: pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            match_expressions: Vec::new(),
        };
        let by_expression = |key: &str, op: &str, values: &[&str]| HostSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![HostSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: values.iter().map(|v| (*v).into()).collect(),
            }],
        };
        let cases: Vec<(&str, HostSelector, Option<&str>, Vec<&str>)> = vec![
            (
                "empty selector: every claimable host",
                HostSelector::default(),
                None,
                vec!["a", "d", "e", "f"],
            ),
            (
                "matchLabels; consumed and provisioned skipped",
                by_labels(&[("role", "cp")]),
                None,
                vec!["a", "e"],
            ),
            (
                "matchExpressions in",
                by_expression("role", "in", &["worker"]),
                None,
                vec!["d"],
            ),
            (
                "matchExpressions notin",
                by_expression("role", "notin", &["cp"]),
                None,
                vec!["d", "f"],
            ),
            (
                "matchExpressions exists",
                by_expression("role", "exists", &[]),
                None,
                vec!["a", "d", "e"],
            ),
            (
                "failure domain narrows when labelled",
                by_labels(&[("role", "cp")]),
                Some("rack-2"),
                vec!["e"],
            ),
            (
                "unknown failure domain: all candidates",
                by_labels(&[("role", "cp")]),
                Some("rack-9"),
                vec!["a", "e"],
            ),
            (
                "nothing matches",
                by_labels(&[("role", "gpu")]),
                None,
                vec![],
            ),
        ];
        for (what, selector, domain, want) in cases {
            assert_eq!(
                names(&candidates(&hosts, &selector, domain)),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn unclaimable_reasons() {
        let mut deleting = host("x", json!({}), "available", None);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let mut paused = host("p", json!({}), "available", None);
        paused.metadata.annotations =
            Some([(ANNOTATION_HOST_PAUSED.to_owned(), String::new())].into());
        let mut broken = host("e", json!({}), "available", None);
        if let Some(s) = broken.status.as_mut() {
            s.error_type = Some("provisioning error".into());
        }
        let cases = [
            (host("ok", json!({}), "available", None), None),
            (
                host("c", json!({}), "available", Some("m")),
                Some("consumed"),
            ),
            (
                host("i", json!({}), "inspecting", None),
                Some("not available"),
            ),
            (deleting, Some("being deleted")),
            (paused, Some("paused")),
            (broken, Some("in error")),
        ];
        for (h, want) in cases {
            assert_eq!(unclaimable(&h), want, "{:?}", h.metadata.name);
        }
    }

    #[test]
    fn provider_id_format() {
        let cases = [
            (
                ("default", "node-0", "capi-1-cp-abc"),
                "metal3://default/node-0/capi-1-cp-abc",
            ),
            (("metal3", "h", "m"), "metal3://metal3/h/m"),
        ];
        for ((ns, h, m), want) in cases {
            assert_eq!(provider_id(ns, h, m), want);
        }
    }

    #[test]
    fn consumer_matching_ignores_the_version() {
        let reference = |kind: &str, name: &str, ns: Option<&str>| ObjectReference {
            api_version: Some("infrastructure.cluster.x-k8s.io/v1beta1".into()),
            kind: Some(kind.into()),
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            ..Default::default()
        };
        assert!(is_consumer(
            Some(&reference("Metal3Machine", "m", Some("ns"))),
            "ns",
            "m"
        ));
        assert!(is_consumer(
            Some(&reference("Metal3Machine", "m", None)),
            "ns",
            "m"
        ));
        assert!(!is_consumer(
            Some(&reference("Metal3Machine", "m", Some("other"))),
            "ns",
            "m"
        ));
        assert!(!is_consumer(
            Some(&reference("Metal3Machine", "n", Some("ns"))),
            "ns",
            "m"
        ));
        assert!(!is_consumer(
            Some(&reference("Machine", "m", Some("ns"))),
            "ns",
            "m"
        ));
        assert!(!is_consumer(None, "ns", "m"));
    }

    #[test]
    fn network_data_table() {
        let ours = vec!["m-networkdata".to_owned()];
        let cases = [
            (
                "host's own kept",
                Some("h0-net"),
                Some("m-networkdata"),
                NetworkDataChoice::KeepHosts,
            ),
            (
                "host's own kept without template",
                Some("h0-net"),
                None,
                NetworkDataChoice::KeepHosts,
            ),
            (
                "rendered when host has none",
                None,
                Some("m-networkdata"),
                NetworkDataChoice::Rendered("m-networkdata".into()),
            ),
            (
                "ours again is not the host's own",
                Some("m-networkdata"),
                Some("m-networkdata"),
                NetworkDataChoice::Rendered("m-networkdata".into()),
            ),
            ("nothing at all", None, None, NetworkDataChoice::None),
            (
                "empty name counts as none",
                Some(""),
                None,
                NetworkDataChoice::None,
            ),
        ];
        for (what, own, rendered, want) in cases {
            assert_eq!(network_data_choice(own, rendered, &ours), want, "{what}");
        }
    }

    #[test]
    fn empty_choice_names_the_selector_and_the_way_out() {
        let hosts = vec![
            host("a", json!({"role": "cp"}), "provisioned", Some("m1")),
            host("b", json!({"role": "cp"}), "inspecting", None),
            host("w", json!({"role": "worker"}), "available", None),
        ];
        let selector = HostSelector {
            match_labels: [("role".to_owned(), "cp".to_owned())].into(),
            match_expressions: Vec::new(),
        };
        let message = no_host_message(&hosts, &selector, "ns");
        assert_eq!(
            message,
            "no available BareMetalHost matches matchLabels {role=cp} (3 BareMetalHosts in \
             namespace ns, 2 matching: 0 available, 1 claimed, 1 not available): add a \
             BareMetalHost matching it or free one (delete a Machine, or wait for one to finish \
             deprovisioning), or change spec.hostSelector"
        );
        let none = HostSelector {
            match_labels: [("role".to_owned(), "gpu".to_owned())].into(),
            match_expressions: Vec::new(),
        };
        let message = no_host_message(&hosts, &none, "ns");
        assert!(
            message.starts_with(
                "no BareMetalHost matches matchLabels {role=gpu} (3 BareMetalHosts in namespace \
                 ns, 0 matching: 0 available, 0 claimed)"
            ),
            "{message}"
        );
        assert!(message.contains("change spec.hostSelector"), "{message}");
        let one = [host("a", json!({"role": "cp"}), "provisioned", Some("m1"))];
        let message = no_host_message(&one, &selector, "ns");
        assert!(
            message
                .contains("(1 BareMetalHost in namespace ns, 1 matching: 0 available, 1 claimed)"),
            "{message}"
        );
    }
}
