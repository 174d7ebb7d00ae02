//! The controller runtime of capstan, on kube-rs and kube-runtime.
//!
//! - [`client`]: a [`kube::Client`] built from a kubeconfig for real clusters (the embedded API
//!   server's in-process client is `capstan_apiserver::in_process_client`; the runtime depends on
//!   nothing above it).
//! - [`controller`]: the harness that runs a [`Reconciler`] with `kube_runtime::Controller` —
//!   paused objects, finalizers, events, metrics and per-object backoff.
//! - [`finalizers`]: the one way a finalizer is added and removed (JSON patches that test the list
//!   as read), which the harness calls for every controller that has one.
//! - [`leader`]: Lease-based leader election for standalone controllers.
//! - [`metrics`], [`health`] and [`conditions`]: Prometheus metrics, the standalone
//!   `/healthz`/`/readyz`/`/metrics` router, and typed status-condition helpers.
//! - [`patch`]: merge patches of only the fields a controller changed (status and spec), never a
//!   PUT of a typed object.
//! - [`pauses`]: which Clusters are paused, for every controller of a process from one watch.
//! - [`secrets`]: Secrets read from memory, for every controller of a process from one watch.
//! - [`tables`]: the watch-fed tables both of those are, and one cache of objects per kind for a
//!   process (a Machine's bootstrap config and infrastructure machine, a config's own raw spec).
//! - [`index`]: a controller's objects by their Cluster, kept by the controller's own watch (what
//!   its Cluster trigger reads).
//! - [`watches`]: triggers from the kinds an object references (by owner reference or by a label
//!   naming it), and reflector caches for controllers that read many objects.
//!
//! [`run`] runs a set of [`Task`]s (controllers, or anything else that runs until shutdown) under
//! one cancellation token, with or without leader election. The controllers themselves and
//! `run_controllers` live in `capstan-controllers`.
//!
//! `kube::Resource` for capstan's typed model comes from `capstan-model`'s `kube` feature, which this
//! crate enables.

pub mod client;
pub mod conditions;
pub mod controller;
pub mod events;
pub mod finalizers;
pub mod health;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod patch;
pub mod pauses;
pub mod secrets;
pub mod stores;
pub mod tables;
pub mod watches;

pub use client::{client_from_kubeconfig, controller_client};
pub use controller::{Cleanup, Context, Reconciler, controller_task};
pub use health::{Health, health_router};
pub use kube::runtime::controller::Action;
pub use kube::runtime::events::EventType;
pub use leader::{LeaderElectionConfig, LeaderElector, default_identity};
pub use metrics::{ControllerMetrics, metrics_registry};
pub use tokio_util::sync::CancellationToken;

use futures::future::BoxFuture;
use kube::Client;
use std::future::Future;

/// Why the runtime stopped other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("task failed")]
    Task(#[from] TaskError),
    #[error("leader election")]
    Lease(#[from] leader::LeaseError),
}

/// A task that ended badly.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{name} failed")]
    Failed {
        name: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{name} panicked: {message}")]
    Panicked { name: String, message: String },
}

/// What every task gets.
#[derive(Clone)]
pub struct TaskEnv {
    /// The API client.
    pub client: Client,
    /// Where reconciles are counted.
    pub metrics: ControllerMetrics,
    /// This instance's identity (event reporter instance, Lease holder).
    pub identity: String,
    /// Cancelled when the task must stop.
    pub shutdown: CancellationToken,
    /// The pause of every Cluster, shared by the tasks of one run (or leadership term).
    pub pauses: pauses::ClusterPauses,
    /// Every Secret as last seen, shared by the tasks of one run (or leadership term).
    pub secrets: secrets::SecretCache,
    /// One cache of objects per kind, shared by the tasks of one run (or leadership term).
    pub objects: tables::ObjectCaches,
}

/// Something that runs until its [`TaskEnv::shutdown`] is cancelled: a controller, or a loop such
/// as the garbage collector.
pub trait Task: Send {
    /// The task's name (logs, metrics).
    fn name(&self) -> &'static str;
    /// Runs the task to completion.
    fn run(self: Box<Self>, env: TaskEnv) -> BoxFuture<'static, Result<(), RuntimeError>>;
}

/// How [`run`] runs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Cancelled to shut down; [`run`] returns once every task has stopped.
    pub shutdown: CancellationToken,
    /// Where reconciles are counted (register it with the API server or a [`metrics_registry`]).
    pub metrics: ControllerMetrics,
    /// Readiness and leadership, for [`health_router`].
    pub health: Health,
    /// This instance's identity ([`default_identity`] unless set).
    pub identity: String,
    /// Run the tasks only while holding this Lease (standalone mode); `None` runs them at once
    /// (embedded mode, where the API server and the controllers are one process).
    pub leader_election: Option<LeaderElectionConfig>,
}

impl RunOptions {
    /// Options that stop when `shutdown` is cancelled, without leader election.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self {
            shutdown,
            metrics: ControllerMetrics::default(),
            health: Health::default(),
            identity: default_identity(),
            leader_election: None,
        }
    }

    /// Options that stop when `signal` completes (for example Ctrl-C), without leader election.
    pub fn until(signal: impl Future<Output = ()> + Send + 'static) -> Self {
        let shutdown = CancellationToken::new();
        let trigger = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = signal => trigger.cancel(),
                () = trigger.cancelled() => {}
            }
        });
        Self::new(shutdown)
    }

    /// Uses `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: ControllerMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Reports to `health`.
    #[must_use]
    pub fn with_health(mut self, health: Health) -> Self {
        self.health = health;
        self
    }

    /// Runs only while holding the Lease `election` names; its identity becomes this instance's.
    #[must_use]
    pub fn with_leader_election(mut self, election: LeaderElectionConfig) -> Self {
        self.identity = election.identity.clone();
        self.leader_election = Some(election);
        self
    }
}

/// Runs the tasks `make_tasks` returns until `options.shutdown` is cancelled, or until a task fails
/// (then the others are stopped and the failure returned). With leader election the tasks run only
/// while this instance leads, and are made afresh for each term.
pub async fn run(
    client: Client,
    options: RunOptions,
    make_tasks: impl Fn() -> Vec<Box<dyn Task>> + Send,
) -> Result<(), RuntimeError> {
    options.health.set_running(true);
    let result = match options.leader_election.clone() {
        None => {
            options.health.set_leader(true);
            let result = run_tasks(
                make_tasks(),
                TaskEnv {
                    pauses: pauses::ClusterPauses::new(client.clone(), options.shutdown.clone()),
                    secrets: secrets::SecretCache::new(client.clone(), options.shutdown.clone()),
                    objects: tables::ObjectCaches::new(client.clone(), options.shutdown.clone()),
                    client,
                    metrics: options.metrics.clone(),
                    identity: options.identity.clone(),
                    shutdown: options.shutdown.clone(),
                },
            )
            .await;
            options.health.set_leader(false);
            result
        }
        Some(election) => {
            let elector = LeaderElector::new(client.clone(), election);
            elector
                .run(options.shutdown.clone(), options.health.clone(), |term| {
                    run_tasks(
                        make_tasks(),
                        TaskEnv {
                            client: client.clone(),
                            metrics: options.metrics.clone(),
                            identity: options.identity.clone(),
                            pauses: pauses::ClusterPauses::new(client.clone(), term.clone()),
                            secrets: secrets::SecretCache::new(client.clone(), term.clone()),
                            objects: tables::ObjectCaches::new(client.clone(), term.clone()),
                            shutdown: term,
                        },
                    )
                })
                .await
        }
    };
    options.health.set_running(false);
    result
}

/// Runs `tasks` until `env.shutdown`; the first failure stops the rest and is returned.
pub async fn run_tasks(tasks: Vec<Box<dyn Task>>, env: TaskEnv) -> Result<(), RuntimeError> {
    let stop = env.shutdown.child_token();
    let mut running = tokio::task::JoinSet::new();
    for task in tasks {
        let name = task.name();
        let env = TaskEnv {
            shutdown: stop.clone(),
            ..env.clone()
        };
        running.spawn(async move { (name, task.run(env).await) });
    }
    let mut first_error = None;
    while let Some(joined) = running.join_next().await {
        let failure = match joined {
            Ok((_, Ok(()))) => None,
            Ok((name, Err(err))) => Some(RuntimeError::Task(TaskError::Failed {
                name: name.to_owned(),
                source: Box::new(err),
            })),
            Err(err) => Some(RuntimeError::Task(TaskError::Panicked {
                name: "task".to_owned(),
                message: err.to_string(),
            })),
        };
        if let Some(err) = failure {
            tracing::error!(error = %controller::ErrorChain(&err), "stopping every task");
            stop.cancel();
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}
