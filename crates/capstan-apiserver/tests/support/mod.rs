//! The API server started in-process over real TLS for integration tests, and kubectl to drive it.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

pub mod raw;

use capstan_apiserver::conversion::ModelConverter;
use capstan_apiserver::tls::Credentials;
use capstan_apiserver::{ApiServer, Auth};
use capstan_store::{Store, StoreOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

pub struct Server {
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub url: String,
    pub token: String,
    pub ca: PathBuf,
    _runtime: tokio::runtime::Runtime,
}

pub fn start() -> Server {
    start_with(capstan_apiserver::conn::ConnectionLimits::default())
}

pub fn start_with(limits: capstan_apiserver::conn::ConnectionLimits) -> Server {
    start_configured(limits, true, None)
}

/// A server that refuses requests without credentials (`--anonymous-auth=false`).
pub fn start_without_anonymous() -> Server {
    start_configured(
        capstan_apiserver::conn::ConnectionLimits::default(),
        false,
        None,
    )
}

/// A server whose ServiceAccount tokens have `issuer` and which accepts tokens for
/// `api_audiences` (`--service-account-issuer`, `--api-audiences`).
pub fn start_with_token_issuer(issuer: &str, api_audiences: &[&str]) -> Server {
    let audiences: Vec<String> = api_audiences.iter().map(|a| (*a).to_owned()).collect();
    start_configured(
        capstan_apiserver::conn::ConnectionLimits::default(),
        true,
        Some(capstan_apiserver::builtin::tokens::TokenIssuer::new(issuer, &audiences).unwrap()),
    )
}

fn start_configured(
    limits: capstan_apiserver::conn::ConnectionLimits,
    anonymous: bool,
    token_issuer: Option<capstan_apiserver::builtin::tokens::TokenIssuer>,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pki = dir.path().join("pki");
    let creds = Credentials::load_or_create(&pki, &[]).unwrap();
    let tls = creds.server_config(&pki).unwrap();
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let server = runtime
        .block_on(ApiServer::new(
            store,
            Arc::new(ModelConverter),
            Auth {
                tokens: vec![creds.admin_token.clone()],
            },
        ))
        .unwrap();
    server.set_anonymous_auth(anonymous);
    if let Some(issuer) = token_issuer {
        server.set_token_issuer(issuer);
    }
    server.set_service_account_key(
        capstan_apiserver::builtin::tokens::SigningKey::load_or_create(&pki).unwrap(),
    );
    runtime.spawn(capstan_apiserver::serve::serve_tls_with(
        server.router(),
        listener,
        tls,
        limits,
        std::future::pending(),
    ));
    let kubeconfig = dir.path().join("kubeconfig");
    creds.write_kubeconfig(&kubeconfig, &url).unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, &creds.ca_cert_pem).unwrap();
    Server {
        token: creds.admin_token.clone(),
        dir,
        kubeconfig,
        url,
        ca,
        _runtime: runtime,
    }
}

/// A kubeconfig for the server that trusts its CA and holds no credentials the server accepts:
/// its user has only a Basic-auth name, which kube-apiserver ignores as capstan does (an empty
/// user would make kubectl prompt for one).
pub fn anonymous_kubeconfig(server: &Server) -> PathBuf {
    let path = server.dir.path().join("anonymous.kubeconfig");
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: capstan\n  cluster:\n    server: {}\n    certificate-authority: {}\ncontexts:\n- name: anonymous\n  context:\n    cluster: capstan\n    user: anonymous\ncurrent-context: anonymous\nusers:\n- name: anonymous\n  user:\n    username: nobody\n    password: none\n",
        server.url,
        server.ca.display()
    );
    std::fs::write(&path, config).unwrap();
    path
}

pub fn kubectl_at(binary: &Path, server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(binary)
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .args(args)
        .env("HOME", server.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed (scripts/test.sh installs what the tests need)");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

pub fn kubectl(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    kubectl_at(Path::new("kubectl"), server, args, stdin)
}

pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kubectl failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A multi-threaded runtime of two workers, for tests that race writers against each other.
pub fn racing_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

impl Server {
    /// A client of this server with its admin kubeconfig, over TLS as any remote client.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        kube::Client::try_from(config).unwrap()
    }
}
