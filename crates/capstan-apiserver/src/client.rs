//! A [`kube::Client`] served in-process by this API server's router: no socket, no TLS.
//!
//! Each request is handed straight to the axum router carrying the caller's identity (a
//! [`UserInfo`], the extension the TLS layer adds for a client certificate), so authorization
//! applies to it as to any remote caller. It lives here, beside the server, so that the
//! controller runtime needs nothing from the API server crate.

use crate::authn::UserInfo;
use kube::Client;

/// The namespace requests go to when a caller does not name one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A client whose requests are served by `router` (the embedded API server's
/// [`crate::ApiServer::router`]) in this process, as the admin (`system:masters`).
pub fn in_process_client(router: axum::Router) -> Client {
    in_process_client_as(router, UserInfo::admin())
}

/// A client whose requests are served by `router` in this process as `user`.
pub fn in_process_client_as(router: axum::Router, user: UserInfo) -> Client {
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut request: http::Request<kube::client::Body>| {
            request.extensions_mut().insert(user.clone());
            request
        })
        .service(router);
    Client::new(service, DEFAULT_NAMESPACE)
}
