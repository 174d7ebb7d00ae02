//! One cluster of two providers on a real libvirt: its control plane and a worker pool are VMs
//! capstan's KVM provider makes, a second worker pool is a bare-metal host (a VM behind
//! sushy-tools' Redfish emulator) the Metal3 provider provisions — one Cluster, whose
//! infrastructure is the KVMCluster, and no second infrastructure cluster (the mixed cluster of
//! the design it follows).
//!
//! Real: libvirtd and QEMU (`qemu:///system`, domain type `qemu`: software emulation), the KVM
//! provider streaming the base image into the pool, making the volumes and the NoCloud medium and
//! defining the domains; the Debian image `capstan ramdisk cloud-image` builds, booted by the control
//! plane's VM and the worker's; real cloud-init (22.4) in them reading capstan's `cidata` medium:
//! the hostname, the static address and gateway on QEMU's user network with its DNS server (ifupdown and
//! resolvconf write `/etc/resolv.conf`), the NTP server (`systemd-timesyncd`'s configuration), the
//! container runtime's and etcd's volumes partitioned, formatted and mounted, then the kubeadm
//! bootstrap data, ending with the `bootstrap-success.complete` sentinel; the bare-metal host
//! inspected and provisioned through the provisioning ramdisk with the same image, whose
//! cloud-init reads the config drive; every controller of the management side (Cluster API core,
//! kubeadm bootstrap and control plane, KVM, Metal3).
//!
//! Stand-ins, as in [`crate::real_cluster`]: the image's `kubeadm` (capstan's test stand-in, which
//! registers the Node) and the workload cluster's API server (a capstan API server `serve
//! --simulate-workloads` serves on `127.0.0.1:<endpoint port>`, which the guests reach as
//! `10.0.2.2`). Nothing of the machines is simulated.
//!
//! Checked from inside the VMs (a postKubeadmCommand prints what the guest sees on the serial
//! console libvirt logs, and the image's reporter prints the sentinel and cloud-init's status):
//! hostname, address, default route, nameserver, NTP server, the mounts and their filesystems. From the
//! management side: the Cluster Provisioned, the three Machines Running with providerIDs
//! `libvirt://local/<KVMMachine UID>` and `metal3://default/<host>/…`, each with a Node of that
//! providerID in the workload API, `capstan describe cluster` showing both kinds of machine in the
//! cluster's one tree. Then the Cluster is deleted and nothing of it is left on the hypervisor: no
//! domain (`virsh list --all`), no volume or medium (`virsh vol-list`); the base image stays in the
//! pool as the documented cache (removed by the test); the host is deprovisioned back to
//! `available`. A failed run removes what it made too ([`KvmLeftovers`]). Phase times are printed.

use super::{PASSWORD, apply, build_ramdisk, capstan, capstan_bin, kubectl_json, state, wait_host};
use crate::real_cluster::{items, report_lines, until};
use crate::testbed::{self, KvmLeftovers, Libvirt, Serve, Sushy, Vm};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const CLUSTER: &str = "kc";
const NAMESPACE: &str = "default";
/// The hypervisor's name in the KVMCluster: the `HYPERVISOR` of the providerIDs.
const HYPERVISOR: &str = "local";
/// QEMU's user network: the host's loopback is 10.0.2.2, its DNS forwarder 10.0.2.3.
const DNS_SERVER: &str = "10.0.2.3";
const NTP_SERVER: &str = "10.0.2.2";
const GATEWAY: &str = "10.0.2.2";
const CONTROL_PLANE_ADDRESS: &str = "10.0.2.21/24";
const WORKER_ADDRESS: &str = "10.0.2.22/24";
/// The bare-metal host of the second worker pool.
const METAL_HOST: &str = "kc-metal-0";
const METAL_MAC: &str = "52:54:00:c3:00:10";
const METAL_ROLE: &str = "kc-metal-worker";
/// The smallest memory the image boots its cloud-init in (the kernel, systemd, cloud-init's Python).
const VM_MEMORY: &str = "768Mi";
/// What the guest sees, printed on its console once kubeadm is done (a postKubeadmCommand).
const GUEST_REPORT: &str = "echo \"capstan-e2e-guest: host=$(hostname) \
addr=$(ip -4 -o addr show dev eth0 | awk '{print $4}' | paste -sd, -) \
gw=$(ip -4 route show default | awk '{print $3}' | paste -sd, -) \
dns=$(awk '/^nameserver/ {print $2}' /etc/resolv.conf | paste -sd, -) \
ntp=$(cat /etc/systemd/timesyncd.conf.d/*.conf 2>/dev/null | sed -n 's/^NTP=//p' | tr -s ' ' | paste -sd, -) \
containerd=$(findmnt -n -o SOURCE,FSTYPE /var/lib/containerd | tr -s ' ' :) \
etcd=$(findmnt -n -o SOURCE,FSTYPE /var/lib/etcd | tr -s ' ' :) end\" > /dev/console";

fn machine_template(
    name: &str,
    image_url: &str,
    checksum: &str,
    address: &str,
    etcd: bool,
) -> String {
    let volumes = if etcd {
        "      volumes:\n      - name: etcd\n        size: 1Gi\n        mountPath: /var/lib/etcd\n"
    } else {
        ""
    };
    format!(
        r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: KVMMachineTemplate
metadata:
  name: {name}
spec:
  template:
    spec:
      resources:
        cpu: 1
        memory: {VM_MEMORY}
        disk: 2Gi
        dockerVolumeSize: 1Gi
      image:
        url: {image_url}
        checksum: {checksum}
        format: qcow2
      networks:
      - user: true
        address: {address}
        gateway: {GATEWAY}
{volumes}"#
    )
}

fn metal_host_yaml(address: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata:
  name: {METAL_HOST}-bmc
stringData:
  username: admin
  password: {PASSWORD}
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: {METAL_HOST}
  labels:
    e2e.capstan.dev/role: {METAL_ROLE}
spec:
  online: true
  bootMACAddress: "{METAL_MAC}"
  bmc:
    address: {address}
    credentialsName: {METAL_HOST}-bmc
"#
    )
}

/// The bare-metal worker pool: Metal3Machines (no Metal3Cluster), the image over HTTP.
fn metal_pool_yaml(image_url: &str, checksum: &str) -> String {
    let report = serde_json::to_string(GUEST_REPORT).unwrap();
    format!(
        r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata:
  name: {CLUSTER}-metal
spec:
  template:
    spec:
      image:
        url: {image_url}
        checksum: {checksum}
        checksumType: sha256
        format: qcow2
      hostSelector:
        matchLabels:
          e2e.capstan.dev/role: {METAL_ROLE}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: {CLUSTER}-metal
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          name: "{{{{ ds.meta_data.name }}}}"
          kubeletExtraArgs:
            node-labels: metal3.io/uuid={{{{ ds.meta_data.uuid }}}}
      postKubeadmCommands:
        - {report}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: {CLUSTER}-metal
spec:
  clusterName: {CLUSTER}
  replicas: 1
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: {CLUSTER}-metal
  template:
    metadata:
      labels:
        cluster.x-k8s.io/deployment-name: {CLUSTER}-metal
    spec:
      clusterName: {CLUSTER}
      version: v1.31.4
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: {CLUSTER}-metal
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: Metal3MachineTemplate
        name: {CLUSTER}-metal
"#
    )
}

fn cluster_yaml(api_port: u16, image_url: &str, checksum: &str) -> String {
    let report = serde_json::to_string(GUEST_REPORT).unwrap();
    let mut yaml = format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: {CLUSTER}
spec:
  clusterNetwork:
    pods:
      cidrBlocks: [10.244.0.0/16]
  controlPlaneEndpoint:
    host: 10.0.2.2
    port: {api_port}
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1beta1
    kind: KubeadmControlPlane
    name: {CLUSTER}-control-plane
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
    kind: KVMCluster
    name: {CLUSTER}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: KVMCluster
metadata:
  name: {CLUSTER}
spec:
  controlPlaneEndpoint:
    host: 10.0.2.2
    port: {api_port}
  hypervisors:
  - name: {HYPERVISOR}
    uri: {uri}
    pool: {pool}
    domainType: qemu
  dnsServers: [{DNS_SERVER}]
  ntpServers: [{NTP_SERVER}]
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: {CLUSTER}-control-plane
spec:
  replicas: 1
  version: v1.31.4
  machineTemplate:
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
      kind: KVMMachineTemplate
      name: {CLUSTER}-control-plane
  kubeadmConfigSpec:
    initConfiguration:
      nodeRegistration:
        name: "{{{{ v1.local_hostname }}}}"
    joinConfiguration:
      nodeRegistration:
        name: "{{{{ v1.local_hostname }}}}"
    postKubeadmCommands:
      - {report}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: {CLUSTER}-workers
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          name: "{{{{ v1.local_hostname }}}}"
      postKubeadmCommands:
        - {report}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: {CLUSTER}-workers
spec:
  clusterName: {CLUSTER}
  replicas: 1
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: {CLUSTER}-workers
  template:
    metadata:
      labels:
        cluster.x-k8s.io/deployment-name: {CLUSTER}-workers
    spec:
      clusterName: {CLUSTER}
      version: v1.31.4
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: {CLUSTER}-workers
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
        kind: KVMMachineTemplate
        name: {CLUSTER}-workers
---
"#,
        uri = testbed::URI,
        pool = testbed::POOL,
    );
    yaml.push_str(&machine_template(
        &format!("{CLUSTER}-control-plane"),
        image_url,
        checksum,
        CONTROL_PLANE_ADDRESS,
        true,
    ));
    yaml.push_str("---\n");
    yaml.push_str(&machine_template(
        &format!("{CLUSTER}-workers"),
        image_url,
        checksum,
        WORKER_ADDRESS,
        false,
    ));
    yaml
}

/// The libvirt domain capstan makes for KVMMachine `name`.
fn domain_of(name: &str) -> String {
    format!("capstan-kvm-{NAMESPACE}-{name}")
}

/// The serial console of a domain, as libvirt logs it for capstan's VMs.
fn console(domain: &str) -> String {
    std::fs::read(format!("/var/log/libvirt/qemu/{domain}-console.log"))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The `key=value` fields of the guest's `capstan-e2e-guest:` line.
fn guest_report(domain: &str) -> BTreeMap<String, String> {
    let text = console(domain);
    let line = text
        .lines()
        // Not the reporter's listing of the command itself, which shows the `$(…)`.
        .filter(|l| !l.contains("$("))
        .find_map(|l| l.split_once("capstan-e2e-guest: ").map(|(_, r)| r.trim()))
        .unwrap_or_else(|| {
            panic!(
                "{domain}: no guest report on the console; last lines:\n{}",
                tail(&text, 40)
            )
        });
    line.split_whitespace()
        .filter_map(|field| field.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The Machines of the cluster: (control plane, KVM worker, bare-metal worker), once they exist.
fn machines(kc: &Path) -> (Option<Value>, Option<Value>, Option<Value>) {
    let machines = items(kc, "machines.cluster.x-k8s.io");
    let control_plane = machines
        .iter()
        .find(|m| {
            m["metadata"]["labels"]
                .get("cluster.x-k8s.io/control-plane")
                .is_some()
        })
        .cloned();
    let worker = machines
        .iter()
        .find(|m| {
            m["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"]
                == format!("{CLUSTER}-workers")
        })
        .cloned();
    let metal = machines
        .iter()
        .find(|m| {
            m["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"]
                == format!("{CLUSTER}-metal")
        })
        .cloned();
    (control_plane, worker, metal)
}

fn running(machine: Option<&Value>) -> Result<(), String> {
    match machine {
        Some(m) if m["status"]["phase"] == "Running" => Ok(()),
        other => Err(format!(
            "{:#}",
            other.map_or(Value::Null, |m| m["status"].clone())
        )),
    }
}

/// What a VM's guest must have applied from capstan's medium.
fn check_guest(domain: &str, kvm_machine: &str, address: &str, etcd: bool) {
    let text = console(domain);
    let report = report_lines(&text);
    for wanted in ["sentinel present", "cloud-init status: done"] {
        assert!(
            report.iter().any(|l| l == wanted),
            "{domain}: no {wanted:?} from the image's reporter:\n{}",
            report.join("\n")
        );
    }
    // The bootstrap data's files, as cloud-init merged them from the medium's parts.
    assert!(
        report
            .iter()
            .any(|l| l.starts_with("file /run/kubeadm/kubeadm") && l.contains(".yaml 0640 ")),
        "{domain}: no kubeadm configuration written:\n{}",
        report.join("\n")
    );
    assert!(
        !report.iter().any(|l| l.starts_with("missing ")),
        "{domain}: files of the bootstrap data are missing:\n{}",
        report.join("\n")
    );
    let guest = guest_report(domain);
    let field = |key: &str| guest.get(key).map(String::as_str).unwrap_or_default();
    assert_eq!(field("host"), kvm_machine, "{domain}: hostname; {guest:?}");
    assert_eq!(
        field("addr"),
        address,
        "{domain}: eth0's address; {guest:?}"
    );
    assert_eq!(
        field("gw"),
        GATEWAY,
        "{domain}: the default route; {guest:?}"
    );
    assert_eq!(
        field("dns").split(',').next(),
        Some(DNS_SERVER),
        "{domain}: /etc/resolv.conf's nameserver; {guest:?}"
    );
    assert_eq!(
        field("ntp"),
        NTP_SERVER,
        "{domain}: systemd-timesyncd's NTP server; {guest:?}"
    );
    assert_eq!(
        field("containerd"),
        "/dev/vdb1:ext4",
        "{domain}: the container runtime's volume at /var/lib/containerd; {guest:?}"
    );
    if etcd {
        assert_eq!(
            field("etcd"),
            "/dev/vdc1:ext4",
            "{domain}: the etcd volume at /var/lib/etcd; {guest:?}"
        );
    }
}

#[test]
fn a_kvm_control_plane_with_kvm_and_bare_metal_workers_boots_for_real_and_leaves_nothing_behind() {
    let started = Instant::now();
    let mut phases: Vec<(String, f64)> = Vec::new();
    let work = tempfile::Builder::new()
        .prefix("capstan-e2e-kvm")
        .tempdir()
        .unwrap();
    let data = work.path().join("data");
    let images = work.path().join("images");

    build_ramdisk(&data.join("ramdisk"));
    let t = Instant::now();
    let (ok, out) = capstan(
        &["ramdisk", "cloud-image", "--out", images.to_str().unwrap()],
        Path::new("/dev/null"),
    );
    assert!(
        ok,
        "{out}\n(the image's root filesystem comes from debootstrap: scripts/test.sh fetches it \
         while the network is there)"
    );
    phases.push((
        "cloud image (from the cached root)".into(),
        t.elapsed().as_secs_f64(),
    ));
    let checksum = out
        .lines()
        .filter_map(|l| l.split_once("  "))
        .find(|(_, path)| path.trim().ends_with("cloud.qcow2"))
        .map(|(sum, _)| sum.trim().to_owned())
        .unwrap_or_else(|| panic!("no checksum of cloud.qcow2 in:\n{out}"));
    let _ = std::fs::remove_file(images.join("cloud.img"));
    let image_url = format!("file://{}", images.join("cloud.qcow2").display());

    let libvirt = Libvirt::ensure();
    let sushy = Sushy::start(&libvirt, "admin", PASSWORD, None);
    let metal_vm = Vm::define(
        &libvirt,
        work.path(),
        &format!("capstan-e2e-{METAL_HOST}"),
        1024,
        4,
        METAL_MAC,
    );
    // Declared before the server, so dropped after it: a failed run leaves no VM or volume.
    let leftovers = KvmLeftovers {
        prefix: domain_of(&format!("{CLUSTER}-")),
        base_volumes: vec![format!("capstan-kvm-base-{}.qcow2", &checksum[..16])],
    };
    // An interrupted earlier run may have left some.
    leftovers.remove();
    let api_port = testbed::free_port();
    let provisioning_port = testbed::free_port();
    let serve_args = vec![
        "--simulate-workloads".to_owned(),
        "--provisioning-listen".to_owned(),
        format!("127.0.0.1:{provisioning_port}"),
        "--agent-url".to_owned(),
        format!("http://10.0.2.2:{provisioning_port}"),
        "--media-url".to_owned(),
        format!("http://127.0.0.1:{provisioning_port}"),
        "--images-dir".to_owned(),
        images.to_str().unwrap().to_owned(),
        "--boot-timeout".to_owned(),
        "900".to_owned(),
    ];
    let log = work.path().join("serve.log");
    let serve = Serve::start(&capstan_bin(), &data, &serve_args, &log);
    let kc = serve.kubeconfig.clone();
    apply(
        &kc,
        work.path(),
        "host.yaml",
        &metal_host_yaml(&sushy.system_address(&metal_vm.uuid)),
    );
    // The KVM machines read the image from this machine's disk, the bare-metal host over HTTP.
    let mut yaml = cluster_yaml(api_port, &image_url, &checksum);
    yaml.push_str("---\n");
    yaml.push_str(&metal_pool_yaml(
        &format!("http://10.0.2.2:{provisioning_port}/images/cloud.qcow2"),
        &checksum,
    ));
    apply(&kc, work.path(), "cluster.yaml", &yaml);

    let t = Instant::now();
    until(
        "control plane Machine Running",
        Duration::from_secs(1200),
        || running(machines(&kc).0.as_ref()),
    );
    phases.push((
        "control plane Machine Running".into(),
        t.elapsed().as_secs_f64(),
    ));
    until(
        "KVM worker Machine Running",
        Duration::from_secs(1200),
        || running(machines(&kc).1.as_ref()),
    );
    phases.push((
        "KVM worker Machine Running".into(),
        t.elapsed().as_secs_f64(),
    ));
    until(
        "bare-metal worker Machine Running",
        Duration::from_secs(1200),
        || running(machines(&kc).2.as_ref()),
    );
    phases.push((
        "bare-metal worker Machine Running".into(),
        t.elapsed().as_secs_f64(),
    ));
    let cluster = kubectl_json(&kc, &["get", "clusters.cluster.x-k8s.io", CLUSTER]);
    assert_eq!(
        cluster["status"]["phase"], "Provisioned",
        "{:#}",
        cluster["status"]
    );

    // Each Machine: its KVMMachine's VM, providerID, address, and a Node of that providerID.
    let (Some(control_plane), Some(worker), Some(metal)) = machines(&kc) else {
        panic!("the Machines went away");
    };
    let (ok, workload_config) = capstan(&["kubeconfig", CLUSTER], &kc);
    assert!(ok, "{workload_config}");
    let workload = work.path().join("workload.kubeconfig");
    std::fs::write(&workload, workload_config).unwrap();
    let nodes = items(&workload, "nodes");
    let mut domains = Vec::new();
    for (machine, address, etcd) in [
        (&control_plane, CONTROL_PLANE_ADDRESS, true),
        (&worker, WORKER_ADDRESS, false),
    ] {
        let name = machine["spec"]["infrastructureRef"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(
            machine["spec"]["infrastructureRef"]["kind"], "KVMMachine",
            "{:#}",
            machine["spec"]
        );
        let vm = kubectl_json(&kc, &["get", "kvmmachines", &name]);
        let uid = vm["metadata"]["uid"].as_str().unwrap_or_default();
        let provider_id = format!("libvirt://{HYPERVISOR}/{uid}");
        assert_eq!(machine["spec"]["providerID"], provider_id.as_str());
        assert_eq!(vm["status"]["domainUUID"], uid, "{:#}", vm["status"]);
        let ip = address.split('/').next().unwrap_or_default();
        assert!(
            vm["status"]["addresses"].as_array().is_some_and(|a| a
                .iter()
                .any(|a| a["type"] == "InternalIP" && a["address"] == ip)),
            "{name}: addresses {:#}",
            vm["status"]["addresses"]
        );
        let node = nodes
            .iter()
            .find(|n| n["spec"]["providerID"] == provider_id.as_str())
            .unwrap_or_else(|| panic!("no Node with providerID {provider_id}: {nodes:#?}"));
        assert_eq!(node["metadata"]["name"], name.as_str());
        let domain = domain_of(&name);
        let (_, state) = testbed::virsh(&["domstate", &domain]);
        assert_eq!(state.trim(), "running", "{domain}");
        domains.push((domain, name, address, etcd));
    }
    assert_eq!(
        metal["spec"]["infrastructureRef"]["kind"], "Metal3Machine",
        "{:#}",
        metal["spec"]
    );
    let metal_provider_id = metal["spec"]["providerID"].as_str().unwrap_or_default();
    assert!(
        metal_provider_id.starts_with(&format!("metal3://{NAMESPACE}/{METAL_HOST}/")),
        "{metal_provider_id}"
    );
    assert!(
        nodes
            .iter()
            .any(|n| n["spec"]["providerID"] == metal_provider_id),
        "no Node with providerID {metal_provider_id}: {nodes:#?}"
    );

    // From inside the VMs, once the image's reporter is done.
    let t = Instant::now();
    for (domain, name, address, etcd) in &domains {
        until(
            &format!("the reporter's end on {domain}'s console"),
            Duration::from_secs(300),
            || {
                let text = console(domain);
                if text.contains("capstan-report: done") {
                    Ok(())
                } else {
                    Err(tail(&text, 20))
                }
            },
        );
        check_guest(domain, name, address, *etcd);
    }
    // The bare-metal worker: the same image, cloud-init reading the config drive.
    metal_vm.wait_for_serial("capstan-report: done", Duration::from_secs(300));
    let report = report_lines(&metal_vm.serial());
    for wanted in ["sentinel present", "cloud-init status: done"] {
        assert!(
            report.iter().any(|l| l == wanted),
            "{METAL_HOST}: no {wanted:?} from the image's reporter:\n{}",
            report.join("\n")
        );
    }
    assert!(
        metal_vm
            .serial()
            .contains("capstan-kubeadm-standin: join: done"),
        "{METAL_HOST}: kubeadm join did not finish"
    );
    phases.push(("guest reports checked".into(), t.elapsed().as_secs_f64()));

    let (ok, tree) = capstan(&["describe", "cluster", CLUSTER], &kc);
    assert!(ok, "describe: {tree}");
    assert!(tree.contains(&format!("KVMCluster/{CLUSTER}")), "{tree}");
    for (_, name, _, _) in &domains {
        assert!(tree.contains(&format!("KVMMachine/{name}")), "{tree}");
    }
    assert!(tree.contains("Metal3Machine/"), "{tree}");

    // Delete: no domain, volume or medium of the cluster is left on the hypervisor.
    let t = Instant::now();
    let (ok, out) = capstan(&["delete", "cluster", CLUSTER], &kc);
    assert!(ok, "delete: {out}");
    until("the Cluster gone", Duration::from_secs(300), || {
        let left = items(&kc, "clusters.cluster.x-k8s.io").len()
            + items(&kc, "machines.cluster.x-k8s.io").len()
            + items(&kc, "kvmmachines").len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} Clusters, Machines and KVMMachines left"))
        }
    });
    phases.push(("cluster deleted".into(), t.elapsed().as_secs_f64()));
    let domains_left = testbed::domains_with_prefix(&leftovers.prefix);
    assert!(domains_left.is_empty(), "domains left: {domains_left:?}");
    let volumes_left = testbed::volumes_with_prefix(&leftovers.prefix);
    assert!(volumes_left.is_empty(), "volumes left: {volumes_left:?}");
    let deleted = items(&kc, "events")
        .iter()
        .filter(|e| e["reason"] == "VMDeleted")
        .count();
    assert_eq!(deleted, 2, "VMDeleted events");
    wait_host(
        &kc,
        METAL_HOST,
        "deprovisioned back to available",
        Duration::from_secs(900),
        |h| state(h) == "available",
    );
    phases.push(("host available again".into(), t.elapsed().as_secs_f64()));
    // The base image is the pool's cache, kept on purpose; the test removes its own.
    assert_eq!(
        testbed::volumes_with_prefix(&leftovers.base_volumes[0]),
        leftovers.base_volumes,
        "the base image's cache"
    );

    drop(serve);
    drop(leftovers);
    drop(metal_vm);
    drop(sushy);
    println!("e2e: phase times (seconds since the phase began):");
    for (phase, seconds) in &phases {
        println!("e2e:   {phase:<48} {seconds:>7.1}");
    }
    println!("e2e: total {:.1} s", started.elapsed().as_secs_f64());
}
