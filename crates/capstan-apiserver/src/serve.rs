//! HTTPS serving: a TLS accept loop over hyper, HTTP/1.1 and HTTP/2, a client-certificate identity for
//! the authentication layer, and graceful shutdown (stop accepting, let requests finish, end watches).

use crate::{ClientCertificate, ServerError};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections (watches included) get to finish after shutdown is asked for.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `router` over TLS on `listener` until `shutdown` completes, then drains connections.
pub async fn serve_tls(
    router: Router,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(pair) => pair,
            Err(err) => {
                // Running out of file descriptors and the like: keep serving the connections we have.
                tracing::warn!(error = %err, "accept failed");
                continue;
            }
        };
        // Watch events are small writes: without this, Nagle's algorithm and delayed ACKs hold
        // them back for tens of milliseconds.
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %err, "could not disable Nagle's algorithm");
        }
        let acceptor = acceptor.clone();
        let router = router.clone();
        let mut stop = stop_rx.clone();
        connections.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let has_certificate = tls
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|c| !c.is_empty());
            let service =
                tower::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
                    if has_certificate {
                        request.extensions_mut().insert(ClientCertificate);
                    }
                    router.clone().oneshot(request.map(axum::body::Body::new))
                });
            let builder = Builder::new(TokioExecutor::new());
            let connection =
                builder.serve_connection(TokioIo::new(tls), TowerToHyperService::new(service));
            tokio::pin!(connection);
            let stopping = async move {
                // Only the wake-up matters; the guard must not live across an await.
                let _ = stop.wait_for(|stopping| *stopping).await.map(|_| ());
            };
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(err) = result {
                        tracing::debug!(%peer, error = %err, "connection ended with an error");
                    }
                }
                () = stopping => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
                }
            }
        });
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT + Duration::from_secs(1), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    Ok(())
}
