//! `capstan controllers --kubeconfig FILE`: the same controllers `capstan serve` runs in-process, against
//! a real Kubernetes management cluster, with Lease-based leader election and `/healthz`, `/readyz`,
//! `/metrics` on their own port.

use crate::output::{Exit, Style};
use crate::stderr::errln;
use anyhow::Context;
use capstan_runtime::{ControllerMetrics, Health, LeaderElectionConfig, RunOptions};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Arguments of `capstan controllers`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig of the management cluster (default: `$KUBECONFIG`).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Where `/healthz`, `/readyz` and `/metrics` are served (plain HTTP).
    #[arg(long, default_value = "127.0.0.1:8081")]
    health_listen: SocketAddr,
    /// Run without leader election (only when a single replica runs).
    #[arg(long)]
    no_leader_election: bool,
    /// Start even though upstream Cluster API / Metal3 controllers appear to run against the same
    /// cluster (their Deployments or fresh leader-election Leases); both would reconcile the same
    /// objects.
    #[arg(long)]
    allow_upstream_controllers: bool,
    /// Also play the workload clusters of `fake://` hosts (their API servers, Nodes, static Pods and
    /// etcd), as `capstan serve --simulate-workloads` does: the management cluster is real, the
    /// machines and the workload clusters are simulated. For demos and tests.
    #[arg(long)]
    simulate_workloads: bool,
    /// Where the simulated workload clusters keep their stores (default: a temporary directory,
    /// so they do not outlive the process).
    #[arg(long, value_name = "DIR", requires = "simulate_workloads")]
    workloads_dir: Option<PathBuf>,
    #[command(flatten)]
    provisioning: crate::provisioning::ProvisioningArgs,
}

pub fn run(args: Args, _style: &Style) -> anyhow::Result<Exit> {
    crate::malloc::tune_allocators();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(async {
        let client = capstan_runtime::client_from_kubeconfig(&args.kubeconfig)
            .await
            .with_context(|| format!("connecting with {}", args.kubeconfig.display()))?;
        let upstream = super::upstream::find(&client)
            .await
            .context("looking for upstream Cluster API and Metal3 controllers")?;
        if !upstream.is_empty() {
            if !args.allow_upstream_controllers {
                anyhow::bail!(
                    "refusing to start: upstream Cluster API / Metal3 controllers already reconcile the objects capstan would ({}). \
                     Two controllers on the same Machines, hosts and claims undo each other's work. \
                     Remove them (`clusterctl delete --all`) or scale them to 0 replicas, or pass \
                     --allow-upstream-controllers if they watch other objects",
                    upstream.join(", ")
                );
            }
            errln!(
                "capstan controllers: starting beside upstream controllers (--allow-upstream-controllers): {}",
                upstream.join(", ")
            );
        }
        let shutdown = capstan_runtime::CancellationToken::new();
        let (metrics, health) = (ControllerMetrics::default(), Health::default());
        let mut options = RunOptions::new(shutdown.clone())
            .with_metrics(metrics.clone())
            .with_health(health.clone());
        if !args.no_leader_election {
            options = options.with_leader_election(LeaderElectionConfig::new(
                capstan_runtime::default_identity(),
            ));
        }
        let listener = tokio::net::TcpListener::bind(args.health_listen)
            .await
            .with_context(|| format!("listening on {}", args.health_listen))?;
        let router =
            capstan_runtime::health_router(health, capstan_runtime::metrics_registry(&metrics));
        let health_server = tokio::spawn(
            axum::serve(listener, router)
                .with_graceful_shutdown(shutdown.clone().cancelled_owned())
                .into_future(),
        );
        let signal = shutdown.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            signal.cancel();
        });
        let term = shutdown.clone();
        tokio::spawn(async move {
            if let Ok(mut s) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            {
                s.recv().await;
                term.cancel();
            }
        });
        errln!(
            "capstan controllers: running against {} (health on http://{})",
            args.kubeconfig.display(),
            args.health_listen
        );
        // Without the simulation, run_controllers gives every controller one kubeconfig-based
        // workload access and the real etcd membership.
        let mut controller_options = capstan_controllers::ControllerOptions::standalone(options);
        if args.simulate_workloads {
            let simulator = capstan_sim::Simulator::new(
                client.clone(),
                capstan_sim::SimSettings {
                    state_dir: args.workloads_dir.clone(),
                    listen: true,
                },
            );
            controller_options.workloads = Some(simulator.clone());
            controller_options.etcd = Some(simulator.clone());
            controller_options.simulator = Some(simulator);
            errln!(
                "capstan controllers: simulating the workload clusters of fake:// hosts (and the workload API of clusters of real machines)"
            );
        }
        if let Some(provisioning) =
            crate::provisioning::start(&args.provisioning, None, shutdown.clone(), client.clone())
                .await?
        {
            errln!(
                "capstan controllers: provisioning server at {}",
                provisioning.url
            );
            controller_options.bootstrap_report_url = Some(provisioning.report_url);
            controller_options.hosts = Some(provisioning.settings);
        }
        let result = capstan_controllers::run_controllers(client, controller_options).await;
        shutdown.cancel();
        let _ = health_server.await;
        result.context("controllers")?;
        Ok(Exit::Ok)
    });
    runtime.shutdown_timeout(super::RUNTIME_SHUTDOWN_TIMEOUT);
    result
}
