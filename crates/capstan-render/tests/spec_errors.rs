//! Bad specs: every problem is reported at once, each with `file:line`, the field path and what to
//! do; no input, however mangled, makes loading or rendering panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use capstan_render::{Bundle, RenderError, RenderOptions};
use proptest::prelude::*;

const NAME: &str = "examples/capi-1.yaml";

fn example_text(name: &str) -> String {
    std::fs::read_to_string(common::examples_dir().join(name)).unwrap()
}

/// 1-based line of the first line containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in text"))
        + 1
}

fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in text");
    text.replacen(from, to, 1)
}

fn render_text(name: &str, text: &str) -> Result<Bundle, RenderError> {
    let spec = capstan_render::parse_spec(name, text)?;
    capstan_render::render(&spec, &common::examples_dir(), &RenderOptions::default())
}

fn error_of(name: &str, text: &str) -> String {
    match render_text(name, text) {
        Ok(_) => panic!("rendered although it should not have"),
        Err(err) => err.to_string(),
    }
}

fn assert_has(message: &str, expected: &str) {
    assert!(
        message.contains(expected),
        "expected {expected:?} in:\n{message}"
    );
}

#[test]
fn unknown_field() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "    disableCertificateVerification: true\n",
        "    disableCertificateVerification: true\n    disableCertVerification: true\n",
    );
    let line = line_of(&text, "disableCertVerification:");
    let message = error_of(NAME, &text);
    assert_has(&message, &format!("{NAME}:{line}: hostDefaults.bmc"));
    assert_has(&message, "unknown field `disableCertVerification`");
    assert_has(&message, "docs/spec.md");
}

#[test]
fn wrong_type() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "replicas: 3",
        "replicas: three",
    );
    let line = line_of(&text, "replicas: three");
    let message = error_of(NAME, &text);
    assert_has(
        &message,
        &format!("{NAME}:{line}: controlPlane.replicas: invalid type: string \"three\""),
    );
}

#[test]
fn undefined_bond_member() {
    let name = "examples/super.yaml";
    let text = edit(
        &example_text("super.yaml"),
        "links: [enp1s0f0, enp1s0f1]",
        "links: [enp1s0f0, ens9]",
    );
    let line = line_of(&text, "links: [enp1s0f0, ens9]");
    let message = error_of(name, &text);
    assert_has(
        &message,
        &format!(
            "{name}:{line}: hosts[0].network.bonds[0].links[1]: link \"ens9\" is not defined in hosts[0].network.links"
        ),
    );
}

#[test]
fn undefined_vlan_parent_and_bond_naming() {
    let name = "examples/super.yaml";
    let text = edit(
        &example_text("super.yaml"),
        "{id: 2000, link: bond0, mtu: 9000}",
        "{id: 2000, link: bond1, mtu: 9000}",
    );
    let message = error_of(name, &text);
    assert_has(
        &message,
        "hosts[0].network.vlans[0].link: \"bond1\" is not defined",
    );
    let text = edit(
        &example_text("super.yaml"),
        "        - name: bond0",
        "        - name: uplink",
    );
    let message = error_of(name, &text);
    assert_has(
        &message,
        "hosts[0].network.bonds[0].name: cloud-init names the bonds",
    );
    assert_has(&message, "name it \"bond0\"");
}

#[test]
fn gateway_outside_the_subnet() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "cidr: 10.250.250.21/24, gateway: 10.250.250.1",
        "cidr: 10.250.250.21/24, gateway: 10.250.251.1",
    );
    let line = line_of(&text, "10.250.251.1");
    let message = error_of(NAME, &text);
    assert_has(
        &message,
        &format!(
            "{NAME}:{line}: hosts[1].network.addresses[0].gateway: the gateway 10.250.251.1 is outside the subnet 10.250.250.0/24"
        ),
    );
}

#[test]
fn address_not_inside_its_prefix() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "cidr: 10.250.250.21/24",
        "cidr: 10.250.250.0/24",
    );
    let message = error_of(NAME, &text);
    assert_has(
        &message,
        "hosts[1].network.addresses[0].cidr: 10.250.250.0 is the network address of 10.250.250.0/24",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "cidr: 10.250.250.21/24",
        "cidr: 10.250.250.255/24",
    );
    assert_has(&error_of(NAME, &text), "is the broadcast address");
    let text = edit(
        &example_text("capi-1.yaml"),
        "cidr: 10.250.250.21/24",
        "cidr: 10.250.250.21",
    );
    assert_has(
        &error_of(NAME, &text),
        "is not an address with prefix length",
    );
}

#[test]
fn duplicate_ip_mac_and_name() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "cidr: 10.250.250.21/24",
        "cidr: 10.250.250.20/24",
    );
    let message = error_of(NAME, &text);
    assert_has(
        &message,
        "hosts[1].network.addresses: address 10.250.250.20 is already used by hosts[0] (capi-1-cp-0)",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "52:54:00:6c:3c:11",
        "52:54:00:6C:3C:10",
    );
    assert_has(
        &error_of(NAME, &text),
        "MAC address 52:54:00:6c:3c:10 is already used by hosts[0]",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "name: capi-1-cp-1",
        "name: capi-1-cp-0",
    );
    assert_has(
        &error_of(NAME, &text),
        "hosts[1].name: host name \"capi-1-cp-0\" is already used by hosts[0]",
    );
}

#[test]
fn bad_checksum_length() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "checksum: 5f4dcc3b5aa765d61d8327deb882cf99d8b2b1c09b7e2b8a5b0ef9c8e6ad4c1f",
        "checksum: 5f4dcc3b5aa765d61d8327deb882cf99",
    );
    let line = line_of(&text, "checksum: 5f4dcc");
    let message = error_of(NAME, &text);
    assert_has(
        &message,
        &format!(
            "{NAME}:{line}: image.checksum: a sha256 checksum has 64 hex digits, this one has 32"
        ),
    );
}

#[test]
fn bad_bmc_scheme() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "address: redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/8b2d",
        "address: vmware+http://127.0.0.1:8000/redfish/v1/Systems/8b2d",
    );
    let line = line_of(&text, "vmware+http");
    let message = error_of(NAME, &text);
    assert_has(
        &message,
        &format!(
            "{NAME}:{line}: hosts[1].bmc.address: vmware+http:// is not a BMC address scheme; use redfish-virtualmedia://"
        ),
    );
}

#[test]
fn bmc_schemes_capstan_has_no_driver_for_are_refused_with_what_to_use() {
    for scheme in ["ipmi", "redfish-uefihttp", "idrac-virtualmedia"] {
        let text = edit(
            &example_text("capi-1.yaml"),
            "address: redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/8b2d",
            &format!("address: {scheme}://127.0.0.1:8000/redfish/v1/Systems/8b2d"),
        );
        let line = line_of(&text, &format!("{scheme}://"));
        let message = error_of(NAME, &text);
        assert_has(
            &message,
            &format!(
                "{NAME}:{line}: hosts[1].bmc.address: {scheme}:// is not supported yet; use redfish-virtualmedia:// (Redfish virtual media)"
            ),
        );
        assert_has(&message, "or fake:// for a simulated BMC");
    }
    // A bare host is IPMI to Metal3.
    let text = edit(
        &example_text("capi-1.yaml"),
        "address: redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/8b2d",
        "address: 10.0.0.8",
    );
    let message = error_of(NAME, &text);
    assert_has(
        &message,
        "hosts[1].bmc.address: an address without a scheme is IPMI",
    );
}

#[test]
fn bmc_schemes_capstan_drives_are_rendered() {
    for address in [
        "redfish-virtualmedia+https://10.0.0.8/redfish/v1/Systems/8b2d",
        "redfish-virtualmedia://10.0.0.8/redfish/v1/Systems/8b2d",
        "redfish+http://10.0.0.8:8000/redfish/v1/Systems/8b2d",
        "redfish://10.0.0.8",
        "fake://capi-1/capi-1-cp-1",
    ] {
        let text = edit(
            &example_text("capi-1.yaml"),
            "address: redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/8b2d",
            &format!("address: {address}"),
        );
        if let Err(err) = render_text(NAME, &text) {
            panic!("{address}: {err}");
        }
    }
}

#[test]
fn image_urls_the_agent_cannot_download_are_refused() {
    let original = "url: http://netboot.example.com/images/fedora-43-ext4-k8s.raw";
    for (url, expected) in [
        (
            "https://netboot.example.com/images/fedora-43-ext4-k8s.raw",
            "image.url: https:// is not supported: the agent in capstan's ramdisk downloads over plain http://",
        ),
        (
            "ftp://netboot.example.com/images/fedora-43-ext4-k8s.raw",
            "image.url: ftp:// is not supported",
        ),
    ] {
        let text = edit(
            &example_text("capi-1.yaml"),
            original,
            &format!("url: {url}"),
        );
        let line = line_of(&text, url);
        let message = error_of(NAME, &text);
        assert_has(&message, &format!("{NAME}:{line}: {expected}"));
        assert_has(&message, "serve the image over http://");
    }
    // A checksum file is downloaded the same way.
    let text = edit(
        &example_text("capi-1.yaml"),
        "checksum: 5f4dcc3b5aa765d61d8327deb882cf99d8b2b1c09b7e2b8a5b0ef9c8e6ad4c1f",
        "checksum: https://netboot.example.com/images/SHA256SUMS",
    );
    let line = line_of(&text, "checksum: https://");
    let message = error_of(NAME, &text);
    assert_has(
        &message,
        &format!("{NAME}:{line}: image.checksum: https:// is not supported"),
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut text = example_text("capi-1.yaml");
    text = edit(&text, "cidr: 10.250.250.21/24", "cidr: 10.250.250.20/24");
    text = edit(
        &text,
        "address: redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/c41e",
        "address: nope://x/c41e",
    );
    text = edit(&text, "version: v1.31.4", "version: v1.31");
    text = edit(&text, "localAsn: 65010", "localAsn: 4294967296");
    let err = render_text(NAME, &text).unwrap_err();
    let message = err.to_string();
    assert_eq!(err.problems().len(), 4, "{message}");
    assert_has(&message, "the spec has 4 problems:");
    assert_has(
        &message,
        "kubernetes.version: \"v1.31\" is not a Kubernetes version",
    );
    assert_has(
        &message,
        "bgp.localAsn: AS 4294967296 is larger than 4294967295",
    );
    assert_has(&message, "hosts[2].bmc.address");
    assert_has(&message, "address 10.250.250.20 is already used");
}

#[test]
fn replicas_against_hosts() {
    let text = edit(&example_text("capi-1.yaml"), "replicas: 3", "replicas: 5");
    assert_has(
        &error_of(NAME, &text),
        "controlPlane.replicas: 5 control-plane replicas but only 3 hosts with role control-plane",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "    replicas: 1\n",
        "    replicas: 2\n",
    );
    assert_has(
        &error_of(NAME, &text),
        "workerPools[0].replicas: 2 replicas but only 1 worker hosts in pool \"workers\"",
    );
    // An even number is allowed, with a warning.
    let text = edit(&example_text("capi-1.yaml"), "replicas: 3", "replicas: 2");
    let bundle = render_text(NAME, &text).unwrap();
    assert!(
        bundle.notices.iter().any(|n| n.contains(
            "controlPlane.replicas: 2 control-plane replicas tolerate no more failures than 1"
        )),
        "{:#?}",
        bundle.notices
    );
}

#[test]
fn vip_checks() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "vip: 10.250.250.29",
        "vip: 10.250.250.22",
    );
    assert_has(
        &error_of(NAME, &text),
        "controlPlane.vip: the VIP 10.250.250.22 is the address of hosts[2] (capi-1-cp-2)",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "vip: 10.250.250.29",
        "vip: 10.251.0.29",
    );
    let bundle = render_text(NAME, &text).unwrap();
    assert!(
        bundle
            .notices
            .iter()
            .any(|n| n.contains("the VIP 10.251.0.29 is outside every host subnet")),
        "{:#?}",
        bundle.notices
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "vip: 10.250.250.29",
        "vip: 10.250.250.29/32",
    );
    assert_has(
        &error_of(NAME, &text),
        "is not an IP address; the VIP is a bare address",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "    # interface: ens2",
        "    interface: ens3",
    );
    assert_has(
        &error_of(NAME, &text),
        "control-plane host capi-1-cp-0 has no interface \"ens3\"",
    );
}

#[test]
fn cluster_networks_must_not_overlap_hosts() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "podCidr: 10.244.0.0/16",
        "podCidr: 10.250.0.0/16",
    );
    assert_has(
        &error_of(NAME, &text),
        "the host network 10.250.250.0/24 overlaps the pod network 10.250.0.0/16",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "serviceCidr: 10.96.0.0/12",
        "serviceCidr: 10.244.128.0/20",
    );
    assert_has(
        &error_of(NAME, &text),
        "kubernetes.serviceCidr: the service network 10.244.128.0/20 overlaps the pod network",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "podCidr: 10.244.0.0/16",
        "podCidr: 10.244.1.0/16",
    );
    assert_has(
        &error_of(NAME, &text),
        "has host bits set; write the network address, 10.244.0.0/16",
    );
}

#[test]
fn bgp_asns_in_range() {
    for (asn, expected) in [("0", "AS 0 is reserved"), ("23456", "AS 23456 is reserved")] {
        let text = edit(
            &example_text("capi-1.yaml"),
            "asn: 65001",
            &format!("asn: {asn}"),
        );
        assert_has(
            &error_of(NAME, &text),
            &format!("bgp.peers[0].asn: {expected}"),
        );
    }
}

#[test]
fn passwords_from_files_and_environment() {
    let secret = "hunter2-very-secret";
    // A literal password never appears in messages, even when the spec has errors.
    let text = edit(
        &example_text("capi-1.yaml"),
        "      password: password",
        &format!("      password: {secret}"),
    );
    let text = edit(&text, "replicas: 3", "replicas: 7");
    let message = error_of(NAME, &text);
    assert!(!message.contains(secret));
    let spec = capstan_render::parse_spec(NAME, &text).unwrap();
    assert!(!format!("{spec:?}").contains(secret));

    let text = edit(
        &example_text("capi-1.yaml"),
        "      password: password",
        "      passwordEnv: CAPSTAN_TEST_SURELY_UNSET_VARIABLE",
    );
    let line = line_of(&text, "      passwordEnv: CAPSTAN");
    assert_has(
        &error_of(NAME, &text),
        &format!(
            "{NAME}:{line}: hostDefaults.bmc.credentials.passwordEnv: the environment variable CAPSTAN_TEST_SURELY_UNSET_VARIABLE is not set"
        ),
    );
    // PATH is set wherever tests run; it stands in for a password variable.
    let text = edit(
        &example_text("capi-1.yaml"),
        "      password: password",
        "      passwordEnv: PATH",
    );
    assert!(render_text(NAME, &text).is_ok());

    let text = edit(
        &example_text("capi-1.yaml"),
        "      password: password",
        "      passwordFile: no-such-file.txt",
    );
    assert_has(
        &error_of(NAME, &text),
        "hostDefaults.bmc.credentials.passwordFile: cannot read the password file",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "      password: password",
        "      password: a\n      passwordEnv: PATH",
    );
    assert_has(
        &error_of(NAME, &text),
        "give the BMC password exactly one way",
    );

    // The super example reads its password from a file next to the spec.
    let bundle = common::render_example("super.yaml", capstan_render::CapiVersion::V1beta1);
    let host = &bundle.file("hosts/super.yaml").unwrap().contents;
    assert!(host.contains("password: cGFzc3dvcmQ=\n"), "{host}");
}

#[test]
fn pools_and_roles() {
    let text = edit(
        &example_text("capi-1.yaml"),
        "    # pool: workers   # optional while there is only one pool",
        "    pool: gpu",
    );
    assert_has(
        &error_of(NAME, &text),
        "hosts[3].pool: pool \"gpu\" is not defined in workerPools (defined: workers)",
    );
    let text = edit(
        &example_text("capi-1.yaml"),
        "workerPools:\n  - name: workers\n    replicas: 1\n",
        "",
    );
    assert_has(
        &error_of(NAME, &text),
        "hosts[3].role: this host is a worker but workerPools is empty",
    );
}

#[test]
fn yaml_errors_are_unreadable_and_located() {
    let err = render_text(NAME, "name: [unclosed\n").unwrap_err();
    assert!(err.is_unreadable());
    assert_has(&err.to_string(), "examples/capi-1.yaml:");
}

fn mangle(text: &str, edits: &[(usize, u8)]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for &(position, byte) in edits {
        if bytes.is_empty() {
            break;
        }
        let i = position % bytes.len();
        match byte % 4 {
            0 => bytes[i] = byte,
            1 => {
                bytes.remove(i);
            }
            2 => bytes.insert(i, byte),
            // Swap a digit for another, which keeps the YAML valid and the values plausible.
            _ => {
                if bytes[i].is_ascii_digit() {
                    bytes[i] = b'0' + byte % 10;
                }
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_text_never_panics(text in "[a-zA-Z0-9:\\-\\[\\]{}&*!|>'\" \n#.,/%@]{0,300}") {
        let _ = render_text("fuzz.yaml", &text);
    }

    #[test]
    fn mangled_examples_never_panic(
        example in prop::sample::select(vec!["capi-1.yaml", "super.yaml"]),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let text = mangle(&example_text(example), &edits);
        if let Err(err) = render_text(example, &text) {
            // Every error renders as text.
            let _ = err.to_string();
        }
    }
}
