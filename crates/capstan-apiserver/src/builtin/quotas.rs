//! `ResourceQuota` (core/v1) for object counts: per-namespace limits on how many objects of a kind
//! may exist, as kube-apiserver's quota admission enforces them and kube-controller-manager's quota
//! controller reports them, so a platform team sharing one management plane between teams caps
//! each team's Machines, hosts and clusters with the objects and tools it knows (`kubectl create
//! quota`, `kubectl describe quota`).
//!
//! - **What is counted.** `spec.hard` keys `count/<resource>.<group>` (`count/machines.cluster.x-k8s.io`,
//!   `count/baremetalhosts.metal3.io`, `count/clusters.cluster.x-k8s.io`), `count/<resource>` for
//!   the core group (`count/secrets`), and kube-apiserver's older names for core counts
//!   (`configmaps`, `secrets`, `services`, `resourcequotas`). Values are whole numbers (`10`,
//!   `"1k"`). Anything else — compute resources (`requests.cpu`), `scopes`, `scopeSelector` —
//!   concerns Pods that nothing runs here, and a quota naming it is refused (`422`) rather than
//!   stored and never enforced.
//! - **Enforcement.** A create in a namespace whose quotas count the object's kind is counted
//!   under the namespace's quota lock, held from the count to the write, so concurrent creates
//!   cannot together pass a limit; one that would go over is refused with kube-apiserver's
//!   `403 Forbidden` (`machines.cluster.x-k8s.io "m" is forbidden: exceeded quota: team-a,
//!   requested: count/machines.cluster.x-k8s.io=1, used: count/machines.cluster.x-k8s.io=10,
//!   limited: count/machines.cluster.x-k8s.io=10`). The count is read from the store at the
//!   create (objects being deleted still count, as in Kubernetes), never from the status.
//! - **Status.** A loop of the server keeps `status.hard` (the spec's) and `status.used` of every
//!   quota up to date, recounting a quota only when it or a kind it counts was written since its
//!   last count. It runs while quotas exist; a server without any (a simulated workload cluster)
//!   waits for the first.
//!
//! The quotas themselves are read from memory: parsed once per change of any quota (the store's
//! last change of the kind says when), not per create.

use crate::ApiState;
use crate::conversion::EVENTS_STORAGE;
use crate::status::{ApiError, Cause};
use capstan_store::{ObjectKey, Store, StoreError};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// Where ResourceQuotas are stored.
pub const STORAGE: &str = "/resourcequotas";

/// How soon a changed count shows in a quota's status while quotas exist.
const RESYNC: Duration = Duration::from_millis(500);

/// kube-apiserver's older names for object counts of core kinds (served here).
const LEGACY_COUNTS: &[&str] = &["configmaps", "secrets", "services", "resourcequotas"];

/// One counted key of a quota.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Limit {
    /// The key as written (`count/machines.cluster.x-k8s.io`).
    key: String,
    /// The storage resource it counts.
    storage: String,
    /// The most objects allowed.
    hard: u64,
    /// The hard value as written, for `status.hard`.
    hard_text: String,
}

/// One stored quota, parsed.
#[derive(Clone, Debug)]
struct Quota {
    name: String,
    resource_version: u64,
    limits: Vec<Limit>,
    status: Value,
}

/// Every quota by namespace.
type Snapshot = BTreeMap<String, Vec<Quota>>;

/// The quotas of one API server: their parsed form, the namespaces' quota locks and the wake-up
/// of the status loop.
#[derive(Default)]
pub struct Quotas {
    /// The quotas as parsed at the store's last change of the kind (the first field).
    snapshot: Mutex<Option<(u64, Arc<Snapshot>)>>,
    /// One lock per namespace that has quotas.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    wake: tokio::sync::Notify,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Quotas {
    /// Has the status loop look again at once (a quota or a count changed).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    async fn snapshot(&self, store: &Store) -> Result<Arc<Snapshot>, StoreError> {
        // Read before the list: a write between the two makes the next call list again.
        let version = store.last_change(STORAGE);
        if let Some((at, snapshot)) = lock(&self.snapshot).as_ref()
            && *at == version
        {
            return Ok(snapshot.clone());
        }
        let page = store.list(STORAGE.into(), None, None, None, None).await?;
        let mut snapshot = Snapshot::new();
        for stored in page.items {
            let value = stored.value()?;
            // Stored quotas were validated when written; one that was not is left unenforced
            // rather than stopping every create of its namespace.
            match limits(&value) {
                Ok(limits) => snapshot
                    .entry(stored.key.namespace.clone())
                    .or_default()
                    .push(Quota {
                        name: stored.key.name.clone(),
                        resource_version: stored.resource_version,
                        limits,
                        status: value.get("status").cloned().unwrap_or(Value::Null),
                    }),
                Err(_) => tracing::warn!(
                    namespace = %stored.key.namespace,
                    name = %stored.key.name,
                    "a stored ResourceQuota has keys capstan does not count; it is not enforced"
                ),
            }
        }
        let snapshot = Arc::new(snapshot);
        *lock(&self.snapshot) = Some((version, snapshot.clone()));
        Ok(snapshot)
    }

    fn namespace_lock(&self, namespace: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.locks)
            .entry(namespace.to_owned())
            .or_default()
            .clone()
    }
}

/// The storage resource of `resource` in `group` (Events of both groups share one).
fn storage_of(group: &str, resource: &str) -> String {
    if resource == "events" && matches!(group, "" | "events.k8s.io") {
        EVENTS_STORAGE.to_owned()
    } else {
        format!("{group}/{resource}")
    }
}

fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// The storage resource a `spec.hard` key counts, if it is an object count.
fn counted(key: &str) -> Option<String> {
    if LEGACY_COUNTS.contains(&key) {
        return Some(storage_of("", key));
    }
    let counted = key.strip_prefix("count/")?;
    let (resource, group) = counted.split_once('.').unwrap_or((counted, ""));
    let group_ok = group.is_empty() || group.split('.').all(is_dns_label);
    (is_dns_label(resource) && group_ok && group.len() <= 253).then(|| storage_of(group, resource))
}

/// A whole, non-negative quantity: a JSON integer, or digits with an optional decimal (`k`, `M`,
/// `G`, `T`, `P`, `E`) or binary (`Ki` … `Ei`) suffix.
fn whole_quantity(value: &Value) -> Option<u64> {
    if let Some(n) = value.as_u64() {
        return Some(n);
    }
    let text = value.as_str()?;
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    let number: u64 = digits.parse().ok()?;
    let factor: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// The counted keys of a quota, or the causes of refusing it.
fn limits(object: &Value) -> Result<Vec<Limit>, Vec<Cause>> {
    let spec = &object["spec"];
    let mut causes = Vec::new();
    for field in ["scopes", "scopeSelector"] {
        if spec.get(field).is_some_and(|v| !v.is_null()) {
            causes.push(Cause {
                reason: "FieldValueForbidden".into(),
                message: format!(
                    "Forbidden: quota scopes select Pods by their state, and nothing runs Pods here; remove spec.{field}"
                ),
                field: format!("spec.{field}"),
            });
        }
    }
    let mut limits = Vec::new();
    for (key, value) in spec["hard"].as_object().into_iter().flatten() {
        let field = format!("spec.hard[{key}]");
        let Some(storage) = counted(key) else {
            causes.push(Cause {
                reason: "FieldValueNotSupported".into(),
                message: format!(
                    "Unsupported value: {key:?}: capstan enforces object counts only: count/<resource>.<group> (count/machines.cluster.x-k8s.io, count/baremetalhosts.metal3.io, count/clusters.cluster.x-k8s.io), count/<resource> for the core group, or {}",
                    LEGACY_COUNTS.join(", ")
                ),
                field,
            });
            continue;
        };
        let Some(hard) = whole_quantity(value) else {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "Invalid value: {value}: must be a whole, non-negative number of objects (10, \"1k\")"
                ),
                field,
            });
            continue;
        };
        limits.push(Limit {
            key: key.clone(),
            storage,
            hard,
            hard_text: value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned),
        });
    }
    if causes.is_empty() {
        Ok(limits)
    } else {
        Err(causes)
    }
}

/// Refuses a ResourceQuota that counts what capstan does not (see the module documentation):
/// `422 Invalid` with a cause per key.
pub fn validate(object: &Value) -> Result<(), ApiError> {
    let causes = match limits(object) {
        Ok(_) => return Ok(()),
        Err(causes) => causes,
    };
    Err(ApiError::Invalid {
        group: String::new(),
        kind: "ResourceQuota".into(),
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        summary: causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
            .join(", "),
        causes,
    })
}

/// What a create counted against quotas holds until its write is done: the namespace's quota
/// lock, so no other create is counted before this one is stored.
pub struct Admitted {
    _held: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// Whether any quota counted the object (its status then changes).
    pub counted: bool,
}

/// Counts a create of `name` (resource `resource` of `group`, stored as `storage`) in
/// `namespace` against the namespace's quotas: refused with `403 Forbidden` naming the quota when
/// one more would be over a limit; otherwise what to hold until the write is done.
pub async fn admit_create(
    state: &ApiState,
    group: &str,
    resource: &str,
    storage: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Admitted, ApiError> {
    let none = Admitted {
        _held: None,
        counted: false,
    };
    let Some(namespace) = namespace else {
        return Ok(none);
    };
    let snapshot = state.quotas.snapshot(&state.store).await?;
    let applying: Vec<(&str, &Limit)> = snapshot
        .get(namespace)
        .into_iter()
        .flatten()
        .flat_map(|quota| {
            quota
                .limits
                .iter()
                .filter(|l| l.storage == storage)
                .map(move |l| (quota.name.as_str(), l))
        })
        .collect();
    if applying.is_empty() {
        return Ok(none);
    }
    let held = state.quotas.namespace_lock(namespace).lock_owned().await;
    let used = state
        .store
        .count_in(storage.to_owned(), namespace.to_owned())
        .await?;
    if let Some((quota, limit)) = applying.iter().find(|(_, l)| used >= l.hard) {
        let key = &limit.key;
        return Err(ApiError::Forbidden {
            group: group.to_owned(),
            resource: resource.to_owned(),
            name: name.to_owned(),
            message: format!(
                "exceeded quota: {quota}, requested: {key}=1, used: {key}={used}, limited: {key}={}",
                limit.hard_text
            ),
        });
    }
    Ok(Admitted {
        _held: Some(held),
        counted: true,
    })
}

/// Starts the loop that keeps every quota's status up to date; it ends when the server is
/// dropped (which wakes it).
pub fn spawn(state: Weak<ApiState>) {
    tokio::spawn(async move {
        // What each quota's status was last computed from: its resourceVersion and the store's
        // last change of each kind it counts.
        let mut computed: HashMap<(String, String), Vec<u64>> = HashMap::new();
        loop {
            let Some(strong) = state.upgrade() else {
                return;
            };
            let any = match refresh(&strong, &mut computed).await {
                Ok(any) => any,
                Err(err) => {
                    tracing::warn!(error = %err, "a pass over the ResourceQuotas' status failed");
                    true
                }
            };
            let quotas = strong.quotas.clone();
            drop(strong);
            if any {
                let _ = tokio::time::timeout(RESYNC, quotas.wake.notified()).await;
            } else {
                quotas.wake.notified().await;
            }
        }
    });
}

/// One pass: the status of every quota whose counts may have changed. Whether any quota exists.
async fn refresh(
    state: &ApiState,
    computed: &mut HashMap<(String, String), Vec<u64>>,
) -> Result<bool, StoreError> {
    let snapshot = state.quotas.snapshot(&state.store).await?;
    let mut seen = HashSet::new();
    for (namespace, quotas) in snapshot.iter() {
        for quota in quotas {
            let id = (namespace.clone(), quota.name.clone());
            // Taken before counting: a write after it changes the signature, and is counted on
            // the next pass.
            let signature: Vec<u64> = std::iter::once(quota.resource_version)
                .chain(
                    quota
                        .limits
                        .iter()
                        .map(|l| state.store.last_change(&l.storage)),
                )
                .collect();
            seen.insert(id.clone());
            if computed.get(&id) == Some(&signature) {
                continue;
            }
            let mut hard = Map::new();
            let mut used = Map::new();
            for limit in &quota.limits {
                let count = state
                    .store
                    .count_in(limit.storage.clone(), namespace.clone())
                    .await?;
                hard.insert(limit.key.clone(), json!(limit.hard_text));
                used.insert(limit.key.clone(), json!(count.to_string()));
            }
            let status = json!({"hard": hard, "used": used});
            if status != quota.status {
                write_status(state, namespace, quota, status).await?;
            }
            computed.insert(id, signature);
        }
    }
    computed.retain(|id, _| seen.contains(id));
    Ok(!snapshot.is_empty())
}

/// Writes `status` over the quota as it was parsed; a quota changed or deleted since is left to
/// the next pass.
async fn write_status(
    state: &ApiState,
    namespace: &str,
    quota: &Quota,
    status: Value,
) -> Result<(), StoreError> {
    let key = ObjectKey::new(STORAGE, namespace, quota.name.as_str());
    let Some(stored) = state.store.get(key.clone()).await? else {
        return Ok(());
    };
    if stored.resource_version != quota.resource_version {
        return Ok(());
    }
    let mut value = stored.value()?;
    if let Some(object) = value.as_object_mut() {
        object.insert("status".into(), status);
    }
    match state
        .store
        .update(key, value, Some(stored.resource_version))
        .await
    {
        Ok(_) | Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(()),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_counts_are_what_a_quota_may_hold() {
        assert_eq!(
            counted("count/machines.cluster.x-k8s.io").as_deref(),
            Some("cluster.x-k8s.io/machines")
        );
        assert_eq!(counted("count/secrets").as_deref(), Some("/secrets"));
        assert_eq!(counted("secrets").as_deref(), Some("/secrets"));
        assert_eq!(counted("count/events").as_deref(), Some(EVENTS_STORAGE));
        for refused in [
            "requests.cpu",
            "pods",
            "count/",
            "count/Machines.x",
            "count/a..b",
        ] {
            assert_eq!(counted(refused), None, "{refused}");
        }
        assert_eq!(whole_quantity(&json!(10)), Some(10));
        assert_eq!(whole_quantity(&json!("1k")), Some(1000));
        assert_eq!(whole_quantity(&json!("2Ki")), Some(2048));
        for refused in [
            json!(-1),
            json!(1.5),
            json!("1.5"),
            json!("10m"),
            json!("x"),
        ] {
            assert_eq!(whole_quantity(&refused), None, "{refused}");
        }
    }

    #[test]
    fn a_quota_of_what_is_not_counted_is_refused_naming_each_key() {
        let err = validate(&json!({"metadata": {"name": "q"}, "spec": {
            "hard": {"requests.cpu": "4", "count/machines.cluster.x-k8s.io": "1.5", "secrets": 3},
            "scopes": ["BestEffort"],
        }}))
        .unwrap_err();
        assert_eq!(err.code(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        let text = err.to_string();
        for named in [
            "spec.hard[requests.cpu]: Unsupported value",
            "spec.hard[count/machines.cluster.x-k8s.io]: Invalid value",
            "spec.scopes: Forbidden",
        ] {
            assert!(text.contains(named), "{named}: {text}");
        }
        validate(&json!({"spec": {"hard": {"count/clusters.cluster.x-k8s.io": 5}}})).unwrap();
    }
}
