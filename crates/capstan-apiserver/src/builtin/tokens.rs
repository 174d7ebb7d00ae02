//! ServiceAccount tokens as kube-apiserver issues them (`POST serviceaccounts/NAME/token`, a
//! `TokenRequest`): ES256-signed JWTs with `iss`, `sub` (`system:serviceaccount:NS:NAME`), `aud`,
//! `exp`, `iat`, `nbf`, `jti` and the private `kubernetes.io` claim naming the namespace, the
//! ServiceAccount (name and uid) and, for bound tokens, the Pod or Secret they are bound to.
//!
//! The signing key is a P-256 key generated once per data directory (`pki/sa.key`, mode 0600;
//! servers without one use a key of their own process). Its public half is published as a JWKS at
//! `/openid/v1/jwks`, with `/.well-known/openid-configuration` pointing at it, so relying parties
//! verify tokens without asking the server. [`verify_at`] checks the signature, issuer, audience
//! and validity window; that the ServiceAccount (and a bound object) still exists with the uid the
//! token names is checked by [`crate::authn`] against the store.
//!
//! Who issues the tokens and which audiences the server accepts for its own authentication are
//! kube-apiserver's `--service-account-issuer` and `--api-audiences` ([`TokenIssuer`]).

use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The issuer (`iss`) of tokens unless configured otherwise: kubeadm's default
/// `--service-account-issuer`, and then also the one API audience.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Default and bounds of `spec.expirationSeconds`, as kube-apiserver has them.
const DEFAULT_SECONDS: i64 = 3600;
const MIN_SECONDS: i64 = 600;
const MAX_SECONDS: i64 = 48 * 3600;

/// Clock skew tolerated on `exp` and `nbf`, as kube-apiserver's JWT validation allows.
const LEEWAY_SECONDS: i64 = 60;

/// The file of the signing key in a data directory's `pki/`.
const KEY_FILE: &str = "sa.key";

/// The DER prefix of a P-256 `SubjectPublicKeyInfo` before the uncompressed point (the key id is
/// the SHA-256 of the whole structure, as kube-apiserver computes it).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Why a key cannot be loaded or a token issued.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "spec.expirationSeconds: Invalid value: {0}: may not specify a duration less than 10 minutes"
    )]
    TooShort(i64),
    #[error(
        "spec.boundObjectRef.kind: Unsupported value: {0:?}: supported values: \"Pod\", \"Secret\""
    )]
    BoundKind(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a PKCS#8 P-256 private key; remove it to have a new one generated")]
    BadKey { path: PathBuf },
    #[error("generating a signing key failed")]
    Generate,
    #[error("signing a token failed")]
    Sign,
    #[error(
        "service account issuer {0:?}: must be a non-empty identifier without whitespace, and a URL (scheme://host) when it contains a colon"
    )]
    BadIssuer(String),
    #[error("API audience {0:?}: must be non-empty and without whitespace")]
    BadAudience(String),
}

/// Who issues ServiceAccount tokens and for whom the server accepts them: kube-apiserver's
/// `--service-account-issuer` (the `iss` of every token, the only one accepted, and what
/// `/.well-known/openid-configuration` names) and `--api-audiences` (what a token must be for,
/// one of them at least, to authenticate to this server; what a TokenRequest or TokenReview
/// naming no audience gets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenIssuer {
    issuer: String,
    api_audiences: Vec<String>,
}

impl Default for TokenIssuer {
    fn default() -> Self {
        Self {
            issuer: DEFAULT_ISSUER.to_owned(),
            api_audiences: vec![DEFAULT_ISSUER.to_owned()],
        }
    }
}

impl TokenIssuer {
    /// `issuer` with `api_audiences`, or, when none are given, the issuer as the one API audience
    /// (as kube-apiserver defaults `--api-audiences`). Neither may be empty or hold whitespace, and
    /// an issuer containing a colon must be a URL (`scheme://…`), as relying parties read it.
    pub fn new(issuer: &str, api_audiences: &[String]) -> Result<Self, TokenError> {
        let plain = |s: &str| !s.is_empty() && !s.chars().any(char::is_whitespace);
        let url_like = |s: &str| {
            s.split_once("://")
                .is_some_and(|(scheme, rest)| !scheme.is_empty() && !rest.is_empty())
        };
        if !plain(issuer) || (issuer.contains(':') && !url_like(issuer)) {
            return Err(TokenError::BadIssuer(issuer.to_owned()));
        }
        if let Some(bad) = api_audiences.iter().find(|a| !plain(a)) {
            return Err(TokenError::BadAudience(bad.clone()));
        }
        let mut audiences: Vec<String> = Vec::new();
        for audience in api_audiences {
            if !audiences.contains(audience) {
                audiences.push(audience.clone());
            }
        }
        if audiences.is_empty() {
            audiences.push(issuer.to_owned());
        }
        Ok(Self {
            issuer: issuer.to_owned(),
            api_audiences: audiences,
        })
    }

    /// The `iss` of every token this server issues and accepts.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The audiences this server accepts for its own authentication.
    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    /// `/.well-known/openid-configuration`, as kube-apiserver serves it.
    pub fn openid_configuration(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("{}/openid/v1/jwks", self.issuer.trim_end_matches('/')),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// The key tokens are signed with, and its published form.
pub struct SigningKey {
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// The key id (`kid`) tokens carry and the JWKS lists.
    kid: String,
    /// The public point's coordinates, base64url.
    x: String,
    y: String,
}

impl std::fmt::Debug for SigningKey {
    // Never the private key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish()
    }
}

impl SigningKey {
    /// A new key, kept only in memory.
    pub fn generate() -> Result<Self, TokenError> {
        let der =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .map_err(|_| TokenError::Generate)?;
        Self::from_pkcs8(der.as_ref()).ok_or(TokenError::Generate)
    }

    fn from_pkcs8(der: &[u8]) -> Option<Self> {
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &SystemRandom::new())
                .ok()?;
        let point = pair.public_key().as_ref();
        // An uncompressed point: 0x04, then x and y of 32 bytes each.
        if point.len() != 65 || point[0] != 4 {
            return None;
        }
        let x = b64().encode(&point[1..33]);
        let y = b64().encode(&point[33..]);
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(point);
        let kid = b64().encode(ring::digest::digest(&ring::digest::SHA256, &spki).as_ref());
        Some(Self {
            encoding: EncodingKey::from_ec_der(der),
            decoding: DecodingKey::from_ec_components(&x, &y).ok()?,
            kid,
            x,
            y,
        })
    }

    /// The key of a data directory's `pki/` (`sa.key`), generated and written (mode 0600) the
    /// first time.
    pub fn load_or_create(pki_dir: &Path) -> Result<Self, TokenError> {
        let path = pki_dir.join(KEY_FILE);
        let io = |source| TokenError::Io {
            path: path.clone(),
            source,
        };
        match std::fs::read(&path) {
            Ok(pem) => {
                let der = rustls_pemfile::private_key(&mut pem.as_slice())
                    .ok()
                    .flatten()
                    .ok_or_else(|| TokenError::BadKey { path: path.clone() })?;
                Self::from_pkcs8(der.secret_der())
                    .ok_or_else(|| TokenError::BadKey { path: path.clone() })
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let der = EcdsaKeyPair::generate_pkcs8(
                    &ECDSA_P256_SHA256_FIXED_SIGNING,
                    &SystemRandom::new(),
                )
                .map_err(|_| TokenError::Generate)?;
                let key = Self::from_pkcs8(der.as_ref()).ok_or(TokenError::Generate)?;
                write_private(&path, &pem("PRIVATE KEY", der.as_ref())).map_err(io)?;
                Ok(key)
            }
            Err(err) => Err(io(err)),
        }
    }

    /// The JSON Web Key Set `/openid/v1/jwks` serves.
    pub fn jwks(&self) -> Value {
        json!({"keys": [{
            "use": "sig", "kty": "EC", "kid": self.kid, "crv": "P-256", "alg": "ES256",
            "x": self.x, "y": self.y,
        }]})
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }
}

/// A PEM block.
fn pem(label: &str, der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Writes `contents` owner-only, whole or not at all.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// An object a token is bound to: it is valid only while the object exists with this uid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundObject {
    pub name: String,
    pub uid: String,
}

/// The `kubernetes.io` claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaim {
    pub namespace: String,
    pub serviceaccount: BoundObject,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<BoundObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<BoundObject>,
}

/// What a token says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub nbf: i64,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaim,
}

impl Claims {
    pub fn namespace(&self) -> &str {
        &self.kubernetes.namespace
    }
}

/// What a TokenRequest asks for, read from its body.
pub struct TokenSpec {
    pub audiences: Vec<String>,
    pub seconds: i64,
    /// `spec.boundObjectRef`: its kind (`Pod` or `Secret`) and name.
    pub bound: Option<(String, String)>,
}

impl TokenSpec {
    /// The request's spec; a request naming no audience gets `issuer`'s API audiences.
    pub fn from_request(request: &Value, issuer: &TokenIssuer) -> Result<Self, TokenError> {
        let seconds = request["spec"]["expirationSeconds"]
            .as_i64()
            .unwrap_or(DEFAULT_SECONDS);
        if seconds < MIN_SECONDS {
            return Err(TokenError::TooShort(seconds));
        }
        let audiences: Vec<String> = request["spec"]["audiences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        let bound = match &request["spec"]["boundObjectRef"] {
            Value::Object(reference) => {
                let kind = reference
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if kind != "Pod" && kind != "Secret" {
                    return Err(TokenError::BoundKind(kind.to_owned()));
                }
                let name = reference
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Some((kind.to_owned(), name.to_owned()))
            }
            _ => None,
        };
        Ok(Self {
            audiences: if audiences.is_empty() {
                issuer.api_audiences.clone()
            } else {
                audiences
            },
            seconds: seconds.min(MAX_SECONDS),
            bound,
        })
    }
}

/// Issues a token of `issuer` for ServiceAccount `namespace/name` (uid `uid`), bound to `bound`
/// (the object's kind, name and uid) if given, at `now` (seconds since the epoch); answers the
/// completed TokenRequest.
#[allow(clippy::too_many_arguments)]
pub fn issue_at(
    key: &SigningKey,
    issuer: &TokenIssuer,
    namespace: &str,
    name: &str,
    uid: &str,
    spec: &TokenSpec,
    bound: Option<(&str, &str, &str)>,
    now: i64,
) -> Result<Value, TokenError> {
    let expires = now + spec.seconds;
    let object = |(n, u): (&str, &str)| BoundObject {
        name: n.to_owned(),
        uid: u.to_owned(),
    };
    let claims = Claims {
        iss: issuer.issuer.clone(),
        sub: format!("system:serviceaccount:{namespace}:{name}"),
        aud: spec.audiences.clone(),
        exp: expires,
        iat: now,
        nbf: now,
        jti: uuid::Uuid::new_v4().to_string(),
        kubernetes: KubernetesClaim {
            namespace: namespace.to_owned(),
            serviceaccount: object((name, uid)),
            pod: bound
                .filter(|(kind, _, _)| *kind == "Pod")
                .map(|(_, n, u)| object((n, u))),
            secret: bound
                .filter(|(kind, _, _)| *kind == "Secret")
                .map(|(_, n, u)| object((n, u))),
        },
    };
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    let token =
        jsonwebtoken::encode(&header, &claims, &key.encoding).map_err(|_| TokenError::Sign)?;
    let timestamp = |seconds: i64| {
        jiff::Timestamp::from_second(seconds)
            .map(|t| format!("{t:.0}"))
            .unwrap_or_default()
    };
    let bound_ref = match bound {
        Some((kind, bound_name, bound_uid)) => {
            json!({"kind": kind, "apiVersion": "v1", "name": bound_name, "uid": bound_uid})
        }
        None => Value::Null,
    };
    Ok(json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": timestamp(now)},
        "spec": {
            "audiences": spec.audiences,
            "expirationSeconds": spec.seconds,
            "boundObjectRef": bound_ref,
        },
        "status": {"token": token, "expirationTimestamp": timestamp(expires)},
    }))
}

/// Why a JWT is not a valid ServiceAccount token of this server (for the log; never the token).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Invalid {
    #[error("not a JWT signed by this server's ServiceAccount key")]
    Signature,
    #[error("issued by another issuer")]
    Issuer,
    #[error("expired")]
    Expired,
    #[error("not valid yet")]
    NotYetValid,
    #[error("not for this audience")]
    Audience,
    #[error("its subject does not match its ServiceAccount")]
    Subject,
}

/// Whether `token` looks like a JWT (three base64url parts), so other token kinds are told apart.
pub fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3 && parts.iter().take(2).all(|p| p.starts_with("ey"))
}

/// The claims of `token` if `key` signed it, its issuer is `issuer`'s, it is valid at `now`
/// (seconds since the epoch, within [`LEEWAY_SECONDS`]) and one of its audiences is in
/// `audiences`.
pub fn verify_at(
    key: &SigningKey,
    issuer: &TokenIssuer,
    token: &str,
    audiences: &[String],
    now: i64,
) -> Result<Claims, Invalid> {
    let mut validation = Validation::new(Algorithm::ES256);
    // Time and audience are checked below, against the caller's clock and audiences.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let claims = jsonwebtoken::decode::<Claims>(token, &key.decoding, &validation)
        .map_err(|_| Invalid::Signature)?
        .claims;
    if claims.iss != issuer.issuer {
        return Err(Invalid::Issuer);
    }
    if claims.exp + LEEWAY_SECONDS <= now {
        return Err(Invalid::Expired);
    }
    if claims.nbf - LEEWAY_SECONDS > now {
        return Err(Invalid::NotYetValid);
    }
    if !claims.aud.iter().any(|a| audiences.contains(a)) {
        return Err(Invalid::Audience);
    }
    let expected = format!(
        "system:serviceaccount:{}:{}",
        claims.kubernetes.namespace, claims.kubernetes.serviceaccount.name
    );
    if claims.sub != expected {
        return Err(Invalid::Subject);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn spec(request: Value) -> TokenSpec {
        TokenSpec::from_request(&request, &TokenIssuer::default()).unwrap()
    }

    fn token_of(issued: &Value) -> String {
        issued["status"]["token"].as_str().unwrap().to_owned()
    }

    #[test]
    fn tokens_are_es256_jwts_with_kubernetes_claims() {
        let key = SigningKey::generate().unwrap();
        let issued = issue_at(
            &key,
            &TokenIssuer::default(),
            "kube-system",
            "cilium",
            "u1",
            &spec(json!({"spec": {"boundObjectRef": {"kind": "Pod", "name": "p"}}})),
            Some(("Pod", "p", "pod-uid")),
            NOW,
        )
        .unwrap();
        let token = token_of(&issued);
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.alg, Algorithm::ES256);
        assert_eq!(header.kid.as_deref(), Some(key.kid()));
        let claims = verify_at(
            &key,
            &TokenIssuer::default(),
            &token,
            TokenIssuer::default().api_audiences(),
            NOW,
        )
        .unwrap();
        assert_eq!(claims.sub, "system:serviceaccount:kube-system:cilium");
        assert_eq!(claims.aud, [DEFAULT_ISSUER]);
        assert_eq!((claims.iat, claims.nbf, claims.exp), (NOW, NOW, NOW + 3600));
        assert_eq!(claims.kubernetes.serviceaccount.uid, "u1");
        assert_eq!(claims.kubernetes.pod.as_ref().unwrap().uid, "pod-uid");
        assert!(claims.kubernetes.secret.is_none());
        assert_eq!(issued["spec"]["expirationSeconds"], 3600);
        assert_eq!(issued["spec"]["boundObjectRef"]["uid"], "pod-uid");
        assert_eq!(
            issued["status"]["expirationTimestamp"],
            "2027-01-15T09:00:00Z"
        );
    }

    #[test]
    fn tokens_are_refused_past_expiry_for_other_audiences_or_keys_and_when_tampered() {
        let key = SigningKey::generate().unwrap();
        let issued = issue_at(
            &key,
            &TokenIssuer::default(),
            "team-a",
            "bot",
            "u1",
            &spec(json!({"spec": {"audiences": ["vault"], "expirationSeconds": 600}})),
            None,
            NOW,
        )
        .unwrap();
        let token = token_of(&issued);
        let vault = vec!["vault".to_owned()];
        assert!(verify_at(&key, &TokenIssuer::default(), &token, &vault, NOW).is_ok());
        // Valid until its expiry (and kube-apiserver's leeway), not a second longer.
        assert!(
            verify_at(
                &key,
                &TokenIssuer::default(),
                &token,
                &vault,
                NOW + 600 + LEEWAY_SECONDS - 1
            )
            .is_ok()
        );
        assert_eq!(
            verify_at(
                &key,
                &TokenIssuer::default(),
                &token,
                &vault,
                NOW + 600 + LEEWAY_SECONDS
            ),
            Err(Invalid::Expired)
        );
        assert_eq!(
            verify_at(
                &key,
                &TokenIssuer::default(),
                &token,
                &vault,
                NOW - LEEWAY_SECONDS - 1
            ),
            Err(Invalid::NotYetValid)
        );
        assert_eq!(
            verify_at(
                &key,
                &TokenIssuer::default(),
                &token,
                TokenIssuer::default().api_audiences(),
                NOW
            ),
            Err(Invalid::Audience)
        );
        let other = SigningKey::generate().unwrap();
        assert_eq!(
            verify_at(&other, &TokenIssuer::default(), &token, &vault, NOW),
            Err(Invalid::Signature)
        );
        // Another payload under the same signature.
        let parts: Vec<&str> = token.split('.').collect();
        let mut claims: Value = serde_json::from_slice(&b64().decode(parts[1]).unwrap()).unwrap();
        claims["kubernetes.io"]["serviceaccount"]["name"] = json!("admin");
        claims["sub"] = json!("system:serviceaccount:team-a:admin");
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            b64().encode(claims.to_string()),
            parts[2]
        );
        assert_eq!(
            verify_at(&key, &TokenIssuer::default(), &forged, &vault, NOW),
            Err(Invalid::Signature)
        );
        assert!(matches!(
            TokenSpec::from_request(
                &json!({"spec": {"expirationSeconds": 60}}),
                &TokenIssuer::default()
            ),
            Err(TokenError::TooShort(60))
        ));
        assert!(matches!(
            TokenSpec::from_request(
                &json!({"spec": {"boundObjectRef": {"kind": "Node", "name": "n"}}}),
                &TokenIssuer::default()
            ),
            Err(TokenError::BoundKind(_))
        ));
        assert_eq!(
            spec(json!({"spec": {"expirationSeconds": 999_999}})).seconds,
            MAX_SECONDS
        );
    }

    #[test]
    fn tokens_carry_the_configured_issuer_and_default_to_the_api_audiences() {
        let key = SigningKey::generate().unwrap();
        let issuer = TokenIssuer::new(
            "https://issuer.example.test",
            &["api-a".to_owned(), "api-b".to_owned(), "api-a".to_owned()],
        )
        .unwrap();
        assert_eq!(issuer.api_audiences(), ["api-a", "api-b"]);
        let issued = issue_at(&key, &issuer, "a", "b", "c", &spec_of(&issuer), None, NOW).unwrap();
        let token = token_of(&issued);
        let claims = verify_at(&key, &issuer, &token, issuer.api_audiences(), NOW).unwrap();
        assert_eq!(claims.iss, "https://issuer.example.test");
        assert_eq!(claims.aud, ["api-a", "api-b"]);
        // Another issuer's token is refused even with the same key and audience.
        let default = TokenIssuer::default();
        assert_eq!(
            verify_at(&key, &default, &token, issuer.api_audiences(), NOW),
            Err(Invalid::Issuer)
        );
        assert_eq!(
            issuer.openid_configuration()["jwks_uri"],
            "https://issuer.example.test/openid/v1/jwks"
        );
        // Without audiences, the issuer is the API audience.
        let alone = TokenIssuer::new("https://issuer.example.test", &[]).unwrap();
        assert_eq!(alone.api_audiences(), ["https://issuer.example.test"]);
        assert!(TokenIssuer::new("plain-identifier", &[]).is_ok());
        for bad in ["", "https://", "a b", "host:6443"] {
            assert!(
                matches!(TokenIssuer::new(bad, &[]), Err(TokenError::BadIssuer(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            TokenIssuer::new("https://x", &[String::new()]),
            Err(TokenError::BadAudience(_))
        ));
    }

    fn spec_of(issuer: &TokenIssuer) -> TokenSpec {
        TokenSpec::from_request(&json!({}), issuer).unwrap()
    }

    #[test]
    fn the_key_is_kept_owner_only_and_reloaded() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = SigningKey::load_or_create(dir.path()).unwrap();
        let path = dir.path().join(KEY_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = SigningKey::load_or_create(dir.path()).unwrap();
        assert_eq!(first.kid(), again.kid());
        assert_eq!(first.jwks(), again.jwks());
        assert!(!format!("{again:?}").contains("PRIVATE"));
        let issued = issue_at(
            &first,
            &TokenIssuer::default(),
            "a",
            "b",
            "c",
            &spec(json!({})),
            None,
            NOW,
        )
        .unwrap();
        assert!(
            verify_at(
                &again,
                &TokenIssuer::default(),
                &token_of(&issued),
                TokenIssuer::default().api_audiences(),
                NOW
            )
            .is_ok()
        );
        std::fs::write(&path, "not a key").unwrap();
        assert!(matches!(
            SigningKey::load_or_create(dir.path()),
            Err(TokenError::BadKey { .. })
        ));
    }
}
