//! Lists without a limit, Tables and the initial state of a watch are written page by page; they
//! must still hold every object exactly once across page boundaries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::raw::request;
use support::start;

const CM: &str = "/api/v1/namespaces/default/configmaps";
/// More than two pages of the server's stream.
const COUNT: usize = 1_100;

#[test]
fn tables_lists_and_initial_watch_events_span_pages_completely() {
    let server = start();
    std::thread::scope(|scope| {
        for worker in 0..4 {
            let server = &server;
            scope.spawn(move || {
                for i in (worker..COUNT).step_by(4) {
                    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i:05}")}, "data": {"i": i.to_string()}});
                    let (code, body) = request(server, "POST", CM, "application/json", cm.to_string().as_bytes());
                    assert_eq!(code, 201, "{body}");
                }
            });
        }
    });
    let (code, body) = request(&server, "GET", CM, "application/json", b"");
    assert_eq!(code, 200);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), COUNT);

    let (code, body) =
        request_accepting(&server, CM, "application/json;as=Table;v=v1;g=meta.k8s.io");
    assert_eq!(code, 200);
    let table: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(table["kind"], "Table");
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), COUNT);
    assert_eq!(rows[0]["cells"][0], "cm-00000");
    assert_eq!(rows[COUNT - 1]["cells"][0], format!("cm-{:05}", COUNT - 1));

    let (code, body) = request(
        &server,
        "GET",
        &format!("{CM}?watch=true&timeoutSeconds=2"),
        "application/json",
        b"",
    );
    assert_eq!(code, 200);
    let added: std::collections::BTreeSet<String> = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["type"] == "ADDED")
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(added.len(), COUNT);
}

fn request_accepting(server: &support::Server, path: &str, accept: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = support::raw::connect(server);
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n",
        server.token
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (_, body) = text.split_once("\r\n\r\n").unwrap_or_default();
    (code, support::raw::dechunk(body))
}
