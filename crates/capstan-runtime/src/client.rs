//! Kubernetes clients built from a kubeconfig, for real clusters.
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
    Client::try_from(config).map_err(|source| ClientError::Build {
        path: path.to_path_buf(),
        source,
    })
}
