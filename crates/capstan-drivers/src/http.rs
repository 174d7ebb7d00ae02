//! A minimal HTTP(S) client for Redfish: one connection per request, basic auth, a bound on the
//! whole exchange, and answers classified into [`BmcError`] kinds.
//!
//! A BMC gets a handful of requests per reconcile, so connection reuse buys little, and a fresh
//! connection never trips over a BMC that silently dropped an idle one.

use crate::address::{BmcAddress, Transport};
use crate::{BmcError, ConnectOptions, Credentials};
use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Sends requests to one BMC.
pub(crate) struct HttpClient {
    host: String,
    port: u16,
    endpoint: String,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    /// The operator's CA bundle, when one was given (named in certificate errors).
    trust: Option<std::path::PathBuf>,
    username: String,
    authorization: String,
    timeout: Duration,
    /// The networks the BMC may be in (`None`: any).
    permitted: Option<crate::BmcNetworks>,
}

// Debug must not print the authorization header, which carries the password.
impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("endpoint", &self.endpoint)
            .field("tls", &self.tls.is_some())
            .field("username", &self.username)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    pub(crate) fn new(
        address: &BmcAddress,
        credentials: &Credentials,
        options: ConnectOptions,
    ) -> Result<Self, BmcError> {
        let endpoint = address.endpoint();
        let tls = match address.transport {
            Transport::Http => None,
            Transport::Https => {
                let config = tls_config(&options, &endpoint)?;
                let name = ServerName::try_from(address.host.clone()).map_err(|_| {
                    BmcError::InvalidAddress {
                        address: endpoint.clone(),
                        reason: "host is neither a DNS name nor an IP address".to_owned(),
                    }
                })?;
                Some((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
            }
        };
        let token = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            credentials.username,
            credentials.password()
        ));
        Ok(Self {
            host: address.host.clone(),
            port: address.port,
            endpoint,
            tls,
            trust: options.trust.extra_bundle().map(ToOwned::to_owned),
            username: credentials.username.clone(),
            authorization: format!("Basic {token}"),
            timeout: options.timeout,
            permitted: options.permitted,
        })
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub(crate) fn protocol_error(&self, detail: impl Into<String>) -> BmcError {
        BmcError::Protocol {
            endpoint: self.endpoint.clone(),
            detail: detail.into(),
        }
    }

    /// GETs a JSON resource.
    pub(crate) async fn get(&self, path: &str) -> Result<Value, BmcError> {
        let body = self.send(Method::GET, path, None).await?;
        serde_json::from_slice(&body)
            .map_err(|e| self.protocol_error(format!("GET {path}: body is not JSON: {e}")))
    }

    /// POSTs (actions) or PATCHes (settings) a JSON body; the answer's body is not needed.
    pub(crate) async fn send_json(
        &self,
        method: Method,
        path: &str,
        body: &Value,
    ) -> Result<(), BmcError> {
        self.send(method, path, Some(body.to_string()))
            .await
            .map(drop)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<Bytes, BmcError> {
        tracing::debug!(bmc = %self.endpoint, %method, path, "redfish request");
        let exchange = self.exchange(method.clone(), path, body);
        let (status, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                self.unreachable(format!(
                    "{method} {path}: no answer within {:?}",
                    self.timeout
                ))
            })??;
        if status.is_success() {
            return Ok(body);
        }
        Err(match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => BmcError::Unauthorized {
                endpoint: self.endpoint.clone(),
                username: self.username.clone(),
                status: status.as_u16(),
            },
            StatusCode::NOT_FOUND => BmcError::NotFound {
                endpoint: self.endpoint.clone(),
                resource: path.to_owned(),
            },
            _ => self.protocol_error(format!(
                "{method} {path}: HTTP {}{}",
                status.as_u16(),
                redfish_message(&body)
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )),
        })
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(StatusCode, Bytes), BmcError> {
        let tcp = self.connect().await?;
        let mut request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, &self.endpoint)
            .header(header::AUTHORIZATION, &self.authorization)
            .header(header::ACCEPT, "application/json")
            .header("OData-Version", "4.0");
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| {
                self.protocol_error(format!("{method} {path}: cannot build request: {e}"))
            })?;
        match &self.tls {
            None => self.round_trip(tcp, request).await,
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| self.unreachable(self.handshake_failure(&e)))?;
                self.round_trip(stream, request).await
            }
        }
    }

    /// A connection to the BMC. With permitted networks, the name is resolved here and only an
    /// address in them is connected to: a name that resolves elsewhere (now or after a change of
    /// its DNS records) gets nothing, credentials included.
    async fn connect(&self) -> Result<TcpStream, BmcError> {
        let Some(permitted) = &self.permitted else {
            return TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(|e| self.unreachable(format!("connect: {e}")));
        };
        let resolved: Vec<std::net::SocketAddr> =
            tokio::net::lookup_host((self.host.as_str(), self.port))
                .await
                .map_err(|e| self.unreachable(format!("resolving {}: {e}", self.host)))?
                .collect();
        let (allowed, refused): (Vec<_>, Vec<_>) = resolved
            .into_iter()
            .partition(|address| permitted.permits(address.ip()));
        if allowed.is_empty() {
            let ips: Vec<std::net::IpAddr> = refused.iter().map(|a| a.ip()).collect();
            return Err(permitted.refusal(&self.endpoint, &ips));
        }
        let mut last = None;
        for address in allowed {
            match TcpStream::connect(address).await {
                Ok(tcp) => return Ok(tcp),
                Err(e) => last = Some(e),
            }
        }
        Err(self.unreachable(format!(
            "connect: {}",
            last.map_or_else(|| "no address".to_owned(), |e| e.to_string())
        )))
    }

    async fn round_trip<S>(
        &self,
        stream: S,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, Bytes), BmcError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.unreachable(format!("HTTP handshake: {e}")))?;
        // The connection task ends with the exchange; its error surfaces through the request.
        let driver = tokio::spawn(connection);
        let result = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| self.unreachable(format!("request: {e}")))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| self.unreachable(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok((status, body))
        }
        .await;
        driver.abort();
        result
    }

    /// Why the TLS handshake failed; a certificate that was not accepted gets the two ways out.
    fn handshake_failure(&self, error: &std::io::Error) -> String {
        let rejected = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .is_some_and(|e| {
                matches!(
                    e,
                    rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
                )
            });
        if !rejected {
            return format!("TLS handshake: {error}");
        }
        let tried = match self.trust.as_deref() {
            Some(bundle) => format!("the system CAs and {}", bundle.display()),
            None => "the system CAs".to_owned(),
        };
        format!(
            "TLS handshake: the BMC's certificate was not accepted ({error}); checked against \
             {tried}. Add the CA that signed it with --bmc-ca-file, or set \
             spec.bmc.disableCertificateVerification: true on this host"
        )
    }

    fn unreachable(&self, reason: String) -> BmcError {
        BmcError::Unreachable {
            endpoint: self.endpoint.clone(),
            reason,
        }
    }
}

/// The message of a Redfish error body (`{"error": {"message": …}}`), shortened.
fn redfish_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error")?;
    let message = error
        .get("@Message.ExtendedInfo")
        .and_then(|info| info.get(0)?.get("Message")?.as_str())
        .or_else(|| error.get("message")?.as_str())?;
    Some(message.chars().take(300).collect())
}

fn tls_config(options: &ConnectOptions, endpoint: &str) -> Result<ClientConfig, BmcError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| BmcError::Unsupported(format!("TLS for {endpoint}: {e}")))?;
    let config = if options.disable_certificate_verification {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(options.trust.roots())
            .with_no_client_auth()
    };
    Ok(config)
}

/// `disableCertificateVerification`: any certificate is accepted, but the handshake signatures
/// are still checked so the session is at least bound to the presented key.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
