//! Which certificate authorities a BMC's HTTPS certificate is checked against.
//!
//! BMCs mostly carry certificates from a site's own CA, or self-signed ones. A host's
//! `disableCertificateVerification` turns the check off for that host; [`TrustAnchors`] is the
//! better answer for a fleet: the system's CAs plus a bundle the operator names once
//! (`--bmc-ca-file`). The set is loaded once and shared, because reading the system store costs
//! milliseconds and a controller connects to every BMC on every reconcile.

use rustls::RootCertStore;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Why a CA bundle could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TrustAnchorsError {
    #[error("cannot read the CA bundle {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the CA bundle {path} is not PEM: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error(
        "the CA bundle {path} holds no usable CA certificate (expected PEM `BEGIN CERTIFICATE` blocks)"
    )]
    Empty { path: PathBuf },
}

/// The certificate authorities BMC certificates are verified against. Cheap to clone.
#[derive(Clone)]
pub struct TrustAnchors {
    roots: Arc<RootCertStore>,
    extra_bundle: Option<PathBuf>,
}

impl std::fmt::Debug for TrustAnchors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustAnchors")
            .field("certificates", &self.roots.len())
            .field("extra_bundle", &self.extra_bundle)
            .finish()
    }
}

impl Default for TrustAnchors {
    fn default() -> Self {
        Self::system()
    }
}

impl TrustAnchors {
    /// The system's CAs (honouring `SSL_CERT_FILE` / `SSL_CERT_DIR`), read on first use.
    pub fn system() -> Self {
        static SYSTEM: OnceLock<Arc<RootCertStore>> = OnceLock::new();
        let roots = SYSTEM.get_or_init(|| Arc::new(system_roots())).clone();
        Self {
            roots,
            extra_bundle: None,
        }
    }

    /// The system's CAs plus every certificate in the PEM bundle at `path`.
    pub fn with_bundle(path: &Path) -> Result<Self, TrustAnchorsError> {
        let pem = std::fs::read(path).map_err(|source| TrustAnchorsError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut roots = (*Self::system().roots).clone();
        let mut added = 0usize;
        for certificate in rustls_pemfile::certs(&mut pem.as_slice()) {
            let certificate = certificate.map_err(|e| TrustAnchorsError::Parse {
                path: path.to_owned(),
                reason: e.to_string(),
            })?;
            if roots.add(certificate).is_ok() {
                added += 1;
            }
        }
        if added == 0 {
            return Err(TrustAnchorsError::Empty {
                path: path.to_owned(),
            });
        }
        Ok(Self {
            roots: Arc::new(roots),
            extra_bundle: Some(path.to_owned()),
        })
    }

    /// The named bundle, when there is one (for messages: which CAs were tried).
    pub fn extra_bundle(&self) -> Option<&Path> {
        self.extra_bundle.as_deref()
    }

    pub(crate) fn roots(&self) -> Arc<RootCertStore> {
        self.roots.clone()
    }
}

fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::warn!(%error, "could not load a system CA certificate");
    }
    roots.add_parsable_certificates(native.certs);
    roots
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_missing_bundle_names_the_file() {
        let err = TrustAnchors::with_bundle(Path::new("/nonexistent/ca.pem")).unwrap_err();
        assert!(matches!(err, TrustAnchorsError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "just some text\n").unwrap();
        let err = TrustAnchors::with_bundle(&path).unwrap_err();
        assert!(matches!(err, TrustAnchorsError::Empty { .. }), "{err:?}");
        assert!(err.to_string().contains("BEGIN CERTIFICATE"), "{err}");
    }

    #[test]
    fn a_bundle_adds_its_certificates_to_the_system_ones() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, ca.pem()).unwrap();
        let anchors = TrustAnchors::with_bundle(&path).unwrap();
        assert_eq!(
            anchors.roots().len(),
            TrustAnchors::system().roots().len() + 1
        );
        assert_eq!(anchors.extra_bundle(), Some(path.as_path()));
    }
}
