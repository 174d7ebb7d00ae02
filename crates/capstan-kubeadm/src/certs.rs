//! The certificates of a kubeadm cluster and its admin kubeconfig, kept in the management cluster as
//! Cluster API keeps them.
//!
//! - Four Secrets per cluster, `<cluster>-ca` (cluster CA), `<cluster>-etcd` (etcd CA),
//!   `<cluster>-proxy` (front-proxy CA) and `<cluster>-sa` (service-account signing key pair: the
//!   public key PEM under `tls.crt`), each of type `cluster.x-k8s.io/secret` with keys `tls.crt` and
//!   `tls.key`, labelled with the cluster name and owned by whoever asked for them (the
//!   KubeadmControlPlane, or the Cluster when a bootstrap config generates them).
//! - [`lookup_or_generate`] reads them and creates only the missing ones; a Secret that exists is
//!   never regenerated (nodes already trust it). Two writers racing are settled by the API server's
//!   name conflict: the loser re-reads the winner's Secret.
//! - [`ensure_kubeconfig`] writes `<cluster>-kubeconfig` (key `value`): the API endpoint, the cluster
//!   CA and a `kubernetes-admin` client certificate (`O=system:masters`) signed by that CA, and
//!   renews it as Cluster API does: when the client certificate of a kubeconfig Secret the control
//!   plane owns has less than [`CLIENT_CERTIFICATE_RENEWAL`] (half its one-year validity) left, the
//!   Secret is rewritten with a new client certificate from the cluster CA. A kubeconfig Secret
//!   someone else owns (user-provided) is never touched. The old certificate is not revoked: it
//!   stays valid until it expires, so clients holding it keep working meanwhile.
//!
//! Keys are ECDSA P-256 (kubeadm, the API server and etcd accept them; the `ring` backend generates
//! no RSA keys). CAs are valid ten years and the admin client certificate one year, as kubeadm makes
//! them.

use base64::Engine;
use capstan_model::meta::LABEL_CLUSTER_NAME;
use capstan_runtime::Context;
use capstan_runtime::secrets::SecretCache;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData,
};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The Secret type Cluster API gives every Secret it writes.
pub const CLUSTER_SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// Key of a certificate (or of the service-account public key) in a certificate Secret.
pub const TLS_CRT: &str = "tls.crt";
/// Key of a private key in a certificate Secret.
pub const TLS_KEY: &str = "tls.key";
/// Key of the kubeconfig in `<cluster>-kubeconfig`.
pub const KUBECONFIG_VALUE: &str = "value";

/// How long an admin client certificate is valid (as kubeadm makes them).
pub const CLIENT_CERTIFICATE_VALIDITY: jiff::SignedDuration =
    jiff::SignedDuration::from_secs(365 * 24 * 3600);
/// A kubeconfig's client certificate is renewed when less than this is left of it: half its
/// validity, as Cluster API's `ClientCertificateRenewalDuration`.
pub const CLIENT_CERTIFICATE_RENEWAL: jiff::SignedDuration =
    jiff::SignedDuration::from_secs(365 * 24 * 3600 / 2);

/// Why certificates or the kubeconfig could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(
        "Secret {namespace}/{name} does not hold a usable kubeconfig ({reason}); delete it to have it regenerated"
    )]
    BadKubeconfig {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("generating the {what}")]
    Generate {
        what: &'static str,
        source: rcgen::Error,
    },
    #[error("Secret {namespace}/{name} has no key `{key}`; delete it to have it regenerated")]
    MissingKey {
        namespace: String,
        name: String,
        key: &'static str,
    },
    #[error(
        "Secret {namespace}/{name} does not hold a usable key pair; replace it or delete it to have it regenerated"
    )]
    BadKeyPair {
        namespace: String,
        name: String,
        source: rcgen::Error,
    },
    #[error("{verb} Secret {namespace}/{name}")]
    Api {
        verb: &'static str,
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
}

/// One of a cluster's certificate Secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The cluster CA (`/etc/kubernetes/pki/ca.*`).
    ClusterCa,
    /// The etcd CA (`/etc/kubernetes/pki/etcd/ca.*`).
    EtcdCa,
    /// The front-proxy CA (`/etc/kubernetes/pki/front-proxy-ca.*`).
    FrontProxyCa,
    /// The service-account signing key pair (`/etc/kubernetes/pki/sa.{pub,key}`).
    ServiceAccount,
}

impl Purpose {
    /// All four, in the order nodes get them.
    pub const ALL: [Purpose; 4] = [
        Self::ClusterCa,
        Self::EtcdCa,
        Self::FrontProxyCa,
        Self::ServiceAccount,
    ];

    /// The Secret name suffix Cluster API uses.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::ClusterCa => "ca",
            Self::EtcdCa => "etcd",
            Self::FrontProxyCa => "proxy",
            Self::ServiceAccount => "sa",
        }
    }

    /// The name of this Secret for `cluster`.
    pub fn secret_name(self, cluster: &str) -> String {
        format!("{cluster}-{}", self.suffix())
    }

    /// Where kubeadm expects the certificate (or public key) and the private key on a node.
    pub fn node_paths(self) -> (&'static str, &'static str) {
        match self {
            Self::ClusterCa => ("/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki/ca.key"),
            Self::EtcdCa => (
                "/etc/kubernetes/pki/etcd/ca.crt",
                "/etc/kubernetes/pki/etcd/ca.key",
            ),
            Self::FrontProxyCa => (
                "/etc/kubernetes/pki/front-proxy-ca.crt",
                "/etc/kubernetes/pki/front-proxy-ca.key",
            ),
            Self::ServiceAccount => ("/etc/kubernetes/pki/sa.pub", "/etc/kubernetes/pki/sa.key"),
        }
    }

    fn common_name(self) -> &'static str {
        match self {
            Self::ClusterCa => "kubernetes",
            Self::EtcdCa => "etcd-ca",
            Self::FrontProxyCa => "front-proxy-ca",
            Self::ServiceAccount => "service-accounts",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::ClusterCa => "cluster CA",
            Self::EtcdCa => "etcd CA",
            Self::FrontProxyCa => "front-proxy CA",
            Self::ServiceAccount => "service-account key pair",
        }
    }
}

/// A certificate (or public key) and its private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyMaterial {
    /// The certificate PEM (the public key PEM for the service-account pair).
    pub cert: String,
    /// The private key PEM.
    pub key: String,
}

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyMaterial")
            .field("cert", &self.cert)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// The four key pairs of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCertificates {
    pub cluster_ca: KeyMaterial,
    pub etcd_ca: KeyMaterial,
    pub front_proxy_ca: KeyMaterial,
    pub service_account: KeyMaterial,
}

impl ClusterCertificates {
    /// The key pair for `purpose`.
    pub fn get(&self, purpose: Purpose) -> &KeyMaterial {
        match purpose {
            Purpose::ClusterCa => &self.cluster_ca,
            Purpose::EtcdCa => &self.etcd_ca,
            Purpose::FrontProxyCa => &self.front_proxy_ca,
            Purpose::ServiceAccount => &self.service_account,
        }
    }

    /// The discovery hash of the cluster CA (`sha256:<hex>` of its SubjectPublicKeyInfo), which
    /// joining nodes pin with `caCertHashes`.
    pub fn ca_cert_hash(&self, cluster: &str, namespace: &str) -> Result<String, CertError> {
        ca_cert_hash(
            &self.cluster_ca,
            &Purpose::ClusterCa.secret_name(cluster),
            namespace,
        )
    }
}

/// `sha256:<hex>` of the SubjectPublicKeyInfo of `ca`'s key (the certificate's public key).
pub fn ca_cert_hash(ca: &KeyMaterial, secret: &str, namespace: &str) -> Result<String, CertError> {
    let key = KeyPair::from_pem(&ca.key).map_err(|source| CertError::BadKeyPair {
        namespace: namespace.to_owned(),
        name: secret.to_owned(),
        source,
    })?;
    let digest = Sha256::digest(key.subject_public_key_info());
    Ok(format!("sha256:{}", hex(&digest)))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// Generates the key pair for `purpose`: a self-signed CA, or a bare key pair for service accounts.
pub fn generate(purpose: Purpose) -> Result<KeyMaterial, CertError> {
    let generate_error = |source| CertError::Generate {
        what: purpose.describe(),
        source,
    };
    let key = KeyPair::generate().map_err(generate_error)?;
    if purpose == Purpose::ServiceAccount {
        return Ok(KeyMaterial {
            cert: key.public_key_pem(),
            key: key.serialize_pem(),
        });
    }
    let mut params = ca_params(purpose.common_name());
    set_validity(&mut params, jiff::Timestamp::now(), 10);
    let cert = params.self_signed(&key).map_err(generate_error)?;
    Ok(KeyMaterial {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    params
}

/// The day (UTC) certificates issued at `now` start being valid: the day before, so a node whose
/// clock is slightly behind accepts them.
fn validity_start(now: jiff::Timestamp) -> (i32, u8, u8) {
    ymd(now - jiff::SignedDuration::from_hours(24))
}

/// The day (UTC) `years` after `now`.
fn validity_end(now: jiff::Timestamp, years: i64) -> (i32, u8, u8) {
    let end = now
        .to_zoned(jiff::tz::TimeZone::UTC)
        .checked_add(jiff::Span::new().years(years))
        .map_or(now, |z| z.timestamp());
    ymd(end)
}

fn ymd(at: jiff::Timestamp) -> (i32, u8, u8) {
    let date = at.to_zoned(jiff::tz::TimeZone::UTC).date();
    #[allow(clippy::cast_sign_loss)]
    (i32::from(date.year()), date.month() as u8, date.day() as u8)
}

fn set_validity(params: &mut CertificateParams, now: jiff::Timestamp, years: i64) {
    let (y, m, d) = validity_start(now);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = validity_end(now, years);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

/// A client certificate for `common_name` in `organization`, signed by `ca`, valid one year from
/// now.
pub fn client_certificate(
    ca: &KeyMaterial,
    common_name: &str,
    organization: Option<&str>,
) -> Result<KeyMaterial, CertError> {
    client_certificate_issued_at(ca, common_name, organization, jiff::Timestamp::now())
}

/// [`client_certificate`] as if issued at `issued` (valid from the day before to a year after).
pub fn client_certificate_issued_at(
    ca: &KeyMaterial,
    common_name: &str,
    organization: Option<&str>,
    issued: jiff::Timestamp,
) -> Result<KeyMaterial, CertError> {
    let generate_error = |source| CertError::Generate {
        what: "client certificate",
        source,
    };
    let ca_key = KeyPair::from_pem(&ca.key).map_err(generate_error)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key).map_err(generate_error)?;
    let key = KeyPair::generate().map_err(generate_error)?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    if let Some(organization) = organization {
        name.push(DnType::OrganizationName, organization);
    }
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, issued, 1);
    let cert = params.signed_by(&key, &issuer).map_err(generate_error)?;
    Ok(KeyMaterial {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn api_error(
    verb: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> CertError {
    let namespace = namespace.to_owned();
    let name = name.to_owned();
    move |source| CertError::Api {
        verb,
        namespace,
        name,
        source: Box::new(source),
    }
}

fn is_already_exists(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.is_already_exists())
}

fn secret_value<'a>(
    secret: &'a Secret,
    key: &'static str,
    namespace: &str,
) -> Result<&'a [u8], CertError> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| v.0.as_slice())
        .ok_or_else(|| CertError::MissingKey {
            namespace: namespace.to_owned(),
            name: secret.name_any(),
            key,
        })
}

/// The key pair a certificate Secret (`tls.crt`, `tls.key`) holds, its key checked to parse.
pub fn key_material(secret: &Secret, namespace: &str) -> Result<KeyMaterial, CertError> {
    let text = |key| {
        secret_value(secret, key, namespace)
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
    };
    let material = KeyMaterial {
        cert: text(TLS_CRT)?,
        key: text(TLS_KEY)?,
    };
    KeyPair::from_pem(&material.key).map_err(|source| CertError::BadKeyPair {
        namespace: namespace.to_owned(),
        name: secret.name_any(),
        source,
    })?;
    Ok(material)
}

/// A `cluster.x-k8s.io/secret` for `cluster`, owned by `owner`.
pub fn cluster_secret(
    name: &str,
    namespace: &str,
    cluster: &str,
    owner: Option<OwnerReference>,
    data: BTreeMap<String, Vec<u8>>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                LABEL_CLUSTER_NAME.to_owned(),
                cluster.to_owned(),
            )])),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        type_: Some(CLUSTER_SECRET_TYPE.to_owned()),
        data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
        ..Secret::default()
    }
}

/// Creates `secret` unless one of its name exists; returns the Secret that is there afterwards.
pub async fn create_or_get(api: &Api<Secret>, secret: &Secret) -> Result<Secret, CertError> {
    let name = secret.name_any();
    let namespace = secret.namespace().unwrap_or_default();
    match api.create(&PostParams::default(), secret).await {
        Ok(created) => Ok(created),
        Err(e) if is_already_exists(&e) => api
            .get(&name)
            .await
            .map_err(api_error("reading", &namespace, &name)),
        Err(e) => Err(api_error("creating", &namespace, &name)(e)),
    }
}

/// Reads the certificate Secrets of `cluster`; `None` when any is missing.
pub async fn lookup(
    secrets: &SecretCache,
    namespace: &str,
    cluster: &str,
) -> Result<Option<ClusterCertificates>, CertError> {
    let mut found = Vec::with_capacity(4);
    for purpose in Purpose::ALL {
        let name = purpose.secret_name(cluster);
        match secrets
            .get(namespace, &name)
            .await
            .map_err(api_error("reading", namespace, &name))?
        {
            Some(secret) => found.push(key_material(&secret, namespace)?),
            None => return Ok(None),
        }
    }
    Ok(assemble(found))
}

fn assemble(found: Vec<KeyMaterial>) -> Option<ClusterCertificates> {
    let mut found = found.into_iter();
    Some(ClusterCertificates {
        cluster_ca: found.next()?,
        etcd_ca: found.next()?,
        front_proxy_ca: found.next()?,
        service_account: found.next()?,
    })
}

/// Reads the certificate Secrets of `cluster`, generating (owned by `owner`) those that are missing.
/// Existing Secrets are never replaced (so they are read from `secrets`' memory).
pub async fn lookup_or_generate(
    client: &Client,
    secrets: &SecretCache,
    namespace: &str,
    cluster: &str,
    owner: Option<OwnerReference>,
) -> Result<ClusterCertificates, CertError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut found = Vec::with_capacity(4);
    for purpose in Purpose::ALL {
        let name = purpose.secret_name(cluster);
        let secret = match secrets
            .get(namespace, &name)
            .await
            .map_err(api_error("reading", namespace, &name))?
        {
            Some(secret) => secret,
            None => {
                let material = generate(purpose)?;
                let secret = cluster_secret(
                    &name,
                    namespace,
                    cluster,
                    owner.clone(),
                    BTreeMap::from([
                        (TLS_CRT.to_owned(), material.cert.into_bytes()),
                        (TLS_KEY.to_owned(), material.key.into_bytes()),
                    ]),
                );
                let created = create_or_get(&api, &secret).await?;
                secrets.observe(&created);
                tracing::info!(namespace, cluster, secret = %name, "generated the {}", purpose.describe());
                Arc::new(created)
            }
        };
        found.push(key_material(&secret, namespace)?);
    }
    // Four were pushed.
    assemble(found).ok_or_else(|| CertError::MissingKey {
        namespace: namespace.to_owned(),
        name: Purpose::ClusterCa.secret_name(cluster),
        key: TLS_CRT,
    })
}

/// The admin kubeconfig of `cluster`: API server `server`, trusting `ca`, authenticating with
/// `client`.
pub fn kubeconfig(cluster: &str, server: &str, ca: &KeyMaterial, client: &KeyMaterial) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let user = format!("{cluster}-admin");
    let context = format!("{user}@{cluster}");
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: {server}
    certificate-authority-data: {ca}
contexts:
- name: {context}
  context:
    cluster: {cluster}
    user: {user}
current-context: {context}
preferences: {{}}
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
",
        ca = b64(&ca.cert),
        cert = b64(&client.cert),
        key = b64(&client.key),
    )
}

/// `https://host:port`, bracketing IPv6 addresses.
pub fn server_url(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    }
}

/// When the certificate in `pem` (the first PEM block) expires.
pub fn certificate_expiry(pem: &[u8]) -> Result<jiff::Timestamp, String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|e| format!("the certificate is not PEM ({e})"))?;
    let certificate = block
        .parse_x509()
        .map_err(|e| format!("the certificate is not X.509 ({e})"))?;
    jiff::Timestamp::from_second(certificate.validity().not_after.timestamp())
        .map_err(|e| format!("the certificate's notAfter is out of range ({e})"))
}

/// When the first of a kubeconfig's client certificates expires; `None` when it authenticates
/// without one (a token). The error says what is wrong without quoting the kubeconfig.
pub fn kubeconfig_client_expiry(bytes: &[u8]) -> Result<Option<jiff::Timestamp>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())?;
    let config = kube::config::Kubeconfig::from_yaml(text)
        .map_err(|e| format!("it is not a kubeconfig ({e})"))?;
    let mut earliest: Option<jiff::Timestamp> = None;
    for user in &config.auth_infos {
        let Some(data) = user
            .auth_info
            .as_ref()
            .and_then(|a| a.client_certificate_data.as_deref())
        else {
            continue;
        };
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|_| format!("user {}: client-certificate-data is not base64", user.name))?;
        let expiry = certificate_expiry(&pem).map_err(|e| format!("user {}: {e}", user.name))?;
        earliest = Some(earliest.map_or(expiry, |e| e.min(expiry)));
    }
    Ok(earliest)
}

/// Whether a client certificate expiring at `expiry` is due for renewal at `now`.
pub fn renewal_due(expiry: jiff::Timestamp, now: jiff::Timestamp) -> bool {
    expiry.duration_since(now) < CLIENT_CERTIFICATE_RENEWAL
}

/// What [`ensure_kubeconfig`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeconfigOutcome {
    /// Written now (it did not exist); its client certificate expires then.
    Created { expires: jiff::Timestamp },
    /// Kept; its client certificate expires then (`None`: it has none).
    Kept { expires: Option<jiff::Timestamp> },
    /// Its client certificate was due for renewal and was replaced.
    Renewed {
        previous: jiff::Timestamp,
        expires: jiff::Timestamp,
    },
    /// Someone else owns it (a user-provided kubeconfig): never renewed.
    NotOwned,
}

/// Whether `secret` is owned by a KubeadmControlPlane (so renewing it is ours to do).
fn owned_by_control_plane(secret: &Secret) -> bool {
    secret
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| {
            o.kind == "KubeadmControlPlane"
                && o.api_version.starts_with("controlplane.cluster.x-k8s.io/")
        })
}

/// Writes `<cluster>-kubeconfig` unless it exists, and renews the client certificate of one the
/// control plane owns when it is due at `now` ([`renewal_due`]): the Secret is rewritten (guarded
/// by its resourceVersion) with the same server and a new client certificate signed by `ca`.
pub async fn ensure_kubeconfig(
    context: &Context,
    namespace: &str,
    cluster: &str,
    server: &str,
    ca: &KeyMaterial,
    owner: Option<OwnerReference>,
    now: jiff::Timestamp,
) -> Result<KubeconfigOutcome, CertError> {
    let (client, secrets) = (context.client(), context.secrets());
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = format!("{cluster}-kubeconfig");
    // From memory: a renewal is guarded by the resourceVersion read, so an older copy only costs a
    // conflict and a retry.
    let existing = secrets
        .get(namespace, &name)
        .await
        .map_err(api_error("reading", namespace, &name))?;
    let issue = || -> Result<(KeyMaterial, jiff::Timestamp), CertError> {
        let admin =
            client_certificate_issued_at(ca, "kubernetes-admin", Some("system:masters"), now)?;
        let expires = certificate_expiry(admin.cert.as_bytes()).map_err(|reason| {
            CertError::BadKubeconfig {
                namespace: namespace.to_owned(),
                name: name.clone(),
                reason,
            }
        })?;
        Ok((admin, expires))
    };
    let Some(existing) = existing else {
        let (admin, expires) = issue()?;
        let secret = cluster_secret(
            &name,
            namespace,
            cluster,
            owner,
            BTreeMap::from([(
                KUBECONFIG_VALUE.to_owned(),
                kubeconfig(cluster, server, ca, &admin).into_bytes(),
            )]),
        );
        secrets.observe(&create_or_get(&api, &secret).await?);
        tracing::info!(namespace, cluster, secret = %name, "wrote the admin kubeconfig");
        return Ok(KubeconfigOutcome::Created { expires });
    };
    if !owned_by_control_plane(&existing) {
        return Ok(KubeconfigOutcome::NotOwned);
    }
    let bytes = secret_value(&existing, KUBECONFIG_VALUE, namespace)?;
    let bad = |reason| CertError::BadKubeconfig {
        namespace: namespace.to_owned(),
        name: name.clone(),
        reason,
    };
    let Some(previous) = kubeconfig_client_expiry(bytes).map_err(bad)? else {
        return Ok(KubeconfigOutcome::Kept { expires: None });
    };
    if !renewal_due(previous, now) {
        return Ok(KubeconfigOutcome::Kept {
            expires: Some(previous),
        });
    }
    let (admin, expires) = issue()?;
    let value = kubeconfig(cluster, server, ca, &admin);
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": existing.metadata.resource_version},
        "data": {KUBECONFIG_VALUE: base64::engine::general_purpose::STANDARD.encode(value)},
    });
    let renewed = api
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(api_error("renewing", namespace, &name))?;
    secrets.observe(&renewed);
    tracing::info!(namespace, cluster, secret = %name, previous = %previous, expires = %expires, "renewed the admin kubeconfig's client certificate");
    Ok(KubeconfigOutcome::Renewed { previous, expires })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_renewal_is_due_with_half_a_year_left() {
        let ca = generate(Purpose::ClusterCa).unwrap();
        let issued: jiff::Timestamp = "2026-03-10T12:00:00Z".parse().unwrap();
        let admin =
            client_certificate_issued_at(&ca, "kubernetes-admin", Some("system:masters"), issued)
                .unwrap();
        let text = kubeconfig("c", "https://192.0.2.10:6443", &ca, &admin);
        let expires = kubeconfig_client_expiry(text.as_bytes()).unwrap().unwrap();
        assert_eq!(expires, "2027-03-10T00:00:00Z".parse().unwrap());
        let day = jiff::SignedDuration::from_hours(24);
        assert!(!renewal_due(expires, issued));
        // 184.5 days left: kept; 181.5 days left: renewed (the line is 182.5 days).
        assert!(!renewal_due(expires, issued + day * 180));
        assert!(renewal_due(expires, issued + day * 183));
        assert!(renewal_due(expires, expires + day));
    }

    #[test]
    fn kubeconfig_expiry_reads_every_user_and_never_echoes_the_kubeconfig() {
        let ca = generate(Purpose::ClusterCa).unwrap();
        let early =
            client_certificate_issued_at(&ca, "a", None, "2026-01-01T00:00:00Z".parse().unwrap())
                .unwrap();
        let late = client_certificate(&ca, "b", None).unwrap();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let two_users = format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: a\n  user:\n    client-certificate-data: {}\n- name: b\n  user:\n    client-certificate-data: {}\n- name: t\n  user:\n    token: hunter2\n",
            b64(&late.cert),
            b64(&early.cert)
        );
        assert_eq!(
            kubeconfig_client_expiry(two_users.as_bytes()).unwrap(),
            "2027-01-01T00:00:00Z".parse().ok()
        );
        let token_only =
            "apiVersion: v1\nkind: Config\nusers:\n- name: t\n  user:\n    token: hunter2\n";
        assert_eq!(
            kubeconfig_client_expiry(token_only.as_bytes()).unwrap(),
            None
        );
        let broken = "apiVersion: v1\nkind: Config\nusers:\n- name: t\n  user:\n    client-certificate-data: aHVudGVyMg==\n";
        let err = kubeconfig_client_expiry(broken.as_bytes()).unwrap_err();
        assert!(
            !err.contains("hunter2") && !err.contains("aHVudGVyMg"),
            "{err}"
        );
    }

    #[test]
    fn key_material_debug_hides_the_key() {
        let material = KeyMaterial {
            cert: "CERT".into(),
            key: "SECRET".into(),
        };
        assert!(!format!("{material:?}").contains("SECRET"));
    }

    #[test]
    fn server_url_brackets_ipv6() {
        assert_eq!(server_url("192.0.2.1", 6443), "https://192.0.2.1:6443");
        assert_eq!(server_url("fd00::1", 6443), "https://[fd00::1]:6443");
        assert_eq!(server_url("cp.example", 443), "https://cp.example:443");
    }

    fn openssl(args: &[&str], dir: &std::path::Path) -> String {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is installed");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn cas_are_cas_and_client_certificates_chain_to_them() {
        let dir = tempfile::tempdir().unwrap();
        let ca = generate(Purpose::ClusterCa).unwrap();
        let other_ca = generate(Purpose::EtcdCa).unwrap();
        let client = client_certificate(&ca, "kubernetes-admin", Some("system:masters")).unwrap();
        std::fs::write(dir.path().join("ca.crt"), &ca.cert).unwrap();
        std::fs::write(dir.path().join("other.crt"), &other_ca.cert).unwrap();
        std::fs::write(dir.path().join("client.crt"), &client.cert).unwrap();
        std::fs::write(dir.path().join("client.key"), &client.key).unwrap();

        let text = openssl(&["x509", "-in", "ca.crt", "-noout", "-text"], dir.path());
        assert!(text.contains("CA:TRUE"), "{text}");
        assert!(text.contains("Certificate Sign"), "{text}");
        assert!(
            text.contains("CN=kubernetes") || text.contains("CN = kubernetes"),
            "{text}"
        );
        let verified = openssl(
            &[
                "verify",
                "-CAfile",
                "ca.crt",
                "-purpose",
                "sslclient",
                "client.crt",
            ],
            dir.path(),
        );
        assert!(verified.contains("client.crt: OK"), "{verified}");
        let refused = std::process::Command::new("openssl")
            .args(["verify", "-CAfile", "other.crt", "client.crt"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(!refused.status.success(), "a foreign CA must not verify it");
        let subject = openssl(
            &["x509", "-in", "client.crt", "-noout", "-subject"],
            dir.path(),
        );
        assert!(
            subject.contains("system:masters") && subject.contains("kubernetes-admin"),
            "{subject}"
        );
        // The key is the certificate's.
        let cert_key = openssl(
            &["x509", "-in", "client.crt", "-noout", "-pubkey"],
            dir.path(),
        );
        let key_pub = openssl(&["pkey", "-in", "client.key", "-pubout"], dir.path());
        assert_eq!(cert_key, key_pub);
        // Ten years for CAs, one for the client.
        let dates = openssl(&["x509", "-in", "ca.crt", "-noout", "-enddate"], dir.path());
        let year = jiff::Timestamp::now()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .year()
            + 10;
        assert!(dates.contains(&year.to_string()), "{dates}");
    }

    #[test]
    fn service_account_pair_matches_and_ca_hash_is_stable() {
        let dir = tempfile::tempdir().unwrap();
        let sa = generate(Purpose::ServiceAccount).unwrap();
        std::fs::write(dir.path().join("sa.key"), &sa.key).unwrap();
        let derived = openssl(&["pkey", "-in", "sa.key", "-pubout"], dir.path());
        assert_eq!(derived.trim(), sa.cert.trim());

        let ca = generate(Purpose::ClusterCa).unwrap();
        std::fs::write(dir.path().join("ca.crt"), &ca.cert).unwrap();
        // kubeadm's discovery hash: sha256 of the certificate's SubjectPublicKeyInfo.
        let spki = std::process::Command::new("sh")
            .arg("-c")
            .arg("openssl x509 -in ca.crt -noout -pubkey | openssl pkey -pubin -outform DER | openssl dgst -sha256 -hex")
            .current_dir(dir.path())
            .output()
            .unwrap();
        let expected = String::from_utf8_lossy(&spki.stdout);
        let hash = ca_cert_hash(&ca, "c-ca", "ns").unwrap();
        assert!(
            expected
                .trim()
                .ends_with(hash.trim_start_matches("sha256:")),
            "{expected} vs {hash}"
        );
    }
}
