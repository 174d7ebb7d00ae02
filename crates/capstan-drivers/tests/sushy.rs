#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Redfish driver against a real Redfish peer: `sushy-emulator --fake` from sushy-tools, on a
//! free loopback port, with basic auth. Every verb (power idempotency, reboot, one-time boot,
//! virtual media insert/replace/eject, inventory, system discovery) and every error kind a
//! network peer can cause (Unauthorized without the password, NotFound, Unreachable, timeout).
//! Over HTTPS: a certificate from an unknown CA is refused with a message naming both ways out;
//! trusting that CA (`--bmc-ca-file`) or the host's `disableCertificateVerification` lets it through.

use capstan_drivers::{
    Bmc, BmcAddress, BmcError, BootDevice, ConnectOptions, Credentials, Outcome, PowerState,
    RedfishBmc, TrustAnchors, connect,
};
use std::io::ErrorKind;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

const USER: &str = "admin";
const PASSWORD: &str = "correct-horse";
// bcrypt (the only digest sushy-emulator accepts) of PASSWORD, made with Python's bcrypt module
// (`bcrypt.hashpw(b"correct-horse", bcrypt.gensalt(rounds=4))`), so the tests need no hasher.
const PASSWORD_BCRYPT: &str = "$2b$04$iIi6vc8AiUYbQqDxgb1lgOpSgAdwFXJvGY.BNJh42sWLQGxXkRYaO";
// The fake driver's single system and NIC (sushy_tools/emulator/resources/systems/fakedriver.py).
const FAKE_SYSTEM: &str = "/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1ef094";
const FAKE_MAC: &str = "00:5c:52:31:3a:9c";
// The fake driver applies power changes 1 to 11 seconds after the request.
const POWER_DEADLINE: Duration = Duration::from_secs(30);

/// A running sushy-emulator, killed on drop.
struct Emulator {
    child: Child,
    port: u16,
    /// `http`, or `https` when it serves TLS.
    transport: &'static str,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// A certificate for sushy-emulator's HTTPS: a leaf for 127.0.0.1 signed by a throwaway CA.
struct ServerCertificate {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl ServerCertificate {
    fn for_loopback() -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test BMC CA");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.pem(), ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        Self {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Emulator {
    async fn start() -> Self {
        Self::start_with(None).await
    }

    async fn start_with(tls: Option<&ServerCertificate>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let htpasswd = dir.path().join("htpasswd");
        std::fs::write(&htpasswd, format!("{USER}:{PASSWORD_BCRYPT}\n")).unwrap();
        let state = dir.path().join("state");
        let config = dir.path().join("sushy.conf");
        std::fs::write(
            &config,
            format!(
                "SUSHY_EMULATOR_AUTH_FILE = r'{}'\nSUSHY_EMULATOR_STATE_DIR = r'{}'\n",
                htpasswd.display(),
                state.display()
            ),
        )
        .unwrap();
        let log = dir.path().join("sushy.log");
        let port = free_port();
        let mut command = Command::new("sushy-emulator");
        command
            .args([
                "--fake",
                "--interface",
                "127.0.0.1",
                "--port",
                &port.to_string(),
            ])
            .arg("--config")
            .arg(&config);
        if let Some(tls) = tls {
            let (cert, key) = (dir.path().join("bmc.crt"), dir.path().join("bmc.key"));
            std::fs::write(&cert, &tls.cert_pem).unwrap();
            std::fs::write(&key, &tls.key_pem).unwrap();
            command
                .arg("--ssl-certificate")
                .arg(&cert)
                .arg("--ssl-key")
                .arg(&key);
        }
        let child = match command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                panic!(
                    "sushy-emulator is not on PATH: run scripts/test.sh (or scripts/install-deps.sh)"
                )
            }
            Err(e) => panic!("cannot start sushy-emulator: {e}"),
        };
        let emulator = Self {
            child,
            port,
            transport: if tls.is_some() { "https" } else { "http" },
            log,
            _dir: dir,
        };
        emulator.wait_until_serving().await;
        emulator
    }

    fn address(&self, path: &str) -> String {
        format!("redfish+{}://127.0.0.1:{}{path}", self.transport, self.port)
    }

    fn bmc(&self, path: &str) -> RedfishBmc {
        self.bmc_with(path, options())
    }

    fn bmc_with(&self, path: &str, options: ConnectOptions) -> RedfishBmc {
        RedfishBmc::new(
            BmcAddress::parse(&self.address(path)).unwrap(),
            Credentials::new(USER, PASSWORD),
            options,
        )
        .unwrap()
    }

    /// Bounded retry until the emulator answers an authenticated request (over TLS without
    /// verification: the tests judge the certificate checks themselves).
    async fn wait_until_serving(&self) {
        let bmc = self.bmc_with(
            "",
            ConnectOptions {
                disable_certificate_verification: true,
                ..options()
            },
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match bmc.power_state().await {
                Ok(_) => return,
                Err(BmcError::Unreachable { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!(
                    "sushy-emulator did not come up: {e}\n{}",
                    read_log(&self.log)
                ),
            }
        }
    }
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn options() -> ConnectOptions {
    ConnectOptions {
        disable_certificate_verification: false,
        trust: TrustAnchors::system(),
        timeout: Duration::from_secs(10),
        permitted: None,
    }
}

/// Polls the power state until it is `want`, within [`POWER_DEADLINE`].
async fn wait_for_power(bmc: &dyn Bmc, want: PowerState) {
    let deadline = Instant::now() + POWER_DEADLINE;
    loop {
        let state = bmc.power_state().await.unwrap();
        if state == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "power stayed {state:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Serves a dummy ISO on a loopback port (sushy-emulator downloads inserted images); returns the
/// base URL.
async fn serve_dummy_iso() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let body = b"not really an ISO image";
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                if !request.starts_with(b"HEAD") {
                    let _ = stream.write_all(body).await;
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_against_sushy_emulator() {
    let emulator = Emulator::start().await;
    // No system path: the single system is discovered from /redfish/v1/Systems.
    let bmc = emulator.bmc("");

    let inventory = bmc.inventory().await.unwrap();
    assert_eq!(inventory.manufacturer.as_deref(), Some("Sushy Emulator"));
    assert!(
        inventory
            .nics
            .iter()
            .any(|n| n.mac_address.as_deref() == Some(FAKE_MAC)),
        "{inventory:?}"
    );

    // Power: off is a no-op on a system that is off; on is requested once, then a no-op.
    wait_for_power(&bmc, PowerState::Off).await;
    assert_eq!(bmc.set_power(false).await.unwrap(), Outcome::Unchanged);
    assert_eq!(bmc.set_power(true).await.unwrap(), Outcome::Requested);
    wait_for_power(&bmc, PowerState::On).await;
    assert_eq!(bmc.set_power(true).await.unwrap(), Outcome::Unchanged);

    // Reboot: sushy's fake drops to Off at once and comes back On later.
    assert_eq!(bmc.reboot().await.unwrap(), Outcome::Requested);
    wait_for_power(&bmc, PowerState::On).await;

    assert_eq!(bmc.set_power(false).await.unwrap(), Outcome::Requested);
    wait_for_power(&bmc, PowerState::Off).await;
    assert_eq!(bmc.set_power(false).await.unwrap(), Outcome::Unchanged);

    // One-time boot.
    assert_eq!(
        bmc.set_one_time_boot(BootDevice::Pxe).await.unwrap(),
        Outcome::Requested
    );
    assert_eq!(
        bmc.boot_override_target().await.unwrap().as_deref(),
        Some("Pxe")
    );
    bmc.set_one_time_boot(BootDevice::Cd).await.unwrap();
    assert_eq!(
        bmc.boot_override_target().await.unwrap().as_deref(),
        Some("Cd")
    );

    // Virtual media: insert, the same again (nothing), another (ejects first), eject twice.
    let iso = serve_dummy_iso().await;
    let first = format!("{iso}/first.iso");
    let second = format!("{iso}/second.iso");
    assert_eq!(bmc.inserted_media().await.unwrap(), None);
    assert_eq!(bmc.eject_virtual_media().await.unwrap(), Outcome::Unchanged);
    assert_eq!(
        bmc.insert_virtual_media(&first).await.unwrap(),
        Outcome::Requested
    );
    assert_eq!(bmc.inserted_media().await.unwrap(), Some(first.clone()));
    assert_eq!(
        bmc.insert_virtual_media(&first).await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(
        bmc.insert_virtual_media(&second).await.unwrap(),
        Outcome::Requested
    );
    assert_eq!(bmc.inserted_media().await.unwrap(), Some(second.clone()));
    assert_eq!(bmc.eject_virtual_media().await.unwrap(), Outcome::Requested);
    assert_eq!(bmc.inserted_media().await.unwrap(), None);
    assert_eq!(bmc.eject_virtual_media().await.unwrap(), Outcome::Unchanged);

    // The same system through connect() with an explicit system path.
    let explicit = connect(
        &emulator.address(FAKE_SYSTEM),
        Credentials::new(USER, PASSWORD),
        options(),
    )
    .unwrap();
    assert_eq!(explicit.power_state().await.unwrap(), PowerState::Off);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_against_sushy_emulator() {
    let emulator = Emulator::start().await;

    // Wrong password: Unauthorized, and neither the message nor Debug carries the password.
    let secret = "s3cr3t-Pa55word";
    let bmc = connect(
        &emulator.address(FAKE_SYSTEM),
        Credentials::new(USER, secret),
        options(),
    )
    .unwrap();
    assert!(!format!("{bmc:?}").contains(secret));
    let err = bmc.power_state().await.unwrap_err();
    assert!(
        matches!(err, BmcError::Unauthorized { status: 401, .. }),
        "{err}"
    );
    assert!(!err.to_string().contains(secret), "{err}");
    assert!(!format!("{err:?}").contains(secret), "{err:?}");
    assert!(err.to_string().contains(USER), "{err}");

    // Unknown system path: NotFound.
    let bmc = emulator.bmc("/redfish/v1/Systems/no-such-system");
    let err = bmc.set_power(true).await.unwrap_err();
    assert!(matches!(err, BmcError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("no-such-system"), "{err}");

    // Nothing listening: Unreachable.
    let closed = free_port();
    let bmc = connect(
        &format!("redfish+http://127.0.0.1:{closed}/redfish/v1/Systems/1"),
        Credentials::new(USER, PASSWORD),
        options(),
    )
    .unwrap();
    let err = bmc.power_state().await.unwrap_err();
    assert!(matches!(err, BmcError::Unreachable { .. }), "{err}");

    // A peer that accepts but never answers: Unreachable after the timeout.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let bmc = connect(
        &format!("redfish+http://127.0.0.1:{silent_port}/redfish/v1/Systems/1"),
        Credentials::new(USER, PASSWORD),
        ConnectOptions {
            timeout: Duration::from_millis(300),
            ..options()
        },
    )
    .unwrap();
    let err = bmc.power_state().await.unwrap_err();
    assert!(matches!(err, BmcError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("no answer within"), "{err}");
    drop(silent);

    // Schemes without a driver.
    for address in [
        "ipmi://10.0.0.1",
        "idrac-virtualmedia://10.0.0.1/redfish/v1/Systems/1",
    ] {
        let err = connect(address, Credentials::new(USER, PASSWORD), options()).unwrap_err();
        assert!(matches!(err, BmcError::Unsupported(_)), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_bmc_certificates_are_verified() {
    let certificate = ServerCertificate::for_loopback();
    let emulator = Emulator::start_with(Some(&certificate)).await;
    assert!(emulator.address("").starts_with("redfish+https://"));

    // The system CAs do not know the BMC's CA: refused, and the message says what to do.
    let err = emulator.bmc("").power_state().await.unwrap_err();
    let BmcError::Unreachable { reason, .. } = &err else {
        panic!("want Unreachable, got {err:?}");
    };
    assert!(reason.contains("certificate was not accepted"), "{reason}");
    assert!(reason.contains("UnknownIssuer"), "{reason}");
    assert!(reason.contains("--bmc-ca-file"), "{reason}");
    assert!(
        reason.contains("disableCertificateVerification"),
        "{reason}"
    );
    assert!(!err.to_string().contains(PASSWORD), "{err}");

    // The CA as an extra bundle: verified, and every read works over TLS.
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bmc-ca.pem");
    std::fs::write(&bundle, &certificate.ca_pem).unwrap();
    let trusted = ConnectOptions {
        trust: TrustAnchors::with_bundle(&bundle).unwrap(),
        ..options()
    };
    let bmc = emulator.bmc_with("", trusted.clone());
    bmc.power_state().await.unwrap();
    let inventory = bmc.inventory().await.unwrap();
    assert!(
        inventory
            .nics
            .iter()
            .any(|nic| nic.mac_address.as_deref() == Some(FAKE_MAC)),
        "{inventory:?}"
    );

    // The same CA does not make another name valid: the certificate is for 127.0.0.1 only.
    let by_name = RedfishBmc::new(
        BmcAddress::parse(&format!("redfish+https://localhost:{}", emulator.port)).unwrap(),
        Credentials::new(USER, PASSWORD),
        trusted,
    )
    .unwrap();
    let err = by_name.power_state().await.unwrap_err();
    assert!(
        err.to_string().contains("certificate was not accepted"),
        "{err}"
    );

    // disableCertificateVerification: accepted without the CA.
    let unverified = emulator.bmc_with(
        "",
        ConnectOptions {
            disable_certificate_verification: true,
            ..options()
        },
    );
    unverified.power_state().await.unwrap();

    // The scheme-chosen driver the controller uses takes the same options.
    let chosen = connect(
        &emulator.address(FAKE_SYSTEM),
        Credentials::new(USER, PASSWORD),
        ConnectOptions {
            trust: TrustAnchors::with_bundle(&bundle).unwrap(),
            ..options()
        },
    )
    .unwrap();
    chosen.power_state().await.unwrap();
}
