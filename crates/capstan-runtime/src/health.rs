//! The standalone controllers' own HTTP endpoints: `/healthz` (the process is up), `/readyz` (the
//! controllers are running, as leader or as standby) and `/metrics`.
//!
//! Embedded controllers need none of this: the API server already serves health and metrics.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the runtime reports to `/readyz`. Cloning shares the state.
#[derive(Clone, Debug, Default)]
pub struct Health {
    inner: Arc<HealthState>,
}

#[derive(Debug, Default)]
struct HealthState {
    running: AtomicBool,
    leader: AtomicBool,
}

impl Health {
    /// Marks the runtime as started (`true`) or shut down (`false`).
    pub fn set_running(&self, running: bool) {
        self.inner.running.store(running, Ordering::SeqCst);
    }

    /// Marks this instance as holding (`true`) or not holding the leader lease.
    pub fn set_leader(&self, leader: bool) {
        self.inner.leader.store(leader, Ordering::SeqCst);
    }

    /// Whether the runtime is running.
    pub fn is_running(&self) -> bool {
        self.inner.running.load(Ordering::SeqCst)
    }

    /// Whether this instance runs the controllers: it holds the lease, or runs without election.
    pub fn is_leader(&self) -> bool {
        self.inner.leader.load(Ordering::SeqCst)
    }
}

/// `/healthz`, `/readyz` and `/metrics` (the text exposition of `registry`).
pub fn health_router(health: Health, registry: Registry) -> Router {
    let registry = Arc::new(registry);
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let health = health.clone();
                async move { ready(&health) }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        crate::metrics::encode(&registry),
                    )
                        .into_response()
                }
            }),
        )
}

fn ready(health: &Health) -> Response {
    match (health.is_running(), health.is_leader()) {
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "not running").into_response(),
        // A standby instance is ready: it is doing its job, which is to wait for the lease.
        (true, false) => (StatusCode::OK, "ok (standby)").into_response(),
        (true, true) => (StatusCode::OK, "ok (leader)").into_response(),
    }
}
