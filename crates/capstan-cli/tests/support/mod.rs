//! What the cluster tests share: `capstan serve --simulate-workloads` as a child process (killed
//! with SIGKILL on drop, or on purpose), the `capstan` and `kubectl` clients run against it,
//! rendering a spec with fake BMCs and applying the bundle, reading Machines, hosts and
//! conditions, and polling with a deadline.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `capstan serve --simulate-workloads`.
pub struct Serve {
    pub child: Child,
    pub kubeconfig: PathBuf,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

impl Serve {
    /// Starts `capstan serve --simulate-workloads` on `data_dir` (which may hold an earlier
    /// run's state), appending its log to `log`, and waits for "ready at".
    pub fn start(data_dir: &Path, log: &Path) -> Serve {
        Self::start_with(data_dir, log, &["--simulate-workloads"])
    }

    /// Starts `capstan serve` with `extra` arguments.
    pub fn start_with(data_dir: &Path, log: &Path, extra: &[&str]) -> Serve {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .env("CAPSTAN_LOG", "info")
            .arg("serve")
            .args(extra)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args([
                "--provisioning-listen",
                "127.0.0.1:0",
                "--fake-step-ms",
                "50",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .unwrap();
        let line = first_line(&mut child);
        assert!(line.contains("ready at"), "unexpected first line: {line:?}");
        Serve {
            child,
            kubeconfig: data_dir.join("kubeconfig"),
            data_dir: data_dir.to_path_buf(),
            log: log.to_path_buf(),
        }
    }

    /// Starts `capstan serve --simulate-workloads` in `work`: its data in `work/data`, its log in
    /// `work/serve.log`.
    pub fn start_in(work: &Path) -> Serve {
        Self::start(&work.join("data"), &work.join("serve.log"))
    }

    /// [`Serve::start_in`] `work`, then applies the rendered `bundle`'s hosts and cluster
    /// ([`apply_bundle`]).
    pub fn start_with_bundle(work: &Path, bundle: &Path) -> Serve {
        let server = Self::start_in(work);
        apply_bundle(&server.kubeconfig, bundle);
        server
    }

    /// capi-1's bundle (`capstan render examples/capi-1.yaml --fake-bmcs` into `work/bundle`),
    /// applied to a server started in `work`, up to its 4 Machines Running.
    pub fn start_with_capi_1_running(work: &Path) -> Serve {
        let bundle = work.join("bundle");
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/capi-1.yaml");
        render(&example, &bundle, &[]);
        let server = Self::start_with_bundle(work, &bundle);
        wait_machines_running(
            &server.kubeconfig,
            &server.log,
            4,
            std::time::Duration::from_secs(240),
        );
        server
    }

    /// SIGKILL: no shutdown, no flush, as a crash or an OOM kill leaves it.
    pub fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads the first line `child` prints on its piped stdout (taking the pipe): `capstan serve`'s
/// "ready at" line once it is ready.
pub fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn output(out: std::process::Output) -> (bool, String) {
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Runs the `capstan` CLI against `kubeconfig`.
pub fn capstan(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    output(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("NO_COLOR", "1")
            .env_remove("CAPSTAN_DATA_DIR")
            .output()
            .unwrap(),
    )
}

/// `capstan apply -f FILE` for each of `files`, against `kubeconfig`; must succeed.
pub fn apply(kubeconfig: &Path, files: &[&Path]) {
    let mut args = vec!["apply"];
    for file in files {
        args.extend(["-f", file.to_str().unwrap()]);
    }
    let (ok, out) = capstan(kubeconfig, &args);
    assert!(ok, "apply: {out}");
}

/// [`apply`] a rendered bundle's `hosts` and `cluster` folders.
pub fn apply_bundle(kubeconfig: &Path, bundle: &Path) {
    apply(
        kubeconfig,
        &[&bundle.join("hosts"), &bundle.join("cluster")],
    );
}

/// Runs kubectl against `kubeconfig`.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    output(
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .unwrap(),
    )
}

/// kubectl that must succeed.
pub fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let (ok, out) = kubectl(kubeconfig, args);
    assert!(ok, "kubectl {}: {out}", args.join(" "));
    out
}

/// `kubectl get RESOURCE -o json` items (empty on any error, so that polls ride out a restart).
pub fn try_items(kubeconfig: &Path, resource: &str) -> Result<Vec<Value>, String> {
    let (ok, out) = kubectl(kubeconfig, &["get", resource, "-o", "json"]);
    if !ok {
        return Err(format!("kubectl get {resource}: {out}"));
    }
    Ok(
        serde_json::from_str::<Value>(&out).map_err(|e| e.to_string())?["items"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    )
}

/// `kubectl get RESOURCE -o json` items; must succeed.
pub fn items(kubeconfig: &Path, resource: &str) -> Vec<Value> {
    try_items(kubeconfig, resource).unwrap()
}

/// One object as JSON.
pub fn get(kubeconfig: &Path, resource: &str, name: &str) -> Value {
    let out = kubectl_ok(kubeconfig, &["get", resource, name, "-o", "json"]);
    serde_json::from_str(&out).unwrap()
}

/// Polls `check` until it returns `Ok`, failing with its last message (and the server log) after
/// `limit`.
pub fn until<T>(
    what: &str,
    limit: Duration,
    log: &Path,
    check: impl FnMut() -> Result<T, String>,
) -> T {
    until_explained(what, limit, log, String::new, check)
}

/// [`until`], whose failure also shows `explain()` (the state of the objects involved, read once
/// at the deadline). Each step's start and end are printed with the time, so that a run killed
/// from outside (a test runner's time limit) still says which step it was in.
pub fn until_explained<T>(
    what: &str,
    limit: Duration,
    log: &Path,
    explain: impl FnOnce() -> String,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let started = Instant::now();
    let deadline = started + limit;
    eprintln!("[{}] waiting for {what}", jiff::Timestamp::now());
    loop {
        match check() {
            Ok(value) => {
                eprintln!(
                    "[{}] {what}: after {:.1?}",
                    jiff::Timestamp::now(),
                    started.elapsed()
                );
                return value;
            }
            Err(last) if Instant::now() > deadline => {
                let log = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(60).collect();
                panic!(
                    "{what}: not within {limit:?}: {last}\n--- state ---\n{}\n--- server log (last lines) ---\n{}",
                    explain(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

pub fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// Every Machine Running with a Node; `count` of them; their names.
pub fn machines_running(kubeconfig: &Path, count: usize) -> Result<Vec<Value>, String> {
    let machines = try_items(kubeconfig, "machines.v1beta2.cluster.x-k8s.io")?;
    let running = machines
        .iter()
        .filter(|m| {
            m["status"]["phase"] == "Running"
                && m["status"]["nodeRef"]["name"].is_string()
                && m["metadata"]["deletionTimestamp"].is_null()
        })
        .count();
    if machines.len() == count && running == count {
        Ok(machines)
    } else {
        Err(format!(
            "{running} of {} machines Running with a Node (want {count}): {:?}",
            machines.len(),
            machines
                .iter()
                .map(|m| format!("{}={}", name(m), m["status"]["phase"]))
                .collect::<Vec<_>>()
        ))
    }
}

/// Waits up to `limit` for `count` Machines Running with a Node ([`machines_running`]), and
/// returns them.
pub fn wait_machines_running(
    kubeconfig: &Path,
    log: &Path,
    count: usize,
    limit: Duration,
) -> Vec<Value> {
    until(&format!("{count} machines Running"), limit, log, || {
        machines_running(kubeconfig, count)
    })
}

/// The condition of `type_` in `object`'s status, if it has one.
pub fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Every host in `state`.
pub fn hosts_in(kubeconfig: &Path, state: &str) -> Result<Vec<Value>, String> {
    let hosts = try_items(kubeconfig, "baremetalhosts")?;
    let states: Vec<String> = hosts
        .iter()
        .map(|h| format!("{}={}", name(h), h["status"]["provisioning"]["state"]))
        .collect();
    if !hosts.is_empty()
        && hosts
            .iter()
            .all(|h| h["status"]["provisioning"]["state"] == state)
    {
        Ok(hosts)
    } else {
        Err(format!("hosts: {states:?}"))
    }
}

/// The Cluster `cluster` is Provisioned.
pub fn cluster_provisioned(kubeconfig: &Path, cluster: &str) -> Result<(), String> {
    let clusters = try_items(kubeconfig, "clusters.v1beta2.cluster.x-k8s.io")?;
    match clusters.iter().find(|c| name(c) == cluster) {
        Some(c) if c["status"]["phase"] == "Provisioned" => Ok(()),
        other => Err(format!("{:?}", other.map(|c| &c["status"]))),
    }
}

/// Writes the workload kubeconfig of `cluster` (`capstan kubeconfig`) to `path`.
pub fn workload_kubeconfig(kubeconfig: &Path, cluster: &str, path: &Path) -> Result<(), String> {
    let (ok, text) = capstan(kubeconfig, &["kubeconfig", cluster]);
    if !ok {
        return Err(text);
    }
    std::fs::write(path, text).unwrap();
    Ok(())
}

/// The nodes that ran `kubeadm init` in a simulated workload cluster, as the simulator records
/// them.
pub fn kubeadm_inits(workload: &Path) -> Result<Vec<String>, String> {
    let (ok, out) = kubectl(
        workload,
        &[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "capstan-sim-kubeadm-init",
            "-o",
            "json",
        ],
    );
    if !ok {
        return Err(out);
    }
    let map: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    Ok(map["data"]["nodes"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect())
}

/// Renders `spec` with `--fake-bmcs` (and `extra` arguments) into `out`.
pub fn render(spec: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec![
        "render",
        spec.to_str().unwrap(),
        "--fake-bmcs",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (ok, text) = capstan(Path::new("/dev/null"), &args);
    assert!(ok, "render: {text}");
}

/// The capi-1 example with its Cilium manifest path made absolute, so the spec can be rendered
/// from anywhere; `edit` changes its text first.
pub fn capi_1_spec(dir: &Path, edit: impl FnOnce(String) -> String) -> PathBuf {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let text = std::fs::read_to_string(examples.join("capi-1.yaml")).unwrap();
    let cilium = examples.join("cilium/cilium-manifests.yaml");
    let text = text.replace(
        "manifest: cilium/cilium-manifests.yaml",
        &format!("manifest: {}", cilium.display()),
    );
    assert!(text.contains(&cilium.display().to_string()));
    let path = dir.join("capi-1.yaml");
    std::fs::write(&path, edit(text)).unwrap();
    path
}

/// A worker host in capi-1's spec format (appended to `hosts:`).
pub fn extra_worker_host(index: u8) -> String {
    format!(
        r#"
  - name: capi-1-worker-{index}
    role: worker
    bmc:
      address: redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/worker-{index}
    network:
      links:
        - {{name: ens2, mac: "52:54:00:6c:3c:{mac:02x}"}}
      addresses:
        - {{link: ens2, cidr: 10.250.250.{ip}/24, gateway: 10.250.250.1}}
"#,
        mac = 0x13 + index,
        ip = 23 + index,
    )
}

/// The Metal3Machine name and host of each consumed host.
pub fn consumers(kubeconfig: &Path) -> Result<Vec<(String, String)>, String> {
    Ok(try_items(kubeconfig, "baremetalhosts")?
        .iter()
        .filter_map(|h| {
            let consumer = h["spec"]["consumerRef"]["name"].as_str()?;
            Some((consumer.to_owned(), name(h).to_owned()))
        })
        .collect())
}

/// What a cluster test that waits on Machines needs to see when it gets stuck: each Machine
/// (phase, version, node, deletion), each Metal3Machine (its owner, deletion, `Ready` reason) and
/// each BareMetalHost (provisioning state, consumer).
pub fn cluster_state(kubeconfig: &Path) -> String {
    let mut lines = Vec::new();
    let deleting = |o: &Value| {
        if o["metadata"]["deletionTimestamp"].is_string() {
            " deleting"
        } else {
            ""
        }
    };
    let ready = |o: &Value| {
        o["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .map(|c| format!("Ready={} {}: {}", c["status"], c["reason"], c["message"]))
            .unwrap_or_default()
    };
    for (resource, describe) in [
        (
            "machines.v1beta2.cluster.x-k8s.io",
            &(|m: &Value| {
                format!(
                    "Machine {} phase={} version={} node={}{} {}",
                    name(m),
                    m["status"]["phase"],
                    m["spec"]["version"],
                    m["status"]["nodeRef"]["name"],
                    deleting(m),
                    ready(m)
                )
            }) as &dyn Fn(&Value) -> String,
        ),
        ("metal3machines", &|m: &Value| {
            let owners: Vec<&str> = m["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| o["name"].as_str())
                .collect();
            format!(
                "Metal3Machine {} owners={owners:?}{} {}",
                name(m),
                deleting(m),
                ready(m)
            )
        }),
        ("baremetalhosts", &|h: &Value| {
            format!(
                "BareMetalHost {} state={} consumer={}{}",
                name(h),
                h["status"]["provisioning"]["state"],
                h["spec"]["consumerRef"]["name"],
                deleting(h)
            )
        }),
    ] {
        match try_items(kubeconfig, resource) {
            Ok(objects) => lines.extend(objects.iter().map(describe)),
            Err(err) => lines.push(err),
        }
    }
    lines.join("\n")
}
