//! The create-only review APIs that ask the server about identities and rights:
//! `authorization.k8s.io/v1` SelfSubjectAccessReview, SubjectAccessReview,
//! LocalSubjectAccessReview and SelfSubjectRulesReview (`kubectl auth can-i [--list]`), and
//! `authentication.k8s.io` SelfSubjectReview (`kubectl auth whoami`, v1 and v1beta1) and
//! TokenReview (v1). Nothing is stored: each answers the request with its `status` filled in.

use crate::ApiState;
use crate::authn::UserInfo;
use crate::authz::{self, Attributes, Decision, ResourceAttributes};
use crate::status::ApiError;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTHENTICATION: &str = "authentication.k8s.io";

/// One review resource: group, versions, plural, kind, namespaced.
struct Review {
    group: &'static str,
    versions: &'static [&'static str],
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
}

const REVIEWS: &[Review] = &[
    Review {
        group: AUTHORIZATION,
        versions: &["v1"],
        plural: "selfsubjectaccessreviews",
        kind: "SelfSubjectAccessReview",
        namespaced: false,
    },
    Review {
        group: AUTHORIZATION,
        versions: &["v1"],
        plural: "subjectaccessreviews",
        kind: "SubjectAccessReview",
        namespaced: false,
    },
    Review {
        group: AUTHORIZATION,
        versions: &["v1"],
        plural: "localsubjectaccessreviews",
        kind: "LocalSubjectAccessReview",
        namespaced: true,
    },
    Review {
        group: AUTHORIZATION,
        versions: &["v1"],
        plural: "selfsubjectrulesreviews",
        kind: "SelfSubjectRulesReview",
        namespaced: false,
    },
    Review {
        group: AUTHENTICATION,
        versions: &["v1", "v1beta1"],
        plural: "selfsubjectreviews",
        kind: "SelfSubjectReview",
        namespaced: false,
    },
    Review {
        group: AUTHENTICATION,
        versions: &["v1"],
        plural: "tokenreviews",
        kind: "TokenReview",
        namespaced: false,
    },
];

/// The groups and versions the reviews add to discovery.
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        (AUTHENTICATION, vec!["v1", "v1beta1"]),
        (AUTHORIZATION, vec!["v1"]),
    ]
}

/// The discovery entries of `group`/`version`.
pub fn resources(group: &str, version: &str) -> Vec<Value> {
    REVIEWS
        .iter()
        .filter(|r| r.group == group && r.versions.contains(&version))
        .map(|r| {
            json!({
                "name": r.plural,
                "singularName": r.kind.to_ascii_lowercase(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["create"],
            })
        })
        .collect()
}

/// Whether a path addresses a review resource.
pub fn is_review(group: &str, version: &str, plural: &str) -> bool {
    REVIEWS
        .iter()
        .any(|r| r.group == group && r.plural == plural && r.versions.contains(&version))
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn resource_attributes(spec: &Value) -> Result<Attributes, ApiError> {
    if let Some(r) = spec["resourceAttributes"].as_object() {
        let field = |k: &str| r.get(k).map(text).unwrap_or_default();
        return Ok(Attributes {
            verb: field("verb"),
            resource: Some(ResourceAttributes {
                group: field("group"),
                version: field("version"),
                resource: field("resource"),
                subresource: field("subresource"),
                namespace: field("namespace"),
                name: field("name"),
            }),
            path: String::new(),
        });
    }
    if let Some(n) = spec["nonResourceAttributes"].as_object() {
        return Ok(Attributes {
            verb: n.get("verb").map(text).unwrap_or_default(),
            resource: None,
            path: n.get("path").map(text).unwrap_or_default(),
        });
    }
    Err(invalid(
        "spec.resourceAttributes",
        "exactly one of nonResourceAttributes or resourceAttributes must be specified",
    ))
}

fn invalid(field: &str, message: &str) -> ApiError {
    ApiError::Invalid {
        group: AUTHORIZATION.into(),
        kind: "SubjectAccessReview".into(),
        name: String::new(),
        summary: format!("{field}: Invalid value: {message}"),
        causes: vec![crate::status::Cause {
            reason: "FieldValueInvalid".into(),
            message: message.into(),
            field: field.into(),
        }],
    }
}

async fn access_status(
    state: &ApiState,
    user: &UserInfo,
    attributes: &Attributes,
) -> Result<Value, ApiError> {
    Ok(match authz::authorize(state, user, attributes).await? {
        Decision::Allow => json!({"allowed": true}),
        Decision::Deny { reason } if reason.is_empty() => json!({"allowed": false}),
        Decision::Deny { reason } => {
            json!({"allowed": false, "reason": reason, "evaluationError": reason})
        }
    })
}

fn user_of_spec(spec: &Value) -> UserInfo {
    let extra = spec["extra"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let values = v
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_owned)
                                .collect()
                        })
                        .unwrap_or_default();
                    (k.clone(), values)
                })
                .collect()
        })
        .unwrap_or_default();
    UserInfo {
        username: text(&spec["user"]),
        uid: text(&spec["uid"]),
        groups: spec["groups"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        extra,
    }
}

/// Answers a review request (`POST`), or `None` when the path is not a review.
pub async fn handle(
    state: &ApiState,
    user: &UserInfo,
    path: &crate::target::ResourcePath,
    method: &axum::http::Method,
    body: &Value,
) -> Option<Result<Response, ApiError>> {
    let review = REVIEWS.iter().find(|r| {
        r.group == path.group
            && r.plural == path.plural
            && r.versions.contains(&path.version.as_str())
    })?;
    if *method != axum::http::Method::POST || path.name.is_some() || path.subresource.is_some() {
        return Some(Err(ApiError::MethodNotAllowed));
    }
    if review.namespaced != path.namespace.is_some() {
        return Some(Err(ApiError::NoSuchResource));
    }
    Some(answer(state, user, review, path, body).await)
}

async fn answer(
    state: &ApiState,
    user: &UserInfo,
    review: &Review,
    path: &crate::target::ResourcePath,
    body: &Value,
) -> Result<Response, ApiError> {
    let spec = &body["spec"];
    let status = match review.plural {
        "selfsubjectaccessreviews" => {
            access_status(state, user, &resource_attributes(spec)?).await?
        }
        "subjectaccessreviews" => {
            let subject = user_of_spec(spec);
            if subject.username.is_empty() && subject.groups.is_empty() {
                return Err(invalid(
                    "spec.user",
                    "at least one of user or group must be specified",
                ));
            }
            access_status(state, &subject, &resource_attributes(spec)?).await?
        }
        "localsubjectaccessreviews" => {
            let namespace = path.namespace.clone().unwrap_or_default();
            let mut attributes = resource_attributes(spec)?;
            match attributes.resource.as_mut() {
                Some(r) if r.namespace.is_empty() || r.namespace == namespace => {
                    r.namespace = namespace;
                }
                Some(_) => {
                    return Err(invalid(
                        "spec.resourceAttributes.namespace",
                        "must match metadata.namespace",
                    ));
                }
                None => {
                    return Err(invalid(
                        "spec.nonResourceAttributes",
                        "disallowed on this kind of request",
                    ));
                }
            }
            let subject = user_of_spec(spec);
            access_status(state, &subject, &attributes).await?
        }
        "selfsubjectrulesreviews" => {
            let namespace = text(&spec["namespace"]);
            let (rules, errors) = authz::rules_for(state, user, &namespace).await?;
            let (paths, resources): (Vec<_>, Vec<_>) =
                rules.iter().partition(|r| !r.non_resource_urls.is_empty());
            let mut status = json!({
                "resourceRules": resources.iter().map(|r| r.to_value()).collect::<Vec<_>>(),
                "nonResourceRules": paths.iter().map(|r| r.to_value()).collect::<Vec<_>>(),
                "incomplete": !errors.is_empty(),
            });
            if !errors.is_empty() {
                status["evaluationError"] = json!(errors.join(", "));
            }
            status
        }
        "selfsubjectreviews" => json!({"userInfo": user}),
        "tokenreviews" => {
            let token = text(&spec["token"]);
            match review_token(state, token.trim(), &spec["audiences"]).await {
                Ok((found, audiences)) => {
                    json!({"authenticated": true, "user": found, "audiences": audiences})
                }
                Err(rejection) => {
                    tracing::info!(reason = %rejection, "TokenReview: the token does not authenticate");
                    json!({"authenticated": false, "user": {}, "error": "invalid bearer token"})
                }
            }
        }
        _ => return Err(ApiError::NoSuchResource),
    };
    let mut answer = json!({
        "apiVersion": format!("{}/{}", review.group, path.version),
        "kind": review.kind,
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    });
    if review.namespaced {
        answer["metadata"]["namespace"] = json!(path.namespace);
    }
    if answer["spec"].is_null()
        && let Some(obj) = answer.as_object_mut()
    {
        obj.remove("spec");
    }
    if review.plural == "tokenreviews" {
        // The token is not echoed back.
        answer["spec"] = json!({"audiences": spec["audiences"]});
    }
    Ok(crate::handlers::json_response(
        StatusCode::CREATED,
        &answer,
        &[],
    ))
}

/// A TokenReview's answer: the token's user and the audiences it is valid for among those the
/// review names (the API server's own when it names none), as kube-apiserver answers it.
/// ServiceAccount tokens carry their audiences; other tokens are valid only for the server's.
async fn review_token(
    state: &ApiState,
    token: &str,
    requested: &Value,
) -> Result<(crate::authn::UserInfo, Vec<String>), crate::authn::TokenRejection> {
    use crate::builtin::tokens;
    let issuer = state.token_issuer();
    let api = issuer.api_audiences();
    let mut audiences: Vec<String> = requested
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if audiences.is_empty() {
        audiences = api.to_vec();
    }
    if tokens::looks_like_jwt(token) {
        let now = jiff::Timestamp::now().as_second();
        return crate::authn::service_account_token_user(state, token, &audiences, now).await;
    }
    let shared: Vec<String> = audiences.into_iter().filter(|a| api.contains(a)).collect();
    if shared.is_empty() {
        return Err(crate::authn::TokenRejection::ServiceAccountToken(
            "not for this audience".into(),
        ));
    }
    let user = crate::authn::authenticate_token(state, token).await?;
    Ok((user, shared))
}
