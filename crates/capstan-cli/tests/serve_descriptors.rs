//! `capstan serve` under a low descriptor limit: started through `prlimit --nofile=256:256` (so it
//! cannot raise its soft limit), it is sent 300 TLS connections from one client that finish their
//! handshake and send nothing. The connection limit derived from 256 descriptors leaves room for
//! the store and the rest of the process, idle connections are shed to admit new ones, and so
//! `/healthz` still answers, an authenticated request is still served, the server is still running,
//! and the shedding was logged at info without a line per connection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod support;

use support::{first_line, free_port};

const DESCRIPTORS: u64 = 256;
const IDLE_CONNECTIONS: usize = 300;

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tls_config(ca: &Path) -> Arc<rustls::ClientConfig> {
    let pem = std::fs::read(ca).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `address` with its handshake done, or why not within `limit`.
fn handshake(
    address: &str,
    config: &Arc<rustls::ClientConfig>,
    limit: Duration,
) -> Result<Tls, String> {
    let tcp =
        TcpStream::connect_timeout(&address.parse().unwrap(), limit).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(limit)).unwrap();
    tcp.set_write_timeout(Some(limit)).unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    Ok(stream)
}

/// `GET path` on a new connection; the status code, or why there was none within `limit`.
fn get(
    address: &str,
    config: &Arc<rustls::ClientConfig>,
    path: &str,
    token: Option<&str>,
    limit: Duration,
) -> Result<u16, String> {
    let mut stream = handshake(address, config, limit)?;
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Accept: application/json\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(head.as_bytes())
        .map_err(|e| format!("writing: {e}"))?;
    let mut answer = Vec::new();
    match stream.read_to_end(&mut answer) {
        Ok(_) => {}
        // The server may close without close_notify once it answered.
        Err(_) if !answer.is_empty() => {}
        Err(err) => return Err(format!("reading: {err}")),
    }
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status line in {text:?}"))
}

/// The soft descriptor limit of process `pid`.
fn soft_descriptor_limit(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Polls `check` every 200 ms until it returns `Ok`, failing with its last error after `limit`.
fn until<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(value) => return value,
            Err(last) if Instant::now() > deadline => {
                panic!("{what}: not within {limit:?}: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
fn idle_tls_connections_beyond_the_descriptor_limit_do_not_starve_health_probes() {
    let prlimit = Command::new("prlimit").arg("--version").output();
    assert!(
        prlimit.as_ref().is_ok_and(|o| o.status.success()),
        "prlimit (util-linux) is needed to start capstan serve under a low descriptor limit: {prlimit:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log_path = dir.path().join("serve.log");
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut child = Command::new("prlimit")
        .arg(format!("--nofile={DESCRIPTORS}:{DESCRIPTORS}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_capstan"))
        .env("CAPSTAN_LOG", "info")
        .args([
            "serve",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            &address,
        ])
        .args(["--provisioning-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()))
        .spawn()
        .unwrap();
    let line = first_line(&mut child);
    let pid = child.id();
    let mut server = Serve(child);
    assert!(line.contains("ready at"), "first line: {line:?}");
    // prlimit runs the server in its own process: the limit is the server's, and with the hard
    // limit at 256 too it cannot be raised.
    assert_eq!(soft_descriptor_limit(pid), DESCRIPTORS);
    eprintln!(
        "idle capstan serve holds {} descriptors",
        open_descriptors(pid)
    );

    let config = tls_config(&data.join("pki/ca.crt"));
    let token = std::fs::read_to_string(data.join("pki/admin.token")).unwrap();
    let token = token.trim().to_owned();
    assert_eq!(
        get(&address, &config, "/healthz", None, Duration::from_secs(10)),
        Ok(200),
        "before the idle connections"
    );

    // 300 connections that shake hands and send nothing, held open by this process.
    let started = Instant::now();
    let attempts: Vec<std::thread::JoinHandle<Result<Tls, String>>> = (0..IDLE_CONNECTIONS)
        .map(|_| {
            let (address, config) = (address.clone(), config.clone());
            std::thread::spawn(move || handshake(&address, &config, Duration::from_secs(10)))
        })
        .collect();
    let idle: Vec<Tls> = attempts
        .into_iter()
        .filter_map(|attempt| attempt.join().unwrap().ok())
        .collect();
    eprintln!(
        "{} of {IDLE_CONNECTIONS} idle connections finished their handshake in {:.1?}; the server holds {} descriptors",
        idle.len(),
        started.elapsed(),
        open_descriptors(pid)
    );

    // Health probes get through while the idle connections are held.
    until("/healthz answers 200", Duration::from_secs(30), || {
        get(&address, &config, "/healthz", None, Duration::from_secs(5)).and_then(|code| {
            if code == 200 {
                Ok(())
            } else {
                Err(format!("status {code}"))
            }
        })
    });
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "capstan serve exited"
    );
    until(
        "an authenticated GET answers 200",
        Duration::from_secs(30),
        || {
            get(
                &address,
                &config,
                "/api/v1/namespaces",
                Some(&token),
                Duration::from_secs(5),
            )
            .and_then(|code| {
                if code == 200 {
                    Ok(())
                } else {
                    Err(format!("status {code}"))
                }
            })
        },
    );
    assert!(
        open_descriptors(pid) < usize::try_from(DESCRIPTORS).unwrap(),
        "descriptors left for the rest of the process"
    );
    drop(idle);

    // Shedding was logged at info, not once per shed connection.
    let log = std::fs::read_to_string(&log_path).unwrap();
    let shed_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("shedding idle connections"))
        .collect();
    assert!(!shed_lines.is_empty(), "no shedding logged:\n{log}");
    for line in log
        .lines()
        .filter(|l| l.contains("capstan_apiserver::conn"))
    {
        eprintln!("{line}");
    }
    assert!(
        shed_lines.iter().all(|l| l.contains("INFO")),
        "{shed_lines:#?}"
    );
    assert!(
        shed_lines.len() <= 10,
        "shedding logged {} times for {IDLE_CONNECTIONS} connections:\n{}",
        shed_lines.len(),
        shed_lines.join("\n")
    );
    assert!(
        log.contains("connection limit derived from the descriptor limit"),
        "{log}"
    );
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "capstan serve exited"
    );
}
