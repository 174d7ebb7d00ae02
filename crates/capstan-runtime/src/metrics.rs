//! Prometheus metrics of the controllers: reconciles by controller and result, reconcile duration,
//! reconcile errors, and reconciles in flight.
//!
//! The metrics are registered into whatever registry serves them: the embedded API server's (through
//! `capstan_apiserver::Metrics::with_registry`) or a registry of their own from [`metrics_registry`]
//! for standalone controllers. Names are relative to the registry's prefix:
//! `<prefix>_controller_reconciles_total` and so on.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Prefix of the registry [`metrics_registry`] builds.
pub const STANDALONE_PREFIX: &str = "capstan";

/// How one reconcile ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// The reconciler (or cleanup) returned an action.
    Success,
    /// The reconciler failed; the object is requeued with backoff.
    Error,
    /// The object or its Cluster is paused; nothing was done.
    Paused,
}

impl ReconcileResult {
    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Paused => "paused",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

/// The controllers' metrics. Cloning shares the underlying series.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    duration: Family<ControllerLabels, Histogram>,
    in_flight: Family<ControllerLabels, Gauge>,
    /// Total reconciles recorded, for callers that wait for reconciles to happen.
    recorded: Arc<watch::Sender<u64>>,
}

fn duration_histogram() -> Histogram {
    // 1 ms to ~33 s: an in-process reconcile takes milliseconds, one against a remote API seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            in_flight: Family::default(),
            recorded: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl ControllerMetrics {
    /// Adds the metrics to `registry` (under a `controller` sub-prefix).
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("controller");
        sub.register(
            "reconciles",
            "Reconciles by controller and result (success, error, paused)",
            self.reconciles.clone(),
        );
        sub.register(
            "reconcile_errors",
            "Failed reconciles by controller",
            self.errors.clone(),
        );
        sub.register(
            "reconcile_duration_seconds",
            "Reconcile latency by controller",
            self.duration.clone(),
        );
        sub.register(
            "reconciles_in_flight",
            "Reconciles running now, by controller",
            self.in_flight.clone(),
        );
    }

    /// Records one finished reconcile.
    pub fn record(&self, controller: &str, result: ReconcileResult, took: Duration) {
        self.reconciles
            .get_or_create(&ResultLabels {
                controller: controller.to_owned(),
                result: result.label().to_owned(),
            })
            .inc();
        if result == ReconcileResult::Error {
            self.errors
                .get_or_create(&ControllerLabels {
                    controller: controller.to_owned(),
                })
                .inc();
        }
        self.duration
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .observe(took.as_secs_f64());
        self.recorded.send_modify(|n| *n += 1);
    }

    /// A receiver that changes whenever a reconcile is recorded, to wait for reconciles (with
    /// `wait_for`) instead of polling.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.recorded.subscribe()
    }

    /// Counts a reconcile as running until the returned guard is dropped.
    pub fn in_flight(&self, controller: &str) -> InFlight {
        let gauge = self
            .in_flight
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .clone();
        gauge.inc();
        InFlight { gauge }
    }

    /// How many reconciles of `controller` ended with `result` so far.
    pub fn reconciles(&self, controller: &str, result: ReconcileResult) -> u64 {
        self.reconciles
            .get_or_create(&ResultLabels {
                controller: controller.to_owned(),
                result: result.label().to_owned(),
            })
            .get()
    }
}

/// Decrements the in-flight gauge when dropped, so a cancelled reconcile is not counted forever.
#[derive(Debug)]
pub struct InFlight {
    gauge: Gauge,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// A registry (prefix `capstan`) holding `metrics`, for standalone controllers' `/metrics`.
pub fn metrics_registry(metrics: &ControllerMetrics) -> Registry {
    let mut registry = Registry::with_prefix(STANDALONE_PREFIX);
    metrics.register(&mut registry);
    registry
}

/// The text exposition of `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_by_controller_and_result() {
        let metrics = ControllerMetrics::default();
        let registry = metrics_registry(&metrics);
        {
            let _running = metrics.in_flight("ipam");
            metrics.record("ipam", ReconcileResult::Success, Duration::from_millis(3));
            metrics.record("ipam", ReconcileResult::Error, Duration::from_millis(1));
            assert!(
                encode(&registry)
                    .contains("capstan_controller_reconciles_in_flight{controller=\"ipam\"} 1")
            );
        }
        let text = encode(&registry);
        assert!(text.contains(
            "capstan_controller_reconciles_total{controller=\"ipam\",result=\"success\"} 1"
        ));
        assert!(text.contains("capstan_controller_reconcile_errors_total{controller=\"ipam\"} 1"));
        assert!(text.contains(
            "capstan_controller_reconcile_duration_seconds_count{controller=\"ipam\"} 2"
        ));
        assert!(text.contains("capstan_controller_reconciles_in_flight{controller=\"ipam\"} 0"));
        assert_eq!(metrics.reconciles("ipam", ReconcileResult::Success), 1);
    }
}
