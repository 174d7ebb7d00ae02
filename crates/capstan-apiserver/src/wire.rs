//! Media types on the wire: request bodies in protobuf are transcoded to JSON before the handlers
//! see them, and responses go back in protobuf when the client prefers it, for Kubernetes' own kinds
//! (custom resources are JSON only, as in Kubernetes), watches as length-prefixed protobuf
//! WatchEvents. Bodies in a media type the server does not read are refused with `415` and a
//! Status.

use crate::protobuf;
use crate::status::ApiError;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http_body_util::BodyExt;

/// The media types request bodies may have (patches are checked by the patch handler).
const READABLE: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/json-patch+json",
    "application/apply-patch+yaml",
    "application/apply-patch+json",
    "*/*",
    "text/plain",
];

fn media_type(headers: &HeaderMap, name: header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split([';', ','])
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Transcodes a protobuf body to JSON (rewriting `Content-Type`), and refuses media types the
/// server cannot read. `typed`: the target is one of Kubernetes' own kinds.
pub fn request_to_json(
    typed: bool,
    mut headers: HeaderMap,
    body: Bytes,
) -> Result<(HeaderMap, Bytes), ApiError> {
    if body.is_empty() {
        return Ok((headers, body));
    }
    let content_type = media_type(&headers, header::CONTENT_TYPE);
    if content_type == protobuf::MEDIA_TYPE {
        if !typed {
            return Err(unsupported(&content_type));
        }
        let value = protobuf::decode(&body).map_err(|e| match e {
            protobuf::ProtobufError::UnknownType { .. } => unsupported(&content_type),
            other => {
                ApiError::BadRequest(format!("the protobuf request body is not valid: {other}"))
            }
        })?;
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let json = serde_json::to_vec(&value)
            .map_err(|e| ApiError::Internal(format!("re-encoding a protobuf body: {e}")))?;
        return Ok((headers, Bytes::from(json)));
    }
    if content_type.is_empty() || READABLE.contains(&content_type.as_str()) {
        return Ok((headers, body));
    }
    Err(unsupported(&content_type))
}

fn unsupported(content_type: &str) -> ApiError {
    ApiError::UnsupportedMediaType(format!(
        "application/json, application/yaml, application/vnd.kubernetes.protobuf (Kubernetes' own kinds only) (got {content_type:?})"
    ))
}

/// Whether the client's first choice is protobuf.
pub fn prefers_protobuf(headers: &HeaderMap) -> bool {
    media_type(headers, header::ACCEPT) == protobuf::MEDIA_TYPE
}

/// Re-encodes a JSON response in protobuf when its object has a protobuf form; anything else (a
/// streamed list that failed midway, a Table) is passed on as it is.
pub async fn response_to_protobuf(response: Response, api_version: &str) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(collected) = body.collect().await else {
        return (parts.status, "response body failed").into_response();
    };
    let bytes = collected.to_bytes();
    let encoded = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(|v| {
            let kind = v["kind"].as_str().unwrap_or_default();
            kind == "Status" || v["apiVersion"].as_str() == Some(api_version)
        })
        .and_then(|v| protobuf::encode(&v).ok());
    let mut response = match encoded {
        Some(pb) => Response::from_parts(parts, Body::from(pb)),
        None => return Response::from_parts(parts, Body::from(bytes)),
    };
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(protobuf::MEDIA_TYPE),
    );
    response.headers_mut().remove(header::CONTENT_LENGTH);
    response
}

/// Re-encodes a watch (JSON lines of `{"type", "object"}`) as a protobuf watch stream, event by
/// event as they come; a watch that failed before it started answers its Status in protobuf.
pub async fn watch_to_protobuf(response: Response, api_version: &str) -> Response {
    if !response.status().is_success() {
        return response_to_protobuf(response, api_version).await;
    }
    let (mut parts, body) = response.into_parts();
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        let mut stream = body.into_data_stream();
        let mut pending: Vec<u8> = Vec::new();
        while let Some(Ok(chunk)) = stream.next().await {
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let Some(frame) = serde_json::from_slice::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|event| protobuf::watch_frame(&event))
                else {
                    continue;
                };
                if sender.send(Ok(Bytes::from(frame))).await.is_err() {
                    return;
                }
            }
        }
    });
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(protobuf::WATCH_MEDIA_TYPE),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(
        parts,
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver)),
    )
}
