//! `Table` responses (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`), which `kubectl get` prints:
//! a Name column, the kind's printer columns (evaluated with a JSONPath subset), and Age.
//!
//! Kubernetes' own kinds also have columns no JSONPath expresses (`READY 1/3`, `PORT(S) 80/TCP`,
//! `DATA 2`, an Event's `OBJECT deployment/web`): their `jsonPath` is `=FUNCTION:ARGUMENTS`, computed
//! here as kube-apiserver's printers do. A kind whose columns include `Name` gets no Name or Age
//! column added (Events: `LAST SEEN TYPE REASON OBJECT MESSAGE`, the name only with `-o wide`).

use serde_json::{Value, json};

pub use capstan_schema::PrinterColumn;

/// Evaluates the JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[*].b`,
/// `.a[?(@.type=="Ready")].status`, and keys with dots as Kubernetes' JSONPath reads them:
/// `.metadata.labels['cluster\.x-k8s\.io/cluster-name']` or
/// `.metadata.labels.cluster\.x-k8s\.io/cluster-name`. Returns every match.
pub fn eval_json_path<'a>(value: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![value];
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let (key, remaining) = field(after);
            current = current.into_iter().filter_map(|v| v.get(&key)).collect();
            rest = remaining;
        } else if let Some(after) = rest.strip_prefix("['") {
            // Kubernetes reads `['TEXT']` as `.TEXT`: the quotes keep a slash or a bracket in the
            // key, and dots inside are still separators unless escaped.
            let Some((text, remaining)) = after
                .split_once('\'')
                .and_then(|(text, r)| Some((text, r.strip_prefix(']')?)))
            else {
                return Vec::new();
            };
            let mut keys = text;
            loop {
                let (key, more) = field(keys);
                current = current.into_iter().filter_map(|v| v.get(&key)).collect();
                match more.strip_prefix('.') {
                    Some(next) => keys = next,
                    None if more.is_empty() => break,
                    None => return Vec::new(),
                }
            }
            rest = remaining;
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return Vec::new();
            };
            let selector = &after[..end];
            rest = &after[end + 1..];
            current = if selector == "*" {
                current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .collect()
            } else if let Ok(index) = selector.parse::<usize>() {
                current.into_iter().filter_map(|v| v.get(index)).collect()
            } else if let Some(filter) = selector
                .strip_prefix("?(@.")
                .and_then(|f| f.strip_suffix(')'))
            {
                let Some((field, expected)) = filter.split_once("==") else {
                    return Vec::new();
                };
                let expected = expected.trim().trim_matches(['"', '\'']);
                current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter(|item| item.get(field.trim()).and_then(Value::as_str) == Some(expected))
                    .collect()
            } else {
                return Vec::new();
            };
        } else {
            return Vec::new();
        }
    }
    current
}

/// One key of a dotted path and what follows it: the key ends at the first `.` or `[` that no
/// backslash escapes, and loses its backslashes (`cluster\.x-k8s\.io` is `cluster.x-k8s.io`), as
/// in Kubernetes' JSONPath.
fn field(text: &str) -> (String, &str) {
    let mut key = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    key.push(escaped);
                }
            }
            '.' | '[' => return (key, &text[i..]),
            c => key.push(c),
        }
    }
    (key, "")
}

/// `kubectl`-style age, as Kubernetes' `duration.HumanDuration`: `45s`, `5m30s`, `12m`, `5h10m`,
/// `20h`, `3d4h`, `30d`, `2y10d`.
pub fn age(created: &str) -> String {
    let Ok(created) = created.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let seconds = jiff::Timestamp::now().as_second() - created.as_second();
    human_duration(seconds.max(0))
}

fn human_duration(seconds: i64) -> String {
    let with = |big: i64, big_unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big}{big_unit}")
        } else {
            format!("{big}{big_unit}{small}{small_unit}")
        }
    };
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    match seconds {
        s if s < 120 => format!("{s}s"),
        _ if minutes < 10 => with(minutes, "m", seconds % 60, "s"),
        _ if minutes < 3 * 60 => format!("{minutes}m"),
        _ if hours < 8 => with(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => with(hours / 24, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{}d", hours / 24),
        _ if hours < 24 * 365 * 8 => with(hours / 24 / 365, "y", (hours / 24) % 365, "d"),
        _ => format!("{}y", hours / 24 / 365),
    }
}

/// The single value at `path` (the first match).
fn at<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    eval_json_path(object, path).into_iter().next()
}

fn int_at(object: &Value, path: &str) -> i64 {
    at(object, path).and_then(Value::as_i64).unwrap_or(0)
}

fn string_or_none(value: Option<&Value>) -> Value {
    match value.and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(s) => Value::String(s.to_owned()),
        None => Value::String("<none>".into()),
    }
}

/// `k=v,k2=v2` (sorted by key), `<none>` when empty; label selectors also print their expressions
/// (`k in (a,b)`, `k notin (a)`, `k`, `!k`), as `metav1.FormatLabelSelector`.
fn format_selector(value: Option<&Value>) -> String {
    let Some(Value::Object(map)) = value else {
        return "<none>".into();
    };
    let (labels, expressions) =
        if map.contains_key("matchLabels") || map.contains_key("matchExpressions") {
            (
                map.get("matchLabels").and_then(Value::as_object),
                map.get("matchExpressions").and_then(Value::as_array),
            )
        } else {
            (Some(map), None)
        };
    let mut parts: Vec<String> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    parts.sort();
    for e in expressions.into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        parts.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

/// A computed column (`jsonPath` `=FUNCTION:ARGUMENTS`, see the module documentation).
fn computed(object: &Value, spec: &str) -> Value {
    let (function, arguments) = spec.split_once(':').unwrap_or((spec, ""));
    let paths: Vec<&str> = arguments.split(',').filter(|p| !p.is_empty()).collect();
    let first = paths.first().copied().unwrap_or_default();
    match function {
        // `ready/desired`, both defaulting to 0.
        "ratio" => Value::String(format!(
            "{}/{}",
            int_at(object, first),
            int_at(object, paths.get(1).copied().unwrap_or_default())
        )),
        "int" => Value::from(int_at(object, first)),
        // How many entries the maps or lists at the paths hold together.
        "count" => Value::from(
            paths
                .iter()
                .filter_map(|p| at(object, p))
                .map(|v| match v {
                    Value::Object(m) => m.len(),
                    Value::Array(a) => a.len(),
                    _ => 0,
                })
                .sum::<usize>(),
        ),
        // A field of every item of the list at the first path, comma-separated.
        "join" => {
            let field = paths.get(1).copied().unwrap_or("name");
            let items: Vec<&str> = at(object, first)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|i| i[field].as_str()).collect())
                .unwrap_or_default();
            Value::String(if items.is_empty() {
                "<none>".into()
            } else {
                items.join(",")
            })
        }
        "selector" => Value::String(format_selector(at(object, first))),
        // A ResourceQuota's `key: used/hard` for each key of its status, as kubectl prints them.
        "quota-usage" => {
            let status = at(object, first);
            let hard = status
                .and_then(|s| s.get("hard"))
                .and_then(Value::as_object);
            let used = status.and_then(|s| s.get("used"));
            let text = |v: Option<&Value>| match v {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => "0".into(),
            };
            let entries: Vec<String> = hard
                .into_iter()
                .flatten()
                .map(|(key, limit)| {
                    let used = text(used.and_then(|u| u.get(key)));
                    format!("{key}: {used}/{}", text(Some(limit)))
                })
                .collect();
            Value::String(entries.join(", "))
        }
        "or-none" => string_or_none(at(object, first)),
        // An int-or-string, `N/A` when unset (a PodDisruptionBudget's bounds).
        "or-na" => Value::String(match at(object, first) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => "N/A".into(),
        }),
        // A Service's ports: `80/TCP`, `80:30080/TCP` with a node port.
        "ports" => {
            let ports: Vec<String> = at(object, first)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|p| {
                            let protocol = p["protocol"].as_str().unwrap_or("TCP");
                            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                                Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                                None => format!("{}/{protocol}", p["port"]),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            Value::String(if ports.is_empty() {
                "<none>".into()
            } else {
                ports.join(",")
            })
        }
        // A Service's external IPs: load balancer ingress and `spec.externalIPs`, else `<none>`
        // (`<pending>` for a LoadBalancer without ingress).
        "external-ips" => {
            let mut ips: Vec<String> = object["status"]["loadBalancer"]["ingress"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| {
                    i["ip"]
                        .as_str()
                        .or(i["hostname"].as_str())
                        .map(str::to_owned)
                })
                .collect();
            ips.extend(
                object["spec"]["externalIPs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i.as_str().map(str::to_owned)),
            );
            Value::String(if !ips.is_empty() {
                ips.join(",")
            } else if object["spec"]["type"] == "LoadBalancer" {
                "<pending>".into()
            } else {
                "<none>".into()
            })
        }
        // A Pod's ready containers of all.
        "pod-ready" => {
            let total = object["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = object["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["ready"] == Value::Bool(true))
                .count();
            Value::String(format!("{ready}/{total}"))
        }
        "pod-restarts" => Value::from(
            object["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["restartCount"].as_i64())
                .sum::<i64>(),
        ),
        // An Event's involved object: `kind/name` with the kind in lower case.
        "event-object" => {
            let kind = object["involvedObject"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_lowercase();
            match object["involvedObject"]["name"]
                .as_str()
                .filter(|n| !n.is_empty())
            {
                Some(name) => Value::String(format!("{kind}/{name}")),
                None => Value::String(kind),
            }
        }
        "event-first-seen" => Value::String(event_first_seen(object)),
        "event-last-seen" => Value::String(
            match object["series"]["lastObservedTime"]
                .as_str()
                .or(object["lastTimestamp"].as_str())
            {
                Some(t) => age(t),
                None => event_first_seen(object),
            },
        ),
        "event-count" => Value::from(
            object["series"]["count"]
                .as_i64()
                .or(object["count"].as_i64())
                .filter(|c| *c > 0)
                .unwrap_or(1),
        ),
        "event-source" => {
            let component = object["source"]["component"]
                .as_str()
                .or(object["reportingComponent"].as_str())
                .unwrap_or_default();
            let host = object["source"]["host"]
                .as_str()
                .or(object["reportingInstance"].as_str())
                .unwrap_or_default();
            Value::String(if host.is_empty() {
                component.to_owned()
            } else {
                format!("{component}, {host}")
            })
        }
        _ => Value::Null,
    }
}

fn event_first_seen(object: &Value) -> String {
    match object["firstTimestamp"]
        .as_str()
        .or(object["eventTime"].as_str())
    {
        Some(t) => age(t),
        None => "<unknown>".into(),
    }
}

fn cell(value: Option<&&Value>, type_: &str) -> Value {
    match value {
        None => Value::Null,
        Some(Value::String(s)) if type_ == "date" => Value::String(age(s)),
        Some(v @ (Value::Number(_) | Value::Bool(_))) if type_ != "string" => (*v).clone(),
        Some(Value::String(s)) => Value::String(s.clone()),
        Some(other) => Value::String(other.to_string()),
    }
}

/// Builds the Table for `objects`.
pub fn table(
    objects: &[Value],
    columns: &[PrinterColumn],
    resource_version: &str,
    continue_token: Option<&str>,
) -> Value {
    // A kind that places its Name column itself has every column given.
    let complete = columns.iter().any(|c| c.name == "Name");
    let mut definitions = Vec::new();
    if !complete {
        definitions.push(json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}));
    }
    for c in columns {
        definitions.push(json!({"name": c.name, "type": c.column_type, "format": c.format.clone().unwrap_or_default(), "description": c.description.clone().unwrap_or_default(), "priority": c.priority}));
    }
    let has_age = complete || columns.iter().any(|c| c.name.eq_ignore_ascii_case("age"));
    if !has_age {
        definitions.push(json!({"name": "Age", "type": "date", "format": "", "description": "Time since creation.", "priority": 0}));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells = Vec::new();
            if !complete {
                cells.push(o["metadata"]["name"].clone());
            }
            for c in columns {
                if let Some(spec) = c.json_path.strip_prefix('=') {
                    cells.push(computed(o, spec));
                    continue;
                }
                let found = eval_json_path(o, &c.json_path);
                cells.push(if found.len() > 1 {
                    Value::String(
                        found
                            .iter()
                            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                            .collect::<Vec<_>>()
                            .join(","),
                    )
                } else {
                    cell(found.first(), &c.column_type)
                });
            }
            if !has_age {
                cells.push(Value::String(age(o["metadata"]["creationTimestamp"].as_str().unwrap_or_default())));
            }
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]},
            })
        })
        .collect();
    let mut metadata = json!({"resourceVersion": resource_version});
    if let (Some(token), Some(m)) = (continue_token, metadata.as_object_mut()) {
        m.insert("continue".into(), Value::String(token.to_owned()));
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": definitions, "rows": rows})
}

/// Sets each row's `object` as `includeObject` asks: `Object` the whole object, `None` nothing,
/// `Metadata` (the default) the object's metadata.
pub fn include_objects(mut table: Value, objects: &[Value], include: Option<&str>) -> Value {
    if let Some(rows) = table["rows"].as_array_mut() {
        for (row, object) in rows.iter_mut().zip(objects) {
            let Some(row) = row.as_object_mut() else {
                continue;
            };
            match include {
                Some("Object") => {
                    row.insert("object".into(), object.clone());
                }
                Some("None") => {
                    row.remove("object");
                }
                _ => {}
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_subset() {
        let v = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]},
                       "spec": {"items": [{"n": 1}, {"n": 2}]}});
        assert_eq!(eval_json_path(&v, ".status.phase"), vec![&json!("Running")]);
        assert_eq!(
            eval_json_path(&v, r#".status.conditions[?(@.type=="Ready")].status"#),
            vec![&json!("True")]
        );
        assert_eq!(
            eval_json_path(&v, ".spec.items[*].n"),
            vec![&json!(1), &json!(2)]
        );
        assert_eq!(eval_json_path(&v, ".spec.items[1].n"), vec![&json!(2)]);
        assert!(eval_json_path(&v, ".nope.x").is_empty());
    }

    #[test]
    fn keys_with_dots_are_read_bracketed_or_escaped() {
        // The Cluster API printer columns name the cluster by its label, whose key has dots and a
        // slash: upstream's CRDs write `['cluster\.x-k8s\.io/cluster-name']`.
        let v = json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "capi-1", "a.b": "dotted", "plain": "p"}}});
        for path in [
            r".metadata.labels['cluster\.x-k8s\.io/cluster-name']",
            r".metadata.labels.cluster\.x-k8s\.io/cluster-name",
            r"{.metadata.labels['cluster\.x-k8s\.io/cluster-name']}",
        ] {
            assert_eq!(eval_json_path(&v, path), vec![&json!("capi-1")], "{path}");
        }
        assert_eq!(
            eval_json_path(&v, r".metadata['labels'].a\.b"),
            vec![&json!("dotted")]
        );
        assert_eq!(
            eval_json_path(&v, ".metadata.labels.plain"),
            vec![&json!("p")]
        );
        // As in Kubernetes' JSONPath, an unescaped dot separates keys inside the quotes too, and
        // only single quotes name a key; unterminated brackets or quotes match nothing.
        assert!(eval_json_path(&v, ".metadata.labels.cluster.x-k8s.io/cluster-name").is_empty());
        assert!(eval_json_path(&v, ".metadata.labels['cluster.x-k8s.io/cluster-name']").is_empty());
        assert!(eval_json_path(&v, r#".metadata.labels["plain"]"#).is_empty());
        assert!(eval_json_path(&v, ".metadata.labels['plain").is_empty());
        assert!(eval_json_path(&v, ".metadata.labels['plain'").is_empty());
    }

    #[test]
    fn ages_read_as_kubernetes_prints_them() {
        for (seconds, text) in [
            (45, "45s"),
            (330, "5m30s"),
            (300, "5m"),
            (720, "12m"),
            (5 * 3600 + 600, "5h10m"),
            (20 * 3600, "20h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (30 * 86400, "30d"),
            (2 * 365 * 86400 + 10 * 86400, "2y10d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(seconds), text);
        }
    }

    #[test]
    fn computed_columns_follow_the_kubernetes_printers() {
        let deployment = json!({"spec": {"replicas": 3, "selector": {"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]}]},
            "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}, {"name": "side", "image": "busybox"}]}}}, "status": {"readyReplicas": 1}});
        assert_eq!(
            computed(&deployment, "ratio:.status.readyReplicas,.spec.replicas"),
            "1/3"
        );
        assert_eq!(computed(&deployment, "int:.status.updatedReplicas"), 0);
        assert_eq!(
            computed(&deployment, "join:.spec.template.spec.containers,image"),
            "nginx,busybox"
        );
        assert_eq!(
            computed(&deployment, "selector:.spec.selector"),
            "a=1,b=2,t in (x,y)"
        );
        let config_map = json!({"data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
        assert_eq!(computed(&config_map, "count:.data,.binaryData"), 3);
        let service = json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}]}});
        assert_eq!(
            computed(&service, "ports:.spec.ports"),
            "80:30080/TCP,53/UDP"
        );
        assert_eq!(computed(&service, "external-ips"), "<none>");
        let event = json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "count": 0});
        assert_eq!(computed(&event, "event-object"), "deployment/web");
        assert_eq!(computed(&event, "event-count"), 1);
    }

    #[test]
    fn a_kind_placing_its_name_column_gets_no_name_or_age_added() {
        let col = |name: &str, path: &str, priority: i32| PrinterColumn {
            name: name.into(),
            column_type: "string".into(),
            format: None,
            description: None,
            priority,
            json_path: path.into(),
        };
        let columns = vec![
            col("Reason", ".reason", 0),
            col("Name", ".metadata.name", 1),
        ];
        let event = json!({"metadata": {"name": "e1", "creationTimestamp": "2020-01-01T00:00:00Z"}, "reason": "Scaled"});
        let t = table(&[event], &columns, "1", None);
        assert_eq!(t["rows"][0]["cells"], json!(["Scaled", "e1"]));
        assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn tables_have_name_columns_and_age() {
        let objects = vec![
            json!({"metadata": {"name": "a", "creationTimestamp": "2020-01-01T00:00:00Z"}, "status": {"phase": "Provisioned"}}),
        ];
        let cols = vec![PrinterColumn {
            name: "Phase".into(),
            column_type: "string".into(),
            format: None,
            description: None,
            priority: 0,
            json_path: ".status.phase".into(),
        }];
        let t = table(&objects, &cols, "7", None);
        assert_eq!(t["rows"][0]["cells"][0], "a");
        assert_eq!(t["rows"][0]["cells"][1], "Provisioned");
        assert!(t["rows"][0]["cells"][2].as_str().unwrap().ends_with('d'));
        assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 3);
        let whole = include_objects(t.clone(), &objects, Some("Object"));
        assert_eq!(whole["rows"][0]["object"]["status"]["phase"], "Provisioned");
        let none = include_objects(t, &objects, Some("None"));
        assert!(none["rows"][0].get("object").is_none());
    }
}
