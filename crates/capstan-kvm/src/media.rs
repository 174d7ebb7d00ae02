//! The cloud-init NoCloud medium of a VM: an ISO 9660 volume labelled `cidata` with `meta-data`
//! (instance id, hostname), `network-config` (version 2: each NIC by MAC, static address or DHCP,
//! DNS servers) and `user-data`.
//!
//! `user-data` is a MIME multipart document, which cloud-init merges part by part: first capstan's
//! own cloud-config (hostname, NTP servers, the extra volumes partitioned, formatted and mounted),
//! then the Machine's bootstrap data untouched (a cloud-config, or a script), so the bootstrap
//! provider's document is never rewritten. The medium holds the bootstrap data, a secret: it lives
//! in the hypervisor's pool only for the VM's lifetime and is never logged.

use capstan_iso::{IsoError, IsoImage};
use std::fmt::Write as _;

/// An extra disk the guest formats and mounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Guest device (`/dev/vdb`).
    pub device: String,
    /// Mount point (`/var/lib/containerd`).
    pub path: String,
}

/// One NIC's network settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nic {
    pub mac: String,
    /// `address/prefix`, or `None` for DHCP.
    pub address: Option<String>,
    pub gateway: Option<String>,
}

/// What goes on the medium, except the bootstrap data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeConfig {
    pub instance_id: String,
    pub hostname: String,
    pub nics: Vec<Nic>,
    pub dns_servers: Vec<String>,
    pub ntp_servers: Vec<String>,
    pub mounts: Vec<Mount>,
}

/// The boundary between the two user-data parts.
const BOUNDARY: &str = "==CAPSTAN-KVM-BOUNDARY==";

fn yaml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned())
}

/// `meta-data`.
pub fn meta_data(node: &NodeConfig) -> String {
    format!(
        "instance-id: {}\nlocal-hostname: {}\n",
        yaml_string(&node.instance_id),
        yaml_string(&node.hostname)
    )
}

/// `network-config` (version 2).
pub fn network_config(node: &NodeConfig) -> String {
    let mut out = String::from("version: 2\nethernets:\n");
    for (index, nic) in node.nics.iter().enumerate() {
        let _ = writeln!(out, "  nic{index}:");
        let _ = writeln!(
            out,
            "    match:\n      macaddress: {}",
            yaml_string(&nic.mac)
        );
        let _ = writeln!(out, "    set-name: eth{index}");
        match &nic.address {
            Some(address) => {
                let _ = writeln!(
                    out,
                    "    dhcp4: false\n    addresses: [{}]",
                    yaml_string(address)
                );
                if let Some(gateway) = &nic.gateway {
                    // `gateway4`/`gateway6`, not a route to `default` or `0.0.0.0/0`: cloud-init
                    // 22.4 (Debian 12's) refuses `to: default` ("Address default is not a valid
                    // ip address") and then applies no network config at all, and renders routes
                    // for ifupdown as `route add`, which needs net-tools, while a gateway becomes
                    // ifupdown's own `gateway` line. Every renderer (ifupdown, netplan, networkd,
                    // sysconfig) reads these keys.
                    let key = if gateway.contains(':') {
                        "gateway6"
                    } else {
                        "gateway4"
                    };
                    let _ = writeln!(out, "    {key}: {}", yaml_string(gateway));
                }
            }
            None => {
                let _ = writeln!(out, "    dhcp4: true");
            }
        }
        if !node.dns_servers.is_empty() {
            let servers: Vec<String> = node.dns_servers.iter().map(|s| yaml_string(s)).collect();
            let _ = writeln!(
                out,
                "    nameservers:\n      addresses: [{}]",
                servers.join(", ")
            );
        }
    }
    out
}

/// capstan's own cloud-config part.
pub fn node_cloud_config(node: &NodeConfig) -> String {
    let mut out = String::from("#cloud-config\n");
    let _ = writeln!(out, "hostname: {}", yaml_string(&node.hostname));
    let _ = writeln!(out, "preserve_hostname: false");
    if !node.ntp_servers.is_empty() {
        let servers: Vec<String> = node.ntp_servers.iter().map(|s| yaml_string(s)).collect();
        let _ = writeln!(
            out,
            "ntp:\n  enabled: true\n  servers: [{}]",
            servers.join(", ")
        );
    }
    if !node.mounts.is_empty() {
        out.push_str("disk_setup:\n");
        for mount in &node.mounts {
            let _ = writeln!(
                out,
                "  {}:\n    table_type: gpt\n    layout: true\n    overwrite: false",
                yaml_string(&mount.device)
            );
        }
        out.push_str("fs_setup:\n");
        for mount in &node.mounts {
            let _ = writeln!(
                out,
                "- device: {}\n  partition: auto\n  filesystem: ext4\n  overwrite: false",
                yaml_string(&mount.device)
            );
        }
        out.push_str("mounts:\n");
        for mount in &node.mounts {
            let _ = writeln!(
                out,
                "- [{}, {}, ext4, \"defaults,nofail\", \"0\", \"2\"]",
                yaml_string(&format!("{}1", mount.device)),
                yaml_string(&mount.path)
            );
        }
    }
    out
}

fn content_type(part: &[u8]) -> &'static str {
    let head = part.get(..part.len().min(64)).unwrap_or_default();
    if head.starts_with(b"#!") {
        "text/x-shellscript"
    } else if head.starts_with(b"## template: jinja") {
        "text/jinja2"
    } else {
        "text/cloud-config"
    }
}

/// `user-data`: capstan's part, then the bootstrap data.
pub fn user_data(node: &NodeConfig, bootstrap: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(
        format!("Content-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\nMIME-Version: 1.0\n\n")
            .as_bytes(),
    );
    for (part, kind) in [
        (node_cloud_config(node).into_bytes(), "text/cloud-config"),
        (bootstrap.to_vec(), content_type(bootstrap)),
    ] {
        out.extend_from_slice(
            format!("--{BOUNDARY}\nContent-Type: {kind}; charset=\"utf-8\"\nMIME-Version: 1.0\n\n")
                .as_bytes(),
        );
        out.extend_from_slice(&part);
        if !part.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\n").as_bytes());
    out
}

/// The ISO image.
pub fn nocloud_iso(node: &NodeConfig, bootstrap: &[u8]) -> Result<Vec<u8>, IsoError> {
    let mut image = IsoImage::new("cidata")?;
    image.add_bytes("meta-data", meta_data(node).into_bytes())?;
    image.add_bytes("network-config", network_config(node).into_bytes())?;
    image.add_bytes("user-data", user_data(node, bootstrap))?;
    image.to_vec()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn node() -> NodeConfig {
        NodeConfig {
            instance_id: "u-1".into(),
            hostname: "cp-0".into(),
            nics: vec![
                Nic {
                    mac: "52:54:00:aa:bb:cc".into(),
                    address: Some("192.168.122.10/24".into()),
                    gateway: Some("192.168.122.1".into()),
                },
                Nic {
                    mac: "52:54:00:aa:bb:cd".into(),
                    address: None,
                    gateway: None,
                },
            ],
            dns_servers: vec!["192.168.122.1".into()],
            ntp_servers: vec!["ntp.example".into()],
            mounts: vec![Mount {
                device: "/dev/vdb".into(),
                path: "/var/lib/containerd".into(),
            }],
        }
    }

    #[test]
    fn user_data_keeps_the_bootstrap_part_verbatim() {
        let bootstrap = b"## template: jinja\n#cloud-config\nruncmd:\n- kubeadm init\n";
        let text = String::from_utf8(user_data(&node(), bootstrap)).unwrap();
        assert!(text.contains("Content-Type: text/jinja2"), "{text}");
        assert!(text.contains("## template: jinja\n#cloud-config\nruncmd:\n- kubeadm init\n"));
        assert!(text.contains("ntp:\n  enabled: true\n  servers: [\"ntp.example\"]"));
        assert!(text.contains("[\"/dev/vdb1\", \"/var/lib/containerd\", ext4"));
        assert!(text.ends_with(&format!("--{BOUNDARY}--\n")));
    }

    #[test]
    fn network_config_by_mac() {
        let text = network_config(&node());
        assert!(text.contains("macaddress: \"52:54:00:aa:bb:cc\""));
        assert!(text.contains("addresses: [\"192.168.122.10/24\"]"));
        // cloud-init 22.4 (Debian 12) refuses `to: default` and then applies no network config,
        // and renders other routes for ifupdown with net-tools' `route`.
        assert!(text.contains("    gateway4: \"192.168.122.1\"\n"), "{text}");
        assert!(!text.contains("routes:"), "{text}");
        assert!(text.contains("dhcp4: true"));
        assert!(text.contains("nameservers:\n      addresses: [\"192.168.122.1\"]"));
    }

    #[test]
    fn an_ipv6_gateway_is_the_default_route_of_ipv6() {
        let mut node = node();
        node.nics[0].address = Some("2001:db8::10/64".into());
        node.nics[0].gateway = Some("2001:db8::1".into());
        let text = network_config(&node);
        assert!(text.contains("    gateway6: \"2001:db8::1\"\n"), "{text}");
    }

    #[test]
    fn iso_is_labelled_cidata() {
        let iso = nocloud_iso(&node(), b"#cloud-config\n").unwrap();
        // The primary volume descriptor's volume id, at sector 16 offset 40.
        let label = &iso[16 * 2048 + 40..16 * 2048 + 46];
        assert_eq!(label, b"cidata");
    }
}
