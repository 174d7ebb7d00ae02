//! Hypervisor credentials from Secrets, against a real libvirtd that asks for them: the test
//! starts its own libvirtd with a TCP listener on 127.0.0.1 whose clients must authenticate with
//! SASL (DIGEST-MD5, a user in a sasldb the test writes with `saslpasswd2`). It runs in a mount
//! namespace of its own with empty `/run/libvirt`, `/var/lib/libvirt`, `/var/cache/libvirt` and
//! `/etc/libvirt`, so it neither meets another libvirtd's sockets nor takes over its domains and
//! networks; it shares the test's (loopback) network namespace.
//!
//! Checked: the driver opens `qemu+tcp://` and `test+tcp://` with the Secret's username and
//! password and is refused with wrong ones or none; a KVMMachine on a `test+tcp://` hypervisor
//! (libvirt's simulated hypervisor behind the authenticating daemon) is built with the right
//! Secret; a wrong password becomes `HypervisorAuthFailed` with a Warning Event that say to check
//! the Secret, and neither they nor the machine's status show the password.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capstan_apiserver::conversion::ModelConverter;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_kvm::Driver;
use capstan_kvm::driver::{Credentials, DriverError};
use capstan_model::kvm::v1beta2::KVMMachine;
use capstan_runtime::{CancellationToken, RunOptions};
use capstan_store::{Store, StoreOptions};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const USER: &str = "capstan";
const PASSWORD: &str = "c0rrect-h0rse-pw";
const WRONG: &str = "wr0ng-batt3ry-pw";
const NS: &str = "creds";
const WAIT: Duration = Duration::from_secs(90);

/// The test's own libvirtd; stopped when dropped.
struct Daemon {
    child: Child,
    port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A libvirtd in a private mount namespace listening on 127.0.0.1 with SASL authentication,
/// knowing user `USER` with `PASSWORD`.
fn sasl_libvirtd(dir: &Path) -> Daemon {
    let sasl = dir.join("sasl");
    std::fs::create_dir_all(&sasl).unwrap();
    let db = sasl.join("passwd.db");
    std::fs::write(
        sasl.join("libvirt.conf"),
        format!("mech_list: digest-md5\nsasldb_path: {}\n", db.display()),
    )
    .unwrap();
    let mut saslpasswd = Command::new("saslpasswd2")
        .args(["-p", "-c", "-a", "libvirt", "-f"])
        .arg(&db)
        .arg(USER)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("saslpasswd2: {e} (run scripts/install-deps.sh)"));
    saslpasswd
        .stdin
        .take()
        .unwrap()
        .write_all(PASSWORD.as_bytes())
        .unwrap();
    assert!(saslpasswd.wait().unwrap().success(), "saslpasswd2 failed");
    let port = free_port();
    start_libvirtd(
        dir,
        Some(port),
        &format!("listen_tls = 0\nlisten_tcp = 1\ntcp_port = \"{port}\"\nauth_tcp = \"sasl\"\n"),
        &sasl,
    )
}

/// libvirtd with `settings` (its listener, if any: `port`) in a private mount namespace, its
/// UNIX socket in that namespace's own `/run/libvirt`. QEMU runs as root and logs to files (no
/// virtlogd there).
fn start_libvirtd(dir: &Path, port: Option<u16>, settings: &str, sasl: &Path) -> Daemon {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let conf = dir.join("libvirtd.conf");
    let listen = if port.is_some() {
        "listen_addr = \"127.0.0.1\"\n"
    } else {
        ""
    };
    std::fs::write(&conf, format!("{listen}{settings}")).unwrap();
    let script = format!(
        "set -e; for d in /run/libvirt /var/lib/libvirt /var/cache/libvirt /etc/libvirt /var/log/libvirt /run/sshd; do mkdir -p $d; mount -t tmpfs -o mode=0755 tmpfs $d; done; mkdir -p /var/log/libvirt/qemu; \
         printf 'user = \"root\"\\ngroup = \"root\"\\nstdio_handler = \"file\"\\n' > /etc/libvirt/qemu.conf; \
         exec libvirtd -f {} {} -p {}",
        conf.display(),
        if port.is_some() { "--listen" } else { "" },
        run.join("libvirtd.pid").display()
    );
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("SASL_CONF_PATH", sasl)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("libvirtd.log")).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("libvirtd: {e} (run scripts/install-deps.sh)"));
    // `unshare` and `sh` exec, so this is libvirtd's pid; its socket as seen from outside.
    let socket = format!("/proc/{}/root/run/libvirt/libvirt-sock", child.id());
    let mut daemon = Daemon {
        child,
        port: port.unwrap_or_default(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    // Until `sh` has mounted the namespace's own /run/libvirt and exec'd libvirtd, the path seen
    // through /proc is the host's socket (a libvirtd other tests started answers there): only
    // once the process is libvirtd does the socket belong to this daemon.
    let pid = daemon.child.id();
    let is_libvirtd = || {
        std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|exe| exe.file_name().is_some_and(|name| name == "libvirtd"))
    };
    let answers = || match port {
        Some(port) => std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        None => is_libvirtd() && std::os::unix::net::UnixStream::connect(&socket).is_ok(),
    };
    while !answers() {
        if let Ok(Some(status)) = daemon.child.try_wait() {
            panic!(
                "libvirtd exited ({status}): {}",
                std::fs::read_to_string(dir.join("libvirtd.log")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "libvirtd did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e} (run scripts/install-deps.sh)"));
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`NAME-ca.pem`, `NAME-ca.key`) and a certificate it signs (`NAME.pem`, `NAME.key`) for
/// `subject`, with `extensions` (an openssl extension file's lines).
fn certificate(dir: &Path, name: &str, ca: &str, subject: &str, extensions: &str) {
    if !dir.join(format!("{ca}-ca.pem")).exists() {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-keyout",
                &format!("{ca}-ca.key"),
                "-out",
                &format!("{ca}-ca.pem"),
                "-subj",
                &format!("/CN={ca}"),
            ],
        );
    }
    std::fs::write(dir.join(format!("{name}.ext")), extensions).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={subject}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}-ca.pem"),
            "-CAkey",
            &format!("{ca}-ca.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_certificates_from_a_secret_open_a_qemu_tls_hypervisor() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    certificate(
        &pki,
        "server",
        "site",
        "127.0.0.1",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    certificate(
        &pki,
        "client",
        "site",
        "capstan",
        "extendedKeyUsage=clientAuth\n",
    );
    // Signed by a CA the hypervisor does not know.
    certificate(
        &pki,
        "stranger",
        "other",
        "capstan",
        "extendedKeyUsage=clientAuth\n",
    );
    let port = free_port();
    let daemon = start_libvirtd(
        dir.path(),
        Some(port),
        &format!(
            "listen_tls = 1\nlisten_tcp = 0\ntls_port = \"{port}\"\nauth_tls = \"none\"\nkey_file = \"{0}/server.key\"\ncert_file = \"{0}/server.pem\"\nca_file = \"{0}/site-ca.pem\"\n",
            pki.display()
        ),
        &pki,
    );
    let read = |name: &str| std::fs::read_to_string(pki.join(name)).unwrap();
    let tls = |name: &str| Credentials {
        client_certificate: Some(read(&format!("{name}.pem"))),
        client_key: Some(read(&format!("{name}.key"))),
        ca_certificate: Some(read("site-ca.pem")),
        ..Credentials::default()
    };
    let driver = Driver::new();
    for uri in [
        format!("test+tls://127.0.0.1:{}/default", daemon.port),
        format!("qemu+tls://127.0.0.1:{}/system", daemon.port),
    ] {
        // Without a certificate: libvirt looks in /etc/pki, which has none for this CA.
        driver.set_credentials(&uri, None);
        assert!(
            driver.domains(&uri, "").await.is_err(),
            "{uri} opened without a certificate"
        );
        driver.set_credentials(&uri, Some(tls("stranger")));
        let refused = driver.domains(&uri, "").await.unwrap_err();
        assert!(!refused.to_string().contains("PRIVATE KEY"), "{refused}");
        driver.set_credentials(&uri, Some(tls("client")));
        driver
            .domains(&uri, "")
            .await
            .unwrap_or_else(|e| panic!("{uri} with the client certificate: {e}"));
    }
    drop(daemon);
}

fn credentials(password: &str) -> Credentials {
    Credentials {
        username: Some(USER.into()),
        password: Some(password.into()),
        ..Credentials::default()
    }
}

fn dynamic(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> Api<kube::api::DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let resource = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    if kind == "Namespace" {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), NS, &resource)
    }
}

async fn create(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    mut object: Value,
) -> kube::api::DynamicObject {
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
    dynamic(client, api_version, kind, plural)
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
}

fn owner(kind: &str, object: &kube::api::DynamicObject) -> Value {
    json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": object.name_any(), "uid": object.uid().unwrap()}])
}

async fn machine(client: &Client, name: &str) {
    create(
        client,
        "v1",
        "Secret",
        "secrets",
        json!({"metadata": {"name": format!("{name}-bootstrap")}, "stringData": {"value": "#cloud-config\n"}}),
    )
    .await;
    let owner_machine = create(client, "cluster.x-k8s.io/v1beta2", "Machine", "machines", json!({
        "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMMachine", "name": name}},
    }))
    .await;
    create(client, "infrastructure.cluster.x-k8s.io/v1beta2", "KVMMachine", "kvmmachines", json!({
        "metadata": {"name": name, "ownerReferences": owner("Machine", &owner_machine), "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"resources": {"cpu": 1, "memory": "64Mi", "disk": "1Gi"}},
    }))
    .await;
}

/// Polls KVMMachine `name` until `check` says yes; shows its status when the wait fails.
async fn wait_for(
    client: &Client,
    name: &str,
    what: &str,
    check: impl Fn(&KVMMachine) -> bool,
) -> KVMMachine {
    let machines: Api<KVMMachine> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + WAIT;
    loop {
        let machine = machines.get_opt(name).await.unwrap();
        if let Some(machine) = &machine
            && check(machine)
        {
            return machine.clone();
        }
        assert!(
            Instant::now() < deadline,
            "KVMMachine {name}: {what}: {}",
            serde_json::to_string(&machine.and_then(|m| m.status)).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ready_reason(machine: &KVMMachine) -> Option<String> {
    machine
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")?
        .reason
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_credentials_from_a_secret_open_the_hypervisor_and_wrong_ones_say_so() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "capstan=info,kube=warn".into()),
        )
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let daemon = sasl_libvirtd(dir.path());
    let simulated = format!("test+tcp://127.0.0.1:{}/default", daemon.port);
    let qemu = format!("qemu+tcp://127.0.0.1:{}/system", daemon.port);

    // The driver alone: right, wrong and no credentials, on both drivers behind the daemon.
    let driver = Driver::new();
    for uri in [&simulated, &qemu] {
        driver.set_credentials(uri, Some(credentials(WRONG)));
        let refused = driver.domains(uri, "").await.unwrap_err();
        assert!(
            matches!(refused, DriverError::AuthFailed { .. }),
            "{uri}: {refused:?}"
        );
        let shown = format!("{refused} {refused:?}");
        assert!(shown.contains("credentialsSecretRef"), "{shown}");
        assert!(!shown.contains(WRONG), "{shown}");
        driver.set_credentials(uri, None);
        let anonymous = driver.domains(uri, "").await.unwrap_err();
        assert!(!anonymous.to_string().is_empty());
        // A changed Secret reopens the connection with the new credentials.
        driver.set_credentials(uri, Some(credentials(PASSWORD)));
        driver
            .domains(uri, "")
            .await
            .unwrap_or_else(|e| panic!("{uri} with the right password: {e}"));
    }
    // Opened and authenticated for real: the simulated hypervisor's own domain is listed.
    assert_eq!(
        driver.domains(&simulated, "").await.unwrap(),
        vec!["test".to_owned()]
    );

    // Through the controller: the KVMCluster names a Secret.
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(store, Arc::new(ModelConverter), Auth { tokens: Vec::new() })
        .await
        .unwrap();
    let client = in_process_client(server.router());
    let shutdown = CancellationToken::new();
    {
        let client = client.clone();
        let options = RunOptions::new(shutdown.clone());
        let driver = Driver::new();
        tokio::spawn(async move {
            capstan_runtime::run(client, options, move || {
                capstan_kvm::controllers(driver.clone(), None)
            })
            .await
        });
    }
    create(
        &client,
        "v1",
        "Namespace",
        "namespaces",
        json!({"metadata": {"name": NS}}),
    )
    .await;
    create(
        &client,
        "v1",
        "Secret",
        "secrets",
        json!({"metadata": {"name": "hv-login"}, "stringData": {"username": USER, "password": PASSWORD}}),
    )
    .await;
    let cluster = create(&client, "cluster.x-k8s.io/v1beta2", "Cluster", "clusters", json!({
        "metadata": {"name": "c1"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMCluster", "name": "c1"}},
    }))
    .await;
    dynamic(&client, "cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"status": {"initialization": {"infrastructureProvisioned": true}}}),
            ),
        )
        .await
        .unwrap();
    create(
        &client,
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "KVMCluster",
        "kvmclusters",
        json!({
            "metadata": {"name": "c1", "ownerReferences": owner("Cluster", &cluster)},
            "spec": {"controlPlaneEndpoint": {"host": "192.168.122.5", "port": 6443},
                     "hypervisors": [{"name": "remote", "uri": simulated, "pool": "default-pool",
                                      "credentialsSecretRef": {"name": "hv-login"}}]},
        }),
    )
    .await;
    machine(&client, "m0").await;
    let built = wait_for(&client, "m0", "provisioned", |m| {
        m.spec.provider_id.is_some() && ready_reason(m).as_deref() == Some("Provisioned")
    })
    .await;
    assert_eq!(
        built.status.as_ref().unwrap().domain_state.as_deref(),
        Some("running")
    );
    let domain = capstan_kvm::machine::domain_name(NS, "m0");
    assert!(
        driver
            .domains(&simulated, "")
            .await
            .unwrap()
            .contains(&domain),
        "the domain is on the authenticated hypervisor"
    );

    // The Secret's password goes wrong: a new machine cannot be placed, and says why.
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), NS)
        .patch(
            "hv-login",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"password": WRONG}})),
        )
        .await
        .unwrap();
    machine(&client, "m1").await;
    let refused = wait_for(&client, "m1", "HypervisorAuthFailed", |m| {
        ready_reason(m).as_deref() == Some("HypervisorAuthFailed")
    })
    .await;
    let status = serde_json::to_string(&refused.status).unwrap();
    assert!(
        status.contains("check the Secret named by credentialsSecretRef"),
        "{status}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + WAIT;
    let events = loop {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        if list
            .iter()
            .any(|e| e.reason.as_deref() == Some("HypervisorAuthFailed"))
        {
            break serde_json::to_string(&list).unwrap();
        }
        assert!(Instant::now() < deadline, "no HypervisorAuthFailed Event");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let machines = serde_json::to_string(
        &Api::<KVMMachine>::namespaced(client.clone(), NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|m| &m.status)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for secret in [PASSWORD, WRONG] {
        assert!(!events.contains(secret), "an Event shows the password");
        assert!(!machines.contains(secret), "a status shows the password");
    }
    shutdown.cancel();
    drop(daemon);
}

/// Everything the process logs, to look for secrets in.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Logs at debug level (capstan's crates) into a buffer.
fn capture_logs() -> Captured {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "capstan=debug,kube=warn",
        ))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    captured
}

/// A hypervisor reached by ssh: an OpenSSH server on 127.0.0.1 in the mount namespace of the
/// test's own libvirtd (whose socket is that namespace's `/run/libvirt/libvirt-sock`, where
/// libvirt's remote side, `virt-ssh-helper` or `nc`, looks for it), letting `root` in with one
/// key. Its domains are destroyed before it stops.
struct SshHypervisor {
    sshd: Child,
    libvirtd: Daemon,
    port: u16,
    /// The server's host key, as a known_hosts line for `[127.0.0.1]:port`.
    known_hosts: String,
}

impl SshHypervisor {
    /// A command in the daemon's mount namespace (`virsh -c qemu:///system` reaches it there).
    fn inside(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("nsenter")
            .args(["--target", &self.libvirtd.child.id().to_string(), "--mount"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    fn virsh(&self, args: &[&str]) -> String {
        let mut all = vec!["virsh", "-c", "qemu:///system"];
        all.extend_from_slice(args);
        let (ok, out) = self.inside(&all);
        assert!(ok, "virsh {}: {out}", args.join(" "));
        out
    }
}

impl Drop for SshHypervisor {
    fn drop(&mut self) {
        // Sessions still open when the server stops would outlive it unreaped: wait for the
        // clients to close them (the test drops its connections first).
        let children = format!("/proc/{0}/task/{0}/children", self.sshd.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&children).is_ok_and(|c| !c.trim().is_empty())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
        let (_, running) = self.inside(&["virsh", "-c", "qemu:///system", "list", "--name"]);
        for domain in running.lines().filter(|l| !l.trim().is_empty()) {
            let _ = self.inside(&["virsh", "-c", "qemu:///system", "destroy", domain.trim()]);
        }
    }
}

fn ssh_keygen(dir: &Path, name: &str) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(dir.join(name))
        .output()
        .unwrap_or_else(|e| panic!("ssh-keygen: {e} (run scripts/install-deps.sh)"));
    assert!(
        out.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`SshHypervisor`] with a pool `default` in `dir/pool`, accepting the key `dir/id`.
fn ssh_hypervisor(dir: &Path) -> SshHypervisor {
    let libvirtd = start_libvirtd(dir, None, "", dir);
    for key in ["host", "id"] {
        ssh_keygen(dir, key);
    }
    std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys")).unwrap();
    let port = free_port();
    std::fs::write(
        dir.join("sshd_config"),
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {0}/host\nAuthorizedKeysFile {0}/authorized_keys\n\
             PidFile none\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPrintMotd no\nLogLevel VERBOSE\n",
            dir.display()
        ),
    )
    .unwrap();
    let sshd = Command::new("nsenter")
        .args(["--target", &libvirtd.child.id().to_string(), "--mount"])
        .args(["/usr/sbin/sshd", "-D", "-e", "-f"])
        .arg(dir.join("sshd_config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("sshd.log")).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("sshd: {e} (run scripts/install-deps.sh)"));
    let host_key = std::fs::read_to_string(dir.join("host.pub")).unwrap();
    let mut hypervisor = SshHypervisor {
        sshd,
        libvirtd,
        port,
        known_hosts: format!("[127.0.0.1]:{port} {}", host_key.trim()),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = hypervisor.sshd.try_wait() {
            panic!(
                "sshd exited ({status}): {} (is openssh-server installed? run scripts/install-deps.sh)",
                std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "sshd did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pool = dir.join("pool");
    std::fs::create_dir_all(&pool).unwrap();
    hypervisor.virsh(&[
        "pool-create-as",
        "default",
        "dir",
        "--target",
        &pool.display().to_string(),
    ]);
    hypervisor
}

fn ssh_credentials(key: &str, known_hosts: Option<&str>) -> Credentials {
    Credentials {
        ssh_private_key: Some(key.into()),
        ssh_known_hosts: known_hosts.map(Into::into),
        ..Credentials::default()
    }
}

/// Polls until `check` holds for the hypervisor's `virsh` output of `args`.
fn until_virsh(hypervisor: &SshHypervisor, args: &[&str], check: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        let out = hypervisor.virsh(args);
        if check(&out) {
            return;
        }
        assert!(Instant::now() < deadline, "virsh {}: {out}", args.join(" "));
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssh_key_from_a_secret_opens_a_qemu_ssh_hypervisor_and_a_wrong_one_says_so() {
    let logs = capture_logs();
    let dir = tempfile::tempdir().unwrap();
    let hypervisor = ssh_hypervisor(dir.path());
    ssh_keygen(dir.path(), "stranger");
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let key = read("id");
    let stranger = read("stranger");
    let known_hosts = hypervisor.known_hosts.clone();
    // A host key recorded for that address which is not the server's.
    let impostor = format!(
        "[127.0.0.1]:{} {}",
        hypervisor.port,
        read("stranger.pub").trim()
    );
    let uri = format!("qemu+ssh://root@127.0.0.1:{}/system", hypervisor.port);

    // The driver alone.
    let driver = Driver::new();
    driver.set_credentials(&uri, Some(ssh_credentials(&key, Some(&known_hosts))));
    assert_eq!(
        driver
            .domains(&uri, "")
            .await
            .unwrap_or_else(|e| panic!("{uri} with the key: {e}")),
        Vec::<String>::new()
    );
    let mut shown = Vec::new();
    driver.set_credentials(&uri, Some(ssh_credentials(&stranger, Some(&known_hosts))));
    let refused = driver.domains(&uri, "").await.unwrap_err();
    assert!(
        matches!(refused, DriverError::AuthFailed { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("authorized_keys"), "{refused}");
    shown.push(format!("{refused} {refused:?}"));
    // No known_hosts in the Secret: the user's own (which has no key for this port).
    driver.set_credentials(&uri, Some(ssh_credentials(&key, None)));
    let unknown = driver.domains(&uri, "").await.unwrap_err();
    assert!(
        matches!(unknown, DriverError::HostKeyUnverified { .. }),
        "{unknown:?}"
    );
    assert!(
        unknown.to_string().contains("no key is recorded"),
        "{unknown}"
    );
    assert!(unknown.to_string().contains("known_hosts"), "{unknown}");
    shown.push(format!("{unknown} {unknown:?}"));
    driver.set_credentials(&uri, Some(ssh_credentials(&key, Some(&impostor))));
    let changed = driver.domains(&uri, "").await.unwrap_err();
    assert!(
        matches!(changed, DriverError::HostKeyUnverified { .. }),
        "{changed:?}"
    );
    assert!(changed.to_string().contains("differs"), "{changed}");
    shown.push(format!("{changed} {changed:?}"));
    // Checking turned off in the URI, by the user's choice.
    let unchecked = format!("{uri}?no_verify=1");
    driver.set_credentials(&unchecked, Some(ssh_credentials(&key, None)));
    driver
        .domains(&unchecked, "")
        .await
        .unwrap_or_else(|e| panic!("{unchecked}: {e}"));
    // The Secret's known_hosts wins over no_verify: a wrong one is still refused.
    driver.set_credentials(&unchecked, Some(ssh_credentials(&key, Some(&impostor))));
    assert!(matches!(
        driver.domains(&unchecked, "").await.unwrap_err(),
        DriverError::HostKeyUnverified { .. }
    ));

    // Through the controller: a KVMMachine defined on the hypervisor over ssh.
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(store, Arc::new(ModelConverter), Auth { tokens: Vec::new() })
        .await
        .unwrap();
    let client = in_process_client(server.router());
    let shutdown = CancellationToken::new();
    let controllers = {
        let client = client.clone();
        let options = RunOptions::new(shutdown.clone());
        let driver = Driver::new();
        tokio::spawn(async move {
            capstan_runtime::run(client, options, move || {
                capstan_kvm::controllers(driver.clone(), None)
            })
            .await
        })
    };
    create(
        &client,
        "v1",
        "Namespace",
        "namespaces",
        json!({"metadata": {"name": NS}}),
    )
    .await;
    create(
        &client,
        "v1",
        "Secret",
        "secrets",
        json!({"metadata": {"name": "hv-ssh"}, "stringData": {"ssh-privatekey": key, "known_hosts": known_hosts}}),
    )
    .await;
    let cluster = create(&client, "cluster.x-k8s.io/v1beta2", "Cluster", "clusters", json!({
        "metadata": {"name": "c1"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMCluster", "name": "c1"}},
    }))
    .await;
    dynamic(&client, "cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"status": {"initialization": {"infrastructureProvisioned": true}}}),
            ),
        )
        .await
        .unwrap();
    create(
        &client,
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "KVMCluster",
        "kvmclusters",
        json!({
            "metadata": {"name": "c1", "ownerReferences": owner("Cluster", &cluster)},
            "spec": {"controlPlaneEndpoint": {"host": "192.168.122.5", "port": 6443},
                     "hypervisors": [{"name": "remote", "uri": uri, "pool": "default", "domainType": "qemu",
                                      "credentialsSecretRef": {"name": "hv-ssh"}}]},
        }),
    )
    .await;
    vm_machine(&client, "m0").await;
    let built = wait_for(&client, "m0", "provisioned", |m| {
        m.spec.provider_id.is_some() && ready_reason(m).as_deref() == Some("Provisioned")
    })
    .await;
    let domain = capstan_kvm::machine::domain_name(NS, "m0");
    assert_eq!(
        built.status.as_ref().unwrap().hypervisor_uri.as_deref(),
        Some(uri.as_str())
    );
    let info = hypervisor.virsh(&["dominfo", &domain]);
    assert!(
        info.contains(&built.metadata.uid.clone().unwrap()),
        "the domain on the hypervisor has the KVMMachine's UID: {info}"
    );

    // The Secret's key goes wrong: a new machine cannot be placed, and says why.
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), NS);
    secrets
        .patch(
            "hv-ssh",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"ssh-privatekey": stranger}})),
        )
        .await
        .unwrap();
    vm_machine(&client, "m1").await;
    let refused = wait_for(&client, "m1", "HypervisorAuthFailed", |m| {
        ready_reason(m).as_deref() == Some("HypervisorAuthFailed")
    })
    .await;
    let status = serde_json::to_string(&refused.status).unwrap();
    assert!(
        status.contains("check the Secret named by credentialsSecretRef")
            && status.contains("authorized_keys"),
        "{status}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + WAIT;
    let events_text = loop {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        if list
            .iter()
            .any(|e| e.reason.as_deref() == Some("HypervisorAuthFailed"))
        {
            break serde_json::to_string(&list).unwrap();
        }
        assert!(Instant::now() < deadline, "no HypervisorAuthFailed Event");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // The right key again; deleting the machines over ssh leaves nothing on the hypervisor.
    secrets
        .patch(
            "hv-ssh",
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": {"ssh-privatekey": key}})),
        )
        .await
        .unwrap();
    let machines: Api<KVMMachine> = Api::namespaced(client.clone(), NS);
    let statuses = serde_json::to_string(
        &machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|m| &m.status)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for name in ["m0", "m1"] {
        machines
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .unwrap();
    }
    let deadline = Instant::now() + WAIT;
    while !machines
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the KVMMachines were not deleted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    until_virsh(&hypervisor, &["list", "--all", "--name"], |out| {
        !out.contains(&domain)
    });
    let volumes = hypervisor.virsh(&["vol-list", "default"]);
    assert!(!volumes.contains(&domain), "volumes left: {volumes}");
    shutdown.cancel();
    let _ = controllers.await;
    drop(driver);

    // The private keys appear nowhere: not in errors, conditions, Events, capstan's logs, or
    // what the daemons logged.
    let logged = logs.text();
    assert!(
        logged.contains("capstan_kvm") || logged.contains("kvmmachine"),
        "the captured logs are capstan's: {logged}"
    );
    let daemons = read("libvirtd.log") + &read("sshd.log");
    for secret in [&key, &stranger] {
        for line in secret
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() > 16)
        {
            for (what, text) in [
                ("an error", shown.join("\n")),
                ("a status", statuses.clone()),
                ("an Event", events_text.clone()),
                ("capstan's logs", logged.clone()),
                ("the daemons' logs", daemons.clone()),
            ] {
                assert!(!text.contains(line), "{what} shows a private key");
            }
        }
    }
    drop(hypervisor);
}

/// A Machine and its KVMMachine for a small VM with user-mode networking (the test's libvirtd
/// has no libvirt network), no base image (a blank root disk).
async fn vm_machine(client: &Client, name: &str) {
    create(
        client,
        "v1",
        "Secret",
        "secrets",
        json!({"metadata": {"name": format!("{name}-bootstrap")}, "stringData": {"value": "#cloud-config\n"}}),
    )
    .await;
    let owner_machine = create(client, "cluster.x-k8s.io/v1beta2", "Machine", "machines", json!({
        "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMMachine", "name": name}},
    }))
    .await;
    create(client, "infrastructure.cluster.x-k8s.io/v1beta2", "KVMMachine", "kvmmachines", json!({
        "metadata": {"name": name, "ownerReferences": owner("Machine", &owner_machine), "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"resources": {"cpu": 1, "memory": "64Mi", "disk": "64Mi"}, "networks": [{"user": true}]},
    }))
    .await;
}
