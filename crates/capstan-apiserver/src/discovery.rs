//! Discovery documents (`/api`, `/apis`, `/apis/GROUP`, resource lists) and `/version`, in the legacy
//! (non-aggregated) form every kubectl and kube-rs version understands.

use crate::registry::{Registry, api_version};
use serde_json::{Value, json};

/// The Kubernetes version this API presents itself as.
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "33");

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": KUBERNETES_VERSION.0,
        "minor": KUBERNETES_VERSION.1,
        "gitVersion": format!("v{}.{}.0+capstan-{}", KUBERNETES_VERSION.0, KUBERNETES_VERSION.1, env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
    })
}

/// `/api`.
pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
}

/// The registry's groups plus those of the review APIs (which store nothing).
fn served_groups(registry: &Registry) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut groups = registry.groups();
    for (group, versions) in crate::reviews::groups() {
        let entry = groups.entry(group.to_owned()).or_default();
        for version in versions {
            if !entry.iter().any(|v| v == version) {
                entry.push(version.to_owned());
            }
        }
    }
    groups
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": api_version(group, v), "version": v}))
        .collect();
    json!({"name": group, "versions": versions, "preferredVersion": versions.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`.
pub fn group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = served_groups(registry)
        .iter()
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/GROUP`, or `None` for an unknown group.
pub fn group(registry: &Registry, group: &str) -> Option<Value> {
    let groups = served_groups(registry);
    let versions = groups.get(group)?;
    let mut entry = group_entry(group, versions);
    if let Some(obj) = entry.as_object_mut() {
        obj.insert("kind".into(), json!("APIGroup"));
        obj.insert("apiVersion".into(), json!("v1"));
    }
    Some(entry)
}

/// `/api/v1` or `/apis/GROUP/VERSION`, or `None` when nothing is served there.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = crate::reviews::resources(group, version);
    for crd in registry.iter().filter(|c| c.group == group) {
        let Some(v) = crd.version(version).filter(|v| v.served) else {
            continue;
        };
        let namespaced = crd.scope == capstan_schema::Scope::Namespaced;
        resources.push(json!({
            "name": crd.plural,
            "singularName": crd.singular,
            "namespaced": namespaced,
            "kind": crd.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": crd.short_names,
            "categories": crd.categories,
        }));
        if v.subresources.status {
            resources.push(json!({
                "name": format!("{}/status", crd.plural),
                "singularName": "",
                "namespaced": namespaced,
                "kind": crd.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        for (name, kind, sub_group, sub_version, verbs) in
            crate::builtin::subresources::listed(crd, v)
        {
            resources.push(json!({
                "name": name,
                "singularName": "",
                "namespaced": namespaced,
                "group": sub_group,
                "version": sub_version,
                "kind": kind,
                "verbs": verbs,
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version(group, version), "resources": resources}),
    )
}
