//! What the kubeadm tests share: an in-process capstan API server on a fresh store, and the
//! bootstrap report server over real HTTP on it.

use capstan_apiserver::conversion::ApiVersionRewrite;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_kubeadm::report;
use capstan_store::{Store, StoreOptions};
use std::sync::Arc;

/// An API server on a store in a new temporary directory (kept alive by the `TempDir`), with no
/// tokens.
pub async fn api_server() -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(
        store,
        Arc::new(ApiVersionRewrite),
        Auth { tokens: Vec::new() },
    )
    .await
    .unwrap();
    (dir, server)
}

/// A bootstrap report server on `server`'s API, listening on a free local port: its base URL.
pub async fn serve_reports(server: &ApiServer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = report::router(in_process_client(server.router()));
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}
