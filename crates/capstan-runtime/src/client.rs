//! Kubernetes clients: one that calls the embedded API server's router in-process, and one built
//! from a kubeconfig for real clusters.
//!
//! The in-process client hands each request straight to the axum router — no socket, no TLS — and
//! marks it with [`ClientCertificate`], the extension the API server's TLS layer adds for callers that
//! proved an admin certificate: code in the same process is as trusted as the server itself.

use capstan_apiserver::ClientCertificate;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use std::path::{Path, PathBuf};

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {path}")]
    Read {
        path: PathBuf,
        source: KubeconfigError,
    },
    #[error("kubeconfig {path} does not describe a usable cluster")]
    Config {
        path: PathBuf,
        source: KubeconfigError,
    },
    #[error("building the client for kubeconfig {path}")]
    Build { path: PathBuf, source: kube::Error },
}

/// The namespace requests go to when a caller does not name one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A client whose requests are served by `router` (the embedded API server's
/// [`capstan_apiserver::ApiServer::router`]) in this process, authenticated as a trusted caller.
pub fn in_process_client(router: axum::Router) -> Client {
    let service = tower::ServiceBuilder::new()
        .map_request(|mut request: http::Request<kube::client::Body>| {
            request.extensions_mut().insert(ClientCertificate);
            request
        })
        .service(router);
    Client::new(service, DEFAULT_NAMESPACE)
}

/// A client for the cluster of `path`'s current context (TLS, tokens and client certificates as the
/// kubeconfig says).
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, ClientError> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| ClientError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| ClientError::Config {
            path: path.to_path_buf(),
            source,
        })?;
    Client::try_from(config).map_err(|source| ClientError::Build {
        path: path.to_path_buf(),
        source,
    })
}
