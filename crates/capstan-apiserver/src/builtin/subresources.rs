//! Subresources other than `status`: `scale` (any kind whose definition declares it), a Pod's
//! `eviction` (honouring PodDisruptionBudgets, as a drain needs) and `binding`, and a Namespace's
//! `finalize`.

use crate::ApiState;
use crate::handlers::{self, Request};
use crate::selectors::labels_of;
use crate::status::{ApiError, Cause};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use capstan_store::ObjectKey;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why a subresource request failed before it reached an object.
#[derive(Debug, thiserror::Error)]
pub enum SubresourceError {
    #[error("spec.replicas must be a non-negative integer")]
    Replicas,
}

impl From<SubresourceError> for ApiError {
    fn from(err: SubresourceError) -> Self {
        ApiError::BadRequest(err.to_string())
    }
}

/// The subresources of `request`'s kind besides `status`, as discovery lists them: (name, kind,
/// group, version, verbs).
pub fn listed(
    crd: &capstan_schema::CrdInfo,
    version: &capstan_schema::CrdVersion,
) -> Vec<(
    String,
    &'static str,
    &'static str,
    &'static str,
    Vec<&'static str>,
)> {
    let mut out = Vec::new();
    if version.subresources.scale.is_some() {
        out.push((
            format!("{}/scale", crd.plural),
            "Scale",
            "autoscaling",
            "v1",
            vec!["get", "patch", "update"],
        ));
    }
    if crd.group.is_empty() && crd.kind == "Pod" {
        out.push((
            "pods/eviction".to_owned(),
            "Eviction",
            "policy",
            "v1",
            vec!["create"],
        ));
        out.push((
            "pods/binding".to_owned(),
            "Binding",
            "",
            "v1",
            vec!["create"],
        ));
    }
    if crd.group.is_empty() && crd.kind == "ServiceAccount" {
        out.push((
            "serviceaccounts/token".to_owned(),
            "TokenRequest",
            "authentication.k8s.io",
            "v1",
            vec!["create"],
        ));
    }
    if crd.group.is_empty() && crd.kind == "Namespace" {
        out.push((
            "namespaces/finalize".to_owned(),
            "Namespace",
            "",
            "v1",
            vec!["update"],
        ));
    }
    out
}

/// Serves a subresource other than `status`; `None` when the kind has no such subresource.
pub(crate) async fn handle(
    state: &Arc<ApiState>,
    method: &Method,
    request: &Request,
    body: &Bytes,
) -> Option<Result<Response, ApiError>> {
    let sub = request.path.subresource.as_deref()?;
    let core = request.served.crd.group.is_empty();
    let kind = request.served.crd.kind.as_str();
    Some(match (sub, kind) {
        ("scale", _) if request.served.version()?.subresources.scale.is_some() => {
            scale(state, method, request, body).await
        }
        ("eviction", "Pod") if core && *method == Method::POST => evict(state, request, body).await,
        ("binding", "Pod") if core && *method == Method::POST => bind(state, request, body).await,
        ("finalize", "Namespace") if core && *method == Method::PUT => {
            finalize(state, request, body).await
        }
        ("token", "ServiceAccount") if core && *method == Method::POST => {
            token(state, request, body).await
        }
        _ => return None,
    })
}

/// A `.a.b` path as a JSON pointer.
fn pointer(json_path: &str) -> String {
    format!("/{}", json_path.trim_start_matches('.').replace('.', "/"))
}

/// A LabelSelector object as the `key=value,...` text a Scale carries.
fn selector_text(selector: &Value) -> String {
    let mut parts: Vec<String> = selector["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    for expr in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = expr["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = expr["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        parts.push(match expr["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            _ => format!("!{key}"),
        });
    }
    parts.join(",")
}

/// The `autoscaling/v1` Scale of an object.
fn scale_of(object: &Value, scale: &capstan_schema::ScaleSubresource) -> Value {
    let replicas = object
        .pointer(&pointer(&scale.spec_replicas_path))
        .cloned()
        .unwrap_or(json!(0));
    let status_replicas = object
        .pointer(&pointer(&scale.status_replicas_path))
        .cloned()
        .unwrap_or(json!(0));
    let selector = match scale
        .label_selector_path
        .as_deref()
        .and_then(|p| object.pointer(&pointer(p)))
    {
        Some(Value::String(s)) => s.clone(),
        Some(other) if other.is_object() => selector_text(other),
        _ => object
            .pointer("/spec/selector")
            .map(selector_text)
            .unwrap_or_default(),
    };
    let meta = &object["metadata"];
    let mut metadata = json!({
        "name": meta["name"],
        "uid": meta["uid"],
        "resourceVersion": meta["resourceVersion"],
        "creationTimestamp": meta["creationTimestamp"],
    });
    if let (Some(ns), Some(m)) = (meta["namespace"].as_str(), metadata.as_object_mut()) {
        m.insert("namespace".into(), json!(ns));
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas},
        "status": {"replicas": status_replicas, "selector": selector},
    })
}

async fn scale(
    state: &Arc<ApiState>,
    method: &Method,
    request: &Request,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let spec = request
        .served
        .version()
        .and_then(|v| v.subresources.scale.clone())
        .ok_or(ApiError::NoSuchResource)?;
    let name = request.path.name.clone().unwrap_or_default();
    let mut warnings = Vec::new();
    for _ in 0..handlers::MAX_WRITE_ATTEMPTS {
        let current = state
            .store
            .get(request.key(&name))
            .await?
            .ok_or_else(|| request.not_found(&name))?;
        let object = request.to_requested(state, handlers::stored_value(&current)?)?;
        let before = scale_of(&object, &spec);
        let wanted = match *method {
            Method::GET => return Ok(handlers::json_response(StatusCode::OK, &before, &[])),
            Method::PUT => handlers::parse_body(&request.headers, body)?,
            // A patch is applied to the scale without its resourceVersion, so only a patch that
            // sets one makes the write conditional: otherwise a concurrent write (a controller's
            // status) is retried on the new version instead of answered with a conflict.
            Method::PATCH => {
                let mut unversioned = before.clone();
                if let Some(meta) = unversioned
                    .get_mut("metadata")
                    .and_then(Value::as_object_mut)
                {
                    meta.remove("resourceVersion");
                }
                handlers::patched(request, &unversioned, body)?
            }
            _ => return Err(ApiError::MethodNotAllowed),
        };
        let replicas = wanted["spec"]["replicas"]
            .as_i64()
            .filter(|r| *r >= 0)
            .ok_or(SubresourceError::Replicas)?;
        let precondition = wanted["metadata"]["resourceVersion"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        if let Some(expected) = &precondition
            && *expected != current.resource_version.to_string()
        {
            return Err(ApiError::Conflict {
                group: request.served.crd.group.clone(),
                resource: request.path.plural.clone(),
                name,
                message: "the object has been modified; please apply your changes to the latest version and try again".into(),
            });
        }
        let mut updated = object.clone();
        if let Some(slot) = updated.pointer_mut(&pointer(&spec.spec_replicas_path)) {
            *slot = json!(replicas);
        } else if let Some(spec_obj) = updated.get_mut("spec").and_then(Value::as_object_mut) {
            spec_obj.insert("replicas".into(), json!(replicas));
        }
        match handlers::write_over(state, request, &current, updated, &mut warnings).await {
            Err(ApiError::Conflict { .. }) if precondition.is_none() => continue,
            Err(err) => return Err(err),
            Ok(stored) => {
                return Ok(handlers::json_response(
                    StatusCode::OK,
                    &scale_of(&stored, &spec),
                    &warnings,
                ));
            }
        }
    }
    Err(ApiError::Conflict {
        group: request.served.crd.group.clone(),
        resource: request.path.plural.clone(),
        name,
        message: "too many concurrent writers; try again".into(),
    })
}

/// Whether a LabelSelector object selects `labels` (a missing selector selects nothing, an empty
/// one everything, as for PodDisruptionBudgets in `policy/v1`).
pub(crate) fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    if !selector.is_object() {
        return false;
    }
    let by_label = selector["matchLabels"].as_object().is_none_or(|m| {
        m.iter()
            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
    });
    by_label
        && selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|expr| {
                let key = expr["key"].as_str().unwrap_or_default();
                let values: Vec<&str> = expr["values"]
                    .as_array()
                    .map(|v| v.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let value = labels.get(key);
                match expr["operator"].as_str().unwrap_or_default() {
                    "In" => value.is_some_and(|v| values.contains(&v.as_str())),
                    "NotIn" => value.is_none_or(|v| !values.contains(&v.as_str())),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// An int-or-percent against `total`, rounded up as the disruption controller does.
fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((percent * total + 99) / 100)
        }
        _ => None,
    }
}

/// How many healthy pods a budget needs out of `expected`.
fn desired_healthy(budget: &Value, expected: i64) -> i64 {
    let spec = &budget["spec"];
    if let Some(max) = scaled(&spec["maxUnavailable"], expected) {
        (expected - max).max(0)
    } else {
        scaled(&spec["minAvailable"], expected).unwrap_or(0)
    }
}

fn created_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// `POST pods/NAME/eviction`: deletes the Pod unless that would break a PodDisruptionBudget that
/// selects it (429, as kube-apiserver answers, so a drain retries). With no disruption controller
/// here the budget is evaluated from the Pods themselves: healthy means the `Ready` condition is
/// true; expected pods are the pods the budget selects.
async fn evict(
    state: &Arc<ApiState>,
    request: &Request,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let name = request.path.name.clone().unwrap_or_default();
    let namespace = request.path.namespace.clone().unwrap_or_default();
    let eviction = if body.is_empty() {
        json!({})
    } else {
        handlers::parse_body(&request.headers, body)?
    };
    let current = state
        .store
        .get(request.key(&name))
        .await?
        .ok_or_else(|| request.not_found(&name))?;
    let pod = handlers::stored_value(&current)?;
    let terminal = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    if !terminal && !crate::lifecycle::is_being_deleted(&pod) {
        let labels = labels_of(&pod);
        let budgets = state
            .store
            .list(
                "policy/poddisruptionbudgets".into(),
                Some(namespace.clone()),
                None,
                None,
                None,
            )
            .await?;
        let matching: Vec<(Value, u64)> = budgets
            .items
            .iter()
            .filter_map(|b| {
                handlers::stored_value(b)
                    .ok()
                    .map(|v| (v, b.resource_version))
            })
            .filter(|(b, _)| selects(&b["spec"]["selector"], &labels))
            .collect();
        if matching.len() > 1 {
            return Err(ApiError::Internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
            ));
        }
        if let Some((budget, _)) = matching.first() {
            let pods = state
                .store
                .list("/pods".into(), Some(namespace.clone()), None, None, None)
                .await?;
            let selected: Vec<Value> = pods
                .items
                .iter()
                .filter_map(|p| handlers::stored_value(p).ok())
                .filter(|p| {
                    !crate::lifecycle::is_being_deleted(p)
                        && selects(&budget["spec"]["selector"], &labels_of(p))
                })
                .collect();
            let expected = i64::try_from(selected.len()).unwrap_or(i64::MAX);
            let healthy =
                i64::try_from(selected.iter().filter(|p| is_ready(p)).count()).unwrap_or(0);
            let desired = desired_healthy(budget, expected);
            let allowed = if is_ready(&pod) {
                healthy - desired >= 1
            } else {
                // An unhealthy pod may go when the budget is met without it
                // (`unhealthyPodEvictionPolicy: IfHealthyBudget`, the default) or always.
                healthy >= desired || budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
            };
            if !allowed {
                let budget_name = budget["metadata"]["name"].as_str().unwrap_or_default();
                let cause = Cause {
                    reason: "DisruptionBudget".into(),
                    message: format!(
                        "The disruption budget {budget_name} needs {desired} healthy pods and has {healthy} currently"
                    ),
                    field: String::new(),
                };
                let status = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                    "reason": "TooManyRequests", "code": 429,
                    "details": {"causes": [{"reason": cause.reason, "message": cause.message}]},
                });
                return Ok((StatusCode::TOO_MANY_REQUESTS, axum::Json(status)).into_response());
            }
        }
    }
    let options = eviction
        .get("deleteOptions")
        .cloned()
        .unwrap_or_else(|| json!({}));
    match handlers::delete_one(state, request, current, &options).await {
        Ok(_) => Ok((StatusCode::CREATED, axum::Json(created_status())).into_response()),
        Err(err) => Err(err),
    }
}

/// `POST pods/NAME/binding`: assigns the Pod to a Node (what a scheduler does).
async fn bind(
    state: &Arc<ApiState>,
    request: &Request,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let name = request.path.name.clone().unwrap_or_default();
    let binding = handlers::parse_body(&request.headers, body)?;
    let node = binding["target"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::BadRequest("target.name: Required value".into()))?
        .to_owned();
    let mut warnings = Vec::new();
    for _ in 0..handlers::MAX_WRITE_ATTEMPTS {
        let current = state
            .store
            .get(request.key(&name))
            .await?
            .ok_or_else(|| request.not_found(&name))?;
        let mut pod = handlers::stored_value(&current)?;
        if let Some(assigned) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            return Err(ApiError::Conflict {
                group: String::new(),
                resource: "pods".into(),
                name: name.clone(),
                message: format!("pod {name} is already assigned to node \"{assigned}\""),
            });
        }
        if let Some(spec) = pod["spec"].as_object_mut() {
            spec.insert("nodeName".into(), json!(node));
        }
        match handlers::write_over(state, request, &current, pod, &mut warnings).await {
            Err(ApiError::Conflict { .. }) => continue,
            Err(err) => return Err(err),
            Ok(_) => {
                return Ok((StatusCode::CREATED, axum::Json(created_status())).into_response());
            }
        }
    }
    Err(ApiError::Conflict {
        group: String::new(),
        resource: "pods".into(),
        name,
        message: "too many concurrent writers; try again".into(),
    })
}

/// `POST serviceaccounts/NAME/token`: a signed, expiring bearer token for the ServiceAccount.
async fn token(
    state: &Arc<ApiState>,
    request: &Request,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let name = request.path.name.clone().unwrap_or_default();
    let token_request = if body.is_empty() {
        json!({})
    } else {
        handlers::parse_body(&request.headers, body)?
    };
    let current = state
        .store
        .get(request.key(&name))
        .await?
        .ok_or_else(|| request.not_found(&name))?;
    let account = handlers::stored_value(&current)?;
    let namespace = request.path.namespace.as_deref().unwrap_or_default();
    let issuer = state.token_issuer();
    let spec = super::tokens::TokenSpec::from_request(&token_request, &issuer)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    // A bound token names an object of the same namespace that exists (with the uid given, if
    // any); it is valid only while that object does.
    let bound = match &spec.bound {
        Some((kind, bound_name)) => {
            let resource = if kind == "Pod" { "/pods" } else { "/secrets" };
            let stored = state
                .store
                .get(ObjectKey::new(resource, namespace, bound_name.clone()))
                .await?
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "spec.boundObjectRef: {kind} {namespace}/{bound_name} not found"
                    ))
                })?;
            let object = handlers::stored_value(&stored)?;
            let uid = object["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let wanted = token_request["spec"]["boundObjectRef"]["uid"].as_str();
            if wanted.is_some_and(|w| !w.is_empty() && w != uid) {
                return Err(ApiError::Conflict {
                    group: String::new(),
                    resource: resource.trim_start_matches('/').into(),
                    name: bound_name.clone(),
                    message: format!(
                        "the UID in the bound object reference ({}) does not match the UID in record ({uid}). The object might have been deleted and then recreated",
                        wanted.unwrap_or_default()
                    ),
                });
            }
            Some((kind.clone(), bound_name.clone(), uid))
        }
        None => None,
    };
    let issued = super::tokens::issue_at(
        &state.service_account_key(),
        &issuer,
        namespace,
        &name,
        account["metadata"]["uid"].as_str().unwrap_or_default(),
        &spec,
        bound
            .as_ref()
            .map(|(k, n, u)| (k.as_str(), n.as_str(), u.as_str())),
        jiff::Timestamp::now().as_second(),
    )
    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok((StatusCode::CREATED, axum::Json(issued)).into_response())
}

/// `PUT namespaces/NAME/finalize`: replaces `spec.finalizers`; a terminating Namespace with none left
/// is deleted.
async fn finalize(
    state: &Arc<ApiState>,
    request: &Request,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let name = request.path.name.clone().unwrap_or_default();
    let given = handlers::parse_body(&request.headers, body)?;
    let finalizers = given["spec"]["finalizers"].clone();
    let key = ObjectKey::new("/namespaces", "", name.clone());
    let current = state
        .store
        .get(key)
        .await?
        .ok_or_else(|| request.not_found(&name))?;
    let mut namespace = handlers::stored_value(&current)?;
    if let Some(obj) = namespace.as_object_mut() {
        let spec = obj.entry("spec").or_insert_with(|| json!({}));
        if let Some(spec) = spec.as_object_mut() {
            // An empty list, not a missing one: a missing list is defaulted to `kubernetes`.
            let list = if finalizers.is_null() {
                json!([])
            } else {
                finalizers
            };
            spec.insert("finalizers".into(), list);
        }
    }
    let mut warnings = Vec::new();
    let stored = handlers::write_over(state, request, &current, namespace, &mut warnings).await?;
    Ok(handlers::json_response(StatusCode::OK, &stored, &warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_selectors() {
        assert_eq!(pointer(".spec.replicas"), "/spec/replicas");
        let labels: BTreeMap<String, String> =
            [("app".to_owned(), "web".to_owned())].into_iter().collect();
        assert!(selects(&json!({}), &labels));
        assert!(!selects(&Value::Null, &labels));
        assert!(selects(&json!({"matchLabels": {"app": "web"}}), &labels));
        assert!(!selects(
            &json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
            &labels
        ));
        assert_eq!(
            selector_text(&json!({"matchLabels": {"app": "web"}})),
            "app=web"
        );
    }

    #[test]
    fn budgets() {
        assert_eq!(desired_healthy(&json!({"spec": {"minAvailable": 2}}), 3), 2);
        assert_eq!(
            desired_healthy(&json!({"spec": {"maxUnavailable": 1}}), 3),
            2
        );
        assert_eq!(
            desired_healthy(&json!({"spec": {"minAvailable": "50%"}}), 3),
            2
        );
        assert_eq!(
            desired_healthy(&json!({"spec": {"maxUnavailable": "0%"}}), 3),
            3
        );
    }
}
