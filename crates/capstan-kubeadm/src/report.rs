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
//! X-Capstan-Sequence: 3                  the report's number: step N's start is 2N-1, its end 2N
//! body: the last lines of the command's output (failed steps), text
//! ```
//!
//! Answers, each with a text body saying why (never the token): `204` stored; `400` malformed, or a
//! namespace that is not a DNS-1123 label or a name that is not a DNS-1123 subdomain (checked after
//! percent-decoding, before anything else, so `%2F` or `%3F` never reach an API path); `401` wrong
//! or missing token — the same answer for a config that does not exist and for a token Secret the
//! config does not own (ownerReference to its uid), so names cannot be probed; `409` a report whose
//! number is not above the last one taken (replayed, late or out of order); `410` the bootstrap has
//! ended and reports are closed; `413` body too large.
//!
//! Lifetime: a report token is good for one bootstrap. Reports are taken once each and in order:
//! the number must match the step and state (so a report cannot claim an earlier step after a later
//! one was taken) and be above the last number taken, which is kept, with whether reports are
//! closed, in annotations of the token Secret ([`ANNOTATION_LAST_REPORT`],
//! [`ANNOTATION_CLOSED`]; in the store, so a restart keeps them). Reports close when the last step's
//! end is taken, or when the Machine has its Node (the bootstrap controller closes them then):
//! after that the token is refused for good, with `410`.
//!
//! The server stores each step, with secrets redacted ([`redact`]; a line quoting the node's
//! bootstrap data is dropped, see [`crate::redact::BootstrapDataSecrets`]), in the ConfigMap
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
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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

/// Annotation on the token Secret: the number (`X-Capstan-Sequence`) of the last report taken.
pub const ANNOTATION_LAST_REPORT: &str = "bootstrap.capstan.io/last-report";
/// Annotation on the token Secret, once reports are closed: why (the bootstrap ended).
pub const ANNOTATION_CLOSED: &str = "bootstrap.capstan.io/reports-closed";
/// How often a report retries taking its number when another write raced it.
const CLAIM_ATTEMPTS: usize = 3;

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

use crate::redact::BootstrapDataSecrets;
pub use crate::redact::redact;

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

/// Why a report was refused; its `Display` is the answer's body, which never holds the token.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A path segment is not a Kubernetes name (checked before anything else, so nothing built
    /// from it ever reaches an API path).
    #[error(
        "{what} {value:?} is not a valid {rule}; use the KubeadmConfig's own namespace and name"
    )]
    InvalidName {
        what: &'static str,
        value: String,
        rule: &'static str,
    },
    /// The same answer for a missing or wrong token, a config that does not exist and a token
    /// Secret the config does not own, so names cannot be probed.
    #[error("missing or wrong report token; the node's bootstrap data carries the right one")]
    Unauthorized,
    #[error("malformed report: {0}")]
    Malformed(String),
    /// The bootstrap ended: its token is good for nothing more.
    #[error("bootstrap of kubeadmconfig {namespace}/{name} has ended ({why}); reports are closed")]
    Closed {
        namespace: String,
        name: String,
        why: String,
    },
    /// Replayed, late or out of order.
    #[error(
        "kubeadmconfig {namespace}/{name}: report {last} already accepted; this is report {this}; reports are taken once each, in order"
    )]
    OutOfOrder {
        namespace: String,
        name: String,
        last: u32,
        this: u32,
    },
    #[error("the management API could not be reached; the node's next report is taken")]
    Unavailable,
}

impl Refusal {
    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidName { .. } | Self::Malformed(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Closed { .. } => StatusCode::GONE,
            Self::OutOfOrder { .. } => StatusCode::CONFLICT,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl axum::response::IntoResponse for Refusal {
    fn into_response(self) -> axum::response::Response {
        (self.status(), format!("{self}\n")).into_response()
    }
}

/// What a DNS-1123 label is, as Kubernetes says it.
const LABEL_RULE: &str = "DNS-1123 label (at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)";
/// What a DNS-1123 subdomain is, as Kubernetes says it.
const SUBDOMAIN_RULE: &str = "DNS-1123 subdomain (at most 253 lower-case letters, digits, '-' and '.', each '.'-separated part starting and ending with a letter or digit)";

fn is_label_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
}

/// Whether `value` is a DNS-1123 label (a namespace).
pub fn is_dns1123_label(value: &str) -> bool {
    value.len() <= 63 && is_label_part(value)
}

/// Whether `value` is a DNS-1123 subdomain (the name of most objects).
pub fn is_dns1123_subdomain(value: &str) -> bool {
    value.len() <= 253 && value.split('.').all(is_label_part)
}

/// The namespace and name of a report's path, decoded, checked as Kubernetes names.
fn check_names(namespace: &str, name: &str) -> Result<(), Refusal> {
    // At most this much of a refused value is echoed back.
    let shown = |v: &str| v.chars().take(80).collect::<String>();
    if !is_dns1123_label(namespace) {
        return Err(Refusal::InvalidName {
            what: "namespace",
            value: shown(namespace),
            rule: LABEL_RULE,
        });
    }
    // The name's report objects (`{name}-bootstrap-report`) must be valid names too.
    if !is_dns1123_subdomain(name) || report_object_name(name).len() > 253 {
        return Err(Refusal::InvalidName {
            what: "kubeadmconfig name",
            value: shown(name),
            rule: SUBDOMAIN_RULE,
        });
    }
    Ok(())
}

/// Whether `secret` is the report token Secret of `config`: owned (as controller) by that very
/// KubeadmConfig, not merely named like it.
fn owned_by(secret: &Secret, config: &KubeadmConfig) -> bool {
    let Some(uid) = config.uid() else {
        return false;
    };
    secret.owner_references().iter().any(|o| {
        o.kind == "KubeadmConfig"
            && o.api_version.starts_with("bootstrap.cluster.x-k8s.io/")
            && o.name == config.name_any()
            && o.uid == uid
            && o.controller == Some(true)
    })
}

async fn receive(
    State(state): State<ReportState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, Refusal> {
    check_names(&namespace, &name)?;
    let Some(presented) = header(&headers, "authorization").and_then(|h| h.strip_prefix("Bearer "))
    else {
        return Err(Refusal::Unauthorized);
    };
    // Every API path below is built by kube's typed `Api` from the names checked above.
    let configs: Api<KubeadmConfig> = Api::namespaced(state.client.clone(), &namespace);
    let config = match configs.get_opt(&name).await {
        Ok(Some(config)) => config,
        Ok(None) => {
            tracing::warn!(namespace, config = %name, "bootstrap report for a KubeadmConfig that does not exist refused");
            return Err(Refusal::Unauthorized);
        }
        Err(err) => {
            tracing::warn!(namespace, config = %name, error = %err, "reading the KubeadmConfig of a bootstrap report failed");
            return Err(Refusal::Unavailable);
        }
    };
    let secrets: Api<Secret> = Api::namespaced(state.client.clone(), &namespace);
    let token_secret = match secrets.get_opt(&report_object_name(&name)).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Err(Refusal::Unauthorized),
        Err(err) => {
            tracing::warn!(namespace, config = %name, error = %err, "reading the bootstrap report token failed");
            return Err(Refusal::Unavailable);
        }
    };
    if !owned_by(&token_secret, &config) {
        tracing::warn!(namespace, config = %name, "bootstrap report refused: its token Secret is not owned by the KubeadmConfig");
        return Err(Refusal::Unauthorized);
    }
    let Some(expected) = token_secret
        .data
        .as_ref()
        .and_then(|d| d.get(TOKEN_KEY))
        .map(|t| t.0.clone())
    else {
        return Err(Refusal::Unauthorized);
    };
    if !constant_time_eq(presented.as_bytes(), &expected) {
        tracing::warn!(namespace, config = %name, "bootstrap report with a wrong token refused");
        return Err(Refusal::Unauthorized);
    }
    let number = |h: &str| header(&headers, h).and_then(|v| v.parse::<i64>().ok());
    let (Some(step), Some(steps), Some(state_name)) = (
        number("x-capstan-step"),
        number("x-capstan-steps"),
        header(&headers, "x-capstan-state"),
    ) else {
        return Err(Refusal::Malformed(
            "X-Capstan-Step, X-Capstan-Steps and X-Capstan-State are required".into(),
        ));
    };
    if !["started", "succeeded", "failed"].contains(&state_name)
        || !(1..=999).contains(&step)
        || !(1..=999).contains(&steps)
    {
        return Err(Refusal::Malformed(
            "X-Capstan-State is started, succeeded or failed; X-Capstan-Step and X-Capstan-Steps are 1 to 999".into(),
        ));
    }
    let Some(sequence) = number("x-capstan-sequence") else {
        return Err(Refusal::Malformed(
            "X-Capstan-Sequence is required: the node's bootstrap data is older than this server; re-create the Machine".into(),
        ));
    };
    let expected_sequence = if state_name == "started" {
        2 * step - 1
    } else {
        2 * step
    };
    if sequence != expected_sequence || step > steps {
        return Err(Refusal::Malformed(format!(
            "report {sequence} does not fit step {step}/{steps} {state_name} (its number is {expected_sequence})"
        )));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let sequence = sequence as u32;
    // The last step's end ends the bootstrap.
    let last = step == steps && state_name != "started";
    claim(&secrets, token_secret, &namespace, &name, sequence, last).await?;
    let token = String::from_utf8_lossy(&expected).into_owned();
    // What the node was given must not come back through a report: its bootstrap data (Secret
    // `{name}`) is read so a line quoting it is dropped.
    let data = match secrets.get_opt(&name).await {
        Ok(secret) => secret
            .and_then(|s| s.data)
            .and_then(|d| {
                d.get("value")
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            })
            .map(|value| BootstrapDataSecrets::from_cloud_config(&value))
            .unwrap_or_default(),
        Err(err) => {
            tracing::warn!(namespace, config = %name, error = %err, "reading the bootstrap data for redaction failed");
            return Err(Refusal::Unavailable);
        }
    };
    let command = header(&headers, "x-capstan-command")
        .and_then(|c| base64::engine::general_purpose::STANDARD.decode(c).ok())
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .unwrap_or_default();
    let output = data.scrub(&String::from_utf8_lossy(&body));
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
    match store(&state.client, &config, &report).await {
        Ok(()) => {
            tracing::info!(namespace, config = %name, step, steps, state = state_name, "bootstrap step reported");
            Ok(StatusCode::NO_CONTENT)
        }
        Err(err) => {
            tracing::warn!(namespace, config = %name, error = %err, "storing a bootstrap report failed");
            Err(Refusal::Unavailable)
        }
    }
}

/// Why reports of a token Secret are closed, if they are.
pub fn closed_because(secret: &Secret) -> Option<&str> {
    secret
        .annotations()
        .get(ANNOTATION_CLOSED)
        .map(String::as_str)
}

fn last_report(secret: &Secret) -> u32 {
    secret
        .annotations()
        .get(ANNOTATION_LAST_REPORT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Takes report `sequence` in the token Secret: refused when reports are closed or the number is
/// not above the last one taken; closes reports when `last`. The write is conditional on the
/// Secret's resourceVersion, so of two reports racing (or a report racing the controller closing
/// reports) one wins and the other looks again.
async fn claim(
    secrets: &Api<Secret>,
    mut secret: Secret,
    namespace: &str,
    name: &str,
    sequence: u32,
    last: bool,
) -> Result<(), Refusal> {
    for _ in 0..CLAIM_ATTEMPTS {
        if let Some(why) = closed_because(&secret) {
            return Err(Refusal::Closed {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                why: why.to_owned(),
            });
        }
        let taken = last_report(&secret);
        if sequence <= taken {
            return Err(Refusal::OutOfOrder {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                last: taken,
                this: sequence,
            });
        }
        let annotations = secret.annotations_mut();
        annotations.insert(ANNOTATION_LAST_REPORT.to_owned(), sequence.to_string());
        if last {
            annotations.insert(
                ANNOTATION_CLOSED.to_owned(),
                format!("its last step's report {sequence} was taken"),
            );
        }
        match secrets
            .replace(&secret.name_any(), &PostParams::default(), &secret)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                secret = match secrets.get_opt(&secret.name_any()).await {
                    Ok(Some(secret)) => secret,
                    Ok(None) => return Err(Refusal::Unauthorized),
                    Err(err) => {
                        tracing::warn!(namespace, config = %name, error = %err, "reading the bootstrap report token failed");
                        return Err(Refusal::Unavailable);
                    }
                };
            }
            Err(err) => {
                tracing::warn!(namespace, config = %name, error = %err, "recording a bootstrap report's number failed");
                return Err(Refusal::Unavailable);
            }
        }
    }
    Err(Refusal::Unavailable)
}

/// Closes the reports of `config` (the bootstrap ended: its Machine has a Node), if its token
/// Secret is open. `Ok(true)` when this call closed them; a conflict (a report taken meanwhile) is
/// an error, so the caller's retry looks again.
pub async fn close(
    client: &Client,
    config: &KubeadmConfig,
    why: &str,
) -> Result<bool, kube::Error> {
    let namespace = config.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let name = report_object_name(&config.name_any());
    let Some(secret) = secrets.get_opt(&name).await? else {
        return Ok(false);
    };
    if closed_because(&secret).is_some() || !owned_by(&secret, config) {
        return Ok(false);
    }
    // Conditional on the version read: a report taken meanwhile makes this look again next pass.
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": secret.resource_version(),
            "annotations": {ANNOTATION_CLOSED: why},
        },
    });
    secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

async fn store(
    client: &Client,
    owner: &KubeadmConfig,
    report: &StepReport,
) -> Result<(), kube::Error> {
    let config = owner.name_any();
    let namespace = owner.namespace().unwrap_or_default();
    let key = format!("step-{:03}", report.step);
    let value = serde_json::to_string(report).unwrap_or_default();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let name = report_object_name(&config);
    if maps.get_opt(&name).await?.is_none() {
        let mut labels = owner.meta().labels.clone().unwrap_or_default();
        labels.insert(REPORT_LABEL.to_owned(), config.clone());
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
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
    fn path_names_are_kubernetes_names() {
        for ok in ["default", "kube-system", "a", "0x"] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in ["", "a/b", "a?", "A", "-a", "a-", "a.b", &"n".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
        for ok in ["cp-0", "capi-1-workers-7f9c.x", "a.b.c"] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "a..b",
            ".a",
            "a.",
            "a/b",
            "a?x=",
            "a%2F",
            "Cp",
            &"n".repeat(254),
        ] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
        assert!(
            check_names("ns", &"n".repeat(240)).is_err(),
            "its report objects' names are too long"
        );
        assert!(check_names("ns", "cp-0").is_ok());
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
