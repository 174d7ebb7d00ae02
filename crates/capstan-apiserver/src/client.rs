//! A [`kube::Client`] served in-process by this API server's router: no socket, no TLS.
//!
//! Each request is handed straight to the axum router carrying the caller's identity (a
//! [`UserInfo`], the extension the TLS layer adds for a client certificate), so authorization
//! applies to it as to any remote caller. It lives here, beside the server, so that the
//! controller runtime needs nothing from the API server crate.

use crate::authn::UserInfo;
use kube::Client;

/// The User-Agent of in-process requests that carry none (so their field manager is `capstan`).
pub const USER_AGENT: &str = concat!("capstan/", env!("CARGO_PKG_VERSION"));

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
            // As a remote client would say who it is: the field manager of writes without a
            // `fieldManager` is the User-Agent's product name, as on kube-apiserver.
            if !request.headers().contains_key(http::header::USER_AGENT) {
                request.headers_mut().insert(
                    http::header::USER_AGENT,
                    http::HeaderValue::from_static(USER_AGENT),
                );
            }
            request
        })
        .service(router);
    Client::new(service, DEFAULT_NAMESPACE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ApiServer, Auth, conversion::ModelConverter};
    use capstan_store::{Store, StoreOptions};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    #[tokio::test]
    async fn in_process_writes_are_managed_by_capstan() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store = Store::open(&dir.path().join("state.db"), StoreOptions::default())?;
        let server = ApiServer::new(
            store,
            std::sync::Arc::new(ModelConverter),
            Auth { tokens: Vec::new() },
        )
        .await?;
        let maps: Api<ConfigMap> = Api::default_namespaced(in_process_client(server.router()));
        let mut map = ConfigMap::default();
        map.metadata.name = Some("m".into());
        // A field to own: a name alone is not tracked.
        map.data = Some([("k".to_owned(), "v".to_owned())].into());
        let created = maps.create(&PostParams::default(), &map).await?;
        let managers: Vec<String> = created
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|entry| entry.manager)
            .collect();
        assert_eq!(managers, vec!["capstan".to_owned()]);
        Ok(())
    }
}
