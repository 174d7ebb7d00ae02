//! A [`kube::Client`] served in-process by this API server's router: no socket, no TLS.
//!
//! Each request is handed straight to the axum router and marked with [`ClientCertificate`], the
//! extension the TLS layer adds for callers that proved an admin certificate: code in the same
//! process is as trusted as the server itself. It lives here, beside the server, so that the
//! controller runtime needs nothing from the API server crate.

use crate::ClientCertificate;
use kube::Client;

/// The namespace requests go to when a caller does not name one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A client whose requests are served by `router` (the embedded API server's
/// [`crate::ApiServer::router`]) in this process, authenticated as a trusted caller.
pub fn in_process_client(router: axum::Router) -> Client {
    let service = tower::ServiceBuilder::new()
        .map_request(|mut request: http::Request<kube::client::Body>| {
            request.extensions_mut().insert(ClientCertificate);
            request
        })
        .service(router);
    Client::new(service, DEFAULT_NAMESPACE)
}
