//! `capstan bench hosts`: many `fake://` BareMetalHosts through a real `capstan serve` — from
//! nothing to `available` (registration, inspection by the simulated agent), then to
//! `provisioned` — timing each phase and reading the server's CPU time and peak memory.
//!
//! The fake BMC and the simulated agent replace only the machines: the API server, the store, the
//! host controller, the provisioner and the agent session registry all do their real work.
//!
//! `--server` runs another capstan build as the server, and `--against` runs one as a baseline
//! before the server under test, so two builds are compared side by side on one machine in one go
//! (`scripts/bench-hosts-against.sh` does that for a commit); the client and its figures stay the
//! same. `--keep-data` leaves the server's store behind, to see which
//! writes each host cost (its change log is the `events` table).
//!
//! Besides time, CPU and memory it reports what each host cost the server by the server's own
//! counters (`/metrics`): API requests by verb and resource, and reconciles by controller, each
//! divided by the hosts — so a regression shows as which controller woke or read more, not only
//! as more CPU. A server without a counter (an older build) leaves it out.

use crate::output::Exit;
use crate::output::outln;
use crate::stderr::errln;
use anyhow::{Context, anyhow, bail};
use capstan_model::metal3::BareMetalHost;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many of the grown counters the text output lists (JSON has them all).
const TOP_COUNTERS: usize = 15;

/// Arguments of `capstan bench hosts`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many hosts.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Hosts the controller reconciles at once.
    #[arg(long, default_value_t = 64)]
    concurrency: u16,
    /// How long the simulated agent takes per step, in milliseconds.
    #[arg(long, default_value_t = 200)]
    step_ms: u64,
    /// Give up after this many seconds per phase.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
    /// The capstan binary to run as the server (default: this one), to compare two builds.
    #[arg(long, value_name = "PATH")]
    server: Option<PathBuf>,
    /// Keep the server's data directory here instead of a temporary one, and leave it after the
    /// run. It must not exist yet. With `--against`, the two runs' are `baseline/` and `this/` in it.
    #[arg(long, value_name = "DIR")]
    keep_data: Option<PathBuf>,
    /// Run this capstan build as the server first, as a baseline, then the server under test
    /// (`--server`, or this one) with the same options, and print the two side by side.
    #[arg(long, value_name = "PATH")]
    against: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct Figures {
    hosts: usize,
    concurrency: u16,
    simulated_step_ms: u64,
    create_seconds: f64,
    to_available_seconds: f64,
    to_provisioned_seconds: f64,
    server_cpu_seconds: f64,
    server_cpu_ms_per_host: f64,
    /// Every write the store committed during the run (its last resourceVersion): the client's
    /// creates and patches and every write by the controllers.
    store_writes: u64,
    store_writes_per_host: f64,
    server_peak_rss_mib: f64,
    server_rss_mib: f64,
    /// What grew in the server's counters during the run, per host, the largest first: `verb
    /// resource` for API requests (the in-process controllers' included), `reconcile controller`
    /// for reconciles.
    server_counters_per_host: Vec<CounterPerHost>,
}

#[derive(Debug, Serialize)]
struct CounterPerHost {
    counter: String,
    per_host: f64,
}

pub(super) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name: utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Linux reports these in clock ticks of 1/100 s on every platform capstan runs on.
    (ticks(11) + ticks(12)) / 100.0
}

/// Starts `capstan serve` for a benchmark on `port` — `server` names the capstan binary, this one
/// when `None` — with the host controller's concurrency and the fake agent's step time, plus `extra`
/// arguments; returns once it is ready.
pub(super) fn spawn_server(
    server: Option<&Path>,
    data_dir: &Path,
    port: u16,
    concurrency: u16,
    step_ms: u64,
    extra: &[&str],
) -> anyhow::Result<Child> {
    let exe = match server {
        Some(server) => server.to_path_buf(),
        None => std::env::current_exe().context("locating the capstan binary")?,
    };
    let mut child = Command::new(&exe)
        .arg("serve")
        .args(extra)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--provisioning-listen", "127.0.0.1:0"])
        .args(["--host-concurrency", &concurrency.to_string()])
        .args(["--fake-step-ms", &step_ms.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {} serve", exe.display()))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .context("waiting for capstan serve")?;
    if !line.contains("ready") {
        bail!("capstan serve did not start: {line:?}");
    }
    Ok(child)
}

/// Waits until every host is in `state`, following a watch.
async fn all_in_state(
    hosts: &Api<BareMetalHost>,
    count: usize,
    state: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut states: HashMap<String, String> = HashMap::new();
    let stream = watcher(hosts.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    let waiting = async {
        while let Some(host) = stream.try_next().await? {
            let current = host
                .status
                .as_ref()
                .map(|s| s.provisioning.state.clone())
                .unwrap_or_default();
            states.insert(host.metadata.name.clone().unwrap_or_default(), current);
            if states.len() >= count && states.values().all(|s| s == state) {
                return Ok::<_, anyhow::Error>(());
            }
        }
        bail!("the watch ended")
    };
    tokio::time::timeout(timeout, waiting).await.map_err(|_| {
        anyhow!(
            "not every host reached {state} within {} s",
            timeout.as_secs()
        )
    })?
}

/// The store's latest resourceVersion, read from an empty-limit list: the count of every write
/// since the store was created (resourceVersions are the store's commit counter).
async fn store_head(secrets: &Api<Secret>) -> anyhow::Result<u64> {
    let list = secrets
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
        .context("reading the store's resourceVersion")?;
    let version = list.metadata.resource_version.unwrap_or_default();
    version
        .parse()
        .with_context(|| format!("the list's resourceVersion {version:?} is not a number"))
}

async fn bench(args: &Args, server: Option<&Path>, data_dir: &Path) -> anyhow::Result<Figures> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut child = spawn_server(server, data_dir, port, args.concurrency, args.step_ms, &[])?;
    let pid = child.id();
    let result = async {
        let client = capstan_runtime::client_from_kubeconfig(&data_dir.join("kubeconfig")).await?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
        let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), "default");
        let timeout = Duration::from_secs(args.timeout);
        let counters_before = super::bench_clusters::Counters::read(&client).await;
        let started = Instant::now();
        futures::stream::iter(0..args.count)
            .map(|i| {
                let (secrets, hosts) = (secrets.clone(), hosts.clone());
                async move {
                    let secret: Secret = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": format!("host-{i}-bmc")},
                        "stringData": {"username": "admin", "password": "password"},
                    }))?;
                    secrets.create(&PostParams::default(), &secret).await?;
                    let host: BareMetalHost = serde_json::from_value(json!({
                        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                        "metadata": {"name": format!("host-{i}")},
                        "spec": {
                            "online": true,
                            "bmc": {"address": format!("fake://bench/host-{i}"), "credentialsName": format!("host-{i}-bmc")},
                        },
                    }))?;
                    hosts.create(&PostParams::default(), &host).await?;
                    Ok::<_, anyhow::Error>(())
                }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<()>>()
            .await?;
        let create_seconds = started.elapsed().as_secs_f64();
        all_in_state(&hosts, args.count, "available", timeout).await?;
        let to_available_seconds = started.elapsed().as_secs_f64();
        let provisioning = Instant::now();
        let image = json!({"spec": {"image": {
            "url": "http://images.example/node.img",
            "checksum": "0".repeat(64),
            "checksumType": "sha256",
            "format": "raw",
        }}});
        futures::stream::iter(0..args.count)
            .map(|i| {
                let (hosts, image) = (hosts.clone(), image.clone());
                async move {
                    hosts
                        .patch(&format!("host-{i}"), &PatchParams::default(), &Patch::Merge(&image))
                        .await?;
                    Ok::<_, anyhow::Error>(())
                }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<()>>()
            .await?;
        all_in_state(&hosts, args.count, "provisioned", timeout).await?;
        let to_provisioned_seconds = provisioning.elapsed().as_secs_f64();
        let (rss, peak) = super::bench::rss_mib(pid);
        let server_cpu_seconds = cpu_seconds(pid);
        let store_writes = store_head(&secrets).await?;
        let counters_after = super::bench_clusters::Counters::read(&client).await;
        let per_host = |value: f64| value / args.count.max(1) as f64;
        let server_counters_per_host = counters_after
            .since(&counters_before)
            .into_iter()
            .map(|(counter, grown)| CounterPerHost {
                counter,
                per_host: per_host(grown as f64),
            })
            .collect();
        Ok::<_, anyhow::Error>(Figures {
            hosts: args.count,
            concurrency: args.concurrency,
            simulated_step_ms: args.step_ms,
            create_seconds,
            to_available_seconds,
            to_provisioned_seconds,
            server_cpu_seconds,
            server_cpu_ms_per_host: per_host(server_cpu_seconds * 1000.0),
            store_writes,
            store_writes_per_host: per_host(store_writes as f64),
            server_peak_rss_mib: peak,
            server_rss_mib: rss,
            server_counters_per_host,
        })
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// One run of the benchmark against `server` (default: this binary), its store in `data_dir`,
/// which is removed afterwards unless `keep` says to leave it.
fn measure(
    runtime: &tokio::runtime::Runtime,
    args: &Args,
    server: Option<&Path>,
    data_dir: &Path,
    keep: bool,
) -> anyhow::Result<Figures> {
    let figures = runtime.block_on(bench(args, server, data_dir));
    if !keep {
        let _ = std::fs::remove_dir_all(data_dir);
    }
    figures
}

pub fn run(args: Args) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let keep = args.keep_data.is_some();
    if let Some(dir) = &args.keep_data {
        std::fs::create_dir(dir)
            .with_context(|| format!("creating --keep-data {}", dir.display()))?;
    }
    // Each run's store: the kept directory itself, or its `run/` when there are two runs.
    let dir_for = |run: &str| -> anyhow::Result<PathBuf> {
        match (&args.keep_data, &args.against) {
            (Some(dir), None) => Ok(dir.clone()),
            (Some(dir), Some(_)) => {
                let dir = dir.join(run);
                std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
                Ok(dir)
            }
            (None, _) => super::bench::tempfile_dir(&format!("hosts-{run}")),
        }
    };
    let baseline = match args.against.as_deref() {
        Some(server) => {
            errln!(
                "bench hosts: {} fake hosts through the baseline {}…",
                args.count,
                server.display()
            );
            let figures = measure(&runtime, &args, Some(server), &dir_for("baseline")?, keep)?;
            Some((server, figures))
        }
        None => None,
    };
    errln!(
        "bench hosts: {} fake hosts through {}…",
        args.count,
        if baseline.is_some() {
            "the server under test"
        } else {
            "capstan serve"
        }
    );
    let this = measure(
        &runtime,
        &args,
        args.server.as_deref(),
        &dir_for("this")?,
        keep,
    )?;
    match (baseline, args.json) {
        (None, true) => outln!("{}", serde_json::to_string_pretty(&this)?),
        (None, false) => print_figures(&this),
        (Some((_, baseline)), true) => outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"baseline": baseline, "this": this}))?
        ),
        (Some((server, baseline)), false) => print_side_by_side(server, &baseline, &this),
    }
    Ok(Exit::Ok)
}

fn print_figures(figures: &Figures) {
    outln!(
        "{} fake hosts (controller concurrency {}, simulated agent step {} ms)",
        figures.hosts,
        figures.concurrency,
        figures.simulated_step_ms
    );
    outln!("  created in            {:>8.2} s", figures.create_seconds);
    outln!(
        "  all available after   {:>8.2} s",
        figures.to_available_seconds
    );
    outln!(
        "  all provisioned after {:>8.2} s (from setting the image)",
        figures.to_provisioned_seconds
    );
    outln!(
        "  server CPU time       {:>8.2} s ({:.1} ms per host)",
        figures.server_cpu_seconds,
        figures.server_cpu_ms_per_host
    );
    outln!(
        "  store writes          {:>8} ({:.1} per host)",
        figures.store_writes,
        figures.store_writes_per_host
    );
    outln!(
        "  server peak RSS       {:>8.1} MiB (now {:.1} MiB)",
        figures.server_peak_rss_mib,
        figures.server_rss_mib
    );
    if !figures.server_counters_per_host.is_empty() {
        outln!("  per host, by the server's counters (the largest {TOP_COUNTERS}):");
        for counter in figures.server_counters_per_host.iter().take(TOP_COUNTERS) {
            outln!("    {:>8.2}  {}", counter.per_host, counter.counter);
        }
    }
}

/// The figures of both runs in columns, with this run's change against the baseline; of the
/// counters, those that changed, the largest first.
fn print_side_by_side(baseline_server: &Path, baseline: &Figures, this: &Figures) {
    outln!(
        "{} fake hosts (controller concurrency {}, simulated agent step {} ms); baseline: {}",
        this.hosts,
        this.concurrency,
        this.simulated_step_ms,
        baseline_server.display()
    );
    outln!(
        "  {:<34} {:>10} {:>10} {:>8}",
        "",
        "baseline",
        "this",
        "change"
    );
    let row = |name: &str, a: f64, b: f64| {
        outln!("  {name:<34} {a:>10.2} {b:>10.2} {:>8}", change(a, b));
    };
    row(
        "to available (s)",
        baseline.to_available_seconds,
        this.to_available_seconds,
    );
    row(
        "to provisioned (s)",
        baseline.to_provisioned_seconds,
        this.to_provisioned_seconds,
    );
    row(
        "server CPU per host (ms)",
        baseline.server_cpu_ms_per_host,
        this.server_cpu_ms_per_host,
    );
    row(
        "store writes per host",
        baseline.store_writes_per_host,
        this.store_writes_per_host,
    );
    row(
        "server peak RSS (MiB)",
        baseline.server_peak_rss_mib,
        this.server_peak_rss_mib,
    );
    let per_host = |figures: &Figures| -> HashMap<String, f64> {
        figures
            .server_counters_per_host
            .iter()
            .map(|c| (c.counter.clone(), c.per_host))
            .collect()
    };
    let (a, b) = (per_host(baseline), per_host(this));
    let mut counters: Vec<(&String, f64, f64)> = a
        .keys()
        .chain(b.keys().filter(|k| !a.contains_key(*k)))
        .map(|k| {
            (
                k,
                a.get(k).copied().unwrap_or(0.0),
                b.get(k).copied().unwrap_or(0.0),
            )
        })
        .filter(|(_, x, y)| (x - y).abs() >= 0.05)
        .collect();
    counters.sort_by(|x, y| {
        y.1.max(y.2)
            .total_cmp(&x.1.max(x.2))
            .then_with(|| x.0.cmp(y.0))
    });
    if !counters.is_empty() {
        outln!("  per host, by the servers' counters, where they differ:");
        for (counter, x, y) in counters.into_iter().take(TOP_COUNTERS) {
            row(&format!("  {counter}"), x, y);
        }
    }
}

/// `b` against `a` in percent, or what appeared or went.
fn change(a: f64, b: f64) -> String {
    if a == 0.0 && b == 0.0 {
        "=".into()
    } else if a == 0.0 {
        "new".into()
    } else if b == 0.0 {
        "gone".into()
    } else {
        format!("{:+.0}%", (b - a) / a * 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::change;

    #[test]
    fn a_change_is_told_in_percent_or_as_what_appeared_or_went() {
        assert_eq!(change(20.0, 30.0), "+50%");
        assert_eq!(change(40.0, 30.0), "-25%");
        assert_eq!(change(0.0, 19.0), "new");
        assert_eq!(change(37.0, 0.0), "gone");
        assert_eq!(change(0.0, 0.0), "=");
    }
}
