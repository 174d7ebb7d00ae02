//! Interface names against the hosts that will run them: kube-vip's `vip_interface` and the
//! interfaces named by `ip`, `nmcli`, `dhclient` and `ifup` in a KubeadmControlPlane's or
//! KubeadmConfigTemplate's commands, and Metal3DataTemplate `fromHostInterface` names.
//!
//! Targeted hosts are the BareMetalHosts the Metal3MachineTemplate behind the config can claim
//! (its hostSelector, in its namespace). Only hosts with inspection data (`status.hardware.nics`)
//! are checked. Names a host's networkData defines (bonds, VLANs) and names the commands create
//! (`ip link add`, `nmcli con add type bond|vlan|bridge ... ifname X`) count as present;
//! `fromHostInterface` must name an inspected NIC.

use std::collections::BTreeSet;

use capstan_model::capm3::Metal3MachineSpec;
use capstan_model::kubeadm::KubeadmConfigSpec;
use capstan_model::path::FieldPath;
use serde_json::Value;

use super::Ctx;
use super::kube_vip;
use crate::catalogue::id;
use crate::diagnostic::{Diagnostic, Location};
use crate::index::{Entry, KCP_CONFIG_PATH, KCT_CONFIG_PATH, View};

/// What the commands of one config do with interfaces.
#[derive(Debug, Default, PartialEq, Eq)]
struct CommandInterfaces {
    /// Interfaces used: (name, index of the command in its list).
    used: Vec<String>,
    /// Interfaces the commands create.
    created: Vec<String>,
}

/// Virtual interface types that `nmcli ... type T ... ifname X` creates.
const CREATED_TYPES: &[&str] = &[
    "bond",
    "vlan",
    "bridge",
    "team",
    "dummy",
    "macvlan",
    "vxlan",
    "veth",
    "tun",
    "ip-tunnel",
    "wireguard",
];

fn plausible_interface(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && !matches!(name, "lo" | "all" | "any" | "up" | "down")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '@'))
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
}

/// The interfaces a shell command uses and creates. Only simple, literal forms are understood;
/// anything with shell expansion is ignored.
fn command_interfaces(command: &str) -> CommandInterfaces {
    let mut found = CommandInterfaces::default();
    let separators = [';', '&', '|', '(', ')', '`', '\n'];
    for segment in command.split(separators) {
        let tokens: Vec<String> = segment
            .split_whitespace()
            .map(|t| t.trim_matches(|c| c == '"' || c == '\'').to_owned())
            .collect();
        // Skip a leading `sudo` or `if`/`then` and the like.
        let start = tokens
            .iter()
            .position(|t| {
                !matches!(
                    t.as_str(),
                    "sudo" | "if" | "then" | "else" | "do" | "!" | "exec"
                )
            })
            .unwrap_or(tokens.len());
        let tokens = &tokens[start..];
        let Some(program) = tokens.first() else {
            continue;
        };
        let program = program.rsplit('/').next().unwrap_or(program);
        let args = &tokens[1..];
        let mut used = Vec::new();
        let mut created = Vec::new();
        match program {
            "ip" => ip_command(args, &mut used, &mut created),
            "nmcli" => nmcli_command(args, &mut used, &mut created),
            "dhclient" | "ifup" | "ifdown" | "ethtool" => {
                used.extend(args.iter().filter(|a| !a.starts_with('-')).cloned());
            }
            _ => {}
        }
        let keep = |n: &String| !n.contains('$') && plausible_interface(n);
        found.used.extend(used.into_iter().filter(keep));
        found.created.extend(created.into_iter().filter(keep));
    }
    found
}

fn ip_command(args: &[String], used: &mut Vec<String>, created: &mut Vec<String>) {
    let args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    match args.as_slice() {
        ["link" | "l", "add", rest @ ..] => {
            let mut i = 0;
            let mut named = false;
            while i < rest.len() {
                match rest[i] {
                    "link" => {
                        if let Some(parent) = rest.get(i + 1) {
                            used.push((*parent).to_owned());
                        }
                        i += 2;
                    }
                    "name" | "dev" => {
                        if let Some(name) = rest.get(i + 1) {
                            created.push((*name).to_owned());
                            named = true;
                        }
                        i += 2;
                    }
                    "type" => break,
                    other if !named => {
                        created.push(other.to_owned());
                        named = true;
                        i += 1;
                    }
                    _ => i += 1,
                }
            }
        }
        ["link" | "l", "set", rest @ ..] => {
            let name = match rest {
                ["dev", name, ..] => Some(*name),
                [name, ..] => Some(*name),
                [] => None,
            };
            used.extend(name.map(str::to_owned));
            used.extend(after_keyword(rest, "master"));
        }
        [_, rest @ ..] => {
            used.extend(after_keyword(rest, "dev"));
            // `ip link show ens2`, `ip addr show ens2`.
            if let ["show" | "list", name, ..] = rest
                && *name != "dev"
            {
                used.push((*name).to_owned());
            }
        }
        [] => {}
    }
}

fn nmcli_command(args: &[String], used: &mut Vec<String>, created: &mut Vec<String>) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kind = after_keyword(&args, "type")
        .into_iter()
        .next()
        .or_else(|| after_keyword(&args, "connection.type").into_iter().next());
    let creates = kind.as_deref().is_some_and(|k| CREATED_TYPES.contains(&k));
    for name in after_keyword(&args, "ifname")
        .into_iter()
        .chain(after_keyword(&args, "connection.interface-name"))
    {
        if creates {
            created.push(name);
        } else {
            used.push(name);
        }
    }
    if kind.as_deref() == Some("vlan") {
        used.extend(after_keyword(&args, "dev"));
    }
    used.extend(after_keyword(&args, "vlan.parent"));
}

fn after_keyword(args: &[&str], keyword: &str) -> Vec<String> {
    args.windows(2)
        .filter(|w| w[0] == keyword)
        .map(|w| w[1].to_owned())
        .collect()
}

/// A host's interface names: inspected NICs, plus names its networkData defines. `None` without
/// inspection data.
fn host_interfaces(
    ctx: &Ctx<'_, '_>,
    host: &Entry<'_>,
    with_network_data: bool,
) -> Option<BTreeSet<String>> {
    let View::Host(bmh) = &host.view else {
        return None;
    };
    let nics = &bmh.status.as_ref()?.hardware.as_ref()?.nics;
    if nics.is_empty() {
        return None;
    }
    let mut names: BTreeSet<String> = nics.iter().filter_map(|n| n.name.clone()).collect();
    if with_network_data {
        for network in ctx.networks {
            if network.host == host.pos {
                names.extend(network.interface_names());
            }
        }
    }
    Some(names)
}

/// One interface name to check, and where it was written.
struct Wanted {
    name: String,
    what: String,
    location: Location,
}

/// Reports every wanted name that some targeted, inspected host lacks.
fn check_hosts(
    ctx: &Ctx<'_, '_>,
    hosts: &[&Entry<'_>],
    wanted: &[Wanted],
    created: &BTreeSet<String>,
    with_network_data: bool,
    out: &mut Vec<Diagnostic>,
) {
    let inspected: Vec<(&Entry<'_>, BTreeSet<String>)> = hosts
        .iter()
        .filter_map(|h| Some((*h, host_interfaces(ctx, h, with_network_data)?)))
        .collect();
    for want in wanted {
        if created.contains(&want.name) {
            continue;
        }
        let missing: Vec<&(&Entry<'_>, BTreeSet<String>)> = inspected
            .iter()
            .filter(|(_, names)| !names.contains(&want.name))
            .collect();
        let Some((first, first_names)) = missing.first() else {
            continue;
        };
        let others = match missing.len() {
            1 => String::new(),
            n => format!(" (nor do {} other targeted hosts)", n - 1),
        };
        let mut d = Diagnostic::new(
            id::UNKNOWN_INTERFACE,
            format!(
                "{} `{}` is not an interface of {}{others}",
                want.what, want.name, first.id
            ),
            want.location.clone(),
        )
        .why("interface names differ between machines; a name the host lacks leaves the VIP unannounced or the node without its address")
        .hint(format!(
            "the host has: {}",
            first_names.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
        for (host, _) in missing.iter().take(3) {
            d = d.related(
                format!("inspected NICs of {}", host.id),
                host.at(&FieldPath::parse("status.hardware.nics")),
            );
        }
        out.push(d);
    }
}

/// The names a config's commands use and create, with where they are used.
fn config_interfaces(
    entry: &Entry<'_>,
    config: &KubeadmConfigSpec,
    config_path: &FieldPath,
) -> (Vec<Wanted>, BTreeSet<String>) {
    let mut wanted = Vec::new();
    let mut created = BTreeSet::new();
    let lists = [
        ("preKubeadmCommands", &config.pre_kubeadm_commands),
        ("postKubeadmCommands", &config.post_kubeadm_commands),
        ("bootCommands", &config.boot_commands),
    ];
    for (list, commands) in lists {
        for (i, command) in commands.iter().enumerate() {
            let found = command_interfaces(command);
            created.extend(found.created);
            for name in found.used {
                wanted.push(Wanted {
                    name,
                    what: "the command's interface".to_owned(),
                    location: entry.at(&config_path.key(list).index(i)),
                });
            }
        }
    }
    (wanted, created)
}

/// The hosts the Metal3MachineTemplate named by `reference` can claim.
fn template_hosts<'i, 'a>(
    ctx: &'i Ctx<'i, 'a>,
    template: Option<(&'i Entry<'a>, &'i Metal3MachineSpec)>,
) -> Vec<&'i Entry<'a>> {
    template
        .map(|(t, spec)| ctx.index.hosts_for(t, spec))
        .unwrap_or_default()
}

/// Runs the interface rules.
pub(crate) fn check(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    let kcp_path = FieldPath::parse(KCP_CONFIG_PATH);
    for (entry, kcp) in ctx.index.control_planes() {
        let hosts = template_hosts(
            ctx,
            ctx.index
                .machine_template(&kcp.infrastructure_ref, entry.namespace()),
        );
        if hosts.is_empty() {
            continue;
        }
        let (mut wanted, created) = config_interfaces(entry, &kcp.config, &kcp_path);
        for kube_vip in kube_vip::find(entry, &kcp.config, &kcp_path) {
            if let Some(var) = kube_vip.var("vip_interface")
                && let Some(name) = var.value.clone().filter(|v| plausible_interface(v))
            {
                wanted.push(Wanted {
                    name,
                    what: "kube-vip `vip_interface`".to_owned(),
                    location: kube_vip.doc.at(&var.path.key("value")),
                });
            }
        }
        check_hosts(ctx, &hosts, &wanted, &created, true, out);
    }
    let kct_path = FieldPath::parse(KCT_CONFIG_PATH);
    for entry in &ctx.index.entries {
        let View::ConfigTemplate(config) = &entry.view else {
            continue;
        };
        let mut hosts: Vec<&Entry<'_>> = Vec::new();
        for (md, view) in ctx.index.deployments() {
            let uses = view
                .bootstrap_ref
                .as_ref()
                .and_then(|r| ctx.index.resolve(r, md.namespace()))
                .is_some_and(|t| t.pos == entry.pos);
            if uses {
                hosts.extend(template_hosts(
                    ctx,
                    ctx.index
                        .machine_template(&view.infrastructure_ref, md.namespace()),
                ));
            }
        }
        if hosts.is_empty() {
            continue;
        }
        let (wanted, created) = config_interfaces(entry, config, &kct_path);
        check_hosts(ctx, &hosts, &wanted, &created, true, out);
    }
    data_templates(ctx, out);
}

/// `fromHostInterface` names in Metal3DataTemplates, against the hosts of the templates using them.
fn data_templates(ctx: &Ctx<'_, '_>, out: &mut Vec<Diagnostic>) {
    for entry in &ctx.index.entries {
        let View::DataTemplate(_) = &entry.view else {
            continue;
        };
        let mut hosts: Vec<&Entry<'_>> = Vec::new();
        for (template, spec) in ctx.index.machine_templates() {
            let uses =
                spec.data_template.as_ref().and_then(|r| r.name.as_deref()) == Some(entry.name());
            if uses && crate::index::same_namespace(template.namespace(), entry.namespace()) {
                hosts.extend(ctx.index.hosts_for(template, spec));
            }
        }
        if hosts.is_empty() {
            continue;
        }
        let mut wanted = Vec::new();
        let links = FieldPath::parse("spec.networkData.links");
        for list in ["ethernets", "bonds", "vlans"] {
            let path = links.key(list);
            let items = path.lookup(&entry.obj.value).and_then(Value::as_array);
            for (i, item) in items.into_iter().flatten().enumerate() {
                if let Some(name) = item
                    .pointer("/macAddress/fromHostInterface")
                    .and_then(Value::as_str)
                {
                    wanted.push(Wanted {
                        name: name.to_owned(),
                        what: "`fromHostInterface`".to_owned(),
                        location: entry
                            .at(&path.index(i).key("macAddress").key("fromHostInterface")),
                    });
                }
            }
        }
        let meta = FieldPath::parse("spec.metaData.fromHostInterfaces");
        let items = meta.lookup(&entry.obj.value).and_then(Value::as_array);
        for (i, item) in items.into_iter().flatten().enumerate() {
            if let Some(name) = item.get("interface").and_then(Value::as_str) {
                wanted.push(Wanted {
                    name: name.to_owned(),
                    what: "`fromHostInterfaces` interface".to_owned(),
                    location: entry.at(&meta.index(i).key("interface")),
                });
            }
        }
        check_hosts(ctx, &hosts, &wanted, &BTreeSet::new(), false, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{BASE, has_rule, lint_text};

    fn used(command: &str) -> Vec<String> {
        command_interfaces(command).used
    }

    #[test]
    fn commands_name_interfaces() {
        assert_eq!(used("ip link set dev ens3 up"), vec!["ens3"]);
        assert_eq!(used("ip link set ens3 up"), vec!["ens3"]);
        assert_eq!(used("sudo ip addr add 10.0.0.2/24 dev eno1"), vec!["eno1"]);
        assert_eq!(used("dhclient enp2s0"), vec!["enp2s0"]);
        assert_eq!(
            used("nmcli con add type ethernet con-name x ifname ens3 ipv4.method manual"),
            vec!["ens3"]
        );
        let vlan =
            command_interfaces("nmcli con add type vlan ifname bond0.2000 dev bond0 id 2000");
        assert_eq!(vlan.created, vec!["bond0.2000"]);
        assert_eq!(vlan.used, vec!["bond0"]);
        let bond = command_interfaces(
            "nmcli connection add type bond ifname bond0 bond.options mode=802.3ad",
        );
        assert_eq!(bond.created, vec!["bond0"]);
        let add = command_interfaces("ip link add link ens2 name ens2.100 type vlan id 100");
        assert_eq!(
            (add.used, add.created),
            (vec!["ens2".to_owned()], vec!["ens2.100".to_owned()])
        );
        assert!(used("ip link set dev $IFACE up").is_empty());
        assert!(used("echo dev ens3").is_empty());
        assert!(used("systemctl restart kubelet && ip route").is_empty());
        assert_eq!(used("if ip link show ens3; then true; fi"), vec!["ens3"]);
    }

    #[test]
    fn vip_interface_must_exist_on_control_plane_hosts() {
        let bad = BASE.replacen("value: ens2", "value: ens3", 1);
        assert_ne!(bad, BASE);
        let report = lint_text(&bad);
        let d = report
            .diagnostics
            .iter()
            .find(|d| d.rule == id::UNKNOWN_INTERFACE)
            .expect("finding");
        assert!(d.message.contains("ens3"), "{}", d.message);
        assert!(d.message.contains("nor do 2 other"), "{}", d.message);
        assert!(!has_rule(&lint_text(BASE), id::UNKNOWN_INTERFACE));
    }

    #[test]
    fn command_interfaces_must_exist_on_worker_hosts() {
        let bad = BASE.replacen("    - echo worker\n", "    - ip link set dev ens3 up\n", 1);
        assert_ne!(bad, BASE);
        assert!(has_rule(&lint_text(&bad), id::UNKNOWN_INTERFACE));
        let ok = BASE.replacen("    - echo worker\n", "    - ip link set dev ens2 up\n", 1);
        assert!(!has_rule(&lint_text(&ok), id::UNKNOWN_INTERFACE));
    }

    #[test]
    fn data_template_interfaces_must_be_inspected_nics() {
        const DATA_TEMPLATE: &str = "---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3DataTemplate
metadata:
  name: cp-data
  namespace: default
spec:
  clusterName: capi-1
  networkData:
    links:
      ethernets:
      - type: phy
        id: ens2
        macAddress:
          fromHostInterface: eth0
";
        let with_template = BASE.replacen(
            "      image:\n        url: http://netboot.example/fedora-43-ext4-k8s.raw\n        checksum: 9f86",
            "      dataTemplate:\n        name: cp-data\n      image:\n        url: http://netboot.example/fedora-43-ext4-k8s.raw\n        checksum: 9f86",
            1,
        );
        assert_ne!(with_template, BASE);
        let bad = format!("{with_template}{DATA_TEMPLATE}");
        let report = lint_text(&bad);
        let d = report
            .diagnostics
            .iter()
            .find(|d| d.rule == id::UNKNOWN_INTERFACE)
            .expect("finding");
        assert!(d.message.contains("eth0"), "{}", d.message);
        assert_eq!(
            d.location.path,
            "spec.networkData.links.ethernets[0].macAddress.fromHostInterface"
        );
        let ok = bad.replace("fromHostInterface: eth0", "fromHostInterface: ens2");
        let report = lint_text(&ok);
        assert!(
            report.diagnostics.is_empty(),
            "{}",
            report.render_human(false)
        );
    }
}
