//! API errors and their wire form: the Kubernetes `Status` object, with the HTTP code, `reason` and
//! `details.causes` that kubectl and kube-rs read.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// One field-level cause of an `Invalid` error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, `FieldValueDuplicate`, ...
    pub reason: String,
    pub message: String,
    /// Dotted field path (`spec.replicas`).
    pub field: String,
}

/// `.group` for a kind of a named group, nothing for the core group.
fn group_suffix(group: &str) -> String {
    if group.is_empty() {
        String::new()
    } else {
        format!(".{group}")
    }
}

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        group: String,
        resource: String,
        name: String,
    },
    #[error("the server could not find the requested resource")]
    NoSuchResource,
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        group: String,
        resource: String,
        name: String,
    },
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    Conflict {
        group: String,
        resource: String,
        name: String,
        message: String,
    },
    /// Server-side apply would change fields other managers own.
    #[error("{message}")]
    ApplyConflict { message: String, causes: Vec<Cause> },
    /// Worded as kube-apiserver does, with the group-qualified kind
    /// (`KubeadmControlPlane.controlplane.cluster.x-k8s.io "k0" is invalid: spec.version: Required value`).
    #[error("{}{} \"{name}\" is invalid: {summary}", kind, group_suffix(group))]
    Invalid {
        group: String,
        kind: String,
        name: String,
        summary: String,
        causes: Vec<Cause>,
    },
    #[error("{0}")]
    BadRequest(String),
    #[error("too old resource version: {0}")]
    Gone(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("Unauthorized")]
    Unauthorized,
    /// 403: `message` is kube-apiserver's (`User "x" cannot ...`); qualified by resource and name.
    #[error("{}", forbidden_message(group, resource, name, message))]
    Forbidden {
        group: String,
        resource: String,
        name: String,
        message: String,
    },
    #[error("the body of the request was in an unknown format - accepted media types include: {0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Internal(String),
    #[error("Request entity too large: {0}")]
    TooLarge(String),
}

impl ApiError {
    /// The HTTP status code.
    pub fn code(&self) -> StatusCode {
        match self {
            Self::NotFound { .. } | Self::NoSuchResource => StatusCode::NOT_FOUND,
            Self::AlreadyExists { .. } | Self::Conflict { .. } | Self::ApplyConflict { .. } => {
                StatusCode::CONFLICT
            }
            Self::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Gone(_) => StatusCode::GONE,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    /// The machine-readable `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotFound { .. } | Self::NoSuchResource => "NotFound",
            Self::AlreadyExists { .. } => "AlreadyExists",
            Self::Conflict { .. } | Self::ApplyConflict { .. } => "Conflict",
            Self::Invalid { .. } => "Invalid",
            Self::BadRequest(_) => "BadRequest",
            Self::Gone(_) => "Expired",
            Self::MethodNotAllowed => "MethodNotAllowed",
            Self::Unauthorized => "Unauthorized",
            Self::Forbidden { .. } => "Forbidden",
            Self::UnsupportedMediaType(_) => "UnsupportedMediaType",
            Self::Internal(_) => "InternalError",
            Self::TooLarge(_) => "RequestEntityTooLarge",
        }
    }

    /// The `Status` object.
    pub fn to_status(&self) -> serde_json::Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code().as_u16(),
        });
        let details = match self {
            Self::NotFound {
                group,
                resource,
                name,
            }
            | Self::AlreadyExists {
                group,
                resource,
                name,
            }
            | Self::Conflict {
                group,
                resource,
                name,
                ..
            }
            | Self::Forbidden {
                group,
                resource,
                name,
                ..
            } => Some(json!({"name": name, "group": group, "kind": resource})),
            Self::Invalid {
                group,
                kind,
                name,
                causes,
                ..
            } => Some(json!({
                "name": name, "group": group, "kind": kind,
                "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
            })),
            Self::ApplyConflict { causes, .. } => Some(json!({
                "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
            })),
            _ => None,
        };
        if let (Some(details), Some(obj)) = (details, status.as_object_mut()) {
            obj.insert("details".into(), details);
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if matches!(self, Self::Internal(_)) {
            tracing::error!(error = %self, "internal error");
        }
        (self.code(), axum::Json(self.to_status())).into_response()
    }
}

impl From<capstan_store::StoreError> for ApiError {
    fn from(err: capstan_store::StoreError) -> Self {
        use capstan_store::StoreError as E;
        match err {
            E::AlreadyExists(key) => Self::AlreadyExists {
                group: group_of_resource(&key.resource),
                resource: plural_of_resource(&key.resource),
                name: key.name,
            },
            E::NotFound(key) => Self::NotFound {
                group: group_of_resource(&key.resource),
                resource: plural_of_resource(&key.resource),
                name: key.name,
            },
            E::Conflict { key, .. } => Self::Conflict {
                group: group_of_resource(&key.resource),
                resource: plural_of_resource(&key.resource),
                name: key.name,
                message: "the object has been modified; please apply your changes to the latest version and try again".into(),
            },
            E::Gone { requested, .. } => Self::Gone(requested.to_string()),
            E::TooDeep { key, depth, limit } => {
                let message =
                    format!("the object is nested {depth} levels deep; the limit is {limit}");
                Self::Invalid {
                    group: group_of_resource(&key.resource),
                    kind: plural_of_resource(&key.resource),
                    name: key.name,
                    summary: message.clone(),
                    causes: vec![Cause {
                        reason: "FieldValueInvalid".into(),
                        message,
                        field: String::new(),
                    }],
                }
            }
            E::TooLarge { bytes, limit, .. } => Self::TooLarge(format!(
                "the object would be {bytes} bytes; the limit is {limit}"
            )),
            E::Decodable(key) => Self::BadRequest(format!(
                "the stored row of {key} decodes; delete it through the API"
            )),
            other => Self::Internal(other.to_string()),
        }
    }
}

/// `NewForbidden`'s message: `<resource>[.<group>] ["name"] is forbidden: <message>`.
fn forbidden_message(group: &str, resource: &str, name: &str, message: &str) -> String {
    let qualified = if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    };
    match (qualified.is_empty(), name.is_empty()) {
        (true, _) => format!("forbidden: {message}"),
        (false, true) => format!("{qualified} is forbidden: {message}"),
        (false, false) => format!("{qualified} {name:?} is forbidden: {message}"),
    }
}

fn group_of_resource(resource: &str) -> String {
    resource
        .split_once('/')
        .map(|(g, _)| g.to_owned())
        .unwrap_or_default()
}

fn plural_of_resource(resource: &str) -> String {
    resource
        .split_once('/')
        .map_or(resource, |(_, p)| p)
        .to_owned()
}

/// A successful `Status` (deletions of objects without finalizers answer with this on collections).
pub fn success_status() -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
}
