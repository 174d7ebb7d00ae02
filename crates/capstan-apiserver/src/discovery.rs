//! Discovery documents (`/api`, `/apis`, `/apis/GROUP`, resource lists) and `/version`: the legacy
//! form every kubectl and kube-rs version understands, and the aggregated form
//! (`apidiscovery.k8s.io` `APIGroupDiscoveryList`, v2 and v2beta1) that client-go asks for first —
//! every group's resources in the answer to `/api` and `/apis`, so a kubectl command makes two
//! discovery requests instead of one per group version. The aggregated form is built from the
//! legacy resource lists, so the two always say the same.

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

/// The `g` parameter of an aggregated discovery media type.
const AGGREGATED_GROUP: &str = "apidiscovery.k8s.io";
/// The aggregated discovery versions served, most preferred first.
const AGGREGATED_VERSIONS: [&str; 2] = ["v2", "v2beta1"];

/// The aggregated discovery version an `Accept` header asks for (its first JSON media range naming
/// `g=apidiscovery.k8s.io;v=…;as=APIGroupDiscoveryList` of a served version), or `None` for the
/// legacy documents. Protobuf ranges are passed over: their JSON twin follows in client-go's header.
pub fn aggregated_version(accept: &str) -> Option<&'static str> {
    accept.split(',').find_map(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media_type = parts.next()?;
        if !media_type.eq_ignore_ascii_case("application/json") {
            return None;
        }
        let (mut group, mut version, mut as_kind) = (None, None, None);
        for param in parts {
            match param.split_once('=') {
                Some(("g", v)) => group = Some(v),
                Some(("v", v)) => version = Some(v),
                Some(("as", v)) => as_kind = Some(v),
                _ => {}
            }
        }
        if group != Some(AGGREGATED_GROUP) || as_kind != Some("APIGroupDiscoveryList") {
            return None;
        }
        AGGREGATED_VERSIONS
            .into_iter()
            .find(|served| Some(*served) == version)
    })
}

/// The `Content-Type` of an aggregated discovery document of `version`.
pub fn aggregated_media_type(version: &str) -> String {
    format!("application/json;g={AGGREGATED_GROUP};v={version};as=APIGroupDiscoveryList")
}

/// The aggregated discovery document of the core group (`/api`) or of every other group (`/apis`).
pub fn aggregated(registry: &Registry, core: bool, version: &str) -> Value {
    let groups: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_owned()])]
    } else {
        served_groups(registry).into_iter().collect()
    };
    let items: Vec<Value> = groups
        .iter()
        .filter_map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .filter_map(|v| {
                    let list = resource_list(registry, group, v)?;
                    let resources = aggregated_resources(group, v, &list["resources"]);
                    Some(json!({"version": v, "resources": resources, "freshness": "Current"}))
                })
                .collect();
            if versions.is_empty() {
                return None;
            }
            let metadata = if group.is_empty() {
                json!({})
            } else {
                json!({"name": group})
            };
            Some(json!({"metadata": metadata, "versions": versions}))
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("{AGGREGATED_GROUP}/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// A legacy resource list's entries as aggregated `APIResourceDiscovery` objects: each subresource
/// (`machines/status`) moves under its resource.
fn aggregated_resources(group: &str, version: &str, legacy: &Value) -> Vec<Value> {
    let entries = legacy.as_array().map(Vec::as_slice).unwrap_or_default();
    // As kube-apiserver: for Kubernetes' own kinds group and version are empty when they are the
    // group version's own, and named for a kind of another one (a `scale` subresource's
    // autoscaling/v1 Scale); custom resources name them always.
    let response_kind = |entry: &Value, plural: &str| {
        let entry_group = entry["group"].as_str().unwrap_or(group);
        let entry_version = entry["version"].as_str().unwrap_or(version);
        let own = entry_group == group
            && entry_version == version
            && crate::registry::is_kubernetes_resource(group, plural);
        json!({
            "group": if own { "" } else { entry_group },
            "version": if own { "" } else { entry_version },
            "kind": entry["kind"],
        })
    };
    let mut resources: Vec<Value> = Vec::new();
    for entry in entries {
        let Some(name) = entry["name"].as_str() else {
            continue;
        };
        if name.contains('/') {
            continue;
        }
        let mut resource = json!({
            "resource": name,
            "responseKind": response_kind(entry, name),
            "scope": if entry["namespaced"] == true { "Namespaced" } else { "Cluster" },
            "singularResource": entry["singularName"],
            "verbs": entry["verbs"],
        });
        for field in ["shortNames", "categories"] {
            if entry[field].as_array().is_some_and(|a| !a.is_empty()) {
                resource[field] = entry[field].clone();
            }
        }
        resources.push(resource);
    }
    for entry in entries {
        let Some((parent, subresource)) = entry["name"].as_str().and_then(|n| n.split_once('/'))
        else {
            continue;
        };
        let Some(resource) = resources.iter_mut().find(|r| r["resource"] == parent) else {
            continue;
        };
        let sub = json!({
            "subresource": subresource,
            "responseKind": response_kind(entry, parent),
            "verbs": entry["verbs"],
        });
        match resource["subresources"].as_array_mut() {
            Some(list) => list.push(sub),
            None => resource["subresources"] = json!([sub]),
        }
    }
    // kube-apiserver lists a resource's subresources by name (`scale` before `status`).
    for resource in &mut resources {
        if let Some(list) = resource["subresources"].as_array_mut() {
            list.sort_by_key(|s| s["subresource"].as_str().unwrap_or_default().to_owned());
        }
    }
    resources
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_choose_the_aggregated_version() {
        let cases = [
            // client-go 1.30+: v2 and v2beta1, protobuf first, then the legacy form.
            (
                "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
                Some("v2"),
            ),
            // client-go 1.27–1.29: v2beta1 only.
            (
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
                Some("v2beta1"),
            ),
            ("application/json", None),
            ("", None),
            ("*/*", None),
            // Not a version served, nor the list kind, nor this group.
            (
                "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList",
                None,
            ),
            (
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscovery",
                None,
            ),
            (
                "application/json;g=example.com;v=v2;as=APIGroupDiscoveryList",
                None,
            ),
            (
                "application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList",
                Some("v2"),
            ),
        ];
        for (i, (accept, want)) in cases.iter().enumerate() {
            assert_eq!(aggregated_version(accept), *want, "case {i}: {accept}");
        }
    }

    #[test]
    fn the_aggregated_document_says_what_the_legacy_lists_say() {
        let registry = crate::registry::Registry::builtin().unwrap();
        let apis = aggregated(&registry, false, "v2");
        assert_eq!(apis["kind"], "APIGroupDiscoveryList");
        assert_eq!(apis["apiVersion"], "apidiscovery.k8s.io/v2");
        let items = apis["items"].as_array().cloned().unwrap_or_default();
        let legacy_groups = group_list(&registry);
        assert_eq!(
            items.len(),
            legacy_groups["groups"].as_array().map_or(0, Vec::len),
            "one item per group of /apis"
        );
        for item in &items {
            let group = item["metadata"]["name"].as_str().unwrap_or_default();
            for version in item["versions"].as_array().cloned().unwrap_or_default() {
                let v = version["version"].as_str().unwrap_or_default();
                let legacy = resource_list(&registry, group, v).unwrap_or(Value::Null);
                let legacy_names: Vec<String> = legacy["resources"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|r| r["name"].as_str().map(str::to_owned))
                    .collect();
                let mut names = Vec::new();
                for resource in version["resources"].as_array().cloned().unwrap_or_default() {
                    let name = resource["resource"].as_str().unwrap_or_default().to_owned();
                    for sub in resource["subresources"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                    {
                        names.push(format!(
                            "{name}/{}",
                            sub["subresource"].as_str().unwrap_or_default()
                        ));
                    }
                    names.push(name);
                }
                names.sort();
                let mut legacy_names = legacy_names;
                legacy_names.sort();
                assert_eq!(names, legacy_names, "{group}/{v}");
            }
        }
        let machines = items
            .iter()
            .find(|i| i["metadata"]["name"] == "cluster.x-k8s.io")
            .and_then(|i| i["versions"][0]["resources"].as_array().cloned())
            .and_then(|r| r.into_iter().find(|r| r["resource"] == "machines"))
            .unwrap_or(Value::Null);
        assert_eq!(machines["scope"], "Namespaced", "{machines:#}");
        assert_eq!(machines["responseKind"]["kind"], "Machine", "{machines:#}");
        assert!(
            machines["subresources"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["subresource"] == "status")),
            "{machines:#}"
        );

        let core = aggregated(&registry, true, "v2beta1");
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        let core_items = core["items"].as_array().cloned().unwrap_or_default();
        assert_eq!(core_items.len(), 1, "{core:#}");
        assert!(core_items[0]["metadata"].get("name").is_none());
        let secrets = core_items[0]["versions"][0]["resources"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["resource"] == "secrets").cloned())
            .unwrap_or(Value::Null);
        assert_eq!(
            secrets["responseKind"],
            json!({"group": "", "version": "v1", "kind": "Secret"})
        );
    }
}
