//! The protobuf wire format for Kubernetes' own kinds, checked against an independent codec (the
//! prost types of `k8s-pb`) at the HTTP level — create, get, list and watch of a Deployment and a
//! Service — and with kubectl 1.33, whose `create` subcommands send protobuf.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::Value;
use std::io::{Read, Write};
use support::{kubectl, ok, start};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// One request with raw bytes both ways: (status code, content type, body).
fn request(
    server: &support::Server,
    method: &str,
    path: &str,
    content_type: &str,
    accept: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut stream = support::raw::connect(server);
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nContent-Type: {content_type}\r\nAccept: {accept}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        server.token,
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    stream.flush().unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let mut body = response[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type: "))
        .unwrap_or_default()
        .to_owned();
    (code, content_type, body)
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&body[end + 2..end + 2 + size]);
        body = &body[end + 2 + size + 2..];
    }
    out
}

/// `object` in Kubernetes' protobuf envelope.
fn envelope<M: Message>(api_version: &str, kind: &str, object: &M) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(object.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// The object inside an envelope, with its type.
fn open<M: Message + Default>(bytes: &[u8]) -> (String, M) {
    let rest = bytes.strip_prefix(b"k8s\0").expect("the protobuf prefix");
    let unknown = Unknown::decode(rest).unwrap();
    let kind = unknown.type_meta.unwrap().kind.unwrap();
    (kind, M::decode(unknown.raw.unwrap().as_slice()).unwrap())
}

fn deployment() -> apps::Deployment {
    let labels = [("app".to_owned(), "web".to_owned())].into_iter().collect();
    apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: Some("web".into()),
            ..Default::default()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(2),
            selector: Some(meta::LabelSelector {
                match_labels: labels,
                ..Default::default()
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta {
                    labels: [("app".to_owned(), "web".to_owned())].into_iter().collect(),
                    ..Default::default()
                }),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: Some("app".into()),
                        image: Some("nginx:1".into()),
                        resources: Some(core::ResourceRequirements {
                            limits: [(
                                "cpu".to_owned(),
                                k8s_pb::apimachinery::pkg::api::resource::Quantity {
                                    string: Some("250m".into()),
                                },
                            )]
                            .into_iter()
                            .collect(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        status: None,
    }
}

#[test]
fn built_in_kinds_speak_protobuf_in_requests_responses_lists_and_watches() {
    let server = start();
    let base = "/apis/apps/v1/namespaces/default/deployments";
    let (code, content_type, body) = request(
        &server,
        "POST",
        base,
        PROTOBUF,
        PROTOBUF,
        &envelope("apps/v1", "Deployment", &deployment()),
    );
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    assert_eq!(content_type, PROTOBUF);
    let (kind, created): (_, apps::Deployment) = open(&body);
    assert_eq!(kind, "Deployment");
    let spec = created.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let container = &spec.template.unwrap().spec.unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some("nginx:1"));
    assert_eq!(
        container.resources.as_ref().unwrap().limits["cpu"]
            .string
            .as_deref(),
        Some("250m")
    );
    // Defaults applied by the server come back too.
    assert_eq!(
        spec.strategy.unwrap().rolling_update.unwrap().max_surge,
        Some(IntOrString {
            r#type: Some(1),
            int_val: Some(0),
            str_val: Some("25%".into())
        })
    );

    // The JSON view of the same object agrees.
    let (code, _, body) = request(
        &server,
        "GET",
        &format!("{base}/web"),
        "",
        "application/json",
        b"",
    );
    assert_eq!(code, 200);
    let json: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        json["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "250m"
    );
    assert_eq!(json["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");

    // A Service with an integer target port, then the list in protobuf.
    let service = core::Service {
        metadata: Some(meta::ObjectMeta {
            name: Some("web".into()),
            ..Default::default()
        }),
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                port: Some(80),
                target_port: Some(IntOrString {
                    r#type: Some(0),
                    int_val: Some(8080),
                    str_val: None,
                }),
                ..Default::default()
            }],
            selector: [("app".to_owned(), "web".to_owned())].into_iter().collect(),
            ..Default::default()
        }),
        status: None,
    };
    let (code, _, body) = request(
        &server,
        "POST",
        "/api/v1/namespaces/default/services",
        PROTOBUF,
        "application/json",
        &envelope("v1", "Service", &service),
    );
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let json: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["spec"]["ports"][0]["targetPort"], 8080);
    let (code, _, body) = request(
        &server,
        "GET",
        "/api/v1/namespaces/default/services",
        "",
        PROTOBUF,
        b"",
    );
    assert_eq!(code, 200);
    let (kind, list): (_, core::ServiceList) = open(&body);
    assert_eq!(kind, "ServiceList");
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].spec.as_ref().unwrap().ports[0]
            .target_port
            .as_ref()
            .unwrap()
            .int_val,
        Some(8080)
    );

    // A watch in protobuf: length-prefixed WatchEvents holding enveloped objects.
    let (code, content_type, body) = request(
        &server,
        "GET",
        &format!("{base}?watch=true&timeoutSeconds=1"),
        "",
        PROTOBUF,
        b"",
    );
    assert_eq!(code, 200);
    assert_eq!(
        content_type,
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let length = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
    let event = meta::WatchEvent::decode(&body[4..4 + length]).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let (kind, watched): (_, apps::Deployment) = open(&event.object.unwrap().raw.unwrap());
    assert_eq!(kind, "Deployment");
    assert_eq!(watched.metadata.unwrap().name.as_deref(), Some("web"));

    // Errors answer a protobuf Status.
    let (code, content_type, body) = request(
        &server,
        "GET",
        &format!("{base}/missing"),
        "",
        PROTOBUF,
        b"",
    );
    assert_eq!(code, 404);
    assert_eq!(content_type, PROTOBUF);
    let (kind, status): (_, meta::Status) = open(&body);
    assert_eq!(kind, "Status");
    assert_eq!(status.reason.as_deref(), Some("NotFound"));
}

#[test]
fn kubectl_creates_built_in_kinds() {
    let server = start();
    for args in [
        vec![
            "create",
            "deployment",
            "web",
            "--image=nginx:1",
            "--replicas=2",
            "--port=80",
        ],
        vec!["create", "service", "clusterip", "web", "--tcp=80:8080"],
        vec![
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods",
        ],
        vec![
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--user=alice",
        ],
        vec![
            "create",
            "clusterrole",
            "viewer",
            "--verb=get",
            "--resource=nodes",
        ],
        vec![
            "create",
            "poddisruptionbudget",
            "web",
            "--selector=app=web",
            "--min-available=1",
        ],
        vec!["create", "job", "once", "--image=busybox"],
    ] {
        let out = kubectl(&server, &args, None);
        // Jobs are not served: kubectl must say so rather than fail on the wire format.
        if args[1] == "job" {
            assert!(!out.status.success());
            continue;
        }
        ok(&out);
    }
    let get = |args: &[&str]| -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&ok(&kubectl(&server, &all, None))).unwrap()
    };
    let deployment = get(&["deployment", "web"]);
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        80
    );
    let service = get(&["service", "web"]);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(service["spec"]["ports"][0]["port"], 80);
    let role = get(&["role", "reader"]);
    assert_eq!(
        role["rules"][0]["verbs"],
        serde_json::json!(["get", "list"])
    );
    let binding = get(&["rolebinding", "reader"]);
    assert_eq!(binding["subjects"][0]["name"], "alice");
    let pdb = get(&["poddisruptionbudget", "web"]);
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    // kubectl's own protobuf reads (get -o name uses the default content type).
    let names = ok(&kubectl(
        &server,
        &["get", "deployments,services", "-o", "name"],
        None,
    ));
    assert!(
        names.contains("deployment.apps/web") && names.contains("service/web"),
        "{names}"
    );
}
