//! A Kubernetes-compatible API server over `capstan-store`.
//!
//! It serves capstan's built-in kinds and any CustomResourceDefinition applied to it, with the API
//! semantics `kubectl` and kube-rs use: discovery, CRUD, `resourceVersion` and optimistic concurrency,
//! `generation`, the `status` subresource, finalizers and `deletionTimestamp`, label and field
//! selectors, pagination, watches with resume and bookmarks, JSON merge / JSON / strategic merge
//! patches, server-side apply with field ownership (`managedFields`) and conflicts,
//! schema defaulting, pruning and validation, several versions per kind with conversion, Tables, and
//! OpenAPI v3. It listens on HTTPS only, authenticates with a bearer token or a client certificate
//! signed by its CA, and exposes `/healthz`, `/readyz`, `/livez` and `/metrics`.
//!
//! Kubernetes' own kinds (Nodes, Pods, Services, workloads, RBAC, PodDisruptionBudgets …) are served
//! with their upstream schemas, defaults, `scale`/`eviction`/`binding` subresources, strategic merge
//! patch and the protobuf wire format; deleting a Namespace deletes its contents.
//!
//! Every request is authenticated ([`authn`]: client certificates, the admin token, ServiceAccount
//! and bootstrap tokens) and authorized by RBAC ([`authz`], with kube-apiserver's default roles);
//! the review APIs ([`reviews`]) answer `kubectl auth can-i` and `kubectl auth whoami`.
//!
//! Not served: aggregated discovery and admission webhooks.

pub mod authn;
pub mod authz;
pub mod builtin;
pub mod client;
pub mod conn;
pub mod conversion;
mod discovery;
pub mod fieldset;
mod handlers;
/// The structural schemas of capstan's kinds, which lint validates with too.
pub use capstan_schema::kinds as kind_schemas;
pub mod lifecycle;
pub mod limits;
pub mod managed;
pub mod metrics;
pub mod names;
pub mod openapi;
pub mod params;
pub mod patching;
pub mod protobuf;
pub mod registry;
pub mod reviews;
pub mod selectors;
pub mod status;
pub mod strategic;
pub mod structured;
pub mod table;
pub mod target;
pub mod tls;
mod undecodable;
mod wire;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, Request as HttpRequest, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use capstan_store::{ObjectKey, Store};
use conversion::Converter;
use registry::Registry;
use status::ApiError;
use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockWriteGuard};
use std::time::Instant;

pub use authn::UserInfo;
pub use client::{
    WithoutManagedFields, in_process_client, in_process_client_as, in_process_controller_client,
};
pub use metrics::Metrics;

/// A write's request body as the handlers read it: a protobuf body transcoded (for Kubernetes' own
/// kinds, `typed`), then JSON or YAML parsed by its `Content-Type`, then the limits every stored
/// object must meet. The fuzz target `api_body` drives this path.
pub fn decode_request_body(
    typed: bool,
    headers: HeaderMap,
    body: Bytes,
) -> Result<serde_json::Value, ApiError> {
    let (headers, body) = wire::request_to_json(typed, headers, body)?;
    let object = handlers::parse_body(&headers, &body)?;
    limits::check_object("", "ConfigMap", &object)?;
    Ok(object)
}

/// Why the API server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("built-in kinds")]
    Registry(#[from] registry::RegistryError),
    #[error("reading stored CustomResourceDefinitions")]
    Store(#[from] capstan_store::StoreError),
    #[error("stored CustomResourceDefinition {name} is invalid")]
    StoredCrd {
        name: String,
        source: capstan_schema::CrdError,
    },
    /// A definition to install with a CEL rule that does not compile.
    #[error("CustomResourceDefinition {name}: the rule {rule:?} at {place}")]
    InvalidRule {
        name: String,
        place: String,
        rule: String,
        source: capstan_schema::RuleError,
    },
    #[error("TLS")]
    Tls(#[from] tls::TlsError),
    #[error("listening")]
    Io(#[from] std::io::Error),
    #[error("ServiceAccount signing key")]
    ServiceAccountKey(#[from] builtin::tokens::TokenError),
}

/// Annotation on the CustomResourceDefinitions [`ApiServer::publish_builtin_crds`] writes for
/// capstan's own kinds: the capstan version that wrote them.
pub const ANNOTATION_BUILT_IN: &str = "capstan.io/built-in";

/// How clients authenticate.
#[derive(Clone, Debug)]
pub struct Auth {
    /// Accepted bearer tokens.
    pub tokens: Vec<String>,
}

/// Built aggregated discovery documents: (core group?, version) → (registry generation, JSON).
type DiscoveryCache = std::sync::Mutex<HashMap<(bool, &'static str), (u64, Bytes)>>;

/// Shared state of all requests.
pub struct ApiState {
    pub store: Store,
    /// The served kinds, and how many times they have changed (what the discovery cache keys on).
    registry: RwLock<(Arc<Registry>, u64)>,
    /// Aggregated discovery documents as last built, by (core group?, version), with the
    /// registry generation they were built from: kubectl and clusterctl fetch them on every
    /// command, and building one walks every kind.
    discovery_cache: DiscoveryCache,
    pub converter: Arc<dyn Converter>,
    pub metrics: Arc<Metrics>,
    auth: Auth,
    /// What RBAC grants, cached between writes to the RBAC kinds.
    rbac_cache: authz::RbacCache,
    /// Whether a request without credentials acts as `system:anonymous` (kube-apiserver's
    /// `--anonymous-auth`, on by default) rather than getting `401`.
    anonymous_auth: std::sync::atomic::AtomicBool,
    /// The key ServiceAccount tokens are signed with.
    service_account_key: RwLock<Arc<builtin::tokens::SigningKey>>,
    /// The issuer of ServiceAccount tokens and the audiences the server accepts.
    token_issuer: RwLock<Arc<builtin::tokens::TokenIssuer>>,
    /// ResourceQuotas: parsed, the namespaces' quota locks, the status loop's wake-up.
    quotas: Arc<builtin::quotas::Quotas>,
}

impl Drop for ApiState {
    fn drop(&mut self) {
        // The quota status loop may be waiting for the first quota: it ends once woken.
        self.quotas.wake();
    }
}

impl ApiState {
    /// The key ServiceAccount tokens are signed and verified with.
    pub fn service_account_key(&self) -> Arc<builtin::tokens::SigningKey> {
        self.service_account_key
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The issuer of ServiceAccount tokens and the audiences this server accepts for its own
    /// authentication.
    pub fn token_issuer(&self) -> Arc<builtin::tokens::TokenIssuer> {
        self.token_issuer
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn registry_read(&self) -> Arc<Registry> {
        self.registry_with_generation().0
    }

    /// The served kinds and their generation, read together. Shared, not copied: every request
    /// reads them, and a copy of the map of kinds was a request's largest allocation.
    fn registry_with_generation(&self) -> (Arc<Registry>, u64) {
        match self.registry.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Changes the served kinds; the generation moves in the same critical section, so a reader
    /// never sees new kinds under an old generation.
    fn update_registry(&self, change: impl FnOnce(&mut Registry)) {
        let mut guard: RwLockWriteGuard<'_, (Arc<Registry>, u64)> = match self.registry.write() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Copied only when a request still holds the old one (rare: definitions change seldom).
        change(Arc::make_mut(&mut guard.0));
        guard.1 += 1;
    }

    /// The aggregated discovery document of the core group or of the others, as JSON bytes,
    /// rebuilt only when the served kinds changed since it was last built.
    fn aggregated_discovery(&self, core: bool, version: &'static str) -> Bytes {
        let (registry, generation) = self.registry_with_generation();
        let mut cache = self
            .discovery_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((built_at, bytes)) = cache.get(&(core, version))
            && *built_at == generation
        {
            return bytes.clone();
        }
        let bytes = Bytes::from(discovery::aggregated(&registry, core, version).to_string());
        cache.insert((core, version), (generation, bytes.clone()));
        bytes
    }

    /// The served kinds right now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry_read()
    }
}

/// Namespaces every Kubernetes API has.
const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The API server: state plus the HTTP router.
#[derive(Clone)]
pub struct ApiServer {
    state: Arc<ApiState>,
    /// Built once and shared by the clones: a process serving many servers (simulated workload
    /// clusters) would otherwise hold a routing tree per caller.
    router: Arc<std::sync::OnceLock<Router>>,
}

impl ApiServer {
    /// Builds the server over `store`: the built-in kinds plus the CRDs stored in it, and the system
    /// namespaces (created if missing).
    pub async fn new(
        store: Store,
        converter: Arc<dyn Converter>,
        auth: Auth,
    ) -> Result<Self, ServerError> {
        let mut registry = Registry::builtin()?;
        let crds = store
            .list(
                "apiextensions.k8s.io/customresourcedefinitions".into(),
                None,
                None,
                None,
                None,
            )
            .await?;
        // One bad stored definition must not keep the server (and every other kind) down: it is
        // skipped, named in the log, and can be fixed or deleted through the API.
        for stored in crds.items {
            let crd = stored
                .value()
                .map_err(|err| err.to_string())
                .and_then(|value| {
                    capstan_schema::CrdInfo::from_value(&value).map_err(|err| err.to_string())
                });
            match crd {
                Ok(crd) => registry.insert(crd),
                Err(error) => tracing::error!(
                    name = %stored.key.name,
                    %error,
                    "a stored CustomResourceDefinition is not valid; its kind is not served"
                ),
            }
        }
        for ns in SYSTEM_NAMESPACES {
            let key = ObjectKey::new("/namespaces", "", *ns);
            if store.get(key.clone()).await?.is_none() {
                let mut object = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
                // The system namespaces are created exactly like user ones.
                if lifecycle::prepare_create(&mut object, None, "Namespace").is_ok() {
                    match store.create(key, object).await {
                        Ok(_) | Err(capstan_store::StoreError::AlreadyExists(_)) => {}
                        Err(err) => return Err(err.into()),
                    }
                }
            }
        }
        authz::ensure_default_policy(&store).await?;
        let state = Arc::new(ApiState {
            store,
            registry: RwLock::new((Arc::new(registry), 0)),
            discovery_cache: std::sync::Mutex::default(),
            converter,
            metrics: Arc::new(Metrics::default()),
            auth,
            rbac_cache: authz::RbacCache::default(),
            anonymous_auth: std::sync::atomic::AtomicBool::new(true),
            // Until a data directory's key is given, one of this process.
            service_account_key: RwLock::new(Arc::new(builtin::tokens::SigningKey::generate()?)),
            token_issuer: RwLock::new(Arc::new(builtin::tokens::TokenIssuer::default())),
            quotas: Arc::default(),
        });
        builtin::namespaces::spawn(Arc::downgrade(&state));
        builtin::quotas::spawn(Arc::downgrade(&state));
        Ok(Self {
            state,
            router: Arc::default(),
        })
    }

    /// Installs (or replaces) a CustomResourceDefinition, as `kubectl apply` of it would: the kind
    /// is served with the definition's schemas from then on. `capstan serve --crds DIR` uses this to
    /// load full upstream schemas at start.
    pub async fn install_crd(
        &self,
        mut definition: serde_json::Value,
    ) -> Result<String, ServerError> {
        let crd = capstan_schema::CrdInfo::from_value(&definition).map_err(|source| {
            ServerError::StoredCrd {
                name: definition["metadata"]["name"]
                    .as_str()
                    .unwrap_or("<unnamed>")
                    .to_owned(),
                source,
            }
        })?;
        // As when a definition is written through the API: every rule must compile.
        for version in &crd.versions {
            if let Some(invalid) = version
                .schema
                .as_ref()
                .and_then(|schema| capstan_schema::rule_errors(schema).into_iter().next())
            {
                return Err(ServerError::InvalidRule {
                    name: crd.name.clone(),
                    place: format!("version {} openAPIV3Schema.{}", version.name, invalid.place),
                    rule: invalid.rule,
                    source: invalid.error,
                });
            }
        }
        let key = ObjectKey::new(
            "apiextensions.k8s.io/customresourcedefinitions",
            "",
            crd.name.clone(),
        );
        let store = &self.state.store;
        match store.get(key.clone()).await? {
            Some(current) => {
                let old = current.value()?;
                if lifecycle::prepare_update(
                    &old,
                    &mut definition,
                    lifecycle::WriteScope::Main {
                        status_subresource: false,
                    },
                    "CustomResourceDefinition",
                )
                .is_ok()
                {
                    store
                        .update(key, definition, Some(current.resource_version))
                        .await?;
                }
            }
            None => {
                if lifecycle::prepare_create(&mut definition, None, "CustomResourceDefinition")
                    .is_ok()
                {
                    store.create(key, definition).await?;
                }
            }
        }
        let name = crd.name.clone();
        self.state.update_registry(|r| r.insert(crd));
        Ok(name)
    }

    /// Stores a CustomResourceDefinition for each of capstan's own kinds, as installing the
    /// providers would on a real management cluster: tools that read a kind's definition
    /// (clusterctl checks the Cluster API contract on `clusters.cluster.x-k8s.io` and resolves
    /// references by the CRDs' contract labels) find it. A definition this did not write
    /// (upstream's, from `--crds` or `kubectl apply`) is left alone; one an older capstan wrote
    /// is replaced when it differs. Returns how many were written.
    pub async fn publish_builtin_crds(&self) -> Result<usize, ServerError> {
        let mut written = 0;
        for mut definition in registry::capstan_crds() {
            let name = definition["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            definition["metadata"]["annotations"] =
                serde_json::json!({ANNOTATION_BUILT_IN: env!("CARGO_PKG_VERSION")});
            let key = ObjectKey::new(
                "apiextensions.k8s.io/customresourcedefinitions",
                "",
                name.clone(),
            );
            if let Some(stored) = self.state.store.get(key).await? {
                let stored = stored.value()?;
                let ours = stored["metadata"]["annotations"]
                    .get(ANNOTATION_BUILT_IN)
                    .is_some();
                let same = stored["spec"] == definition["spec"]
                    && stored["metadata"]["labels"] == definition["metadata"]["labels"]
                    && stored["metadata"]["annotations"][ANNOTATION_BUILT_IN]
                        == definition["metadata"]["annotations"][ANNOTATION_BUILT_IN];
                if !ours || same {
                    continue;
                }
            }
            self.install_crd(definition).await?;
            written += 1;
        }
        Ok(written)
    }

    /// The shared state (for in-process clients and tests).
    pub fn state(&self) -> Arc<ApiState> {
        self.state.clone()
    }

    /// Whether requests without credentials are served as user `system:anonymous` (group
    /// `system:unauthenticated`), for RBAC to decide, as kube-apiserver does by default; when
    /// off, they get `401` (kube-apiserver's `--anonymous-auth=false`).
    pub fn set_anonymous_auth(&self, enabled: bool) {
        self.state
            .anonymous_auth
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
    }

    /// Signs ServiceAccount tokens with `key` from now on (`capstan serve` gives the data
    /// directory's); tokens signed with the key before stop verifying.
    pub fn set_service_account_key(&self, key: builtin::tokens::SigningKey) {
        *self
            .state
            .service_account_key
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(key);
    }

    /// Issues ServiceAccount tokens as `issuer` and accepts them for authentication only when
    /// they are for one of its API audiences, from now on (kube-apiserver's
    /// `--service-account-issuer` and `--api-audiences`); tokens of another issuer stop
    /// verifying.
    pub fn set_token_issuer(&self, issuer: builtin::tokens::TokenIssuer) {
        *self
            .state
            .token_issuer
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(issuer);
    }

    /// The HTTP routes, authentication and authorization included. `/healthz`, `/livez`,
    /// `/readyz` and `/version` are readable by everyone (also anonymously) through the default
    /// ClusterRole `system:public-info-viewer`, as in Kubernetes.
    pub fn router(&self) -> Router {
        self.router.get_or_init(|| self.build_router()).clone()
    }

    fn build_router(&self) -> Router {
        Router::new()
            .route("/healthz", get(health))
            .route("/livez", get(health))
            .route("/readyz", get(ready))
            .route(
                "/version",
                get(|| async { axum::Json(discovery::version()) }),
            )
            .route("/metrics", get(metrics_text))
            .route(
                "/.well-known/openid-configuration",
                get(openid_configuration),
            )
            .route("/openid/v1/jwks", get(jwks))
            .route(
                "/capstan/v1/undecodable",
                get(undecodable::list).delete(undecodable::remove),
            )
            .route("/openapi/v2", get(openapi_v2))
            .route("/openapi/v3", get(openapi_root))
            .route("/openapi/v3/{*rest}", get(openapi_doc))
            .route("/api", any(api))
            .route("/api/{*rest}", any(api))
            .route("/apis", any(api))
            .route("/apis/{*rest}", any(api))
            .layer(middleware::from_fn_with_state(
                self.state.clone(),
                authorize,
            ))
            .layer(middleware::from_fn_with_state(
                self.state.clone(),
                authenticate,
            ))
            .with_state(self.state.clone())
    }
}

async fn openid_configuration(State(state): State<Arc<ApiState>>) -> Response {
    axum::Json(state.token_issuer().openid_configuration()).into_response()
}

async fn jwks(State(state): State<Arc<ApiState>>) -> Response {
    let keys = state.service_account_key().jwks();
    (
        [(header::CONTENT_TYPE, "application/jwk-set+json")],
        keys.to_string(),
    )
        .into_response()
}

async fn health() -> &'static str {
    "ok"
}

async fn ready(State(state): State<Arc<ApiState>>) -> Response {
    // Ready when the store answers a read.
    match state
        .store
        .get(ObjectKey::new("/namespaces", "", "default"))
        .await
    {
        Ok(_) => (StatusCode::OK, "ok").into_response(),
        Err(err) => (StatusCode::SERVICE_UNAVAILABLE, format!("store: {err}")).into_response(),
    }
}

async fn metrics_text(State(state): State<Arc<ApiState>>) -> Response {
    state
        .metrics
        .resource_version
        .set(i64::try_from(state.store.head()).unwrap_or(i64::MAX));
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.encode(),
    )
        .into_response()
}

/// `/openapi/v2`. kubectl before 1.29 fetches it (as protobuf) before it applies anything; the
/// schemas are served as OpenAPI v3, so this answers with an empty document, which those clients read
/// as "no client-side schemas" and leave validation to the server.
async fn openapi_v2(headers: HeaderMap) -> Response {
    let wants_protobuf = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("protobuf"));
    if wants_protobuf {
        // An empty protobuf message decodes as an empty `openapi_v2.Document`.
        (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            Vec::<u8>::new(),
        )
            .into_response()
    } else {
        axum::Json(serde_json::json!({"swagger": "2.0", "info": {"title": "capstan", "version": "v2"}, "paths": {}, "definitions": {}})).into_response()
    }
}

async fn openapi_root(State(state): State<Arc<ApiState>>) -> Response {
    axum::Json(openapi::root(&state.registry_read())).into_response()
}

async fn openapi_doc(State(state): State<Arc<ApiState>>, uri: Uri) -> Response {
    let rest = uri.path().trim_start_matches("/openapi/v3/");
    let registry = state.registry_read();
    let (group, version) = match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["api", version] => (String::new(), (*version).to_owned()),
        ["apis", group, version] => ((*group).to_owned(), (*version).to_owned()),
        _ => return ApiError::NoSuchResource.into_response(),
    };
    axum::Json(openapi::group_version(&registry, &group, &version)).into_response()
}

async fn authenticate(
    State(state): State<Arc<ApiState>>,
    mut request: HttpRequest,
    next: Next,
) -> Response {
    // A client certificate (or an in-process caller) already named the user.
    let user = match request.extensions().get::<UserInfo>().cloned() {
        Some(user) => user,
        None => match bearer_token(request.headers()) {
            Some(token) => match authn::authenticate_token(&state, &token).await {
                Ok(user) => user,
                Err(rejection) => {
                    // A credential that fails is refused even when anonymous requests are
                    // served, as kube-apiserver does. The reason names the kind of credential,
                    // never the token.
                    tracing::info!(reason = %rejection, "refused a bearer token");
                    return ApiError::Unauthorized.into_response();
                }
            },
            None if state
                .anonymous_auth
                .load(std::sync::atomic::Ordering::Relaxed) =>
            {
                UserInfo::anonymous()
            }
            None => return ApiError::Unauthorized.into_response(),
        },
    };
    let user = match impersonate(&state, user, request.headers()).await {
        Ok(user) => user,
        Err(err) => return err.into_response(),
    };
    request.extensions_mut().insert(user);
    next.run(request).await
}

/// The user a request acts as: the authenticated one, or the one its `Impersonate-User` /
/// `Impersonate-Group` headers name when RBAC lets the authenticated user `impersonate` them.
async fn impersonate(
    state: &ApiState,
    user: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let users = values("impersonate-user");
    let groups = values("impersonate-group");
    let Some(target) = users.first() else {
        if groups.is_empty() {
            return Ok(user);
        }
        return Err(ApiError::BadRequest(
            "impersonating groups requires impersonating a user (Impersonate-User)".into(),
        ));
    };
    let mut wanted = Vec::new();
    let service_account = target
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    wanted.push(match service_account {
        Some((namespace, name)) => ("serviceaccounts", namespace.to_owned(), name.to_owned()),
        None => ("users", String::new(), target.clone()),
    });
    for group in &groups {
        wanted.push(("groups", String::new(), group.clone()));
    }
    for (resource, namespace, name) in wanted {
        let attributes = authz::Attributes {
            verb: "impersonate".into(),
            resource: Some(authz::ResourceAttributes {
                resource: resource.into(),
                namespace,
                name,
                ..authz::ResourceAttributes::default()
            }),
            path: String::new(),
        };
        match authz::authorize(state, &user, &attributes).await? {
            authz::Decision::Allow => {}
            authz::Decision::Deny { reason } => {
                return Err(authz::forbidden(&user, &attributes, &reason));
            }
        }
    }
    let mut group_refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let namespace_group = service_account.map(|(ns, _)| format!("system:serviceaccounts:{ns}"));
    if let Some(ns_group) = &namespace_group {
        group_refs.push("system:serviceaccounts");
        group_refs.push(ns_group);
    }
    Ok(UserInfo::new(target.clone(), &group_refs))
}

/// Refuses what RBAC does not allow the authenticated user, with kube-apiserver's 403.
async fn authorize(
    State(state): State<Arc<ApiState>>,
    request: HttpRequest,
    next: Next,
) -> Response {
    let Some(user) = request.extensions().get::<UserInfo>().cloned() else {
        return ApiError::Unauthorized.into_response();
    };
    let attributes = request_attributes(request.method(), request.uri());
    match authz::authorize(&state, &user, &attributes).await {
        Ok(authz::Decision::Allow) => next.run(request).await,
        Ok(authz::Decision::Deny { reason }) => {
            authz::forbidden(&user, &attributes, &reason).into_response()
        }
        Err(err) => ApiError::from(err).into_response(),
    }
}

/// A request's authorization attributes, as kube-apiserver's RequestInfo derives them.
fn request_attributes(method: &Method, uri: &Uri) -> authz::Attributes {
    let path = uri.path().to_owned();
    match target::parse(&path) {
        Some(target::Target::Resource(resource)) => {
            let watch = uri
                .query()
                .unwrap_or_default()
                .split('&')
                .any(|pair| pair.strip_prefix("watch=").is_some_and(params::is_true));
            let mut query = HashMap::new();
            if watch {
                query.insert("watch".to_owned(), "true".to_owned());
            }
            let verb = verb(method, &resource, &query).to_owned();
            // The Namespace object is inside itself: a namespace's admin may read it.
            let namespace = match (
                &resource.namespace,
                resource.group.as_str(),
                resource.plural.as_str(),
            ) {
                (Some(ns), _, _) => ns.clone(),
                (None, "", "namespaces") => resource.name.clone().unwrap_or_default(),
                (None, _, _) => String::new(),
            };
            authz::Attributes {
                verb,
                resource: Some(authz::ResourceAttributes {
                    group: resource.group,
                    version: resource.version,
                    resource: resource.plural,
                    subresource: resource.subresource.unwrap_or_default(),
                    namespace,
                    name: resource.name.unwrap_or_default(),
                }),
                path,
            }
        }
        _ => authz::Attributes {
            verb: method.as_str().to_ascii_lowercase(),
            resource: None,
            path,
        },
    }
}

/// The bearer token of an `Authorization` header (the scheme is case-insensitive).
fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

fn verb(
    method: &Method,
    path: &target::ResourcePath,
    query: &HashMap<String, String>,
) -> &'static str {
    let watch = path.watch_prefix || query.get("watch").is_some_and(|v| params::is_true(v));
    match (method.as_str(), path.name.is_some()) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    }
}

async fn api(
    State(state): State<Arc<ApiState>>,
    // The caller's identity (set by authentication) and the in-process
    // controllers' marker, both request extensions.
    extensions: axum::http::Extensions,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let started = Instant::now();
    let user = extensions.get::<UserInfo>().cloned();
    let without_managed_fields = extensions.get::<client::WithoutManagedFields>().is_some();
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    let Some(target) = target::parse(uri.path()) else {
        return ApiError::NoSuchResource.into_response();
    };
    if matches!(target, target::Target::Root)
        && let Some(version) = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .and_then(discovery::aggregated_version)
    {
        let core = uri.path().trim_end_matches('/') == "/api";
        let mut response = state.aggregated_discovery(core, version).into_response();
        if let Ok(media_type) = HeaderValue::from_str(&discovery::aggregated_media_type(version)) {
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, media_type);
        }
        // The answer depends on Accept: caches must keep the two forms apart.
        response
            .headers_mut()
            .insert(header::VARY, HeaderValue::from_static("Accept"));
        return response;
    }
    let registry = state.registry_read();
    let found = match target {
        target::Target::Root if uri.path().trim_end_matches('/') == "/api" => {
            Some(discovery::core_versions())
        }
        target::Target::Root => Some(discovery::group_list(&registry)),
        target::Target::Group { group } => discovery::group(&registry, &group),
        target::Target::GroupVersion { group, version } => {
            discovery::resource_list(&registry, &group, &version)
        }
        target::Target::Resource(path) => {
            if reviews::is_review(&path.group, &path.version, &path.plural) {
                drop(registry);
                let user = user.unwrap_or_default();
                let wants_protobuf = wire::prefers_protobuf(&headers);
                let (headers, body) = match wire::request_to_json(true, headers, body) {
                    Ok(decoded) => decoded,
                    Err(err) => return err.into_response(),
                };
                let body = if body.is_empty() {
                    serde_json::Value::Null
                } else {
                    match handlers::parse_body(&headers, &body) {
                        Ok(value) => value,
                        Err(err) => return err.into_response(),
                    }
                };
                let response = match reviews::handle(&state, &user, &path, &method, &body).await {
                    Some(Ok(response)) => response,
                    Some(Err(err)) => err.into_response(),
                    None => ApiError::NoSuchResource.into_response(),
                };
                return if wants_protobuf {
                    let api_version = registry::api_version(&path.group, &path.version);
                    wire::response_to_protobuf(response, &api_version).await
                } else {
                    response
                };
            }
            let Some(served) = registry.resolve(&path.group, &path.version, &path.plural) else {
                return ApiError::NoSuchResource.into_response();
            };
            drop(registry);
            let verb = verb(&method, &path, &query);
            let api_version = served.api_version();
            let typed = builtin::is_typed(&served.crd.group, &served.crd.kind);
            let (headers, body) = match wire::request_to_json(typed, headers, body) {
                Ok(decoded) => decoded,
                Err(err) => return err.into_response(),
            };
            let wants_protobuf = typed && wire::prefers_protobuf(&headers);
            let resource = path.plural.clone();
            let request = handlers::Request {
                served,
                path,
                query,
                headers,
                without_managed_fields,
            };
            if let Err(err) = no_escalation(&state, user.as_ref(), &method, &request, &body).await {
                return err.into_response();
            }
            let mut response = handlers::handle(state.clone(), method, request, body)
                .await
                .unwrap_or_else(IntoResponse::into_response);
            if wants_protobuf && verb == "watch" {
                response = wire::watch_to_protobuf(response, &api_version).await;
            } else if wants_protobuf {
                response = wire::response_to_protobuf(response, &api_version).await;
            }
            state
                .metrics
                .requests
                .get_or_create(&metrics::RequestLabels {
                    verb: verb.to_owned(),
                    resource,
                    code: response.status().as_u16(),
                })
                .inc();
            if verb != "watch" {
                state
                    .metrics
                    .latency
                    .get_or_create(&metrics::VerbLabels {
                        verb: verb.to_owned(),
                    })
                    .observe(started.elapsed().as_secs_f64());
            }
            return response;
        }
    };
    match found {
        Some(doc) => axum::Json(doc).into_response(),
        None => ApiError::NoSuchResource.into_response(),
    }
}

/// For writes of RBAC objects by users outside `system:masters`: the object as it would be
/// stored must not grant more than the user holds ([`authz::confirm_no_escalation`]).
async fn no_escalation(
    state: &ApiState,
    user: Option<&UserInfo>,
    method: &Method,
    request: &handlers::Request,
    body: &Bytes,
) -> Result<(), ApiError> {
    let path = &request.path;
    let rbac = path.group == "rbac.authorization.k8s.io"
        && matches!(
            path.plural.as_str(),
            "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings"
        )
        && path.subresource.is_none();
    let Some(user) = user else {
        return Ok(());
    };
    if !rbac || user.in_group(authn::MASTERS_GROUP) {
        return Ok(());
    }
    let object = match *method {
        Method::POST | Method::PUT => handlers::parse_body(&request.headers, body)?,
        Method::PATCH => {
            let name = path.name.clone().unwrap_or_default();
            let current = match state.store.get(request.key(&name)).await? {
                Some(stored) => handlers::stored_value(&stored)?,
                None => serde_json::json!({"metadata": {"name": name}}),
            };
            handlers::patched(request, &current, body)?
        }
        _ => return Ok(()),
    };
    let namespace = path.namespace.clone().unwrap_or_default();
    authz::confirm_no_escalation(state, user, &path.plural, &namespace, &object).await
}

/// Reads a request body up to [`limits::MAX_REQUEST_BYTES`]; beyond it, 413 with a `Status`.
async fn read_body(body: axum::body::Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limits::MAX_REQUEST_BYTES)
        .await
        .map_err(|err| {
            let inner = err.into_inner();
            if inner
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                limits::body_too_large()
            } else {
                ApiError::BadRequest(format!("reading the request body failed: {inner}"))
            }
        })
}

pub mod serve;
