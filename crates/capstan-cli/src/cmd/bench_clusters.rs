//! `capstan bench clusters`: many clusters of one control plane and three workers through a real
//! `capstan serve --simulate-workloads` — created, every Machine `Running` with a Node, then deleted
//! with every host back to `available` — timing each phase and reading the server's CPU time, peak
//! memory and the API requests it served.
//!
//! What is simulated: the machines (`fake://` BMCs and the simulated agent) and each workload
//! cluster (the simulated backend plays its API server, its Nodes joining and its etcd). Everything
//! of the management plane does its real work: the API server and store, the Cluster API core,
//! kubeadm bootstrap and control-plane controllers, the Metal3 provider claiming and provisioning
//! hosts, and the host controller.

use crate::output::{Exit, outln};
use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use serde::Serialize;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// Arguments of `capstan bench clusters`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many clusters (each 1 control plane + `--workers` workers).
    #[arg(long, default_value_t = 100)]
    count: usize,
    /// Workers per cluster.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Objects each controller reconciles at once.
    #[arg(long, default_value_t = 64)]
    concurrency: u16,
    /// How long the simulated agent takes per step, in milliseconds.
    #[arg(long, default_value_t = 200)]
    step_ms: u64,
    /// Give up after this many seconds per phase.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Figures {
    clusters: usize,
    machines: usize,
    hosts_available_seconds: f64,
    create_seconds: f64,
    running_seconds: f64,
    delete_seconds: f64,
    server_cpu_seconds: f64,
    server_peak_rss_mib: f64,
    server_rss_mib: f64,
    api_requests: u64,
}

fn api(client: &kube::Client, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

/// The hosts of cluster `c`: one control plane and `workers` workers, each with its BMC Secret.
fn host_objects(c: usize, workers: usize) -> Vec<Value> {
    let mut objects = Vec::new();
    let roles = std::iter::once(("cp-0".to_owned(), "control-plane"))
        .chain((0..workers).map(|w| (format!("w-{w}"), "worker")));
    for (suffix, role) in roles {
        let name = format!("c{c}-{suffix}");
        objects.push(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-bmc")},
            "stringData": {"username": "admin", "password": "password"},
        }));
        objects.push(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "labels": {"bench.capstan.dev/cluster": format!("c{c}"), "bench.capstan.dev/role": role}},
            "spec": {
                "online": true,
                "bmc": {"address": format!("fake://bench/{name}"), "credentialsName": format!("{name}-bmc")},
            },
        }));
    }
    objects
}

/// Cluster `c` as a user writes it (`v1beta1`, as most manifests in the field).
fn cluster_objects(c: usize, workers: usize) -> Vec<Value> {
    let name = format!("c{c}");
    let image = json!({
        "url": "http://images.example/node.img",
        "checksum": "0".repeat(64),
        "checksumType": "sha256",
        "format": "raw",
    });
    let labels = json!({"cluster.x-k8s.io/cluster-name": name});
    let node_registration = json!({
        "name": "{{ ds.meta_data.name }}",
        "kubeletExtraArgs": {"node-labels": "metal3.io/uuid={{ ds.meta_data.uuid }}"},
    });
    // The endpoint is never dialled: the simulated backend plays the workload API.
    let endpoint = json!({"host": "192.0.2.10", "port": 6443});
    vec![
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/12"]}},
                "controlPlaneEndpoint": endpoint,
                "controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": format!("{name}-cp")},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Cluster", "name": name},
            },
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Cluster",
            "metadata": {"name": name, "labels": labels},
            "spec": {"controlPlaneEndpoint": endpoint, "cloudProviderEnabled": false},
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3MachineTemplate",
            "metadata": {"name": format!("{name}-cp"), "labels": labels},
            "spec": {"template": {"spec": {
                "image": image,
                "hostSelector": {"matchLabels": {"bench.capstan.dev/cluster": name, "bench.capstan.dev/role": "control-plane"}},
            }}},
        }),
        json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
            "metadata": {"name": format!("{name}-cp"), "labels": labels},
            "spec": {
                "replicas": 1,
                "version": "v1.31.4",
                "machineTemplate": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3MachineTemplate", "name": format!("{name}-cp")}},
                "kubeadmConfigSpec": {
                    "initConfiguration": {"nodeRegistration": node_registration},
                    "joinConfiguration": {"nodeRegistration": node_registration},
                },
            },
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3MachineTemplate",
            "metadata": {"name": format!("{name}-workers"), "labels": labels},
            "spec": {"template": {"spec": {
                "image": image,
                "hostSelector": {"matchLabels": {"bench.capstan.dev/cluster": name, "bench.capstan.dev/role": "worker"}},
            }}},
        }),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": format!("{name}-workers"), "labels": labels},
            "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": node_registration}}}},
        }),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
            "metadata": {"name": format!("{name}-workers"), "labels": labels},
            "spec": {
                "clusterName": name,
                "replicas": workers,
                "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": name, "cluster.x-k8s.io/deployment-name": format!("{name}-workers")}},
                "template": {
                    "metadata": {"labels": {"cluster.x-k8s.io/cluster-name": name, "cluster.x-k8s.io/deployment-name": format!("{name}-workers")}},
                    "spec": {
                        "clusterName": name,
                        "version": "v1.31.4",
                        "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfigTemplate", "name": format!("{name}-workers")}},
                        "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3MachineTemplate", "name": format!("{name}-workers")},
                    },
                },
            },
        }),
    ]
}

/// Creates `objects` with up to 32 requests in flight.
async fn create_all(client: &kube::Client, objects: Vec<Value>) -> anyhow::Result<()> {
    futures::stream::iter(objects)
        .map(|object| async move {
            let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let object: DynamicObject = serde_json::from_value(object)?;
            api(client, &api_version, &kind)
                .create(&PostParams::default(), &object)
                .await
                .with_context(|| {
                    format!(
                        "creating {kind} {}",
                        object.metadata.name.clone().unwrap_or_default()
                    )
                })?;
            Ok::<_, anyhow::Error>(())
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Polls `check` every 500 ms until it holds, or fails after `timeout` naming `what`.
async fn until<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<String>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match check().await? {
            None => return Ok(()),
            Some(progress) => {
                if progress != last {
                    eprintln!("  {what}: {progress}");
                    last = progress;
                }
            }
        }
        if Instant::now() > deadline {
            bail!("{what}: not done within {} s ({last})", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn status_field<'a>(object: &'a DynamicObject, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(object.data.get("status")?, |value, key| value.get(key))
}

async fn api_requests(client: &kube::Client) -> u64 {
    let request = http::Request::get("/metrics").body(Vec::new());
    let Ok(request) = request else { return 0 };
    let text = client.request_text(request).await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("capstan_apiserver_requests_total"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<f64>().ok()))
        .sum::<f64>() as u64
}

async fn bench(args: &Args, data_dir: &Path) -> anyhow::Result<Figures> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut child = super::bench_hosts::spawn_server(
        data_dir,
        port,
        args.concurrency,
        args.step_ms,
        &["--simulate-workloads"],
    )?;
    let pid = child.id();
    let result = async {
        let client = capstan_runtime::client_from_kubeconfig(&data_dir.join("kubeconfig")).await?;
        let timeout = Duration::from_secs(args.timeout);
        let hosts = api(&client, "metal3.io/v1alpha1", "BareMetalHost");
        let machines = api(&client, "cluster.x-k8s.io/v1beta2", "Machine");
        let clusters = api(&client, "cluster.x-k8s.io/v1beta2", "Cluster");
        let host_count = args.count * (1 + args.workers);

        let started = Instant::now();
        create_all(
            &client,
            (0..args.count)
                .flat_map(|c| host_objects(c, args.workers))
                .collect(),
        )
        .await?;
        let all_hosts_available = || async {
            let list = hosts.list(&ListParams::default()).await?;
            let available = list
                .items
                .iter()
                .filter(|h| {
                    status_field(h, &["provisioning", "state"]).and_then(Value::as_str)
                        == Some("available")
                })
                .count();
            Ok((available < host_count)
                .then(|| format!("{available}/{host_count} hosts available")))
        };
        until("hosts", timeout, all_hosts_available).await?;
        let hosts_available_seconds = started.elapsed().as_secs_f64();

        let started = Instant::now();
        create_all(
            &client,
            (0..args.count)
                .flat_map(|c| cluster_objects(c, args.workers))
                .collect(),
        )
        .await?;
        let create_seconds = started.elapsed().as_secs_f64();
        until("machines", timeout, || async {
            let list = machines.list(&ListParams::default()).await?;
            let running = list
                .items
                .iter()
                .filter(|m| status_field(m, &["phase"]).and_then(Value::as_str) == Some("Running"))
                .filter(|m| status_field(m, &["nodeRef"]).is_some())
                .count();
            Ok((running < host_count)
                .then(|| format!("{running}/{host_count} machines Running with a Node")))
        })
        .await?;
        let running_seconds = started.elapsed().as_secs_f64();
        let (_, peak_running) = super::bench::rss_mib(pid);

        let started = Instant::now();
        for c in 0..args.count {
            clusters
                .delete(&format!("c{c}"), &DeleteParams::default())
                .await?;
        }
        until("deletion", timeout, || async {
            let left = clusters.list(&ListParams::default()).await?.items.len();
            let machines_left = machines.list(&ListParams::default()).await?.items.len();
            if left + machines_left > 0 {
                return Ok(Some(format!(
                    "{left} clusters and {machines_left} machines left"
                )));
            }
            all_hosts_available().await
        })
        .await?;
        let delete_seconds = started.elapsed().as_secs_f64();
        let (rss, peak) = super::bench::rss_mib(pid);
        Ok::<_, anyhow::Error>(Figures {
            clusters: args.count,
            machines: host_count,
            hosts_available_seconds,
            create_seconds,
            running_seconds,
            delete_seconds,
            server_cpu_seconds: super::bench_hosts::cpu_seconds(pid),
            server_peak_rss_mib: peak.max(peak_running),
            server_rss_mib: rss,
            api_requests: api_requests(&client).await,
        })
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

pub fn run(args: Args) -> anyhow::Result<Exit> {
    let dir = super::bench::tempfile_dir("clusters")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    eprintln!(
        "bench clusters: {} clusters of 1 control plane + {} workers through capstan serve --simulate-workloads…",
        args.count, args.workers
    );
    let figures = runtime.block_on(bench(&args, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    let figures = figures?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        outln!(
            "{} clusters, {} machines (fake hosts, simulated workload clusters)",
            figures.clusters,
            figures.machines
        );
        outln!(
            "  hosts available after     {:>8.2} s",
            figures.hosts_available_seconds
        );
        outln!(
            "  clusters created in       {:>8.2} s",
            figures.create_seconds
        );
        outln!(
            "  all machines Running after{:>8.2} s (from creating the clusters)",
            figures.running_seconds
        );
        outln!(
            "  deleted, hosts available {:>8.2} s",
            figures.delete_seconds
        );
        outln!(
            "  server CPU time           {:>8.2} s",
            figures.server_cpu_seconds
        );
        outln!(
            "  server peak RSS           {:>8.1} MiB (at the end {:.1} MiB)",
            figures.server_peak_rss_mib,
            figures.server_rss_mib
        );
        outln!("  API requests served       {:>8}", figures.api_requests);
    }
    Ok(Exit::Ok)
}
