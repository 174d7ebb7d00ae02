//! Kubernetes clients built from a kubeconfig, for real clusters.
//!
//! Controllers' clients do not retry refused requests themselves ([`controller_client`]): kube's
//! default layer retries 429, 503 and 504 answers up to 15 times with a doubling backoff, which
//! turned an Eviction's "not now" (a PodDisruptionBudget's 429) into a reconcile that waited almost
//! five minutes before it could say so. A controller's retry is its requeue.
//!
//! The in-process client of the embedded API server lives beside that server
//! (`capstan_apiserver::in_process_client`): the runtime works with any [`kube::Client`] and depends
//! on nothing above it.

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
    controller_client(config).map_err(|source| ClientError::Build {
        path: path.to_path_buf(),
        source,
    })
}

/// A client for controllers from `config`: kube's retry of 429/503/504 answers turned off, so a
/// refusal reaches the reconcile at once (named in a condition, retried by the requeue).
pub fn controller_client(mut config: kube::Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Client::try_from(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, EvictParams};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An Eviction refused by a PodDisruptionBudget (429) comes back from the first answer: one
    /// request reaches the server, not kube's default sixteen.
    #[tokio::test]
    async fn a_refused_eviction_is_not_retried_by_the_client() {
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        let app = axum::Router::new().fallback(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                (
                    http::StatusCode::TOO_MANY_REQUESTS,
                    [(http::header::CONTENT_TYPE, "application/json")],
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","code":429}"#,
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        let pods: Api<Pod> = Api::namespaced(controller_client(config).unwrap(), "default");
        match pods.evict("db-0", &EvictParams::default()).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 429),
            other => panic!("expected the 429, got {other:?}"),
        }
        assert_eq!(requests.load(Ordering::SeqCst), 1);
    }
}
