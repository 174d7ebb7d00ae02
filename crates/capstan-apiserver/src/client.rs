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

/// Marks an in-process request whose answers leave `metadata.managedFields` out. Only an
/// in-process caller can carry it (it is a request extension, not a header): remote clients
/// always get whole objects, as from kube-apiserver. Writes are unaffected — an update that
/// leaves `managedFields` out keeps the stored ones, as on kube-apiserver.
#[derive(Clone, Copy, Debug, Default)]
pub struct WithoutManagedFields;

/// A client whose requests are served by `router` in this process as `user`.
pub fn in_process_client_as(router: axum::Router, user: UserInfo) -> Client {
    in_process(router, user, false)
}

/// The client of the controllers running in this process, as `user`: answered without
/// `managedFields`, which the controllers' caches drop on arrival anyway (as controller-runtime's
/// `TransformStripManagedFields` does), so the server does not encode them into every watch event
/// only for the client to parse and discard them.
pub fn in_process_controller_client(router: axum::Router, user: UserInfo) -> Client {
    in_process(router, user, true)
}

fn in_process(router: axum::Router, user: UserInfo, without_managed_fields: bool) -> Client {
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut request: http::Request<kube::client::Body>| {
            request.extensions_mut().insert(user.clone());
            if without_managed_fields {
                request.extensions_mut().insert(WithoutManagedFields);
            }
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

    /// The controllers' client is answered without `managedFields` — by a create, a get, a list
    /// page and a watch — while the server keeps them: an update through it that leaves them out
    /// keeps the stored entries, and an ordinary client still reads them.
    #[tokio::test]
    async fn controllers_are_answered_without_managed_fields_which_the_server_keeps()
    -> Result<(), Box<dyn std::error::Error>> {
        use futures::{StreamExt, TryStreamExt};
        use kube::api::{ListParams, WatchEvent, WatchParams};
        let dir = tempfile::tempdir()?;
        let store = Store::open(&dir.path().join("state.db"), StoreOptions::default())?;
        let server = ApiServer::new(
            store,
            std::sync::Arc::new(ModelConverter),
            Auth { tokens: Vec::new() },
        )
        .await?;
        let whole: Api<ConfigMap> = Api::default_namespaced(in_process_client(server.router()));
        let slim: Api<ConfigMap> = Api::default_namespaced(in_process_controller_client(
            server.router(),
            UserInfo::admin(),
        ));
        let mut map = ConfigMap::default();
        map.metadata.name = Some("m".into());
        map.data = Some([("k".to_owned(), "v".to_owned())].into());
        let created = slim.create(&PostParams::default(), &map).await?;
        assert_eq!(created.metadata.managed_fields, None, "the create's answer");
        let mut read = slim.get("m").await?;
        assert_eq!(read.metadata.managed_fields, None, "a get");
        for params in [ListParams::default().limit(10), ListParams::default()] {
            let listed = slim.list(&params).await?;
            assert!(
                listed.items.len() == 1
                    && listed
                        .items
                        .iter()
                        .all(|m| m.metadata.managed_fields.is_none()),
                "a list ({params:?})"
            );
        }
        let mut events = slim
            .watch(
                &WatchParams::default(),
                &created
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap_or_default(),
            )
            .await?
            .boxed();
        read.data = Some([("k".to_owned(), "w".to_owned())].into());
        let updated = slim.replace("m", &PostParams::default(), &read).await?;
        assert_eq!(updated.metadata.managed_fields, None, "the update's answer");
        match events.try_next().await? {
            Some(WatchEvent::Modified(seen)) => {
                assert_eq!(seen.metadata.managed_fields, None, "a watch event")
            }
            other => panic!("the update's watch event: {other:?}"),
        }
        let stored = whole.get("m").await?;
        let managers: Vec<String> = stored
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|entry| entry.manager)
            .collect();
        assert_eq!(
            managers,
            vec!["capstan".to_owned()],
            "the server kept the entries the update left out"
        );
        Ok(())
    }
}
