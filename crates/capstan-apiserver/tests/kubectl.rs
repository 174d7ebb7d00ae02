//! kubectl against the API server, in-process over real TLS: discovery (`api-resources`), `apply`,
//! `get` in every output form, label selectors, `describe`, `explain`, `delete`, watches, conflicts and
//! field validation. kubectl is the real client (preinstalled; 1.27–1.33 are also tried when present).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use support::{kubectl, kubectl_at, ok, start};

const HOSTS: &str = r#"
apiVersion: v1
kind: Secret
metadata:
  name: node-0-bmc
  namespace: default
type: Opaque
stringData:
  username: admin
  password: s3cret
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: node-0
  namespace: default
  labels:
    cluster.x-k8s.io/role: control-plane
spec:
  online: true
  bootMACAddress: "52:54:00:00:00:01"
  bmc:
    address: redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/1
    credentialsName: node-0-bmc
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: node-1
  namespace: default
  labels:
    cluster.x-k8s.io/role: worker
spec:
  online: false
  bmc:
    address: redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/2
    credentialsName: node-0-bmc
"#;

#[test]
fn kubectl_works_against_the_embedded_api() {
    let server = start();
    let resources = ok(&kubectl(&server, &["api-resources"], None));
    for expected in [
        "baremetalhosts",
        "bmh",
        "metal3.io/v1alpha1",
        "clusters",
        "kubeadmcontrolplanes",
        "secrets",
        "ippools",
    ] {
        assert!(
            resources.contains(expected),
            "api-resources lacks {expected}:\n{resources}"
        );
    }

    ok(&kubectl(&server, &["apply", "-f", "-"], Some(HOSTS)));
    let table = ok(&kubectl(&server, &["get", "bmh"], None));
    assert!(
        table.contains("NAME") && table.contains("ONLINE") && table.contains("node-0"),
        "{table}"
    );
    let yaml = ok(&kubectl(
        &server,
        &["get", "bmh", "node-0", "-o", "yaml"],
        None,
    ));
    assert!(
        yaml.contains("bootMACAddress: \"52:54:00:00:00:01\"") && yaml.contains("resourceVersion:"),
        "{yaml}"
    );
    let jsonpath = ok(&kubectl(
        &server,
        &["get", "bmh", "-o", "jsonpath={.items[*].metadata.name}"],
        None,
    ));
    assert_eq!(jsonpath.trim(), "node-0 node-1");
    let selected = ok(&kubectl(
        &server,
        &[
            "get",
            "bmh",
            "-l",
            "cluster.x-k8s.io/role=worker",
            "-o",
            "name",
        ],
        None,
    ));
    assert_eq!(selected.trim(), "baremetalhost.metal3.io/node-1");

    // Re-applying the same manifests changes nothing; a changed one is configured.
    let again = ok(&kubectl(&server, &["apply", "-f", "-"], Some(HOSTS)));
    assert!(again.contains("unchanged"), "{again}");
    let changed = ok(&kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(&HOSTS.replace("online: false", "online: true")),
    ));
    assert!(
        changed.contains("baremetalhost.metal3.io/node-1 configured"),
        "{changed}"
    );
    let generation = ok(&kubectl(
        &server,
        &[
            "get",
            "bmh",
            "node-1",
            "-o",
            "jsonpath={.metadata.generation}",
        ],
        None,
    ));
    assert_eq!(generation.trim(), "2");

    let described = ok(&kubectl(&server, &["describe", "bmh", "node-0"], None));
    assert!(
        described.contains("node-0") && described.contains("Spec:"),
        "{described}"
    );

    ok(&kubectl(&server, &["delete", "bmh", "node-1"], None));
    let remaining = ok(&kubectl(&server, &["get", "bmh", "-o", "name"], None));
    assert_eq!(remaining.trim(), "baremetalhost.metal3.io/node-0");
    let missing = kubectl(&server, &["get", "bmh", "node-1"], None);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("NotFound")
            || String::from_utf8_lossy(&missing.stderr).contains("not found")
    );
}

#[test]
fn kubectl_watch_sees_changes_as_they_happen() {
    let server = start();
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(HOSTS)));
    let mut watch = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .args(["get", "bmh", "-w", "-o", "name"])
        .env("HOME", server.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    // The initial state first...
    let mut seen = vec![
        lines.next().unwrap().unwrap(),
        lines.next().unwrap().unwrap(),
    ];
    seen.sort();
    assert_eq!(
        seen,
        vec![
            "baremetalhost.metal3.io/node-0",
            "baremetalhost.metal3.io/node-1"
        ]
    );
    // ...then a change made after the watch started.
    ok(&kubectl(
        &server,
        &["label", "bmh", "node-0", "rack=r1"],
        None,
    ));
    assert_eq!(
        lines.next().unwrap().unwrap(),
        "baremetalhost.metal3.io/node-0"
    );
    watch.kill().unwrap();
    let _ = watch.wait();
}

#[test]
fn crds_applied_with_kubectl_are_served_validated_and_explained() {
    let server = start();
    let crd_dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/crds/metal3");
    let crd = crd_dir.join("metal3.io_baremetalhosts.yaml");
    ok(&kubectl(
        &server,
        &["apply", "-f", crd.to_str().unwrap()],
        None,
    ));
    // The upstream schema now validates: an unknown field is refused by kubectl's default strict validation.
    let typo = HOSTS.replace("bootMACAddress", "bootMacAddress");
    let refused = kubectl(&server, &["apply", "-f", "-"], Some(&typo));
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("bootMacAddress"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // A wrong type is refused with the field named.
    let wrong_type = HOSTS.replace("online: true", "online: yes-please");
    let refused = kubectl(&server, &["apply", "-f", "-"], Some(&wrong_type));
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("spec.online"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(HOSTS)));
    let explained = ok(&kubectl(
        &server,
        &["explain", "baremetalhost.spec.bmc"],
        None,
    ));
    assert!(explained.contains("credentialsName"), "{explained}");
}

#[test]
fn unauthenticated_requests_are_refused_and_conflicts_are_409() {
    let server = start();
    let client =
        |token: Option<&str>, method: &str, path: &str, body: Option<&str>| -> (u16, String) {
            let mut cmd = Command::new("curl");
            cmd.args([
                "-s",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
                "--cacert",
                server.ca.to_str().unwrap(),
                "-X",
                method,
            ]);
            if let Some(t) = token {
                cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
            }
            if let Some(b) = body {
                cmd.args(["-H", "Content-Type: application/json", "--data", b]);
            }
            let out = cmd.arg(format!("{}{}", server.url, path)).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let (body, code) = text.rsplit_once('\n').unwrap();
            (code.parse().unwrap(), body.to_owned())
        };
    // Without credentials: system:anonymous, whom the default roles do not let list Secrets.
    let (code, body) = client(None, "GET", "/api/v1/namespaces/default/secrets", None);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"User \"system:anonymous\" cannot list"#),
        "{body}"
    );
    assert_eq!(
        client(
            Some("wrong"),
            "GET",
            "/api/v1/namespaces/default/secrets",
            None
        )
        .0,
        401
    );
    assert_eq!(client(None, "GET", "/healthz", None).0, 200);
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1"}}"#;
    let (code, created) = client(
        Some(&server.token),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(cm),
    );
    assert_eq!(code, 201, "{created}");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap();
    let update = |value: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"c","resourceVersion":"{rv}"}},"data":{{"a":"{value}"}}}}"#
        )
    };
    assert_eq!(
        client(
            Some(&server.token),
            "PUT",
            "/api/v1/namespaces/default/configmaps/c",
            Some(&update("2"))
        )
        .0,
        200
    );
    let (code, status) = client(
        Some(&server.token),
        "PUT",
        "/api/v1/namespaces/default/configmaps/c",
        Some(&update("3")),
    );
    assert_eq!(code, 409, "{status}");
    assert!(status.contains("\"reason\":\"Conflict\""));
}

#[test]
fn secrets_fold_string_data_and_describe_hides_values() {
    let server = start();
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(HOSTS)));
    let data = ok(&kubectl(
        &server,
        &[
            "get",
            "secret",
            "node-0-bmc",
            "-o",
            "jsonpath={.data.password}",
        ],
        None,
    ));
    assert_eq!(data.trim(), "czNjcmV0", "base64 of s3cret");
    let secret_type = ok(&kubectl(
        &server,
        &["get", "secret", "node-0-bmc", "-o", "jsonpath={.type}"],
        None,
    ));
    assert_eq!(secret_type.trim(), "Opaque");
    let described = ok(&kubectl(
        &server,
        &["describe", "secret", "node-0-bmc"],
        None,
    ));
    assert!(
        !described.contains("s3cret") && !described.contains("czNjcmV0"),
        "{described}"
    );
}

#[test]
fn patches_merge_concurrently_and_json_patch_tests_of_null_pass_on_missing_paths() {
    let server = start();
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(HOSTS)));
    // Ten label patches at once, none naming a resourceVersion: all land.
    let children: Vec<_> = (0..10)
        .map(|i| {
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&server.kubeconfig)
                .args([
                    "patch",
                    "bmh",
                    "node-0",
                    "--type",
                    "merge",
                    "-p",
                    &format!(r#"{{"metadata":{{"labels":{{"p{i}":"x"}}}}}}"#),
                ])
                .env("HOME", server.dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let labels = ok(&kubectl(
        &server,
        &["get", "bmh", "node-0", "-o", "jsonpath={.metadata.labels}"],
        None,
    ));
    for i in 0..10 {
        assert!(labels.contains(&format!("\"p{i}\":\"x\"")), "{labels}");
    }
    // kube-runtime adds a first finalizer with `test /metadata/finalizers == null` then `add`.
    let patch = r#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["example.com/f"]}]"#;
    ok(&kubectl(
        &server,
        &["patch", "bmh", "node-0", "--type", "json", "-p", patch],
        None,
    ));
    let finalizers = ok(&kubectl(
        &server,
        &[
            "get",
            "bmh",
            "node-0",
            "-o",
            "jsonpath={.metadata.finalizers}",
        ],
        None,
    ));
    assert!(finalizers.contains("example.com/f"), "{finalizers}");
    // The same test now fails: the path exists.
    assert!(
        !kubectl(
            &server,
            &["patch", "bmh", "node-0", "--type", "json", "-p", patch],
            None
        )
        .status
        .success()
    );
    // A stale resourceVersion named in a merge patch is a precondition: 409.
    let stale = kubectl(
        &server,
        &[
            "patch",
            "bmh",
            "node-0",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"resourceVersion":"1"},"spec":{"online":false}}"#,
        ],
        None,
    );
    assert!(!stale.status.success());
    assert!(
        String::from_utf8_lossy(&stale.stderr).contains("modified"),
        "{}",
        String::from_utf8_lossy(&stale.stderr)
    );
}

/// The kubectl versions installed beside the default one (`/usr/lib/google-cloud-sdk/bin/kubectl.1.NN`).
fn other_kubectls() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/google-cloud-sdk/bin")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("kubectl.1."))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

#[test]
fn every_installed_kubectl_version_applies_lists_and_deletes() {
    let versions = other_kubectls();
    assert!(
        !versions.is_empty(),
        "kubectl 1.27–1.33 are expected in /usr/lib/google-cloud-sdk/bin"
    );
    for kubectl in versions {
        let server = start();
        let name = kubectl.display().to_string();
        let resources = ok(&kubectl_at(&kubectl, &server, &["api-resources"], None));
        assert!(resources.contains("baremetalhosts"), "{name}: {resources}");
        ok(&kubectl_at(
            &kubectl,
            &server,
            &["apply", "-f", "-"],
            Some(HOSTS),
        ));
        let table = ok(&kubectl_at(&kubectl, &server, &["get", "bmh"], None));
        assert!(
            table.contains("node-0") && table.contains("ONLINE"),
            "{name}: {table}"
        );
        let yaml = ok(&kubectl_at(
            &kubectl,
            &server,
            &["get", "bmh", "node-1", "-o", "yaml"],
            None,
        ));
        assert!(
            yaml.contains("credentialsName: node-0-bmc"),
            "{name}: {yaml}"
        );
        ok(&kubectl_at(
            &kubectl,
            &server,
            &["delete", "bmh", "node-1"],
            None,
        ));
        let names = ok(&kubectl_at(
            &kubectl,
            &server,
            &["get", "bmh", "-o", "name"],
            None,
        ));
        assert_eq!(names.trim(), "baremetalhost.metal3.io/node-0", "{name}");
    }
}

/// The discovery URLs (`/api`, `/apis`, `/api/v1`, `/apis/G/V`) a kubectl command fetched, from its
/// `-v=6` log (both the 1.27 and the 1.30+ log formats name each response's URL).
fn discovery_urls(log: &str) -> std::collections::BTreeSet<String> {
    log.lines()
        .filter(|l| l.contains("GET") && (l.contains("Response") || l.contains(" OK in ")))
        .filter_map(|l| {
            let url = &l[l.find("https://")?..];
            let end = url.find(['?', '"', ' ']).unwrap_or(url.len());
            let path = url[8..end].split_once('/').map(|(_, p)| format!("/{p}"))?;
            (path.split('/').filter(|s| !s.is_empty()).count() <= 3).then_some(path)
        })
        .collect()
}

#[test]
fn kubectl_discovers_every_group_in_two_requests() {
    // client-go asks for aggregated discovery first (v2 from 1.30, v2beta1 before): the answers to
    // /api and /apis carry every group's resources, so no group version is fetched on its own.
    let mut binaries = vec![PathBuf::from("kubectl")];
    binaries.extend(other_kubectls());
    for kubectl in binaries {
        let server = start();
        let name = kubectl.display().to_string();
        ok(&kubectl_at(
            &kubectl,
            &server,
            &["apply", "-f", "-"],
            Some(HOSTS),
        ));
        // A fresh discovery cache: HOME is the server's directory, so use another one.
        let home = tempfile::tempdir().unwrap();
        let out = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&server.kubeconfig)
            .args(["get", "bmh", "-v=6"])
            .env("HOME", home.path())
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("node-0"),
            "{name}: {log}"
        );
        let urls = discovery_urls(&log);
        assert_eq!(
            urls.into_iter().collect::<Vec<_>>(),
            vec!["/api".to_owned(), "/apis".to_owned()],
            "{name} fetched more than the aggregated documents:\n{log}"
        );
    }
}

const GADGETS_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

#[test]
fn a_new_definition_shows_in_aggregated_discovery_at_once() {
    // The server keeps the aggregated documents between requests: a CRD must rebuild them.
    let server = start();
    ok(&kubectl(&server, &["get", "bmh"], None));
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(GADGETS_CRD)));
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .args(["get", "gadgets", "-A", "-v=6"])
        .env("HOME", home.path())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_eq!(
        discovery_urls(&log).into_iter().collect::<Vec<_>>(),
        vec!["/api".to_owned(), "/apis".to_owned()],
        "{log}"
    );
    ok(&kubectl(
        &server,
        &["delete", "crd", "gadgets.example.com"],
        None,
    ));
    let out = kubectl(
        &server,
        &[
            "get",
            "gadgets",
            "-A",
            "--cache-dir",
            &home.path().join("fresh").display().to_string(),
        ],
        None,
    );
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr)
                .contains("the server doesn't have a resource type"),
        "a deleted definition is still discovered: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
