//! CEL validation rules (`x-kubernetes-validations`) through the real API.
//!
//! - Every rule of the upstream CRDs embedded for the kinds capstan shares with upstream, at every
//!   place and in every served version it appears, is exercised: an object with a value the rule
//!   accepts is created (201), and one with a value it refuses gets 422 with upstream's message on
//!   the rule's field — and nothing else wrong. The table below gives, per rule text, a value it
//!   accepts and one it refuses; a test fails when a rule has no case.
//! - A user's CRD with rules (a transition rule among them): objects accepted and refused on
//!   create and update, with the reasons and field paths the rules give; a CRD whose rule does not
//!   compile is refused, naming the rule's field, through the API and when installed directly
//!   (`capstan serve --crds`).
//! - A 100,000-item list under a rule comparing every pair of items is refused at once by the
//!   cost bound instead of being evaluated.
//! - kubectl sees upstream's messages (`kubectl apply` of a KubeadmControlPlane with a repeated
//!   extraArgs name, a CiliumBGPPeerConfig whose keepalive exceeds its hold time).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Map, Value, json};
use support::raw::request;
use support::{Server, kubectl, start};

/// Per rule text: a value at the rule's node that it accepts, and one that it refuses.
fn case(rule: &str) -> Option<(Value, Value)> {
    let pair = match rule {
        r if r.starts_with("self.matches('^(Linux|LinuxSwap") => (json!("Linux"), json!("Bogus")),
        "self.all(x, self.exists_one(y, x.name == y.name))" => (
            json!([{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]),
            json!([{"name": "a", "value": "1"}, {"name": "a", "value": "2"}]),
        ),
        "[has(self.layout),has(self.diskLayout)].filter(x,x==true).size() == 1" => (
            json!({"device": "/dev/sda", "layout": true}),
            json!({"device": "/dev/sda", "layout": true, "diskLayout": [{"percentage": 100}]}),
        ),
        "self.advertisementType != 'Service' || has(self.service)" => (
            json!({"advertisementType": "Service", "service": {"addresses": ["LoadBalancerIP"]}}),
            json!({"advertisementType": "Service"}),
        ),
        "self.advertisementType == 'Service' || !has(self.service)" => (
            json!({"advertisementType": "PodCIDR"}),
            json!({"advertisementType": "PodCIDR", "service": {"addresses": ["LoadBalancerIP"]}}),
        ),
        "self.advertisementType != 'Interface' || has(self.interface)" => (
            json!({"advertisementType": "Interface", "interface": {"name": "lo"}}),
            json!({"advertisementType": "Interface"}),
        ),
        "self.advertisementType == 'Interface' || !has(self.interface)" => (
            json!({"advertisementType": "PodCIDR"}),
            json!({"advertisementType": "PodCIDR", "interface": {"name": "lo"}}),
        ),
        "self.advertisementType != 'PodCIDR' || !has(self.selector)" => (
            json!({"advertisementType": "CiliumPodIPPool", "selector": {}}),
            json!({"advertisementType": "PodCIDR", "selector": {}}),
        ),
        r if r.starts_with("!has(self.peerInterface)") => (
            json!({"name": "p", "peerInterface": "eth0", "peerAddress": "fe80::1"}),
            json!({"name": "p", "peerInterface": "eth0", "peerAddress": "10.0.0.1"}),
        ),
        "has(self.peerAddress) || has(self.autoDiscovery)" => (
            json!({"name": "p", "peerAddress": "10.0.0.1"}),
            json!({"name": "p"}),
        ),
        "self.mode != 'DefaultGateway' || has(self.defaultGateway)" => (
            json!({"mode": "DefaultGateway", "defaultGateway": {"addressFamily": "ipv4"}}),
            json!({"mode": "DefaultGateway"}),
        ),
        "self.mode != 'Unnumbered' || (has(self.unnumbered) != has(self.defaultGateway))" => (
            json!({"mode": "Unnumbered", "unnumbered": {"interface": "eth0"}}),
            json!({"mode": "Unnumbered"}),
        ),
        "self.keepAliveTimeSeconds <= self.holdTimeSeconds" => (
            json!({"keepAliveTimeSeconds": 30, "holdTimeSeconds": 90}),
            json!({"keepAliveTimeSeconds": 100, "holdTimeSeconds": 90}),
        ),
        r if r.starts_with("!(self in ['Ready'") => (json!("NetworkReady"), json!("Ready")),
        _ => return None,
    };
    Some(pair)
}

/// One place of one rule in an upstream schema.
struct Place {
    group: String,
    kind: String,
    version: String,
    /// Steps from the root: property names, `[]` for a list's items.
    steps: Vec<String>,
    rule: String,
    message: String,
}

fn places() -> Vec<Place> {
    fn walk(node: &Value, steps: &mut Vec<String>, key: &str, out: &mut Vec<Place>) {
        for rule in node["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let mut parts = key.split('/');
            let (group, kind, version) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            out.push(Place {
                group: group.into(),
                kind: kind.into(),
                version: version.into(),
                steps: steps.clone(),
                rule: rule["rule"].as_str().unwrap().into(),
                message: rule["message"].as_str().unwrap_or_default().into(),
            });
        }
        if let Some(props) = node["properties"].as_object() {
            for (name, child) in props {
                steps.push(name.clone());
                walk(child, steps, key, out);
                steps.pop();
            }
        }
        if node["items"].is_object() {
            steps.push("[]".into());
            walk(&node["items"], steps, key, out);
            steps.pop();
        }
    }
    let mut out = Vec::new();
    for (key, schema) in capstan_apiserver::kind_schemas::upstream_schemas() {
        walk(schema, &mut Vec::new(), key, &mut out);
    }
    out
}

/// The least value `schema` admits: required fields filled, enums' first value, bounds met.
fn minimal(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if schema["x-kubernetes-int-or-string"] == json!(true) {
        return json!(1);
    }
    match schema["type"].as_str() {
        Some("object") => {
            let mut object = Map::new();
            fill_required(schema, &mut object);
            Value::Object(object)
        }
        Some("array") => {
            if schema["minItems"].as_u64().unwrap_or(0) > 0 {
                json!([minimal(&schema["items"])])
            } else {
                json!([])
            }
        }
        Some("integer" | "number") => json!(schema["minimum"].as_f64().map_or(1, |m| m as i64 + 1)),
        Some("boolean") => json!(false),
        Some("string") => match schema["format"].as_str() {
            Some("duration") => json!("1m"),
            Some("date-time") => json!("2025-01-01T00:00:00Z"),
            _ => json!(
                "x".repeat(usize::try_from(schema["minLength"].as_u64().unwrap_or(1)).unwrap())
            ),
        },
        _ => json!({}),
    }
}

fn fill_required(schema: &Value, object: &mut Map<String, Value>) {
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap();
        if !object.contains_key(name) {
            let property = &schema["properties"][name];
            // Durations written as plain strings (v1beta1 timeouts).
            let value = if name.ends_with("imeout") && property["type"] == json!("string") {
                json!("5m")
            } else {
                minimal(property)
            };
            object.insert(name.into(), value);
        }
    }
}

/// An object of the kind with `value` at the rule's place, everything on the way there minimal.
fn object_with(place: &Place, value: &Value) -> Value {
    let schema =
        capstan_apiserver::kind_schemas::schema(&place.group, &place.kind, &place.version).unwrap();
    fn set(node: &mut Value, schema: &Value, steps: &[String], value: &Value) {
        let Some((step, rest)) = steps.split_first() else {
            *node = value.clone();
            if let (Some(object), Some("object")) = (node.as_object_mut(), schema["type"].as_str())
            {
                fill_required(schema, object);
            }
            return;
        };
        if step == "[]" {
            let mut item = minimal(&schema["items"]);
            set(&mut item, &schema["items"], rest, value);
            *node = json!([item]);
        } else {
            if !node.is_object() {
                *node = minimal(schema);
            }
            let child_schema = &schema["properties"][step.as_str()];
            let mut child = node[step.as_str()].take();
            if child.is_null() {
                child = minimal(child_schema);
            }
            set(&mut child, child_schema, rest, value);
            node[step.as_str()] = child;
        }
    }
    let mut object = minimal(schema);
    set(&mut object, schema, &place.steps, value);
    object["apiVersion"] = json!(format!("{}/{}", place.group, place.version));
    object["kind"] = json!(place.kind);
    object["metadata"] = json!({"name": "o"});
    object
}

fn collection(place: &Place) -> String {
    let plural = format!("{}s", place.kind.to_ascii_lowercase());
    if place.group == "cilium.io" {
        format!("/apis/{}/{}/{plural}", place.group, place.version)
    } else {
        format!(
            "/apis/{}/{}/namespaces/default/{plural}",
            place.group, place.version
        )
    }
}

/// Where kube-apiserver reports a failure at `steps` (`spec.partitions[0].diskLayout[0]`).
fn field(steps: &[String]) -> String {
    let mut out = String::new();
    for step in steps {
        if step == "[]" {
            out.push_str("[0]");
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(step);
        }
    }
    out
}

fn post(server: &Server, path: &str, object: &Value) -> (u16, Value) {
    let (code, body) = request(
        server,
        "POST",
        path,
        "application/json",
        object.to_string().as_bytes(),
    );
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[test]
fn every_upstream_rule_accepts_and_refuses_through_the_api() {
    let server = start();
    let places = places();
    assert!(
        places.len() >= 37,
        "upstream's rules are embedded ({} found)",
        places.len()
    );
    let mut failures = Vec::new();
    for (i, place) in places.iter().enumerate() {
        let where_ = format!(
            "{}/{} {} {}",
            place.kind,
            place.version,
            field(&place.steps),
            place.rule
        );
        let Some((accepted, refused)) = case(&place.rule) else {
            failures.push(format!("{where_}: no case for this rule"));
            continue;
        };
        let path = collection(place);
        let mut good = object_with(place, &accepted);
        good["metadata"]["name"] = json!(format!("ok-{i}"));
        let (code, body) = post(&server, &path, &good);
        if code != 201 {
            failures.push(format!("{where_}: accepted value answered {code}: {body}"));
        }
        let mut bad = object_with(place, &refused);
        bad["metadata"]["name"] = json!(format!("bad-{i}"));
        let (code, body) = post(&server, &path, &bad);
        let causes = body["details"]["causes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let expected_field = field(&place.steps);
        let as_upstream = code == 422
            && causes.len() == 1
            && causes[0]["field"] == json!(expected_field)
            && causes[0]["reason"] == json!("FieldValueInvalid")
            && causes[0]["message"]
                .as_str()
                .is_some_and(|m| m.ends_with(&format!(": {}", place.message)));
        if !as_upstream {
            failures.push(format!(
                "{where_}: refused value answered {code} (want one cause on {expected_field}: {:?}): {body}",
                place.message
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rule places:\n{}",
        failures.len(),
        places.len(),
        failures.join("\n")
    );
    eprintln!("{} upstream rule places exercised", places.len());
}

const WIDGETS: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.example.com"},
  "spec": {
    "group": "example.com",
    "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
    "versions": [{
      "name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {
          "type": "object",
          "x-kubernetes-validations": [
            {"rule": "self.replicas != 0", "message": "replicas cannot be 0"},
            {"rule": "self.minReplicas <= self.replicas", "messageExpression": "'minReplicas ' + string(self.minReplicas) + ' exceeds replicas ' + string(self.replicas)", "fieldPath": ".minReplicas", "reason": "FieldValueForbidden"}
          ],
          "properties": {
            "replicas": {"type": "integer"},
            "minReplicas": {"type": "integer", "default": 0},
            "class": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "class is immutable"}]},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
              "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": "!has(oldSelf.port) || self.port >= oldSelf.port", "message": "a port may only grow"}]}}
          }
        }
      }}}
    }]
  }
}"#;

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

const WIDGETS_PATH: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn causes(body: &Value) -> Vec<(String, String, String)> {
    body["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or_default().to_owned(),
                c["field"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Polls until the definition's kind is served (a definition is served once stored).
fn wait_served(server: &Server) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (code, _) = request(server, "GET", WIDGETS_PATH, "application/json", b"");
        if code == 200 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "widgets never served");
    }
}

#[test]
fn rules_of_a_users_crd_apply_on_create_and_update() {
    let server = start();
    let crd: Value = serde_json::from_str(WIDGETS).unwrap();
    let (code, body) = post(
        &server,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd,
    );
    assert_eq!(code, 201, "{body}");
    wait_served(&server);

    let (code, body) = post(
        &server,
        WIDGETS_PATH,
        &widget(
            "w",
            json!({"replicas": 2, "class": "a", "ports": [{"name": "http", "port": 80}]}),
        ),
    );
    assert_eq!(code, 201, "{body}");

    let (code, body) = post(
        &server,
        WIDGETS_PATH,
        &widget("zero", json!({"replicas": 0, "minReplicas": 3})),
    );
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [
            (
                "FieldValueInvalid".to_owned(),
                "spec".to_owned(),
                "Invalid value: \"object\": replicas cannot be 0".to_owned()
            ),
            (
                "FieldValueForbidden".to_owned(),
                "spec.minReplicas".to_owned(),
                "Forbidden: minReplicas 3 exceeds replicas 0".to_owned()
            ),
        ]
    );
    assert_eq!(
        body["message"],
        json!(
            "Widget.example.com \"zero\" is invalid: [spec: Invalid value: \"object\": replicas cannot be 0, spec.minReplicas: Forbidden: minReplicas 3 exceeds replicas 0]"
        )
    );

    // An evaluation error (a field the rule reads is missing) is a 422 too.
    let (code, body) = post(&server, WIDGETS_PATH, &widget("empty", json!({})));
    assert_eq!(code, 422, "{body}");
    assert!(
        causes(&body)
            .iter()
            .any(|(_, f, m)| f == "spec" && m.contains("no such key: replicas")),
        "{body}"
    );

    // Transition rules: on update only, against the stored object.
    let item = format!("{WIDGETS_PATH}/w");
    let (code, current) = request(&server, "GET", &item, "application/json", b"");
    assert_eq!(code, 200);
    let current: Value = serde_json::from_str(&current).unwrap();
    let mut changed = current.clone();
    changed["spec"]["class"] = json!("b");
    changed["spec"]["ports"] = json!([{"name": "http", "port": 79}, {"name": "https", "port": 1}]);
    let (code, body) = request(
        &server,
        "PUT",
        &item,
        "application/json",
        changed.to_string().as_bytes(),
    );
    assert_eq!(code, 422, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        causes(&body),
        [
            (
                "FieldValueInvalid".to_owned(),
                "spec.class".to_owned(),
                "Invalid value: \"string\": class is immutable".to_owned()
            ),
            (
                "FieldValueInvalid".to_owned(),
                "spec.ports[0]".to_owned(),
                "Invalid value: \"object\": a port may only grow".to_owned()
            ),
        ]
    );
    let mut grown = current.clone();
    grown["spec"]["ports"] = json!([{"name": "http", "port": 8080}, {"name": "https", "port": 1}]);
    let (code, body) = request(
        &server,
        "PUT",
        &item,
        "application/json",
        grown.to_string().as_bytes(),
    );
    assert_eq!(code, 200, "{body}");
    // A merge patch is checked the same way.
    let (code, body) = request(
        &server,
        "PATCH",
        &item,
        "application/merge-patch+json",
        br#"{"spec": {"replicas": 0}}"#,
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("replicas cannot be 0"), "{body}");
}

#[test]
fn a_crd_whose_rule_does_not_compile_is_refused() {
    let server = start();
    let mut crd: Value = serde_json::from_str(WIDGETS).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
        [1]["rule"] = json!("self.minReplicas <= other.replicas");
    let (code, body) = post(
        &server,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd,
    );
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        causes(&body),
        [(
            "FieldValueInvalid".to_owned(),
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule".to_owned(),
            "Invalid value: \"self.minReplicas <= other.replicas\": compilation failed: undeclared reference to 'other'".to_owned()
        )]
    );
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
        [1]["rule"] = json!("self.minReplicas <=");
    let (code, body) = post(
        &server,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd,
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.to_string().contains("compilation failed"), "{body}");
    // Nothing was stored.
    let (code, _) = request(
        &server,
        "GET",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
        "application/json",
        b"",
    );
    assert_eq!(code, 404);
}

#[test]
fn a_huge_list_under_a_quadratic_rule_is_refused_quickly_not_evaluated() {
    let server = start();
    let place = places()
        .into_iter()
        .find(|p| {
            p.kind == "KubeadmConfig"
                && p.rule.contains("exists_one")
                && p.steps.last().is_some_and(|s| s == "extraArgs")
        })
        .unwrap();
    let args: Vec<Value> = (0..100_000)
        .map(|i| json!({"name": format!("a{i}"), "value": "v"}))
        .collect();
    let object = object_with(&place, &Value::Array(args));
    let (code, body) = post(&server, &collection(&place), &object);
    assert_eq!(code, 422, "{body}");
    assert!(
        body.to_string()
            .contains("estimated rule cost exceeds budget"),
        "{body}"
    );
}

const KCP: &str = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: cp
  namespace: default
spec:
  version: v1.31.0
  replicas: 1
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: Metal3MachineTemplate
        name: cp
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        extraArgs:
        - name: audit-log-path
          value: /var/log/audit.log
        - name: audit-log-path
          value: /tmp/audit.log
"#;

const PEER_CONFIG: &str = r#"
apiVersion: cilium.io/v2
kind: CiliumBGPPeerConfig
metadata:
  name: peer
spec:
  timers:
    keepAliveTimeSeconds: 100
    holdTimeSeconds: 90
"#;

#[test]
fn kubectl_apply_shows_upstreams_messages() {
    let server = start();
    let out = kubectl(&server, &["apply", "-f", "-"], Some(KCP));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "spec.kubeadmConfigSpec.clusterConfiguration.apiServer.extraArgs: Invalid value: \"array\": extraArgs name must be unique"
        ),
        "{stderr}"
    );
    let fixed = KCP.replace("value: /tmp/audit.log", "value: x").replacen(
        "- name: audit-log-path\n          value: x",
        "- name: audit-log-maxage\n          value: x",
        1,
    );
    support::ok(&kubectl(&server, &["apply", "-f", "-"], Some(&fixed)));

    let out = kubectl(&server, &["apply", "-f", "-"], Some(PEER_CONFIG));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "spec.timers: Invalid value: \"object\": keepAliveTimeSeconds can not be larger than holdTimeSeconds"
        ),
        "{stderr}"
    );
}

/// `capstan serve --crds` installs definitions without the API: the same rule check applies.
#[test]
fn installing_a_crd_whose_rule_does_not_compile_fails() {
    use capstan_apiserver::{ApiServer, Auth, ServerError};
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = capstan_store::Store::open(
        &dir.path().join("state.db"),
        capstan_store::StoreOptions::default(),
    )
    .unwrap();
    let server = runtime
        .block_on(ApiServer::new(
            store,
            std::sync::Arc::new(capstan_apiserver::conversion::ModelConverter),
            Auth { tokens: Vec::new() },
        ))
        .unwrap();
    let mut crd: Value = serde_json::from_str(WIDGETS).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["class"]
        ["x-kubernetes-validations"][0]["rule"] = json!("self.nosuch() == 1");
    let error = runtime.block_on(server.install_crd(crd)).unwrap_err();
    assert!(
        matches!(error, ServerError::InvalidRule { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "CustomResourceDefinition widgets.example.com: the rule \"self.nosuch() == 1\" at version v1 openAPIV3Schema.properties[spec].properties[class].x-kubernetes-validations[0].rule"
    );
    let good: Value = serde_json::from_str(WIDGETS).unwrap();
    runtime.block_on(server.install_crd(good)).unwrap();
}
