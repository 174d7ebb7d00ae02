//! Every host's `network_data.json`, as cloud-init turns it into netplan, and against Nova's schema.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;
use std::process::Command;

use capstan_render::CapiVersion;
use capstan_render::spec::{Host, Spec};
use common::{EXAMPLES, objects, of_kind, render_example};
use serde_json::Value;

/// The `networkData` document of every host of an example.
fn network_documents(example: &str) -> Vec<(Host, Value)> {
    let spec = common::load_example(example);
    let all = objects(&render_example(example, CapiVersion::V1beta1));
    spec.hosts
        .iter()
        .map(|host| {
            let secret = of_kind(&all, "Secret")
                .find(|s| s["metadata"]["name"] == format!("{}-network-data", host.name))
                .unwrap_or_else(|| panic!("no network data Secret for {}", host.name));
            let text = secret["stringData"]["networkData"].as_str().unwrap();
            (host.clone(), serde_json::from_str(text).unwrap())
        })
        .collect()
}

/// The interface a spec link name becomes under netplan: its section and key.
fn section_of(host: &Host, link: &str) -> (&'static str, String) {
    if host.network.bonds.iter().any(|b| b.name == link) {
        ("bonds", link.to_owned())
    } else if host
        .network
        .vlans
        .iter()
        .any(|v| format!("{}.{}", v.link, v.id) == link)
    {
        ("vlans", link.to_owned())
    } else {
        ("ethernets", link.to_owned())
    }
}

fn dns_of<'a>(spec: &'a Spec, host: &'a Host) -> Option<&'a capstan_render::spec::Dns> {
    host.network
        .dns
        .as_ref()
        .or(spec.host_defaults.dns.as_ref())
}

#[test]
fn cloud_init_renders_what_the_spec_says() {
    let cloud_init = common::require_tool("cloud-init");
    for example in EXAMPLES {
        let spec = common::load_example(example);
        for (host, document) in network_documents(example) {
            let dir = tempfile::tempdir().unwrap();
            let input = common::write(dir.path(), "network_data.json", &document.to_string());
            let out = dir.path().join("out");
            let mut command = Command::new(&cloud_init);
            command
                .args([
                    "devel",
                    "net-convert",
                    "-k",
                    "network_data.json",
                    "-D",
                    "debian",
                    "-O",
                    "netplan",
                ])
                .arg("-p")
                .arg(&input)
                .arg("-d")
                .arg(&out);
            for link in &host.network.links {
                command.arg("-m").arg(format!("{},{}", link.name, link.mac));
            }
            common::run(&mut command);
            let netplan_path = out.join("etc/netplan/50-cloud-init.yaml");
            let text = std::fs::read_to_string(&netplan_path)
                .unwrap_or_else(|err| panic!("{}: {err}", netplan_path.display()));
            let netplan = capstan_manifest::parse_documents("netplan", &text)
                .unwrap()
                .remove(0)
                .value;
            let network = &netplan["network"];
            let context = format!("{example} {}:\n{text}", host.name);

            for link in &host.network.links {
                assert_eq!(
                    network["ethernets"][&link.name]["match"]["macaddress"], link.mac,
                    "{context}"
                );
                if let Some(mtu) = link.mtu {
                    assert_eq!(network["ethernets"][&link.name]["mtu"], mtu, "{context}");
                }
            }
            for bond in &host.network.bonds {
                let rendered = &network["bonds"][&bond.name];
                assert_eq!(
                    rendered["interfaces"],
                    serde_json::json!(bond.links),
                    "{context}"
                );
                assert_eq!(
                    rendered["parameters"]["mode"],
                    bond.mode.as_str(),
                    "{context}"
                );
                if let Some(miimon) = bond.miimon {
                    assert_eq!(
                        rendered["parameters"]["mii-monitor-interval"], miimon,
                        "{context}"
                    );
                }
                if let Some(policy) = bond.xmit_hash_policy {
                    assert_eq!(
                        rendered["parameters"]["transmit-hash-policy"],
                        policy.as_str(),
                        "{context}"
                    );
                }
                if let Some(rate) = bond.lacp_rate {
                    assert_eq!(
                        rendered["parameters"]["lacp-rate"],
                        rate.as_str(),
                        "{context}"
                    );
                }
            }
            for vlan in &host.network.vlans {
                let rendered = &network["vlans"][format!("{}.{}", vlan.link, vlan.id)];
                assert_eq!(rendered["id"], vlan.id, "{context}");
                assert_eq!(rendered["link"], vlan.link, "{context}");
            }
            for address in &host.network.addresses {
                let (section, name) = section_of(&host, &address.link);
                let rendered = &network[section][&name];
                let cidr = address.cidr.as_deref().unwrap();
                assert!(
                    rendered["addresses"]
                        .as_array()
                        .unwrap()
                        .contains(&Value::from(cidr)),
                    "{context}"
                );
                if let Some(gateway) = &address.gateway {
                    let routes = rendered["routes"].as_array().unwrap();
                    assert!(
                        routes
                            .iter()
                            .any(|r| r["to"] == "0.0.0.0/0" && r["via"] == *gateway),
                        "default route via {gateway}: {context}"
                    );
                }
                if address.gateway.is_some()
                    && let Some(dns) = dns_of(&spec, &host)
                {
                    assert_eq!(
                        rendered["nameservers"]["addresses"],
                        serde_json::json!(dns.nameservers),
                        "{context}"
                    );
                    assert_eq!(
                        rendered["nameservers"]["search"],
                        serde_json::json!(dns.search),
                        "{context}"
                    );
                }
            }
            for route in &host.network.routes {
                let via: IpAddr = route.via.parse().unwrap();
                let carrier = host
                    .network
                    .addresses
                    .iter()
                    .find(|a| {
                        a.cidr
                            .as_deref()
                            .and_then(|c| c.parse::<ipnet::IpNet>().ok())
                            .is_some_and(|net| net.contains(&via))
                    })
                    .unwrap();
                let (section, name) = section_of(&host, &carrier.link);
                let routes = network[section][&name]["routes"].as_array().unwrap();
                assert!(
                    routes
                        .iter()
                        .any(|r| r["to"] == route.to.as_str() && r["via"] == route.via.as_str()),
                    "route to {}: {context}",
                    route.to
                );
            }
        }
    }
}

#[test]
fn network_data_satisfies_novas_schema() {
    let python = common::cloud_init_python();
    let schema = common::network_data_schema();
    let dir = tempfile::tempdir().unwrap();
    let mut documents = Vec::new();
    for example in EXAMPLES {
        for (host, document) in network_documents(example) {
            let path = common::write(
                dir.path(),
                &format!("{}.json", host.name),
                &document.to_string(),
            );
            documents.push(path);
        }
    }
    // Nova's schema is draft-04 style (`id`, `definitions`); `network_id` is required there.
    let check = r#"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
validator = jsonschema.Draft4Validator(schema)
failed = False
for path in sys.argv[2:]:
    for error in validator.iter_errors(json.load(open(path))):
        failed = True
        print(path, list(error.absolute_path), error.message[:300])
sys.exit(1 if failed else 0)
"#;
    common::run(
        Command::new(python)
            .arg("-c")
            .arg(check)
            .arg(&schema)
            .args(&documents),
    );
    // And the check itself rejects a document without network_id.
    let (_, mut document) = network_documents("capi-1.yaml").remove(0);
    document["networks"][0]
        .as_object_mut()
        .unwrap()
        .remove("network_id");
    let broken = common::write(dir.path(), "broken.json", &document.to_string());
    let status = Command::new(common::cloud_init_python())
        .arg("-c")
        .arg(check)
        .arg(&schema)
        .arg(&broken)
        .output()
        .unwrap()
        .status;
    assert!(!status.success());
}
