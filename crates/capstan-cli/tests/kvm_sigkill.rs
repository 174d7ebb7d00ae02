//! `capstan serve` killed with SIGKILL while it builds a VM on a real hypervisor (libvirtd with
//! QEMU, `qemu:///system`, pool `default`, started by the test when none answers, as the real-VM
//! test does) must, once restarted, finish that VM with one domain and one set of volumes, and
//! deleting it must leave no domain and no volume behind.
//!
//! The kills land at fixed points, found by watching the pool and the KVMMachine, not by timing:
//! 1. while the base image is being streamed into the pool: the image's HTTP server (on
//!    127.0.0.1) sends half of it and holds the rest until the test has killed capstan, so the
//!    pool holds a half-written base volume;
//! 2. between volume creation and domain definition: a domain of the machine's name but another
//!    UUID (not capstan's, which capstan refuses to touch) is defined before, so capstan makes
//!    every volume and the medium and stops at the domain; killed there, the stranger removed,
//!    restarted.
//!
//! Checked after the restarts: the half-written base was found by its digest and fetched again
//! (the pool's copy has the image's digest), one domain with the KVMMachine's UID, one volume of
//! each kind; after deletion none of them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capstan_testkit::libvirt::{Libvirt, URI, virsh, virsh_ok};
use serde_json::{Value, json};
use sha2::Digest;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use support::*;

const NS: &str = "sigkill";
const DOMAIN: &str = "capstan-kvm-sigkill-vm";

/// The pool's volumes whose names contain `part`.
fn volumes(part: &str) -> Vec<String> {
    let _ = virsh(&["pool-refresh", "default"]);
    let out = virsh_ok(&["vol-list", "default"]);
    let mut names: Vec<String> = out
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.contains(part))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

fn domains(part: &str) -> Vec<String> {
    virsh_ok(&["list", "--all", "--name"])
        .lines()
        .map(str::trim)
        .filter(|n| n.contains(part))
        .map(str::to_owned)
        .collect()
}

/// An HTTP server on 127.0.0.1 serving `image`: the first request gets half of it and then
/// nothing until `release` is told (and the connection is closed); `sent_half` says when half
/// went out. Later requests get all of it.
fn image_server(image: Vec<u8>) -> (u16, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (half_tx, half_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut first = true;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                image.len()
            );
            let _ = stream.write_all(head.as_bytes());
            if first {
                first = false;
                let _ = stream.write_all(&image[..image.len() / 2]);
                let _ = stream.flush();
                let _ = half_tx.send(());
                let _ = release_rx.recv();
                drop(stream);
                continue;
            }
            let _ = stream.write_all(&image);
        }
    });
    (port, half_rx, release_tx)
}

fn apply(kubeconfig: &Path, object: Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("object.json");
    std::fs::write(&path, serde_json::to_string(&object).unwrap()).unwrap();
    let out = kubectl_ok(
        kubeconfig,
        &["create", "-f", path.to_str().unwrap(), "-o", "json"],
    );
    serde_json::from_str(&out).unwrap()
}

fn ready(kubeconfig: &Path) -> (String, String) {
    let Ok(machine) = kvm_machine(kubeconfig) else {
        return (String::new(), String::new());
    };
    let condition = machine["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    (
        condition["reason"].as_str().unwrap_or_default().to_owned(),
        condition["message"].as_str().unwrap_or_default().to_owned(),
    )
}

fn kvm_machine(kubeconfig: &Path) -> Result<Value, String> {
    let (ok, out) = kubectl(
        kubeconfig,
        &[
            "get",
            "kvmmachines.infrastructure.cluster.x-k8s.io",
            "vm",
            "-n",
            NS,
            "-o",
            "json",
        ],
    );
    if !ok {
        return Err(out);
    }
    serde_json::from_str(&out).map_err(|e| e.to_string())
}

#[test]
fn sigkill_during_vm_creation_leaves_no_duplicate_domain_and_no_orphaned_volume() {
    Libvirt::ensure();
    // Leftovers of an earlier run that was itself killed.
    let _ = virsh(&["destroy", DOMAIN]);
    let _ = virsh(&["undefine", DOMAIN]);
    for volume in volumes(DOMAIN) {
        let _ = virsh(&["vol-delete", "--pool", "default", &volume]);
    }
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let log = work.path().join("serve.log");
    // 8 MiB that is not a bootable disk: the VM runs its firmware, which is all this needs.
    let image: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let digest: String = sha2::Sha256::digest(&image)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let base = format!("capstan-kvm-base-{}.qcow2", &digest[..16]);
    let _ = virsh(&["vol-delete", "--pool", "default", &base]);
    let (port, sent_half, release) = image_server(image.clone());

    // A domain of the machine's name that is not capstan's: capstan must stop before defining.
    let stranger = work.path().join("stranger.xml");
    std::fs::write(
        &stranger,
        format!("<domain type='qemu'><name>{DOMAIN}</name><uuid>00000000-0000-4000-8000-000000000001</uuid><memory unit='MiB'>32</memory><os><type arch='x86_64' machine='pc'>hvm</type></os></domain>"),
    )
    .unwrap();
    virsh_ok(&["define", stranger.to_str().unwrap()]);

    let serve = Serve::start_with(&data, &log, &[]);
    let kubeconfig = serve.kubeconfig.clone();
    apply(
        &kubeconfig,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    );
    apply(
        &kubeconfig,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": NS},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMCluster", "name": "c1"}},
        }),
    );
    apply(
        &kubeconfig,
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMCluster",
            "metadata": {"name": "c1", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {"controlPlaneEndpoint": {"host": "10.0.2.15", "port": 6443},
                     "hypervisors": [{"name": "local", "uri": URI, "pool": "default", "domainType": "qemu"}]},
        }),
    );
    apply(
        &kubeconfig,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "vm-bootstrap", "namespace": NS},
            "stringData": {"value": "#cloud-config\n", "format": "cloud-config"},
        }),
    );
    let machine = apply(
        &kubeconfig,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "vm", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "vm-bootstrap"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "KVMMachine", "name": "vm"}},
        }),
    );
    let kvm = apply(
        &kubeconfig,
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KVMMachine",
            "metadata": {"name": "vm", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "vm", "uid": machine["metadata"]["uid"]}]},
            "spec": {
                "resources": {"cpu": 1, "memory": "128Mi", "disk": "1Gi", "dockerVolumeSize": "64Mi"},
                "image": {"url": format!("http://127.0.0.1:{port}/os.img"), "checksum": digest, "format": "raw"},
                "volumes": [{"name": "etcd", "size": "64Mi", "mountPath": "/var/lib/etcd"}],
                "networks": [{"user": true}],
            },
        }),
    );
    let uid = kvm["metadata"]["uid"].as_str().unwrap().to_owned();

    // Kill 1: half the image is in the pool's base volume.
    sent_half
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| {
            panic!(
                "the image was never fetched: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
    until(
        "the base volume in the pool",
        Duration::from_secs(30),
        &log,
        || {
            if volumes(&base).is_empty() {
                Err("no base volume yet".to_owned())
            } else {
                Ok(())
            }
        },
    );
    serve.sigkill();
    let _ = release.send(());
    assert_eq!(
        volumes(&base),
        vec![base.clone()],
        "the half-written base volume stays behind the kill"
    );

    // Kill 2: every volume made, the domain not defined (refused: the stranger has the name).
    let serve = Serve::start_with(&data, &log, &[]);
    until(
        "volumes made and the domain refused",
        Duration::from_secs(180),
        &log,
        || {
            let (reason, message) = ready(&kubeconfig);
            let made = volumes(DOMAIN);
            if made.iter().any(|v| v.ends_with("-cidata.iso"))
                && message.contains("not this machine's")
            {
                Ok(())
            } else {
                Err(format!("Ready {reason}: {message}; volumes {made:?}"))
            }
        },
    );
    let made_before = volumes(DOMAIN);
    serve.sigkill();
    virsh_ok(&["undefine", DOMAIN]);
    assert_eq!(volumes(DOMAIN), made_before);

    // Restarted: the VM is finished with what was made.
    let serve = Serve::start_with(&data, &log, &[]);
    let provisioned = until(
        "the KVMMachine provisioned",
        Duration::from_secs(180),
        &log,
        || {
            let machine = kvm_machine(&kubeconfig)?;
            if machine["status"]["initialization"]["provisioned"] == json!(true) {
                Ok(machine)
            } else {
                Err(format!("{}", machine["status"]))
            }
        },
    );
    assert_eq!(
        provisioned["spec"]["providerID"],
        json!(format!("libvirt://local/{uid}"))
    );
    assert_eq!(domains("capstan-kvm-sigkill-"), vec![DOMAIN.to_owned()]);
    assert!(
        virsh_ok(&["domuuid", DOMAIN])
            .trim()
            .eq_ignore_ascii_case(&uid)
    );
    assert!(virsh_ok(&["domstate", DOMAIN]).contains("running"));
    assert_eq!(
        volumes(DOMAIN),
        vec![
            format!("{DOMAIN}-cidata.iso"),
            format!("{DOMAIN}-docker.qcow2"),
            format!("{DOMAIN}-root.qcow2"),
            format!("{DOMAIN}-vol-etcd.qcow2"),
        ]
    );
    assert_eq!(made_before, volumes(DOMAIN), "nothing made twice");
    // The half-written base was found out and fetched again: the pool's copy is the image.
    let copy = work.path().join("base.copy");
    virsh_ok(&[
        "vol-download",
        "--pool",
        "default",
        &base,
        copy.to_str().unwrap(),
    ]);
    let mut bytes = Vec::new();
    std::fs::File::open(&copy)
        .unwrap()
        .read_to_end(&mut bytes)
        .unwrap();
    assert!(
        bytes == image,
        "the base volume is not the image ({} bytes)",
        bytes.len()
    );

    // Deleted: nothing of the VM left.
    kubectl_ok(
        &kubeconfig,
        &[
            "delete",
            "kvmmachines.infrastructure.cluster.x-k8s.io",
            "vm",
            "-n",
            NS,
            "--wait=false",
        ],
    );
    until(
        "the KVMMachine gone",
        Duration::from_secs(120),
        &log,
        || match kvm_machine(&kubeconfig) {
            Err(out) if out.contains("NotFound") || out.contains("not found") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(domains("capstan-kvm-sigkill-"), Vec::<String>::new());
    assert_eq!(volumes(DOMAIN), Vec::<String>::new());
    drop(serve);
    let _ = virsh(&["vol-delete", "--pool", "default", &base]);
}
