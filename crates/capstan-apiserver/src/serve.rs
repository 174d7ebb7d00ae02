//! HTTPS serving: a TLS accept loop over hyper, HTTP/1.1 and HTTP/2, a client-certificate identity for
//! the authentication layer, and graceful shutdown (stop accepting, let requests finish, end watches).
//! Timeouts, the connection cap and the accept back-off are those of [`crate::conn`].

use crate::ServerError;
use crate::conn::ConnectionLimits;
use axum::Router;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves `router` over TLS on `listener` until `shutdown` completes, then drains connections.
pub async fn serve_tls(
    router: Router,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    serve_tls_with(router, listener, tls, ConnectionLimits::default(), shutdown).await
}

/// [`serve_tls`] with other connection limits.
pub async fn serve_tls_with(
    router: Router,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    crate::conn::serve(router, listener, Some(acceptor), limits, shutdown).await;
    Ok(())
}
