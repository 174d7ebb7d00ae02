//! Generated specs of any size, for benchmarks (`benches/render.rs`, `capstan bench`) and tests.
//!
//! A generated cluster has three control-plane hosts (fewer if fewer hosts are asked for) and puts
//! every other host in one worker pool. Each host has two NICs in an 802.3ad bond with its address
//! on VLAN 100, so rendering exercises the whole network path. Addresses come from 172.16.0.0/12,
//! which holds up to [`MAX_HOSTS`] hosts.

use crate::spec::{
    Address, Bgp, BgpPeer, Bmc, BmcCredentials, BmcDefaults, Bond, BondMode, ChecksumType, Cilium,
    ControlPlane, DiskFormat, Dns, DnsWait, HealthCheck, Host, HostDefaults, HostNetwork, Image,
    IntOrPercent, KubeVip, Kubernetes, LacpRate, Machines, PhysicalLink, Role, Router, Spec, User,
    Vlan, WorkerPool, XmitHashPolicy,
};

/// Path of the Cilium manifest in generated specs, relative to the spec directory.
pub const CILIUM_MANIFEST_PATH: &str = "cilium/cilium-manifests.yaml";

/// The sample Cilium manifest shipped in `examples/cilium/`, for rendering generated specs: write
/// it to `<spec_dir>/`[`CILIUM_MANIFEST_PATH`].
pub const SAMPLE_CILIUM_MANIFEST: &str =
    include_str!("../../../examples/cilium/cilium-manifests.yaml");

/// Most hosts a generated spec can have (the size of its host network).
pub const MAX_HOSTS: usize = (1 << 20) - 512;

fn octets(value: u32) -> [u8; 4] {
    value.to_be_bytes()
}

fn mac(nic: u8, host: u32) -> String {
    let [_, a, b, c] = octets(host);
    format!("52:54:{nic:02x}:{a:02x}:{b:02x}:{c:02x}")
}

fn host_address(host: u32) -> String {
    // 172.16.1.0 onwards; .0.x holds the gateway and the VIP.
    let [a, b, c, d] = octets(0xAC10_0100 + host);
    format!("{a}.{b}.{c}.{d}")
}

/// A valid spec for a cluster of `hosts` hosts (clamped to 1..=[`MAX_HOSTS`]).
pub fn generated_spec(hosts: usize) -> Spec {
    let hosts = hosts.clamp(1, MAX_HOSTS);
    let control_planes = hosts.min(3);
    let workers = hosts - control_planes;
    let inventory = (0..hosts)
        .map(|i| {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            let role = if i < control_planes {
                Role::ControlPlane
            } else {
                Role::Worker
            };
            let [_, _, hi, lo] = octets(index);
            Host {
                name: format!("node-{i:07}"),
                role,
                pool: None,
                labels: Default::default(),
                bmc: Bmc {
                    address: format!(
                        "redfish-virtualmedia+https://10.200.{hi}.{lo}/redfish/v1/Systems/{index}"
                    ),
                    credentials: None,
                    disable_certificate_verification: None,
                },
                boot_mac_address: None,
                root_device_hints: None,
                network: HostNetwork {
                    links: vec![
                        PhysicalLink {
                            name: "enp1s0".to_owned(),
                            mac: mac(1, index),
                            mtu: Some(9000),
                        },
                        PhysicalLink {
                            name: "enp2s0".to_owned(),
                            mac: mac(2, index),
                            mtu: Some(9000),
                        },
                    ],
                    bonds: vec![Bond {
                        name: "bond0".to_owned(),
                        mode: BondMode::Lacp,
                        links: vec!["enp1s0".to_owned(), "enp2s0".to_owned()],
                        mtu: Some(9000),
                        miimon: Some(100),
                        lacp_rate: Some(LacpRate::Fast),
                        xmit_hash_policy: Some(XmitHashPolicy::Layer34),
                        updelay: None,
                        downdelay: None,
                    }],
                    vlans: vec![Vlan {
                        id: 100,
                        link: "bond0".to_owned(),
                        mtu: Some(9000),
                    }],
                    addresses: vec![Address {
                        link: "bond0.100".to_owned(),
                        cidr: Some(format!("{}/12", host_address(index))),
                        dhcp: false,
                        gateway: Some("172.16.0.1".to_owned()),
                    }],
                    routes: Vec::new(),
                    dns: None,
                },
            }
        })
        .collect();
    Spec {
        name: "bench".to_owned(),
        namespace: "bench".to_owned(),
        kubernetes: Kubernetes {
            version: "v1.31.4".to_owned(),
            pod_cidr: "10.244.0.0/16".to_owned(),
            service_cidr: "10.96.0.0/12".to_owned(),
        },
        control_plane: ControlPlane {
            replicas: u32::try_from(control_planes).unwrap_or(3),
            vip: "172.16.0.5".to_owned(),
            port: 6443,
            kube_vip: KubeVip::default(),
            machines: Machines::BareMetal,
            vm: None,
        },
        worker_pools: if workers > 0 {
            vec![WorkerPool {
                name: "workers".to_owned(),
                replicas: u32::try_from(workers).unwrap_or(u32::MAX),
                host_selector: Default::default(),
                machines: Machines::BareMetal,
                vm: None,
            }]
        } else {
            Vec::new()
        },
        image: Image {
            url: "http://images.example/fedora-k8s.raw".to_owned(),
            checksum: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                .to_owned(),
            checksum_type: Some(ChecksumType::Sha256),
            format: Some(DiskFormat::Raw),
        },
        users: vec![User {
            name: "ops".to_owned(),
            ssh_authorized_keys: vec![
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBenchmarkKeyBenchmarkKeyBenchmarkKey ops@bench"
                    .to_owned(),
            ],
            sudo: Some("ALL=(ALL) NOPASSWD:ALL".to_owned()),
        }],
        dns_wait: DnsWait::default(),
        cilium: Cilium {
            manifest: CILIUM_MANIFEST_PATH.to_owned(),
            ..Cilium::default()
        },
        bgp: Some(Bgp {
            local_asn: 65010,
            peers: vec![BgpPeer {
                address: "192.168.254.1".to_owned(),
                asn: 65001,
            }],
            advertise_load_balancer_ips: true,
            ebgp_multihop: 10,
            hold_time_seconds: 90,
            keep_alive_time_seconds: 30,
            graceful_restart_seconds: 15,
            router: Router::default(),
        }),
        health_check: Some(HealthCheck {
            control_plane: control_planes >= 3,
            workers: true,
            unhealthy_timeout_seconds: 300,
            node_startup_timeout_seconds: 1800,
            max_unhealthy: Some(IntOrPercent::Percent("40%".to_owned())),
        }),
        host_defaults: HostDefaults {
            bmc: Some(BmcDefaults {
                credentials: Some(BmcCredentials {
                    username: "admin".to_owned(),
                    password: Some("bench-password".to_owned()),
                    password_file: None,
                    password_env: None,
                }),
                disable_certificate_verification: Some(true),
            }),
            dns: Some(Dns {
                nameservers: vec!["172.16.0.1".to_owned()],
                search: vec!["bench.example".to_owned()],
            }),
            root_device_hints: None,
        },
        kvm: None,
        hosts: inventory,
        source: crate::source::Source::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_specs_are_valid() {
        for hosts in [1, 2, 3, 4, 50] {
            let spec = generated_spec(hosts);
            let (errors, _) = crate::check(&spec);
            assert!(errors.is_empty(), "{hosts} hosts: {errors:?}");
            assert_eq!(spec.hosts.len(), hosts);
        }
    }

    #[test]
    fn addresses_and_macs_stay_distinct() {
        assert_eq!(host_address(0), "172.16.1.0");
        assert_eq!(host_address(300), "172.16.2.44");
        assert_ne!(mac(1, 256), mac(1, 0));
        assert_eq!(mac(2, 0x01_0203), "52:54:02:01:02:03");
    }
}
