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
