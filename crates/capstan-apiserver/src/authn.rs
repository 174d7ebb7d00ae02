//! Authentication: who a request comes from, as kube-apiserver's authenticators decide it.
//!
//! - A client certificate signed by the server's CA: the subject's common name is the user, its
//!   organizations are the groups (the admin certificate is in `system:masters`).
//! - A static bearer token given at start (the admin token): user `capstan-admin` in
//!   `system:masters`.
//! - A ServiceAccount token (a JWT issued by `serviceaccounts/NAME/token`, see
//!   [`crate::builtin::tokens`]): user `system:serviceaccount:NS:NAME` in `system:serviceaccounts`
//!   and `system:serviceaccounts:NS`, valid while its signature, issuer, audience and validity
//!   window check out and the ServiceAccount it was issued for (same uid) exists, and the Pod or
//!   Secret it is bound to, if any.
//! - A bootstrap token `ID.SECRET`: valid while Secret `kube-system/bootstrap-token-ID` of type
//!   `bootstrap.kubernetes.io/token` holds that secret, allows `usage-bootstrap-authentication`,
//!   has not expired and is not being deleted; user `system:bootstrap:ID` in `system:bootstrappers`
//!   and the Secret's `auth-extra-groups`.
//!
//! Every authenticated user is also in `system:authenticated`. A request with no credentials is
//! user `system:anonymous` in `system:unauthenticated` for RBAC to decide (or refused with 401 when
//! anonymous access is off, as kube-apiserver's `--anonymous-auth=false`); one whose token matches
//! none of the above is refused with 401. Tokens are never logged: a failure is logged by kind only.

use crate::ApiState;
use base64::Engine;
use capstan_store::ObjectKey;
use serde::Serialize;
use std::collections::BTreeMap;

/// The group whose members may do anything (kube-apiserver's privileged group).
pub const MASTERS_GROUP: &str = "system:masters";
/// The group of every authenticated user.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The user and group of requests without credentials.
pub const ANONYMOUS_USER: &str = "system:anonymous";
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group of every bootstrap-token user.
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
/// The user of the admin token.
pub const ADMIN_USER: &str = "capstan-admin";

/// An authenticated identity (`user.Info` in Kubernetes terms), stored in the request's extensions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with `groups`; `system:authenticated` is added.
    pub fn new(username: impl Into<String>, groups: &[&str]) -> Self {
        let mut groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        groups.push(AUTHENTICATED_GROUP.to_owned());
        Self {
            username: username.into(),
            groups,
            ..Self::default()
        }
    }

    /// The user of a request without credentials: `system:anonymous` in `system:unauthenticated`
    /// only (never `system:authenticated`).
    pub fn anonymous() -> Self {
        Self {
            username: ANONYMOUS_USER.to_owned(),
            groups: vec![UNAUTHENTICATED_GROUP.to_owned()],
            ..Self::default()
        }
    }

    /// The identity of the admin token and of trusted in-process callers.
    pub fn admin() -> Self {
        Self::new(ADMIN_USER, &[MASTERS_GROUP])
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The identity a client certificate proves: common name and organizations.
    pub fn from_certificate(der: &[u8]) -> Option<Self> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let username = subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())?
            .to_owned();
        let organizations: Vec<&str> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok())
            .collect();
        Some(Self::new(username, &organizations))
    }
}

/// Why a bearer token was refused (for the log; never carries the token).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenRejection {
    #[error("the token matches no known credential")]
    Unknown,
    #[error("bootstrap token {0}: no such Secret, or its secret does not match")]
    BootstrapMismatch(String),
    #[error("bootstrap token {0}: the Secret is not of type bootstrap.kubernetes.io/token")]
    BootstrapWrongType(String),
    #[error("bootstrap token {0}: the Secret does not allow usage-bootstrap-authentication")]
    BootstrapNotForAuthentication(String),
    #[error("bootstrap token {0}: expired")]
    BootstrapExpired(String),
    #[error("bootstrap token {0}: the Secret is being deleted")]
    BootstrapDeleted(String),
    #[error(
        "bootstrap token {id}: auth-extra-groups has {group:?}, which does not start with system:bootstrappers:"
    )]
    BootstrapBadGroup { id: String, group: String },
    #[error("ServiceAccount token: {0}")]
    ServiceAccountToken(String),
    #[error("ServiceAccount token: {name} in {namespace} no longer exists (or was recreated)")]
    ServiceAccountGone { namespace: String, name: String },
    #[error("reading the store failed: {0}")]
    Store(String),
}

/// Compares secrets without an early exit, so timing does not reveal a matching prefix.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Splits a bootstrap token `ID.SECRET` (6 and 16 characters of `[a-z0-9]`) into its parts.
pub fn parse_bootstrap_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let valid = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (valid(id, 6) && valid(secret, 16)).then_some((id, secret))
}

/// A bootstrap token's Secret `data` value as text.
fn data_text(secret: &serde_json::Value, key: &str) -> Option<String> {
    let encoded = secret["data"][key].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Whether a group may be granted by `auth-extra-groups` (kube-apiserver's rule).
fn valid_extra_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    !rest.is_empty()
        && rest.len() <= 256
        && rest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
        && rest
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Checks a bootstrap token against its Secret (the stored object, `None` when absent).
pub fn check_bootstrap_secret(
    id: &str,
    secret_text: &str,
    stored: Option<&serde_json::Value>,
    now: jiff::Timestamp,
) -> Result<UserInfo, TokenRejection> {
    let mismatch = || TokenRejection::BootstrapMismatch(id.to_owned());
    let secret = stored.ok_or_else(mismatch)?;
    if secret["type"].as_str() != Some("bootstrap.kubernetes.io/token") {
        return Err(TokenRejection::BootstrapWrongType(id.to_owned()));
    }
    if !secret["metadata"]["deletionTimestamp"].is_null() {
        return Err(TokenRejection::BootstrapDeleted(id.to_owned()));
    }
    let stored_secret = data_text(secret, "token-secret").ok_or_else(mismatch)?;
    if !constant_time_eq(stored_secret.as_bytes(), secret_text.as_bytes()) {
        return Err(mismatch());
    }
    if data_text(secret, "token-id").is_some_and(|stored_id| stored_id != id) {
        return Err(mismatch());
    }
    if let Some(expiration) = data_text(secret, "expiration") {
        // An expiration that does not parse counts as expired, as in kube-apiserver.
        let expired = expiration
            .parse::<jiff::Timestamp>()
            .map_or(true, |at| at <= now);
        if expired {
            return Err(TokenRejection::BootstrapExpired(id.to_owned()));
        }
    }
    if data_text(secret, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return Err(TokenRejection::BootstrapNotForAuthentication(id.to_owned()));
    }
    let mut groups = vec![BOOTSTRAPPERS_GROUP.to_owned()];
    if let Some(extra) = data_text(secret, "auth-extra-groups") {
        for group in extra.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            if !valid_extra_group(group) {
                return Err(TokenRejection::BootstrapBadGroup {
                    id: id.to_owned(),
                    group: group.to_owned(),
                });
            }
            if !groups.iter().any(|g| g == group) {
                groups.push(group.to_owned());
            }
        }
    }
    groups.push(AUTHENTICATED_GROUP.to_owned());
    Ok(UserInfo {
        username: format!("system:bootstrap:{id}"),
        groups,
        ..UserInfo::default()
    })
}

/// The identity of a bearer token, or why it is refused.
pub async fn authenticate_token(state: &ApiState, token: &str) -> Result<UserInfo, TokenRejection> {
    let token = token.trim();
    if state
        .auth
        .tokens
        .iter()
        .any(|t| constant_time_eq(t.as_bytes(), token.as_bytes()))
    {
        return Ok(UserInfo::admin());
    }
    if crate::builtin::tokens::looks_like_jwt(token) {
        return service_account_token_user(
            state,
            token,
            state.token_issuer().api_audiences(),
            jiff::Timestamp::now().as_second(),
        )
        .await
        .map(|(user, _)| user);
    }
    if let Some((id, secret)) = parse_bootstrap_token(token) {
        let key = ObjectKey::new("/secrets", "kube-system", format!("bootstrap-token-{id}"));
        let stored = state
            .store
            .get(key)
            .await
            .map_err(|e| TokenRejection::Store(e.to_string()))?;
        let value = match stored {
            Some(stored) => Some(
                stored
                    .value()
                    .map_err(|e| TokenRejection::Store(e.to_string()))?,
            ),
            None => None,
        };
        return check_bootstrap_secret(id, secret, value.as_ref(), jiff::Timestamp::now());
    }
    Err(TokenRejection::Unknown)
}

/// The uid of the stored object at `key`, unless it is gone or being deleted.
async fn live_uid(state: &ApiState, key: ObjectKey) -> Result<Option<String>, TokenRejection> {
    let Some(stored) = state
        .store
        .get(key)
        .await
        .map_err(|e| TokenRejection::Store(e.to_string()))?
    else {
        return Ok(None);
    };
    let object = stored
        .value()
        .map_err(|e| TokenRejection::Store(e.to_string()))?;
    if !object["metadata"]["deletionTimestamp"].is_null() {
        return Ok(None);
    }
    Ok(object["metadata"]["uid"].as_str().map(str::to_owned))
}

/// The user of a ServiceAccount JWT valid at `now` for one of `audiences` (and the audiences of
/// the token among them), as kube-apiserver checks it: signed by this server's key, unexpired,
/// and its ServiceAccount — and the Pod or Secret it is bound to — still existing with the uid
/// the token names.
pub async fn service_account_token_user(
    state: &ApiState,
    token: &str,
    audiences: &[String],
    now: i64,
) -> Result<(UserInfo, Vec<String>), TokenRejection> {
    use crate::builtin::tokens;
    let key = state.service_account_key();
    let claims = tokens::verify_at(&key, &state.token_issuer(), token, audiences, now)
        .map_err(|reason| TokenRejection::ServiceAccountToken(reason.to_string()))?;
    let namespace = claims.namespace().to_owned();
    let account = &claims.kubernetes.serviceaccount;
    let gone = |what: &str, name: &str| TokenRejection::ServiceAccountGone {
        namespace: namespace.clone(),
        name: format!("{what} {name}"),
    };
    let checks = [
        ("ServiceAccount", "/serviceaccounts", Some(account)),
        ("Pod", "/pods", claims.kubernetes.pod.as_ref()),
        ("Secret", "/secrets", claims.kubernetes.secret.as_ref()),
    ];
    for (kind, resource, object) in checks {
        let Some(object) = object else { continue };
        let key = ObjectKey::new(resource, &namespace, &object.name);
        if live_uid(state, key).await?.as_deref() != Some(object.uid.as_str()) {
            return Err(gone(kind, &object.name));
        }
    }
    let ns_group = format!("system:serviceaccounts:{namespace}");
    let mut user = UserInfo::new(
        format!("system:serviceaccount:{namespace}:{}", account.name),
        &["system:serviceaccounts", &ns_group],
    );
    user.uid = account.uid.clone();
    let mut extra = |name: &str, value: &str| {
        user.extra.insert(
            format!("authentication.kubernetes.io/{name}"),
            vec![value.to_owned()],
        );
    };
    extra("credential-id", &format!("JTI={}", claims.jti));
    if let Some(pod) = &claims.kubernetes.pod {
        extra("pod-name", &pod.name);
        extra("pod-uid", &pod.uid);
    }
    let matched = claims
        .aud
        .iter()
        .filter(|a| audiences.contains(a))
        .cloned()
        .collect();
    Ok((user, matched))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn secret(extra: &[(&str, &str)]) -> serde_json::Value {
        let mut data = serde_json::Map::new();
        for (k, v) in [
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-authentication", "true"),
        ]
        .iter()
        .chain(extra)
        {
            data.insert((*k).to_owned(), json!(b64(v)));
        }
        json!({"type": "bootstrap.kubernetes.io/token", "metadata": {"name": "bootstrap-token-abcdef"}, "data": data})
    }

    #[test]
    fn bootstrap_tokens_have_a_fixed_shape() {
        assert_eq!(
            parse_bootstrap_token("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        for bad in [
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef.x",
        ] {
            assert_eq!(parse_bootstrap_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_bootstrap_token_is_checked_against_its_secret() {
        let now: jiff::Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let user = check_bootstrap_secret(
            "abcdef",
            "0123456789abcdef",
            Some(&secret(&[(
                "auth-extra-groups",
                "system:bootstrappers:kubeadm:default-node-token",
            )])),
            now,
        )
        .unwrap();
        assert_eq!(user.username, "system:bootstrap:abcdef");
        assert_eq!(
            user.groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:kubeadm:default-node-token",
                "system:authenticated"
            ]
        );
        let check = |s: serde_json::Value, token: &str| {
            check_bootstrap_secret("abcdef", token, Some(&s), now).unwrap_err()
        };
        assert_eq!(
            check(secret(&[]), "0123456789abcdee"),
            TokenRejection::BootstrapMismatch("abcdef".into())
        );
        assert_eq!(
            check_bootstrap_secret("abcdef", "0123456789abcdef", None, now).unwrap_err(),
            TokenRejection::BootstrapMismatch("abcdef".into())
        );
        let mut opaque = secret(&[]);
        opaque["type"] = json!("Opaque");
        assert_eq!(
            check(opaque, "0123456789abcdef"),
            TokenRejection::BootstrapWrongType("abcdef".into())
        );
        assert_eq!(
            check(
                secret(&[("expiration", "2029-12-31T23:59:59Z")]),
                "0123456789abcdef"
            ),
            TokenRejection::BootstrapExpired("abcdef".into())
        );
        assert_eq!(
            check(secret(&[("expiration", "not a time")]), "0123456789abcdef"),
            TokenRejection::BootstrapExpired("abcdef".into())
        );
        assert!(
            check_bootstrap_secret(
                "abcdef",
                "0123456789abcdef",
                Some(&secret(&[("expiration", "2030-01-01T00:00:01Z")])),
                now
            )
            .is_ok()
        );
        assert_eq!(
            check(
                secret(&[("usage-bootstrap-authentication", "false")]),
                "0123456789abcdef"
            ),
            TokenRejection::BootstrapNotForAuthentication("abcdef".into())
        );
        assert!(matches!(
            check(
                secret(&[("auth-extra-groups", "system:masters")]),
                "0123456789abcdef"
            ),
            TokenRejection::BootstrapBadGroup { .. }
        ));
        let mut deleting = secret(&[]);
        deleting["metadata"]["deletionTimestamp"] = json!("2029-01-01T00:00:00Z");
        assert_eq!(
            check(deleting, "0123456789abcdef"),
            TokenRejection::BootstrapDeleted("abcdef".into())
        );
    }
}
