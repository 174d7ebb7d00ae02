//! Certificates and credentials of the embedded API server: a CA and a serving certificate generated on
//! first start, an admin bearer token, an admin client certificate, and the admin kubeconfig. Everything
//! is written with owner-only permissions and reused on later starts.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// TLS sessions a server remembers for resumption: rustls's own default.
pub const SESSION_CACHE: usize = 256;

/// Why credentials could not be created or loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("generating a certificate")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration")]
    Rustls(#[from] rustls::Error),
    #[error("{path} holds no usable PEM {what}")]
    Pem { path: PathBuf, what: &'static str },
    #[error("client certificate verifier")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// The server's credentials, as files under `<data-dir>/pki`.
pub struct Credentials {
    pub ca_cert_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    pub admin_token: String,
}

fn write_private(path: &Path, contents: &str) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

fn read(path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Creates a directory readable by its owner only (0700, from the start). An existing directory
/// keeps its mode: if other users may read it, that is reported, never changed silently.
pub fn create_private_dir(path: &Path) -> Result<(), TlsError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let io = |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.is_dir() {
        let mode = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{mode:o}"),
                "this directory holds keys and Secrets but other users may open it; `chmod 700` it"
            );
        }
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(io)
}

impl Credentials {
    /// Loads the credentials from `pki_dir`, generating whatever is missing. `hosts` are the names and
    /// addresses the serving certificate must be valid for (loopback is always included).
    pub fn load_or_create(pki_dir: &Path, hosts: &[String]) -> Result<Self, TlsError> {
        create_private_dir(pki_dir)?;
        let ca_cert = pki_dir.join("ca.crt");
        let ca_key = pki_dir.join("ca.key");
        if !ca_cert.exists() || !ca_key.exists() {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.distinguished_name = name("capstan-ca");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            params.not_after = rcgen::date_time_ymd(2036, 1, 1);
            let cert = params.self_signed(&key)?;
            write_private(&ca_key, &key.serialize_pem())?;
            write_private(&ca_cert, &cert.pem())?;
        }
        let ca_cert_pem = read(&ca_cert)?;
        let ca_key_pair = KeyPair::from_pem(&read(&ca_key)?)?;
        let issuer = Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key_pair)?;

        let server_cert = pki_dir.join("server.crt");
        let server_key = pki_dir.join("server.key");
        let mut sans: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        sans.extend(hosts.iter().cloned());
        let sans_file = pki_dir.join("server.sans");
        let wanted = sans.join(",");
        let current = std::fs::read_to_string(&sans_file).unwrap_or_default();
        if !server_cert.exists() || !server_key.exists() || current != wanted {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.distinguished_name = name("capstan-apiserver");
            params.subject_alt_names = sans
                .iter()
                .map(|h| match h.parse::<IpAddr>() {
                    Ok(ip) => Ok(SanType::IpAddress(ip)),
                    Err(_) => h.clone().try_into().map(SanType::DnsName),
                })
                .collect::<Result<_, _>>()?;
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            params.not_after = rcgen::date_time_ymd(2036, 1, 1);
            let cert = params.signed_by(&key, &issuer)?;
            write_private(&server_key, &key.serialize_pem())?;
            write_private(&server_cert, &cert.pem())?;
            write_private(&sans_file, &wanted)?;
        }

        let admin_cert = pki_dir.join("admin.crt");
        let admin_key = pki_dir.join("admin.key");
        if !admin_cert.exists() || !admin_key.exists() {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            let mut dn = name("capstan-admin");
            dn.push(DnType::OrganizationName, "system:masters");
            params.distinguished_name = dn;
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.not_after = rcgen::date_time_ymd(2036, 1, 1);
            let cert = params.signed_by(&key, &issuer)?;
            write_private(&admin_key, &key.serialize_pem())?;
            write_private(&admin_cert, &cert.pem())?;
        }

        let token_file = pki_dir.join("admin.token");
        if !token_file.exists() {
            use rand::Rng;
            let bytes: [u8; 32] = rand::rng().random();
            let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            write_private(&token_file, &token)?;
        }

        Ok(Self {
            ca_cert_pem,
            server_cert_pem: read(&server_cert)?,
            server_key_pem: read(&server_key)?,
            admin_cert_pem: read(&admin_cert)?,
            admin_key_pem: read(&admin_key)?,
            admin_token: read(&token_file)?.trim().to_owned(),
        })
    }

    /// The rustls server configuration: our serving certificate, and client certificates signed by our
    /// CA accepted but not required (bearer tokens are the other way in).
    pub fn server_config(&self, pki_dir: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        self.server_config_with_sessions(pki_dir, SESSION_CACHE)
    }

    /// [`Self::server_config`] remembering at most `sessions` TLS sessions for resumption (the
    /// cache is allocated whole: a server few clients reach keeps a small one).
    pub fn server_config_with_sessions(
        &self,
        pki_dir: &Path,
        sessions: usize,
    ) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = rustls_pemfile::certs(&mut self.server_cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| TlsError::Io {
                path: pki_dir.join("server.crt"),
                source,
            })?;
        let key = rustls_pemfile::private_key(&mut self.server_key_pem.as_bytes())
            .map_err(|source| TlsError::Io {
                path: pki_dir.join("server.key"),
                source,
            })?
            .ok_or_else(|| TlsError::Pem {
                path: pki_dir.join("server.key"),
                what: "private key",
            })?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in rustls_pemfile::certs(&mut self.ca_cert_pem.as_bytes()) {
            let ca = ca.map_err(|source| TlsError::Io {
                path: pki_dir.join("ca.crt"),
                source,
            })?;
            roots.add(ca)?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.session_storage = rustls::server::ServerSessionMemoryCache::new(sessions);
        Ok(Arc::new(config))
    }

    /// The admin kubeconfig for a server at `server_url`, authenticating with the bearer token.
    pub fn admin_kubeconfig(&self, server_url: &str) -> String {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: capstan\n  cluster:\n    server: {server_url}\n    certificate-authority-data: {ca}\nusers:\n- name: capstan-admin\n  user:\n    token: {token}\ncontexts:\n- name: capstan\n  context:\n    cluster: capstan\n    user: capstan-admin\n    namespace: default\ncurrent-context: capstan\n",
            ca = b64(&self.ca_cert_pem),
            token = self.admin_token,
        )
    }

    /// Writes the admin kubeconfig with owner-only permissions.
    pub fn write_kubeconfig(&self, path: &Path, server_url: &str) -> Result<(), TlsError> {
        write_private(path, &self.admin_kubeconfig(server_url))
    }
}

/// Issues a client certificate for user `user` in `groups` (subject CN and O, as kube-apiserver
/// reads them), signed by the CA in `pki_dir`, valid for `days`. Answers the certificate and key
/// in PEM. What the user may do is up to RBAC.
pub fn issue_client_certificate(
    pki_dir: &Path,
    user: &str,
    groups: &[String],
    days: i64,
) -> Result<(String, String), TlsError> {
    let ca_cert_pem = read(&pki_dir.join("ca.crt"))?;
    let ca_key = KeyPair::from_pem(&read(&pki_dir.join("ca.key"))?)?;
    let issuer = Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = name(user);
    for group in groups {
        dn.push(DnType::OrganizationName, group.as_str());
    }
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let until = jiff::Zoned::now()
        .date()
        .checked_add(jiff::Span::new().days(days.clamp(1, 3650)))
        .unwrap_or(jiff::civil::date(2036, 1, 1));
    params.not_after = rcgen::date_time_ymd(
        i32::from(until.year()),
        u8::try_from(until.month()).unwrap_or(1),
        u8::try_from(until.day()).unwrap_or(1),
    );
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A kubeconfig for `server_url` that authenticates with a client certificate.
pub fn certificate_kubeconfig(
    server_url: &str,
    ca_cert_pem: &str,
    user: &str,
    cert_pem: &str,
    key_pem: &str,
    namespace: &str,
) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: capstan\n  cluster:\n    server: {server_url}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: {user}@capstan\n  context:\n    cluster: capstan\n    user: {user}\n    namespace: {namespace}\ncurrent-context: {user}@capstan\n",
        ca = b64(ca_cert_pem),
        cert = b64(cert_pem),
        key = b64(key_pem),
    )
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_directory_is_owner_only_and_an_existing_one_keeps_its_mode() {
        let root = tempfile::tempdir().unwrap();
        let fresh = root.path().join("a/b");
        create_private_dir(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o700);
        let shared = root.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&shared).unwrap();
        assert_eq!(
            mode(&shared),
            0o755,
            "an existing directory is never re-moded silently"
        );
        let creds = Credentials::load_or_create(&shared.join("pki"), &[]).unwrap();
        assert!(!creds.admin_token.is_empty());
        assert_eq!(mode(&shared.join("pki")), 0o700);
        assert_eq!(mode(&shared.join("pki/ca.key")), 0o600);
    }
}
