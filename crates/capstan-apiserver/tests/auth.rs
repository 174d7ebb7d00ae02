//! Authentication and authorization as kube-apiserver does them, driven with real kubectl and at
//! HTTP level: bootstrap tokens, ServiceAccount tokens, client certificates, RBAC with the default
//! roles, `kubectl auth can-i` and `kubectl auth whoami`, and the 401 / 403 answers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::raw::request_as;
use support::{Server, kubectl, ok, start};

const TOKEN_ID: &str = "abcdef";
const TOKEN_SECRET: &str = "0123456789abcdef";

fn bootstrap_token() -> String {
    format!("{TOKEN_ID}.{TOKEN_SECRET}")
}

/// Creates the bootstrap token Secret with kubectl, with `extra` literals.
fn create_bootstrap_secret(server: &Server, id: &str, secret: &str, extra: &[&str]) {
    let name = format!("bootstrap-token-{id}");
    let mut args = vec![
        "-n".to_owned(),
        "kube-system".to_owned(),
        "create".to_owned(),
        "secret".to_owned(),
        "generic".to_owned(),
        name,
        "--type=bootstrap.kubernetes.io/token".to_owned(),
        format!("--from-literal=token-id={id}"),
        format!("--from-literal=token-secret={secret}"),
    ];
    args.extend(extra.iter().map(|e| format!("--from-literal={e}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&kubectl(server, &args, None));
}

fn get_as(server: &Server, token: &str, path: &str) -> (u16, String) {
    request_as(server, Some(token), "GET", path, "application/json", b"")
}

#[test]
fn bootstrap_tokens_authenticate_while_their_secret_allows_it() {
    let server = start();
    let path = "/api/v1/namespaces/kube-system/secrets";
    // No Secret yet: the well-formed token is refused.
    let (code, body) = get_as(&server, &bootstrap_token(), path);
    assert_eq!(code, 401, "{body}");
    assert!(body.contains(r#""reason":"Unauthorized""#), "{body}");

    create_bootstrap_secret(
        &server,
        TOKEN_ID,
        TOKEN_SECRET,
        &[
            "usage-bootstrap-authentication=true",
            "usage-bootstrap-signing=true",
            "auth-extra-groups=system:bootstrappers:kubeadm:default-node-token",
        ],
    );
    // kubectl with the token is let in (discovery is open to every authenticated user).
    let out = kubectl(
        &server,
        &["--token", &bootstrap_token(), "get", "--raw", "/api"],
        None,
    );
    let api = ok(&out);
    assert!(api.contains("APIVersions"), "{api}");
    // The wrong secret for an existing id: 401, and kubectl says so.
    let wrong = kubectl(
        &server,
        &["--token", "abcdef.0123456789abcdee", "get", "--raw", "/api"],
        None,
    );
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("Unauthorized"), "{stderr}");

    // Expired, not for authentication, a forbidden extra group, the wrong type: all 401.
    create_bootstrap_secret(
        &server,
        "expird",
        TOKEN_SECRET,
        &[
            "usage-bootstrap-authentication=true",
            "expiration=2020-01-01T00:00:00Z",
        ],
    );
    create_bootstrap_secret(
        &server,
        "signon",
        TOKEN_SECRET,
        &["usage-bootstrap-signing=true"],
    );
    create_bootstrap_secret(
        &server,
        "master",
        TOKEN_SECRET,
        &[
            "usage-bootstrap-authentication=true",
            "auth-extra-groups=system:masters",
        ],
    );
    ok(&kubectl(
        &server,
        &[
            "-n",
            "kube-system",
            "create",
            "secret",
            "generic",
            "bootstrap-token-opaque",
            "--from-literal=token-id=opaque",
            &format!("--from-literal=token-secret={TOKEN_SECRET}"),
            "--from-literal=usage-bootstrap-authentication=true",
        ],
        None,
    ));
    for id in ["expird", "signon", "master", "opaque"] {
        let (code, body) = get_as(&server, &format!("{id}.{TOKEN_SECRET}"), "/api");
        assert_eq!(code, 401, "{id}: {body}");
    }
    // A later expiration is fine until then.
    create_bootstrap_secret(
        &server,
        "later1",
        TOKEN_SECRET,
        &[
            "usage-bootstrap-authentication=true",
            "expiration=2099-01-01T00:00:00Z",
        ],
    );
    let (code, body) = get_as(&server, &format!("later1.{TOKEN_SECRET}"), "/api");
    assert_eq!(code, 200, "{body}");

    // Deleting the Secret revokes the token.
    ok(&kubectl(
        &server,
        &[
            "-n",
            "kube-system",
            "delete",
            "secret",
            "bootstrap-token-abcdef",
        ],
        None,
    ));
    let (code, _) = get_as(&server, &bootstrap_token(), "/api");
    assert_eq!(code, 401);
}
