//! `capstan bench kvm`: the KVM provider at scale and per real VM.
//!
//! Default: many clusters of one control plane and some workers, all KVMMachines (from
//! KVMMachineTemplates, through KubeadmControlPlane and MachineDeployment), through a real
//! `capstan serve --simulate-workloads` whose hypervisors are libvirt's simulated `test:///`
//! driver described by node files the benchmark writes (CPUs, memory, a pool each). Created →
//! every Machine `Running` with a Node → deleted (every KVMMachine gone, so every domain and
//! volume released), timing each phase and reading the server's CPU time, peak memory and the
//! API requests it served. Real: the API server, every controller, the KVM provider and libvirt's
//! driver API; simulated: the hypervisors' data path and the workload clusters.
//!
//! `--real URI` (e.g. `qemu:///system`): capstan's own time per real VM, everything but the guest's
//! boot — placement, base image (the first VM only; `--image`), volumes, the cloud-init medium,
//! the domain defined and started — measured one VM at a time from creating its KVMMachine to
//! `initialization.provisioned`, then deleted (domain and volumes removed) one at a time.

use super::bench_clusters::{Counters, api, create_all, create_one, follow, status_field};
use crate::output::{Exit, outln};
use crate::stderr::errln;
use anyhow::{Context, bail};
use kube::api::{DeleteParams, DynamicObject, ListParams};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `capstan bench kvm`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many clusters (each 1 control plane + `--workers` workers).
    #[arg(long, default_value_t = 50)]
    count: usize,
    /// Workers per cluster.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Simulated hypervisors the machines are spread over.
    #[arg(long, default_value_t = 4)]
    hypervisors: usize,
    /// Objects each controller reconciles at once.
    #[arg(long, default_value_t = 64)]
    concurrency: u16,
    /// Give up after this many seconds per phase.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Measure capstan's own time per VM on this real hypervisor instead (e.g. qemu:///system).
    #[arg(long)]
    real: Option<String>,
    /// With --real: the storage pool.
    #[arg(long, default_value = "default")]
    pool: String,
    /// With --real: the libvirt domain type (`kvm`, or `qemu` for software emulation).
    #[arg(long, default_value = "qemu")]
    domain_type: String,
    /// With --real: VMs made one after another.
    #[arg(long, default_value_t = 5)]
    vms: usize,
    /// With --real: a base image (qcow2) on this host, fetched into the pool by the first VM.
    #[arg(long)]
    image: Option<PathBuf>,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Figures {
    clusters: usize,
    machines: usize,
    hypervisors: usize,
    create_seconds: f64,
    running_seconds: f64,
    delete_seconds: f64,
    server_cpu_seconds: f64,
    server_peak_rss_mib: f64,
    server_rss_mib: f64,
    api_requests: u64,
    running_api_requests: u64,
    load_average: String,
}

#[derive(Debug, Serialize)]
struct RealFigures {
    hypervisor: String,
    vms: usize,
    /// Creating each KVMMachine until it was provisioned (its domain started), in seconds.
    provision_seconds: Vec<f64>,
    /// The provider's VMStarted Event of each VM: the time of its storage and domain steps.
    steps: Vec<String>,
    /// Deleting each KVMMachine until it was gone (domain and volumes removed), in seconds.
    delete_seconds: Vec<f64>,
    server_cpu_seconds: f64,
    server_peak_rss_mib: f64,
    load_average: String,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A simulated hypervisor's node file: CPUs, memory and a pool called `default`.
fn node_file(dir: &Path, index: usize) -> anyhow::Result<String> {
    let path = dir.join(format!("hv{index}.xml"));
    std::fs::write(
        &path,
        format!(
            "<node><cpu><mhz>2000</mhz><model>bench</model><nodes>1</nodes><sockets>1</sockets><cores>256</cores><threads>1</threads></cpu>\
<memory>{}</memory>\
<pool type='dir'><name>default</name><uuid>35bb2ad9-388a-cdfe-461a-b8907f6e{index:04x}</uuid><target><path>/bench-hv{index}-pool</path></target></pool>\
<network><name>default</name><uuid>004b96e1-2d78-c30f-5aa5-f03c87d2{index:04x}</uuid><bridge name='virbr0'/><forward/>\
<ip address='192.168.122.1' netmask='255.255.255.0'/></network></node>",
            1u64 << 30 // KiB: 1 TiB
        ),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    Ok(format!("test://{}", path.display()))
}

/// Cluster `c`: KVMCluster on `hypervisors`, a KubeadmControlPlane of one and a MachineDeployment
/// of `workers`, both on KVMMachineTemplates.
fn cluster_objects(c: usize, workers: usize, hypervisors: &[String]) -> Vec<Value> {
    let name = format!("k{c}");
    let labels = json!({"cluster.x-k8s.io/cluster-name": name});
    let endpoint = json!({"host": "192.0.2.10", "port": 6443});
    let node_registration = json!({"name": "{{ ds.meta_data.local_hostname }}"});
    let template = json!({"resources": {"cpu": 1, "memory": "256Mi", "disk": "1Gi"}});
    let hypervisors: Vec<Value> = hypervisors
        .iter()
        .enumerate()
        .map(|(i, uri)| json!({"name": format!("hv{i}"), "uri": uri, "pool": "default"}))
        .collect();
    vec![
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/12"]}},
                "controlPlaneEndpoint": endpoint,
                "controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": format!("{name}-cp")},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMCluster", "name": name},
            },
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMCluster",
            "metadata": {"name": name, "labels": labels},
            "spec": {"controlPlaneEndpoint": endpoint, "hypervisors": hypervisors},
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMMachineTemplate",
            "metadata": {"name": format!("{name}-vm"), "labels": labels},
            "spec": {"template": {"spec": template}},
        }),
        json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
            "metadata": {"name": format!("{name}-cp"), "labels": labels},
            "spec": {
                "replicas": 1,
                "version": "v1.31.4",
                "machineTemplate": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMMachineTemplate", "name": format!("{name}-vm")}},
                "kubeadmConfigSpec": {
                    "initConfiguration": {"nodeRegistration": node_registration},
                    "joinConfiguration": {"nodeRegistration": node_registration},
                },
            },
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
                        "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMMachineTemplate", "name": format!("{name}-vm")},
                    },
                },
            },
        }),
    ]
}

async fn bench(args: &Args, data_dir: &Path) -> anyhow::Result<Figures> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let hypervisors = (0..args.hypervisors)
        .map(|i| node_file(data_dir, i))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut child = super::bench_hosts::spawn_server(
        None,
        &data_dir.join("serve"),
        port,
        args.concurrency,
        200,
        &["--simulate-workloads"],
    )?;
    let pid = child.id();
    let result = async {
        let client =
            capstan_runtime::client_from_kubeconfig(&data_dir.join("serve").join("kubeconfig"))
                .await?;
        let timeout = Duration::from_secs(args.timeout);
        let machines = api(&client, "cluster.x-k8s.io/v1beta2", "Machine");
        let kvm_machines = api(
            &client,
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "KVMMachine",
        );
        let clusters = api(&client, "cluster.x-k8s.io/v1beta2", "Cluster");
        let count = args.count * (1 + args.workers);

        let before = Counters::read(&client).await;
        let started = Instant::now();
        create_all(
            &client,
            (0..args.count)
                .flat_map(|c| cluster_objects(c, args.workers, &hypervisors))
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
                (running < count).then(|| format!("{running}/{count} machines Running with a Node"))
            },
        )
        .await?;
        let running_seconds = started.elapsed().as_secs_f64();
        let (_, peak_running) = super::bench::rss_mib(pid);
        let running_counters = Counters::read(&client).await;

        let started = Instant::now();
        for c in 0..args.count {
            clusters
                .delete(&format!("k{c}"), &DeleteParams::default())
                .await?;
        }
        for (kind, objects) in [
            ("KVMMachines", &kvm_machines),
            ("Machines", &machines),
            ("Clusters", &clusters),
        ] {
            gone(kind, objects, timeout).await?;
        }
        let delete_seconds = started.elapsed().as_secs_f64();
        let (rss, peak) = super::bench::rss_mib(pid);
        let end = Counters::read(&client).await;
        Ok::<_, anyhow::Error>(Figures {
            clusters: args.count,
            machines: count,
            hypervisors: args.hypervisors,
            create_seconds,
            running_seconds,
            delete_seconds,
            server_cpu_seconds: super::bench_hosts::cpu_seconds(pid),
            server_peak_rss_mib: peak.max(peak_running),
            server_rss_mib: rss,
            api_requests: end.requests().saturating_sub(before.requests()),
            running_api_requests: running_counters
                .requests()
                .saturating_sub(before.requests()),
            load_average: load_average(),
        })
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// Waits until no object of `api` is left, looking at one a time (a list of one, every 100 ms).
async fn gone(kind: &str, api: &kube::Api<DynamicObject>, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = api.list(&ListParams::default().limit(1)).await?;
        if left.items.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{kind} not deleted within {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn bench_real(args: &Args, uri: &str, data_dir: &Path) -> anyhow::Result<RealFigures> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut child = super::bench_hosts::spawn_server(
        None,
        &data_dir.join("serve"),
        port,
        args.concurrency,
        200,
        &[],
    )?;
    let pid = child.id();
    let result = async {
        let client =
            capstan_runtime::client_from_kubeconfig(&data_dir.join("serve").join("kubeconfig"))
                .await?;
        let image = match &args.image {
            Some(path) => {
                let bytes = std::fs::read(path)
                    .with_context(|| format!("reading --image {}", path.display()))?;
                let digest: String = sha2::Sha256::digest(&bytes)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                Some(json!({"url": format!("file://{}", path.display()), "checksum": digest, "format": "qcow2"}))
            }
            None => None,
        };
        create_all(&client, vec![
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "real"},
                "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMCluster", "name": "real"}},
            }),
            json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMCluster",
                "metadata": {"name": "real", "labels": {"cluster.x-k8s.io/cluster-name": "real"}},
                "spec": {"controlPlaneEndpoint": {"host": "192.0.2.10", "port": 6443},
                         "hypervisors": [{"name": "real", "uri": uri, "pool": args.pool, "domainType": args.domain_type}]},
            }),
        ])
        .await?;
        let kvm_machines = api(&client, "infrastructure.cluster.x-k8s.io/v1beta2", "KVMMachine");
        let mut provision_seconds = Vec::new();
        let mut step_messages = Vec::new();
        for i in 0..args.vms {
            let name = format!("bench-vm-{i}");
            create_one(&client, json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{name}-bootstrap")},
                "stringData": {"value": "#cloud-config\n"},
            }))
            .await?;
            let machine = create_one(&client, json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "real"}},
                "spec": {"clusterName": "real", "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                         "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMMachine", "name": name}},
            }))
            .await?;
            let mut spec = json!({"resources": {"cpu": 1, "memory": "128Mi", "disk": "2Gi"}, "networks": [{"user": true}]});
            if let Some(image) = &image {
                spec["image"] = image.clone();
            }
            let started = Instant::now();
            create_one(&client, json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMMachine",
                "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "real"},
                             "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": name, "uid": machine.metadata.uid}]},
                "spec": spec,
            }))
            .await?;
            let deadline = Instant::now() + Duration::from_secs(args.timeout);
            loop {
                let current = kvm_machines.get(&name).await?;
                if status_field(&current, &["initialization", "provisioned"]).and_then(Value::as_bool)
                    == Some(true)
                {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("{name} not provisioned: {:?}", current.data.get("status"));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            provision_seconds.push(started.elapsed().as_secs_f64());
            // The provider's own step times, from its VMStarted Event.
            let events = api(&client, "v1", "Event")
                .list(&ListParams::default())
                .await?;
            if let Some(message) = events.items.iter().find_map(|e| {
                (e.data["reason"] == "VMStarted" && e.data["involvedObject"]["name"] == name.as_str())
                    .then(|| e.data["message"].as_str().map(str::to_owned))?
            }) {
                step_messages.push(message);
            }
        }
        let (_, peak) = super::bench::rss_mib(pid);
        let mut delete_seconds = Vec::new();
        for i in 0..args.vms {
            let name = format!("bench-vm-{i}");
            let started = Instant::now();
            kvm_machines.delete(&name, &DeleteParams::default()).await?;
            let deadline = Instant::now() + Duration::from_secs(args.timeout);
            while kvm_machines.get_opt(&name).await?.is_some() {
                if Instant::now() > deadline {
                    bail!("{name} not deleted");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            delete_seconds.push(started.elapsed().as_secs_f64());
        }
        Ok::<_, anyhow::Error>(RealFigures {
            hypervisor: uri.to_owned(),
            vms: args.vms,
            provision_seconds,
            steps: step_messages,
            delete_seconds,
            server_cpu_seconds: super::bench_hosts::cpu_seconds(pid),
            server_peak_rss_mib: peak,
            load_average: load_average(),
        })
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn run(args: Args) -> anyhow::Result<Exit> {
    let dir = super::bench::tempfile_dir("kvm")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    if let Some(uri) = args.real.clone() {
        errln!(
            "bench kvm: {} VMs one at a time on {uri} through capstan serve…",
            args.vms
        );
        let figures = runtime.block_on(bench_real(&args, &uri, &dir));
        let _ = std::fs::remove_dir_all(&dir);
        let figures = figures?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&figures)?);
        } else {
            let rest = figures.provision_seconds.get(1..).unwrap_or_default();
            outln!(
                "{} VMs on {}, one at a time (load average {})",
                figures.vms,
                figures.hypervisor,
                figures.load_average
            );
            outln!(
                "  KVMMachine created -> provisioned (domain started): first {:.3} s, then median {:.3} s (max {:.3} s)",
                figures
                    .provision_seconds
                    .first()
                    .copied()
                    .unwrap_or(f64::NAN),
                median(rest),
                rest.iter().copied().fold(f64::NAN, f64::max)
            );
            for (i, steps) in figures.steps.iter().enumerate() {
                let times = steps.rsplit_once(" (").map_or(steps.as_str(), |(_, t)| t);
                outln!("  VM {i}: {}", times.trim_end_matches(')'));
            }
            outln!(
                "  KVMMachine deleted -> gone (domain, volumes removed): median {:.3} s",
                median(&figures.delete_seconds)
            );
            outln!(
                "  server CPU time {:.2} s, peak RSS {:.1} MiB",
                figures.server_cpu_seconds,
                figures.server_peak_rss_mib
            );
        }
        return Ok(Exit::Ok);
    }
    errln!(
        "bench kvm: {} clusters of 1 control plane + {} workers on {} simulated hypervisors through capstan serve --simulate-workloads…",
        args.count,
        args.workers,
        args.hypervisors
    );
    let figures = runtime.block_on(bench(&args, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    let figures = figures?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        outln!(
            "{} clusters, {} KVMMachines on {} simulated hypervisors (libvirt test driver; simulated workload clusters)",
            figures.clusters,
            figures.machines,
            figures.hypervisors
        );
        outln!(
            "  clusters created in        {:>8.2} s",
            figures.create_seconds
        );
        outln!(
            "  all machines Running after {:>8.2} s (from creating the clusters)",
            figures.running_seconds
        );
        outln!(
            "  deleted (KVMMachines gone) {:>8.2} s",
            figures.delete_seconds
        );
        outln!(
            "  server CPU time            {:>8.2} s",
            figures.server_cpu_seconds
        );
        outln!(
            "  server peak RSS            {:>8.1} MiB (at the end {:.1} MiB)",
            figures.server_peak_rss_mib,
            figures.server_rss_mib
        );
        outln!(
            "  API requests served        {:>8} ({} until Running)",
            figures.api_requests,
            figures.running_api_requests
        );
        outln!("  load average at the end    {}", figures.load_average);
    }
    Ok(Exit::Ok)
}
