//! `capstan serve`: the embedded management plane — a Kubernetes-compatible API over SQLite in one
//! process, with an admin kubeconfig, until SIGTERM or Ctrl-C.

use crate::output::{Exit, Style};
use crate::stderr::errln;
use anyhow::Context;
use capstan_apiserver::tls::Credentials;
use capstan_apiserver::{ApiServer, Auth};
use capstan_store::{Store, StoreOptions};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `capstan serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where state, certificates and the kubeconfig live (created with owner-only permissions).
    #[arg(long, env = "CAPSTAN_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Address to listen on (HTTPS).
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Extra names or addresses the serving certificate must be valid for.
    #[arg(long = "tls-san", value_name = "NAME")]
    tls_sans: Vec<String>,
    /// Start from a snapshot made by `capstan backup` (only when the data directory has no state yet).
    #[arg(long, value_name = "FILE")]
    restore_from: Option<PathBuf>,
    /// Install the CustomResourceDefinitions in this directory (or file) at start, e.g. the upstream
    /// Cluster API and Metal3 CRDs, so their full schemas validate, default and explain objects.
    #[arg(long, value_name = "DIR")]
    crds: Option<PathBuf>,
    /// Serve requests without credentials as user `system:anonymous` (group
    /// `system:unauthenticated`) for RBAC to decide, as kube-apiserver does by default: the
    /// default roles let them read only `/healthz`, `/livez`, `/readyz` and `/version`, anything
    /// else is `403`. `--anonymous-auth=false` refuses them with `401` instead.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    anonymous_auth: bool,
    /// The issuer of ServiceAccount tokens, as kube-apiserver's `--service-account-issuer`: the
    /// `iss` of every token `kubectl create token` gets, the only issuer accepted, and what
    /// `/.well-known/openid-configuration` names. A value containing a colon must be a URL.
    #[arg(long, value_name = "URL", default_value = capstan_apiserver::builtin::tokens::DEFAULT_ISSUER)]
    service_account_issuer: String,
    /// The audiences of this API, comma-separated, as kube-apiserver's `--api-audiences`: a
    /// ServiceAccount token authenticates only if it is for one of them, and a token request or
    /// TokenReview naming no audience gets them. Default: the issuer.
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// Serve the API only; run no controllers in this process.
    #[arg(long)]
    no_controllers: bool,
    /// Play every workload cluster in this process (capstan-sim): its API, its Nodes joining when
    /// a `fake://` host is provisioned with bootstrap data, static pods and etcd — for demos, tests
    /// and benchmarks. For a cluster of real machines only its API is played, on
    /// 127.0.0.1:<controlPlaneEndpoint port>, where the machines register their own Nodes. No
    /// cluster's kubeconfig endpoint is dialled while this is on.
    #[arg(long)]
    simulate_workloads: bool,
    #[command(flatten)]
    provisioning: crate::provisioning::ProvisioningArgs,
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    crate::malloc::tune_allocators();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(serve(args, style));
    // Everything has been asked to stop by now; a task that does not is not allowed to keep
    // the process alive after its data has been closed.
    runtime.shutdown_timeout(super::RUNTIME_SHUTDOWN_TIMEOUT);
    result
}

async fn serve(args: Args, style: &Style) -> anyhow::Result<Exit> {
    let token_issuer = match capstan_apiserver::builtin::tokens::TokenIssuer::new(
        &args.service_account_issuer,
        &args.api_audiences,
    ) {
        Ok(issuer) => issuer,
        Err(err) => {
            errln!(
                "{} --service-account-issuer/--api-audiences: {err}",
                style.error("error:")
            );
            return Ok(Exit::Invalid);
        }
    };
    let data_dir = args
        .data_dir
        .unwrap_or_else(crate::client::default_data_dir);
    capstan_apiserver::tls::create_private_dir(&data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let database = data_dir.join("state.db");
    if let Some(snapshot) = &args.restore_from {
        if database.exists() {
            errln!(
                "{} {} already holds state; restore into an empty data directory",
                style.error("error:"),
                data_dir.display()
            );
            return Ok(Exit::Invalid);
        }
        std::fs::copy(snapshot, &database)
            .with_context(|| format!("restoring {}", snapshot.display()))?;
    }
    let store = Store::open(&database, StoreOptions::default())
        .with_context(|| format!("opening {}", database.display()))?;
    let pki = data_dir.join("pki");
    let mut sans = args.tls_sans.clone();
    if !args.listen.ip().is_unspecified() {
        sans.push(args.listen.ip().to_string());
    }
    let credentials = Credentials::load_or_create(&pki, &sans).context("preparing certificates")?;
    let tls = credentials
        .server_config(&pki)
        .context("TLS configuration")?;
    let server = ApiServer::new(
        store,
        Arc::new(capstan_apiserver::conversion::ModelConverter),
        Auth {
            tokens: vec![credentials.admin_token.clone()],
        },
    )
    .await
    .context("starting the API")?;
    server.set_anonymous_auth(args.anonymous_auth);
    server.set_token_issuer(token_issuer);
    server.set_service_account_key(
        capstan_apiserver::builtin::tokens::SigningKey::load_or_create(&pki)
            .context("preparing the ServiceAccount signing key")?,
    );
    // The definitions of capstan's own kinds, as on a management cluster with the providers
    // installed (clusterctl reads them); `--crds` below replaces them with the ones it names.
    server
        .publish_builtin_crds()
        .await
        .context("storing the CustomResourceDefinitions of capstan's kinds")?;
    if let Some(dir) = &args.crds {
        let set = capstan_schema::CrdSet::load_dir(dir)
            .with_context(|| format!("reading CRDs from {}", dir.display()))?;
        for crd in set.iter() {
            server
                .install_crd(crd.definition.clone())
                .await
                .with_context(|| format!("installing {}", crd.name))?;
        }
        errln!(
            "capstan serve: installed {} CustomResourceDefinitions from {}",
            set.len(),
            dir.display()
        );
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let local = listener
        .local_addr()
        .context("reading the listening address")?;
    let host = if local.ip().is_unspecified() {
        "127.0.0.1".to_owned()
    } else {
        local.ip().to_string()
    };
    let url = format!(
        "https://{}",
        SocketAddr::new(host.parse().unwrap_or(local.ip()), local.port())
    );
    let kubeconfig = data_dir.join("kubeconfig");
    credentials
        .write_kubeconfig(&kubeconfig, &url)
        .context("writing the kubeconfig")?;
    // The controllers run in this process and reach the API without a TCP hop.
    let shutdown = capstan_runtime::CancellationToken::new();
    let controllers = if args.no_controllers {
        None
    } else {
        let metrics = capstan_runtime::ControllerMetrics::default();
        server
            .state()
            .metrics
            .with_registry(|registry| metrics.register(registry));
        // The controllers act with their own least-privilege role, not as the admin.
        let client = capstan_apiserver::in_process_controller_client(
            server.router(),
            capstan_apiserver::authz::controllers_identity(),
        );
        let mut options = capstan_controllers::ControllerOptions::embedded(
            capstan_runtime::RunOptions::new(shutdown.clone()).with_metrics(metrics),
        );
        if args.simulate_workloads {
            let simulator = capstan_sim::Simulator::new(
                client.clone(),
                capstan_sim::SimSettings {
                    state_dir: Some(data_dir.join("workloads")),
                    listen: true,
                },
            );
            options.workloads = Some(simulator.clone());
            options.etcd = Some(simulator.clone());
            options.simulator = Some(simulator);
            errln!(
                "capstan serve: simulating the workload clusters of fake:// hosts (and the workload API of clusters of real machines)"
            );
        }
        // Without the simulation, run_controllers gives every controller one kubeconfig-based
        // access to the workload clusters.
        if let Some(provisioning) = crate::provisioning::start(
            &args.provisioning,
            Some(&data_dir),
            shutdown.clone(),
            client.clone(),
        )
        .await?
        {
            errln!("capstan serve: provisioning server at {}", provisioning.url);
            options.bootstrap_report_url = Some(provisioning.report_url);
            options.hosts = Some(provisioning.settings);
        }
        Some(tokio::spawn(capstan_controllers::run_controllers(
            client, options,
        )))
    };
    // One line on stdout when ready: scripts and tests wait for it. Nobody reading it (a closed
    // pipe) is no reason to stop serving.
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(
            stdout,
            "capstan serve: ready at {url} (kubeconfig: {})",
            kubeconfig.display()
        )
        .and_then(|()| stdout.flush());
    }
    let stop = shutdown.clone();
    let serving = capstan_apiserver::serve::serve_tls(server.router(), listener, tls, async move {
        shutdown_signal().await;
        // Controllers stop first, while the API still answers their last writes.
        stop.cancel();
    });
    let (served, finished) = tokio::join!(serving, async {
        match controllers {
            Some(task) => match task.await {
                Ok(result) => result.map_err(|e| anyhow::anyhow!("controllers: {e}")),
                Err(e) => Err(anyhow::anyhow!("controllers: {e}")),
            },
            None => Ok(()),
        }
    });
    served.context("serving")?;
    finished?;
    errln!("capstan serve: stopped");
    Ok(Exit::Ok)
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
