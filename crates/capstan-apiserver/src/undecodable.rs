//! `/capstan/v1/undecodable`: the stored rows that cannot be decoded (written by an older capstan
//! that did not bound nesting, or altered outside capstan), and their removal.
//!
//! Such rows are skipped by lists and watches and answer 500 to a get; this endpoint is how
//! `capstan undecodable` finds them and removes them. Only keys are ever shown, never a row's text
//! (it may hold a Secret).
//!
//! - `GET` answers `{"items": [{"resource", "namespace", "name"}]}`.
//! - `DELETE ?resource=R&namespace=NS&name=N` removes one such row (a row that decodes is refused:
//!   ordinary objects are deleted through the API, with their finalizers).

use crate::ApiState;
use crate::status::ApiError;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use capstan_store::ObjectKey;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

/// `GET /capstan/v1/undecodable`.
pub(crate) async fn list(State(state): State<Arc<ApiState>>) -> Response {
    let items: Vec<_> = state
        .store
        .undecodable()
        .into_iter()
        .map(|key| json!({"resource": key.resource, "namespace": key.namespace, "name": key.name}))
        .collect();
    axum::Json(json!({ "items": items })).into_response()
}

/// `DELETE /capstan/v1/undecodable?resource=&namespace=&name=`.
pub(crate) async fn remove(
    State(state): State<Arc<ApiState>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let (Some(resource), Some(name)) = (query.get("resource"), query.get("name")) else {
        return ApiError::BadRequest("resource and name are required".into()).into_response();
    };
    let key = ObjectKey::new(
        resource.clone(),
        query.get("namespace").cloned().unwrap_or_default(),
        name.clone(),
    );
    match state.store.remove_undecodable(key).await {
        Ok(removed) => {
            tracing::info!(
                resource = %removed.key.resource,
                namespace = %removed.key.namespace,
                name = %removed.key.name,
                "removed an undecodable stored row"
            );
            axum::Json(crate::status::success_status()).into_response()
        }
        Err(err) => ApiError::from(err).into_response(),
    }
}
