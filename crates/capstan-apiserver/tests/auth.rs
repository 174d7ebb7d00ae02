//! Authentication and authorization as kube-apiserver does them, driven with real kubectl and at
//! HTTP level: bootstrap tokens, ServiceAccount tokens, client certificates, RBAC with the default
//! roles, `kubectl auth can-i` and `kubectl auth whoami`, and the 401 / 403 answers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::raw::request_as;
use support::{
    Server, anonymous_kubeconfig, kubectl, kubectl_at, ok, start, start_without_anonymous,
};

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

fn kubectl_as(server: &Server, token: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--token", token];
    all.extend_from_slice(args);
    kubectl(server, &all, None)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Creates ServiceAccount `name` in `namespace` bound to ClusterRole `role` there, and a token.
fn service_account_with_role(server: &Server, namespace: &str, name: &str, role: &str) -> String {
    ok(&kubectl(
        server,
        &["-n", namespace, "create", "serviceaccount", name],
        None,
    ));
    ok(&kubectl(
        server,
        &[
            "-n",
            namespace,
            "create",
            "rolebinding",
            &format!("{name}-{role}"),
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={namespace}:{name}"),
        ],
        None,
    ));
    ok(&kubectl(
        server,
        &["-n", namespace, "create", "token", name],
        None,
    ))
    .trim()
    .to_owned()
}

#[test]
fn rbac_view_and_namespace_admin_are_enforced_with_kube_apiservers_messages() {
    let server = start();
    for ns in ["team-a", "team-b"] {
        ok(&kubectl(&server, &["create", "namespace", ns], None));
        ok(&kubectl(
            &server,
            &[
                "-n",
                ns,
                "create",
                "configmap",
                "settings",
                "--from-literal=a=1",
            ],
            None,
        ));
        ok(&kubectl(
            &server,
            &[
                "-n",
                ns,
                "create",
                "secret",
                "generic",
                "creds",
                "--from-literal=p=x",
            ],
            None,
        ));
    }
    let viewer = service_account_with_role(&server, "team-a", "viewer", "view");
    let boss = service_account_with_role(&server, "team-a", "boss", "admin");

    // The viewer reads what `view` has in its namespace…
    let listed = ok(&kubectl_as(
        &server,
        &viewer,
        &["-n", "team-a", "get", "configmaps", "-o", "name"],
    ));
    assert!(listed.contains("configmap/settings"), "{listed}");
    // …but not Secrets, not writes, not another namespace: 403 with kube-apiserver's words.
    let secrets = kubectl_as(&server, &viewer, &["-n", "team-a", "get", "secrets"]);
    assert!(!secrets.status.success());
    assert!(
        stderr(&secrets).contains(
            r#"Error from server (Forbidden): secrets is forbidden: User "system:serviceaccount:team-a:viewer" cannot list resource "secrets" in API group "" in the namespace "team-a""#
        ),
        "{}",
        stderr(&secrets)
    );
    let secret = kubectl_as(
        &server,
        &viewer,
        &["-n", "team-a", "get", "secret", "creds"],
    );
    assert!(
        stderr(&secret).contains(r#"secrets "creds" is forbidden: User "system:serviceaccount:team-a:viewer" cannot get resource "secrets""#),
        "{}",
        stderr(&secret)
    );
    let write = kubectl_as(
        &server,
        &viewer,
        &["-n", "team-a", "create", "configmap", "new"],
    );
    assert!(
        stderr(&write).contains(
            r#"cannot create resource "configmaps" in API group "" in the namespace "team-a""#
        ),
        "{}",
        stderr(&write)
    );
    let other = kubectl_as(&server, &viewer, &["-n", "team-b", "get", "configmaps"]);
    assert!(
        stderr(&other).contains(r#"in the namespace "team-b""#),
        "{}",
        stderr(&other)
    );
    let cluster = kubectl_as(&server, &viewer, &["get", "namespaces"]);
    assert!(
        stderr(&cluster)
            .contains(r#"cannot list resource "namespaces" in API group "" at the cluster scope"#),
        "{}",
        stderr(&cluster)
    );

    // The namespace admin writes Secrets and RBAC in its namespace, and nothing in the other.
    ok(&kubectl_as(
        &server,
        &boss,
        &[
            "-n",
            "team-a",
            "create",
            "secret",
            "generic",
            "more",
            "--from-literal=k=v",
        ],
    ));
    ok(&kubectl_as(
        &server,
        &boss,
        &[
            "-n",
            "team-a",
            "create",
            "role",
            "reader",
            "--verb=get",
            "--resource=pods",
        ],
    ));
    ok(&kubectl_as(
        &server,
        &boss,
        &["-n", "team-a", "get", "secret", "creds"],
    ));
    let across = kubectl_as(&server, &boss, &["-n", "team-b", "get", "secret", "creds"]);
    assert!(
        stderr(&across).contains("(Forbidden)"),
        "{}",
        stderr(&across)
    );
    let across = kubectl_as(
        &server,
        &boss,
        &["-n", "team-b", "delete", "configmap", "settings"],
    );
    assert!(
        stderr(&across).contains("(Forbidden)"),
        "{}",
        stderr(&across)
    );
    ok(&kubectl(
        &server,
        &["-n", "team-b", "get", "configmap", "settings"],
        None,
    ));

    // …and may grant in it only what it holds itself: no escalation through RBAC writes.
    let escalate = kubectl_as(
        &server,
        &boss,
        &[
            "-n",
            "team-a",
            "create",
            "rolebinding",
            "grab",
            "--clusterrole=cluster-admin",
            "--serviceaccount=team-a:boss",
        ],
    );
    assert!(
        stderr(&escalate).contains(r#"rolebindings.rbac.authorization.k8s.io "grab" is forbidden: user "system:serviceaccount:team-a:boss""#)
            && stderr(&escalate).contains("is attempting to grant RBAC permissions not currently held"),
        "{}",
        stderr(&escalate)
    );
    let nodes = kubectl_as(
        &server,
        &boss,
        &[
            "-n",
            "team-a",
            "create",
            "role",
            "nodes",
            "--verb=get",
            "--resource=nodes",
        ],
    );
    assert!(
        stderr(&nodes).contains("attempting to grant RBAC permissions not currently held"),
        "{}",
        stderr(&nodes)
    );
    ok(&kubectl_as(
        &server,
        &boss,
        &[
            "-n",
            "team-a",
            "create",
            "rolebinding",
            "viewers",
            "--clusterrole=view",
            "--group=team-a-viewers",
        ],
    ));

    // `kubectl auth can-i` answers from the same policy, for oneself and (as admin) for others.
    let can = |token: &str, args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let out = kubectl_as(&server, token, &all);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(can(&viewer, &["list", "pods", "-n", "team-a"]), "yes");
    assert_eq!(can(&viewer, &["get", "secrets", "-n", "team-a"]), "no");
    assert_eq!(
        can(&boss, &["create", "rolebindings", "-n", "team-a"]),
        "yes"
    );
    assert_eq!(
        can(&boss, &["create", "rolebindings", "-n", "team-b"]),
        "no"
    );
    assert_eq!(
        can(&boss, &["create", "serviceaccounts/token", "-n", "team-a"]),
        "yes"
    );
    assert_eq!(
        can(&boss, &["list", "baremetalhosts.metal3.io", "-n", "team-a"]),
        "yes"
    );
    assert_eq!(can(&server.token, &["delete", "nodes"]), "yes");
    // Impersonation: the admin may act as anyone; the answers are the impersonated user's.
    let as_other = |who: &str, args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let who = format!("--as={who}");
        all.push(&who);
        let out = kubectl(&server, &all, None);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(
        as_other(
            "system:serviceaccount:team-a:boss",
            &["get", "secrets", "-n", "team-a"]
        ),
        "yes"
    );
    assert_eq!(
        as_other(
            "system:serviceaccount:team-a:viewer",
            &["get", "secrets", "-n", "team-a"]
        ),
        "no"
    );
    assert_eq!(
        as_other(
            "system:serviceaccount:team-a:boss",
            &["get", "secrets", "-n", "team-b"]
        ),
        "no"
    );
    // …and a user without the `impersonate` verb may not.
    let refused = kubectl_as(
        &server,
        &viewer,
        &["get", "configmaps", "-n", "team-a", "--as=capstan-admin"],
    );
    assert!(
        stderr(&refused).contains(r#"users "capstan-admin" is forbidden: User "system:serviceaccount:team-a:viewer" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{}",
        stderr(&refused)
    );
    let listed = ok(&kubectl_as(
        &server,
        &viewer,
        &["auth", "can-i", "--list", "-n", "team-a"],
    ));
    assert!(
        listed.contains("configmaps") && !listed.contains("secrets "),
        "{listed}"
    );
    assert!(
        listed.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{listed}"
    );

    // Deleting the ServiceAccount revokes its tokens: 401, not 403.
    ok(&kubectl(
        &server,
        &["-n", "team-a", "delete", "serviceaccount", "viewer"],
        None,
    ));
    let revoked = kubectl_as(&server, &viewer, &["-n", "team-a", "get", "configmaps"]);
    assert!(
        stderr(&revoked).contains("Unauthorized"),
        "{}",
        stderr(&revoked)
    );
}

#[test]
fn whoami_names_every_kind_of_identity() {
    let server = start();
    let admin = ok(&kubectl(&server, &["auth", "whoami", "-o", "json"], None));
    let admin: serde_json::Value = serde_json::from_str(&admin).unwrap();
    assert_eq!(admin["status"]["userInfo"]["username"], "capstan-admin");
    assert_eq!(
        admin["status"]["userInfo"]["groups"],
        serde_json::json!(["system:masters", "system:authenticated"])
    );
    create_bootstrap_secret(
        &server,
        TOKEN_ID,
        TOKEN_SECRET,
        &[
            "usage-bootstrap-authentication=true",
            "auth-extra-groups=system:bootstrappers:kubeadm:default-node-token",
        ],
    );
    let me = ok(&kubectl_as(
        &server,
        &bootstrap_token(),
        &["auth", "whoami"],
    ));
    assert!(me.contains("system:bootstrap:abcdef"), "{me}");
    assert!(
        me.contains("system:bootstrappers:kubeadm:default-node-token"),
        "{me}"
    );
    let sa = service_account_with_role(&server, "default", "robot", "view");
    let me = ok(&kubectl_as(&server, &sa, &["auth", "whoami"]));
    assert!(me.contains("system:serviceaccount:default:robot"), "{me}");
    assert!(me.contains("system:serviceaccounts:default"), "{me}");
}

/// The bindings `kubeadm init` adds, applied with kubectl.
fn apply_kubeadm_init_policy(server: &Server) {
    let objects = capstan_apiserver::authz::kubeadm_init_policy();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
    ok(&kubectl(
        server,
        &["apply", "-f", "-"],
        Some(&list.to_string()),
    ));
}

#[test]
fn a_bootstrap_token_may_request_a_node_certificate_and_nothing_more() {
    let server = start();
    create_bootstrap_secret(
        &server,
        TOKEN_ID,
        TOKEN_SECRET,
        &[
            "usage-bootstrap-authentication=true",
            "auth-extra-groups=system:bootstrappers:kubeadm:default-node-token",
        ],
    );
    let token = bootstrap_token();
    let csr = r#"{"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "node-csr-1"},
        "spec": {"request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg==",
                 "signerName": "kubernetes.io/kube-apiserver-client-kubelet", "usages": ["client auth"]}}"#;
    // Before kubeadm's bindings: no CSR rights.
    let before = kubectl(
        &server,
        &["--token", &token, "create", "-f", "-"],
        Some(csr),
    );
    assert!(
        String::from_utf8_lossy(&before.stderr).contains(
            r#"User "system:bootstrap:abcdef" cannot create resource "certificatesigningrequests" in API group "certificates.k8s.io" at the cluster scope"#
        ),
        "{before:?}"
    );
    apply_kubeadm_init_policy(&server);
    let created = ok(&kubectl(
        &server,
        &["--token", &token, "create", "-f", "-"],
        Some(csr),
    ));
    assert!(created.contains("node-csr-1 created"), "{created}");
    ok(&kubectl_as(&server, &token, &["get", "csr", "node-csr-1"]));
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        String::from_utf8_lossy(&kubectl_as(&server, &token, &all).stdout)
            .trim()
            .to_owned()
    };
    assert_eq!(can(&["create", "certificatesigningrequests"]), "yes");
    assert_eq!(
        can(&["create", "certificatesigningrequests/nodeclient"]),
        "yes"
    );
    assert_eq!(can(&["get", "nodes"]), "yes");
    assert_eq!(can(&["delete", "nodes"]), "no");
    assert_eq!(can(&["list", "secrets", "-n", "kube-system"]), "no");
    let secrets = kubectl_as(&server, &token, &["-n", "kube-system", "get", "secrets"]);
    assert!(
        String::from_utf8_lossy(&secrets.stderr).contains("(Forbidden)"),
        "{secrets:?}"
    );
}

#[test]
fn client_certificates_name_the_user_and_groups_rbac_then_applies() {
    let server = start();
    ok(&kubectl(&server, &["create", "namespace", "team-a"], None));
    let (cert, key) = capstan_apiserver::tls::issue_client_certificate(
        &server.dir.path().join("pki"),
        "alice",
        &["team-a-devs".to_owned()],
        30,
    )
    .unwrap();
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let config = capstan_apiserver::tls::certificate_kubeconfig(
        &server.url,
        &ca,
        "alice",
        &cert,
        &key,
        "team-a",
    );
    let path = server.dir.path().join("alice.kubeconfig");
    std::fs::write(&path, config).unwrap();
    let as_alice = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", path.to_str().unwrap()];
        all.extend_from_slice(args);
        std::process::Command::new("kubectl")
            .args(&all)
            .env("HOME", server.dir.path())
            .output()
            .unwrap()
    };
    let me = ok(&as_alice(&["auth", "whoami"]));
    assert!(me.contains("alice") && me.contains("team-a-devs"), "{me}");
    let denied = as_alice(&["get", "configmaps"]);
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains(
            r#"User "alice" cannot list resource "configmaps" in API group "" in the namespace "team-a""#
        ),
        "{denied:?}"
    );
    // A RoleBinding to her group gives her `edit` in team-a, and only there.
    ok(&kubectl(
        &server,
        &[
            "-n",
            "team-a",
            "create",
            "rolebinding",
            "devs-edit",
            "--clusterrole=edit",
            "--group=team-a-devs",
        ],
        None,
    ));
    ok(&as_alice(&[
        "create",
        "configmap",
        "mine",
        "--from-literal=a=b",
    ]));
    ok(&as_alice(&["get", "configmap", "mine"]));
    let elsewhere = as_alice(&["-n", "default", "get", "configmaps"]);
    assert!(
        String::from_utf8_lossy(&elsewhere.stderr).contains("(Forbidden)"),
        "{elsewhere:?}"
    );
}

#[test]
fn older_kubectl_versions_ask_can_i_and_whoami() {
    let server = start();
    let viewer = service_account_with_role(&server, "default", "viewer", "view");
    for version in ["1.27", "1.31"] {
        let binary =
            std::path::PathBuf::from(format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}"));
        assert!(
            binary.exists(),
            "kubectl {version} is missing at {binary:?}"
        );
        let run = |args: &[&str]| {
            let mut all = vec!["--token", viewer.as_str()];
            all.extend_from_slice(args);
            support::kubectl_at(&binary, &server, &all, None)
        };
        let yes = run(&["auth", "can-i", "list", "pods"]);
        assert_eq!(
            String::from_utf8_lossy(&yes.stdout).trim(),
            "yes",
            "{version}: {yes:?}"
        );
        let no = run(&["auth", "can-i", "get", "secrets"]);
        assert_eq!(
            String::from_utf8_lossy(&no.stdout).trim(),
            "no",
            "{version}: {no:?}"
        );
        let me = run(&["auth", "whoami"]);
        assert!(
            String::from_utf8_lossy(&me.stdout).contains("system:serviceaccount:default:viewer"),
            "{version}: {me:?}"
        );
        let denied = run(&["get", "secrets"]);
        assert!(
            String::from_utf8_lossy(&denied.stderr).contains(
                r#"secrets is forbidden: User "system:serviceaccount:default:viewer" cannot list resource "secrets""#
            ),
            "{version}: {denied:?}"
        );
    }
}

#[test]
fn the_controllers_role_covers_capstans_kinds_and_what_the_collector_needs() {
    let server = start();
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i", "--as=capstan:controllers"];
        all.extend_from_slice(args);
        String::from_utf8_lossy(&kubectl(&server, &all, None).stdout)
            .trim()
            .to_owned()
    };
    for (args, expected) in [
        (&["patch", "baremetalhosts.metal3.io", "-A"][..], "yes"),
        (
            &["update", "machines.cluster.x-k8s.io/status", "-A"][..],
            "yes",
        ),
        (
            &[
                "create",
                "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
                "-n",
                "x",
            ][..],
            "yes",
        ),
        (&["get", "secrets", "-A"][..], "yes"),
        (&["create", "events.events.k8s.io", "-n", "x"][..], "yes"),
        (
            &["update", "leases.coordination.k8s.io", "-n", "kube-system"][..],
            "yes",
        ),
        (&["create", "clusterrolebindings"][..], "no"),
        (&["create", "customresourcedefinitions"][..], "no"),
        (&["create", "pods", "-n", "x"][..], "no"),
        (&["create", "namespaces"][..], "no"),
        (&["update", "roles", "-n", "x"][..], "yes"),
        (&["escalate", "roles", "-n", "x"][..], "no"),
        // The garbage collector acts on every kind (owner references are on any object).
        (&["list", "deployments.apps", "-A"][..], "yes"),
        (&["delete", "deployments.apps", "-n", "x"][..], "yes"),
        (&["patch", "nodes"][..], "yes"),
    ] {
        assert_eq!(can(args), expected, "{args:?}");
    }
}

fn post_as(
    server: &Server,
    token: &str,
    path: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let (code, text) = request_as(
        server,
        Some(token),
        "POST",
        path,
        "application/json",
        body.to_string().as_bytes(),
    );
    (
        code,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn token_and_subject_access_reviews_answer_at_http_level() {
    let server = start();
    let viewer = service_account_with_role(&server, "default", "viewer", "view");
    // TokenReview: the admin (system:auth-delegator's rights) learns who a token is.
    let (code, review) = post_as(
        &server,
        &server.token,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": viewer}}),
    );
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["authenticated"], true);
    assert_eq!(
        review["status"]["user"]["username"],
        "system:serviceaccount:default:viewer"
    );
    assert!(
        review["spec"].get("token").is_none(),
        "the token is not echoed: {review}"
    );
    let (_, review) = post_as(
        &server,
        &server.token,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        serde_json::json!({"spec": {"token": "abcdef.0000000000000000"}}),
    );
    assert_eq!(review["status"]["authenticated"], false, "{review}");
    // The viewer may not review tokens: 403 with the resource named.
    let (code, status) = post_as(
        &server,
        &viewer,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        serde_json::json!({"spec": {"token": "x"}}),
    );
    assert_eq!(code, 403, "{status}");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(status["details"]["kind"], "tokenreviews");
    assert_eq!(status["details"]["group"], "authentication.k8s.io");
    // SubjectAccessReview for someone else, and LocalSubjectAccessReview in a namespace.
    let sar = |path: &str, spec: serde_json::Value| {
        let (code, review) = post_as(
            &server,
            &server.token,
            path,
            serde_json::json!({"spec": spec}),
        );
        assert_eq!(code, 201, "{review}");
        review["status"]["allowed"].as_bool().unwrap()
    };
    let viewer_user = "system:serviceaccount:default:viewer";
    assert!(sar(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        serde_json::json!({"user": viewer_user, "groups": ["system:serviceaccounts"], "resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"}})
    ));
    assert!(!sar(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        serde_json::json!({"user": viewer_user, "resourceAttributes": {"namespace": "default", "verb": "list", "resource": "secrets"}})
    ));
    assert!(sar(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        serde_json::json!({"user": "someone", "groups": ["system:authenticated"], "nonResourceAttributes": {"path": "/apis/apps/v1", "verb": "get"}})
    ));
    assert!(sar(
        "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews",
        serde_json::json!({"user": viewer_user, "resourceAttributes": {"verb": "get", "resource": "configmaps"}})
    ));
    let (code, _) = post_as(
        &server,
        &server.token,
        "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews",
        serde_json::json!({"spec": {"user": viewer_user, "resourceAttributes": {"namespace": "other", "verb": "get", "resource": "configmaps"}}}),
    );
    assert_eq!(code, 422);
    // A binding to a missing role says so in the denial.
    ok(&kubectl(
        &server,
        &[
            "create",
            "rolebinding",
            "ghost",
            "--clusterrole=does-not-exist",
            &format!("--user={viewer_user}"),
        ],
        None,
    ));
    let (code, status) = post_as(
        &server,
        &viewer,
        "/api/v1/namespaces/default/secrets",
        serde_json::json!({}),
    );
    assert_eq!(code, 403);
    assert!(
        status["message"].as_str().unwrap().ends_with(
            r#": RBAC: clusterrole.rbac.authorization.k8s.io "does-not-exist" not found"#
        ),
        "{status}"
    );
    // The review groups are discoverable.
    let resources = ok(&kubectl(
        &server,
        &[
            "api-resources",
            "--api-group=authorization.k8s.io",
            "-o",
            "name",
        ],
        None,
    ));
    assert!(
        resources.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{resources}"
    );
}

fn anonymous_kubectl(server: &Server, args: &[&str]) -> std::process::Output {
    let config = anonymous_kubeconfig(server);
    let mut all = vec!["--kubeconfig", config.to_str().unwrap()];
    all.extend_from_slice(args);
    // `kubectl_at` passes the admin kubeconfig first; the later flag wins.
    kubectl_at(std::path::Path::new("kubectl"), server, &all, None)
}

fn get_anonymously(server: &Server, path: &str) -> (u16, String) {
    request_as(server, None, "GET", path, "application/json", b"")
}

/// Without credentials a request is user `system:anonymous` in `system:unauthenticated`, and RBAC
/// decides: the public-info endpoints are readable, everything else is `403` naming the user (not
/// `401`), until a binding grants more. A bearer token that fails is still `401`.
#[test]
fn anonymous_requests_are_decided_by_rbac() {
    let server = start();
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        let (code, body) = get_anonymously(&server, path);
        assert_eq!(code, 200, "{path}: {body}");
    }
    let (code, body) = get_anonymously(&server, "/api/v1/namespaces/default/pods");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""#),
        "{body}"
    );
    assert!(body.contains(r#""reason":"Forbidden""#), "{body}");
    // Discovery is for authenticated users only (`system:discovery`).
    let (code, body) = get_anonymously(&server, "/apis");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"forbidden: User \"system:anonymous\" cannot get path \"/apis\""#),
        "{body}"
    );
    // A credential that fails is refused, not served anonymously.
    let (code, body) = get_as(&server, "not-a-token", "/healthz");
    assert_eq!(code, 401, "{body}");

    // kubectl without credentials gets what kube-apiserver answers.
    let health = anonymous_kubectl(&server, &["get", "--raw", "/healthz"]);
    assert_eq!(ok(&health), "ok");
    let version = anonymous_kubectl(&server, &["version", "-o", "json"]);
    assert!(ok(&version).contains("serverVersion"));
    // Discovery is refused first, so kubectl prints what it prints against kube-apiserver.
    let denied = anonymous_kubectl(&server, &["get", "secrets", "-n", "default"]);
    assert!(!denied.status.success());
    assert!(
        stderr(&denied).contains("Error from server (Forbidden)"),
        "{}",
        stderr(&denied)
    );
    let whoami = anonymous_kubectl(&server, &["auth", "whoami"]);
    assert!(!whoami.status.success());

    // Granting the unauthenticated group roles lets anonymous requests do what they allow.
    for role in ["view", "system:discovery"] {
        ok(&kubectl(
            &server,
            &[
                "create",
                "clusterrolebinding",
                &format!("anonymous-{}", role.replace(':', "-")),
                &format!("--clusterrole={role}"),
                "--group=system:unauthenticated",
            ],
            None,
        ));
    }
    ok(&kubectl(
        &server,
        &[
            "-n",
            "default",
            "create",
            "configmap",
            "shown",
            "--from-literal=a=b",
        ],
        None,
    ));
    let listed = anonymous_kubectl(
        &server,
        &["-n", "default", "get", "configmaps", "-o", "name"],
    );
    assert!(ok(&listed).contains("configmap/shown"));
    let write = anonymous_kubectl(
        &server,
        &[
            "-n",
            "default",
            "create",
            "configmap",
            "mine",
            "--from-literal=a=b",
        ],
    );
    assert!(
        stderr(&write).contains(r#"User "system:anonymous" cannot create resource "configmaps""#),
        "{}",
        stderr(&write)
    );
}

/// With anonymous access off (`--anonymous-auth=false`) a request without credentials is `401`,
/// the public-info endpoints included, and kubectl says it must log in.
#[test]
fn anonymous_access_can_be_turned_off() {
    let server = start_without_anonymous();
    for path in [
        "/healthz",
        "/version",
        "/api/v1/namespaces/default/pods",
        "/apis",
    ] {
        let (code, body) = get_anonymously(&server, path);
        assert_eq!(code, 401, "{path}: {body}");
        assert!(body.contains(r#""reason":"Unauthorized""#), "{body}");
    }
    let denied = anonymous_kubectl(&server, &["get", "pods"]);
    assert!(!denied.status.success());
    assert!(
        stderr(&denied).contains("error: You must be logged in to the server"),
        "{}",
        stderr(&denied)
    );
    // Credentials work as before.
    let (code, body) = get_as(&server, &server.token, "/healthz");
    assert_eq!(code, 200, "{body}");
    ok(&kubectl(&server, &["get", "pods"], None));
}
