//! `capstan bench store`: measures the embedded management plane as a client sees it — durable create
//! and update throughput, watch delivery latency with many watchers, memory at a given object count
//! and restart-to-ready time — and, in the same run on the same machine, Debian's etcd doing the same
//! work through its HTTP gateway, as the yardstick for a durable store.
//!
//! Every write in both systems is acknowledged only after it is durable (capstan: SQLite WAL with
//! `synchronous=FULL` and group commit; etcd: its WAL fsync). Watch latency is measured from just
//! before a create is sent to the moment each watcher receives the event, so it includes the commit.

use crate::output::Exit;
use crate::output::outln;
use crate::stderr::errln;
use anyhow::{Context, anyhow, bail};
use base64::Engine;
use bytes::Bytes;
use futures::{AsyncBufReadExt, TryStreamExt};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Arguments of `capstan bench store`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Creates measured for throughput.
    #[arg(long, default_value_t = 20_000)]
    creates: usize,
    /// Updates measured for throughput.
    #[arg(long, default_value_t = 10_000)]
    updates: usize,
    /// Objects stored when memory and restart time are measured.
    #[arg(long, default_value_t = 100_000)]
    objects: usize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 32)]
    writers: usize,
    /// Concurrent watchers.
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// Events each watcher must receive.
    #[arg(long, default_value_t = 500)]
    watch_events: usize,
    /// The etcd binary to compare with (skipped when absent).
    #[arg(long, default_value = "etcd")]
    etcd: PathBuf,
    /// Skip the etcd comparison.
    #[arg(long)]
    no_etcd: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// What one system measured.
#[derive(Debug, Default, serde::Serialize)]
struct Figures {
    system: String,
    creates_per_second: f64,
    updates_per_second: f64,
    watch_p50_ms: f64,
    watch_p99_ms: f64,
    watch_events_delivered: usize,
    objects: usize,
    rss_mib: f64,
    peak_rss_mib: f64,
    restart_to_ready_seconds: f64,
    /// Highest RSS while idle for a little over one garbage-collector discovery interval.
    idle_rss_mib: f64,
    /// Peak memory above the resting RSS one request of each kind costs (a list without a
    /// limit, the same list as a Table, a watch without a resourceVersion).
    list_extra_mib: f64,
    table_extra_mib: f64,
    watch_extra_mib: f64,
}

/// Reports each phase of a run on stderr as it ends, with its duration: a 400,000-object run takes
/// many minutes, and a phase that stalls should show which one it is.
struct Phases {
    system: &'static str,
    started: Instant,
}

impl Phases {
    fn new(system: &'static str) -> Self {
        Self {
            system,
            started: Instant::now(),
        }
    }

    fn done(&mut self, phase: &str) {
        errln!(
            "{}: {phase} ({:.1} s)",
            self.system,
            self.started.elapsed().as_secs_f64()
        );
        self.started = Instant::now();
    }
}

/// Resets the peak (VmHWM) of a process, so that the next peak is one request's.
fn reset_peak(pid: u32) {
    // Writing 5 to clear_refs resets the peak resident set size (Linux 4.0 and later).
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// The peak memory above the resting RSS that `request` costs the server `pid`.
async fn request_extra_mib(
    pid: u32,
    request: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<f64> {
    let (resting, _) = rss_mib(pid);
    reset_peak(pid);
    request.await?;
    let (_, peak) = rss_mib(pid);
    Ok((peak - resting).max(0.0))
}

fn now_nanos() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    )
    .unwrap_or(u64::MAX)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round();
    sorted[(rank as usize).min(sorted.len() - 1)]
}

/// VmRSS and VmHWM of a process, in MiB.
pub(super) fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Payload of about 1 KiB, as a realistic small object.
fn padding() -> String {
    "x".repeat(900)
}

/// Runs `work(i)` for i in 0..total on `writers` concurrent tasks; returns operations per second.
async fn concurrently<F, Fut>(total: usize, writers: usize, work: F) -> anyhow::Result<f64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let work = Arc::new(work);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let next = next.clone();
        let work = work.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<(), anyhow::Error>(());
                }
                work(i).await?;
            }
        }));
    }
    for t in tasks {
        t.await.context("writer task")??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

pub fn run(args: Args) -> anyhow::Result<Exit> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut results = vec![runtime.block_on(bench_capstan(&args))?];
    let etcd_available = !args.no_etcd
        && Command::new(&args.etcd)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if etcd_available {
        results.push(runtime.block_on(bench_etcd(&args))?);
    } else if !args.no_etcd {
        errln!(
            "etcd not found ({}); install Debian's etcd-server to compare",
            args.etcd.display()
        );
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        outln!(
            "{:<8} {:>12} {:>12} {:>10} {:>10} {:>9} {:>9} {:>10} {:>12}",
            "system",
            "creates/s",
            "updates/s",
            "watch p50",
            "watch p99",
            "objects",
            "RSS MiB",
            "peak MiB",
            "restart (s)"
        );
        for f in &results {
            outln!(
                "{:<8} {:>12.0} {:>12.0} {:>8.2}ms {:>8.2}ms {:>9} {:>9.1} {:>10.1} {:>12.2}",
                f.system,
                f.creates_per_second,
                f.updates_per_second,
                f.watch_p50_ms,
                f.watch_p99_ms,
                f.objects,
                f.rss_mib,
                f.peak_rss_mib,
                f.restart_to_ready_seconds
            );
            if f.idle_rss_mib > 0.0 {
                outln!(
                    "{:<8} idle RSS {:.1} MiB; one request's peak above rest: list {:.1} MiB, Table {:.1} MiB, watch {:.1} MiB",
                    f.system,
                    f.idle_rss_mib,
                    f.list_extra_mib,
                    f.table_extra_mib,
                    f.watch_extra_mib
                );
            }
        }
    }
    Ok(Exit::Ok)
}

// ---- capstan -------------------------------------------------------------------------------------

fn spawn_capstan(data_dir: &Path, port: u16) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("locating the capstan binary")?;
    let mut child = Command::new(exe)
        .args(["serve", "--data-dir"])
        .arg(data_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--provisioning-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting capstan serve")?;
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

fn configmap(name: &str, labels: Value, sent: u64) -> Vec<u8> {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels, "annotations": {"bench/sent": sent.to_string()}}, "data": {"payload": padding()}})
        .to_string()
        .into_bytes()
}

async fn kube_send(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> anyhow::Result<Value> {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", "application/json")
        .body(body)?;
    let text = client
        .request_text(request)
        .await
        .map_err(crate::client::api_error)?;
    Ok(serde_json::from_str(&text)?)
}

async fn bench_capstan(args: &Args) -> anyhow::Result<Figures> {
    let dir = tempfile_dir("capstan")?;
    let port = free_port()?;
    let mut phases = Phases::new("capstan");
    let mut child = spawn_capstan(&dir, port)?;
    let (client, _) = crate::client::connect(&dir.join("kubeconfig")).await?;
    phases.done("server ready");
    let mut figures = Figures {
        system: "capstan".into(),
        ..Figures::default()
    };
    let versions: Arc<Vec<AtomicU64>> =
        Arc::new((0..args.creates).map(|_| AtomicU64::new(0)).collect());
    let collection = "/api/v1/namespaces/default/configmaps";
    {
        let (client, versions) = (client.clone(), versions.clone());
        figures.creates_per_second = concurrently(args.creates, args.writers, move |i| {
            let (client, versions) = (client.clone(), versions.clone());
            async move {
                let created = kube_send(
                    &client,
                    "POST",
                    collection,
                    configmap(&format!("c-{i}"), json!({}), 0),
                )
                .await?;
                let rv = created["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                versions[i].store(rv, Ordering::Relaxed);
                Ok(())
            }
        })
        .await?;
    }
    phases.done(&format!("{} creates", args.creates));
    {
        let client = client.clone();
        let updates = args.updates.min(args.creates);
        figures.updates_per_second = concurrently(updates, args.writers, move |i| {
            let (client, versions) = (client.clone(), versions.clone());
            async move {
                let rv = versions[i].load(Ordering::Relaxed);
                let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c-{i}"), "resourceVersion": rv.to_string()}, "data": {"payload": padding(), "n": "1"}});
                kube_send(&client, "PUT", &format!("{collection}/c-{i}"), body.to_string().into_bytes()).await?;
                Ok(())
            }
        })
        .await?;
    }
    phases.done(&format!("{} updates", args.updates.min(args.creates)));
    // Watchers, established before the first event is sent.
    let latencies: Arc<std::sync::Mutex<Vec<f64>>> = Arc::default();
    let mut watchers = Vec::new();
    // Every watcher starts from "now": the resourceVersion of a one-item list.
    let list = kube_send(&client, "GET", &format!("{collection}?limit=1"), Vec::new()).await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    for _ in 0..args.watchers {
        let request = http::Request::get(format!(
            "{collection}?watch=true&labelSelector=bench%3Dwatch&resourceVersion={rv}"
        ))
        .body(Vec::new())?;
        let stream = client
            .request_stream(request)
            .await
            .map_err(crate::client::api_error)?;
        let latencies = latencies.clone();
        let expected = args.watch_events;
        watchers.push(tokio::spawn(async move {
            let mut lines = stream.lines();
            let mut received = 0;
            while received < expected {
                let Ok(Some(line)) = lines.try_next().await else {
                    break;
                };
                let arrived = now_nanos();
                let Ok(event) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let Some(sent) = event["object"]["metadata"]["annotations"]["bench/sent"]
                    .as_str()
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    continue;
                };
                if let Ok(mut l) = latencies.lock() {
                    l.push(arrived.saturating_sub(sent) as f64 / 1e6);
                }
                received += 1;
            }
        }));
    }
    for i in 0..args.watch_events {
        kube_send(
            &client,
            "POST",
            collection,
            configmap(&format!("w-{i}"), json!({"bench": "watch"}), now_nanos()),
        )
        .await?;
    }
    for w in watchers {
        let _ = tokio::time::timeout(Duration::from_secs(60), w).await;
    }
    let mut sorted = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    sorted.sort_by(f64::total_cmp);
    figures.watch_p50_ms = percentile(&sorted, 50.0);
    figures.watch_p99_ms = percentile(&sorted, 99.0);
    figures.watch_events_delivered = sorted.len();
    phases.done(&format!(
        "{} watchers, {} events",
        args.watchers, args.watch_events
    ));
    // Fill up to the object count, then measure memory and restart.
    let have = args.creates + args.watch_events + 1;
    let fill = args.objects.saturating_sub(have);
    {
        let client = client.clone();
        concurrently(fill, args.writers, move |i| {
            let client = client.clone();
            async move {
                kube_send(
                    &client,
                    "POST",
                    collection,
                    configmap(&format!("f-{i}"), json!({}), 0),
                )
                .await?;
                Ok(())
            }
        })
        .await?;
    }
    figures.objects = have.max(args.objects);
    phases.done(&format!("filled to {} objects", figures.objects));
    // A full list, as a controller's first sync does, before memory is read.
    kube_send(&client, "GET", collection, Vec::new()).await?;
    phases.done("full list");
    (figures.rss_mib, figures.peak_rss_mib) = rss_mib(child.id());
    let pid = child.id();
    figures.list_extra_mib = request_extra_mib(pid, async {
        kube_send(&client, "GET", collection, Vec::new()).await?;
        Ok(())
    })
    .await?;
    phases.done("list (memory above rest)");
    figures.table_extra_mib = request_extra_mib(pid, async {
        let request = http::Request::get(collection)
            .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
            .body(Vec::new())?;
        client
            .request_text(request)
            .await
            .map_err(crate::client::api_error)?;
        Ok(())
    })
    .await?;
    phases.done("Table list (memory above rest)");
    figures.watch_extra_mib = request_extra_mib(pid, async {
        let request = http::Request::get(format!("{collection}?watch=true&timeoutSeconds=1"))
            .body(Vec::new())?;
        client
            .request_text(request)
            .await
            .map_err(crate::client::api_error)?;
        Ok(())
    })
    .await?;
    phases.done("watch without a resourceVersion (memory above rest)");
    // Idle for a little over one discovery interval of the garbage collector, sampled every second.
    let idle_until = Instant::now()
        + capstan_controllers::gc::DEFAULT_DISCOVERY_INTERVAL
        + Duration::from_secs(5);
    while Instant::now() < idle_until {
        figures.idle_rss_mib = figures.idle_rss_mib.max(rss_mib(pid).0);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id())?),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    child.wait()?;
    phases.done("idle");
    let started = Instant::now();
    let mut child = spawn_capstan(&dir, port)?;
    figures.restart_to_ready_seconds = started.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(figures)
}

pub(super) fn tempfile_dir(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("capstan-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

// ---- etcd ----------------------------------------------------------------------------------------

type HttpClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn etcd_post(
    client: &HttpClient,
    base: &str,
    path: &str,
    body: &Value,
) -> anyhow::Result<Value> {
    let request = http::Request::post(format!("{base}{path}"))
        .body(Full::new(Bytes::from(body.to_string())))?;
    let response = client.request(request).await?;
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok(serde_json::from_slice(&bytes)?)
}

fn spawn_etcd(
    binary: &Path,
    dir: &Path,
    client_port: u16,
    peer_port: u16,
) -> anyhow::Result<Child> {
    Command::new(binary)
        .args(["--name", "bench", "--data-dir"])
        .arg(dir)
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client_port}"),
        ])
        .args([
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client_port}"),
        ])
        .args([
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer_port}"),
        ])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer_port}"),
        ])
        .args([
            "--initial-cluster",
            &format!("bench=http://127.0.0.1:{peer_port}"),
        ])
        .args(["--quota-backend-bytes", "8589934592"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting etcd")
}

/// Waits until etcd answers `/health` (a benchmark may poll; it measures how long this takes).
async fn etcd_ready(client: &HttpClient, base: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let request = http::Request::get(format!("{base}/health")).body(Full::new(Bytes::new()))?;
        if let Ok(response) = client.request(request).await
            && response.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("etcd did not become healthy");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn etcd_value(sent: u64) -> String {
    json!({"sent": sent, "payload": padding()}).to_string()
}

async fn bench_etcd(args: &Args) -> anyhow::Result<Figures> {
    let dir = tempfile_dir("etcd")?;
    let (client_port, peer_port) = (free_port()?, free_port()?);
    let base = format!("http://127.0.0.1:{client_port}");
    let http: HttpClient =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let mut child = spawn_etcd(&args.etcd, &dir, client_port, peer_port)?;
    etcd_ready(&http, &base).await?;
    let mut figures = Figures {
        system: "etcd".into(),
        ..Figures::default()
    };
    let put = |http: HttpClient, base: String, key: String, value: String| async move {
        etcd_post(
            &http,
            &base,
            "/v3/kv/put",
            &json!({"key": b64(&key), "value": b64(&value)}),
        )
        .await
        .map(|_| ())
    };
    {
        let (http, base) = (http.clone(), base.clone());
        figures.creates_per_second = concurrently(args.creates, args.writers, move |i| {
            put(http.clone(), base.clone(), format!("/c/{i}"), etcd_value(0))
        })
        .await?;
    }
    {
        let (http, base) = (http.clone(), base.clone());
        figures.updates_per_second =
            concurrently(args.updates.min(args.creates), args.writers, move |i| {
                put(http.clone(), base.clone(), format!("/c/{i}"), etcd_value(1))
            })
            .await?;
    }
    let latencies: Arc<std::sync::Mutex<Vec<f64>>> = Arc::default();
    let mut watchers = Vec::new();
    for _ in 0..args.watchers {
        let body = json!({"create_request": {"key": b64("/w/"), "range_end": b64("/w0")}});
        let request = http::Request::post(format!("{base}/v3/watch"))
            .body(Full::new(Bytes::from(body.to_string())))?;
        let response = http.request(request).await?;
        let mut body = response.into_body();
        // The first message confirms the watch is in place.
        let mut buffer = Vec::new();
        while !buffer.contains(&b'\n') && !buffer.ends_with(b"}") {
            match body.frame().await {
                Some(Ok(frame)) => {
                    buffer.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d.as_ref()))
                }
                _ => bail!("etcd watch ended before it was created"),
            }
        }
        let latencies = latencies.clone();
        let expected = args.watch_events;
        watchers.push(tokio::spawn(async move {
            let mut received = 0;
            let mut pending = Vec::new();
            while received < expected {
                let Some(Ok(frame)) = body.frame().await else {
                    break;
                };
                let arrived = now_nanos();
                let Some(data) = frame.data_ref() else {
                    continue;
                };
                pending.extend_from_slice(data);
                let mut stream =
                    serde_json::Deserializer::from_slice(&pending).into_iter::<Value>();
                let mut consumed = 0;
                while let Some(Ok(message)) = stream.next() {
                    consumed = stream.byte_offset();
                    for event in message["result"]["events"].as_array().into_iter().flatten() {
                        let value = event["kv"]["value"]
                            .as_str()
                            .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok());
                        let sent = value
                            .and_then(|v| serde_json::from_slice::<Value>(&v).ok())
                            .and_then(|v| v["sent"].as_u64());
                        if let (Some(sent), Ok(mut l)) = (sent, latencies.lock()) {
                            l.push(arrived.saturating_sub(sent) as f64 / 1e6);
                            received += 1;
                        }
                    }
                }
                pending.drain(..consumed);
            }
        }));
    }
    for i in 0..args.watch_events {
        put(
            http.clone(),
            base.clone(),
            format!("/w/{i}"),
            etcd_value(now_nanos()),
        )
        .await?;
    }
    for w in watchers {
        let _ = tokio::time::timeout(Duration::from_secs(60), w).await;
    }
    let mut sorted = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    sorted.sort_by(f64::total_cmp);
    figures.watch_p50_ms = percentile(&sorted, 50.0);
    figures.watch_p99_ms = percentile(&sorted, 99.0);
    figures.watch_events_delivered = sorted.len();
    let have = args.creates + args.watch_events;
    let fill = args.objects.saturating_sub(have);
    {
        let (http, base) = (http.clone(), base.clone());
        concurrently(fill, args.writers, move |i| {
            put(http.clone(), base.clone(), format!("/f/{i}"), etcd_value(0))
        })
        .await?;
    }
    figures.objects = have.max(args.objects);
    etcd_post(
        &http,
        &base,
        "/v3/kv/range",
        &json!({"key": b64("/"), "range_end": b64("0"), "count_only": true}),
    )
    .await?;
    (figures.rss_mib, figures.peak_rss_mib) = rss_mib(child.id());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id())?),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    child.wait()?;
    let started = Instant::now();
    let mut child = spawn_etcd(&args.etcd, &dir, client_port, peer_port)?;
    etcd_ready(&http, &base).await?;
    figures.restart_to_ready_seconds = started.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(figures)
}
