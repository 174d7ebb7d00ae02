//! Leader election over a `coordination.k8s.io/v1` Lease, so only one standalone instance runs the
//! controllers at a time.
//!
//! A candidate takes the Lease when nobody holds it, when its holder released it (empty
//! `holderIdentity`), or when it expired: its `renewTime` is more than `leaseDurationSeconds` old, or
//! — robust to clock skew between hosts — this candidate has watched it stay unchanged for that long.
//! Writes use the Lease's `resourceVersion`, so two candidates can never both win. The leader renews
//! every `retry_period`; if it finds someone else holding the Lease, or cannot renew for
//! `renew_deadline` (shorter than the lease duration, so it stops before anyone may take over), it
//! steps down, stops its controllers and becomes a candidate again. On shutdown it releases the Lease
//! so a standby takes over at once.

use crate::health::Health;
use crate::{RuntimeError, TaskError};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use std::future::Future;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Namespace of the controllers' Lease unless configured otherwise.
pub const DEFAULT_LEASE_NAMESPACE: &str = "kube-system";
/// Name of the controllers' Lease unless configured otherwise.
pub const DEFAULT_LEASE_NAME: &str = "capstan-controllers";

/// Why a Lease operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("reading Lease {namespace}/{name}")]
    Read {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("writing Lease {namespace}/{name}")]
    Write {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

/// Where the Lease lives, who we are, and the timings.
#[derive(Clone, Debug)]
pub struct LeaderElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This instance's identity, written as `holderIdentity`.
    pub identity: String,
    /// How long a Lease stays valid after its last renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews.
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// The controllers' Lease (`kube-system/capstan-controllers`) with Kubernetes' usual timings
    /// (15 s lease, 10 s renew deadline, 2 s retry) and `identity`.
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            namespace: DEFAULT_LEASE_NAMESPACE.to_owned(),
            name: DEFAULT_LEASE_NAME.to_owned(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// This host's name plus a random suffix, so two instances on one host differ.
pub fn default_identity() -> String {
    use rand::Rng;
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "capstan".to_owned());
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(6)
        .map(|c| char::from(c).to_ascii_lowercase())
        .collect();
    format!("{host}-{suffix}")
}

/// What a candidate last saw of the Lease, and when it first saw it that way.
struct Observed {
    resource_version: Option<String>,
    since: Instant,
}

/// One instance's side of the election.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    observed: Option<Observed>,
}

fn now() -> Timestamp {
    Timestamp::now()
}

impl LeaderElector {
    /// An elector for `config`'s Lease.
    pub fn new(client: Client, config: LeaderElectionConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    fn read_error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Read {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    fn write_error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Write {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// Whether the Lease (held by someone else) has expired.
    fn expired(&mut self, lease: &Lease, spec: &LeaseSpec) -> bool {
        let rv = lease.metadata.resource_version.clone();
        let observed = match &self.observed {
            Some(o) if o.resource_version == rv => o.since,
            _ => {
                self.observed = Some(Observed {
                    resource_version: rv,
                    since: Instant::now(),
                });
                Instant::now()
            }
        };
        let duration = spec
            .lease_duration_seconds
            .map_or(self.config.lease_duration, |s| {
                Duration::from_secs(u64::try_from(s.max(0)).unwrap_or(0))
            });
        let unchanged_too_long = observed.elapsed() > duration;
        let stale_by_clock = spec.renew_time.as_ref().is_some_and(|renewed| {
            SignedDuration::try_from(duration)
                .ok()
                .and_then(|d| renewed.0.checked_add(d).ok())
                .is_some_and(|deadline| deadline < now())
        });
        unchanged_too_long || stale_by_clock
    }

    /// One acquire-or-renew attempt. Returns whether this instance holds the Lease afterwards;
    /// `Ok(false)` when someone else holds it (or won a race for it).
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        let me = self.config.identity.clone();
        let stamp = MicroTime(now());
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.read_error(e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(self.lease_seconds()),
                    acquire_time: Some(stamp.clone()),
                    renew_time: Some(stamp),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(false),
                Err(e) => Err(self.write_error(e)),
            };
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if holder.as_deref() == Some(me.as_str()) {
            spec.renew_time = Some(stamp);
            spec.lease_duration_seconds = Some(self.lease_seconds());
        } else if holder.is_none() || self.expired(&lease, &spec) {
            spec.holder_identity = Some(me);
            spec.acquire_time = Some(stamp.clone());
            spec.renew_time = Some(stamp);
            spec.lease_duration_seconds = Some(self.lease_seconds());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        } else {
            return Ok(false);
        }
        lease.spec = Some(spec);
        // `replace` sends the resourceVersion we read: a concurrent writer makes this a conflict.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(false),
            Err(e) => Err(self.write_error(e)),
        }
    }

    /// Gives the Lease up if this instance holds it, so a standby can take it at once.
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.read_error(e))?
        else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(now()));
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            // Someone changed it meanwhile: it is no longer ours to release.
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(()),
            Err(e) => Err(self.write_error(e)),
            Ok(_) => Ok(()),
        }
    }

    /// Campaigns until `shutdown`: whenever this instance wins the Lease it runs `lead` with a token
    /// that is cancelled when leadership ends (lost, or shutdown), and waits for it to return before
    /// campaigning again. Returns when `shutdown` is cancelled (after releasing the Lease), or with
    /// `lead`'s error if it fails while leading.
    pub async fn run<F, Fut>(
        mut self,
        shutdown: CancellationToken,
        health: Health,
        mut lead: F,
    ) -> Result<(), RuntimeError>
    where
        F: FnMut(CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), RuntimeError>> + Send + 'static,
    {
        let mut tick = tokio::time::interval(self.config.retry_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Candidate.
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    _ = tick.tick() => {}
                }
                match self.try_acquire_or_renew().await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(error = %crate::controller::ErrorChain(&err), "leader election")
                    }
                }
            }
            tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became leader");
            health.set_leader(true);
            let term = shutdown.child_token();
            let mut work = tokio::spawn(lead(term.clone()));
            let mut last_renewal = Instant::now();
            let ended = loop {
                tokio::select! {
                    () = shutdown.cancelled() => break None,
                    result = &mut work => break Some(result),
                    _ = tick.tick() => {}
                }
                match self.try_acquire_or_renew().await {
                    Ok(true) => last_renewal = Instant::now(),
                    Ok(false) => {
                        tracing::warn!(identity = %self.config.identity, "lost the lease to another instance");
                        term.cancel();
                        break None;
                    }
                    Err(err) => {
                        tracing::warn!(error = %crate::controller::ErrorChain(&err), "renewing the lease");
                        if last_renewal.elapsed() >= self.config.renew_deadline {
                            tracing::warn!(identity = %self.config.identity, "could not renew the lease in time");
                            term.cancel();
                            break None;
                        }
                    }
                }
            };
            health.set_leader(false);
            term.cancel();
            let result = match ended {
                Some(result) => result,
                None => work.await,
            };
            let result = result.map_err(|e| {
                RuntimeError::Task(TaskError::Panicked {
                    name: "leader".into(),
                    message: e.to_string(),
                })
            })?;
            if shutdown.is_cancelled() || result.is_err() {
                if let Err(err) = self.release().await {
                    tracing::warn!(error = %crate::controller::ErrorChain(&err), "releasing the lease");
                }
                return result;
            }
            tracing::info!(identity = %self.config.identity, "stepped down; campaigning again");
        }
    }
}
