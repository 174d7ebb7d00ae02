//! Bootstrap step reports through the provisioning server of a real `capstan serve
//! --simulate-workloads`, as a node (or someone who captured a node's report) sends them: the
//! capi-1 bundle is applied without its worker's host, so the control plane comes up while the
//! worker Machine has bootstrap data and no host, its bootstrap still open.
//!
//! Checked: once a control-plane Machine has its Node, its bootstrap has ended and a report with
//! its valid token — a replay of its own, or anything else — is refused (`410`) and changes nothing
//! on the Machine; a failing report whose output carries credentials, keys, tokens and a line of the
//! bootstrap data reaches the worker Machine's `BootstrapConfigReady` condition and a Warning
//! Event with none of them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod support;

use support::*;

const LIMIT: Duration = Duration::from_secs(240);

/// A running server with capi-1 applied without its worker host.
struct Env {
    _work: tempfile::TempDir,
    server: Serve,
}

impl Env {
    fn start() -> Self {
        let work = tempfile::tempdir().unwrap();
        let bundle = work.path().join("bundle");
        render(&capi_1_spec(work.path(), |s| s), &bundle, &[]);
        std::fs::remove_file(bundle.join("hosts/capi-1-worker-0.yaml")).unwrap();
        let server = Serve::start_with_bundle(work.path(), &bundle);
        Self {
            _work: work,
            server,
        }
    }

    fn kc(&self) -> &Path {
        &self.server.kubeconfig
    }

    /// The worker Machine, once its KubeadmConfig has bootstrap data: `(machine, config)`.
    fn worker_with_data(&self) -> (String, String) {
        until(
            "the worker's bootstrap data",
            LIMIT,
            &self.server.log,
            || {
                let machines = try_items(self.kc(), "machines.v1beta2.cluster.x-k8s.io")?;
                let worker = machines
                    .iter()
                    .find(|m| {
                        m["metadata"]["labels"]
                            .get("cluster.x-k8s.io/control-plane")
                            .is_none()
                    })
                    .ok_or("no worker Machine yet")?;
                let config = worker["spec"]["bootstrap"]["configRef"]["name"]
                    .as_str()
                    .ok_or("no configRef yet")?;
                if worker["spec"]["bootstrap"]["dataSecretName"].is_string() {
                    Ok((name(worker).to_owned(), config.to_owned()))
                } else {
                    Err(format!(
                        "Machine {} has no bootstrap data yet",
                        name(worker)
                    ))
                }
            },
        )
    }

    fn secret_value(&self, secret: &str, key: &str) -> String {
        let secret = get(self.kc(), "secret", secret);
        let encoded = secret["data"][key].as_str().unwrap();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap(),
        )
        .unwrap()
    }

    /// The steps URL and report token of `config`, as its bootstrap data carries them.
    fn reporting(&self, config: &str) -> (String, String) {
        let data = self.secret_value(config, "value");
        let url = data
            .split("url='")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .unwrap()
            .to_owned();
        let token = self.secret_value(&format!("{config}-bootstrap-report"), "token");
        assert!(data.contains(&token), "the step runner carries the token");
        (url, token)
    }
}

/// POSTs one step report; `(HTTP status, body)`.
fn post(url: &str, token: &str, headers: &[(&str, String)], body: &str) -> (u16, String) {
    let dir = tempfile::tempdir().unwrap();
    let body_file = dir.path().join("body");
    std::fs::write(&body_file, body).unwrap();
    let out_file = dir.path().join("out");
    let mut curl = Command::new("curl");
    curl.args(["-s", "-o"])
        .arg(&out_file)
        .args(["-w", "%{http_code}", "-X", "POST"])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["-H", "Content-Type: text/plain"]);
    for (name, value) in headers {
        curl.args(["-H", &format!("{name}: {value}")]);
    }
    let out = curl
        .arg("--data-binary")
        .arg(format!("@{}", body_file.display()))
        .arg(url)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0);
    (
        status,
        std::fs::read_to_string(&out_file).unwrap_or_default(),
    )
}

#[test]
fn a_failing_report_reaches_the_machine_with_its_secrets_redacted() {
    let env = Env::start();
    let (machine, config) = env.worker_with_data();
    let (url, token) = env.reporting(&config);
    let data = env.secret_value(&config, "value");
    // A line of a file the bootstrap data writes (the DNS wait script of capi-1's workers).
    let quoted = "# Waits until a host name resolves, so that kubeadm's image pulls do not fail";
    assert!(data.contains(quoted), "the worker's data writes the script");
    let pem = "-----BEGIN EC PRIVATE KEY-----\n\
        MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oK4WmsZtG2K2oAoGCCqGSM49\n\
        AwEHoUQDQgAEHqvBtpbtoZ2d3NUz5yeCHc3wYgYVbM52IOVjdKYjg2CepOPSfY7o\n\
        -----END EC PRIVATE KEY-----\n";
    let encoded_pem = base64::engine::general_purpose::STANDARD.encode(pem);
    let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c";
    let command = "curl -fsS -u admin:hunter2-Pa55 https://registry.example/v2/ && sh /etc/capstan-wait-for-dns.sh";
    let output = format!(
        "+ curl -fsS -u admin:hunter2-Pa55 https://registry.example/v2/\n\
         curl: (22) The requested URL returned error: 401\n\
         retrying with https://deploy:url-pass-0987@registry.example/v2/\n\
         key: {encoded_pem}\n\
         token {hex} rejected\n\
         {quoted} while the node's\n\
         {token}\n"
    );
    let secrets = [
        "hunter2-Pa55",
        "url-pass-0987",
        &encoded_pem[..24],
        &encoded_pem[encoded_pem.len() - 16..],
        "MHcCAQEE",
        hex,
        quoted,
        &token,
    ];
    let (status, body) = post(
        &url,
        &token,
        &[
            ("X-Capstan-Step", "1".into()),
            ("X-Capstan-Steps", "2".into()),
            ("X-Capstan-State", "failed".into()),
            ("X-Capstan-Exit-Code", "22".into()),
            ("X-Capstan-Sequence", "2".into()),
            (
                "X-Capstan-Command",
                base64::engine::general_purpose::STANDARD.encode(command),
            ),
        ],
        &output,
    );
    assert_eq!(status, 204, "the report is stored: {body}");

    let machine_json = until(
        "the failure on the worker Machine",
        LIMIT,
        &env.server.log,
        || {
            let m = get(env.kc(), "machines.v1beta2.cluster.x-k8s.io", &machine);
            match condition(&m, "BootstrapConfigReady") {
                Some(c) if c["reason"] == "BootstrapCommandFailed" => Ok(m.clone()),
                other => Err(format!("BootstrapConfigReady: {other:?}")),
            }
        },
    );
    let message = condition(&machine_json, "BootstrapConfigReady").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("step 1/2 failed with exit code 22: curl -fsS -u <redacted>"),
        "{message}"
    );
    assert!(
        message.contains("curl: (22) The requested URL returned error: 401"),
        "ordinary output is kept: {message}"
    );
    let events = until("the Warning Event", LIMIT, &env.server.log, || {
        let events = try_items(env.kc(), "events")?;
        if events
            .iter()
            .any(|e| e["reason"] == "BootstrapCommandFailed")
        {
            Ok(events)
        } else {
            Err("no BootstrapCommandFailed event yet".into())
        }
    });
    let kubeadm_config = get(
        env.kc(),
        "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
        &config,
    );
    let report = get(env.kc(), "configmap", &format!("{config}-bootstrap-report"));
    for (what, text) in [
        ("the Machine's condition", message.clone()),
        ("the Machine's status", machine_json["status"].to_string()),
        (
            "the KubeadmConfig's status",
            kubeadm_config["status"].to_string(),
        ),
        ("the Events", Value::Array(events).to_string()),
        ("the stored report", report["data"].to_string()),
    ] {
        for secret in secrets {
            // JSON escapes newlines and quotes; none of the secrets has either.
            assert!(!text.contains(secret), "{what} has {secret:?}: {text}");
        }
    }
}

#[test]
fn a_report_after_the_node_joined_is_refused() {
    let env = Env::start();
    let machine = until("a Running control plane", LIMIT, &env.server.log, || {
        let machines = try_items(env.kc(), "machines.v1beta2.cluster.x-k8s.io")?;
        machines
            .into_iter()
            .find(|m| m["status"]["nodeRef"]["name"].is_string())
            .ok_or_else(|| "no Machine with a Node yet".to_owned())
    });
    let config = machine["spec"]["bootstrap"]["configRef"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let report_secret = format!("{config}-bootstrap-report");
    // The bootstrap controller closes the reports when it sees the Node.
    until(
        "the reports closed",
        Duration::from_secs(60),
        &env.server.log,
        || {
            let secret = get(env.kc(), "secret", &report_secret);
            match secret["metadata"]["annotations"]["bootstrap.capstan.io/reports-closed"].as_str()
            {
                Some(why) if why.contains("has Node") => Ok(()),
                _ => Err(format!("{}", secret["metadata"]["annotations"])),
            }
        },
    );
    let (url, token) = env.reporting(&config);
    let (status, body) = post(
        &url,
        &token,
        &[
            ("X-Capstan-Step", "1".into()),
            ("X-Capstan-Steps", "4".into()),
            ("X-Capstan-State", "failed".into()),
            ("X-Capstan-Exit-Code", "1".into()),
            ("X-Capstan-Sequence", "2".into()),
        ],
        "replayed\n",
    );
    assert_eq!(status, 410, "{body}");
    assert!(
        body.contains(&format!(
            "bootstrap of kubeadmconfig default/{config} has ended (Machine {} has Node",
            name(&machine)
        )) && body.contains("reports are closed"),
        "{body}"
    );
    assert!(!body.contains(&token), "{body}");
    // Nothing changed: no report stored, the Machine's bootstrap still fine, no Warning.
    let (_, reports) = kubectl(
        env.kc(),
        &["get", "configmap", &report_secret, "-o", "json"],
    );
    assert!(!reports.contains("replayed"), "{reports}");
    let after = get(
        env.kc(),
        "machines.v1beta2.cluster.x-k8s.io",
        name(&machine),
    );
    let bootstrap = condition(&after, "BootstrapConfigReady").unwrap();
    assert_eq!(bootstrap["status"], "True", "{bootstrap}");
    let events = items(env.kc(), "events");
    assert!(
        !events
            .iter()
            .any(|e| e["reason"] == "BootstrapCommandFailed"),
        "{events:?}"
    );
}
