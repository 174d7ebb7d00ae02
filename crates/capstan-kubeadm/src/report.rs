//! Bootstrap reports: each step of a node's bootstrap tells capstan how it went, so a failed
//! `kubeadm join` or a broken preKubeadmCommand shows on the Machine instead of in a console log
//! nobody can reach.
//!
//! Protocol (what [`crate::cloudinit::step_runner`] sends):
//!
//! ```text
//! POST {base}/bootstrap/v1/namespaces/{namespace}/kubeadmconfigs/{name}/steps
//! Authorization: Bearer {token}          the per-config token (Secret `{name}-bootstrap-report`)
//! X-Capstan-Step: 2                      1-based index of the runcmd entry
//! X-Capstan-Steps: 4                     how many entries runcmd has
//! X-Capstan-State: started|succeeded|failed
//! X-Capstan-Exit-Code: 1
//! X-Capstan-Command: base64(command)
//! body: the last lines of the command's output (failed steps), text
//! ```
//!
//! Answers: `204` stored, `400` malformed, `401` wrong or missing token (the same answer for a config
//! that does not exist, so names cannot be probed), `413` body too large.
//!
//! The server stores each step, with secrets redacted ([`redact`]), in the ConfigMap
//! `{name}-bootstrap-report` (key `step-NNN`, JSON [`StepReport`]), owned by the KubeadmConfig. The
//! bootstrap controller is the only writer of KubeadmConfig status: it folds the steps into the
//! `BootstrapSucceeded` condition ([`summarize`]). The token is compared in constant time and never
//! logged, stored in a report or shown in a condition.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine;
use capstan_model::kubeadm::v1beta2::KubeadmConfig;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// The path prefix the report server answers under.
pub const PATH_PREFIX: &str = "/bootstrap/v1";
/// Key of the token in `{config}-bootstrap-report` Secrets.
pub const TOKEN_KEY: &str = "token";
/// The condition reports are folded into.
pub const CONDITION: &str = "BootstrapSucceeded";
/// Reason while steps are still running.
pub const REASON_IN_PROGRESS: &str = "BootstrapInProgress";
/// Reason when a step failed.
pub const REASON_FAILED: &str = "BootstrapCommandFailed";
/// Reason when every step succeeded.
pub const REASON_SUCCEEDED: &str = "BootstrapSucceeded";
/// Largest report body accepted.
pub const MAX_BODY: usize = 16 * 1024;

/// Label on every report ConfigMap (its value: the KubeadmConfig's name). Readers follow the
/// ConfigMaps with this label only, not every ConfigMap of the management cluster.
pub const REPORT_LABEL: &str = "bootstrap.capstan.io/report";

/// The name of the Secret holding a config's report token (and of the ConfigMap of its reports).
pub fn report_object_name(config: &str) -> String {
    format!("{config}-bootstrap-report")
}

/// The URL a config's node POSTs its steps to, under the server's `base` URL.
pub fn steps_url(base: &str, namespace: &str, config: &str) -> String {
    format!(
        "{}{PATH_PREFIX}/namespaces/{namespace}/kubeadmconfigs/{config}/steps",
        base.trim_end_matches('/')
    )
}

/// A new random report token (32 alphanumeric characters).
pub fn new_token() -> String {
    use rand::Rng;
    use rand::distr::Alphanumeric;
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

/// One reported step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    pub step: u32,
    pub steps: u32,
    pub state: String,
    pub exit_code: i32,
    /// The command, secrets redacted.
    pub command: String,
    /// The last lines of output of a failed step, secrets redacted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// When capstan received it (RFC 3339).
    pub at: String,
}

static REDACTIONS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        // PEM private keys.
        (
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)",
            "<redacted private key>",
        ),
        // Bootstrap tokens.
        (r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b", "<redacted token>"),
        // Flags and settings that carry secrets.
        (
            r"(?i)(--(?:token|discovery-token|tls-bootstrap-token|certificate-key|password)[= ])\S+",
            "${1}<redacted>",
        ),
        (
            r#"(?i)\b((?:password|passwd|secret|token|certificateKey|certificate-key)["']?\s*[:=]\s*)["']?[^\s"',]+"#,
            "${1}<redacted>",
        ),
        // Bearer credentials.
        (r"(?i)(bearer\s+)\S+", "${1}<redacted>"),
    ]
    .into_iter()
    .filter_map(|(pattern, replacement)| Some((Regex::new(pattern).ok()?, replacement)))
    .collect()
});

/// `text` with private keys, bootstrap tokens, credentials and each of `secrets` replaced.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| s.len() >= 6) {
        out = out.replace(secret, "<redacted>");
    }
    for (pattern, replacement) in REDACTIONS.iter() {
        out = pattern.replace_all(&out, *replacement).into_owned();
    }
    out
}

/// What the reports of one bootstrap say, for the `BootstrapSucceeded` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// Folds the reports of a ConfigMap's `data` into a condition; `None` when nothing was reported.
/// A failure is the first failed step (later steps may fail because of it).
pub fn summarize(data: &BTreeMap<String, String>) -> Option<Summary> {
    let mut reports: Vec<StepReport> = data
        .iter()
        .filter(|(k, _)| k.starts_with("step-"))
        .filter_map(|(_, v)| serde_json::from_str(v).ok())
        .collect();
    if reports.is_empty() {
        return None;
    }
    reports.sort_by_key(|r| r.step);
    if let Some(failed) = reports.iter().find(|r| r.state == "failed") {
        let mut message = format!(
            "step {}/{} failed with exit code {}: {}",
            failed.step, failed.steps, failed.exit_code, failed.command
        );
        if !failed.output.is_empty() {
            message.push_str("\noutput (last lines):\n");
            message.push_str(failed.output.trim_end());
        }
        return Some(Summary {
            status: capstan_runtime::conditions::FALSE,
            reason: REASON_FAILED,
            message,
        });
    }
    let total = reports.iter().map(|r| r.steps).max().unwrap_or(0);
    let succeeded = reports.iter().filter(|r| r.state == "succeeded").count();
    if total > 0 && succeeded >= total as usize {
        return Some(Summary {
            status: capstan_runtime::conditions::TRUE,
            reason: REASON_SUCCEEDED,
            message: format!("all {total} bootstrap steps succeeded"),
        });
    }
    let current = reports
        .iter()
        .rev()
        .find(|r| r.state == "started")
        .or(reports.last());
    Some(Summary {
        status: capstan_runtime::conditions::UNKNOWN,
        reason: REASON_IN_PROGRESS,
        message: current.map_or_else(String::new, |r| {
            format!("step {}/{} {}: {}", r.step, r.steps, r.state, r.command)
        }),
    })
}

#[derive(Clone)]
struct ReportState {
    client: Client,
}

/// The report server's routes (mount them at the root of a plain-HTTP server nodes can reach, such
/// as the provisioning server).
pub fn router(client: Client) -> Router {
    Router::new()
        .route(
            "/bootstrap/v1/namespaces/{namespace}/kubeadmconfigs/{name}/steps",
            post(receive),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(ReportState { client })
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn receive(
    State(state): State<ReportState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let Some(presented) = header(&headers, "authorization").and_then(|h| h.strip_prefix("Bearer "))
    else {
        return StatusCode::UNAUTHORIZED;
    };
    let secrets: Api<Secret> = Api::namespaced(state.client.clone(), &namespace);
    let expected = match secrets.get_opt(&report_object_name(&name)).await {
        Ok(Some(secret)) => secret
            .data
            .as_ref()
            .and_then(|d| d.get(TOKEN_KEY))
            .map(|t| t.0.clone()),
        Ok(None) => None,
        Err(err) => {
            tracing::warn!(namespace, config = %name, error = %err, "reading the bootstrap report token failed");
            return StatusCode::SERVICE_UNAVAILABLE;
        }
    };
    let Some(expected) = expected else {
        return StatusCode::UNAUTHORIZED;
    };
    if !constant_time_eq(presented.as_bytes(), &expected) {
        tracing::warn!(namespace, config = %name, "bootstrap report with a wrong token refused");
        return StatusCode::UNAUTHORIZED;
    }
    let number = |h: &str| header(&headers, h).and_then(|v| v.parse::<i64>().ok());
    let (Some(step), Some(steps), Some(state_name)) = (
        number("x-capstan-step"),
        number("x-capstan-steps"),
        header(&headers, "x-capstan-state"),
    ) else {
        return StatusCode::BAD_REQUEST;
    };
    if !["started", "succeeded", "failed"].contains(&state_name)
        || !(1..=999).contains(&step)
        || !(1..=999).contains(&steps)
    {
        return StatusCode::BAD_REQUEST;
    }
    let token = String::from_utf8_lossy(&expected).into_owned();
    let command = header(&headers, "x-capstan-command")
        .and_then(|c| base64::engine::general_purpose::STANDARD.decode(c).ok())
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .unwrap_or_default();
    let output = String::from_utf8_lossy(&body);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let report = StepReport {
        step: step as u32,
        steps: steps as u32,
        state: state_name.to_owned(),
        exit_code: number("x-capstan-exit-code").unwrap_or(0) as i32,
        command: redact(&command, &[&token]),
        output: redact(&output, &[&token]),
        at: capstan_runtime::conditions::now(),
    };
    match store(&state.client, &namespace, &name, &report).await {
        Ok(()) => {
            tracing::info!(namespace, config = %name, step, steps, state = state_name, "bootstrap step reported");
            StatusCode::NO_CONTENT
        }
        Err(err) => {
            tracing::warn!(namespace, config = %name, error = %err, "storing a bootstrap report failed");
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

async fn store(
    client: &Client,
    namespace: &str,
    config: &str,
    report: &StepReport,
) -> Result<(), kube::Error> {
    let key = format!("step-{:03}", report.step);
    let value = serde_json::to_string(report).unwrap_or_default();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let name = report_object_name(config);
    if maps.get_opt(&name).await?.is_none() {
        let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), namespace);
        let owner = configs.get(config).await?;
        let mut labels = owner.meta().labels.clone().unwrap_or_default();
        labels.insert(REPORT_LABEL.to_owned(), config.to_owned());
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(labels),
                owner_references: Some(vec![OwnerReference {
                    api_version: KubeadmConfig::api_version(&()).into_owned(),
                    kind: KubeadmConfig::kind(&()).into_owned(),
                    name: owner.name_any(),
                    uid: owner.uid().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        match maps.create(&PostParams::default(), &map).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(err) => return Err(err),
        }
    }
    // The label again: a report ConfigMap an earlier version created without it is labelled by
    // the next step.
    let patch = serde_json::json!({
        "metadata": {"labels": {REPORT_LABEL: config}},
        "data": {key: value},
    });
    maps.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The report token Secret of `config` (type [`crate::certs::CLUSTER_SECRET_TYPE`]).
pub fn token_secret(
    config: &str,
    namespace: &str,
    cluster: &str,
    owner: OwnerReference,
    token: &str,
) -> Secret {
    crate::certs::cluster_secret(
        &report_object_name(config),
        namespace,
        cluster,
        Some(owner),
        BTreeMap::from([(TOKEN_KEY.to_owned(), token.as_bytes().to_vec())]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_removes_keys_tokens_and_passwords() {
        let text = "kubeadm join --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:12\n\
            -----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n\
            password: hunter22 and Authorization: Bearer s3cr3t-value and sometoken-xyz123";
        let out = redact(text, &["sometoken-xyz123"]);
        for leaked in [
            "abcdef.0123456789abcdef",
            "MHcCAQEE",
            "hunter22",
            "s3cr3t-value",
            "sometoken-xyz123",
        ] {
            assert!(!out.contains(leaked), "{leaked} in {out}");
        }
        assert!(out.contains("sha256:12"), "{out}");
    }

    fn report(step: u32, state: &str) -> (String, String) {
        (
            format!("step-{step:03}"),
            serde_json::to_string(&StepReport {
                step,
                steps: 3,
                state: state.into(),
                exit_code: if state == "failed" { 2 } else { 0 },
                command: format!("cmd {step}"),
                output: if state == "failed" {
                    "boom\n".into()
                } else {
                    String::new()
                },
                at: "2026-01-01T00:00:00Z".into(),
            })
            .unwrap(),
        )
    }

    #[test]
    fn summary_names_the_first_failure() {
        assert_eq!(summarize(&BTreeMap::new()), None);
        let running = BTreeMap::from([report(1, "succeeded"), report(2, "started")]);
        let summary = summarize(&running).unwrap();
        assert_eq!(
            (summary.status, summary.reason),
            ("Unknown", REASON_IN_PROGRESS)
        );
        assert!(summary.message.contains("step 2/3"), "{}", summary.message);
        let failed = BTreeMap::from([
            report(1, "succeeded"),
            report(2, "failed"),
            report(3, "failed"),
        ]);
        let summary = summarize(&failed).unwrap();
        assert_eq!((summary.status, summary.reason), ("False", REASON_FAILED));
        assert!(
            summary
                .message
                .starts_with("step 2/3 failed with exit code 2: cmd 2")
        );
        assert!(summary.message.ends_with("boom"));
        let done = BTreeMap::from([
            report(1, "succeeded"),
            report(2, "succeeded"),
            report(3, "succeeded"),
        ]);
        assert_eq!(summarize(&done).unwrap().status, "True");
    }

    #[test]
    fn urls_and_tokens() {
        assert_eq!(
            steps_url("http://10.0.0.1:8080/", "ns", "cp-0"),
            "http://10.0.0.1:8080/bootstrap/v1/namespaces/ns/kubeadmconfigs/cp-0/steps"
        );
        let token = new_token();
        assert_eq!(token.len(), 32);
        assert_ne!(token, new_token());
        assert!(constant_time_eq(b"abc", b"abc") && !constant_time_eq(b"abc", b"abd"));
    }
}
