//! One real VM: the KVM provider against a real libvirtd (`qemu:///system`, pool `default`) and
//! QEMU (software emulation where there is no /dev/kvm), booting the Debian cloud-init image
//! capstan builds (`capstan ramdisk cloud-image`). Real cloud-init reads capstan's NoCloud medium:
//! the hostname, the extra volumes partitioned, formatted and mounted, then the bootstrap data,
//! whose command writes what the guest sees to the serial console, which libvirt logs. (No NTP
//! servers: the test image has no NTP client, and cloud-init would try to install one.)
//!
//! libvirtd is started (as the end-to-end testbed does) when none answers; a running one is used
//! as it is (this VM needs no network path to the test). The image's root filesystem comes from
//! capstan's package cache (`scripts/test.sh` warms it while the network is there). Deleting the
//! KVMMachine must leave no domain and no volume of this test behind (`virsh list --all`,
//! `vol-list default`). capstan's own time per VM (everything but the guest's boot) is printed,
//! not asserted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capstan_apiserver::conversion::ModelConverter;
use capstan_apiserver::{ApiServer, Auth, in_process_client};
use capstan_kvm::Driver;
use capstan_kvm::machine::domain_name;
use capstan_model::kvm::v1beta2::KVMMachine;
use capstan_runtime::{CancellationToken, RunOptions};
use capstan_store::{Store, StoreOptions};
use capstan_testkit::libvirt::{Libvirt, URI, virsh};
use capstan_testkit::until;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NS: &str = "realvm";

fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("capstan")
}

fn dynamic(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Api<kube::api::DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let resource = kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
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
    let namespace = (kind != "Namespace").then_some(NS);
    let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
    dynamic(client, api_version, kind, plural, namespace)
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
}

fn owner(kind: &str, object: &kube::api::DynamicObject) -> Value {
    json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": object.name_any(), "uid": object.uid().unwrap()}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_boots_capstans_cloud_init_medium_and_leaves_nothing_behind() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "capstan=info,kube=warn".into()),
        )
        .with_test_writer()
        .try_init();
    Libvirt::ensure();
    let work = tempfile::tempdir().unwrap();
    let image_dir = work.path().join("image");
    let image = tokio::task::spawn_blocking(move || {
        capstan_ramdisk::cloud_image::build(
            &cache_dir(),
            &image_dir,
            capstan_ramdisk::cloud_image::DEFAULT_MIRROR,
            capstan_ramdisk::cloud_image::DEFAULT_ROOT_FREE_BYTES,
            &|step| eprintln!("cloud-image: {step}"),
        )
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| {
        panic!(
            "building the cloud image: {}",
            capstan_runtime::controller::ErrorChain(&e)
        )
    });

    let store = Store::open(&work.path().join("state.db"), StoreOptions::default()).unwrap();
    let server = ApiServer::new(store, Arc::new(ModelConverter), Auth { tokens: Vec::new() })
        .await
        .unwrap();
    let client = in_process_client(server.router());
    let driver = Driver::new();
    let shutdown = CancellationToken::new();
    let options = RunOptions::new(shutdown.clone());
    {
        let client = client.clone();
        let driver = driver.clone();
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
    let cluster = create(&client, "cluster.x-k8s.io/v1beta2", "Cluster", "clusters", json!({
        "metadata": {"name": "vm"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMCluster", "name": "vm"}},
    }))
    .await;
    dynamic(
        &client,
        "cluster.x-k8s.io/v1beta2",
        "Cluster",
        "clusters",
        Some(NS),
    )
    .patch_status(
        "vm",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"initialization": {"infrastructureProvisioned": true}}})),
    )
    .await
    .unwrap();
    create(
        &client,
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "KVMCluster",
        "kvmclusters",
        json!({
            "metadata": {"name": "vm", "ownerReferences": owner("Cluster", &cluster)},
            "spec": {"controlPlaneEndpoint": {"host": "10.0.2.15", "port": 6443},
                     "hypervisors": [{"name": "local", "uri": URI, "pool": "default", "domainType": "qemu"}]},
        }),
    )
    .await;
    // What the guest saw, on the serial console libvirt logs.
    let bootstrap = "#cloud-config\nruncmd:\n- [sh, -c, 'echo \"CAPSTAN-KVM-GUEST host=$(hostname) containerd=$(findmnt -n -o SOURCE /var/lib/containerd) etcd=$(findmnt -n -o SOURCE /var/lib/etcd) fs=$(findmnt -n -o FSTYPE /var/lib/etcd)\" > /dev/ttyS0']\n";
    create(
        &client,
        "v1",
        "Secret",
        "secrets",
        json!({"metadata": {"name": "vm-0-bootstrap"}, "stringData": {"value": bootstrap}}),
    )
    .await;
    let machine = create(&client, "cluster.x-k8s.io/v1beta2", "Machine", "machines", json!({
        "metadata": {"name": "vm-0"},
        "spec": {"clusterName": "vm", "bootstrap": {"dataSecretName": "vm-0-bootstrap"},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMMachine", "name": "vm-0"}},
    }))
    .await;
    let created = Instant::now();
    create(&client, "infrastructure.cluster.x-k8s.io/v1beta2", "KVMMachine", "kvmmachines", json!({
        "metadata": {"name": "vm-0", "ownerReferences": owner("Machine", &machine)},
        "spec": {
            "resources": {"cpu": 1, "memory": "768Mi", "disk": "2Gi", "dockerVolumeSize": "1Gi"},
            "image": {"url": format!("file://{}", image.qcow2.display()), "checksum": image.qcow2_sha256, "format": "qcow2"},
            "volumes": [{"name": "etcd", "size": "1Gi", "mountPath": "/var/lib/etcd"}],
            "networks": [{"user": true}],
        },
    }))
    .await;
    let machines: Api<KVMMachine> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(300);
    let provisioned = loop {
        let current = machines.get("vm-0").await.unwrap();
        let done = current
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.get("provisioned"))
            .and_then(Value::as_bool)
            == Some(true);
        if done {
            break current;
        }
        assert!(
            Instant::now() < deadline,
            "not provisioned: {:?}",
            current.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let overhead = created.elapsed();
    eprintln!(
        "capstan's time for the VM (image upload, volumes, medium, domain defined and started): {overhead:?}"
    );
    let domain = domain_name(NS, "vm-0");
    assert_eq!(
        provisioned.spec.provider_id,
        Some(format!("libvirt://local/{}", provisioned.uid().unwrap()))
    );
    assert!(virsh(&["domstate", &domain]).1.contains("running"));

    let console = PathBuf::from(format!("/var/log/libvirt/qemu/{domain}-console.log"));
    let want = "CAPSTAN-KVM-GUEST host=vm-0 containerd=/dev/vdb1 etcd=/dev/vdc1 fs=ext4";
    let booted = until(Duration::from_secs(900), || {
        std::fs::read_to_string(&console)
            .unwrap_or_default()
            .contains(want)
    });
    let log = std::fs::read_to_string(&console).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    assert!(
        booted,
        "the guest did not report {want:?}; console tail:\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );

    machines
        .delete("vm-0", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while machines.get_opt("vm-0").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "KVMMachine not gone");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, domains) = virsh(&["list", "--all", "--name"]);
    assert!(!domains.lines().any(|l| l.trim() == domain), "{domains}");
    let (_, volumes) = virsh(&["vol-list", "default"]);
    let left: Vec<&str> = volumes.lines().filter(|l| l.contains(&domain)).collect();
    assert!(left.is_empty(), "volumes left: {left:?}");
    // The base image stays as the pool's cache; this test removes its own.
    let base = capstan_kvm::machine::base_volume(&image.qcow2_sha256);
    let _ = driver.delete_volume(URI, "default", &base).await;
    shutdown.cancel();
}
