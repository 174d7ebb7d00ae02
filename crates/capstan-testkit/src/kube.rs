//! A real Kubernetes control plane for management-cluster tests: etcd 3.6 and kube-apiserver 1.35
//! (the binaries [`crate::peers`] finds), as processes on loopback ports of their own, with a CA,
//! serving certificate, ServiceAccount key pair and an admin (`system:masters`) kubeconfig made
//! here. No controller manager or scheduler runs: what a management cluster needs of Kubernetes
//! itself for capstan is its API (CRDs, RBAC, Leases, Secrets, garbage collection aside).
//!
//! Both processes stop when the [`KubeApiserver`] is dropped; their logs stay in its directory and
//! are printed when it fails to come up.

use crate::{free_port, peers};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// A running kube-apiserver on its own etcd.
pub struct KubeApiserver {
    dir: tempfile::TempDir,
    processes: Vec<Child>,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// An admin kubeconfig (client certificate in `system:masters`).
    pub kubeconfig: PathBuf,
}

struct Pki {
    ca_cert: String,
    serving: (String, String),
    admin: (String, String),
    service_accounts: (String, String),
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().expect("generating the CA key");
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "kubernetes");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).expect("signing the CA");
    let issuer = Issuer::new(ca, ca_key);

    let serving_key = KeyPair::generate().expect("generating the serving key");
    let mut serving = CertificateParams::new(vec![
        "localhost".to_owned(),
        "kubernetes".to_owned(),
        "kubernetes.default.svc".to_owned(),
    ])
    .expect("serving certificate names");
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving
        .signed_by(&serving_key, &issuer)
        .expect("signing the serving certificate");

    let admin_key = KeyPair::generate().expect("generating the admin key");
    let mut admin = CertificateParams::default();
    admin
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    admin
        .distinguished_name
        .push(DnType::CommonName, "kubernetes-admin");
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert = admin
        .signed_by(&admin_key, &issuer)
        .expect("signing the admin certificate");

    let sa_key = KeyPair::generate().expect("generating the ServiceAccount key");
    Pki {
        ca_cert: ca_cert.pem(),
        serving: (serving_cert.pem(), serving_key.serialize_pem()),
        admin: (admin_cert.pem(), admin_key.serialize_pem()),
        service_accounts: (sa_key.public_key_pem(), sa_key.serialize_pem()),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|err| panic!("writing {}: {err}", path.display()));
    path
}

fn spawn(binary: &Path, args: &[String], log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("creating a log file");
    let err = out.try_clone().expect("cloning a log file");
    Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl KubeApiserver {
    /// Starts etcd and kube-apiserver and waits until `/readyz` answers ok.
    pub fn start() -> Self {
        let etcd = peers::binary("etcd");
        let apiserver = peers::binary("kube-apiserver");
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        let d = dir.path();
        let pki = pki();
        let ca = write(d, "ca.crt", &pki.ca_cert);
        let serving_cert = write(d, "apiserver.crt", &pki.serving.0);
        let serving_key = write(d, "apiserver.key", &pki.serving.1);
        let sa_pub = write(d, "sa.pub", &pki.service_accounts.0);
        let sa_key = write(d, "sa.key", &pki.service_accounts.1);

        let (etcd_client, etcd_peer, secure_port) = (free_port(), free_port(), free_port());
        let mut processes = vec![spawn(
            &etcd,
            &[
                "--name=management".to_owned(),
                format!("--data-dir={}", d.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-cluster=management=http://127.0.0.1:{etcd_peer}"),
                "--listen-metrics-urls=".to_owned(),
            ],
            &d.join("etcd.log"),
        )];
        processes.push(spawn(
            &apiserver,
            &[
                format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
                "--bind-address=127.0.0.1".to_owned(),
                "--advertise-address=127.0.0.1".to_owned(),
                format!("--secure-port={secure_port}"),
                format!("--cert-dir={}", d.join("certs").display()),
                format!("--tls-cert-file={}", serving_cert.display()),
                format!("--tls-private-key-file={}", serving_key.display()),
                format!("--client-ca-file={}", ca.display()),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
                format!("--service-account-key-file={}", sa_pub.display()),
                format!("--service-account-signing-key-file={}", sa_key.display()),
                "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
                "--authorization-mode=RBAC".to_owned(),
                "--allow-privileged=true".to_owned(),
            ],
            &d.join("kube-apiserver.log"),
        ));
        let url = format!("https://127.0.0.1:{secure_port}");
        let kubeconfig = write(
            d,
            "admin.kubeconfig",
            &kubeconfig_text(&url, &pki.ca_cert, &pki.admin.0, &pki.admin.1),
        );
        let server = Self {
            dir,
            processes,
            url,
            kubeconfig,
        };
        // kube-apiserver gives no readiness signal but its /readyz (storage, RBAC bootstrap, CRD
        // informers): ask it until it says ok.
        let ready = crate::until(Duration::from_secs(120), || {
            server
                .kubectl(&["get", "--raw", "/readyz"])
                .status
                .success()
        });
        assert!(
            ready,
            "kube-apiserver did not become ready within 120 s\n--- etcd ---\n{}\n--- kube-apiserver ---\n{}",
            tail(&server.dir.path().join("etcd.log"), 20),
            tail(&server.dir.path().join("kube-apiserver.log"), 40)
        );
        server
    }

    /// Runs the real kubectl (the peers' v1.35) against this API server.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(peers::binary("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("running kubectl")
    }

    /// [`Self::kubectl`], failing the test unless it succeeds; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The last `lines` lines of kube-apiserver's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.dir.path().join("kube-apiserver.log"), lines)
    }
}

impl Drop for KubeApiserver {
    fn drop(&mut self) {
        for process in self.processes.iter_mut().rev() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

fn base64(text: &str) -> String {
    use base64::Engine as _;
    // kubeconfig's *-data fields are base64 of the PEM.
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn kubeconfig_text(url: &str, ca: &str, cert: &str, key: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: management\n  cluster:\n    server: {url}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: admin@management\n  context:\n    cluster: management\n    user: admin\ncurrent-context: admin@management\n",
        base64(ca),
        base64(cert),
        base64(key)
    )
}
