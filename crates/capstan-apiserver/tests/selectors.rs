//! Label and field selectors as kubectl sends them: malformed ones are answered 400 and select
//! nothing (before, `kubectl delete cm -l '!'` deleted every ConfigMap).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{kubectl, ok, start};

#[test]
fn malformed_selectors_are_400_and_delete_nothing() {
    let server = start();
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: one\n  labels:\n    tier: web\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: two\n";
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(manifest)));
    for selector in ["!", "!=b", ",,,", "a,", "a in ()"] {
        let out = kubectl(&server, &["delete", "cm", "-l", selector], None);
        assert!(
            !out.status.success(),
            "kubectl delete -l {selector:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("BadRequest") || err.contains("unable to parse"),
            "{err}"
        );
        let out = kubectl(&server, &["get", "cm", "-l", selector], None);
        assert!(
            !out.status.success(),
            "kubectl get -l {selector:?} succeeded"
        );
    }
    let (code, body) = support::raw::request(
        &server,
        "GET",
        "/api/v1/namespaces/default/configmaps?labelSelector=%21",
        "application/json",
        b"",
    );
    assert_eq!(code, 400, "{body}");
    let (code, body) = support::raw::request(
        &server,
        "GET",
        "/api/v1/namespaces/default/configmaps?fieldSelector=%3Db",
        "application/json",
        b"",
    );
    assert_eq!(code, 400, "{body}");
    let names = ok(&kubectl(&server, &["get", "cm", "-o", "name"], None));
    assert!(
        names.contains("configmap/one") && names.contains("configmap/two"),
        "{names}"
    );
    // Well-formed selectors keep working.
    let names = ok(&kubectl(
        &server,
        &["get", "cm", "-l", "tier=web", "-o", "name"],
        None,
    ));
    assert_eq!(names.trim(), "configmap/one");
    let names = ok(&kubectl(
        &server,
        &["get", "cm", "-l", "!tier", "-o", "name"],
        None,
    ));
    assert!(
        names.contains("configmap/two") && !names.contains("configmap/one"),
        "{names}"
    );
    let names = ok(&kubectl(
        &server,
        &[
            "get",
            "cm",
            "--field-selector",
            "metadata.name=two",
            "-o",
            "name",
        ],
        None,
    ));
    assert_eq!(names.trim(), "configmap/two");
}

/// The events of a watch of ConfigMaps in `default` with `query`, resumed at `rv`, as
/// `(type, name)`; the watch ends after a second (`timeoutSeconds`).
fn resumed_watch(server: &support::Server, query: &str, rv: &str) -> Vec<(String, String)> {
    let (code, body) = support::raw::request(
        server,
        "GET",
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=1&{query}&resourceVersion={rv}&timeoutSeconds=1"
        ),
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                event["type"].as_str().unwrap_or_default().to_owned(),
                event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// A client lists with a selector at some version, then watches from it. Whatever changed in
/// between is judged against what the selection was at that version, not as it is when the watch
/// starts: an object deleted in between is DELETED (before, that event was dropped and a client
/// waiting for the deletion waited for ever), one that left the selection is DELETED, one that
/// entered it or was created is ADDED.
#[test]
fn a_resumed_selector_watch_judges_changes_against_the_listed_version() {
    let server = start();
    let cm = |name: &str, tier: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    tier: {tier}\n"
        )
    };
    let manifest = [
        cm("gone", "web"),
        cm("leaves", "web"),
        cm("enters", "db"),
        cm("stays", "web"),
    ]
    .join("---\n");
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(&manifest)));
    let (code, body) = support::raw::request(
        &server,
        "GET",
        "/api/v1/namespaces/default/configmaps?labelSelector=tier%3Dweb",
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    ok(&kubectl(&server, &["delete", "cm", "gone"], None));
    ok(&kubectl(
        &server,
        &["label", "cm", "leaves", "tier=db", "--overwrite"],
        None,
    ));
    ok(&kubectl(
        &server,
        &["label", "cm", "enters", "tier=web", "--overwrite"],
        None,
    ));
    ok(&kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(&cm("new", "web")),
    ));

    let events = resumed_watch(&server, "labelSelector=tier%3Dweb", &rv);
    let expected: Vec<(String, String)> = [
        ("DELETED", "gone"),
        ("DELETED", "leaves"),
        ("ADDED", "enters"),
        ("ADDED", "new"),
    ]
    .iter()
    .map(|(t, n)| ((*t).to_owned(), (*n).to_owned()))
    .collect();
    assert_eq!(events, expected);

    // The same for a watch of one object by name, as `kubectl wait --for=delete` makes.
    let events = resumed_watch(&server, "fieldSelector=metadata.name%3Dgone", &rv);
    assert_eq!(events, vec![("DELETED".to_owned(), "gone".to_owned())]);
}

/// Percent-encodes a query value.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GETs `path` and parses the JSON body.
fn get_json(server: &support::Server, path: &str) -> serde_json::Value {
    let (code, body) = support::raw::request(server, "GET", path, "application/json", b"");
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

fn item_names(list: &serde_json::Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Every operator of the label selector language, alone and combined with each other and with a
/// field selector, listed whole (streamed), in pages of 3 with continue tokens, and as a watch's
/// initial state: the same objects as the selector's own matcher picks from all of them, in name
/// order. (Lists by labels are answered by the store's label index; `>` and `<`, and field
/// selectors, are matched on the objects.)
#[test]
fn every_selector_form_lists_and_pages_as_its_matcher_selects() {
    use capstan_apiserver::selectors::{FieldSelector, LabelSelector, labels_of};
    let server = start();
    let mut manifest = Vec::new();
    let mut objects = Vec::new();
    for i in 0..24 {
        let mut labels = serde_json::Map::new();
        match i % 4 {
            0 => {}
            1 => drop(labels.insert("tier".into(), "web".into())),
            2 => drop(labels.insert("tier".into(), "db".into())),
            _ => drop(labels.insert("tier".into(), "".into())),
        }
        match i % 5 {
            0 => {}
            1 => drop(labels.insert("n".into(), "1".into())),
            2 => drop(labels.insert("n".into(), "5".into())),
            3 => drop(labels.insert("n".into(), "10".into())),
            _ => drop(labels.insert("n".into(), "x".into())),
        }
        if i % 3 == 0 {
            labels.insert("app.kubernetes.io/name".into(), "capstan".into());
        }
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm{i:02}"), "namespace": "default", "labels": labels},
        });
        manifest.push(serde_json::to_string(&object).unwrap());
        objects.push(object);
    }
    ok(&kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(&manifest.join("\n")),
    ));
    let selectors = [
        "",
        "tier=web",
        "tier==db",
        "tier=",
        "tier!=web",
        "tier in (web,db)",
        "tier in (web,)",
        "tier notin (web)",
        "tier",
        "!tier",
        "n>4",
        "n<6",
        "tier=web,n>2",
        "!tier,app.kubernetes.io/name=capstan",
        "app.kubernetes.io/name,tier notin (db,),n",
        "tier!=db,!n",
        "nothing=here",
        "tier in (none)",
    ];
    for fields in ["", "metadata.name!=cm05"] {
        for labels in selectors {
            let label_selector = LabelSelector::parse(labels).unwrap();
            let field_selector = FieldSelector::parse(fields).unwrap();
            let expected: Vec<String> = objects
                .iter()
                .filter(|o| label_selector.matches(&labels_of(o)) && field_selector.matches(o))
                .map(|o| {
                    o.pointer("/metadata/name")
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect();
            let query = format!(
                "labelSelector={}&fieldSelector={}",
                encoded(labels),
                encoded(fields)
            );
            let what = format!("-l {labels:?} --field-selector {fields:?}");
            let whole = get_json(
                &server,
                &format!("/api/v1/namespaces/default/configmaps?{query}"),
            );
            assert_eq!(item_names(&whole), expected, "{what}");
            let mut paged = Vec::new();
            let mut token = String::new();
            loop {
                let page = get_json(
                    &server,
                    &format!(
                        "/api/v1/namespaces/default/configmaps?{query}&limit=3&continue={}",
                        encoded(&token)
                    ),
                );
                paged.extend(item_names(&page));
                match page["metadata"]["continue"].as_str() {
                    Some(next) if !next.is_empty() => token = next.to_owned(),
                    _ => break,
                }
            }
            assert_eq!(paged, expected, "{what}, pages of 3");
            let all_namespaces = get_json(&server, &format!("/api/v1/configmaps?{query}"));
            let in_default: Vec<String> = all_namespaces["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|i| i["metadata"]["namespace"] == "default")
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(in_default, expected, "{what}, all namespaces");
        }
    }
    // A watch's initial state goes through the same selection.
    for labels in ["tier in (web,db)", "!tier", "n<6"] {
        let label_selector = LabelSelector::parse(labels).unwrap();
        let expected: Vec<(String, String)> = objects
            .iter()
            .filter(|o| label_selector.matches(&labels_of(o)))
            .map(|o| {
                (
                    "ADDED".to_owned(),
                    o.pointer("/metadata/name")
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_owned(),
                )
            })
            .collect();
        let events = resumed_watch(&server, &format!("labelSelector={}", encoded(labels)), "0");
        assert_eq!(events, expected, "watch -l {labels:?}");
    }
}
