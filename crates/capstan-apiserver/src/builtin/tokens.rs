//! ServiceAccount tokens (`POST serviceaccounts/NAME/token`, a `TokenRequest`): bearer tokens that
//! name the ServiceAccount and expire, signed with HMAC-SHA256 under a key derived from the server's
//! admin token, so they verify without storage and survive restarts (and stop verifying when the
//! admin token is rotated). A token authenticates as `system:serviceaccount:NS:NAME` while its
//! ServiceAccount exists with the uid it was issued for (see [`crate::authn`]).

use base64::Engine;
use ring::hmac;
use serde_json::{Value, json};

/// What every ServiceAccount token starts with.
const PREFIX: &str = "capstan-sa.";

/// Default and bounds of `spec.expirationSeconds`, as kube-apiserver has them.
const DEFAULT_SECONDS: i64 = 3600;
const MIN_SECONDS: i64 = 600;
const MAX_SECONDS: i64 = 48 * 3600;

/// Why a token cannot be issued.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "spec.expirationSeconds: Invalid value: {0}: may not specify a duration less than 10 minutes"
    )]
    TooShort(i64),
    #[error("the server has no key to sign tokens with")]
    NoKey,
}

fn key(secret: &str) -> hmac::Key {
    // A purpose-specific key, so the signature never equals anything else keyed by the admin token.
    let derived = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()),
        b"capstan serviceaccount tokens",
    );
    hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// Issues a token for `namespace/name` (uid `uid`) from a TokenRequest body; returns the completed
/// TokenRequest.
pub fn issue(
    secret: Option<&str>,
    namespace: &str,
    name: &str,
    uid: &str,
    request: &Value,
) -> Result<Value, TokenError> {
    let secret = secret.ok_or(TokenError::NoKey)?;
    let seconds = request["spec"]["expirationSeconds"]
        .as_i64()
        .unwrap_or(DEFAULT_SECONDS);
    if seconds < MIN_SECONDS {
        return Err(TokenError::TooShort(seconds));
    }
    let seconds = seconds.min(MAX_SECONDS);
    let now = jiff::Timestamp::now();
    let expires = now.as_second() + seconds;
    let claims = json!({"ns": namespace, "sa": name, "uid": uid, "exp": expires});
    let payload = b64().encode(claims.to_string());
    let signature = hmac::sign(&key(secret), payload.as_bytes());
    let token = format!("{PREFIX}{payload}.{}", b64().encode(signature.as_ref()));
    let expiration = jiff::Timestamp::from_second(expires)
        .map(|t| format!("{t:.0}"))
        .unwrap_or_default();
    let audiences = request["spec"]["audiences"].clone();
    Ok(json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": format!("{now:.0}")},
        "spec": {
            "audiences": if audiences.is_array() { audiences } else { json!([]) },
            "expirationSeconds": seconds,
            "boundObjectRef": request["spec"]["boundObjectRef"],
        },
        "status": {"token": token, "expirationTimestamp": expiration},
    }))
}

/// What a verified token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    pub namespace: String,
    pub name: String,
    /// The ServiceAccount's uid when the token was issued.
    pub uid: String,
    /// Expiry, in seconds since the epoch.
    pub expires: i64,
}

/// The ServiceAccount a token names, if it verifies and has not expired.
pub fn verify(secret: &str, token: &str) -> Option<Claims> {
    let rest = token.strip_prefix(PREFIX)?;
    let (payload, signature) = rest.split_once('.')?;
    let signature = b64().decode(signature).ok()?;
    hmac::verify(&key(secret), payload.as_bytes(), &signature).ok()?;
    let claims: Value = serde_json::from_slice(&b64().decode(payload).ok()?).ok()?;
    let expires = claims["exp"].as_i64()?;
    if expires <= jiff::Timestamp::now().as_second() {
        return None;
    }
    Some(Claims {
        namespace: claims["ns"].as_str()?.to_owned(),
        name: claims["sa"].as_str()?.to_owned(),
        uid: claims["uid"].as_str().unwrap_or_default().to_owned(),
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_with_their_key_and_untampered() {
        let issued = issue(
            Some("admin-secret"),
            "kube-system",
            "cilium",
            "u1",
            &json!({}),
        )
        .unwrap();
        let token = issued["status"]["token"].as_str().unwrap();
        let claims = verify("admin-secret", token).unwrap();
        assert_eq!(
            (
                claims.namespace.as_str(),
                claims.name.as_str(),
                claims.uid.as_str()
            ),
            ("kube-system", "cilium", "u1")
        );
        assert_eq!(verify("other", token), None);
        let tampered = token.replacen("capstan-sa.e", "capstan-sa.f", 1);
        assert_eq!(verify("admin-secret", &tampered), None);
        assert!(matches!(
            issue(
                Some("k"),
                "a",
                "b",
                "c",
                &json!({"spec": {"expirationSeconds": 60}})
            ),
            Err(TokenError::TooShort(60))
        ));
        assert_eq!(issued["spec"]["expirationSeconds"], 3600);
    }
}
