//! Base images: read from `file://`, `http://` or `https://` URLs and streamed into a pool,
//! verified as they pass.
//!
//! [`open`] starts reading an image and says how long it is (a pool volume is created at its
//! size before the first byte is sent); [`pump`] then passes its bytes on as [`Chunk`]s, hashing
//! each one, and ends with [`Chunk::Done`] only when the whole image arrived and its digest is the
//! one the spec gives — otherwise with [`Chunk::Failed`], and the driver deletes the volume, so a
//! volume under a base image's name is always a verified image. Nothing is buffered beyond one
//! chunk in flight and a few queued.
//!
//! Images larger than the limit are refused before anything is made (by `Content-Length` or the
//! file's size) and while streaming (a server that sends more than it announced). URLs may carry
//! a user and password (`https://user:pass@host/…`, sent as HTTP basic auth) or a token in their
//! query: messages name an image by [`redact`]ed URL only. HTTPS certificates are checked against
//! the system's CAs (`SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured) plus those of the Secret named by
//! `spec.image.caSecretRef`.

use crate::driver::Chunk;
use base64::Engine;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use sha2::Digest;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc::Sender;

/// The largest image capstan streams into a pool.
pub const MAX_IMAGE_BYTES: u64 = 64 << 30;
/// How long connecting and each read may take before the download counts as broken.
const TIMEOUT: Duration = Duration::from_secs(60);
/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 5;
/// The size of the chunks read from a file.
const FILE_CHUNK: usize = 1 << 20;

/// Why an image cannot be had. Messages name the image by its redacted URL.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(
        "spec.image.url {url:?}: use a file:// path on the management host, or an http:// or https:// URL"
    )]
    UnsupportedUrl { url: String },
    #[error("spec.image.checksumType {0:?}: use sha256 or sha512")]
    ChecksumType(String),
    #[error("reading {url}")]
    File {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("downloading {url}: {message}")]
    Download { url: String, message: String },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error(
        "{url} does not say how long it is (no Content-Length): serve it with one (a plain file) so its volume can be created at its size"
    )]
    LengthUnknown { url: String },
    #[error("{url} is {length} bytes, more than the {limit} bytes capstan streams into a pool")]
    TooLarge {
        url: String,
        length: u64,
        limit: u64,
    },
    #[error("{url} sent {received} bytes where it announced {length}")]
    LengthMismatch {
        url: String,
        length: u64,
        received: u64,
    },
    #[error(
        "{url} has digest {actual}, spec.image.checksum says {expected}: fix the checksum or the image"
    )]
    ChecksumMismatch {
        url: String,
        actual: String,
        expected: String,
    },
    #[error("the pool stopped taking the image")]
    Receiver,
    #[error(
        "{url}: the server's certificate is not trusted ({message}): put the CA that signed it under ca.crt in a Secret named by spec.image.caSecretRef, or serve the image with a certificate of a CA the system trusts"
    )]
    Untrusted { url: String, message: String },
    #[error(
        "the ca.crt of the Secret named by spec.image.caSecretRef holds no PEM CA certificate{detail}: put the PEM certificate(s) of the image server's CA there"
    )]
    CaBundle { detail: String },
}

impl ImageError {
    /// The condition reason for this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnsupportedUrl { .. } => "UnsupportedImageURL",
            Self::ChecksumType(_) => "InvalidSpec",
            Self::File { .. } => "ImageUnreadable",
            Self::Download { .. } | Self::Status { .. } | Self::LengthMismatch { .. } => {
                "ImageDownloadFailed"
            }
            Self::LengthUnknown { .. } => "ImageLengthUnknown",
            Self::TooLarge { .. } => "ImageTooLarge",
            Self::ChecksumMismatch { .. } => "ImageChecksumMismatch",
            Self::Receiver => "ImageUploadFailed",
            Self::Untrusted { .. } => "ImageCertificateUntrusted",
            Self::CaBundle { .. } => "ImageCAInvalid",
        }
    }

    /// Whether trying again later may help (a broken download, a server error), as opposed to a
    /// spec or an image that has to change.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Download { .. } | Self::LengthMismatch { .. } | Self::Receiver => true,
            Self::Status { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            _ => false,
        }
    }
}

/// `url` without what may be secret: the user and password, the query and the fragment.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let hidden = if rest.contains(['?', '#']) || authority.contains('@') {
        "…"
    } else {
        ""
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{host}{path}{hidden}"),
        None => format!("{host}{path}{hidden}"),
    }
}

/// A digest being computed.
enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    fn new(kind: &str) -> Result<Self, ImageError> {
        match kind {
            "sha256" => Ok(Self::Sha256(sha2::Sha256::new())),
            "sha512" => Ok(Self::Sha512(sha2::Sha512::new())),
            other => Err(ImageError::ChecksumType(other.to_owned())),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Self::Sha256(hash) => hash.update(bytes),
            Self::Sha512(hash) => hash.update(bytes),
        }
    }

    fn hex(self) -> String {
        let digest: Vec<u8> = match self {
            Self::Sha256(hash) => hash.finalize().to_vec(),
            Self::Sha512(hash) => hash.finalize().to_vec(),
        };
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The bytes of an image being read.
pub enum Body {
    File(tokio::fs::File),
    Http(hyper::body::Incoming),
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::File(_) => "Body::File",
            Self::Http(_) => "Body::Http",
        })
    }
}

impl Body {
    /// The next chunk; `None` at the end.
    async fn next(&mut self, url: &str) -> Option<Result<Bytes, ImageError>> {
        match self {
            Self::File(file) => {
                let mut buffer = vec![0; FILE_CHUNK];
                match file.read(&mut buffer).await {
                    Ok(0) => None,
                    Ok(n) => {
                        buffer.truncate(n);
                        Some(Ok(Bytes::from(buffer)))
                    }
                    Err(source) => Some(Err(ImageError::File {
                        url: url.to_owned(),
                        source,
                    })),
                }
            }
            Self::Http(body) => loop {
                let frame = match tokio::time::timeout(TIMEOUT, body.frame()).await {
                    Err(_) => {
                        return Some(Err(ImageError::Download {
                            url: url.to_owned(),
                            message: format!("nothing received for {} s", TIMEOUT.as_secs()),
                        }));
                    }
                    Ok(None) => return None,
                    Ok(Some(Err(error))) => {
                        return Some(Err(ImageError::Download {
                            url: url.to_owned(),
                            message: error.to_string(),
                        }));
                    }
                    Ok(Some(Ok(frame))) => frame,
                };
                if let Ok(data) = frame.into_data() {
                    return Some(Ok(data));
                }
            },
        }
    }
}

/// An image opened for reading: how long it is and its bytes.
#[derive(Debug)]
pub struct Opened {
    pub length: u64,
    pub body: Body,
    /// The URL, redacted, for messages.
    pub url: String,
}

/// Starts reading the image at `url`, refusing one larger than `limit`; an `https://` server's
/// certificate must chain to the system's CAs or to one in `extra_cas` (PEM).
pub async fn open(url: &str, limit: u64, extra_cas: Option<&str>) -> Result<Opened, ImageError> {
    let shown = redact(url);
    if let Some(path) = url.strip_prefix("file://") {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|source| ImageError::File {
                url: shown.clone(),
                source,
            })?;
        let length = file
            .metadata()
            .await
            .map_err(|source| ImageError::File {
                url: shown.clone(),
                source,
            })?
            .len();
        if length > limit {
            return Err(ImageError::TooLarge {
                url: shown,
                length,
                limit,
            });
        }
        return Ok(Opened {
            length,
            body: Body::File(file),
            url: shown,
        });
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ImageError::UnsupportedUrl { url: shown });
    }
    let mut current = url.to_owned();
    for _ in 0..=MAX_REDIRECTS {
        let response = tokio::time::timeout(TIMEOUT, get(&current, extra_cas))
            .await
            .map_err(|_| ImageError::Download {
                url: shown.clone(),
                message: format!("no answer within {} s", TIMEOUT.as_secs()),
            })??;
        let status = response.status();
        if status.is_redirection()
            && let Some(location) = response
                .headers()
                .get(http::header::LOCATION)
                .and_then(|l| l.to_str().ok())
        {
            current = resolve(&current, location);
            continue;
        }
        if !status.is_success() {
            return Err(ImageError::Status {
                url: shown,
                status: status.as_u16(),
            });
        }
        let Some(length) = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| l.parse::<u64>().ok())
        else {
            return Err(ImageError::LengthUnknown { url: shown });
        };
        if length > limit {
            return Err(ImageError::TooLarge {
                url: shown,
                length,
                limit,
            });
        }
        return Ok(Opened {
            length,
            body: Body::Http(response.into_body()),
            url: shown,
        });
    }
    Err(ImageError::Download {
        url: shown,
        message: format!("more than {MAX_REDIRECTS} redirects"),
    })
}

/// `location` (absolute, or a path on the same server) against `base`.
fn resolve(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_owned();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    let authority = rest.split('/').next().unwrap_or_default();
    format!(
        "{scheme}://{authority}/{}",
        location.trim_start_matches('/')
    )
}

/// The system's CAs, read once.
fn system_roots() -> Arc<rustls::RootCertStore> {
    static ROOTS: OnceLock<Arc<rustls::RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            Arc::new(roots)
        })
        .clone()
}

/// The system's CAs plus every certificate in `extra_cas` (PEM).
fn trusted_roots(extra_cas: Option<&str>) -> Result<Arc<rustls::RootCertStore>, ImageError> {
    let Some(pem) = extra_cas else {
        return Ok(system_roots());
    };
    let mut roots = (*system_roots()).clone();
    let mut added = 0usize;
    for certificate in rustls_pemfile::certs(&mut pem.as_bytes()) {
        let certificate = certificate.map_err(|e| ImageError::CaBundle {
            detail: format!(" ({e})"),
        })?;
        roots.add(certificate).map_err(|e| ImageError::CaBundle {
            detail: format!(" ({e})"),
        })?;
        added += 1;
    }
    if added == 0 {
        return Err(ImageError::CaBundle {
            detail: String::new(),
        });
    }
    Ok(Arc::new(roots))
}

fn tls_connector(roots: Arc<rustls::RootCertStore>) -> Result<tokio_rustls::TlsConnector, String> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Whether a TLS handshake failed because the server's certificate is not trusted.
fn untrusted_certificate(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        })
}

/// One GET of `url` (http or https), its body not read yet.
async fn get(
    url: &str,
    extra_cas: Option<&str>,
) -> Result<http::Response<hyper::body::Incoming>, ImageError> {
    let shown = redact(url);
    let failed = |message: String| ImageError::Download {
        url: shown.clone(),
        message,
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|_| ImageError::UnsupportedUrl { url: shown.clone() })?;
    let https = uri.scheme_str() == Some("https");
    let authority = uri
        .authority()
        .ok_or_else(|| ImageError::UnsupportedUrl { url: shown.clone() })?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let user = authority
        .as_str()
        .rsplit_once('@')
        .map(|(user, _)| user.to_owned());
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let host_header = match authority.port_u16() {
        Some(port) => format!("{}:{port}", authority.host()),
        None => authority.host().to_owned(),
    };
    let mut request = http::Request::get(path)
        .header(http::header::HOST, host_header)
        .header(http::header::USER_AGENT, "capstan");
    if let Some(user) = user {
        let decoded = user.replace("%40", "@").replace("%3A", ":");
        request = request.header(
            http::header::AUTHORIZATION,
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(decoded)
            ),
        );
    }
    let request = request
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| failed(e.to_string()))?;
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| failed(format!("connecting: {e}")))?;
    if https {
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|_| failed("the host is neither a DNS name nor an IP address".into()))?;
        let stream = tls_connector(trusted_roots(extra_cas)?)
            .map_err(&failed)?
            .connect(name, tcp)
            .await
            .map_err(|e| {
                if untrusted_certificate(&e) {
                    ImageError::Untrusted {
                        url: shown.clone(),
                        message: e.to_string(),
                    }
                } else {
                    failed(format!("TLS handshake: {e}"))
                }
            })?;
        send(stream, request).await.map_err(failed)
    } else {
        send(tcp, request).await.map_err(failed)
    }
}

async fn send<S>(
    stream: S,
    request: http::Request<http_body_util::Empty<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    // The connection task lives as long as the body is read; it ends with the exchange.
    tokio::spawn(connection);
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))
}

/// Sends `opened`'s bytes to `sender`, hashing them with `checksum_type`; ends with
/// [`Chunk::Done`] when all `opened.length` bytes came and their digest is `checksum`, else with
/// [`Chunk::Failed`] and the reason as the error.
pub async fn pump(
    mut opened: Opened,
    checksum_type: &str,
    checksum: &str,
    sender: Sender<Chunk>,
) -> Result<(), ImageError> {
    let result = async {
        let mut hasher = Hasher::new(checksum_type)?;
        let mut received: u64 = 0;
        while let Some(chunk) = opened.body.next(&opened.url).await {
            let chunk = chunk?;
            received = received.saturating_add(chunk.len() as u64);
            if received > opened.length {
                return Err(ImageError::LengthMismatch {
                    url: opened.url.clone(),
                    length: opened.length,
                    received,
                });
            }
            hasher.update(&chunk);
            sender
                .send(Chunk::Data(chunk))
                .await
                .map_err(|_| ImageError::Receiver)?;
        }
        if received != opened.length {
            return Err(ImageError::LengthMismatch {
                url: opened.url.clone(),
                length: opened.length,
                received,
            });
        }
        let actual = hasher.hex();
        if !actual.eq_ignore_ascii_case(checksum) {
            return Err(ImageError::ChecksumMismatch {
                url: opened.url.clone(),
                actual,
                expected: checksum.to_owned(),
            });
        }
        Ok(())
    }
    .await;
    let last = if result.is_ok() {
        Chunk::Done
    } else {
        Chunk::Failed
    };
    // The receiver may be gone already (the pool refused the upload): its error is the one told.
    let _ = sender.send(last).await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_urls_keep_no_secret() {
        for (url, shown) in [
            (
                "https://user:pw@images.example/os.qcow2?token=abc",
                "https://images.example/os.qcow2…",
            ),
            (
                "http://10.0.0.1:8080/a/b.img",
                "http://10.0.0.1:8080/a/b.img",
            ),
            ("file:///var/lib/x.qcow2", "file:///var/lib/x.qcow2"),
            ("http://h/x#frag", "http://h/x…"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn redirects_resolve_against_the_server() {
        assert_eq!(resolve("http://h:1/a/b", "/c"), "http://h:1/c");
        assert_eq!(resolve("http://h:1/a/b", "https://o/x"), "https://o/x");
    }

    #[test]
    fn transient_failures_are_told_apart() {
        let url = "u".to_owned();
        assert!(
            ImageError::Status {
                url: url.clone(),
                status: 503
            }
            .is_transient()
        );
        assert!(
            !ImageError::Status {
                url: url.clone(),
                status: 404
            }
            .is_transient()
        );
        assert!(
            !ImageError::ChecksumMismatch {
                url,
                actual: "a".into(),
                expected: "b".into()
            }
            .is_transient()
        );
    }
}
