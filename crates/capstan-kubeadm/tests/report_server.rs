//! The bootstrap report endpoint over real HTTP (curl, as the node's step runner sends), against
//! an in-process capstan API server: what it refuses, and why.
//!
//! Every wait polls with a deadline; no controller runs, so each object is exactly what the test
//! made.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_apiserver::{ApiServer, in_process_client};
use capstan_kubeadm::report;
use capstan_model::kubeadm::v1beta2::KubeadmConfig;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;

mod support;

use support::{api_server, serve_reports};

const NS: &str = "default";

struct Env {
    _dir: tempfile::TempDir,
    server: ApiServer,
    client: Client,
    /// Base URL of a report server on the API above.
    url: String,
}

impl Env {
    async fn start() -> Self {
        let (dir, server) = api_server().await;
        let client = in_process_client(server.router());
        let url = serve_reports(&server).await;
        Self {
            _dir: dir,
            server,
            client,
            url,
        }
    }

    async fn config(&self, name: &str) -> KubeadmConfig {
        let config: KubeadmConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmConfig",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"format": "cloud-config"},
        }))
        .unwrap();
        Api::<KubeadmConfig>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &config)
            .await
            .unwrap()
    }

    /// A Secret `name` with `token`, owned by `owner` when given.
    async fn token_secret(&self, name: &str, token: &str, owner: Option<&KubeadmConfig>) {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(NS.to_owned()),
                owner_references: owner.map(|config| {
                    vec![OwnerReference {
                        api_version: "bootstrap.cluster.x-k8s.io/v1beta2".into(),
                        kind: "KubeadmConfig".into(),
                        name: config.name_any(),
                        uid: config.uid().unwrap(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]
                }),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                report::TOKEN_KEY.to_owned(),
                ByteString(token.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    async fn configmap(&self, name: &str) -> Option<ConfigMap> {
        Api::<ConfigMap>::namespaced(self.client.clone(), NS)
            .get_opt(name)
            .await
            .unwrap()
    }
}

/// POSTs a report to `path` (under `base`, sent as is: no dot-segment or escape normalisation):
/// `(status, body)`.
async fn post(base: &str, path: &str, token: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut curl = std::process::Command::new("curl");
    curl.args(["-s", "--path-as-is", "-w", "\n%{http_code}", "-X", "POST"])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["-H", "Content-Type: text/plain"]);
    for (name, value) in headers {
        curl.args(["-H", &format!("{name}: {value}")]);
    }
    curl.args(["--data-binary", "output"])
        .arg(format!("{base}{path}"));
    // curl blocks: off the runtime's threads, which serve the request.
    let out = tokio::task::spawn_blocking(move || curl.output())
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.parse().unwrap(), body.to_owned())
}

fn steps_path(namespace: &str, name: &str) -> String {
    format!("/bootstrap/v1/namespaces/{namespace}/kubeadmconfigs/{name}/steps")
}

/// The headers of step `step` of 2 in `state`.
fn step(step: &'static str, state: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("X-Capstan-Step", step),
        ("X-Capstan-Steps", "2"),
        ("X-Capstan-State", state),
        ("X-Capstan-Exit-Code", "0"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_paths_must_be_kubernetes_names() {
    let env = Env::start().await;
    // A namespace admin's own Secret and ConfigMap `victim`: `victim%3F` must not reach them
    // (`…/secrets/victim?-bootstrap-report` would read the Secret and patch the ConfigMap).
    let token = "admin-made-token-0123456789";
    env.config("victim").await;
    env.token_secret("victim", token, None).await;
    Api::<ConfigMap>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("victim".into()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([("kept".into(), "as is".into())])),
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    for (path, rule) in [
        (steps_path(NS, "victim%3F"), "DNS-1123 subdomain"),
        (steps_path(NS, "victim%3Fx%3D"), "DNS-1123 subdomain"),
        (
            steps_path("default%2Fsecrets%2Fvictim%3F", "x"),
            "DNS-1123 label",
        ),
        (steps_path("kube-system%2F..", "victim"), "DNS-1123 label"),
        (steps_path(NS, "Victim"), "DNS-1123 subdomain"),
        (steps_path(NS, "victim..x"), "DNS-1123 subdomain"),
        (steps_path(&"n".repeat(64), "victim"), "DNS-1123 label"),
    ] {
        let (status, body) = post(&env.url, &path, token, &step("1", "started")).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains(rule), "{path}: {body}");
        assert!(!body.contains(token), "{path}: {body}");
    }
    let victim = env.configmap("victim").await.unwrap();
    assert_eq!(
        victim.data.unwrap(),
        BTreeMap::from([("kept".to_owned(), "as is".to_owned())]),
        "the ConfigMap is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_needs_the_config_and_the_token_secret_it_owns() {
    let env = Env::start().await;
    // No KubeadmConfig `ghost`: a Secret named like its token Secret does not make one.
    let token = "ghost-token-0123456789abcdef";
    env.token_secret(&report::report_object_name("ghost"), token, None)
        .await;
    let (status, body) = post(
        &env.url,
        &steps_path(NS, "ghost"),
        token,
        &step("1", "started"),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains(token), "{body}");

    // A config whose token Secret someone else made (not owned by it) takes no report.
    let orphan = env.config("orphan").await;
    env.token_secret(&report::report_object_name("orphan"), token, None)
        .await;
    let (status, body) = post(
        &env.url,
        &steps_path(NS, "orphan"),
        token,
        &step("1", "started"),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(
        env.configmap(&report::report_object_name("orphan"))
            .await
            .is_none()
    );

    // Owned by another config of the same name, since deleted and made again: still refused.
    let mut stale = orphan.clone();
    stale.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    env.token_secret(&report::report_object_name("stale"), token, Some(&stale))
        .await;
    env.config("stale").await;
    let (status, body) = post(
        &env.url,
        &steps_path(NS, "stale"),
        token,
        &step("1", "started"),
    )
    .await;
    assert_eq!(status, 401, "{body}");

    // The config's own Secret: taken.
    let owned = env.config("owned").await;
    env.token_secret(&report::report_object_name("owned"), token, Some(&owned))
        .await;
    let (status, body) = post(
        &env.url,
        &steps_path(NS, "owned"),
        token,
        &numbered("1", "started", "1"),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    assert!(
        env.configmap(&report::report_object_name("owned"))
            .await
            .is_some_and(|m| m.data.unwrap().contains_key("step-001"))
    );
    let _ = &env.server;
}

/// `step`'s headers with its report number.
fn numbered(
    step_: &'static str,
    state: &'static str,
    sequence: &'static str,
) -> Vec<(&'static str, &'static str)> {
    let mut headers = step(step_, state);
    headers.push(("X-Capstan-Sequence", sequence));
    headers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_are_taken_once_in_order_and_end_with_the_bootstrap() {
    let env = Env::start().await;
    let token = "node-token-0123456789abcdef";
    let config = env.config("cp-0").await;
    env.token_secret(&report::report_object_name("cp-0"), token, Some(&config))
        .await;
    let path = steps_path(NS, "cp-0");
    let send = |url: String, headers: Vec<(&'static str, &'static str)>| {
        let path = path.clone();
        async move {
            let (status, body) = post(&url, &path, token, &headers).await;
            assert!(!body.contains(token), "{body}");
            (status, body)
        }
    };
    assert_eq!(
        send(env.url.clone(), numbered("1", "started", "1")).await.0,
        204
    );
    // The same report again (a replay): refused, saying why.
    let (status, body) = send(env.url.clone(), numbered("1", "started", "1")).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("kubeadmconfig default/cp-0: report 1 already accepted; this is report 1"),
        "{body}"
    );
    assert_eq!(
        send(env.url.clone(), numbered("1", "succeeded", "2"))
            .await
            .0,
        204
    );
    assert_eq!(
        send(env.url.clone(), numbered("2", "started", "3")).await.0,
        204
    );
    // A report of an earlier step, after a later one: out of order.
    let (status, body) = send(env.url.clone(), numbered("1", "failed", "2")).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("report 3 already accepted; this is report 2"),
        "{body}"
    );
    // A number that does not fit its step, or none at all: malformed.
    let (status, body) = send(env.url.clone(), numbered("1", "failed", "9")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("does not fit step 1/2 failed"), "{body}");
    let (status, body) = send(env.url.clone(), step("2", "failed")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("X-Capstan-Sequence is required"), "{body}");
    // What was refused was not stored: step 1 is still the success it reported.
    let reports = env
        .configmap(&report::report_object_name("cp-0"))
        .await
        .unwrap()
        .data
        .unwrap();
    assert!(
        reports["step-001"].contains("\"state\":\"succeeded\""),
        "{reports:?}"
    );

    // The last step's end ends the bootstrap: nothing more is taken, whatever its number.
    assert_eq!(
        send(env.url.clone(), numbered("2", "succeeded", "4"))
            .await
            .0,
        204
    );
    for (headers, what) in [
        (numbered("2", "failed", "4"), "a replay of the last report"),
        (numbered("1", "failed", "2"), "an old report"),
    ] {
        let (status, body) = send(env.url.clone(), headers).await;
        assert_eq!(status, 410, "{what}: {body}");
        assert!(
            body.contains("bootstrap of kubeadmconfig default/cp-0 has ended (its last step's report 4 was taken); reports are closed"),
            "{what}: {body}"
        );
    }
    // Kept in the store, not in the server: another server on the same API (a restart) agrees.
    let restarted = serve_reports(&env.server).await;
    let (status, body) = send(restarted, numbered("2", "failed", "4")).await;
    assert_eq!(status, 410, "{body}");
    let secret = Api::<Secret>::namespaced(env.client.clone(), NS)
        .get(&report::report_object_name("cp-0"))
        .await
        .unwrap();
    assert_eq!(
        secret
            .annotations()
            .get(report::ANNOTATION_LAST_REPORT)
            .map(String::as_str),
        Some("4")
    );
    assert!(report::closed_because(&secret).is_some());
    assert!(
        !format!("{:?}", secret.metadata).contains(token),
        "the token stays in data"
    );
}
