//! The host controller against the embedded API server, in-process, with a namespace whose BMC
//! networks the platform team limits (annotation `hosts.capstan.io/bmc-networks`): a host whose
//! Redfish BMC is outside them — by address, or by a name that resolves outside them — fails
//! registration with a condition saying why, and capstan never connects to it, so the tenant's
//! credentials go nowhere. Once the platform team adds the BMC's network, the same host's BMC is
//! contacted.
//!
//! The "BMC" is a local listener that counts connections and the credentials they carried. Every
//! wait polls with a deadline ([`WAIT`]).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capstan_apiserver::conversion::ApiVersionRewrite;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_hosts::networks::{ANNOTATION_BMC_NETWORKS, CONDITION_BMC_PERMITTED};
use capstan_hosts::{AgentRegistry, HostController, HostSettings, ServerSettings};
use capstan_model::metal3::BareMetalHost;
use capstan_runtime::{CancellationToken, RunOptions, controller_task};
use capstan_store::{Store, StoreOptions};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);
const NS: &str = "team-a";

/// A listener that answers every request with 500, counting connections and the requests that
/// carried an `Authorization` header.
struct FakeBmcPeer {
    port: u16,
    connections: Arc<AtomicUsize>,
    with_credentials: Arc<AtomicUsize>,
}

async fn peer() -> FakeBmcPeer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let with_credentials = Arc::new(AtomicUsize::new(0));
    let (seen, credentials) = (connections.clone(), with_credentials.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            let credentials = credentials.clone();
            tokio::spawn(async move {
                let mut head = vec![0u8; 4096];
                let read = stream.read(&mut head).await.unwrap_or(0);
                let text = String::from_utf8_lossy(&head[..read]).to_ascii_lowercase();
                if text.contains("authorization: basic") {
                    credentials.fetch_add(1, Ordering::SeqCst);
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    FakeBmcPeer {
        port,
        connections,
        with_credentials,
    }
}

async fn start() -> (tempfile::TempDir, Client, CancellationToken) {
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
    let registry = Arc::new(AgentRegistry::new(ServerSettings {
        agent_url: "http://127.0.0.1:1".into(),
        media_url: "http://127.0.0.1:1".into(),
        images_dir: None,
        boot_media: None,
    }));
    let mut settings = HostSettings::new(registry);
    settings.bmc_timeout = Duration::from_secs(5);
    let shutdown = CancellationToken::new();
    let options = RunOptions::new(shutdown.clone());
    let controller_client = client.clone();
    tokio::spawn(async move {
        capstan_runtime::run(controller_client, options, move || {
            vec![controller_task(HostController::new(settings.clone()))]
        })
        .await
    });
    (dir, client, shutdown)
}

async fn create_host(client: &Client, name: &str, address: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-bmc")},
        "stringData": {"username": "tenant", "password": "the-tenants-password"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"online": true, "bmc": {"address": address, "credentialsName": format!("{name}-bmc")}},
    }))
    .unwrap();
    Api::<BareMetalHost>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &host)
        .await
        .unwrap();
}

/// Polls host `name` until `check` holds, failing after [`WAIT`].
async fn wait_for(
    client: &Client,
    name: &str,
    what: &str,
    check: impl Fn(&BareMetalHost) -> bool,
) -> BareMetalHost {
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), NS);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let host = hosts.get(name).await.unwrap();
        if check(&host) {
            return host;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "host {name}: {what}; it is {:?}",
            host.status
        );
        tokio::time::sleep(POLL).await;
    }
}

fn permitted_condition(host: &BareMetalHost) -> Option<&capstan_model::meta::Condition> {
    host.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_BMC_PERMITTED)
}

fn refused_registration(host: &BareMetalHost) -> bool {
    let Some(status) = host.status.as_ref() else {
        return false;
    };
    status.error_type.as_deref() == Some("registration error")
        && permitted_condition(host)
            .is_some_and(|c| c.reason.as_deref() == Some("OutsidePermittedNetworks"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_outside_the_namespaces_networks_is_never_contacted() {
    let (_dir, client, shutdown) = start().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS, "annotations": {ANNOTATION_BMC_NETWORKS: "10.0.0.0/8"}}})).unwrap(),
        )
        .await
        .unwrap();
    let bmc = peer().await;
    // By address, and by a name that resolves to the same listener.
    create_host(
        &client,
        "by-address",
        &format!("redfish+http://127.0.0.1:{}/redfish/v1/Systems/1", bmc.port),
    )
    .await;
    create_host(
        &client,
        "by-name",
        &format!("redfish+http://localhost:{}/redfish/v1/Systems/1", bmc.port),
    )
    .await;
    let host = wait_for(
        &client,
        "by-address",
        "refused by the namespace's BMC networks",
        refused_registration,
    )
    .await;
    let message = &host.status.as_ref().unwrap().error_message;
    assert!(
        message.contains("127.0.0.1")
            && message.contains("10.0.0.0/8")
            && message.contains(ANNOTATION_BMC_NETWORKS),
        "{message}"
    );
    assert_eq!(permitted_condition(&host).unwrap().status, "False");
    let host = wait_for(&client, "by-name", "refused once its name resolved", |h| {
        h.status.as_ref().is_some_and(|s| {
            s.error_type.as_deref() == Some("registration error")
                && s.error_message.contains(
                    "is outside the networks BMCs may be in (10.0.0.0/8); nothing was sent to it",
                )
        })
    })
    .await;
    assert!(
        !host
            .status
            .unwrap()
            .error_message
            .contains("the-tenants-password")
    );
    assert_eq!(
        bmc.connections.load(Ordering::SeqCst),
        0,
        "nothing reached the BMC"
    );

    // The platform team adds the BMC's network: the host's BMC is contacted, with its credentials.
    namespaces
        .patch(
            NS,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {ANNOTATION_BMC_NETWORKS: "10.0.0.0/8, 127.0.0.0/8"}}})),
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while bmc.with_credentials.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the BMC was never contacted once permitted"
        );
        tokio::time::sleep(POLL).await;
    }
    wait_for(&client, "by-address", "permitted", |h| {
        permitted_condition(h).is_some_and(|c| c.status == "True")
    })
    .await;
    shutdown.cancel();
}
