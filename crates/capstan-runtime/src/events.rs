//! Kubernetes Events about the objects controllers act on (`events.k8s.io/v1`, what
//! `kubectl describe` shows), with a repeat folded into a series on the first Event, as
//! Kubernetes' own event recorders do.
//!
//! kube-runtime's `Recorder` folds repeats too, but it keeps every Event it published for six
//! minutes in one map and walks the whole map on every publish. One recorder per controller, so
//! the host controller of 4,000 hosts held every Event of the last six minutes and pruned all of
//! them for each new one. Here the remembered Events expire in the order they were first
//! published (a queue: each publish looks only at what has expired), and at most [`REMEMBERED`]
//! are kept; a repeat after either limit starts a new Event rather than extending the series.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use serde_json::json;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a repeat extends the series of the first Event (kube-runtime's and client-go's
/// six minutes).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// How many published Events a recorder remembers to fold repeats into.
pub const REMEMBERED: usize = 4_096;

/// What makes two Events the same one repeated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    /// The object's uid, else its kind, namespace and name.
    regarding: String,
    warning: bool,
    reason: String,
    action: String,
    note: Option<String>,
}

/// A published Event that repeats are folded into.
#[derive(Debug)]
struct Series {
    name: String,
    namespace: String,
    count: i32,
    first: Instant,
}

/// The Events a recorder remembers, and the order they expire in.
#[derive(Debug, Default)]
struct Memory {
    series: HashMap<EventKey, Series>,
    /// Keys by first publication, oldest first; an entry whose key was published again later is
    /// skipped when it comes up (its `first` no longer matches).
    order: VecDeque<(Instant, EventKey)>,
}

impl Memory {
    /// Forgets what expired by `now`, and the oldest beyond [`REMEMBERED`].
    fn expire(&mut self, now: Instant) {
        while let Some((first, _)) = self.order.front() {
            let expired = now.saturating_duration_since(*first) >= SERIES_WINDOW;
            if !expired && self.order.len() <= REMEMBERED {
                break;
            }
            if let Some((first, key)) = self.order.pop_front()
                && self.series.get(&key).is_some_and(|s| s.first == first)
            {
                self.series.remove(&key);
            }
        }
    }

    /// Counts a repeat of `key`, if it is remembered: the Event to extend and its new count.
    fn repeat(&mut self, key: &EventKey, now: Instant) -> Option<(String, String, i32)> {
        self.expire(now);
        let series = self.series.get_mut(key)?;
        series.count = series.count.saturating_add(1);
        Some((series.name.clone(), series.namespace.clone(), series.count))
    }

    fn remember(&mut self, key: EventKey, name: String, namespace: String, now: Instant) {
        self.order.push_back((now, key.clone()));
        self.series.insert(
            key,
            Series {
                name,
                namespace,
                count: 1,
                first: now,
            },
        );
        self.expire(now);
    }

    fn forget(&mut self, key: &EventKey) {
        self.series.remove(key);
    }
}

/// Publishes Events as one controller instance.
pub struct EventRecorder {
    client: Client,
    controller: String,
    instance: String,
    memory: Mutex<Memory>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("controller", &self.controller)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder reporting as `controller` (the Event's `reportingController`) from `instance`.
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.to_owned(),
            memory: Mutex::default(),
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes an Event about `regarding`, or counts a repeat of one published within
    /// [`SERIES_WINDOW`] on it.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: Option<String>,
    ) -> Result<(), kube::Error> {
        let key = EventKey {
            regarding: regarding.uid.clone().unwrap_or_else(|| {
                format!(
                    "{}/{}/{}",
                    regarding.kind.as_deref().unwrap_or_default(),
                    regarding.namespace.as_deref().unwrap_or_default(),
                    regarding.name.as_deref().unwrap_or_default()
                )
            }),
            warning: matches!(type_, EventType::Warning),
            reason: reason.to_owned(),
            action: action.to_owned(),
            note,
        };
        let now = Timestamp::now();
        let repeat = self.memory().repeat(&key, Instant::now());
        if let Some((name, namespace, count)) = repeat {
            let patch = json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
            match Api::<Event>::namespaced(self.client.clone(), &namespace)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // Deleted meanwhile (Events expire): a new one starts the series again.
                Err(kube::Error::Api(status)) if status.is_not_found() => {
                    self.memory().forget(&key);
                }
                Err(err) => return Err(err),
            }
        }
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(if key.warning { "Warning" } else { "Normal" }.to_owned()),
            reason: Some(key.reason.clone()),
            action: Some(key.action.clone()),
            note: key.note.clone(),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await?;
        self.memory().remember(key, name, namespace, Instant::now());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: usize) -> EventKey {
        EventKey {
            regarding: format!("uid-{n}"),
            warning: false,
            reason: "Provisioned".into(),
            action: "Provision".into(),
            note: None,
        }
    }

    #[test]
    fn a_repeat_within_the_window_extends_the_series_and_counts() {
        let mut memory = Memory::default();
        let start = Instant::now();
        assert_eq!(memory.repeat(&key(1), start), None);
        memory.remember(key(1), "e1".into(), "ns".into(), start);
        let later = start + Duration::from_secs(60);
        assert_eq!(
            memory.repeat(&key(1), later),
            Some(("e1".into(), "ns".into(), 2))
        );
        assert_eq!(
            memory.repeat(&key(1), later),
            Some(("e1".into(), "ns".into(), 3))
        );
        // Another reason is another Event.
        let other = EventKey {
            reason: "Deprovisioned".into(),
            ..key(1)
        };
        assert_eq!(memory.repeat(&other, later), None);
    }

    #[test]
    fn remembered_events_expire_in_order_and_are_bounded() {
        let mut memory = Memory::default();
        let start = Instant::now();
        memory.remember(key(1), "e1".into(), "ns".into(), start);
        memory.remember(
            key(2),
            "e2".into(),
            "ns".into(),
            start + Duration::from_secs(120),
        );
        // Six minutes after the first: it is gone, the second is not.
        let now = start + SERIES_WINDOW;
        assert_eq!(memory.repeat(&key(1), now), None);
        assert!(memory.repeat(&key(2), now).is_some());
        assert_eq!(memory.series.len(), 1);
        assert_eq!(memory.order.len(), 1);
        // Never more than REMEMBERED, however many are published at once.
        for n in 0..REMEMBERED + 10 {
            memory.remember(key(100 + n), format!("e{n}"), "ns".into(), now);
        }
        assert_eq!(memory.series.len(), REMEMBERED);
        assert!(memory.order.len() <= REMEMBERED);
        assert!(memory.repeat(&key(100), now).is_none());
        assert!(memory.repeat(&key(100 + REMEMBERED + 9), now).is_some());
    }

    #[test]
    fn a_key_published_again_after_expiry_is_not_dropped_by_its_old_queue_entry() {
        let mut memory = Memory::default();
        let start = Instant::now();
        memory.remember(key(1), "e1".into(), "ns".into(), start);
        memory.forget(&key(1));
        let again = start + Duration::from_secs(300);
        memory.remember(key(1), "e1b".into(), "ns".into(), again);
        // The first entry's time is up; the second publication's is not.
        let now = start + SERIES_WINDOW;
        assert_eq!(
            memory.repeat(&key(1), now),
            Some(("e1b".into(), "ns".into(), 2))
        );
    }
}
