//! The provisioning server: what hosts and their BMCs fetch over plain HTTP while capstan
//! provisions them, and where the agent calls back.
//!
//! - `GET /boot/{media}.iso`: a host's boot ISO, fetched by its BMC as virtual media. The media id
//!   is random and unguessable; the ISO is built on first request and kept while its session lives.
//! - `POST /agent/v1/heartbeat`, `GET /agent/v1/configdrive`: the agent protocol of
//!   [`capstan_model::agent`], authenticated by the session's bearer token. The token alone says
//!   which host is talking, so a host can only ever read its own config drive.
//! - `GET /images/...`: OS images from a directory, with `Range` support so an agent resumes a
//!   download after the server restarted.
//!
//! Sessions live in an [`AgentRegistry`] shared with the provisioner. It keeps only what can be
//! rebuilt: the provisioner registers a session again from its persisted record after a restart,
//! and the agent's next heartbeat brings back the rest.

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use capstan_model::agent::{
    CONFIG_DRIVE_PATH, Command, HEARTBEAT_PATH, Heartbeat, HeartbeatResponse, StepPhase,
};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often agents heartbeat.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);

/// Makes bootable ISOs for the agent: the provisioning ramdisk with a kernel command line.
pub trait BootMediaBuilder: Send + Sync + std::fmt::Debug {
    /// A bootable ISO whose kernel command line carries `extra_cmdline` after the ramdisk's own.
    fn boot_iso(&self, extra_cmdline: &str) -> Result<Vec<u8>, String>;
}

/// A host, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What the provisioner registers for one agent operation.
#[derive(Clone)]
pub struct SessionSpec {
    pub host: HostKey,
    /// The bearer token the boot media carries. Never logged.
    pub token: String,
    /// The random id in the boot media URL.
    pub media_id: String,
    /// The command the agent should carry out.
    pub command: Command,
    /// The host's config drive, for a deploy.
    pub config_drive: Option<Arc<Vec<u8>>>,
}

impl std::fmt::Debug for SessionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSpec")
            .field("host", &self.host)
            .field("token", &"<redacted>")
            .field("media_id", &self.media_id)
            .field("command", &self.command)
            .finish()
    }
}

/// The last heartbeat of a session, and when it came.
#[derive(Clone, Debug)]
pub struct LastHeartbeat {
    pub received: Instant,
    pub heartbeat: Heartbeat,
}

struct Session {
    spec: SessionSpec,
    /// When this process registered the session: the reference for boot and heartbeat timeouts
    /// until the agent calls.
    registered: Instant,
    last: Option<LastHeartbeat>,
    boot_iso: Option<Arc<Vec<u8>>>,
}

#[derive(Default)]
struct Sessions {
    by_host: HashMap<HostKey, Session>,
    host_by_token: HashMap<[u8; 32], HostKey>,
    host_by_media: HashMap<String, HostKey>,
}

/// How the agent and the BMCs reach this server, and what it serves.
#[derive(Clone, Debug)]
pub struct ServerSettings {
    /// Base URL agents use (`capstan.url`), e.g. `http://10.0.2.2:6180` from a QEMU guest.
    pub agent_url: String,
    /// Base URL BMCs use to fetch boot media, e.g. `http://127.0.0.1:6180`.
    pub media_url: String,
    /// Directory served under `/images/`.
    pub images_dir: Option<PathBuf>,
    /// Builds boot ISOs; without one, only the fake driver can provision.
    pub boot_media: Option<Arc<dyn BootMediaBuilder>>,
}

/// The agent sessions of every host being inspected, provisioned or cleaned.
pub struct AgentRegistry {
    sessions: Mutex<Sessions>,
    settings: ServerSettings,
}

impl std::fmt::Debug for AgentRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRegistry")
            .field("settings", &self.settings)
            .field("sessions", &self.lock().by_host.len())
            .finish()
    }
}

fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl AgentRegistry {
    pub fn new(settings: ServerSettings) -> Self {
        Self {
            sessions: Mutex::new(Sessions::default()),
            settings,
        }
    }

    pub fn settings(&self) -> &ServerSettings {
        &self.settings
    }

    fn lock(&self) -> MutexGuard<'_, Sessions> {
        // The maps stay consistent between statements, so a panic elsewhere leaves them usable.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers (or refreshes) the session of `spec.host`. A session with the same token keeps
    /// its last heartbeat; a new token replaces whatever the host had.
    pub fn register(&self, spec: SessionSpec) {
        let mut sessions = self.lock();
        let hash = token_hash(&spec.token);
        let host = spec.host.clone();
        let same = sessions
            .by_host
            .get(&host)
            .is_some_and(|s| token_hash(&s.spec.token) == hash);
        if same {
            if let Some(session) = sessions.by_host.get_mut(&host) {
                session.spec.command = spec.command;
                if spec.config_drive.is_some() {
                    session.spec.config_drive = spec.config_drive;
                }
            }
            return;
        }
        Self::remove_locked(&mut sessions, &host);
        sessions.host_by_token.insert(hash, host.clone());
        sessions
            .host_by_media
            .insert(spec.media_id.clone(), host.clone());
        sessions.by_host.insert(
            host,
            Session {
                spec,
                registered: Instant::now(),
                last: None,
                boot_iso: None,
            },
        );
    }

    fn remove_locked(sessions: &mut Sessions, host: &HostKey) {
        if let Some(old) = sessions.by_host.remove(host) {
            sessions.host_by_token.remove(&token_hash(&old.spec.token));
            sessions.host_by_media.remove(&old.spec.media_id);
        }
    }

    /// Forgets the session of `host`: its token stops working and its media disappears.
    pub fn release(&self, host: &HostKey) {
        Self::remove_locked(&mut self.lock(), host);
    }

    /// Whether `host` has a session with `token`.
    pub fn has_session(&self, host: &HostKey, token: &str) -> bool {
        self.lock()
            .by_host
            .get(host)
            .is_some_and(|s| s.spec.token == token)
    }

    /// The last heartbeat of `host`'s session and how long the session has been registered here.
    pub fn latest(&self, host: &HostKey) -> Option<(Duration, Option<LastHeartbeat>)> {
        self.lock()
            .by_host
            .get(host)
            .map(|s| (s.registered.elapsed(), s.last.clone()))
    }

    /// Records a heartbeat and answers with the session's command; `None` for an unknown token.
    pub fn heartbeat(&self, token: &str, heartbeat: Heartbeat) -> Option<HeartbeatResponse> {
        let mut sessions = self.lock();
        let host = sessions.host_by_token.get(&token_hash(token))?.clone();
        let session = sessions.by_host.get_mut(&host)?;
        if let Some(step) = &heartbeat.step {
            let changed = session
                .last
                .as_ref()
                .and_then(|l| l.heartbeat.step.as_ref())
                .is_none_or(|previous| {
                    previous.phase != step.phase || previous.operation != step.operation
                });
            if changed {
                tracing::info!(host = %host, operation = %step.operation, kind = ?step.kind, phase = ?step.phase, "agent step");
            }
            if step.phase == StepPhase::Failed && changed {
                tracing::warn!(host = %host, error = step.error.as_deref().unwrap_or(""), "agent step failed");
            }
        }
        session.last = Some(LastHeartbeat {
            received: Instant::now(),
            heartbeat,
        });
        Some(HeartbeatResponse {
            command: session.spec.command.clone(),
            heartbeat_seconds: u32::try_from(HEARTBEAT_INTERVAL.as_secs()).unwrap_or(2),
        })
    }

    /// The config drive of the session with `token`.
    pub fn config_drive(&self, token: &str) -> Option<Arc<Vec<u8>>> {
        let sessions = self.lock();
        let host = sessions.host_by_token.get(&token_hash(token))?;
        sessions.by_host.get(host)?.spec.config_drive.clone()
    }

    /// The URL a BMC fetches the boot media of `media_id` from.
    pub fn media_url(&self, media_id: &str) -> String {
        format!(
            "{}/boot/{media_id}.iso",
            self.settings.media_url.trim_end_matches('/')
        )
    }

    /// The kernel command line that points the agent of `spec` at this server.
    pub fn agent_cmdline(&self, spec: &SessionSpec) -> String {
        format!(
            "{}={} {}={} {}={}",
            capstan_model::agent::KERNEL_PARAM_URL,
            self.settings.agent_url.trim_end_matches('/'),
            capstan_model::agent::KERNEL_PARAM_TOKEN,
            spec.token,
            capstan_model::agent::KERNEL_PARAM_HOST,
            spec.host,
        )
    }

    /// The boot ISO of `media_id`, built on first use.
    pub fn boot_media(&self, media_id: &str) -> Result<Option<Arc<Vec<u8>>>, String> {
        let (spec, cached) = {
            let sessions = self.lock();
            let Some(host) = sessions.host_by_media.get(media_id) else {
                return Ok(None);
            };
            let Some(session) = sessions.by_host.get(host) else {
                return Ok(None);
            };
            (session.spec.clone(), session.boot_iso.clone())
        };
        if let Some(iso) = cached {
            return Ok(Some(iso));
        }
        let Some(builder) = &self.settings.boot_media else {
            return Err(
                "no provisioning ramdisk is configured (see `capstan ramdisk build`)".into(),
            );
        };
        let iso = Arc::new(builder.boot_iso(&self.agent_cmdline(&spec))?);
        let mut sessions = self.lock();
        if let Some(session) = sessions.by_host.get_mut(&spec.host)
            && session.spec.media_id == media_id
        {
            session.boot_iso = Some(iso.clone());
        }
        Ok(Some(iso))
    }
}

/// The provisioning server's routes.
pub fn router(registry: Arc<AgentRegistry>) -> Router {
    let mut router = Router::new()
        .route("/boot/{media}", get(boot_media))
        .route(HEARTBEAT_PATH, post(heartbeat))
        .route(CONFIG_DRIVE_PATH, get(config_drive));
    if let Some(dir) = &registry.settings.images_dir {
        router = router.nest_service("/images", tower_http::services::ServeDir::new(dir));
    }
    router.with_state(registry)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

async fn boot_media(
    State(registry): State<Arc<AgentRegistry>>,
    Path(media): Path<String>,
) -> Response {
    let Some(media_id) = media.strip_suffix(".iso") else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let media_id = media_id.to_owned();
    let registry2 = registry.clone();
    // Building an ISO reads tens of megabytes: off the async workers.
    let built = tokio::task::spawn_blocking(move || registry2.boot_media(&media_id)).await;
    match built {
        Ok(Ok(Some(iso))) => (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            Body::from(iso.as_ref().clone()),
        )
            .into_response(),
        Ok(Ok(None)) => StatusCode::NOT_FOUND.into_response(),
        Ok(Err(message)) => {
            tracing::warn!(error = %message, "building boot media");
            (StatusCode::INTERNAL_SERVER_ERROR, message).into_response()
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn heartbeat(
    State(registry): State<Arc<AgentRegistry>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some(token) = bearer(&headers) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let heartbeat: Heartbeat = match serde_json::from_slice(&body) {
        Ok(h) => h,
        Err(err) => return (StatusCode::BAD_REQUEST, format!("heartbeat: {err}")).into_response(),
    };
    match registry.heartbeat(token, heartbeat) {
        Some(response) => axum::Json(response).into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

async fn config_drive(State(registry): State<Arc<AgentRegistry>>, headers: HeaderMap) -> Response {
    let Some(token) = bearer(&headers) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    match registry.config_drive(token) {
        Some(iso) => (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            Body::from(iso.as_ref().clone()),
        )
            .into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;
    use axum::http::Request;
    use capstan_model::agent::{StepKind, StepReport};
    use tower::ServiceExt;

    #[derive(Debug)]
    struct EchoMedia;
    impl BootMediaBuilder for EchoMedia {
        fn boot_iso(&self, extra_cmdline: &str) -> Result<Vec<u8>, String> {
            Ok(extra_cmdline.as_bytes().to_vec())
        }
    }

    fn registry() -> Arc<AgentRegistry> {
        Arc::new(AgentRegistry::new(ServerSettings {
            agent_url: "http://10.0.2.2:6180/".into(),
            media_url: "http://127.0.0.1:6180".into(),
            images_dir: None,
            boot_media: Some(Arc::new(EchoMedia)),
        }))
    }

    fn session(name: &str, token: &str, drive: &[u8]) -> SessionSpec {
        SessionSpec {
            host: HostKey {
                namespace: "default".into(),
                name: name.into(),
            },
            token: token.into(),
            media_id: format!("media-{name}"),
            command: Command::Inspect {
                operation: format!("inspect-{name}"),
            },
            config_drive: Some(Arc::new(drive.to_vec())),
        }
    }

    async fn call(router: &Router, request: Request<Body>) -> (StatusCode, Vec<u8>) {
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        (
            status,
            to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap()
                .to_vec(),
        )
    }

    fn heartbeat_request(token: Option<&str>, body: &Heartbeat) -> Request<Body> {
        let mut builder = Request::post(HEARTBEAT_PATH).header("content-type", "application/json");
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        builder
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap()
    }

    #[tokio::test]
    async fn tokens_decide_who_is_talking_and_what_they_may_read() {
        let registry = registry();
        registry.register(session("h0", "token-0", b"drive-0"));
        registry.register(session("h1", "token-1", b"drive-1"));
        let router = router(registry.clone());

        let (status, _) = call(&router, heartbeat_request(None, &Heartbeat::default())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, _) = call(
            &router,
            heartbeat_request(Some("guess"), &Heartbeat::default()),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);

        let beat = Heartbeat {
            agent_version: "t".into(),
            hardware: None,
            step: Some(StepReport {
                operation: "inspect-h1".into(),
                kind: StepKind::Inspect,
                phase: StepPhase::Running,
                progress: None,
                error: None,
            }),
        };
        let (status, body) = call(&router, heartbeat_request(Some("token-1"), &beat)).await;
        assert_eq!(status, StatusCode::OK);
        let response: HeartbeatResponse = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            response.command,
            Command::Inspect {
                operation: "inspect-h1".into()
            }
        );
        let host1 = HostKey {
            namespace: "default".into(),
            name: "h1".into(),
        };
        let host0 = HostKey {
            namespace: "default".into(),
            name: "h0".into(),
        };
        assert!(registry.latest(&host1).unwrap().1.is_some());
        assert!(
            registry.latest(&host0).unwrap().1.is_none(),
            "h1's heartbeat is not h0's"
        );

        // Each token reads its own host's config drive, and nothing else.
        for (token, drive) in [("token-0", b"drive-0"), ("token-1", b"drive-1")] {
            let request = Request::get(CONFIG_DRIVE_PATH)
                .header("authorization", format!("Bearer {token}"))
                .body(Body::empty())
                .unwrap();
            let (status, body) = call(&router, request).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(body, drive);
        }
        let request = Request::get(CONFIG_DRIVE_PATH).body(Body::empty()).unwrap();
        assert_eq!(call(&router, request).await.0, StatusCode::UNAUTHORIZED);

        // Boot media carries the agent's settings; a released session's token and media stop working.
        let (status, body) = call(
            &router,
            Request::get("/boot/media-h0.iso")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let cmdline = String::from_utf8(body).unwrap();
        assert_eq!(
            cmdline,
            "capstan.url=http://10.0.2.2:6180 capstan.token=token-0 capstan.host=default/h0"
        );
        registry.release(&host0);
        let (status, _) = call(
            &router,
            Request::get("/boot/media-h0.iso")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = call(
            &router,
            heartbeat_request(Some("token-0"), &Heartbeat::default()),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(registry.media_url("m"), "http://127.0.0.1:6180/boot/m.iso");
    }

    #[test]
    fn a_session_spec_never_shows_its_token() {
        let text = format!("{:?}", session("h0", "very-secret-token", b""));
        assert!(!text.contains("very-secret-token"), "{text}");
    }

    #[test]
    fn re_registering_the_same_token_keeps_the_last_heartbeat_and_a_new_one_replaces_it() {
        let registry = registry();
        registry.register(session("h0", "t0", b""));
        registry.heartbeat("t0", Heartbeat::default()).unwrap();
        let host = HostKey {
            namespace: "default".into(),
            name: "h0".into(),
        };
        registry.register(session("h0", "t0", b""));
        assert!(registry.latest(&host).unwrap().1.is_some());
        registry.register(session("h0", "t1", b""));
        assert!(registry.latest(&host).unwrap().1.is_none());
        assert!(registry.heartbeat("t0", Heartbeat::default()).is_none());
    }
}
