//! Defaulting of Kubernetes' own kinds, as kube-apiserver does it for the fields clients read back:
//! workload replicas and update strategies, Pod template and container defaults, Service type,
//! ports, protocol and cluster IP, Pod phase. Typed decoding also treats `null` as "not set", so
//! nulls are dropped first.

use serde_json::{Map, Value, json};

/// Drops `null` members of objects (kube-apiserver's typed decoding reads them as unset, and
/// `kubectl create` sends `creationTimestamp: null`).
pub fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            for v in map.values_mut() {
                drop_nulls(v);
            }
        }
        Value::Array(items) => {
            for v in items {
                drop_nulls(v);
            }
        }
        _ => {}
    }
}

fn object(value: &mut Value) -> Option<&mut Map<String, Value>> {
    value.as_object_mut()
}

fn entry<'a>(map: &'a mut Map<String, Value>, key: &str, default: Value) -> &'a mut Value {
    map.entry(key).or_insert(default)
}

/// Applies the defaults of `group`/`kind` to `object` (a whole object of that kind).
pub fn apply(group: &str, kind: &str, object: &mut Value) {
    if super::is_typed(group, kind) {
        drop_nulls(object);
    }
    match (group, kind) {
        ("", "Pod") => {
            if let Some(spec) = object.get_mut("spec") {
                pod_spec(spec);
            }
        }
        ("", "Namespace") => {
            if let Some(obj) = object.as_object_mut() {
                let spec = entry(obj, "spec", json!({}));
                if let Some(spec) = spec.as_object_mut() {
                    spec.entry("finalizers")
                        .or_insert_with(|| json!(["kubernetes"]));
                }
            }
        }
        ("", "Service") => {
            if let Some(spec) = object.get_mut("spec") {
                service_spec(spec);
            }
        }
        ("apps", "Deployment") => workload(object, true, |spec| {
            let strategy = entry(spec, "strategy", json!({}));
            if let Some(strategy) = object_of(strategy) {
                let kind = entry(strategy, "type", json!("RollingUpdate")).clone();
                if kind == "RollingUpdate" {
                    let rolling = entry(strategy, "rollingUpdate", json!({}));
                    if let Some(rolling) = object_of(rolling) {
                        rolling
                            .entry("maxUnavailable")
                            .or_insert_with(|| json!("25%"));
                        rolling.entry("maxSurge").or_insert_with(|| json!("25%"));
                    }
                }
            }
            spec.entry("progressDeadlineSeconds")
                .or_insert_with(|| json!(600));
        }),
        ("apps", "DaemonSet") => workload(object, false, |spec| {
            let strategy = entry(spec, "updateStrategy", json!({}));
            if let Some(strategy) = object_of(strategy) {
                let kind = entry(strategy, "type", json!("RollingUpdate")).clone();
                if kind == "RollingUpdate" {
                    let rolling = entry(strategy, "rollingUpdate", json!({}));
                    if let Some(rolling) = object_of(rolling) {
                        rolling.entry("maxUnavailable").or_insert_with(|| json!(1));
                        rolling.entry("maxSurge").or_insert_with(|| json!(0));
                    }
                }
            }
        }),
        ("apps", "StatefulSet") => workload(object, true, |spec| {
            spec.entry("podManagementPolicy")
                .or_insert_with(|| json!("OrderedReady"));
            let strategy = entry(spec, "updateStrategy", json!({}));
            if let Some(strategy) = object_of(strategy) {
                let kind = entry(strategy, "type", json!("RollingUpdate")).clone();
                if kind == "RollingUpdate" {
                    let rolling = entry(strategy, "rollingUpdate", json!({}));
                    if let Some(rolling) = object_of(rolling) {
                        rolling.entry("partition").or_insert_with(|| json!(0));
                    }
                }
            }
            spec.entry("persistentVolumeClaimRetentionPolicy")
                .or_insert_with(|| json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
        }),
        ("apps", "ReplicaSet") => workload(object, true, |_| {}),
        _ => {}
    }
}

fn object_of(value: &mut Value) -> Option<&mut Map<String, Value>> {
    object(value)
}

/// Defaults shared by the `apps/v1` workloads: `replicas` (where the kind has it),
/// `revisionHistoryLimit` and the Pod template.
fn workload(object: &mut Value, replicas: bool, extra: impl FnOnce(&mut Map<String, Value>)) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if replicas {
        spec.entry("replicas").or_insert_with(|| json!(1));
    }
    spec.entry("revisionHistoryLimit")
        .or_insert_with(|| json!(10));
    if let Some(template_spec) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
        pod_spec(template_spec);
    }
    extra(spec);
}

/// A Pod spec's defaults (also inside workload templates).
fn pod_spec(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    spec.entry("restartPolicy")
        .or_insert_with(|| json!("Always"));
    spec.entry("dnsPolicy")
        .or_insert_with(|| json!("ClusterFirst"));
    spec.entry("schedulerName")
        .or_insert_with(|| json!("default-scheduler"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert_with(|| json!(30));
    spec.entry("securityContext").or_insert_with(|| json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(containers)) = spec.get_mut(list) {
            for c in containers {
                container(c);
            }
        }
    }
}

fn container(container: &mut Value) {
    let Some(c) = container.as_object_mut() else {
        return;
    };
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    let tag = image.rsplit('/').next().unwrap_or_default();
    let latest = !image.contains('@') && (!tag.contains(':') || tag.ends_with(":latest"));
    c.entry("imagePullPolicy")
        .or_insert_with(|| json!(if latest { "Always" } else { "IfNotPresent" }));
    c.entry("terminationMessagePath")
        .or_insert_with(|| json!("/dev/termination-log"));
    c.entry("terminationMessagePolicy")
        .or_insert_with(|| json!("File"));
    c.entry("resources").or_insert_with(|| json!({}));
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert_with(|| json!("TCP"));
        }
    }
}

fn service_spec(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let service_type = entry(spec, "type", json!("ClusterIP")).clone();
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    if service_type != "ExternalName" {
        spec.entry("internalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
        spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
        spec.entry("ipFamilyPolicy")
            .or_insert_with(|| json!("SingleStack"));
    }
    if matches!(service_type.as_str(), Some("NodePort" | "LoadBalancer")) {
        spec.entry("externalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert_with(|| json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                p.entry("targetPort").or_insert(port);
            }
        }
    }
}

/// What kube-apiserver sets on a new object after its status was cleared: a Pod is `Pending`, a
/// Namespace `Active`, a Service gets a cluster IP.
pub fn on_create(group: &str, kind: &str, object: &mut Value) {
    let Some(obj) = object.as_object_mut() else {
        return;
    };
    match (group, kind) {
        ("", "Pod") => {
            obj.entry("status")
                .or_insert_with(|| json!({"phase": "Pending"}));
        }
        ("", "Namespace") => {
            obj.entry("status")
                .or_insert_with(|| json!({"phase": "Active"}));
        }
        ("", "Service") => allocate_cluster_ip(object),
        _ => {}
    }
}

/// A cluster IP for a new Service, from 10.96.0.0/16 keyed by namespace and name (nothing routes to
/// it: capstan has no service proxy; the address is what clients print and what Endpoints refer to).
pub fn allocate_cluster_ip(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return;
    }
    if spec.get("clusterIP").and_then(Value::as_str).is_some() {
        if !spec.contains_key("clusterIPs")
            && let Some(ip) = spec.get("clusterIP").cloned()
        {
            spec.insert("clusterIPs".into(), json!([ip]));
        }
        return;
    }
    let n = u32::from(rand::random::<u16>()).max(10);
    let ip = format!("10.96.{}.{}", n >> 8, n & 0xff);
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_defaults() {
        let mut d = json!({"spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "a", "image": "nginx", "ports": [{"containerPort": 80}]}]}}}});
        apply("apps", "Deployment", &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
    }

    #[test]
    fn service_defaults_and_nulls() {
        let mut s =
            json!({"metadata": {"creationTimestamp": null}, "spec": {"ports": [{"port": 80}]}});
        apply("", "Service", &mut s);
        assert!(s["metadata"].get("creationTimestamp").is_none());
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        allocate_cluster_ip(&mut s);
        assert!(
            s["spec"]["clusterIP"]
                .as_str()
                .unwrap()
                .starts_with("10.96.")
        );
        let mut pinned = json!({"spec": {"image": "x", "containers": [{"image": "nginx:1.27"}]}});
        apply("", "Pod", &mut pinned);
        on_create("", "Pod", &mut pinned);
        assert_eq!(
            pinned["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(pinned["status"]["phase"], "Pending");
    }
}
