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
use crate::stderr::errln;
use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
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
    /// Also print the API requests by verb and resource, and the reconciles by controller, of the
    /// creation and the deletion phase (the most frequent first).
    #[arg(long)]
    breakdown: bool,
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
    /// API requests from creating the clusters until every Machine was Running.
    running_api_requests: u64,
    /// Requests and reconciles of the creation phase by (verb, resource) and controller, the
    /// most frequent first (with `--breakdown`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    running_breakdown: Vec<(String, u64)>,
    /// The same for the deletion phase.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    delete_breakdown: Vec<(String, u64)>,
}

pub(super) fn api(client: &kube::Client, api_version: &str, kind: &str) -> Api<DynamicObject> {
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
/// Creates `object` (a manifest with `apiVersion` and `kind`); answers it as stored.
pub(super) async fn create_one(
    client: &kube::Client,
    object: Value,
) -> anyhow::Result<DynamicObject> {
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
        })
}

pub(super) async fn create_all(client: &kube::Client, objects: Vec<Value>) -> anyhow::Result<()> {
    futures::stream::iter(objects)
        .map(|object| async move { create_one(client, object).await.map(drop) })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Follows `api` with a watch until `pending` (given how many objects exist and how many of them
/// `counts`) answers `None`, printing its progress as it changes; fails after `timeout` naming
/// `what`. A watch, not a list per poll: the benchmark's own reads stay small beside the work it
/// measures, whatever the number of objects.
pub(super) async fn follow<C, P>(
    what: &str,
    api: &Api<DynamicObject>,
    timeout: Duration,
    counts: C,
    pending: P,
) -> anyhow::Result<()>
where
    C: Fn(&DynamicObject) -> bool,
    P: Fn(usize, usize) -> Option<String>,
{
    #[derive(Default)]
    struct Tally {
        objects: std::collections::HashMap<String, bool>,
        counted: usize,
    }
    impl Tally {
        fn set(&mut self, name: String, counts: bool) {
            if self.objects.insert(name, counts) == Some(true) {
                self.counted -= 1;
            }
            if counts {
                self.counted += 1;
            }
        }
        fn remove(&mut self, name: &str) {
            if self.objects.remove(name) == Some(true) {
                self.counted -= 1;
            }
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let stream = kube::runtime::watcher(api.clone(), kube::runtime::watcher::Config::default());
    let mut stream = std::pin::pin!(stream);
    let mut current = Tally::default();
    // Filled while a (re)list runs, then replaces `current`.
    let mut listing: Option<Tally> = None;
    let mut last = String::new();
    let mut shown = Instant::now();
    loop {
        if listing.is_none() {
            match pending(current.objects.len(), current.counted) {
                None => return Ok(()),
                Some(progress) => {
                    if progress != last && shown.elapsed() >= Duration::from_secs(1) {
                        errln!("  {what}: {progress}");
                        shown = Instant::now();
                        last = progress;
                    }
                }
            }
        }
        let event = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => bail!("{what}: not done within {} s ({last})", timeout.as_secs()),
            Ok(None) => bail!("{what}: the watch ended"),
            Ok(Some(Err(err))) => {
                // The watcher lists again after an error; give the server a moment first.
                errln!("  {what}: watch: {err}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Ok(Some(Ok(event))) => event,
        };
        use kube::runtime::watcher::Event;
        match event {
            Event::Init => listing = Some(Tally::default()),
            Event::InitApply(o) => {
                let counted = counts(&o);
                if let Some(tally) = listing.as_mut() {
                    tally.set(o.metadata.name.clone().unwrap_or_default(), counted);
                }
            }
            Event::InitDone => {
                if let Some(tally) = listing.take() {
                    current = tally;
                }
            }
            Event::Apply(o) => {
                let counted = counts(&o);
                current.set(o.metadata.name.clone().unwrap_or_default(), counted);
            }
            Event::Delete(o) => current.remove(o.metadata.name.as_deref().unwrap_or_default()),
        }
    }
}

pub(super) fn status_field<'a>(object: &'a DynamicObject, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(object.data.get("status")?, |value, key| value.get(key))
}

/// The server's counters: API requests by `verb resource` and reconciles by `reconcile
/// controller`.
#[derive(Clone, Debug, Default)]
pub(super) struct Counters(std::collections::BTreeMap<String, u64>);

impl Counters {
    pub(super) async fn read(client: &kube::Client) -> Self {
        let request = http::Request::get("/metrics").body(Vec::new());
        let Ok(request) = request else {
            return Self::default();
        };
        let text = client.request_text(request).await.unwrap_or_default();
        Self::parse(&text)
    }

    fn parse(text: &str) -> Self {
        let label = |labels: &str, name: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let mut counters = std::collections::BTreeMap::new();
        for line in text.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let Some((name, labels)) = series.split_once('{') else {
                continue;
            };
            let labels = labels.trim_end_matches('}');
            let key = match name {
                "capstan_apiserver_requests_total" => {
                    format!("{} {}", label(labels, "verb"), label(labels, "resource"))
                }
                "capstan_apiserver_controller_reconciles_total" => {
                    format!("reconcile {}", label(labels, "controller"))
                }
                _ => continue,
            };
            *counters.entry(key).or_default() += value as u64;
        }
        Self(counters)
    }

    pub(super) fn requests(&self) -> u64 {
        self.0
            .iter()
            .filter(|(k, _)| !k.starts_with("reconcile "))
            .map(|(_, v)| v)
            .sum()
    }

    /// What grew since `before`, the largest first.
    pub(super) fn since(&self, before: &Self) -> Vec<(String, u64)> {
        let mut grown: Vec<(String, u64)> = self
            .0
            .iter()
            .map(|(k, v)| (k.clone(), v - before.0.get(k).copied().unwrap_or(0).min(*v)))
            .filter(|(_, v)| *v > 0)
            .collect();
        grown.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        grown
    }
}

async fn bench(args: &Args, data_dir: &Path) -> anyhow::Result<Figures> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut child = super::bench_hosts::spawn_server(
        None,
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
        let is_available = |h: &DynamicObject| {
            status_field(h, &["provisioning", "state"]).and_then(Value::as_str) == Some("available")
        };
        let hosts_pending = |_: usize, available: usize| {
            (available < host_count).then(|| format!("{available}/{host_count} hosts available"))
        };
        follow("hosts", &hosts, timeout, is_available, hosts_pending).await?;
        let hosts_available_seconds = started.elapsed().as_secs_f64();

        let before_clusters = Counters::read(&client).await;
        let started = Instant::now();
        create_all(
            &client,
            (0..args.count)
                .flat_map(|c| cluster_objects(c, args.workers))
                .collect(),
        )
        .await?;
        let create_seconds = started.elapsed().as_secs_f64();
        follow(
            "machines",
            &machines,
            timeout,
            |m| {
                status_field(m, &["phase"]).and_then(Value::as_str) == Some("Running")
                    && status_field(m, &["nodeRef"]).is_some()
            },
            |_, running| {
                (running < host_count)
                    .then(|| format!("{running}/{host_count} machines Running with a Node"))
            },
        )
        .await?;
        let running_seconds = started.elapsed().as_secs_f64();
        let (_, peak_running) = super::bench::rss_mib(pid);
        let running_counters = Counters::read(&client).await;

        let started = Instant::now();
        for c in 0..args.count {
            clusters
                .delete(&format!("c{c}"), &DeleteParams::default())
                .await?;
        }
        let left = |kind: &'static str| {
            move |objects: usize, _: usize| (objects > 0).then(|| format!("{objects} {kind} left"))
        };
        follow("deletion", &machines, timeout, |_| true, left("machines")).await?;
        follow("deletion", &clusters, timeout, |_| true, left("clusters")).await?;
        follow("deletion", &hosts, timeout, is_available, hosts_pending).await?;
        let delete_seconds = started.elapsed().as_secs_f64();
        let (rss, peak) = super::bench::rss_mib(pid);
        let end_counters = Counters::read(&client).await;
        let (running_breakdown, delete_breakdown) = if args.breakdown {
            (
                running_counters.since(&before_clusters),
                end_counters.since(&running_counters),
            )
        } else {
            (Vec::new(), Vec::new())
        };
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
            api_requests: end_counters.requests(),
            running_api_requests: running_counters
                .requests()
                .saturating_sub(before_clusters.requests()),
            running_breakdown,
            delete_breakdown,
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
    errln!(
        "bench clusters: {} clusters of 1 control plane + {} workers through capstan serve --simulate-workloads…",
        args.count,
        args.workers
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
        outln!(
            "  API requests served       {:>8} ({} until Running)",
            figures.api_requests,
            figures.running_api_requests
        );
        for (phase, breakdown) in [
            ("until Running", &figures.running_breakdown),
            ("deletion", &figures.delete_breakdown),
        ] {
            if breakdown.is_empty() {
                continue;
            }
            outln!("  {phase}, by request and by controller:");
            for (what, count) in breakdown.iter().take(40) {
                outln!("    {count:>9}  {what}");
            }
        }
    }
    Ok(Exit::Ok)
}
