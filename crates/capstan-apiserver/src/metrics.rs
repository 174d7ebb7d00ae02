//! Prometheus metrics of the API server, exposed on `/metrics`: requests by verb, resource and code,
//! their latency, open watches, and the store's resourceVersion.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Mutex;

/// Labels of a request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub resource: String,
    pub code: u16,
}

/// Labels of a latency observation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: String,
}

/// The API server's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<VerbLabels, Histogram>,
    pub watches: Gauge,
    pub resource_version: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("capstan_apiserver");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<VerbLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let watches = Gauge::default();
        let resource_version = Gauge::default();
        registry.register(
            "requests",
            "API requests by verb, resource and response code",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "API request latency (watches excluded)",
            latency.clone(),
        );
        registry.register("watches", "Open watches", watches.clone());
        registry.register(
            "store_resource_version",
            "The store's latest resourceVersion",
            resource_version.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            requests,
            latency,
            watches,
            resource_version,
        }
    }
}

impl Metrics {
    /// Registers more metrics (the controllers' when they run in the same process).
    pub fn with_registry<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> Option<T> {
        self.registry.lock().ok().map(|mut r| f(&mut r))
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Ok(registry) = self.registry.lock() {
            let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        }
        out
    }
}
