//! Connection hygiene for every listener capstan opens (the HTTPS API, the plain-HTTP provisioning
//! server, the simulated workload APIs): what keeps peers from exhausting the server's descriptors.
//!
//! - A TLS handshake must finish within [`ConnectionLimits::handshake_timeout`].
//! - A first request must start within [`ConnectionLimits::header_read_timeout`] of the handshake
//!   (a connection that shakes hands and sends nothing is closed), and an HTTP/1.1 request head
//!   must arrive within it (hyper's header-read timeout, which also closes a keep-alive connection
//!   that sends no next request).
//! - A connection with no request in flight and no bytes either way for
//!   [`ConnectionLimits::idle_timeout`] is closed. A watch or a download in flight is not idle.
//! - Connections are counted in a [`ConnectionPool`]. Every listener of a process given
//!   [`ConnectionLimits::default`] shares one, [`ConnectionPool::process`], whose capacity is
//!   derived from the process's descriptor limit ([`descriptor_limit`], which first raises the soft
//!   `RLIMIT_NOFILE` to the hard one) minus headroom for everything else the process holds open;
//!   see [`connections_for_descriptors`].
//! - Near the limit (every slot but the probe reserve taken) each new connection sheds an idle one:
//!   first those that completed no request (still shaking hands, or handshake done and nothing
//!   sent), oldest first, then idle keep-alive connections, longest idle first. A connection with a
//!   request in flight is never shed. Shedding is logged at info, once per [`LOG_INTERVAL`] with a
//!   count.
//! - With nothing idle to shed, the last [`ConnectionPool::probe_reserve`] slots take connections
//!   that may only ask for `/healthz`, `/livez` or `/readyz`; anything else there is answered `429`
//!   with `Retry-After`, so health probes get through when every other slot is busy. With every
//!   slot taken by busy connections the server stops accepting (peers wait in the kernel's backlog)
//!   until one closes or goes idle.
//! - An accept error backs off, from 5 ms doubling to 1 s, instead of spinning; when it is the
//!   lack of descriptors (`EMFILE`, `ENFILE`: the rest of the process used more than its headroom)
//!   an idle connection is shed first. Repeated warnings are logged at most once per
//!   [`LOG_INTERVAL`] with a count.

use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

/// How often the same warning may be logged.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// How long open connections (watches included) get to finish after shutdown is asked for.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Descriptors kept for the rest of the process whatever the limit. An idle `capstan serve`
/// holds 24 (counted in `/proc/PID/fd`: the store's database and WAL files on each of its five
/// SQLite connections and its shared memory, five sockets — the API and provisioning listeners
/// among them —, the runtime's epoll and wake-up descriptors, stdio); each simulated workload
/// cluster adds 6 (its store's files and its listener), and the controllers open connections to
/// BMCs and workload APIs as they work.
pub const RESERVED_DESCRIPTORS: u64 = 128;

/// At most this many connections whatever the descriptor limit: each costs memory (TLS and HTTP
/// buffers, a task), and no management plane needs more.
pub const MAX_CONNECTIONS: usize = 16_384;

/// At least this many connections, however low the descriptor limit.
pub const MIN_CONNECTIONS: usize = 16;

/// Connections that may be signalled to close and not have closed yet before the server waits
/// for them: each holds its descriptor for the few milliseconds it takes to close.
const MAX_PENDING_SHEDS: usize = 8;

/// Why the descriptor limit could not be read or raised.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("reading the descriptor limit (RLIMIT_NOFILE)")]
    ReadLimit(#[source] nix::Error),
    #[error("raising the soft descriptor limit (RLIMIT_NOFILE) from {from} to the hard limit {to}")]
    RaiseLimit {
        from: u64,
        to: u64,
        #[source]
        source: nix::Error,
    },
}

/// The process's descriptor limit (`RLIMIT_NOFILE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorLimit {
    /// The soft limit in force: what `open`, `accept` and `socket` are held to.
    pub soft: u64,
    /// The hard limit: how far an unprivileged process may raise the soft one.
    pub hard: u64,
    /// The soft limit before it was raised, when it was.
    pub raised_from: Option<u64>,
}

/// Raises the soft descriptor limit to the hard limit, as most servers do at start (a soft limit
/// of 1024 is a default for programs using `select`, which capstan does not), and answers the
/// limit in force.
pub fn raise_descriptor_limit() -> Result<DescriptorLimit, ConnError> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(ConnError::ReadLimit)?;
    if soft >= hard {
        return Ok(DescriptorLimit {
            soft,
            hard,
            raised_from: None,
        });
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|source| ConnError::RaiseLimit {
        from: soft,
        to: hard,
        source,
    })?;
    Ok(DescriptorLimit {
        soft: hard,
        hard,
        raised_from: Some(soft),
    })
}

/// The process's descriptor limit, raised once ([`raise_descriptor_limit`]) on first use; when it
/// cannot be raised (or read) the limit in force (or 1024) is used, and that is logged.
pub fn descriptor_limit() -> DescriptorLimit {
    static LIMIT: OnceLock<DescriptorLimit> = OnceLock::new();
    *LIMIT.get_or_init(|| match raise_descriptor_limit() {
        Ok(limit) => limit,
        Err(ConnError::RaiseLimit { from, to, source }) => {
            tracing::info!(soft = from, hard = to, error = %source, "could not raise the soft descriptor limit; keeping it");
            DescriptorLimit {
                soft: from,
                hard: to,
                raised_from: None,
            }
        }
        Err(err) => {
            tracing::warn!(error = %error_chain(&err), "assuming a descriptor limit of 1024");
            DescriptorLimit {
                soft: 1024,
                hard: 1024,
                raised_from: None,
            }
        }
    })
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// How many connections a process with `soft` descriptors may hold open:
/// `soft − max(RESERVED_DESCRIPTORS, soft / 4)`, within [`MIN_CONNECTIONS`]..=[`MAX_CONNECTIONS`].
/// A quarter (at least 128) is left for the store's files, the listeners, outgoing connections
/// and whatever controllers open; 256 descriptors allow 128 connections, 1024 allow 768.
pub fn connections_for_descriptors(soft: u64) -> usize {
    let reserved = RESERVED_DESCRIPTORS.max(soft / 4);
    let connections = usize::try_from(soft.saturating_sub(reserved)).unwrap_or(usize::MAX);
    connections.clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)
}

/// How many of `capacity` slots are kept for health probes: one in sixteen, 2 to 8.
pub fn probe_reserve_for(capacity: usize) -> usize {
    (capacity / 16).clamp(2, 8).min(capacity.saturating_sub(1))
}

/// The bounds every connection is held to.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    pub handshake_timeout: Duration,
    /// How long a request head may take, and how long a connection may wait after its handshake
    /// before its first request.
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// The connections these are counted with (and shed from).
    pub pool: Arc<ConnectionPool>,
}

impl ConnectionLimits {
    /// The default timeouts with a pool of its own of `capacity` connections, `probe_reserve` of
    /// them for health probes.
    pub fn with_capacity(capacity: usize, probe_reserve: usize) -> Self {
        Self {
            pool: ConnectionPool::new(capacity, probe_reserve),
            ..Self::default()
        }
    }

    /// How many connections the pool holds at most.
    pub fn max_connections(&self) -> usize {
        self.pool.capacity()
    }
}

impl Default for ConnectionLimits {
    /// The default timeouts, counted in the process's pool ([`ConnectionPool::process`]).
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            pool: ConnectionPool::process(),
        }
    }
}

/// A message logged at most once per [`LOG_INTERVAL`], with the count of those held back.
pub struct RateLimitedLog {
    what: &'static str,
    info: bool,
    state: Mutex<(Option<Instant>, u64)>,
}

impl RateLimitedLog {
    /// Logged at warn.
    pub const fn warning(what: &'static str) -> Self {
        Self {
            what,
            info: false,
            state: Mutex::new((None, 0)),
        }
    }

    /// Logged at info.
    pub const fn info(what: &'static str) -> Self {
        Self {
            what,
            info: true,
            state: Mutex::new((None, 0)),
        }
    }

    /// Logs `detail` unless this message was logged less than [`LOG_INTERVAL`] ago; returns
    /// whether it was logged.
    pub fn log(&self, detail: &dyn std::fmt::Display) -> bool {
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        let now = Instant::now();
        if state
            .0
            .is_some_and(|last| now.duration_since(last) < LOG_INTERVAL)
        {
            state.1 += 1;
            return false;
        }
        let suppressed = std::mem::take(&mut state.1);
        state.0 = Some(now);
        if self.info {
            tracing::info!(detail = %detail, suppressed, "{}", self.what);
        } else {
            tracing::warn!(detail = %detail, suppressed, "{}", self.what);
        }
        true
    }
}

/// Where a connection is in its life:
///
/// ```text
/// Handshaking ──handshake done──▶ AwaitingRequest ──request──▶ Busy ◀──request── KeepAlive
///   (TLS only; plain HTTP starts      (closed after              │                  ▲
///    in AwaitingRequest)               header_read_timeout)      └─response done────┘
/// ```
///
/// Only the idle phases (all but `Busy`) may be shed; any phase ends when the peer closes, a
/// timeout fires, the connection is shed, or the server shuts down. The phase is derived from the
/// connection's counters each time it is asked for, so concurrent HTTP/2 streams cannot leave it
/// stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Handshaking,
    AwaitingRequest,
    Busy,
    KeepAlive,
}

/// Per-connection activity: the last time bytes moved, the requests seen and those whose answers
/// are not done.
struct Activity {
    started: Instant,
    last_millis: AtomicU64,
    /// When the connection became ready for requests (the handshake's end), since `started`.
    ready_millis: AtomicU64,
    handshaking: AtomicBool,
    requests: AtomicU64,
    in_flight: AtomicUsize,
    /// The pool's: told when this connection goes idle, so a full accept loop looks again.
    pool_changed: Arc<Notify>,
}

impl Activity {
    fn new(tls: bool, pool_changed: Arc<Notify>) -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            last_millis: AtomicU64::new(0),
            ready_millis: AtomicU64::new(0),
            handshaking: AtomicBool::new(tls),
            requests: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            pool_changed,
        })
    }

    fn millis_now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_millis.store(self.millis_now(), Ordering::Relaxed);
    }

    fn handshake_done(&self) {
        self.ready_millis
            .store(self.millis_now(), Ordering::Relaxed);
        self.handshaking.store(false, Ordering::Release);
    }

    fn phase(&self) -> Phase {
        if self.handshaking.load(Ordering::Acquire) {
            Phase::Handshaking
        } else if self.in_flight.load(Ordering::Acquire) > 0 {
            Phase::Busy
        } else if self.requests.load(Ordering::Acquire) == 0 {
            Phase::AwaitingRequest
        } else {
            Phase::KeepAlive
        }
    }

    fn idle_for(&self) -> Duration {
        Duration::from_millis(
            self.millis_now()
                .saturating_sub(self.last_millis.load(Ordering::Relaxed)),
        )
    }

    /// Resolves when the connection has been idle (nothing in flight, no bytes) for `timeout`.
    async fn idle(&self, timeout: Duration) {
        loop {
            let idle = self.idle_for();
            if self.in_flight.load(Ordering::Acquire) == 0 && idle >= timeout {
                return;
            }
            let wait = timeout.saturating_sub(idle).max(timeout / 8);
            tokio::time::sleep(wait.max(Duration::from_millis(50))).await;
        }
    }

    /// Resolves when `timeout` has passed since the handshake without a request; never once one
    /// came.
    async fn no_first_request(&self, timeout: Duration) {
        loop {
            if self.requests.load(Ordering::Acquire) > 0 {
                return std::future::pending().await;
            }
            let waited = Duration::from_millis(
                self.millis_now()
                    .saturating_sub(self.ready_millis.load(Ordering::Relaxed)),
            );
            if waited >= timeout {
                return;
            }
            tokio::time::sleep(timeout - waited).await;
        }
    }
}

/// Counts a request as in flight until its response body is dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: Arc<Activity>) -> Self {
        activity.requests.fetch_add(1, Ordering::AcqRel);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.pool_changed.notify_waiters();
        }
    }
}

/// One open connection, as its pool sees it.
struct Entry {
    activity: Arc<Activity>,
    /// Told to close: the connection is shed.
    shed: Arc<Notify>,
    /// Told already; it closes within milliseconds.
    shedding: bool,
}

#[derive(Default)]
struct PoolState {
    next_id: u64,
    /// By id, which is the accept order.
    open: BTreeMap<u64, Entry>,
    shedding: usize,
}

impl PoolState {
    /// The connection to shed first: one that completed no request (oldest first), else the
    /// longest idle keep-alive one; never one with a request in flight or already told.
    fn victim(&self) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, e)| !e.shedding)
            .filter_map(|(id, e)| {
                let rank = match e.activity.phase() {
                    Phase::Handshaking | Phase::AwaitingRequest => (0, u128::from(*id)),
                    Phase::KeepAlive => (1, u128::MAX - e.activity.idle_for().as_millis()),
                    Phase::Busy => return None,
                };
                Some((rank, *id))
            })
            .min()
            .map(|(_, id)| id)
    }

    fn shed(&mut self, id: u64) -> bool {
        match self.open.get_mut(&id) {
            Some(entry) if !entry.shedding => {
                entry.shedding = true;
                entry.shed.notify_one();
                self.shedding += 1;
                true
            }
            _ => false,
        }
    }
}

/// Whether a listener may accept now.
#[derive(Debug, PartialEq, Eq)]
enum Room {
    /// A slot is free, or an idle connection can give its slot up.
    Yes,
    /// Connections told to close have not closed yet: wait for them (milliseconds).
    Closing,
    /// Every slot holds a busy connection: wait for one to end or go idle.
    Full,
}

/// The connections that share one descriptor budget: at most [`ConnectionPool::capacity`] open,
/// the last [`ConnectionPool::probe_reserve`] slots for health probes only.
pub struct ConnectionPool {
    capacity: usize,
    probe_reserve: usize,
    state: Mutex<PoolState>,
    /// A connection closed or went idle.
    changed: Arc<Notify>,
}

impl std::fmt::Debug for ConnectionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionPool")
            .field("capacity", &self.capacity)
            .field("probe_reserve", &self.probe_reserve)
            .field("open", &self.open())
            .finish()
    }
}

static SHEDDING: RateLimitedLog =
    RateLimitedLog::info("shedding idle connections: the connection limit is near");

impl ConnectionPool {
    /// A pool of `capacity` connections (at least one), `probe_reserve` of them for health probes.
    pub fn new(capacity: usize, probe_reserve: usize) -> Arc<Self> {
        let capacity = capacity.max(1);
        Arc::new(Self {
            capacity,
            probe_reserve: probe_reserve.min(capacity - 1),
            state: Mutex::new(PoolState::default()),
            changed: Arc::new(Notify::new()),
        })
    }

    /// The pool every listener given [`ConnectionLimits::default`] shares: its capacity is
    /// [`connections_for_descriptors`] of the process's [`descriptor_limit`], so the connections
    /// of all listeners together leave the headroom free.
    pub fn process() -> Arc<Self> {
        static POOL: OnceLock<Arc<ConnectionPool>> = OnceLock::new();
        POOL.get_or_init(|| {
            let limit = descriptor_limit();
            let capacity = connections_for_descriptors(limit.soft);
            let reserve = probe_reserve_for(capacity);
            tracing::info!(
                descriptors = limit.soft,
                hard = limit.hard,
                raised_from = limit.raised_from,
                connections = capacity,
                reserved_for_probes = reserve,
                "connection limit derived from the descriptor limit"
            );
            Self::new(capacity, reserve)
        })
        .clone()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn probe_reserve(&self) -> usize {
        self.probe_reserve
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn room(&self) -> Room {
        let state = self.lock();
        let open = state.open.len();
        if open < self.capacity {
            return Room::Yes;
        }
        if state.shedding >= MAX_PENDING_SHEDS {
            Room::Closing
        } else if state.victim().is_some() {
            Room::Yes
        } else {
            Room::Full
        }
    }

    /// Counts a new connection in; near the limit an idle one is shed for it. Answers its slot and
    /// whether it may serve health probes only (nothing idle could make room).
    fn admit(self: &Arc<Self>, activity: Arc<Activity>) -> (Slot, Arc<Notify>, bool) {
        let mut state = self.lock();
        let normal = self.capacity - self.probe_reserve;
        let mut probes_only = false;
        if state.open.len().saturating_sub(state.shedding) >= normal {
            match state.victim() {
                Some(victim) => {
                    state.shed(victim);
                    let detail = format!(
                        "{} of {} connections open, {} kept for health probes",
                        state.open.len(),
                        self.capacity,
                        self.probe_reserve
                    );
                    SHEDDING.log(&detail);
                }
                None => probes_only = true,
            }
        }
        let id = state.next_id;
        state.next_id += 1;
        let shed = Arc::new(Notify::new());
        state.open.insert(
            id,
            Entry {
                activity,
                shed: shed.clone(),
                shedding: false,
            },
        );
        (
            Slot {
                pool: self.clone(),
                id,
            },
            shed,
            probes_only,
        )
    }

    /// Sheds the connection that should go first, if any; whether one was.
    fn shed_one(&self) -> bool {
        let mut state = self.lock();
        match state.victim() {
            Some(victim) => state.shed(victim),
            None => false,
        }
    }
}

/// A connection's place in its pool, given back when the connection task ends.
struct Slot {
    pool: Arc<ConnectionPool>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.pool.lock();
        if let Some(entry) = state.open.remove(&self.id)
            && entry.shedding
        {
            state.shedding = state.shedding.saturating_sub(1);
        }
        drop(state);
        self.pool.changed.notify_waiters();
    }
}

/// An IO stream that records when bytes move.
struct Tracked<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// What a connection task needs to wrap a request before the router sees it (the API server marks
/// requests of connections that showed a client certificate).
pub type RequestHook = Arc<dyn Fn(&mut hyper::Request<axum::body::Body>) + Send + Sync>;

/// Whether `path` is a health probe, which the probe reserve serves.
pub fn is_health_probe(path: &str) -> bool {
    ["/healthz", "/livez", "/readyz"].iter().any(|probe| {
        path.strip_prefix(probe)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// The answer to a request other than a health probe on a connection of the probe reserve: a
/// Kubernetes `Status`, as kube-apiserver answers when it has too many requests in flight.
fn too_many_connections(close: bool) -> hyper::Response<axum::body::Body> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too many connections, please try again later (this connection is kept for health probes)",
        "reason": "TooManyRequests", "details": {"retryAfterSeconds": 1}, "code": 429,
    });
    let mut response = hyper::Response::new(axum::body::Body::from(body.to_string()));
    *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    if close {
        headers.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// Serves `router` over plain HTTP on `listener` with the hygiene above until `shutdown`.
pub async fn serve_plain(
    router: Router,
    listener: TcpListener,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    serve(router, listener, None, limits, shutdown).await;
}

static ACCEPT_FAILED: RateLimitedLog =
    RateLimitedLog::warning("accepting a connection failed; backing off");
static AT_CAPACITY: RateLimitedLog =
    RateLimitedLog::warning("every connection slot holds a busy connection; new connections wait");

/// Whether an accept failed for lack of descriptors.
fn out_of_descriptors(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE
    )
}

/// The accept loop shared by the TLS and plain listeners.
pub(crate) async fn serve(
    router: Router,
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let pool = limits.pool.clone();
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff = Duration::ZERO;
    tokio::pin!(shutdown);
    'accepting: loop {
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
        // Room first: a free slot, or an idle connection that can give its slot up.
        loop {
            let changed = pool.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match pool.room() {
                Room::Yes => break,
                Room::Closing => {}
                Room::Full => {
                    AT_CAPACITY.log(&format!("{} connections", pool.capacity()));
                }
            }
            tokio::select! {
                () = &mut shutdown => break 'accepting,
                () = changed => {}
            }
        }
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(pair) => {
                backoff = Duration::ZERO;
                pair
            }
            Err(err) => {
                // Out of descriptors: the rest of the process holds more than its headroom. An
                // idle connection gives its descriptor back; otherwise wait for one to close.
                if out_of_descriptors(&err) && pool.shed_one() {
                    SHEDDING.log(&format!("accepting failed: {err}"));
                }
                backoff = (backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
                ACCEPT_FAILED.log(&err);
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => continue,
                }
            }
        };
        // Watch events are small writes: without this, Nagle's algorithm and delayed ACKs hold
        // them back for tens of milliseconds.
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %err, "could not disable Nagle's algorithm");
        }
        let activity = Activity::new(tls.is_some(), pool.changed.clone());
        let (slot, shed, probes_only) = pool.admit(activity.clone());
        let router = router.clone();
        let tls = tls.clone();
        let stop = stop_rx.clone();
        let limits = limits.clone();
        connections.spawn(async move {
            let _slot = slot;
            let tcp = Tracked {
                inner: tcp,
                activity: activity.clone(),
            };
            let conn = Connection {
                router,
                activity,
                limits,
                stop,
                shed,
                peer,
                probes_only,
            };
            match tls {
                Some(acceptor) => {
                    let handshake = tokio::select! {
                        handshake = tokio::time::timeout(conn.limits.handshake_timeout, acceptor.accept(tcp)) => handshake,
                        () = conn.shed.notified() => {
                            tracing::debug!(%peer, "shed while shaking hands");
                            return;
                        }
                    };
                    let stream = match handshake {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(err)) => {
                            tracing::debug!(%peer, error = %err, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    conn.activity.handshake_done();
                    // The handshake verified the chain against the CA; the leaf names the user.
                    let identity = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .and_then(|leaf| crate::authn::UserInfo::from_certificate(leaf.as_ref()));
                    let hook: Option<RequestHook> = identity.map(|user| {
                        Arc::new(move |request: &mut hyper::Request<axum::body::Body>| {
                            request.extensions_mut().insert(user.clone());
                        }) as RequestHook
                    });
                    conn.serve(stream, hook).await;
                }
                None => conn.serve(tcp, None).await,
            }
        });
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT + Duration::from_secs(1), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// One accepted connection and what ends it.
struct Connection {
    router: Router,
    activity: Arc<Activity>,
    limits: ConnectionLimits,
    stop: watch::Receiver<bool>,
    /// Told when the pool sheds this connection.
    shed: Arc<Notify>,
    peer: std::net::SocketAddr,
    /// Admitted into the probe reserve: health probes only.
    probes_only: bool,
}

impl Connection {
    /// Serves the connection until it ends, goes idle, is shed, or shutdown drains it.
    async fn serve<S>(self, stream: S, hook: Option<RequestHook>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Self {
            router,
            activity,
            limits,
            mut stop,
            shed,
            peer,
            probes_only,
        } = self;
        let tracked = activity.clone();
        let service = tower::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let in_flight = InFlight::new(tracked.clone());
            let mut request = request.map(axum::body::Body::new);
            if let Some(hook) = &hook {
                hook(&mut request);
            }
            let router = router.clone();
            let refused = probes_only && !is_health_probe(request.uri().path());
            let close = request.version() < http::Version::HTTP_2;
            async move {
                if refused {
                    drop(in_flight);
                    return Ok(too_many_connections(close));
                }
                let response = router.oneshot(request).await?;
                // The request stays in flight until its body (a watch, a download) is done.
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    axum::body::Body::new(body.map_frame(move |frame| {
                        let _counted = &in_flight;
                        frame
                    }))
                }))
            }
        });
        let mut builder = Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout);
        builder.http2().timer(TokioTimer::new());
        let connection = builder.serve_connection_with_upgrades(
            TokioIo::new(stream),
            TowerToHyperService::new(service),
        );
        tokio::pin!(connection);
        let stopping = async move {
            // Only the wake-up matters; the guard must not live across an await.
            let _ = stop.wait_for(|stopping| *stopping).await.map(|_| ());
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(%peer, error = %err, "connection ended with an error");
                }
            }
            () = activity.idle(limits.idle_timeout) => {
                tracing::debug!(%peer, "closing an idle connection");
            }
            () = activity.no_first_request(limits.header_read_timeout) => {
                tracing::debug!(%peer, "closing a connection that sent no request");
            }
            () = shed.notified() => {
                // Idle when chosen; a request that started since is let finish.
                tracing::debug!(%peer, "shedding an idle connection");
                connection.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
            }
            () = stopping => {
                connection.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_message_is_logged_once_per_interval() {
        let message = RateLimitedLog::warning("test");
        assert!(message.log(&"first"));
        for _ in 0..10_000 {
            assert!(!message.log(&"again"));
        }
        assert_eq!(message.state.lock().unwrap().1, 10_000);
    }

    #[test]
    fn the_connection_limit_leaves_a_quarter_of_the_descriptors_and_at_least_128() {
        let cases = [
            (64, MIN_CONNECTIONS),
            (256, 128),
            (512, 384),
            (1024, 768),
            (20_000, 15_000),
            (1_048_576, MAX_CONNECTIONS),
        ];
        for (soft, want) in cases {
            assert_eq!(
                connections_for_descriptors(soft),
                want,
                "{soft} descriptors"
            );
        }
        assert_eq!(probe_reserve_for(128), 8);
        assert_eq!(probe_reserve_for(16), 2);
        assert_eq!(probe_reserve_for(1), 0);
    }

    #[test]
    fn health_probes_are_their_paths_and_below() {
        for path in [
            "/healthz",
            "/livez",
            "/readyz",
            "/readyz/ping",
            "/livez/etcd",
        ] {
            assert!(is_health_probe(path), "{path}");
        }
        for path in ["/", "/healthzz", "/api/v1/pods", "/version", "/metrics"] {
            assert!(!is_health_probe(path), "{path}");
        }
    }

    fn activity(pool: &ConnectionPool, tls: bool) -> Arc<Activity> {
        Activity::new(tls, pool.changed.clone())
    }

    #[test]
    fn near_the_limit_idle_connections_are_shed_never_busy_ones() {
        let pool = ConnectionPool::new(4, 1);
        // Handshake done, a request in flight (a watch).
        let busy = activity(&pool, true);
        busy.handshake_done();
        let watch = InFlight::new(busy.clone());
        let (_busy_slot, _, probes_only) = pool.admit(busy);
        assert!(!probes_only);
        // Served a request, idle since (keep-alive).
        let kept = activity(&pool, false);
        drop(InFlight::new(kept.clone()));
        let (_kept_slot, kept_shed, _) = pool.admit(kept);
        // Handshake done, nothing sent.
        let silent = activity(&pool, true);
        silent.handshake_done();
        let (_silent_slot, silent_shed, _) = pool.admit(silent);
        assert_eq!(pool.open(), 3);
        let shed = |notify: &Arc<Notify>| {
            pool.lock()
                .open
                .values()
                .any(|e| e.shedding && Arc::ptr_eq(&e.shed, notify))
        };
        // The normal slots (3 of 4) are full: a new connection sheds the one that sent nothing
        // before the keep-alive one.
        let fourth = activity(&pool, false);
        let (_fourth_slot, _, probes_only) = pool.admit(fourth.clone());
        assert!(!probes_only);
        assert!(shed(&silent_shed));
        assert!(!shed(&kept_shed));
        // With the fourth busy, the next one sheds the keep-alive connection; the watch stays.
        let request = InFlight::new(fourth);
        let (_fifth_slot, _, probes_only) = pool.admit(activity(&pool, false));
        assert!(!probes_only);
        assert!(shed(&kept_shed));
        assert_eq!(pool.lock().shedding, 2);
        drop((watch, request));
    }

    #[test]
    fn with_only_busy_connections_the_reserve_takes_probes_only_and_then_the_pool_is_full() {
        let pool = ConnectionPool::new(3, 1);
        let mut slots = Vec::new();
        let mut requests = Vec::new();
        for _ in 0..2 {
            let busy = activity(&pool, false);
            requests.push(InFlight::new(busy.clone()));
            let (slot, _, probes_only) = pool.admit(busy);
            assert!(!probes_only);
            slots.push(slot);
        }
        assert_eq!(pool.room(), Room::Yes);
        let probe = activity(&pool, false);
        let (probe_slot, _, probes_only) = pool.admit(probe.clone());
        assert!(probes_only, "nothing idle to shed: the probe reserve");
        let answering = InFlight::new(probe);
        assert_eq!(pool.room(), Room::Full);
        // The probe is answered and its connection goes idle: it can give its slot up.
        drop(answering);
        assert_eq!(pool.room(), Room::Yes);
        drop(probe_slot);
        assert_eq!(pool.open(), 2);
        drop((slots, requests));
    }
}
