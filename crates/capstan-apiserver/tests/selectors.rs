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
