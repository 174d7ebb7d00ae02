//! Connection hygiene for every listener capstan opens (the HTTPS API, the plain-HTTP provisioning
//! server): what keeps unauthenticated peers from exhausting the server.
//!
//! - A TLS handshake must finish within [`ConnectionLimits::handshake_timeout`].
//! - A request head must arrive within [`ConnectionLimits::header_read_timeout`] (HTTP/1.1).
//! - A connection with no request in flight and no bytes either way for
//!   [`ConnectionLimits::idle_timeout`] is closed (an idle TLS session, a half-sent header, a
//!   keep-alive connection nobody uses). A watch or a download in flight is not idle.
//! - At most [`ConnectionLimits::max_connections`] connections are open at once; beyond that the
//!   server stops accepting (peers wait in the kernel's backlog) until one closes, so descriptors
//!   are never exhausted by connections alone.
//! - An accept error (`EMFILE` and the like) backs off, from 5 ms doubling to 1 s, instead of
//!   spinning; repeated warnings are logged at most once per [`LOG_INTERVAL`] with a count.

use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// How often the same warning may be logged.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// How long open connections (watches included) get to finish after shutdown is asked for.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The bounds every connection is held to.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub handshake_timeout: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            // Well below the usual soft limit of 1024 descriptors, which the store's files and
            // outgoing connections share.
            max_connections: 512,
        }
    }
}

/// A warning logged at most once per [`LOG_INTERVAL`], with the count of those held back.
pub struct RateLimitedWarning {
    what: &'static str,
    state: Mutex<(Option<Instant>, u64)>,
}

impl RateLimitedWarning {
    pub const fn new(what: &'static str) -> Self {
        Self {
            what,
            state: Mutex::new((None, 0)),
        }
    }

    /// Logs `detail` unless this warning was logged less than [`LOG_INTERVAL`] ago; returns whether
    /// it was logged.
    pub fn warn(&self, detail: &dyn std::fmt::Display) -> bool {
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
        tracing::warn!(detail = %detail, suppressed, "{}", self.what);
        true
    }
}

/// Per-connection activity: the last time bytes moved, and the requests whose answers are not done.
#[derive(Default)]
struct Activity {
    started: Option<Instant>,
    last_millis: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            started: Some(Instant::now()),
            ..Self::default()
        })
    }

    fn touch(&self) {
        let elapsed = self.started.map(|s| s.elapsed()).unwrap_or_default();
        self.last_millis.store(
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn idle_for(&self) -> Duration {
        let elapsed = self.started.map(|s| s.elapsed()).unwrap_or_default();
        elapsed.saturating_sub(Duration::from_millis(
            self.last_millis.load(Ordering::Relaxed),
        ))
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
}

/// Counts a request as in flight until its response body is dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.touch();
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

/// Serves `router` over plain HTTP on `listener` with the hygiene above until `shutdown`.
pub async fn serve_plain(
    router: Router,
    listener: TcpListener,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    serve(router, listener, None, limits, shutdown).await;
}

static ACCEPT_FAILED: RateLimitedWarning =
    RateLimitedWarning::new("accepting a connection failed; backing off");
static AT_CAPACITY: RateLimitedWarning =
    RateLimitedWarning::new("the connection limit is reached; new connections wait");

/// The accept loop shared by the TLS and plain listeners.
pub(crate) async fn serve(
    router: Router,
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff = Duration::ZERO;
    tokio::pin!(shutdown);
    loop {
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
        if permits.available_permits() == 0 {
            AT_CAPACITY.warn(&limits.max_connections);
        }
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
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
                // Out of descriptors and the like: wait for connections to close instead of spinning.
                backoff = (backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
                ACCEPT_FAILED.warn(&err);
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
        let router = router.clone();
        let tls = tls.clone();
        let stop = stop_rx.clone();
        connections.spawn(async move {
            let _permit = permit;
            let activity = Activity::new();
            let tcp = Tracked {
                inner: tcp,
                activity: activity.clone(),
            };
            match tls {
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await;
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
                    connection(router, stream, activity, hook, limits, stop, peer).await;
                }
                None => connection(router, tcp, activity, None, limits, stop, peer).await,
            }
        });
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT + Duration::from_secs(1), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// Serves one connection until it ends, goes idle, or shutdown drains it.
async fn connection<S>(
    router: Router,
    stream: S,
    activity: Arc<Activity>,
    hook: Option<RequestHook>,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
    peer: std::net::SocketAddr,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let tracked = activity.clone();
    let service = tower::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let in_flight = InFlight::new(tracked.clone());
        let mut request = request.map(axum::body::Body::new);
        if let Some(hook) = &hook {
            hook(&mut request);
        }
        let router = router.clone();
        async move {
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
    let connection = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service));
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
        () = stopping => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_warning_is_logged_once_per_interval() {
        let warning = RateLimitedWarning::new("test");
        assert!(warning.warn(&"first"));
        for _ in 0..10_000 {
            assert!(!warning.warn(&"again"));
        }
        assert_eq!(warning.state.lock().unwrap().1, 10_000);
    }
}
