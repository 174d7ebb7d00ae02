//! `capstan serve` as a process: durability under SIGKILL with concurrent writers, watch resumption
//! across the restart, conflicting updates, graceful SIGTERM, backup and restore, and the CLI verbs
//! (`apply`, `get`, `describe`, `delete`) against it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod support;

use support::{first_line, free_port};

struct Serve {
    child: Child,
    kubeconfig: PathBuf,
}

/// Waits for `child` (a `capstan serve` with piped stdout) to print its ready line.
fn wait_ready(child: &mut std::process::Child, what: &str) {
    let line = first_line(child);
    assert!(
        line.contains("ready at"),
        "{what}: unexpected first line: {line:?}"
    );
}

/// Starts `capstan serve` and returns once it printed its ready line.
fn serve(data_dir: &Path, port: u16, extra: &[&str]) -> Serve {
    serve_logging(data_dir, port, extra, None)
}

/// Starts `capstan serve`; with `log`, its stderr goes to that file at debug level.
fn serve_logging(data_dir: &Path, port: u16, extra: &[&str], log: Option<&Path>) -> Serve {
    let stderr = match log {
        Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
        None => Stdio::null(),
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .env("CAPSTAN_LOG", "debug")
        .args([
            "serve",
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            // Tests run side by side: each takes a free port for provisioning too.
            "--provisioning-listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    wait_ready(&mut child, "capstan serve");
    Serve {
        child,
        kubeconfig: data_dir.join("kubeconfig"),
    }
}

async fn client(kubeconfig: &Path) -> kube::Client {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn configmap(name: &str, value: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"value": value, "pad": "x".repeat(512)}})).unwrap()
}

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<serde_json::Value, String> {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", "application/json")
        .body(body)
        .unwrap();
    match client.request_text(request).await {
        Ok(text) => Ok(serde_json::from_str(&text).unwrap()),
        Err(kube::Error::Api(status)) => Err(format!("{}", status.code)),
        Err(other) => Err(format!("transport: {other}")),
    }
}

#[test]
fn acknowledged_writes_survive_sigkill_and_watches_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = serve(dir.path(), port, &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let acknowledged: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let (watch_start, seen_before) = runtime.block_on(async {
        let c = client(&server.kubeconfig).await;
        // A baseline write, then a watch from its version.
        let base = send(
            &c,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            configmap("base", "0"),
        )
        .await
        .unwrap();
        let start: u64 = base["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let watch_request = http::Request::get(format!(
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={start}"
        ))
        .body(Vec::new())
        .unwrap();
        let stream = c.request_stream(watch_request).await.unwrap();
        let seen: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
        let seen_task = seen.clone();
        let watcher = tokio::spawn(async move {
            use futures::{AsyncBufReadExt, TryStreamExt};
            let mut lines = stream.lines();
            while let Ok(Some(line)) = lines.try_next().await {
                let event: serde_json::Value = serde_json::from_str(&line).unwrap();
                let name = event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                let rv = event["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                seen_task.lock().unwrap().push((name, rv));
            }
        });
        // Concurrent writers; the server is killed while they run.
        let mut writers = Vec::new();
        let progress = Arc::new(tokio::sync::Notify::new());
        for w in 0..8 {
            let c = c.clone();
            let acknowledged = acknowledged.clone();
            let progress = progress.clone();
            writers.push(tokio::spawn(async move {
                for i in 0.. {
                    let name = format!("w{w}-{i}");
                    match send(
                        &c,
                        "POST",
                        "/api/v1/namespaces/default/configmaps",
                        configmap(&name, &name),
                    )
                    .await
                    {
                        Ok(created) => {
                            let rv = created["metadata"]["resourceVersion"]
                                .as_str()
                                .unwrap()
                                .parse()
                                .unwrap();
                            acknowledged.lock().unwrap().insert(name, rv);
                            progress.notify_one();
                        }
                        Err(_) => return,
                    }
                }
            }));
        }
        // Kill once enough writes are acknowledged (progress, not time, decides).
        while acknowledged.lock().unwrap().len() < 1200 {
            progress.notified().await;
        }
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        for w in writers {
            w.await.unwrap();
        }
        watcher.await.unwrap();
        let seen = seen.lock().unwrap().clone();
        (start, seen)
    });

    let server = serve(dir.path(), port, &[]);
    runtime.block_on(async {
        let c = client(&server.kubeconfig).await;
        let list = send(&c, "GET", "/api/v1/namespaces/default/configmaps", Vec::new()).await.unwrap();
        let mut stored: BTreeMap<String, u64> = BTreeMap::new();
        for item in list["items"].as_array().unwrap() {
            let name = item["metadata"]["name"].as_str().unwrap().to_owned();
            // Not torn: the body is whole and belongs to its name.
            if name != "base" {
                assert_eq!(item["data"]["value"].as_str(), Some(name.as_str()));
                assert_eq!(item["data"]["pad"].as_str().map(str::len), Some(512));
            }
            assert!(stored.insert(name, item["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()).is_none(), "duplicate");
        }
        let acknowledged = acknowledged.lock().unwrap().clone();
        assert!(acknowledged.len() >= 1200, "more than two pages of a streamed list");
        for (name, rv) in &acknowledged {
            assert_eq!(stored.get(name), Some(rv), "acknowledged write {name}@{rv} lost");
        }
        // Resume the watch from the last event seen before the crash: the two halves together are
        // exactly the committed creates after the start, each once, in order.
        let resume_from = seen_before.last().map_or(watch_start, |(_, rv)| *rv);
        let head: u64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        let request = http::Request::get(format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={resume_from}&timeoutSeconds=30")).body(Vec::new()).unwrap();
        let stream = c.request_stream(request).await.unwrap();
        use futures::{AsyncBufReadExt, TryStreamExt};
        let mut lines = stream.lines();
        let mut seen_after = Vec::new();
        if resume_from < head {
            while let Some(line) = lines.try_next().await.unwrap() {
                let event: serde_json::Value = serde_json::from_str(&line).unwrap();
                let rv: u64 = event["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
                seen_after.push((event["object"]["metadata"]["name"].as_str().unwrap().to_owned(), rv));
                if rv >= head {
                    break;
                }
            }
        }
        let all: Vec<(String, u64)> = seen_before.iter().cloned().chain(seen_after).collect();
        let rvs: Vec<u64> = all.iter().map(|(_, rv)| *rv).collect();
        let mut sorted = rvs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(rvs, sorted, "events repeated or out of order");
        let expected: BTreeSet<(String, u64)> = stored.into_iter().filter(|(_, rv)| *rv > watch_start).collect();
        assert_eq!(all.into_iter().collect::<BTreeSet<_>>(), expected, "events missed");
    });
    drop(server);
}

#[test]
fn concurrent_conflicting_updates_have_one_winner_and_sigterm_is_graceful() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path(), free_port(), &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let c = client(&server.kubeconfig).await;
        let created = send(&c, "POST", "/api/v1/namespaces/default/configmaps", configmap("race", "0")).await.unwrap();
        let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        let mut tasks = Vec::new();
        for n in 0..10 {
            let c = c.clone();
            let rv = rv.clone();
            tasks.push(tokio::spawn(async move {
                let body = serde_json::to_vec(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "race", "resourceVersion": rv}, "data": {"value": n.to_string()}})).unwrap();
                send(&c, "PUT", "/api/v1/namespaces/default/configmaps/race", body).await
            }));
        }
        let mut outcomes = BTreeMap::new();
        for t in tasks {
            let key = match t.await.unwrap() {
                Ok(_) => "ok".to_owned(),
                Err(code) => code,
            };
            *outcomes.entry(key).or_insert(0) += 1;
        }
        assert_eq!(outcomes, BTreeMap::from([("409".to_owned(), 9), ("ok".to_owned(), 1)]));
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(server.child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = exit_within(&mut server.child, GRACEFUL_EXIT);
    assert!(status.success(), "graceful exit on SIGTERM: {status:?}");
}

fn capstan(args: &[&str], kubeconfig: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const MANIFEST: &str = "apiVersion: v1
kind: Secret
metadata:
  name: h0-bmc
stringData:
  username: admin
  password: hunter2
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: h0
  labels:
    role: worker
spec:
  online: true
  bmc:
    address: redfish+http://127.0.0.1:8000/redfish/v1/Systems/1
    credentialsName: h0-bmc
";

#[test]
fn cli_verbs_backup_and_restore() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = serve(&data, free_port(), &[]);
    let manifest = dir.path().join("hosts.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let kc = server.kubeconfig.clone();
    let (ok, out, err) = capstan(&["apply", "-f", manifest.to_str().unwrap()], &kc);
    assert!(ok, "{err}");
    assert!(
        out.contains("baremetalhost.metal3.io/h0 created") && out.contains("secret/h0-bmc created"),
        "{out}"
    );
    let (_, again, _) = capstan(&["apply", "-f", manifest.to_str().unwrap()], &kc);
    assert!(
        again.contains("baremetalhost.metal3.io/h0 unchanged"),
        "{again}"
    );
    let (ok, table, _) = capstan(&["get", "bmh"], &kc);
    assert!(
        ok && table.contains("NAME") && table.contains("ONLINE") && table.contains("h0"),
        "{table}"
    );
    let (ok, json, _) = capstan(&["get", "bmh", "h0", "-o", "json"], &kc);
    assert!(ok);
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed["spec"]["bmc"]["credentialsName"], "h0-bmc");
    let (ok, names, _) = capstan(&["get", "bmh", "-l", "role=worker", "-o", "name"], &kc);
    assert!(
        ok && names.trim() == "baremetalhost.metal3.io/h0",
        "{names}"
    );
    let (ok, described, _) = capstan(&["describe", "secret", "h0-bmc"], &kc);
    assert!(
        ok && !described.contains("hunter2") && !described.contains("aHVudGVyMg"),
        "{described}"
    );
    let (ok, described, _) = capstan(&["describe", "bmh", "h0"], &kc);
    assert!(
        ok && described.contains("Spec:") && described.contains("Events:"),
        "{described}"
    );

    let backup = dir.path().join("backup.db");
    let (ok, _, err) = capstan(
        &[
            "backup",
            "--data-dir",
            data.to_str().unwrap(),
            "--to",
            backup.to_str().unwrap(),
        ],
        &kc,
    );
    assert!(ok, "{err}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777,
        0o600,
        "the snapshot holds Secrets"
    );
    let (ok, _, _) = capstan(&["delete", "bmh", "h0"], &kc);
    assert!(ok);
    let (_, after, _) = capstan(&["get", "bmh", "-o", "name"], &kc);
    assert!(after.trim().is_empty(), "{after}");
    server.child.kill().unwrap();
    server.child.wait().unwrap();

    let restored_dir = dir.path().join("restored");
    let restored = serve(
        &restored_dir,
        free_port(),
        &["--restore-from", backup.to_str().unwrap()],
    );
    let (ok, names, _) = capstan(&["get", "bmh", "-o", "name"], &restored.kubeconfig);
    assert!(
        ok && names.trim() == "baremetalhost.metal3.io/h0",
        "{names}"
    );
    drop(restored);
}

/// How long `capstan serve` may take to stop after SIGTERM: drain (5 s) plus the runtime's own bound.
const GRACEFUL_EXIT: Duration = Duration::from_secs(30);

/// Waits for `child` to exit; a child that does not is killed and the test fails instead of hanging.
fn exit_within(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    use wait_timeout::ChildExt;
    match child.wait_timeout(limit).unwrap() {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server did not exit within {limit:?} of SIGTERM");
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn serve_runs_the_ipam_controller_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), free_port(), &[]);
    let pool = "apiVersion: ipam.metal3.io/v1alpha1
kind: IPPool
metadata:
  name: nodes
spec:
  namePrefix: nodes
  gateway: 10.0.0.1
  prefix: 24
  pools:
    - start: 10.0.0.10
      end: 10.0.0.20
---
apiVersion: ipam.metal3.io/v1alpha1
kind: IPClaim
metadata:
  name: node-a
spec:
  pool:
    name: nodes
";
    let file = dir.path().join("ipam.yaml");
    std::fs::write(&file, pool).unwrap();
    let (ok, _, err) = capstan(&["apply", "-f", file.to_str().unwrap()], &server.kubeconfig);
    assert!(ok, "{err}");
    // kubectl waits on a watch until the controller has allocated.
    let out = Command::new("kubectl")
        .args(["--kubeconfig", server.kubeconfig.to_str().unwrap()])
        .args([
            "wait",
            "ipclaim/node-a",
            "--for=jsonpath={.status.address.name}=nodes-10-0-0-10",
            "--timeout=60s",
        ])
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, address, _) = capstan(
        &["get", "ipaddress", "nodes-10-0-0-10", "-o", "json"],
        &server.kubeconfig,
    );
    assert!(ok);
    let address: serde_json::Value = serde_json::from_str(&address).unwrap();
    assert_eq!(address["spec"]["address"], "10.0.0.10");
    let (ok, described, _) = capstan(&["describe", "ipclaim", "node-a"], &server.kubeconfig);
    assert!(
        ok && described.contains("AddressAllocated"),
        "the allocation is an Event:\n{described}"
    );
}

#[test]
fn crds_prints_definitions_a_kubernetes_api_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), free_port(), &["--no-controllers"]);
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("crds")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("kind: CustomResourceDefinition")
            && text.contains("baremetalhosts.metal3.io")
    );
    assert!(!text.contains("name: secrets"), "core kinds are not CRDs");
    let file = dir.path().join("crds.yaml");
    std::fs::write(&file, &text).unwrap();
    let applied = Command::new("kubectl")
        .args([
            "--kubeconfig",
            server.kubeconfig.to_str().unwrap(),
            "apply",
            "-f",
            file.to_str().unwrap(),
        ])
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
}

#[test]
fn credentials_are_private_and_client_certificates_authenticate() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let _server = serve(&data, port, &["--no-controllers"]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("pki")), 0o700);
    for file in [
        "kubeconfig",
        "pki/ca.key",
        "pki/server.key",
        "pki/admin.key",
        "pki/admin.token",
        "pki/sa.key",
    ] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    let url = format!("https://127.0.0.1:{port}/api/v1/namespaces");
    let curl = |extra: &[&str]| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(data.join("pki/ca.crt"))
            .args(extra)
            .arg(&url)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Without credentials: system:anonymous, whom the default roles deny this (kube-apiserver's
    // default); a wrong token is refused.
    assert_eq!(curl(&[]), "403");
    assert_eq!(curl(&["-H", "Authorization: Bearer wrong"]), "401");
    let cert = data.join("pki/admin.crt");
    let key = data.join("pki/admin.key");
    assert_eq!(
        curl(&[
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap()
        ]),
        "200"
    );
    // Plain HTTP is not served.
    let plain = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://127.0.0.1:{port}/healthz"),
        ])
        .output()
        .unwrap();
    assert_ne!(String::from_utf8_lossy(&plain.stdout), "200");
}

#[test]
fn anonymous_access_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let _server = serve(&data, port, &["--no-controllers", "--anonymous-auth=false"]);
    let curl = |path: &str| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(data.join("pki/ca.crt"))
            .arg(format!("https://127.0.0.1:{port}{path}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(curl("/api/v1/namespaces"), "401");
    assert_eq!(curl("/healthz"), "401");
}

#[test]
fn upstream_crds_loaded_at_start_validate_and_default_objects() {
    let dir = tempfile::tempdir().unwrap();
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/crds");
    let server = serve(
        &dir.path().join("data"),
        free_port(),
        &["--no-controllers", "--crds", crds.to_str().unwrap()],
    );
    let file = dir.path().join("hosts.yaml");
    std::fs::write(
        &file,
        MANIFEST.replace("online: true", "online: true\n  bootMacAddress: typo"),
    )
    .unwrap();
    let (ok, _, err) = capstan(&["apply", "-f", file.to_str().unwrap()], &server.kubeconfig);
    assert!(!ok, "an unknown field is refused with the upstream schema");
    assert!(
        err.contains("bootMacAddress") || err.contains("unknown field"),
        "{err}"
    );
    // The error points at the field's line (17), not at the document's first line (9).
    assert!(err.contains("hosts.yaml:17"), "{err}");
    std::fs::write(&file, MANIFEST.replace("online: true", "online: \"yes\"")).unwrap();
    let (ok, _, err) = capstan(&["apply", "-f", file.to_str().unwrap()], &server.kubeconfig);
    assert!(!ok, "a string where the schema wants a boolean is refused");
    assert!(err.contains("hosts.yaml:16"), "{err}");
    std::fs::write(&file, MANIFEST).unwrap();
    let (ok, _, err) = capstan(&["apply", "-f", file.to_str().unwrap()], &server.kubeconfig);
    assert!(ok, "{err}");
    // The upstream schema defaults spec.automatedCleaningMode to "metadata".
    let (_, json, _) = capstan(&["get", "bmh", "h0", "-o", "json"], &server.kubeconfig);
    let host: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(host["spec"]["automatedCleaningMode"], "metadata", "{json}");
}

#[test]
fn secret_values_never_reach_the_server_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let mut server = serve_logging(&dir.path().join("data"), free_port(), &[], Some(&log));
    let manifest = dir.path().join("hosts.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let (ok, _, err) = capstan(
        &["apply", "-f", manifest.to_str().unwrap()],
        &server.kubeconfig,
    );
    assert!(ok, "{err}");
    let (ok, _, _) = capstan(
        &["get", "secret", "h0-bmc", "-o", "yaml"],
        &server.kubeconfig,
    );
    assert!(ok);
    let token = std::fs::read_to_string(dir.path().join("data/pki/admin.token")).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(server.child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    exit_within(&mut server.child, GRACEFUL_EXIT);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.is_empty(), "the server logged at debug level");
    for secret in ["hunter2", "aHVudGVyMg", token.trim()] {
        assert!(!text.contains(secret), "a secret reached the log");
    }
}

#[test]
fn an_unusable_bmc_ca_file_stops_serve_before_it_listens() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("bmc-ca.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    for (file, want) in [
        (dir.path().join("missing.pem"), "cannot read the CA bundle"),
        (not_pem, "holds no usable CA certificate"),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args([
                "serve",
                "--data-dir",
                dir.path().join("data").to_str().unwrap(),
                "--listen",
                &format!("127.0.0.1:{}", free_port()),
                "--provisioning-listen",
                "127.0.0.1:0",
                "--bmc-ca-file",
                file.to_str().unwrap(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = exit_within(&mut child, GRACEFUL_EXIT);
        let mut stdout = String::new();
        let mut stderr = String::new();
        use std::io::Read;
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(!stdout.contains("ready at"), "{stdout}");
        assert!(stderr.contains("--bmc-ca-file"), "{stderr}");
        assert!(stderr.contains(file.to_str().unwrap()), "{stderr}");
        assert!(stderr.contains(want), "{stderr}");
    }
}

/// Runs capstan with `KUBECONFIG` set (or not), returning exit code, stdout and stderr.
fn capstan_env(args: &[&str], kubeconfig: Option<&Path>) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_capstan"));
    command
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("CAPSTAN_DATA_DIR");
    match kubeconfig {
        Some(path) => command.env("KUBECONFIG", path),
        None => command.env_remove("KUBECONFIG"),
    };
    let out = command.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs capstan with stdout on a pipe whose reader is gone (`… | head -1` after head exited).
fn capstan_into_closed_pipe(args: &[&str], kubeconfig: &Path) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = exit_within(&mut child, Duration::from_secs(60));
    (status.code(), stderr)
}

#[test]
fn client_verbs_name_objects_as_kubectl_does_and_agree_on_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = serve(&data, free_port(), &["--no-controllers"]);
    let kc = server.kubeconfig.clone();
    let manifest = dir.path().join("hosts.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let file = manifest.to_str().unwrap();

    let (code, out, err) = capstan_env(&["apply", "-f", file], Some(&kc));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("secret/h0-bmc created\n")
            && out.contains("baremetalhost.metal3.io/h0 created\n"),
        "{out}"
    );
    let (_, names, _) = capstan_env(&["get", "secrets", "-o", "name"], Some(&kc));
    assert!(names.lines().any(|l| l == "secret/h0-bmc"), "{names}");

    // NotFound is exit 1 for every verb.
    for args in [
        &["get", "bmh", "nope"][..],
        &["describe", "bmh", "nope"],
        &["delete", "bmh", "nope"],
    ] {
        let (code, _, err) = capstan_env(args, Some(&kc));
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains("not found"), "{args:?}: {err}");
    }

    // No verb panics when its reader has gone.
    for args in [
        &["get", "bmh"][..],
        &["get", "bmh", "-o", "yaml"],
        &["describe", "bmh", "h0"],
        &["get", "bmh", "-w"],
        &["get", "bmh", "-w", "-o", "name"],
    ] {
        let (code, err) = capstan_into_closed_pipe(args, &kc);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }

    // --data-dir is explicit: it wins over $KUBECONFIG, and says so.
    let (code, out, err) = capstan_env(
        &[
            "get",
            "bmh",
            "-o",
            "name",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        Some(&dir.path().join("no-such-kubeconfig")),
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "baremetalhost.metal3.io/h0");
    assert!(
        err.contains("warning:") && err.contains("$KUBECONFIG"),
        "{err}"
    );

    // delete -f deletes what the manifests describe.
    let (code, out, err) = capstan_env(&["delete", "-f", file, "--wait=false"], Some(&kc));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("baremetalhost.metal3.io/h0 deleted") && out.contains("secret/h0-bmc deleted"),
        "{out}"
    );
    let (code, _, _) = capstan_env(&["get", "bmh", "h0"], Some(&kc));
    assert_eq!(code, Some(1));

    // A server that is not there: one clean error with the hint, exit 3.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let (code, out, err) = capstan_env(&["get", "bmh"], Some(&kc));
    assert_eq!(code, Some(3), "{err}");
    assert!(out.is_empty());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("is `capstan serve` running?"), "{err}");
    assert!(
        !err.contains("ERROR") && !err.contains("HyperError"),
        "{err}"
    );
    // No kubeconfig at all: one line too, with the same hint.
    let (code, _, err) = capstan_env(
        &[
            "get",
            "bmh",
            "--data-dir",
            dir.path().join("nowhere").to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("is `capstan serve` running?"), "{err}");
}

#[test]
fn watch_rows_stay_aligned_under_an_event_column() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), free_port(), &["--no-controllers"]);
    let kc = server.kubeconfig.clone();
    let cm = dir.path().join("cm.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n",
    )
    .unwrap();
    let (code, _, err) = capstan_env(&["apply", "-f", cm.to_str().unwrap()], Some(&kc));
    assert_eq!(code, Some(0), "{err}");
    let mut watch = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["get", "configmaps", "-w"])
        .env("KUBECONFIG", &kc)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let next = || {
        lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a watch line")
    };
    let header = next();
    assert!(header.starts_with("EVENT"), "{header}");
    let name_at = header.find("NAME").unwrap();
    let first = next();
    assert!(first.starts_with("ADDED"), "{first}");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: changed}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a-much-longer-name}\ndata: {k: v}\n",
    )
    .unwrap();
    let (code, _, err) = capstan_env(&["apply", "-f", cm.to_str().unwrap()], Some(&kc));
    assert_eq!(code, Some(0), "{err}");
    let mut events = Vec::new();
    for line in [first, next(), next()] {
        assert_eq!(
            line.get(name_at..name_at + 1).map(|c| c != " "),
            Some(true),
            "NAME starts at column {name_at}:\n{header}\n{line}"
        );
        assert_eq!(&line[name_at - 1..name_at], " ", "{line}");
        events.push(line.split_whitespace().next().unwrap().to_owned());
    }
    assert!(events.contains(&"MODIFIED".to_owned()), "{events:?}");
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn a_second_serve_on_another_port_finds_its_own_provisioning_port() {
    let dir = tempfile::tempdir().unwrap();
    let start = |name: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args([
                "serve",
                "--data-dir",
                dir.path().join(name).to_str().unwrap(),
                "--listen",
                &format!("127.0.0.1:{}", free_port()),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_ready(&mut child, name);
        Serve {
            kubeconfig: dir.path().join(name).join("kubeconfig"),
            child,
        }
    };
    // Whichever of them gets the default port, both serve.
    let first = start("one");
    let second = start("two");
    for server in [&first, &second] {
        let (code, _, err) = capstan_env(&["get", "bmh"], Some(&server.kubeconfig));
        assert_eq!(code, Some(0), "{err}");
    }
}

#[test]
fn kubeconfigs_issued_for_a_user_carry_only_the_role_given() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let server = serve(&data, port, &["--no-controllers"]);
    let kubectl = |kubeconfig: &Path, args: &[&str]| {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .env("HOME", dir.path())
            .output()
            .unwrap()
    };
    let admin_ok = kubectl(&server.kubeconfig, &["create", "namespace", "team-a"]);
    assert!(admin_ok.status.success(), "{admin_ok:?}");
    let data_dir = data.to_str().unwrap();
    let (ok, config, err) = capstan(
        &[
            "kubeconfig",
            "--data-dir",
            data_dir,
            "--user",
            "alice",
            "--group",
            "team-a-devs",
            "--role",
            "edit",
            "-n",
            "team-a",
        ],
        &server.kubeconfig,
    );
    assert!(ok, "{err}");
    assert!(!config.contains("token:"), "{config}");
    let alice = dir.path().join("alice.kubeconfig");
    std::fs::write(&alice, &config).unwrap();
    let me = kubectl(&alice, &["auth", "whoami"]);
    let me = String::from_utf8_lossy(&me.stdout);
    assert!(me.contains("alice") && me.contains("team-a-devs"), "{me}");
    // `edit` in team-a (the context's namespace) …
    let created = kubectl(
        &alice,
        &["create", "configmap", "settings", "--from-literal=a=1"],
    );
    assert!(created.status.success(), "{created:?}");
    let secrets = kubectl(&alice, &["get", "secrets"]);
    assert!(secrets.status.success(), "{secrets:?}");
    // … and nothing beyond it.
    for args in [
        &["-n", "default", "get", "configmaps"][..],
        &["get", "namespaces"][..],
        &[
            "-n",
            "team-a",
            "create",
            "rolebinding",
            "x",
            "--clusterrole=admin",
            "--user=alice",
        ][..],
    ] {
        let denied = kubectl(&alice, args);
        let stderr = String::from_utf8_lossy(&denied.stderr);
        assert!(
            stderr.contains(r#"User "alice" cannot"#),
            "{args:?}: {stderr}"
        );
    }
    // Without --role the user may only ask who it is and what it may do.
    let (ok, config, err) = capstan(
        &["kubeconfig", "--data-dir", data_dir, "--user", "bob"],
        &server.kubeconfig,
    );
    assert!(ok, "{err}");
    let bob = dir.path().join("bob.kubeconfig");
    std::fs::write(&bob, &config).unwrap();
    let can = kubectl(&bob, &["auth", "can-i", "list", "configmaps"]);
    assert_eq!(String::from_utf8_lossy(&can.stdout).trim(), "no");
    let me = kubectl(&bob, &["auth", "whoami"]);
    assert!(
        String::from_utf8_lossy(&me.stdout).contains("bob"),
        "{me:?}"
    );
    let (ok, _, err) = capstan(
        &[
            "kubeconfig",
            "--data-dir",
            data_dir,
            "--user",
            "system:admin",
        ],
        &server.kubeconfig,
    );
    assert!(!ok && err.contains("plain user name"), "{err}");
}

#[test]
fn the_service_account_issuer_and_api_audiences_are_set_by_flags() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let _server = serve(
        &data,
        port,
        &[
            "--no-controllers",
            "--service-account-issuer",
            "https://issuer.capstan.test",
            "--api-audiences",
            "api-a,api-b",
        ],
    );
    let kubeconfig = data.join("kubeconfig");
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .env("HOME", dir.path())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, err) = kubectl(&["create", "serviceaccount", "bot"]);
    assert!(ok, "{err}");
    let (ok, token, err) = kubectl(&["create", "token", "bot"]);
    assert!(ok, "{err}");
    use base64::Engine;
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["iss"], "https://issuer.capstan.test");
    assert_eq!(claims["aud"], serde_json::json!(["api-a", "api-b"]));
    let (ok, discovery, err) = kubectl(&["get", "--raw", "/.well-known/openid-configuration"]);
    assert!(ok, "{err}");
    let discovery: serde_json::Value = serde_json::from_str(&discovery).unwrap();
    assert_eq!(discovery["issuer"], "https://issuer.capstan.test");
    // A token for another audience does not authenticate.
    let (ok, other, err) = kubectl(&["create", "token", "bot", "--audience", "vault"]);
    assert!(ok, "{err}");
    let (ok, _, err) = kubectl(&["--token", &other, "auth", "whoami"]);
    assert!(!ok);
    assert!(err.contains("You must be logged in"), "{err}");
    let (ok, whoami, err) = kubectl(&[
        "--token",
        &token,
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert!(ok, "{err}");
    assert_eq!(whoami, "system:serviceaccount:default:bot");

    // A malformed issuer stops serve before it listens, naming the flag.
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "serve",
            "--data-dir",
            dir.path().join("other").to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--provisioning-listen",
            "127.0.0.1:0",
            "--service-account-issuer",
            "not a url",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--service-account-issuer"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ready at"));
}

/// The value of `name` in the environment of process `pid`.
fn env_of(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let prefix = format!("{name}=");
    environ
        .split(|b| *b == 0)
        .filter_map(|entry| std::str::from_utf8(entry).ok())
        .find_map(|entry| entry.strip_prefix(prefix.as_str()).map(str::to_owned))
}

/// Starts `capstan serve --no-controllers` in `data` with the allocator variables `env` says (a
/// value, or `None`: unset) and returns it once it is ready.
fn serve_in_env(data: &Path, env: &[(&str, Option<&str>)]) -> std::process::Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_capstan"));
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let mut child = command
        .args(["serve", "--no-controllers", "--data-dir"])
        .arg(data)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--provisioning-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_ready(&mut child, &format!("{env:?}"));
    child
}

#[test]
fn serve_tunes_its_allocators_unless_the_environment_sets_its_own_tunables() {
    let dir = tempfile::tempdir().unwrap();
    let unset = [
        ("GLIBC_TUNABLES", None),
        ("MIMALLOC_PURGE_DELAY", None),
        ("MIMALLOC_ARENA_EAGER_COMMIT", None),
    ];
    // By default the server runs (as the same process) with two glibc malloc arenas (SQLite's) and
    // mimalloc returning freed pages at once.
    let mut child = serve_in_env(&dir.path().join("a"), &unset);
    // glibc rewrites the variable in the process's environment as it reads it (the text keeps the
    // arena limit and not the trim threshold), so the test looks for the arena limit.
    let tunables = env_of(child.id(), "GLIBC_TUNABLES").unwrap_or_default();
    assert!(
        tunables.contains("glibc.malloc.arena_max=2"),
        "GLIBC_TUNABLES={tunables:?}"
    );
    let mimalloc = |child: &std::process::Child| {
        [
            env_of(child.id(), "MIMALLOC_PURGE_DELAY"),
            env_of(child.id(), "MIMALLOC_ARENA_EAGER_COMMIT"),
        ]
    };
    assert_eq!(mimalloc(&child), [Some("0".into()), Some("0".into())]);
    child.kill().unwrap();
    child.wait().unwrap();
    // A mimalloc setting the environment gives is kept when the others are added.
    let mut given = unset;
    given[1].1 = Some("25");
    let mut child = serve_in_env(&dir.path().join("c"), &given);
    assert_eq!(mimalloc(&child), [Some("25".into()), Some("0".into())]);
    child.kill().unwrap();
    child.wait().unwrap();
    // Tunables the environment gives (even none) are kept, and nothing is added.
    for tunables in ["glibc.malloc.arena_max=4", ""] {
        let mut given = unset;
        given[0].1 = Some(tunables);
        let mut child = serve_in_env(&dir.path().join(format!("b{}", tunables.len())), &given);
        assert_eq!(
            env_of(child.id(), "GLIBC_TUNABLES").as_deref(),
            Some(tunables)
        );
        assert_eq!(mimalloc(&child), [None, None]);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
