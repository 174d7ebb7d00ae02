//! Resource requests: get, list, watch, create, update, patch, delete and deletecollection, with the
//! Kubernetes semantics kubectl and kube-rs rely on (preconditions, the status subresource, generation,
//! finalizers, selectors, pagination, dry runs, field validation, Tables).

use crate::conversion::{self, EVENTS_STORAGE};
use crate::lifecycle::{self, WriteScope};
use crate::patching::PatchKind;
use crate::registry::Served;
use crate::selectors::{FieldSelector, LabelSelector, labels_of};
use crate::status::{ApiError, Cause};
use crate::target::ResourcePath;
use crate::{ApiState, managed, table};
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use capstan_store::{EventType, ListQuery, ObjectKey, PastState, StoredObject, WatchItem};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How many times a read-modify-write retries on a conflict it caused itself (patches, unconditional
/// updates) before answering 409. Each lost attempt means another write landed, so retrying always
/// makes progress; kube-apiserver retries such writes until they land, and clients (kubectl, kube-rs,
/// controllers) treat a 409 on a patch without a resourceVersion as a failure, not a retry. The
/// bound only stops a pathological storm: ten writers patching one object at once under load lost
/// eight attempts in a row.
pub(crate) const MAX_WRITE_ATTEMPTS: usize = 128;

/// One resource request, resolved.
pub(crate) struct Request {
    pub served: Served,
    pub path: ResourcePath,
    pub query: HashMap<String, String>,
    pub headers: HeaderMap,
    /// The caller is an in-process controller that never reads `metadata.managedFields`
    /// ([`crate::client::WithoutManagedFields`]): its answers leave them out.
    pub without_managed_fields: bool,
}

impl Request {
    fn kind(&self) -> &str {
        &self.served.crd.kind
    }

    fn group(&self) -> &str {
        &self.served.crd.group
    }

    fn storage_resource(&self) -> String {
        if self.kind() == "Event" && matches!(self.group(), "" | "events.k8s.io") {
            EVENTS_STORAGE.to_owned()
        } else {
            self.served.storage_resource()
        }
    }

    pub(crate) fn key(&self, name: &str) -> ObjectKey {
        ObjectKey::new(
            self.storage_resource(),
            self.path.namespace.clone().unwrap_or_default(),
            name,
        )
    }

    pub(crate) fn not_found(&self, name: &str) -> ApiError {
        ApiError::NotFound {
            group: self.group().to_owned(),
            resource: self.path.plural.clone(),
            name: name.to_owned(),
        }
    }

    fn dry_run(&self) -> bool {
        self.query.get("dryRun").is_some_and(|v| v == "All")
    }

    fn wants_table(&self) -> bool {
        self.headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("as=Table"))
    }

    /// An object as this caller is answered it: without `metadata.managedFields` for in-process
    /// controllers, which drop them on arrival (they are a third to a half of a small object's
    /// bytes, encoded for every watcher and parsed by every client), whole for everyone else.
    fn answer(&self, mut object: Value) -> Value {
        if self.without_managed_fields
            && let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            metadata.remove("managedFields");
        }
        object
    }

    /// Converts a stored object to the requested version.
    pub(crate) fn to_requested(&self, state: &ApiState, stored: Value) -> Result<Value, ApiError> {
        if self.kind() == "Event" {
            return Ok(if self.group() == "events.k8s.io" {
                conversion::event_from_core(stored)
            } else {
                stored
            });
        }
        state
            .converter
            .convert(self.group(), self.kind(), stored, &self.served.version)
            .map_err(|e| {
                ApiError::Internal(format!(
                    "conversion to {} failed: {e}",
                    self.served.api_version()
                ))
            })
    }

    /// Converts a requested-version object to the storage version.
    fn to_storage(&self, state: &ApiState, object: Value) -> Result<Value, ApiError> {
        if self.kind() == "Event" {
            return Ok(if self.group() == "events.k8s.io" {
                conversion::event_to_core(object)
            } else {
                object
            });
        }
        state
            .converter
            .convert(
                self.group(),
                self.kind(),
                object,
                &self.served.storage_version(),
            )
            .map_err(|e| {
                ApiError::BadRequest(format!("cannot convert to the storage version: {e}"))
            })
    }
}

/// Who owns the fields a write sets.
pub(crate) enum Ownership {
    /// Recorded as an `Update` by the request's field manager.
    Track,
    /// Already worked out (server-side apply).
    Applied(Vec<managed::Entry>),
}

impl Request {
    /// The request's field manager: `fieldManager`, else the client's name from its User-Agent.
    fn field_manager(&self) -> String {
        if let Some(given) = self.query.get("fieldManager").filter(|m| !m.is_empty()) {
            return given.clone();
        }
        let agent = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        agent
            .split('/')
            .next()
            .unwrap_or_default()
            .chars()
            .take(managed::MAX_MANAGER_LENGTH)
            .collect()
    }

    /// What a write through this request may own.
    fn reach(&self) -> managed::Reach {
        match self.path.subresource.as_deref() {
            Some("status") => managed::Reach::OnlyStatus,
            _ if self.served.has_status() => managed::Reach::NotStatus,
            _ => managed::Reach::All,
        }
    }
}

/// The request's kind in each served version, for field ownership.
struct KindVersions<'a> {
    state: &'a ApiState,
    request: &'a Request,
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

impl managed::Versions for KindVersions<'_> {
    fn shape(&self, api_version: &str) -> Option<crate::structured::Shape<'_>> {
        let (group, version) = split_api_version(api_version);
        if group != self.request.group() {
            return None;
        }
        let served = self.request.served.crd.version(version)?;
        Some(crate::structured::Shape::root(
            served.schema.as_ref(),
            crate::builtin::is_typed(group, self.request.kind()),
        ))
    }

    fn convert(&self, object: &Value, api_version: &str) -> Option<Value> {
        if api_version == self.request.served.api_version() {
            return Some(object.clone());
        }
        let (group, version) = split_api_version(api_version);
        if group != self.request.group() || self.request.kind() == "Event" {
            return None;
        }
        self.request.served.crd.version(version)?;
        self.state
            .converter
            .convert(group, self.request.kind(), object.clone(), version)
            .ok()
    }
}

/// Runs `f` with the field-ownership context of `request`.
fn with_context<T>(
    state: &ApiState,
    request: &Request,
    f: impl FnOnce(&managed::Context<'_>) -> T,
) -> T {
    let versions = KindVersions { state, request };
    let api_version = request.served.api_version();
    let ctx = managed::Context {
        api_version: &api_version,
        subresource: request.path.subresource.as_deref().unwrap_or_default(),
        reach: request.reach(),
        versions: &versions,
        now: lifecycle::now(),
    };
    f(&ctx)
}

/// The ownership to start an update from: the request's `managedFields` when it sets them
/// (an empty list clears them), else the stored ones. Subresources cannot set them.
fn starting_entries(request: &Request, live: &Value, new: &Value) -> Vec<managed::Entry> {
    let stored = managed::decode(live).unwrap_or_default();
    if request.path.subresource.is_some() {
        return stored;
    }
    if managed::is_reset(new) {
        return Vec::new();
    }
    match managed::decode(new) {
        Some(given) if !given.is_empty() => given,
        _ => stored,
    }
}

pub(crate) fn stored_value(stored: &StoredObject) -> Result<Value, ApiError> {
    stored.value().map_err(ApiError::from)
}

/// The answer to a write that has committed: the object in the requested version. The write is
/// never reported as failed from here on; should the answer not be producible, the object is
/// answered as stored and the failure logged (by key, never the body).
fn committed(state: &ApiState, request: &Request, stored: &StoredObject) -> Value {
    let converted = stored_value(stored).and_then(|v| request.to_requested(state, v));
    match converted {
        Ok(object) => request.answer(object),
        Err(err) => {
            tracing::error!(
                resource = %stored.key.resource,
                namespace = %stored.key.namespace,
                name = %stored.key.name,
                error = %err,
                "a committed object could not be converted for the answer"
            );
            serde_json::from_str(&stored.json).unwrap_or_else(|_| {
                json!({"metadata": {"name": stored.key.name, "resourceVersion": stored.resource_version.to_string()}})
            })
        }
    }
}

pub(crate) fn json_response(code: StatusCode, value: &Value, warnings: &[String]) -> Response {
    let mut response = (code, axum::Json(value)).into_response();
    for warning in warnings {
        let text = format!("299 - \"{}\"", warning.replace('"', "'"));
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append("Warning", v);
        }
    }
    response
}

/// Parses a request body: JSON, or YAML for `application/yaml` and server-side apply.
pub(crate) fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::BadRequest("the request body is not UTF-8".into()))?;
    if content_type.contains("yaml") {
        let mut docs = capstan_manifest::parse_documents_bounded(
            "request body",
            text,
            crate::limits::MAX_YAML_NODES,
        )
        .map_err(|e| ApiError::BadRequest(format!("the request body is not valid YAML: {e}")))?;
        if docs.len() != 1 {
            return Err(ApiError::BadRequest(
                "the request body must hold exactly one object".into(),
            ));
        }
        return Ok(docs.remove(0).value);
    }
    serde_json::from_str(text)
        .map_err(|e| ApiError::BadRequest(format!("the request body is not valid JSON: {e}")))
}

/// Checks `apiVersion`/`kind` against the URL, applies schema defaults, enforces `fieldValidation`
/// (Strict: unknown fields are an error; Warn, the default: a warning; Ignore: silently dropped), and
/// validates against the schema of the requested version.
/// Prepares a written object for storage: apiVersion and kind, metadata normalisation, defaults,
/// pruning and validation against the served schema — CEL rules included, with `old` (the stored
/// object in the requested version, on update) for transition rules.
fn admit(
    request: &Request,
    object: &mut Value,
    old: Option<&Value>,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let expected = request.served.api_version();
    let obj = object
        .as_object_mut()
        .ok_or_else(|| ApiError::BadRequest("the request body must be a JSON object".into()))?;
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != expected => {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({v}) does not match the expected API version ({expected})"
            )));
        }
        Some(_) => {}
        None => {
            obj.insert("apiVersion".into(), Value::String(expected));
        }
    }
    match obj.get("kind").and_then(Value::as_str) {
        Some(k) if k != request.kind() => {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                request.kind()
            )));
        }
        Some(_) => {}
        None => {
            obj.insert("kind".into(), Value::String(request.kind().to_owned()));
        }
    }
    // Empty label and annotation maps, finalizer and owner lists are none at all (Go's
    // `omitempty`), so a patch that leaves `annotations: {}` behind (`kubectl diff`, `kubectl
    // apply`) or empties `ownerReferences` (the garbage collector orphaning) stores nothing.
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
            let empty = match meta.get(field) {
                Some(Value::Object(map)) => map.is_empty(),
                Some(Value::Array(list)) => list.is_empty(),
                _ => false,
            };
            if empty {
                meta.remove(field);
            }
        }
    }
    if request.group().is_empty() {
        default_core(request.kind(), object);
    }
    crate::builtin::defaults::apply(request.group(), request.kind(), object);
    let Some(schema) = request.served.version().and_then(|v| v.schema.as_ref()) else {
        return Ok(());
    };
    capstan_schema::apply_defaults(schema, object);
    let mut pruned = object.clone();
    let unknown = capstan_schema::prune(schema, &mut pruned);
    if !unknown.is_empty() {
        let names: Vec<String> = unknown
            .iter()
            .map(|p| format!("unknown field \"{p}\""))
            .collect();
        match request.query.get("fieldValidation").map(String::as_str) {
            Some("Strict") => {
                return Err(ApiError::BadRequest(format!(
                    "strict decoding error: {}",
                    names.join(", ")
                )));
            }
            Some("Ignore") => {}
            _ => warnings.extend(names),
        }
        *object = pruned;
    }
    let violations = capstan_schema::validate_update(schema, object, old).violations;
    if violations.is_empty() {
        if request.group().is_empty()
            && request.kind() == "ResourceQuota"
            && request.path.subresource.is_none()
        {
            crate::builtin::quotas::validate(object)?;
        }
        return Ok(());
    }
    let causes: Vec<Cause> = violations.iter().map(schema_cause).collect();
    let summary = aggregate(&causes);
    Err(ApiError::Invalid {
        group: request.group().to_owned(),
        kind: request.kind().to_owned(),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        summary,
        causes,
    })
}

/// A schema violation as kube-apiserver reports a field error: its reason, and for a missing
/// field its wording (`spec.version: Required value`).
fn schema_cause(violation: &capstan_schema::Violation) -> Cause {
    use capstan_schema::ViolationKind;
    let (reason, message) = match violation.kind {
        ViolationKind::Required => ("FieldValueRequired", "Required value".to_owned()),
        ViolationKind::Enum => ("FieldValueNotSupported", violation.message.clone()),
        ViolationKind::Duplicate => ("FieldValueDuplicate", violation.message.clone()),
        ViolationKind::Rule(reason) => (
            match reason {
                capstan_schema::RuleReason::Invalid => "FieldValueInvalid",
                capstan_schema::RuleReason::Forbidden => "FieldValueForbidden",
                capstan_schema::RuleReason::Required => "FieldValueRequired",
                capstan_schema::RuleReason::Duplicate => "FieldValueDuplicate",
            },
            violation.message.clone(),
        ),
        _ => ("FieldValueInvalid", violation.message.clone()),
    };
    Cause {
        reason: reason.into(),
        message,
        field: violation.path.to_string(),
    }
}

/// Defaults of the core kinds that clients rely on: a Secret's `stringData` is folded into `data`
/// (base64) and its `type` defaults to `Opaque`; a Namespace is `Active`.
fn default_core(kind: &str, object: &mut Value) {
    let Some(obj) = object.as_object_mut() else {
        return;
    };
    match kind {
        "Secret" => {
            if let Some(Value::Object(string_data)) = obj.remove("stringData") {
                let data = obj.entry("data").or_insert_with(|| json!({}));
                if let Some(data) = data.as_object_mut() {
                    for (k, v) in string_data {
                        let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        data.insert(
                            k,
                            Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
                        );
                    }
                }
            }
            obj.entry("type").or_insert_with(|| json!("Opaque"));
        }
        "Namespace" => {
            obj.entry("status")
                .or_insert_with(|| json!({"phase": "Active"}));
        }
        _ => {}
    }
}

/// Dispatches a resource request by method and path shape.
pub(crate) async fn handle(
    state: Arc<ApiState>,
    method: Method,
    request: Request,
    body: Bytes,
) -> Result<Response, ApiError> {
    let has_name = request.path.name.is_some();
    crate::params::validate(&request.query)?;
    if let Some(manager) = request.query.get("fieldManager")
        && (manager.len() > managed::MAX_MANAGER_LENGTH || manager.chars().any(char::is_control))
    {
        return Err(patch_options_invalid(
            "fieldManager",
            "Invalid value: must be at most 128 bytes of printable characters",
        ));
    }
    let subresource = request.path.subresource.clone();
    if let Some(response) =
        crate::builtin::subresources::handle(&state, &method, &request, &body).await
    {
        return response;
    }
    if let Some(sub) = subresource.as_deref()
        && !(sub == "status" && request.served.has_status())
    {
        return Err(ApiError::NoSuchResource);
    }
    if request.served.namespaced()
        && request.path.namespace.is_none()
        && (has_name || method == Method::POST)
    {
        return Err(ApiError::NoSuchResource);
    }
    if !request.served.namespaced() && request.path.namespace.is_some() {
        return Err(ApiError::NoSuchResource);
    }
    let watch = request.path.watch_prefix
        || request
            .query
            .get("watch")
            .is_some_and(|v| crate::params::is_true(v));
    match (method, has_name) {
        (Method::GET, true) if watch => watch_collection(state, request).await,
        (Method::GET, true) => get(state, request).await,
        (Method::GET, false) if watch => watch_collection(state, request).await,
        (Method::GET, false) => list(state, request).await,
        (Method::POST, false) => create(state, request, body).await,
        (Method::PUT, true) => update(state, request, body).await,
        (Method::PATCH, true) => patch(state, request, body).await,
        (Method::DELETE, true) => delete(state, request, body).await,
        (Method::DELETE, false) => delete_collection(state, request).await,
        _ => Err(ApiError::MethodNotAllowed),
    }
}

async fn get(state: Arc<ApiState>, request: Request) -> Result<Response, ApiError> {
    let name = request.path.name.clone().unwrap_or_default();
    let stored = state
        .store
        .get(request.key(&name))
        .await?
        .ok_or_else(|| request.not_found(&name))?;
    let object = request.answer(request.to_requested(&state, stored_value(&stored)?)?);
    if request.wants_table() {
        let columns = request
            .served
            .version()
            .map(|v| v.additional_printer_columns.clone())
            .unwrap_or_default();
        return Ok(json_response(
            StatusCode::OK,
            &request.table(
                std::slice::from_ref(&object),
                &columns,
                &stored.resource_version.to_string(),
                None,
            ),
            &[],
        ));
    }
    Ok(json_response(StatusCode::OK, &object, &[]))
}

/// The `continue` token: the resourceVersion of the first page and the last key returned.
fn encode_continue(rv: u64, after: &(String, String)) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"rv": rv, "ns": after.0, "name": after.1}).to_string())
}

fn decode_continue(token: &str) -> Result<(u64, (String, String)), ApiError> {
    let bad = || ApiError::BadRequest(format!("continue key is not valid: {token:?}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    Ok((
        value["rv"].as_u64().ok_or_else(bad)?,
        (
            value["ns"].as_str().ok_or_else(bad)?.to_owned(),
            value["name"].as_str().ok_or_else(bad)?.to_owned(),
        ),
    ))
}

fn selectors(request: &Request) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(
        request
            .query
            .get("labelSelector")
            .map_or("", String::as_str),
    )
    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let fields = FieldSelector::parse(
        request
            .query
            .get("fieldSelector")
            .map_or("", String::as_str),
    )
    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok((labels, fields))
}

/// The store query of one list page with these selectors: the label requirements are answered by
/// the store's label index (only the selected objects are read); the objects are parsed and matched
/// only for what the index cannot answer (field selectors, `>` and `<`).
fn selected_query(
    request: &Request,
    after: Option<(String, String)>,
    limit: Option<usize>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> ListQuery {
    let (terms, exact) = labels.index_terms();
    let keep: Option<capstan_store::Filter> = if exact && fields.is_empty() {
        None
    } else {
        let (labels, fields) = (labels.clone(), fields.clone());
        Some(Box::new(move |v: &Value| {
            labels.matches(&labels_of(v)) && fields.matches(v)
        }))
    };
    ListQuery {
        after,
        limit,
        labels: terms,
        keep,
        ..ListQuery::new(request.storage_resource(), request.path.namespace.clone())
    }
}

/// A list body assembled from stored JSON text without parsing it: used when the requested version
/// is the storage version, so no conversion is needed. Large lists stay cheap.
fn raw_list_response(
    request: &Request,
    list_rv: u64,
    continue_token: Option<String>,
    items: &[StoredObject],
) -> Response {
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if let (Some(token), Some(m)) = (continue_token, metadata.as_object_mut()) {
        m.insert("continue".into(), Value::String(token));
    }
    let size: usize = items.iter().map(|i| i.json.len() + 1).sum();
    let mut body = String::with_capacity(size + 256);
    body.push_str(&format!(
        "{{\"apiVersion\":{},\"kind\":{},\"metadata\":{},\"items\":[",
        Value::String(request.served.api_version()),
        Value::String(request.served.crd.list_kind.clone()),
        metadata
    ));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&item.json);
    }
    body.push_str("]}");
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Rows read from the store per step of a streamed list.
const STREAM_PAGE: usize = 500;

/// How each stored object of a streamed list is written: as stored, converted, or as a Table row.
#[derive(Clone)]
enum ItemForm {
    Stored,
    Converted,
    TableRow(Vec<table::PrinterColumn>),
}

/// A whole-collection list, streamed: the body is written page by page from the store, so a list of
/// 400,000 objects never sits in memory at once (a Table too: its rows are written page by page).
async fn stream_list(
    state: Arc<ApiState>,
    request: Request,
    labels: LabelSelector,
    fields: FieldSelector,
) -> Result<Response, ApiError> {
    let first = state
        .store
        .query(selected_query(
            &request,
            None,
            Some(STREAM_PAGE),
            &labels,
            &fields,
        ))
        .await?;
    let form = if request.wants_table() {
        ItemForm::TableRow(
            request
                .served
                .version()
                .map(|v| v.additional_printer_columns.clone())
                .unwrap_or_default(),
        )
    } else if request.passthrough() {
        ItemForm::Stored
    } else {
        ItemForm::Converted
    };
    let head = match &form {
        ItemForm::TableRow(columns) => {
            // The empty Table's text ends with `"rows":[]}`: rows are written between.
            let empty =
                table::table(&[], columns, &first.resource_version.to_string(), None).to_string();
            empty
                .strip_suffix("]}")
                .map(str::to_owned)
                .ok_or_else(|| ApiError::Internal("the Table does not end with its rows".into()))?
        }
        _ => format!(
            "{{\"apiVersion\":{},\"kind\":{},\"metadata\":{{\"resourceVersion\":\"{}\"}},\"items\":[",
            Value::String(request.served.api_version()),
            Value::String(request.served.crd.list_kind.clone()),
            first.resource_version
        ),
    };
    let (sender, receiver) =
        tokio::sync::mpsc::channel::<Result<Bytes, std::convert::Infallible>>(4);
    tokio::spawn(async move {
        let mut page = first;
        let mut chunk = head;
        let mut written = 0usize;
        loop {
            for item in &page.items {
                let text = match &form {
                    ItemForm::Stored => Ok(item.json.to_string()),
                    ItemForm::Converted => stored_value(item)
                        .and_then(|v| request.to_requested(&state, v))
                        .map(|v| request.answer(v).to_string()),
                    ItemForm::TableRow(columns) => stored_value(item)
                        .and_then(|v| request.to_requested(&state, v))
                        .map(|v| request.table(&[v], columns, "", None)["rows"][0].to_string()),
                };
                let text = match text {
                    Ok(text) => text,
                    Err(err) => {
                        tracing::warn!(resource = %item.key.resource, namespace = %item.key.namespace, name = %item.key.name, error = %err, "list stream failed");
                        return;
                    }
                };
                if written > 0 {
                    chunk.push(',');
                }
                chunk.push_str(&text);
                written += 1;
            }
            let Some(after) = page.continue_after.take() else {
                break;
            };
            if sender
                .send(Ok(Bytes::from(std::mem::take(&mut chunk))))
                .await
                .is_err()
            {
                return;
            }
            page = match state
                .store
                .query(selected_query(
                    &request,
                    Some(after),
                    Some(STREAM_PAGE),
                    &labels,
                    &fields,
                ))
                .await
            {
                Ok(next) => next,
                // The status line is gone; ending the body early makes the client see a broken list
                // rather than a short one.
                Err(err) => {
                    tracing::warn!(error = %err, "list stream failed");
                    return;
                }
            };
        }
        chunk.push_str("]}");
        let _ = sender.send(Ok(Bytes::from(chunk))).await;
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver));
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
}

impl Request {
    /// A Table of `objects`, with each row's object as `includeObject` asks (`kubectl get
    /// --sort-by` and custom columns need the whole object).
    fn table(
        &self,
        objects: &[Value],
        columns: &[table::PrinterColumn],
        resource_version: &str,
        continue_token: Option<&str>,
    ) -> Value {
        let built = table::table(objects, columns, resource_version, continue_token);
        table::include_objects(
            built,
            objects,
            self.query.get("includeObject").map(String::as_str),
        )
    }

    /// Whether stored objects can be returned as they are (same version, no reshaping).
    fn passthrough(&self) -> bool {
        self.served.version == self.served.storage_version()
            && !(self.kind() == "Event" && self.group() == "events.k8s.io")
            && !self.without_managed_fields
    }
}

async fn list(state: Arc<ApiState>, request: Request) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(&request)?;
    let limit = request
        .query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    if limit.is_none() && request.query.get("continue").is_none_or(String::is_empty) {
        return stream_list(state, request, labels, fields).await;
    }
    let (first_rv, after) = match request.query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (rv, after) = decode_continue(token)?;
            (Some(rv), Some(after))
        }
        None => (None, None),
    };
    let page = state
        .store
        .query(selected_query(&request, after, limit, &labels, &fields))
        .await?;
    let list_rv = first_rv.unwrap_or(page.resource_version);
    let continue_token = page
        .continue_after
        .as_ref()
        .map(|after| encode_continue(list_rv, after));
    if request.passthrough() && !request.wants_table() {
        return Ok(raw_list_response(
            &request,
            list_rv,
            continue_token,
            &page.items,
        ));
    }
    let items = page
        .items
        .iter()
        .map(|o| {
            stored_value(o)
                .and_then(|v| request.to_requested(&state, v))
                .map(|v| request.answer(v))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if request.wants_table() {
        let columns = request
            .served
            .version()
            .map(|v| v.additional_printer_columns.clone())
            .unwrap_or_default();
        return Ok(json_response(
            StatusCode::OK,
            &request.table(
                &items,
                &columns,
                &list_rv.to_string(),
                continue_token.as_deref(),
            ),
            &[],
        ));
    }
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if let (Some(token), Some(m)) = (continue_token, metadata.as_object_mut()) {
        m.insert("continue".into(), Value::String(token));
    }
    let list = json!({
        "apiVersion": request.served.api_version(),
        "kind": request.served.crd.list_kind,
        "metadata": metadata,
        "items": items,
    });
    Ok(json_response(StatusCode::OK, &list, &[]))
}

fn watch_line(event_type: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": event_type, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

/// How often a watch that allows bookmarks gets one: kube-apiserver's period (about a minute). Each
/// keeps the watcher's resourceVersion inside the retained log; every watch of every in-process
/// controller gets them, so a shorter period is a steady cost on an idle server.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

async fn watch_collection(state: Arc<ApiState>, request: Request) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(&request)?;
    let name_filter = request.path.name.clone();
    let bookmarks = request
        .query
        .get("allowWatchBookmarks")
        .is_some_and(|v| crate::params::is_true(v));
    let timeout = request
        .query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let requested_rv = request
        .query
        .get("resourceVersion")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v > 0);
    // With a selector, objects enter and leave the selection: the watch tracks which ones are in
    // it, so a change that moves one in is ADDED and one that moves it out is DELETED.
    let selective = !labels.is_empty() || !fields.is_empty() || name_filter.is_some();
    // The store's label index narrows the lists below to the labelled objects; `matches` decides.
    let (label_terms, _) = labels.index_terms();
    let matches = move |v: &Value| {
        labels.matches(&labels_of(v))
            && fields.matches(v)
            && name_filter
                .as_ref()
                .is_none_or(|n| v["metadata"]["name"].as_str() == Some(n))
    };
    // `kubectl get -w` asks for Tables: every event then carries a one-row Table.
    let table_columns = request.wants_table().then(|| {
        request
            .served
            .version()
            .map(|v| v.additional_printer_columns.clone())
            .unwrap_or_default()
    });
    let mut members = std::collections::HashSet::new();
    // Resuming with a selector: the selection is read as it is now, at `replay_until`. For an
    // object changed between the requested version and then, now is too late — the client listed
    // it at the requested version — so its membership is looked up in the change log when its
    // first replayed change comes (else a deletion in that window would never reach the client).
    let mut replay_until = None;
    let mut replayed = std::collections::HashSet::new();
    if selective && requested_rv.is_some() {
        let filter = matches.clone();
        let page = state
            .store
            .query(ListQuery {
                labels: label_terms.clone(),
                keep: Some(Box::new(move |v: &Value| filter(v))),
                ..ListQuery::new(request.storage_resource(), request.path.namespace.clone())
            })
            .await?;
        members.extend(
            page.items
                .iter()
                .map(|i| (i.key.namespace.clone(), i.key.name.clone())),
        );
        replay_until = Some(page.resource_version);
    }
    // Without a resourceVersion, a watch starts with the current state as ADDED events, read and
    // sent a page at a time (the first page fixes the version the watch follows from).
    let (first_page, from) = match requested_rv {
        Some(rv) => (None, rv),
        None => {
            let filter = matches.clone();
            let page = state
                .store
                .query(ListQuery {
                    limit: Some(STREAM_PAGE),
                    labels: label_terms.clone(),
                    keep: Some(Box::new(move |v: &Value| filter(v))),
                    ..ListQuery::new(request.storage_resource(), request.path.namespace.clone())
                })
                .await?;
            let rv = page.resource_version;
            (Some(page), rv)
        }
    };
    let (sender, receiver) =
        tokio::sync::mpsc::channel::<Result<Bytes, std::convert::Infallible>>(64);
    let stream = state.store.watch(
        request.storage_resource(),
        request.path.namespace.clone(),
        from,
        bookmarks.then_some(BOOKMARK_EVERY),
    );
    let api_version = request.served.api_version();
    let kind = request.kind().to_owned();
    let initial_matches = matches.clone();
    tokio::spawn(async move {
        let mut next_page = first_page;
        while let Some(mut page) = next_page.take() {
            for item in &page.items {
                if selective {
                    members.insert((item.key.namespace.clone(), item.key.name.clone()));
                }
                let line = match stored_value(item).and_then(|v| request.to_requested(&state, v)) {
                    Ok(object) => match &table_columns {
                        Some(columns) => watch_line(
                            "ADDED",
                            &table::table(
                                &[object],
                                columns,
                                &item.resource_version.to_string(),
                                None,
                            ),
                        ),
                        None => watch_line("ADDED", &request.answer(object)),
                    },
                    Err(err) => watch_line("ERROR", &err.to_status()),
                };
                if sender.send(Ok(line)).await.is_err() {
                    return;
                }
            }
            let Some(after) = page.continue_after.take() else {
                break;
            };
            let filter = initial_matches.clone();
            next_page = match state
                .store
                .query(ListQuery {
                    after: Some(after),
                    limit: Some(STREAM_PAGE),
                    labels: label_terms.clone(),
                    keep: Some(Box::new(move |v: &Value| filter(v))),
                    ..ListQuery::new(request.storage_resource(), request.path.namespace.clone())
                })
                .await
            {
                Ok(next) => Some(next),
                Err(err) => {
                    let _ = sender
                        .send(Ok(watch_line("ERROR", &ApiError::from(err).to_status())))
                        .await;
                    return;
                }
            };
        }
        let mut stream = match stream {
            Ok(stream) => stream,
            Err(err) => {
                let _ = sender
                    .send(Ok(watch_line("ERROR", &ApiError::from(err).to_status())))
                    .await;
                return;
            }
        };
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            let item = tokio::select! {
                () = &mut deadline => return,
                () = sender.closed() => return,
                item = stream.next() => item,
            };
            let line = match item {
                None => return,
                Some(Err(err)) => {
                    let _ = sender
                        .send(Ok(watch_line("ERROR", &ApiError::from(err).to_status())))
                        .await;
                    return;
                }
                Some(Ok(WatchItem::Bookmark(rv))) => watch_line(
                    "BOOKMARK",
                    &json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": rv.to_string()}}),
                ),
                Some(Ok(WatchItem::Event(event))) => {
                    let Ok(value) = serde_json::from_str::<Value>(&event.json) else {
                        continue;
                    };
                    let now = matches(&value);
                    let event_type = if selective {
                        let id = (event.key.namespace.clone(), event.key.name.clone());
                        if replay_until.is_some_and(|head| event.resource_version <= head)
                            && replayed.insert(id.clone())
                        {
                            let before = match event.event_type {
                                EventType::Added => false,
                                EventType::Modified | EventType::Deleted => {
                                    match state.store.state_at(event.key.clone(), from).await {
                                        Ok(PastState::Existed(json)) => {
                                            serde_json::from_str::<Value>(&json)
                                                .is_ok_and(|v| matches(&v))
                                        }
                                        Ok(PastState::Absent) => false,
                                        // Best guess: the change did not move it across the
                                        // selection.
                                        Ok(PastState::Unknown) | Err(_) => now,
                                    }
                                }
                            };
                            if before {
                                members.insert(id.clone());
                            } else {
                                members.remove(&id);
                            }
                        }
                        let was = members.contains(&id);
                        match (event.event_type.as_str(), was, now) {
                            ("DELETED", false, _) | (_, false, false) => continue,
                            ("DELETED", true, _) | (_, true, false) => {
                                members.remove(&id);
                                "DELETED"
                            }
                            (_, true, true) => "MODIFIED",
                            (_, false, true) => {
                                members.insert(id);
                                "ADDED"
                            }
                        }
                    } else if now {
                        event.event_type.as_str()
                    } else {
                        continue;
                    };
                    match request.to_requested(&state, value) {
                        Ok(object) if table_columns.is_some() => watch_line(
                            event_type,
                            &request.table(
                                &[object],
                                table_columns.as_deref().unwrap_or_default(),
                                &event.resource_version.to_string(),
                                None,
                            ),
                        ),
                        Ok(object) => watch_line(event_type, &request.answer(object)),
                        Err(err) => watch_line("ERROR", &err.to_status()),
                    }
                }
            };
            if sender.send(Ok(line)).await.is_err() {
                return;
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver));
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
}

/// The annotation Kubernetes requires on CRDs in its protected groups.
const API_APPROVED: &str = "api-approved.kubernetes.io";

fn crd_invalid(object: &Value, field: &str, message: String) -> ApiError {
    ApiError::Invalid {
        group: "apiextensions.k8s.io".into(),
        kind: "CustomResourceDefinition".into(),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        summary: format!("{field}: {message}"),
        causes: vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: field.to_owned(),
        }],
    }
}

/// A version's schema may constrain nothing of the root `metadata` but `name` and `generateName`:
/// the API server validates ObjectMeta itself. kube-apiserver refuses anything else with this very
/// message; so does capstan, or a definition accepted here would fail on a real cluster.
fn check_root_metadata(object: &Value) -> Result<(), ApiError> {
    const ALLOWED: &[&str] = &["type", "description", "properties"];
    let versions = object["spec"]["versions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (index, version) in versions.iter().enumerate() {
        let metadata = &version["schema"]["openAPIV3Schema"]["properties"]["metadata"];
        let Some(fields) = metadata.as_object() else {
            continue;
        };
        let forbidden = fields.keys().any(|key| !ALLOWED.contains(&key.as_str()))
            || metadata["type"].as_str().is_some_and(|t| t != "object")
            || metadata["properties"]
                .as_object()
                .is_some_and(|properties| {
                    properties
                        .keys()
                        .any(|key| key != "name" && key != "generateName")
                });
        if forbidden {
            return Err(crd_invalid(
                object,
                &format!("spec.versions[{index}].schema.openAPIV3Schema.properties[metadata]"),
                "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified".into(),
            ));
        }
    }
    Ok(())
}

/// Every CEL rule of every version's schema must compile, as kube-apiserver requires: a definition
/// with one that does not is refused, each such rule named by its field.
fn check_rules_compile(object: &Value, crd: &capstan_schema::CrdInfo) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    for version in &crd.versions {
        let Some(schema) = &version.schema else {
            continue;
        };
        let index = object["spec"]["versions"]
            .as_array()
            .and_then(|versions| {
                versions
                    .iter()
                    .position(|v| v["name"].as_str() == Some(version.name.as_str()))
            })
            .unwrap_or_default();
        for invalid in capstan_schema::rule_errors(schema) {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {:?}: {}", invalid.rule, invalid.error),
                field: format!(
                    "spec.versions[{index}].schema.openAPIV3Schema.{}",
                    invalid.place
                ),
            });
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let summary = aggregate(&causes);
    Err(ApiError::Invalid {
        group: "apiextensions.k8s.io".into(),
        kind: "CustomResourceDefinition".into(),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        summary,
        causes,
    })
}

/// Prepares a CustomResourceDefinition for storage: it must parse, name a group as Kubernetes
/// requires (a domain; its protected groups only with the approval annotation), and not redefine
/// one of Kubernetes' own resources; it is then marked accepted.
fn admit_crd(object: &mut Value) -> Result<capstan_schema::CrdInfo, ApiError> {
    let group = object["spec"]["group"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if !group.contains('.') {
        return Err(crd_invalid(
            object,
            "spec.group",
            format!("Invalid value: {group:?}: should be a domain with at least one dot"),
        ));
    }
    let protected = ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|d| group == *d || group.ends_with(&format!(".{d}")));
    if protected
        && object["metadata"]["annotations"][API_APPROVED]
            .as_str()
            .is_none_or(str::is_empty)
    {
        return Err(crd_invalid(
            object,
            &format!("metadata.annotations[{API_APPROVED}]"),
            format!(
                "Required value: protected groups must have approval annotation {API_APPROVED:?}, see https://github.com/kubernetes/enhancements/pull/1111"
            ),
        ));
    }
    let plural = object["spec"]["names"]["plural"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if crate::registry::is_kubernetes_resource(&group, &plural) {
        return Err(crd_invalid(
            object,
            "spec.group",
            format!(
                "Forbidden: {plural}.{group} is one of Kubernetes' own resources, served natively here; a CustomResourceDefinition cannot redefine it"
            ),
        ));
    }
    check_root_metadata(object)?;
    let crd = capstan_schema::CrdInfo::from_value(object).map_err(|e| ApiError::Invalid {
        group: "apiextensions.k8s.io".into(),
        kind: "CustomResourceDefinition".into(),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        summary: e.to_string(),
        causes: Vec::new(),
    })?;
    check_rules_compile(object, &crd)?;
    let now = lifecycle::now();
    if let Some(obj) = object.as_object_mut() {
        obj.insert(
            "status".into(),
            json!({
                "acceptedNames": object_names(&crd),
                "storedVersions": crd.storage_version().map(|v| vec![v.name.clone()]).unwrap_or_default(),
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
                ],
            }),
        );
    }
    Ok(crd)
}

/// How many stored objects a replacing definition is checked against before it is refused or
/// accepted; the violations of the first few are reported.
const MAX_REPORTED_INCOMPATIBLE: usize = 3;

/// kube-apiserver's aggregate of field errors: one as it is, several in brackets.
fn aggregate(causes: &[Cause]) -> String {
    let mut summary: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    if summary.len() == 1 {
        summary.remove(0)
    } else {
        format!("[{}]", summary.join(", "))
    }
}

/// A definition that replaces a served kind must keep what is stored readable and writable:
/// every stored object's version is served by it and the object's values have that version's
/// types. Otherwise every later write of those objects would fail (and typed readers could not
/// decode them), so it is refused, naming the objects and fields. Value rules (enums, bounds,
/// patterns, required fields, CEL) may tighten: a stored value that breaks one stays writable
/// while unchanged (validation ratcheting), as with kube-apiserver.
async fn check_stored_objects(
    state: &ApiState,
    crd: &capstan_schema::CrdInfo,
) -> Result<(), ApiError> {
    let resource = format!("{}/{}", crd.group, crd.plural);
    let page = state.store.list(resource, None, None, None, None).await?;
    let mut problems = Vec::new();
    for item in &page.items {
        let Ok(object) = stored_value(item) else {
            continue;
        };
        let version = object["apiVersion"]
            .as_str()
            .and_then(|v| v.rsplit('/').next())
            .unwrap_or_default();
        let where_ = if item.key.namespace.is_empty() {
            item.key.name.clone()
        } else {
            format!("{}/{}", item.key.namespace, item.key.name)
        };
        match crd.version(version) {
            None => problems.push(format!(
                "{where_} is stored in version {version:?}, which the definition does not have"
            )),
            Some(served) => {
                if let Some(schema) = &served.schema {
                    let violations = capstan_schema::validate(schema, &object);
                    if let Some(first) = violations
                        .iter()
                        .find(|v| v.kind == capstan_schema::ViolationKind::WrongType)
                    {
                        problems.push(format!(
                            "{where_} would be invalid: {}: {}",
                            first.path, first.message
                        ));
                    }
                }
            }
        }
        if problems.len() >= MAX_REPORTED_INCOMPATIBLE {
            break;
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(crd_invalid(
        &crd.definition,
        "spec.versions",
        format!(
            "Forbidden: the definition does not fit the {} already stored ({}); migrate or delete them first",
            crd.plural,
            problems.join("; ")
        ),
    ))
}

fn object_names(crd: &capstan_schema::CrdInfo) -> Value {
    json!({"kind": crd.kind, "listKind": crd.list_kind, "plural": crd.plural, "singular": crd.singular, "shortNames": crd.short_names, "categories": crd.categories})
}

fn is_crd(request: &Request) -> bool {
    request.group() == "apiextensions.k8s.io" && request.kind() == "CustomResourceDefinition"
}

/// The namespace of a create must exist and not be terminating (kube-apiserver's namespace
/// lifecycle admission: `403` naming the object being created).
async fn ensure_namespace(state: &ApiState, request: &Request, name: &str) -> Result<(), ApiError> {
    let Some(ns) = request.path.namespace.as_deref() else {
        return Ok(());
    };
    let key = ObjectKey::new("/namespaces", "", ns);
    match state.store.get(key).await? {
        Some(found) if lifecycle::is_being_deleted(&stored_value(&found)?) => {
            Err(ApiError::Forbidden {
                group: request.group().to_owned(),
                resource: request.path.plural.clone(),
                name: name.to_owned(),
                message: format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            })
        }
        Some(_) => Ok(()),
        None => Err(ApiError::NotFound {
            group: String::new(),
            resource: "namespaces".into(),
            name: ns.to_owned(),
        }),
    }
}

async fn create(state: Arc<ApiState>, request: Request, body: Bytes) -> Result<Response, ApiError> {
    let object = parse_body(&request.headers, &body)?;
    crate::limits::check_depth(request.kind(), &object)?;
    let (code, object, warnings) =
        create_object(&state, &request, object, Ownership::Track).await?;
    Ok(json_response(code, &object, &warnings))
}

/// Creates an object; a name made from `generateName` that is taken is drawn again.
async fn create_object(
    state: &ApiState,
    request: &Request,
    object: Value,
    ownership: Ownership,
) -> Result<(StatusCode, Value, Vec<String>), ApiError> {
    let generated = object["metadata"]["name"]
        .as_str()
        .is_none_or(str::is_empty);
    let entries = match ownership {
        Ownership::Track => None,
        Ownership::Applied(entries) => Some(entries),
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        match create_once(state, request, object.clone(), entries.clone()).await {
            Err(ApiError::AlreadyExists { .. }) if generated && attempts < MAX_WRITE_ATTEMPTS => {}
            other => return other,
        }
    }
}

async fn create_once(
    state: &ApiState,
    request: &Request,
    mut object: Value,
    applied: Option<Vec<managed::Entry>>,
) -> Result<(StatusCode, Value, Vec<String>), ApiError> {
    let mut warnings = Vec::new();
    admit(request, &mut object, None, &mut warnings)?;
    let name = lifecycle::prepare_create(
        &mut object,
        request.path.namespace.as_deref(),
        request.kind(),
    )?;
    crate::names::check_new(request.group(), request.kind(), &name)?;
    if request.served.has_status()
        && let Some(obj) = object.as_object_mut()
    {
        obj.remove("status");
    }
    crate::builtin::defaults::on_create(request.group(), request.kind(), &mut object);
    let crd = if is_crd(request) {
        Some(admit_crd(&mut object)?)
    } else {
        None
    };
    ensure_namespace(state, request, &name).await?;
    let entries = match applied {
        Some(entries) => entries,
        None => {
            let given = if managed::is_reset(&object) {
                Vec::new()
            } else {
                managed::decode(&object).unwrap_or_default()
            };
            let manager = request.field_manager();
            with_context(state, request, |ctx| {
                managed::update(ctx, None, &object, given, &manager)
            })
        }
    };
    let mut storage_form = request.to_storage(state, object)?;
    managed::set_managed_fields(&mut storage_form, &entries);
    crate::limits::check_object(request.group(), request.kind(), &storage_form)?;
    // Counted against the namespace's quotas, dry runs too (as kube-apiserver counts them); what
    // it returns is held until the object is stored, so no other create of the namespace is
    // counted before this one.
    let quota = crate::builtin::quotas::admit_create(
        state,
        request.group(),
        &request.path.plural,
        &request.storage_resource(),
        request.path.namespace.as_deref(),
        &name,
    )
    .await?;
    if request.dry_run() {
        return Ok((
            StatusCode::CREATED,
            request.to_requested(state, storage_form)?,
            warnings,
        ));
    }
    if let Some(crd) = &crd {
        check_stored_objects(state, crd).await?;
    }
    let stored = state.store.create(request.key(&name), storage_form).await?;
    let counted = quota.counted;
    drop(quota);
    if counted || request.storage_resource() == crate::builtin::quotas::STORAGE {
        state.quotas.wake();
    }
    if let Some(crd) = crd {
        state.update_registry(|r| r.insert(crd));
    }
    Ok((
        StatusCode::CREATED,
        committed(state, request, &stored),
        warnings,
    ))
}

fn precondition_rv(object: &Value) -> Result<Option<u64>, ApiError> {
    match object["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        None => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|_| {
            ApiError::BadRequest(format!("metadata.resourceVersion {text:?} is not valid"))
        }),
    }
}

/// Writes `new` (requested version) over the stored object read as `current`, with the lifecycle
/// rules; returns the object as stored (requested version).
pub(crate) async fn write_over(
    state: &ApiState,
    request: &Request,
    current: &StoredObject,
    new: Value,
    warnings: &mut Vec<String>,
) -> Result<Value, ApiError> {
    write_owned(state, request, current, new, warnings, Ownership::Track).await
}

/// Whether `new` is `stored` without its resourceVersion: a write that changes nothing else is
/// not stored (compared in place: the stored object is not copied to take its version out).
fn same_but_resource_version(stored: &Value, new: &Value) -> bool {
    let (Some(stored), Some(new)) = (stored.as_object(), new.as_object()) else {
        return stored == new;
    };
    stored.len() == new.len()
        && stored.iter().all(|(field, value)| match new.get(field) {
            Some(Value::Object(new_meta)) if field == "metadata" => match value.as_object() {
                Some(meta) => {
                    let versioned = usize::from(meta.contains_key("resourceVersion"));
                    meta.len() - versioned == new_meta.len()
                        && meta
                            .iter()
                            .filter(|(key, _)| *key != "resourceVersion")
                            .all(|(key, v)| new_meta.get(key) == Some(v))
                }
                None => false,
            },
            Some(other) => other == value,
            None => false,
        })
}

/// [`write_over`] with the ownership of the written fields given.
async fn write_owned(
    state: &ApiState,
    request: &Request,
    current: &StoredObject,
    mut new: Value,
    warnings: &mut Vec<String>,
    ownership: Ownership,
) -> Result<Value, ApiError> {
    let name = current.key.name.clone();
    if request.served.namespaced()
        && let Some(given) = new["metadata"]["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
        && Some(given) != request.path.namespace.as_deref()
    {
        return Err(ApiError::BadRequest(format!(
            "the namespace of the object ({given}) does not match the namespace on the URL ({}); an object's namespace cannot change",
            request.path.namespace.as_deref().unwrap_or_default()
        )));
    }
    if new["metadata"]["name"].as_str().is_some_and(|n| n != name) {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            new["metadata"]["name"].as_str().unwrap_or_default()
        )));
    }
    let old = stored_value(current)?;
    let live = request.to_requested(state, old.clone())?;
    admit(request, &mut new, Some(&live), warnings)?;
    let scope = if request.path.subresource.as_deref() == Some("status") {
        WriteScope::Status
    } else {
        WriteScope::Main {
            status_subresource: request.served.has_status(),
        }
    };
    let crd = if is_crd(request) && scope != WriteScope::Status {
        Some(admit_crd(&mut new)?)
    } else {
        None
    };
    let entries = match ownership {
        Ownership::Applied(entries) => entries,
        Ownership::Track => {
            let start = starting_entries(request, &live, &new);
            let manager = request.field_manager();
            with_context(state, request, |ctx| {
                managed::update(ctx, Some(&live), &new, start, &manager)
            })
        }
    };
    let mut new_storage = request.to_storage(state, new)?;
    lifecycle::prepare_update(&old, &mut new_storage, scope, request.kind())?;
    managed::set_managed_fields(&mut new_storage, &entries);
    let changed = !same_but_resource_version(&old, &new_storage);
    crate::limits::check_object(request.group(), request.kind(), &new_storage)?;
    if !changed {
        return request.to_requested(state, old);
    }
    if request.dry_run() {
        // As kube-apiserver: the object as it would be stored, at the version it was read at.
        if let (Some(meta), Some(rv)) = (
            new_storage["metadata"].as_object_mut(),
            old["metadata"].get("resourceVersion"),
        ) {
            meta.insert("resourceVersion".into(), rv.clone());
        }
        return request.to_requested(state, new_storage);
    }
    if lifecycle::is_being_deleted(&new_storage) && lifecycle::finalizers(&new_storage).is_empty() {
        let deleted = state
            .store
            .delete(current.key.clone(), Some(current.resource_version))
            .await?;
        after_delete(state, request, &deleted)?;
        return Ok(committed(state, request, &deleted));
    }
    if let Some(crd) = &crd {
        check_stored_objects(state, crd).await?;
    }
    let stored = state
        .store
        .update(
            current.key.clone(),
            new_storage,
            Some(current.resource_version),
        )
        .await?;
    if let Some(crd) = crd {
        state.update_registry(|r| r.insert(crd));
    }
    Ok(committed(state, request, &stored))
}

async fn update(state: Arc<ApiState>, request: Request, body: Bytes) -> Result<Response, ApiError> {
    let new = parse_body(&request.headers, &body)?;
    crate::limits::check_depth(request.kind(), &new)?;
    let name = request.path.name.clone().unwrap_or_default();
    let precondition = precondition_rv(&new)?;
    let mut warnings = Vec::new();
    for _ in 0..MAX_WRITE_ATTEMPTS {
        let current = state
            .store
            .get(request.key(&name))
            .await?
            .ok_or_else(|| request.not_found(&name))?;
        if let Some(expected) = precondition
            && expected != current.resource_version
        {
            return Err(capstan_store::StoreError::Conflict {
                key: current.key,
                expected,
                actual: current.resource_version,
            }
            .into());
        }
        match write_over(&state, &request, &current, new.clone(), &mut warnings).await {
            Err(ApiError::Conflict { .. }) if precondition.is_none() => continue,
            Err(err) => return Err(err),
            Ok(object) => return Ok(json_response(StatusCode::OK, &object, &warnings)),
        }
    }
    Err(ApiError::Conflict {
        group: request.group().to_owned(),
        resource: request.path.plural.clone(),
        name,
        message: "too many concurrent writers; try again".into(),
    })
}

fn patch_kind(headers: &HeaderMap) -> Result<PatchKind, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    match content_type.split(';').next().unwrap_or_default().trim() {
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "application/merge-patch+json, application/strategic-merge-patch+json, application/json-patch+json, application/apply-patch+yaml (got {other:?})"
        ))),
    }
}

/// `target` with the request's patch body applied (merge or JSON patch), for subresources that
/// patch a view of an object rather than the object.
pub(crate) fn patched(request: &Request, target: &Value, body: &Bytes) -> Result<Value, ApiError> {
    let document: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("the patch is not valid JSON: {e}")))?;
    crate::patching::apply(patch_kind(&request.headers)?, target, &document)
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// Whether strategic merge applies: Kubernetes' own kinds (typed, with merge keys) and CRDs; custom
/// resources get `415`, as from kube-apiserver, so clients fall back to a JSON merge patch.
fn strategic_patchable(request: &Request) -> bool {
    crate::builtin::is_typed(request.group(), request.kind()) || is_crd(request)
}

/// Kubernetes treats a JSON patch `test` of `null` against a missing path as passing (kube-runtime's
/// finalizer helper relies on it to add the first finalizer); the patch library does not, so such
/// tests are dropped when the path is indeed absent.
fn tolerate_null_tests(target: &Value, patch: &Value) -> Value {
    match patch.as_array() {
        Some(ops) => Value::Array(
            ops.iter()
                .filter(|op| {
                    !(op["op"] == "test"
                        && op["value"].is_null()
                        && op["path"]
                            .as_str()
                            .is_some_and(|p| target.pointer(p).is_none()))
                })
                .cloned()
                .collect(),
        ),
        None => patch.clone(),
    }
}

/// The resourceVersion a JSON patch sets or tests, if any.
fn json_patch_precondition(patch: &Value) -> Result<Option<u64>, ApiError> {
    let named = patch.as_array().into_iter().flatten().find_map(|op| {
        (op["path"] == "/metadata/resourceVersion"
            && matches!(op["op"].as_str(), Some("test" | "replace" | "add")))
        .then(|| op["value"].as_str())
        .flatten()
    });
    match named {
        None => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|_| {
            ApiError::BadRequest(format!("metadata.resourceVersion {text:?} is not valid"))
        }),
    }
}

async fn patch(state: Arc<ApiState>, request: Request, body: Bytes) -> Result<Response, ApiError> {
    let kind = patch_kind(&request.headers)?;
    if matches!(kind, PatchKind::Strategic) && !strategic_patchable(&request) {
        return Err(ApiError::UnsupportedMediaType(
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
        ));
    }
    let name = request.path.name.clone().unwrap_or_default();
    let patch_doc: Value = match kind {
        PatchKind::Apply => parse_body(
            &{
                let mut h = HeaderMap::new();
                h.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/yaml"),
                );
                h
            },
            &body,
        )?,
        _ => serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("the patch is not valid JSON: {e}")))?,
    };
    crate::limits::check_depth(request.kind(), &patch_doc)?;
    if matches!(kind, PatchKind::Apply) {
        return server_side_apply(state, request, patch_doc).await;
    }
    if request.query.contains_key("force") {
        return Err(patch_options_invalid(
            "force",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    let mut warnings = Vec::new();
    for _ in 0..MAX_WRITE_ATTEMPTS {
        let Some(current) = state.store.get(request.key(&name)).await? else {
            return Err(request.not_found(&name));
        };
        let mut patched = request.to_requested(&state, stored_value(&current)?)?;
        match &kind {
            PatchKind::Merge | PatchKind::Apply => json_patch::merge(&mut patched, &patch_doc),
            PatchKind::Strategic => {
                patched = crate::strategic::apply(&patched, &patch_doc).map_err(|e| {
                    ApiError::Invalid {
                        group: request.group().to_owned(),
                        kind: request.kind().to_owned(),
                        name: name.clone(),
                        summary: e.to_string(),
                        causes: Vec::new(),
                    }
                })?;
            }
            PatchKind::Json => {
                let ops: json_patch::Patch = serde_json::from_value(tolerate_null_tests(
                    &patched, &patch_doc,
                ))
                .map_err(|e| ApiError::BadRequest(format!("the JSON patch is not valid: {e}")))?;
                crate::patching::apply_json_patch(&mut patched, &ops).map_err(|e| {
                    ApiError::Invalid {
                        group: request.group().to_owned(),
                        kind: request.kind().to_owned(),
                        name: name.clone(),
                        summary: e.to_string(),
                        causes: Vec::new(),
                    }
                })?;
            }
        }
        // Only a resourceVersion the patch itself names is a precondition; the one the patched
        // document inherits from the stored object is not.
        let precondition = match kind {
            PatchKind::Json => json_patch_precondition(&patch_doc)?,
            PatchKind::Merge | PatchKind::Apply | PatchKind::Strategic => {
                precondition_rv(&patch_doc)?
            }
        };
        if let Some(expected) = precondition
            && expected != current.resource_version
        {
            return Err(capstan_store::StoreError::Conflict {
                key: current.key,
                expected,
                actual: current.resource_version,
            }
            .into());
        }
        match write_over(&state, &request, &current, patched, &mut warnings).await {
            Err(ApiError::Conflict { .. }) if precondition.is_none() => continue,
            Err(err) => return Err(err),
            Ok(object) => return Ok(json_response(StatusCode::OK, &object, &warnings)),
        }
    }
    Err(ApiError::Conflict {
        group: request.group().to_owned(),
        resource: request.path.plural.clone(),
        name,
        message: "too many concurrent writers; try again".into(),
    })
}

/// A `422` for a bad PatchOptions parameter, as kube-apiserver words it.
fn patch_options_invalid(field: &str, message: &str) -> ApiError {
    ApiError::Invalid {
        group: "meta.k8s.io".into(),
        kind: "PatchOptions".into(),
        name: String::new(),
        summary: format!("{field}: {message}"),
        causes: vec![Cause {
            reason: if message.starts_with("Required") {
                "FieldValueRequired".into()
            } else {
                "FieldValueForbidden".into()
            },
            message: message.to_owned(),
            field: field.to_owned(),
        }],
    }
}

/// Server-side apply (`application/apply-patch+yaml`): merges the applied configuration into the
/// object (creating it if needed), tracks field ownership, and refuses to change fields other
/// managers own unless `force=true`.
async fn server_side_apply(
    state: Arc<ApiState>,
    request: Request,
    mut config: Value,
) -> Result<Response, ApiError> {
    let name = request.path.name.clone().unwrap_or_default();
    let manager = request
        .query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .cloned()
        .ok_or_else(|| {
            patch_options_invalid(
                "fieldManager",
                "Required value: is required for apply patch",
            )
        })?;
    let force = match request.query.get("force").map(String::as_str) {
        None | Some("" | "false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "force: {other:?} is not a boolean"
            )));
        }
    };
    let config_map = config.as_object_mut().ok_or_else(|| {
        ApiError::BadRequest("the applied configuration must be an object".into())
    })?;
    let expected = request.served.api_version();
    match config_map.get("apiVersion").and_then(Value::as_str) {
        Some(given) if given == expected => {}
        given => {
            return Err(ApiError::BadRequest(format!(
                "Incorrect version specified in apply patch. Specified patch version: {}, expected: {expected}",
                given.unwrap_or_default()
            )));
        }
    }
    if !config["metadata"]["managedFields"].is_null() {
        return Err(ApiError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    if config["metadata"]["name"].is_null()
        && let Some(meta) = config
            .as_object_mut()
            .map(|o| o.entry("metadata").or_insert_with(|| json!({})))
            .and_then(Value::as_object_mut)
    {
        meta.insert("name".into(), Value::String(name.clone()));
    }
    let precondition = precondition_rv(&config)?;
    for _ in 0..MAX_WRITE_ATTEMPTS {
        let current = state.store.get(request.key(&name)).await?;
        if current.is_none() && request.path.subresource.is_some() {
            return Err(request.not_found(&name));
        }
        if let (Some(expected), Some(current)) = (precondition, &current)
            && expected != current.resource_version
        {
            return Err(capstan_store::StoreError::Conflict {
                key: current.key.clone(),
                expected,
                actual: current.resource_version,
            }
            .into());
        }
        let live = current
            .as_ref()
            .map(|c| stored_value(c).and_then(|v| request.to_requested(&state, v)))
            .transpose()?;
        let entries = live.as_ref().and_then(managed::decode).unwrap_or_default();
        let applied = with_context(&state, &request, |ctx| {
            managed::apply(ctx, live.as_ref(), &config, entries, &manager, force)
        })
        .map_err(|conflicts| ApiError::ApplyConflict {
            message: conflicts.message(),
            causes: conflicts.causes(),
        })?;
        let ownership = Ownership::Applied(applied.entries);
        let mut warnings = Vec::new();
        let outcome = match &current {
            None => create_object(&state, &request, applied.object, ownership).await,
            Some(current) => write_owned(
                &state,
                &request,
                current,
                applied.object,
                &mut warnings,
                ownership,
            )
            .await
            .map(|object| (StatusCode::OK, object, std::mem::take(&mut warnings))),
        };
        match outcome {
            // Someone else wrote meanwhile: read again and re-apply.
            Err(ApiError::Conflict { .. } | ApiError::AlreadyExists { .. })
                if precondition.is_none() => {}
            Err(err) => return Err(err),
            Ok((code, object, warnings)) => return Ok(json_response(code, &object, &warnings)),
        }
    }
    Err(ApiError::Conflict {
        group: request.group().to_owned(),
        resource: request.path.plural.clone(),
        name,
        message: "too many concurrent writers; try again".into(),
    })
}

fn after_delete(
    state: &ApiState,
    request: &Request,
    deleted: &StoredObject,
) -> Result<(), ApiError> {
    if is_crd(request) {
        let value = stored_value(deleted)?;
        let group = value["spec"]["group"].as_str().unwrap_or_default();
        let plural = value["spec"]["names"]["plural"]
            .as_str()
            .unwrap_or_default();
        state.update_registry(|r| r.remove(group, plural));
    }
    Ok(())
}

/// The caller's delete preconditions (`uid`, `resourceVersion`) against `current`: a mismatch is a
/// conflict that is the caller's to resolve, never retried.
fn check_delete_preconditions(
    request: &Request,
    current: &StoredObject,
    options: &Value,
) -> Result<(), ApiError> {
    let name = current.key.name.clone();
    if let Some(expected) = options["preconditions"]["resourceVersion"].as_str()
        && expected != current.resource_version.to_string()
    {
        return Err(ApiError::Conflict {
            group: request.group().to_owned(),
            resource: request.path.plural.clone(),
            name,
            message: format!(
                "the ResourceVersion in the precondition ({expected}) does not match the ResourceVersion in record ({}). The object might have been modified",
                current.resource_version
            ),
        });
    }
    let object = stored_value(current)?;
    if let Some(uid) = options["preconditions"]["uid"].as_str()
        && object["metadata"]["uid"].as_str() != Some(uid)
    {
        return Err(ApiError::Conflict {
            group: request.group().to_owned(),
            resource: request.path.plural.clone(),
            name,
            message: format!(
                "the UID in the precondition ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        });
    }
    Ok(())
}

/// Deletes (or, with finalizers, marks for deletion) one stored object. `options` is a DeleteOptions.
pub(crate) async fn delete_one(
    state: &ApiState,
    request: &Request,
    current: StoredObject,
    options: &Value,
) -> Result<Value, ApiError> {
    check_delete_preconditions(request, &current, options)?;
    let mut object = stored_value(&current)?;
    let policy = options["propagationPolicy"].as_str().or_else(|| {
        options["orphanDependents"]
            .as_bool()
            .filter(|o| *o)
            .map(|_| "Orphan")
    });
    match policy {
        Some("Orphan") => lifecycle::add_finalizer(&mut object, "orphan")?,
        Some("Foreground") => lifecycle::add_finalizer(&mut object, "foregroundDeletion")?,
        _ => {}
    }
    if request.dry_run() {
        return request.to_requested(state, object);
    }
    if lifecycle::finalizers(&object).is_empty() {
        let deleted = state
            .store
            .delete(current.key.clone(), Some(current.resource_version))
            .await?;
        after_delete(state, request, &deleted)?;
        return Ok(committed(state, request, &deleted));
    }
    if lifecycle::is_being_deleted(&object)
        && lifecycle::finalizers(&stored_value(&current)?) == lifecycle::finalizers(&object)
    {
        return request.to_requested(state, object);
    }
    lifecycle::mark_deleted(&mut object)?;
    if request.group().is_empty() && request.kind() == "Namespace" {
        // kube-apiserver's namespace storage marks the phase with the deletion, so a read right
        // after `kubectl delete ns --wait=false` sees `Terminating`.
        object["status"]["phase"] = Value::String("Terminating".into());
    }
    let stored = state
        .store
        .update(current.key.clone(), object, Some(current.resource_version))
        .await?;
    Ok(committed(state, request, &stored))
}

fn delete_options(body: &Bytes, query: &HashMap<String, String>) -> Result<Value, ApiError> {
    let mut options = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("DeleteOptions are not valid JSON: {e}")))?
    };
    if let (Some(policy), Some(obj)) = (query.get("propagationPolicy"), options.as_object_mut()) {
        obj.insert("propagationPolicy".into(), Value::String(policy.clone()));
    }
    crate::params::validate_delete_options(&options)?;
    Ok(options)
}

async fn delete(state: Arc<ApiState>, request: Request, body: Bytes) -> Result<Response, ApiError> {
    let options = delete_options(&body, &request.query)?;
    let name = request.path.name.clone().unwrap_or_default();
    for _ in 0..MAX_WRITE_ATTEMPTS {
        let current = match state.store.get(request.key(&name)).await {
            // A row that cannot be decoded has no finalizers anyone could read: it is removed.
            Err(capstan_store::StoreError::Undecodable(key)) => {
                state.store.remove_undecodable(key).await?;
                return Ok(json_response(
                    StatusCode::OK,
                    &crate::status::success_status(),
                    &[],
                ));
            }
            found => found?.ok_or_else(|| request.not_found(&name))?,
        };
        // A mismatch with the caller's preconditions is theirs; with them met on this read, a
        // conflict is another writer's change since it (a controller's status beside a garbage
        // collector's delete guarded by uid), retried on a fresh read as kube-apiserver does.
        check_delete_preconditions(&request, &current, &options)?;
        match delete_one(&state, &request, current, &options).await {
            Err(ApiError::Conflict { .. }) => continue,
            Err(err) => return Err(err),
            Ok(object) => return Ok(json_response(StatusCode::OK, &object, &[])),
        }
    }
    Err(ApiError::Conflict {
        group: request.group().to_owned(),
        resource: request.path.plural.clone(),
        name,
        message: "too many concurrent writers; try again".into(),
    })
}

async fn delete_collection(state: Arc<ApiState>, request: Request) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(&request)?;
    let options = delete_options(&Bytes::new(), &request.query)?;
    let page = state
        .store
        .query(selected_query(&request, None, None, &labels, &fields))
        .await?;
    let mut items = Vec::new();
    for current in page.items {
        match delete_one(&state, &request, current, &options).await {
            Ok(object) => items.push(object),
            // Deleted or changed meanwhile: a collection delete is best effort per item.
            Err(ApiError::NotFound { .. } | ApiError::Conflict { .. }) => {}
            Err(err) => return Err(err),
        }
    }
    let list = json!({
        "apiVersion": request.served.api_version(),
        "kind": request.served.crd.list_kind,
        "metadata": {"resourceVersion": state.store.head().to_string()},
        "items": items,
    });
    Ok(json_response(StatusCode::OK, &list, &[]))
}

#[cfg(test)]
mod tests {
    use super::same_but_resource_version;
    use serde_json::json;

    #[test]
    fn a_write_is_unchanged_only_when_all_but_the_stored_version_is_equal() {
        let stored = json!({"metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "1"}}, "spec": {"n": 1}});
        let cases = [
            (
                json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"n": 1}}),
                true,
            ),
            // Field order is no change.
            (
                json!({"spec": {"n": 1}, "metadata": {"labels": {"x": "1"}, "name": "a"}}),
                true,
            ),
            (
                json!({"metadata": {"name": "a", "labels": {"x": "2"}}, "spec": {"n": 1}}),
                false,
            ),
            (json!({"metadata": {"name": "a"}, "spec": {"n": 1}}), false),
            (
                json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"n": 2}}),
                false,
            ),
            (
                json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"n": 1}, "status": {}}),
                false,
            ),
            (
                json!({"metadata": {"name": "a", "labels": {"x": "1"}}}),
                false,
            ),
            // A version given with the write is a field the stored object (without its own) lacks.
            (
                json!({"metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "1"}}, "spec": {"n": 1}}),
                false,
            ),
        ];
        for (new, same) in cases {
            assert_eq!(same_but_resource_version(&stored, &new), same, "{new}");
        }
        // A stored object without a version compares whole.
        let unversioned = json!({"metadata": {"name": "a"}});
        assert!(same_but_resource_version(
            &unversioned,
            &json!({"metadata": {"name": "a"}})
        ));
        assert!(!same_but_resource_version(
            &unversioned,
            &json!({"metadata": {"name": "b"}})
        ));
    }
}
