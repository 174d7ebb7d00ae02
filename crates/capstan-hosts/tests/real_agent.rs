//! The host controller, the provisioning server on loopback and the real agent, with only the
//! machine played by the test: a `fake://` BMC whose "boot" fetches the boot media from the
//! provisioning server (as a BMC would) and starts the agent with the kernel command line it
//! carries, against a fake `/sys` and a file as its disk.
//!
//! Covers inspection into `status.hardware`, a raw and a qcow2 deployment with the config drive
//! (read back with xorriso from the partition the agent added; the qcow2 one checked against a
//! `SHA256SUMS` file named by URL), a wrong checksum (provisioning error, host not provisioned, the
//! disk's first MiB zeroed), and cleaning on deprovision.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_agent::inspect::SystemRoot;
use capstan_agent::{Agent, AgentConfig};
use capstan_apiserver::conversion::ApiVersionRewrite;
use capstan_apiserver::in_process_client;
use capstan_apiserver::{ApiServer, Auth};
use capstan_drivers::{BmcAddress, FakeBmc};
use capstan_hosts::{
    AgentRegistry, BootMediaBuilder, HostController, HostSettings, ServerSettings,
};
use capstan_model::metal3::BareMetalHost;
use capstan_runtime::{CancellationToken, RunOptions, controller_task};
use capstan_store::{Store, StoreOptions};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);
const NS: &str = "default";
// Below the agent's 4 GiB default minimum, so the host names its root device by hint.
const DISK_BYTES: u64 = 256 << 20;

/// The "ISO" of this test is the kernel command line itself: the machine below reads it back.
#[derive(Debug)]
struct CmdlineMedia;
impl BootMediaBuilder for CmdlineMedia {
    fn boot_iso(&self, extra_cmdline: &str) -> Result<Vec<u8>, String> {
        Ok(format!("console=ttyS0 {extra_cmdline}").into_bytes())
    }
}

fn fake_sys(root: &Path) {
    let write = |rel: &str, content: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    };
    write("proc/cpuinfo", "processor\t: 0\nmodel name\t: Test CPU\n");
    write("proc/meminfo", "MemTotal:        2000000 kB\n");
    write("sys/class/net/eth0/address", "52:54:00:aa:bb:01\n");
    write("sys/class/net/eth0/device/vendor", "0x1af4\n");
    write("sys/block/vda/size", &(DISK_BYTES / 512).to_string());
    write("sys/block/vda/queue/rotational", "1\n");
}

/// Plays the machine behind a fake BMC: whenever media is inserted and the host powered on, it
/// fetches the media over HTTP and runs the agent it describes (one per boot). Each boot's agent
/// runs in a process of its own (this test binary, re-entered through [`agent_process`]) and a
/// new boot kills the previous one, as a reboot would: two agents must never write one disk.
fn play_machine(address: &str, root: PathBuf, dev: PathBuf, stop: CancellationToken) {
    let bmc = FakeBmc::shared(&BmcAddress::parse(address).unwrap());
    std::thread::spawn(move || {
        let mut booted = None;
        let mut running: Option<std::process::Child> = None;
        let power_off = |running: &mut Option<std::process::Child>| {
            if let Some(mut agent) = running.take() {
                let _ = agent.kill();
                let _ = agent.wait();
            }
        };
        while !stop.is_cancelled() {
            let media = bmc.inserted_media();
            if media.is_some() && media != booted {
                booted = media.clone();
                power_off(&mut running);
                let url = capstan_agent::http::Url::parse(media.as_deref().unwrap()).unwrap();
                let response =
                    capstan_agent::http::request("GET", &url, &[], None, Duration::from_secs(10))
                        .unwrap();
                assert_eq!(response.status, 200, "boot media fetch");
                let cmdline = String::from_utf8(response.bytes(1 << 20).unwrap()).unwrap();
                let (url, token, _) = capstan_model::agent::parse_kernel_cmdline(&cmdline);
                let agent = std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--exact",
                        "agent_process",
                        "--nocapture",
                        "--include-ignored",
                    ])
                    .env(AGENT_URL, url.unwrap())
                    .env(AGENT_TOKEN, token.unwrap())
                    .env(AGENT_ROOT, &root)
                    .env(AGENT_DEV, &dev)
                    .spawn()
                    .unwrap();
                running = Some(agent);
            }
            // The simulated BMC's own polling of its media slot.
            std::thread::sleep(Duration::from_millis(100));
        }
        power_off(&mut running);
    });
}

const AGENT_URL: &str = "CAPSTAN_TEST_AGENT_URL";
const AGENT_TOKEN: &str = "CAPSTAN_TEST_AGENT_TOKEN";
const AGENT_ROOT: &str = "CAPSTAN_TEST_AGENT_ROOT";
const AGENT_DEV: &str = "CAPSTAN_TEST_AGENT_DEV";

/// The agent of one boot of the played machine, when [`play_machine`] runs this binary for it;
/// ignored in a normal run (it is not a test of its own).
#[test]
#[ignore = "the played machine's agent process, started by play_machine"]
fn agent_process() {
    let Ok(url) = std::env::var(AGENT_URL) else {
        return;
    };
    // A machine whose test has ended is switched off with it.
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            if std::os::unix::process::parent_id() != parent {
                std::process::exit(0);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    Agent::new(AgentConfig {
        url,
        token: std::env::var(AGENT_TOKEN).unwrap(),
        system: SystemRoot::new(PathBuf::from(std::env::var(AGENT_ROOT).unwrap())),
        dev: PathBuf::from(std::env::var(AGENT_DEV).unwrap()),
        max_heartbeats: Some(600),
    })
    .run();
}

struct Env {
    dir: tempfile::TempDir,
    client: Client,
    images: PathBuf,
    url: String,
    stop: CancellationToken,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn start() -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "capstan=info,kube=warn".into()),
        )
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(
        store,
        Arc::new(ApiVersionRewrite),
        Auth { tokens: Vec::new() },
    )
    .await
    .unwrap();
    let client = in_process_client(server.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let registry = Arc::new(AgentRegistry::new(ServerSettings {
        agent_url: url.clone(),
        media_url: url.clone(),
        images_dir: Some(images.clone()),
        boot_media: Some(Arc::new(CmdlineMedia)),
    }));
    let stop = CancellationToken::new();
    let router = capstan_hosts::agent_server::router(registry.clone());
    let shutdown = stop.clone();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
    });
    let mut settings = HostSettings::new(registry);
    settings.fake_bmc_agents = Arc::new(capstan_hosts::provisioner::HostBoots);
    let controller_client = client.clone();
    let options = RunOptions::new(stop.clone());
    tokio::spawn(async move {
        capstan_runtime::run(controller_client, options, move || {
            vec![controller_task(HostController::new(settings.clone()))]
        })
        .await
    });
    Env {
        dir,
        client,
        images,
        url,
        stop,
    }
}

async fn wait_for(
    client: &Client,
    name: &str,
    what: &str,
    pred: impl Fn(&BareMetalHost) -> bool,
) -> BareMetalHost {
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), NS);
    let cond = move |obj: Option<&BareMetalHost>| obj.is_some_and(&pred);
    match tokio::time::timeout(WAIT, await_condition(hosts.clone(), name, cond)).await {
        Ok(Ok(Some(host))) => host,
        other => {
            let now = hosts.get_opt(name).await.unwrap();
            panic!(
                "{name}: waiting for {what}: {other:?}; status now {:#?}",
                now.map(|h| h.status)
            );
        }
    }
}

fn state(h: &BareMetalHost) -> &str {
    h.status
        .as_ref()
        .map_or("", |s| s.provisioning.state.as_str())
}

/// A 32 MiB raw disk image with an MBR and one partition, and its sha256.
fn make_image(images: &Path) -> (Vec<u8>, String) {
    let path = images.join("disk.img");
    let mut data: Vec<u8> = (0..32u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    data[..512].fill(0);
    std::fs::write(&path, &data).unwrap();
    let mut child = Command::new("sfdisk")
        .arg("--quiet")
        .arg(&path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"label: dos\n,24M,L\n").unwrap();
    assert!(child.wait().unwrap().success());
    let data = std::fs::read(&path).unwrap();
    let digest = format!("{:x}", sha2::Sha256::digest(&data));
    (data, digest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_inspects_deploys_with_a_config_drive_and_cleans() {
    let env = start().await;
    let c = &env.client;
    let root = env.dir.path().join("machine");
    let dev = env.dir.path().join("dev");
    fake_sys(&root);
    std::fs::create_dir_all(&dev).unwrap();
    let disk = dev.join("vda");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(DISK_BYTES)
        .unwrap();
    let address = "fake://real-agent/h0";
    play_machine(address, root, dev, env.stop.clone());

    let (image, digest) = make_image(&env.images);
    let qcow = env.images.join("disk.qcow2");
    assert!(
        Command::new("qemu-img")
            .args(["convert", "-q", "-f", "raw", "-O", "qcow2", "-c"])
            .arg(env.images.join("disk.img"))
            .arg(&qcow)
            .status()
            .unwrap()
            .success()
    );
    let qcow_digest = format!("{:x}", sha2::Sha256::digest(std::fs::read(&qcow).unwrap()));

    let secrets: Api<Secret> = Api::namespaced(c.clone(), NS);
    for (name, data) in [
        ("h0-bmc", json!({"username": "admin", "password": "pw"})),
        (
            "h0-user",
            json!({"userData": "#cloud-config\nhostname: h0\n"}),
        ),
        (
            "h0-net",
            json!({"networkData": "{\"links\": [{\"id\": \"eth0\", \"type\": \"phy\", \"ethernet_mac_address\": \"52:54:00:aa:bb:01\"}], \"networks\": [{\"id\": \"n0\", \"link\": \"eth0\", \"type\": \"ipv4\", \"ip_address\": \"192.168.10.20\", \"netmask\": \"255.255.255.0\"}], \"services\": []}"}),
        ),
    ] {
        let secret: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data})).unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    let hosts: Api<BareMetalHost> = Api::namespaced(c.clone(), NS);
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "h0", "namespace": NS},
        "spec": {
            "online": true,
            "bmc": {"address": address, "credentialsName": "h0-bmc"},
            "userData": {"name": "h0-user"},
            "networkData": {"name": "h0-net"},
            "rootDeviceHints": {"deviceName": "/dev/vda"},
        },
    }))
    .unwrap();
    hosts.create(&PostParams::default(), &host).await.unwrap();

    // Inspection by the agent.
    let h = wait_for(c, "h0", "available", |h| state(h) == "available").await;
    let hw = h.status.unwrap().hardware.unwrap();
    assert_eq!(hw.nics[0].mac.as_deref(), Some("52:54:00:aa:bb:01"));
    assert_eq!(
        hw.storage[0].size_bytes,
        Some(i64::try_from(DISK_BYTES).unwrap())
    );
    assert_eq!(
        hw.ram_mebibytes,
        Some(1984),
        "MemTotal 2000000 kB rounded up to 64 MiB"
    );

    // A wrong checksum: provisioning error, not provisioned, the disk's start zeroed.
    let bad = json!({"spec": {"image": {"url": format!("{}/images/disk.img", env.url), "checksum": "0".repeat(64), "checksumType": "sha256", "format": "raw"}}});
    hosts
        .patch("h0", &PatchParams::default(), &Patch::Merge(&bad))
        .await
        .unwrap();
    let h = wait_for(c, "h0", "a provisioning error", |h| {
        h.status
            .as_ref()
            .is_some_and(|s| s.error_type.as_deref() == Some("provisioning error"))
    })
    .await;
    let status = h.status.unwrap();
    assert_eq!(status.provisioning.state, "provisioning");
    assert!(
        status.error_message.contains("checksum mismatch")
            && status.error_message.contains(&digest),
        "{}",
        status.error_message
    );
    let written = std::fs::read(&disk).unwrap();
    assert!(
        written[..1 << 20].iter().all(|b| *b == 0),
        "the first MiB was zeroed"
    );

    // The right checksum: provisioned, image and config drive on the disk.
    let good = json!({"spec": {"image": {"checksum": digest}}});
    hosts
        .patch("h0", &PatchParams::default(), &Patch::Merge(&good))
        .await
        .unwrap();
    let h = wait_for(c, "h0", "provisioned", |h| state(h) == "provisioned").await;
    assert_eq!(h.status.as_ref().unwrap().error_count, 0);
    let written = std::fs::read(&disk).unwrap();
    assert_eq!(
        &written[512..image.len()],
        &image[512..],
        "image bytes after the MBR"
    );
    check_config_drive(&disk, env.dir.path());

    // A qcow2 image replaces it: deprovision (clean), provision again.
    // Its checksum is a URL: a SHA256SUMS file beside the images, as distributions publish them.
    std::fs::write(
        env.images.join("SHA256SUMS"),
        format!("{digest}  disk.img\n{qcow_digest} *disk.qcow2\n"),
    )
    .unwrap();
    let q = json!({"spec": {"image": {"url": format!("{}/images/disk.qcow2", env.url), "checksum": format!("{}/images/SHA256SUMS", env.url), "checksumType": null, "format": "qcow2"}}});
    hosts
        .patch("h0", &PatchParams::default(), &Patch::Merge(&q))
        .await
        .unwrap();
    wait_for(c, "h0", "provisioned with qcow2", |h| {
        state(h) == "provisioned"
            && h.status
                .as_ref()
                .and_then(|s| s.provisioning.image.as_ref())
                .is_some_and(|i| i.url.ends_with(".qcow2"))
    })
    .await;
    let written = std::fs::read(&disk).unwrap();
    assert_eq!(&written[512..image.len()], &image[512..]);
    check_config_drive(&disk, env.dir.path());

    // Deprovisioning cleans: no partition table left.
    hosts
        .patch(
            "h0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"image": null}})),
        )
        .await
        .unwrap();
    wait_for(c, "h0", "available again", |h| state(h) == "available").await;
    let written = std::fs::read(&disk).unwrap();
    assert!(
        written[..1 << 20].iter().all(|b| *b == 0),
        "metadata cleaning zeroed the start"
    );
}

/// Finds the config-2 partition in the disk's MBR and reads meta_data.json out of it.
fn check_config_drive(disk: &Path, scratch: &Path) {
    let out = Command::new("sfdisk")
        .arg("--json")
        .arg(disk)
        .output()
        .unwrap();
    let table: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let parts = table["partitiontable"]["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{table}");
    let start = parts[1]["start"].as_u64().unwrap() * 512;
    let size = parts[1]["size"].as_u64().unwrap() * 512;
    let data = std::fs::read(disk).unwrap();
    let iso = scratch.join("config-drive.iso");
    std::fs::write(
        &iso,
        &data[usize::try_from(start).unwrap()..usize::try_from(start + size).unwrap()],
    )
    .unwrap();
    let blkid = Command::new("blkid")
        .args(["-p", "-o", "export"])
        .arg(&iso)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&blkid.stdout).contains("LABEL=config-2"));
    let out_dir = scratch.join("config-drive");
    let _ = std::fs::remove_dir_all(&out_dir);
    let x = Command::new("xorriso")
        .args(["-osirrox", "on", "-indev"])
        .arg(&iso)
        .args(["-extract", "/"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(x.status.success(), "{}", String::from_utf8_lossy(&x.stderr));
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out_dir.join("openstack/latest/meta_data.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["name"], "h0");
    let network: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out_dir.join("openstack/latest/network_data.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(network["networks"][0]["ip_address"], "192.168.10.20");
    let user = std::fs::read_to_string(out_dir.join("openstack/latest/user_data")).unwrap();
    assert!(user.contains("hostname: h0"));
}
