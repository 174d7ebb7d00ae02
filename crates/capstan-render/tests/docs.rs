//! `docs/spec.md` stays in step with the spec types: every field is documented, and the complete
//! example there sets every field and reads as a spec.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use capstan_render::spec::{
    Address, Bgp, BgpPeer, Bmc, BmcCredentials, BmcDefaults, Bond, BondMode, ChecksumType, Cilium,
    ControlPlane, CrsStrategy, DiskFormat, Dns, DnsWait, HealthCheck, Host, HostDefaults,
    HostNetwork, Hypervisor, Image, IntOrPercent, KubeVip, Kubernetes, Kvm, LacpRate, Machines,
    PhysicalLink, Role, RootDeviceHints, Router, Spec, StaticRoute, User, Vlan, Vm, VmImage,
    VmIpPool, VmNetwork, WorkerPool, XmitHashPolicy,
};
use serde_json::Value;

fn docs() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/spec.md")).unwrap()
}

/// A spec with every field set. Struct literals without `..` make a new field a compile error
/// here, as a reminder to document it.
fn every_field() -> Spec {
    let credentials = BmcCredentials {
        username: "u".into(),
        password: Some("p".into()),
        password_file: Some("f".into()),
        password_env: Some("E".into()),
    };
    let hints = RootDeviceHints {
        device_name: Some("d".into()),
        hctl: Some("h".into()),
        model: Some("m".into()),
        vendor: Some("v".into()),
        serial_number: Some("s".into()),
        min_size_gigabytes: Some(1),
        wwn: Some("w".into()),
        wwn_with_extension: Some("w".into()),
        wwn_vendor_extension: Some("w".into()),
        rotational: Some(false),
    };
    let dns = Dns {
        nameservers: vec!["1.1.1.1".into()],
        search: vec!["s".into()],
    };
    let vm = Vm {
        cpu: Some(1),
        memory: Some("m".into()),
        disk: Some("d".into()),
        docker_volume_size: Some("d".into()),
        networks: vec![VmNetwork {
            network: Some("n".into()),
            bridge: Some("b".into()),
            address: Some("a".into()),
            gateway: Some("g".into()),
            ip_pool: Some(VmIpPool {
                start: "s".into(),
                end: "e".into(),
                prefix: 24,
            }),
        }],
    };
    let mut spec = capstan_render::generate::generated_spec(1);
    spec.name = "n".into();
    spec.namespace = "n".into();
    spec.kubernetes = Kubernetes {
        version: "v".into(),
        pod_cidr: "p".into(),
        service_cidr: "s".into(),
    };
    spec.control_plane = ControlPlane {
        replicas: 1,
        vip: "v".into(),
        port: 1,
        kube_vip: KubeVip {
            image: "i".into(),
            interface: Some("i".into()),
            lease_duration_seconds: 1,
            renew_deadline_seconds: 1,
            retry_period_seconds: 1,
        },
        machines: Machines::Kvm,
        vm: Some(vm.clone()),
    };
    spec.worker_pools = vec![WorkerPool {
        name: "p".into(),
        replicas: 1,
        host_selector: [("k".to_owned(), "v".to_owned())].into(),
        machines: Machines::Kvm,
        vm: Some(vm),
    }];
    spec.kvm = Some(Kvm {
        hypervisors: vec![Hypervisor {
            name: "h".into(),
            uri: "u".into(),
            pool: Some("p".into()),
            control_plane: Some(true),
            domain_type: Some("kvm".into()),
        }],
        image: VmImage {
            url: "u".into(),
            checksum: "c".into(),
            checksum_type: Some("sha256".into()),
            format: Some("qcow2".into()),
        },
        dns_servers: vec!["d".into()],
        ntp_servers: vec!["n".into()],
    });
    spec.image = Image {
        url: "u".into(),
        checksum: "c".into(),
        checksum_type: Some(ChecksumType::Sha256),
        format: Some(DiskFormat::Raw),
    };
    spec.users = vec![User {
        name: "u".into(),
        ssh_authorized_keys: vec!["k".into()],
        sudo: Some("s".into()),
    }];
    spec.dns_wait = DnsWait {
        enabled: true,
        host: "h".into(),
        timeout_seconds: 1,
    };
    spec.cilium = Cilium {
        manifest: "m".into(),
        version: Some("v".into()),
        strategy: CrsStrategy::Reconcile,
        fix: false,
    };
    spec.bgp = Some(Bgp {
        local_asn: 1,
        peers: vec![BgpPeer {
            address: "a".into(),
            asn: 1,
        }],
        advertise_load_balancer_ips: true,
        ebgp_multihop: 1,
        hold_time_seconds: 1,
        keep_alive_time_seconds: 1,
        graceful_restart_seconds: 1,
        router: Router {
            router_id: Some("r".into()),
            peer_group: Some("g".into()),
            receive_only: true,
            update_source: Some("u".into()),
            ebgp_multihop: 1,
        },
    });
    spec.health_check = Some(HealthCheck {
        control_plane: true,
        workers: true,
        unhealthy_timeout_seconds: 1,
        node_startup_timeout_seconds: 1,
        max_unhealthy: Some(IntOrPercent::Count(1)),
    });
    spec.host_defaults = HostDefaults {
        bmc: Some(BmcDefaults {
            credentials: Some(credentials.clone()),
            disable_certificate_verification: Some(true),
        }),
        dns: Some(dns.clone()),
        root_device_hints: Some(hints.clone()),
    };
    spec.hosts = vec![Host {
        name: "h".into(),
        role: Role::Worker,
        pool: Some("p".into()),
        labels: [("k".to_owned(), "v".to_owned())].into(),
        bmc: Bmc {
            address: "a".into(),
            credentials: Some(credentials),
            disable_certificate_verification: Some(true),
        },
        boot_mac_address: Some("m".into()),
        root_device_hints: Some(hints),
        network: HostNetwork {
            links: vec![PhysicalLink {
                name: "l".into(),
                mac: "m".into(),
                mtu: Some(1),
            }],
            bonds: vec![Bond {
                name: "b".into(),
                mode: BondMode::Lacp,
                links: vec!["l".into()],
                mtu: Some(1),
                miimon: Some(1),
                lacp_rate: Some(LacpRate::Fast),
                xmit_hash_policy: Some(XmitHashPolicy::Layer34),
                updelay: Some(1),
                downdelay: Some(1),
            }],
            vlans: vec![Vlan {
                id: 1,
                link: "b".into(),
                mtu: Some(1),
            }],
            addresses: vec![Address {
                link: "l".into(),
                cidr: Some("c".into()),
                dhcp: true,
                gateway: Some("g".into()),
            }],
            routes: vec![StaticRoute {
                to: "t".into(),
                via: "v".into(),
            }],
            dns: Some(dns),
        },
    }];
    spec
}

/// Every field name in a serialised spec, user-chosen label keys aside.
fn field_names(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                out.insert(key.clone());
                if key != "labels" && key != "hostSelector" {
                    field_names(child, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| field_names(item, out)),
        _ => {}
    }
}

#[test]
fn every_field_is_documented() {
    let docs = docs();
    let mut names = BTreeSet::new();
    field_names(&serde_json::to_value(every_field()).unwrap(), &mut names);
    let missing: Vec<&String> = names
        .iter()
        .filter(|name| !docs.contains(&format!("| `{name}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "not documented in docs/spec.md: {missing:?}"
    );
}

#[test]
fn the_complete_example_sets_every_field_and_reads() {
    let docs = docs();
    let start = docs.find("## A complete spec").unwrap();
    let block = &docs[start..];
    let body_start = block.find("```yaml\n").unwrap() + "```yaml\n".len();
    let body_end = block[body_start..].find("```").unwrap();
    let example = &block[body_start..body_start + body_end];
    let spec = capstan_render::parse_spec("docs/spec.md", example)
        .unwrap_or_else(|err| panic!("the complete example does not read: {err}"));
    let mut documented = BTreeSet::new();
    field_names(&serde_json::to_value(&spec).unwrap(), &mut documented);
    let mut all = BTreeSet::new();
    field_names(&serde_json::to_value(every_field()).unwrap(), &mut all);
    let missing: Vec<&String> = all.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "the complete example leaves out {missing:?}"
    );
    // Its settings are consistent too (only the hosts elided from it are missing).
    let (errors, _) = capstan_render::check(&spec);
    assert!(
        errors.iter().all(|e| e
            .message
            .contains("control-plane replicas but only 1 hosts")),
        "{errors:#?}"
    );
}
