//! A client of one etcd member's v3 API through etcd's JSON gateway.
//!
//! etcd serves its gRPC API a second time as JSON over HTTP on the same client port
//! (`POST /v3/<service>/<method>`, the grpc-gateway every etcd since 3.3 runs by default). The
//! membership work of a control plane is a handful of calls — list the members, ask each for its
//! status and alarms, remove one, move leadership — so capstan speaks the gateway over its own
//! HTTP and TLS stack instead of carrying a second one (gRPC, protobuf code generation) for them.
//!
//! Every call opens a fresh mutually-authenticated TLS connection to the member: the server must
//! present a certificate of the cluster's etcd CA for the address dialled, and capstan presents a
//! client certificate of that CA (etcd's `--client-cert-auth`, as kubeadm runs it). Calls are few
//! and far between, so connection reuse would buy nothing, and a fresh connection never trips over
//! one an etcd restart dropped.
//!
//! gRPC errors come back as JSON (`{"code": 5, "message": "etcdserver: member not found"}`) and
//! become [`GatewayError::Rpc`] with the gRPC code, so callers can tell "already gone" from a failure.

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long one call (connect, TLS, request and answer) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Answers larger than this are refused (a member list of a big cluster is a few kilobytes).
const MAX_ANSWER: usize = 1024 * 1024;

/// The gRPC status code etcd answers with for a member id it does not know.
pub const RPC_NOT_FOUND: i64 = 5;

/// Why a call to an etcd member failed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("`{url}` is not an etcd client URL of the form https://HOST:PORT")]
    BadUrl { url: String },
    #[error("the etcd CA or client certificate does not parse")]
    Identity(#[source] rustls::Error),
    #[error("the etcd CA or client certificate holds no {what}")]
    MissingPem { what: &'static str },
    #[error("{endpoint} is not a valid TLS server name")]
    ServerName { endpoint: Endpoint },
    #[error("connecting to etcd at {endpoint}")]
    Connect {
        endpoint: Endpoint,
        source: std::io::Error,
    },
    #[error(
        "TLS with etcd at {endpoint} (its certificate must be signed by the cluster's etcd CA)"
    )]
    Tls {
        endpoint: Endpoint,
        source: std::io::Error,
    },
    #[error("HTTP to etcd at {endpoint}")]
    Http {
        endpoint: Endpoint,
        source: hyper::Error,
    },
    #[error("etcd at {endpoint} did not answer {path} within {CALL_TIMEOUT:?}")]
    Timeout { endpoint: Endpoint, path: String },
    #[error("etcd at {endpoint} answered {path} with more than {MAX_ANSWER} bytes")]
    TooLarge { endpoint: Endpoint, path: String },
    #[error("etcd at {endpoint} refused {path}: {message} (gRPC code {code})")]
    Rpc {
        endpoint: Endpoint,
        path: String,
        code: i64,
        message: String,
    },
    #[error("etcd at {endpoint} answered {path} with HTTP {status}")]
    Status {
        endpoint: Endpoint,
        path: String,
        status: StatusCode,
    },
    #[error("etcd at {endpoint} answered {path} with JSON capstan does not understand")]
    Decode {
        endpoint: Endpoint,
        path: String,
        source: serde_json::Error,
    },
}

impl GatewayError {
    /// Whether etcd said the member (or key) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Rpc { code, .. } if *code == RPC_NOT_FOUND)
    }
}

/// Where one etcd member serves clients: `https://HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// Parses an etcd client URL (`https://10.0.0.5:2379`; IPv6 hosts in brackets). Only https:
    /// kubeadm's etcd serves clients over TLS only, and capstan never sends its client
    /// certificate's key exchange in the clear.
    pub fn parse(url: &str) -> Result<Self, GatewayError> {
        let bad = || GatewayError::BadUrl {
            url: url.to_owned(),
        };
        let rest = url.strip_prefix("https://").ok_or_else(bad)?;
        let authority = rest.trim_end_matches('/');
        if authority.contains('/') || authority.contains('@') {
            return Err(bad());
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, port) = bracketed.split_once("]:").ok_or_else(bad)?;
            (host, port)
        } else {
            authority.rsplit_once(':').ok_or_else(bad)?
        };
        let port = port.parse::<u16>().map_err(|_| bad())?;
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(Self {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "https://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "https://{}:{}", self.host, self.port)
        }
    }
}

/// The TLS identity for one cluster's etcd: its CA as the only trust root, and a client
/// certificate that CA signed.
#[derive(Clone)]
pub struct Identity {
    config: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The configuration holds the client's private key.
        f.write_str("Identity(<etcd client certificate>)")
    }
}

impl Identity {
    /// From PEM: the etcd CA certificate, and the client certificate and key it signed.
    pub fn new(
        ca_pem: &str,
        client_cert_pem: &str,
        client_key_pem: &str,
    ) -> Result<Self, GatewayError> {
        let ca = pem_certificates(ca_pem, "CA certificate")?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in ca {
            roots.add(cert).map_err(GatewayError::Identity)?;
        }
        let chain = pem_certificates(client_cert_pem, "client certificate")?;
        let key = pem_private_key(client_key_pem)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(GatewayError::Identity)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(GatewayError::Identity)?;
        Ok(Self {
            config: Arc::new(config),
        })
    }
}

fn pem_certificates(
    pem: &str,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, GatewayError> {
    let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_bytes())
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(GatewayError::MissingPem { what });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, SEC1 or PKCS#1) in `pem`.
fn pem_private_key(pem: &str) -> Result<PrivateKeyDer<'static>, GatewayError> {
    rustls_pemfile::private_key(&mut pem.as_bytes())
        .ok()
        .flatten()
        .ok_or(GatewayError::MissingPem {
            what: "private key",
        })
}

/// One member as the member list reports it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Member {
    #[serde(rename = "ID", deserialize_with = "lenient_u64", default)]
    pub id: u64,
    /// Empty for a member that was added but has not started yet.
    #[serde(default)]
    pub name: String,
    #[serde(rename = "peerURLs", default)]
    pub peer_urls: Vec<String>,
    /// Empty for a member that has not started yet.
    #[serde(rename = "clientURLs", default)]
    pub client_urls: Vec<String>,
    #[serde(rename = "isLearner", default)]
    pub is_learner: bool,
}

/// What one member says of itself.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Status {
    pub header: Header,
    #[serde(default)]
    pub version: String,
    /// The member id of the raft leader, as this member sees it (0: none).
    #[serde(deserialize_with = "lenient_u64", default)]
    pub leader: u64,
    /// Problems the member reports of itself (a corrupt or full database, a stalled apply).
    #[serde(default)]
    pub errors: Vec<String>,
    #[serde(rename = "isLearner", default)]
    pub is_learner: bool,
}

/// The header of every answer: who answered.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Header {
    #[serde(deserialize_with = "lenient_u64", default)]
    pub cluster_id: u64,
    #[serde(deserialize_with = "lenient_u64", default)]
    pub member_id: u64,
}

/// An alarm a member raised (`NOSPACE`: its database is full; `CORRUPT`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Alarm {
    #[serde(rename = "memberID", deserialize_with = "lenient_u64", default)]
    pub member_id: u64,
    #[serde(default)]
    pub alarm: String,
}

#[derive(Deserialize)]
struct MemberList {
    #[serde(default)]
    members: Vec<Member>,
}

#[derive(Deserialize)]
struct AlarmList {
    #[serde(default)]
    alarms: Vec<Alarm>,
}

#[derive(Deserialize)]
struct RpcError {
    #[serde(default)]
    code: i64,
    #[serde(default)]
    message: String,
}

/// The gateway writes 64-bit integers as JSON strings (so that JavaScript keeps every digit); accept
/// numbers too.
fn lenient_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Number(u64),
        Text(String),
    }
    match Either::deserialize(deserializer)? {
        Either::Number(n) => Ok(n),
        Either::Text(text) => text.parse().map_err(serde::de::Error::custom),
    }
}

/// A client of one member.
#[derive(Clone, Debug)]
pub struct Gateway {
    endpoint: Endpoint,
    identity: Identity,
}

impl Gateway {
    pub fn new(endpoint: Endpoint, identity: Identity) -> Self {
        Self { endpoint, identity }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Every member of the cluster (linearized: the answer reflects the latest membership).
    pub async fn member_list(&self) -> Result<Vec<Member>, GatewayError> {
        let list: MemberList = self
            .call("/v3/cluster/member/list", json!({"linearizable": true}))
            .await?;
        Ok(list.members)
    }

    /// This member's own status.
    pub async fn status(&self) -> Result<Status, GatewayError> {
        self.call("/v3/maintenance/status", json!({})).await
    }

    /// The alarms raised anywhere in the cluster.
    pub async fn alarms(&self) -> Result<Vec<Alarm>, GatewayError> {
        let list: AlarmList = self
            .call("/v3/maintenance/alarm", json!({"action": "GET"}))
            .await?;
        Ok(list.alarms)
    }

    /// Removes member `id` from the cluster.
    pub async fn remove_member(&self, id: u64) -> Result<(), GatewayError> {
        let _: Value = self
            .call("/v3/cluster/member/remove", json!({"ID": id.to_string()}))
            .await?;
        Ok(())
    }

    /// Hands raft leadership to member `target`; only the current leader accepts this.
    pub async fn move_leader(&self, target: u64) -> Result<(), GatewayError> {
        let _: Value = self
            .call(
                "/v3/maintenance/transfer-leadership",
                json!({"targetID": target.to_string()}),
            )
            .await?;
        Ok(())
    }

    async fn call<T: DeserializeOwned>(&self, path: &str, body: Value) -> Result<T, GatewayError> {
        let exchange = self.exchange(path, body);
        let (status, bytes) = tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| GatewayError::Timeout {
                endpoint: self.endpoint.clone(),
                path: path.to_owned(),
            })??;
        if !status.is_success() {
            return Err(match serde_json::from_slice::<RpcError>(&bytes) {
                Ok(rpc) if rpc.code != 0 => GatewayError::Rpc {
                    endpoint: self.endpoint.clone(),
                    path: path.to_owned(),
                    code: rpc.code,
                    message: rpc.message,
                },
                _ => GatewayError::Status {
                    endpoint: self.endpoint.clone(),
                    path: path.to_owned(),
                    status,
                },
            });
        }
        serde_json::from_slice(&bytes).map_err(|source| GatewayError::Decode {
            endpoint: self.endpoint.clone(),
            path: path.to_owned(),
            source,
        })
    }

    async fn exchange(&self, path: &str, body: Value) -> Result<(StatusCode, Bytes), GatewayError> {
        let endpoint = &self.endpoint;
        let server_name =
            ServerName::try_from(endpoint.host.clone()).map_err(|_| GatewayError::ServerName {
                endpoint: endpoint.clone(),
            })?;
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|source| GatewayError::Connect {
                endpoint: endpoint.clone(),
                source,
            })?;
        let tls = tokio_rustls::TlsConnector::from(self.identity.config.clone())
            .connect(server_name, tcp)
            .await
            .map_err(|source| GatewayError::Tls {
                endpoint: endpoint.clone(),
                source,
            })?;
        let http_error = |source| GatewayError::Http {
            endpoint: endpoint.clone(),
            source,
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(http_error)?;
        // The connection is driven beside the request; it ends when the answer has been read.
        let driver = tokio::spawn(connection);
        let authority = endpoint.to_string();
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::HOST, authority.trim_start_matches("https://"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|_| GatewayError::BadUrl {
                url: format!("{authority}{path}"),
            })?;
        let response = sender.send_request(request).await.map_err(http_error)?;
        let status = response.status();
        let mut body = response.into_body();
        let mut answer = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(http_error)?;
            if let Some(chunk) = frame.data_ref() {
                if answer.len() + chunk.len() > MAX_ANSWER {
                    driver.abort();
                    return Err(GatewayError::TooLarge {
                        endpoint: endpoint.clone(),
                        path: path.to_owned(),
                    });
                }
                answer.extend_from_slice(chunk);
            }
        }
        driver.abort();
        Ok((status, Bytes::from(answer)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_from_client_urls() {
        let cases = [
            ("https://10.0.0.5:2379", Some(("10.0.0.5", 2379))),
            ("https://10.0.0.5:2379/", Some(("10.0.0.5", 2379))),
            ("https://[fd00::5]:2379", Some(("fd00::5", 2379))),
            (
                "https://etcd-0.example:2379",
                Some(("etcd-0.example", 2379)),
            ),
            ("http://10.0.0.5:2379", None),
            ("https://10.0.0.5", None),
            ("https://10.0.0.5:0", None),
            ("https://user@10.0.0.5:2379", None),
            ("https://10.0.0.5:2379/v3", None),
            ("https://:2379", None),
        ];
        for (url, want) in cases {
            let got = Endpoint::parse(url).ok();
            let want = want.map(|(host, port)| Endpoint {
                host: host.to_owned(),
                port,
            });
            assert_eq!(got, want, "{url}");
        }
        let v6 = Endpoint::parse("https://[fd00::5]:2379").unwrap();
        assert_eq!(v6.to_string(), "https://[fd00::5]:2379");
    }

    #[test]
    fn gateway_json_decodes_with_ids_as_strings_or_numbers() {
        let list: MemberList = serde_json::from_value(json!({
            "header": {"cluster_id": "1", "member_id": "2"},
            "members": [
                {"ID": "10276657743932975437", "name": "cp-0", "peerURLs": ["https://10.0.0.5:2380"],
                 "clientURLs": ["https://10.0.0.5:2379"]},
                {"ID": 7, "peerURLs": ["https://10.0.0.6:2380"], "isLearner": true}
            ]
        }))
        .unwrap();
        assert_eq!(list.members[0].id, 10_276_657_743_932_975_437);
        assert_eq!(list.members[0].name, "cp-0");
        assert_eq!(list.members[1].id, 7);
        assert!(list.members[1].name.is_empty() && list.members[1].is_learner);
        let status: Status = serde_json::from_value(json!({
            "header": {"cluster_id": "1", "member_id": "10", "revision": "5", "raft_term": "2"},
            "version": "3.6.6", "leader": "10", "errors": ["NOSPACE"]
        }))
        .unwrap();
        assert_eq!((status.header.member_id, status.leader), (10, 10));
        assert_eq!(status.errors, ["NOSPACE"]);
    }

    #[test]
    fn grpc_not_found_is_recognised() {
        let err = GatewayError::Rpc {
            endpoint: Endpoint::parse("https://127.0.0.1:2379").unwrap(),
            path: "/v3/cluster/member/remove".into(),
            code: RPC_NOT_FOUND,
            message: "etcdserver: member not found".into(),
        };
        assert!(err.is_not_found());
    }
}
