//! The host controller against the embedded API server, in-process, with `fake://` BMCs and the
//! simulated agent: the whole lifecycle (registering → inspecting → preparing → available →
//! provisioning → provisioned → deprovisioning → available → deleted), re-provisioning on an image
//! change, credentials that are missing and then created, the paused, detached and reboot
//! annotations, Events and HardwareData.
//!
//! Every wait is on a watch, bounded by [`WAIT`].

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_apiserver::conversion::ApiVersionRewrite;
use capstan_apiserver::in_process_client;
use capstan_apiserver::{ApiServer, Auth};
use capstan_drivers::{BmcAddress, FakeBmc};
use capstan_hosts::{AgentRegistry, HostController, HostSettings, ServerSettings};
use capstan_model::metal3::{BareMetalHost, HardwareData};
use capstan_runtime::{CancellationToken, RunOptions, controller_task};
use capstan_store::{Store, StoreOptions};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const NS: &str = "default";

struct Env {
    _dir: tempfile::TempDir,
    client: Client,
    shutdown: CancellationToken,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start() -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "capstan=debug,kube=warn".into()),
        )
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(
        store,
        Arc::new(ApiVersionRewrite),
        Auth { tokens: Vec::new() },
    )
    .await
    .unwrap();
    let client = in_process_client(server.router());
    let shutdown = start_controller(&client, Duration::from_millis(20));
    Env {
        _dir: dir,
        client,
        shutdown,
    }
}

/// Runs the host controller as one capstan process would: its own agent registry (so a second
/// call is a restarted process), simulated agent steps of `step_time`.
fn start_controller(client: &Client, step_time: Duration) -> CancellationToken {
    let registry = Arc::new(AgentRegistry::new(ServerSettings {
        agent_url: "http://127.0.0.1:1".into(),
        media_url: "http://127.0.0.1:1".into(),
        images_dir: None,
        boot_media: None,
    }));
    let mut settings = HostSettings::new(registry);
    settings.fake_bmc_agents = Arc::new(capstan_hosts::simulated_agent::SimulatedAgents::new(
        step_time,
    ));
    let shutdown = CancellationToken::new();
    let options = RunOptions::new(shutdown.clone());
    let controller_client = client.clone();
    tokio::spawn(async move {
        capstan_runtime::run(controller_client, options, move || {
            vec![controller_task(HostController::new(settings.clone()))]
        })
        .await
    });
    shutdown
}

async fn create_secret(client: &Client, name: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"username": "admin", "password": "not-the-real-one"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

async fn create_host(client: &Client, name: &str, address: &str, extra_spec: serde_json::Value) {
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), NS);
    let mut spec = json!({
        "online": true,
        "bootMACAddress": "52:54:00:00:00:01",
        "bmc": {"address": address, "credentialsName": format!("{name}-bmc")},
    });
    for (k, v) in extra_spec.as_object().unwrap() {
        spec[k] = v.clone();
    }
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap();
    hosts.create(&PostParams::default(), &host).await.unwrap();
}

fn state_of(host: &BareMetalHost) -> &str {
    host.status
        .as_ref()
        .map_or("", |s| s.provisioning.state.as_str())
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
                "{name}: waiting for {what}: {other:?}; host is now {:#?}",
                now.map(|h| h.status)
            );
        }
    }
}

async fn wait_state(client: &Client, name: &str, state: &'static str) -> BareMetalHost {
    wait_for(client, name, state, move |h| state_of(h) == state).await
}

async fn event_reasons(client: &Client, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

fn fake(address: &str) -> FakeBmc {
    FakeBmc::shared(&BmcAddress::parse(address).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fake_host_goes_through_the_whole_lifecycle() {
    let env = start().await;
    let c = &env.client;
    let address = "fake://lifecycle/h0";
    create_secret(c, "h0-bmc").await;
    create_host(c, "h0", address, json!({})).await;

    let host = wait_state(c, "h0", "available").await;
    let status = host.status.clone().unwrap();
    assert_eq!(status.operational_status, "OK");
    assert!(
        host.finalizers()
            .iter()
            .any(|f| f == "baremetalhost.metal3.io")
    );
    let hardware = status.hardware.clone().expect("inspected hardware");
    assert_eq!(hardware.nics.len(), 2);
    assert!(hardware.ram_mebibytes.unwrap() >= 4096);
    assert!(
        status
            .good_credentials
            .as_ref()
            .unwrap()
            .credentials_version
            .is_some()
    );
    for op in ["register", "inspect"] {
        let metric = &status.operation_history[op];
        assert!(
            metric.start.is_some() && metric.end.is_some(),
            "{op}: {metric:?}"
        );
    }
    let data: Api<HardwareData> = Api::namespaced(c.clone(), NS);
    let stored = data.get("h0").await.unwrap();
    assert_eq!(stored.spec.hardware.as_ref(), Some(&hardware));
    // Inspection used the agent once, booted from virtual media, and left the drive empty.
    let bmc = fake(address);
    assert_eq!(bmc.counters().media_insert, 1);
    assert_eq!(bmc.inserted_media(), None);
    // online: true, so the host is on once it is available.
    let host = wait_for(c, "h0", "powered on", |h| {
        h.status.as_ref().is_some_and(|s| s.powered_on)
    })
    .await;
    assert_eq!(state_of(&host), "available");

    // Provision.
    let hosts: Api<BareMetalHost> = Api::namespaced(c.clone(), NS);
    let image = json!({"url": "http://images/a.img", "checksum": "a".repeat(64), "checksumType": "sha256", "format": "raw"});
    hosts
        .patch(
            "h0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"image": image}})),
        )
        .await
        .unwrap();
    let host = wait_state(c, "h0", "provisioned").await;
    let status = host.status.clone().unwrap();
    assert_eq!(
        status.provisioning.image.as_ref().unwrap().url,
        "http://images/a.img"
    );
    assert!(status.operation_history["provision"].end.is_some());
    assert_eq!(bmc.inserted_media(), None);

    // A new image re-provisions: deprovisioning, available, provisioning, provisioned.
    let image_b = json!({"url": "http://images/b.img", "checksum": "b".repeat(64), "checksumType": "sha256", "format": "raw"});
    hosts
        .patch(
            "h0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"image": image_b}})),
        )
        .await
        .unwrap();
    wait_for(c, "h0", "provisioned with image b", |h| {
        state_of(h) == "provisioned"
            && h.status
                .as_ref()
                .and_then(|s| s.provisioning.image.as_ref())
                .is_some_and(|i| i.url.ends_with("b.img"))
    })
    .await;

    // Taking the image away deprovisions back to available.
    hosts
        .patch(
            "h0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"image": null}})),
        )
        .await
        .unwrap();
    let host = wait_state(c, "h0", "available").await;
    assert!(host.status.unwrap().provisioning.image.is_none());

    let reasons = event_reasons(c, "h0").await;
    for wanted in [
        "Registered",
        "InspectionComplete",
        "ProvisioningStarted",
        "Provisioned",
        "DeprovisioningStarted",
        "DeprovisioningComplete",
    ] {
        assert!(
            reasons.iter().any(|r| r == wanted),
            "no {wanted} event in {reasons:?}"
        );
    }

    // Deletion powers off and lets the host go.
    hosts.delete("h0", &DeleteParams::default()).await.unwrap();
    let gone = tokio::time::timeout(
        WAIT,
        await_condition(hosts.clone(), "h0", |o: Option<&BareMetalHost>| o.is_none()),
    )
    .await;
    assert!(
        gone.is_ok(),
        "host not deleted: {:?}",
        hosts.get_opt("h0").await.unwrap().map(|h| h.status)
    );
    assert!(
        data.get_opt("h0").await.unwrap().is_none(),
        "HardwareData left behind"
    );
    let state = capstan_drivers::Bmc::power_state(&bmc).await.unwrap();
    assert_eq!(state, capstan_drivers::PowerState::Off);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_credentials_are_a_registration_error_until_the_secret_appears() {
    let env = start().await;
    let c = &env.client;
    create_host(c, "h1", "fake://creds/h1", json!({})).await;
    let host = wait_for(c, "h1", "a registration error", |h| {
        h.status
            .as_ref()
            .is_some_and(|s| s.error_type.as_deref() == Some("registration error"))
    })
    .await;
    let status = host.status.unwrap();
    assert_eq!(status.operational_status, "error");
    assert!(
        status.error_message.contains("default/h1-bmc not found"),
        "{}",
        status.error_message
    );
    assert_eq!(status.provisioning.state, "registering");
    assert!(status.error_count >= 1);
    let reasons = event_reasons(c, "h1").await;
    assert!(
        reasons.iter().any(|r| r == "RegistrationError"),
        "{reasons:?}"
    );
    // Creating the Secret is noticed (the controller watches Secrets) and registration proceeds.
    create_secret(c, "h1-bmc").await;
    let host = wait_state(c, "h1", "available").await;
    let status = host.status.unwrap();
    assert_eq!(status.error_count, 0);
    assert!(status.error_type.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_detached_reboot_and_inspection_annotations() {
    let env = start().await;
    let c = &env.client;
    let hosts: Api<BareMetalHost> = Api::namespaced(c.clone(), NS);

    // Paused from the start: the controller does not even add its finalizer.
    create_secret(c, "h2-bmc").await;
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "h2", "namespace": NS, "annotations": {"baremetalhost.metal3.io/paused": ""}},
        "spec": {"online": false, "bmc": {"address": "fake://annotations/h2", "credentialsName": "h2-bmc"}},
    }))
    .unwrap();
    hosts.create(&PostParams::default(), &host).await.unwrap();
    // A second, unpaused host proves the controller is running while h2 stays untouched.
    create_secret(c, "h3-bmc").await;
    create_host(c, "h3", "fake://annotations/h3", json!({"online": false})).await;
    wait_state(c, "h3", "available").await;
    let h2 = hosts.get("h2").await.unwrap();
    assert!(h2.status.is_none() && h2.finalizers().is_empty(), "{h2:?}");

    // Unpause with inspection disabled: straight to available, no hardware.
    hosts
        .patch(
            "h2",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"baremetalhost.metal3.io/paused": null, "inspect.metal3.io": "disabled"}}})),
        )
        .await
        .unwrap();
    let h2 = wait_state(c, "h2", "available").await;
    assert!(h2.status.unwrap().hardware.is_none());

    // Requesting inspection inspects, then the request annotation is removed.
    hosts
        .patch(
            "h2",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"inspect.metal3.io": ""}}})),
        )
        .await
        .unwrap();
    let h2 = wait_for(c, "h2", "inspected", |h| {
        state_of(h) == "available" && h.status.as_ref().is_some_and(|s| s.hardware.is_some())
    })
    .await;
    assert!(!h2.annotations().contains_key("inspect.metal3.io"));

    // Reboot: power on first, then the reboot annotation powers off and is removed; back on.
    hosts
        .patch(
            "h3",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"online": true}})),
        )
        .await
        .unwrap();
    wait_for(c, "h3", "powered on", |h| {
        h.status.as_ref().is_some_and(|s| s.powered_on)
    })
    .await;
    let bmc = fake("fake://annotations/h3");
    let offs = bmc.counters().power_off;
    hosts
        .patch(
            "h3",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"reboot.metal3.io": ""}}})),
        )
        .await
        .unwrap();
    let h3 = wait_for(c, "h3", "rebooted", move |h| {
        !h.annotations().contains_key("reboot.metal3.io")
            && h.status.as_ref().is_some_and(|s| s.powered_on)
    })
    .await;
    assert_eq!(state_of(&h3), "available");
    assert!(bmc.counters().power_off > offs, "the reboot powered off");

    // Detached: status says so and deletion does not touch the BMC.
    hosts
        .patch(
            "h3",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"baremetalhost.metal3.io/detached": ""}}}),
            ),
        )
        .await
        .unwrap();
    wait_for(c, "h3", "detached", |h| {
        h.status
            .as_ref()
            .is_some_and(|s| s.operational_status == "detached")
    })
    .await;
    let before = bmc.counters();
    hosts.delete("h3", &DeleteParams::default()).await.unwrap();
    let gone = tokio::time::timeout(
        WAIT,
        await_condition(hosts.clone(), "h3", |o: Option<&BareMetalHost>| o.is_none()),
    )
    .await;
    assert!(gone.is_ok());
    assert_eq!(
        bmc.counters().power_off,
        before.power_off,
        "a detached host is not powered off"
    );
    let _ = ResourceExt::name_any(&h3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_the_simulated_agent_works_does_not_leave_the_host_waiting() {
    let mut env = start().await;
    // The first process: slow agent steps, stopped while the agent inspects.
    env.shutdown.cancel();
    env.shutdown = start_controller(&env.client, Duration::from_secs(3));
    let address = "fake://restart/h5";
    create_secret(&env.client, "h5-bmc").await;
    create_host(&env.client, "h5", address, json!({})).await;
    wait_state(&env.client, "h5", "inspecting").await;
    // Stopped once the session records the boot: the new process must not boot it again.
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let sessions = secrets
            .list(&ListParams::default().labels("capstan.io/agent-session=h5"))
            .await
            .unwrap();
        let booted = sessions.items.iter().any(|s| {
            s.data
                .as_ref()
                .and_then(|d| d.get("booted"))
                .is_some_and(|b| b.0 == b"true")
        });
        if booted {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent was never booted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.shutdown.cancel();
    let boots = fake(address).counters();
    // The restarted process knows nothing of the old one's agent but the persisted session; the
    // machine's agent goes on and reports to it, well before the 20-minute boot timeout.
    env.shutdown = start_controller(&env.client, Duration::from_millis(20));
    wait_state(&env.client, "h5", "available").await;
    assert_eq!(
        fake(address).counters().media_insert,
        boots.media_insert,
        "the restarted process booted the agent again"
    );
}
