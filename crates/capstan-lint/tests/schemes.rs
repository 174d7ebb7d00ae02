//! BMC address and image URL schemes capstan cannot use are errors at `file:line`, with what to use
//! instead, and lint judges BMC addresses exactly as registration does (`capstan_drivers`' parser):
//! a set lint passes does not fail later at registration or provisioning for its scheme.

use std::path::Path;

use capstan_lint::{Diagnostic, Report, Severity};

mod support;

use support::{line_of, lint_file};

const RULE: &str = "unsupported-scheme";

fn fixture() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/capi-1-good.yaml"),
    )
    .expect("fixture")
}

fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in the fixture");
    text.replacen(from, to, 1)
}

fn lint_text(text: &str) -> Report {
    lint_file("set.yaml", text)
}

fn findings<'r>(report: &'r Report, rule: &str) -> Vec<&'r Diagnostic> {
    report
        .diagnostics
        .iter()
        .filter(|d| d.rule == rule)
        .collect()
}

/// Lints `text` and returns its one `unsupported-scheme` finding, failing with the report when
/// there is not exactly one.
fn one_finding(text: &str) -> Diagnostic {
    let report = lint_text(text);
    let found = findings(&report, RULE);
    assert_eq!(found.len(), 1, "{}", report.render_human(false));
    found[0].clone()
}

/// Asserts that `found` is an error on the line of `text` that holds `needle`, at field `path`.
fn assert_error_at(found: &Diagnostic, text: &str, needle: &str, path: &str) {
    assert_eq!(found.severity, Severity::Error);
    assert_eq!(found.location.line, line_of(text, needle));
    assert_eq!(found.location.path, path);
}

const FIRST_BMC: &str =
    "address: redfish-virtualmedia+http://192.168.122.1:8000/redfish/v1/Systems/capi-1-cp-0";

#[test]
fn bmc_schemes_capstan_has_no_driver_for_are_errors_naming_what_to_use() {
    for address in [
        "ipmi://10.0.0.8:623",
        "redfish-uefihttp://10.0.0.8/redfish/v1/Systems/1",
        "redfish-uefihttp+https://10.0.0.8/redfish/v1/Systems/1",
        "idrac-virtualmedia://10.0.0.8/redfish/v1/Systems/System.Embedded.1",
        "10.0.0.8",
    ] {
        let text = edit(&fixture(), FIRST_BMC, &format!("address: {address}"));
        let report = lint_text(&text);
        let found = findings(&report, RULE);
        assert_eq!(found.len(), 1, "{address}: {}", report.render_human(false));
        let d = found[0];
        assert_eq!(d.severity, Severity::Error, "{address}");
        assert_eq!(d.location.file, "set.yaml");
        assert_eq!(
            d.location.line,
            line_of(&text, &format!("address: {address}"))
        );
        assert_eq!(d.location.path, "spec.bmc.address");
        assert!(
            d.message.contains("is not supported yet")
                && d.message.contains("redfish-virtualmedia://")
                && d.message.contains("fake://"),
            "{address}: {}",
            d.message
        );
        assert!(report.has_errors());
    }
}

#[test]
fn image_urls_the_agent_cannot_download_are_errors() {
    let sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    // On a Metal3MachineTemplate (the image every host of the pool gets) …
    let text = edit(
        &fixture(),
        "        url: http://netboot.example/fedora-43-ext4-k8s.raw\n        checksum: 9f86",
        "        url: https://netboot.example/fedora-43-ext4-k8s.raw\n        checksum: 9f86",
    );
    let found = one_finding(&text);
    assert_error_at(
        &found,
        &text,
        "url: https://netboot.example",
        "spec.template.spec.image.url",
    );
    assert!(
        found.message.contains("https:// is not supported") && found.message.contains("http://"),
        "{}",
        found.message
    );
    // … its checksum file …
    let text = edit(
        &fixture(),
        "checksum: http://netboot.example/fedora-43-ext4-k8s.raw.sha256sum",
        "checksum: https://netboot.example/fedora-43-ext4-k8s.raw.sha256sum",
    );
    assert_eq!(
        one_finding(&text).location.path,
        "spec.template.spec.image.checksum"
    );
    // … and on a BareMetalHost.
    let text = edit(
        &fixture(),
        "  bootMode: UEFI\n",
        &format!(
            "  bootMode: UEFI\n  image:\n    url: https://images.example/os.raw\n    checksum: {sha}\n    checksumType: sha256\n"
        ),
    );
    assert_error_at(
        &one_finding(&text),
        &text,
        "url: https://images.example/os.raw",
        "spec.image.url",
    );
    // Plain HTTP is what the agent downloads: no finding.
    let report = lint_text(&fixture());
    assert!(
        findings(&report, RULE).is_empty(),
        "{}",
        report.render_human(false)
    );
}

#[test]
fn lint_accepts_exactly_the_bmc_addresses_registration_accepts() {
    for address in [
        "redfish-virtualmedia+http://192.168.122.1:8000/redfish/v1/Systems/capi-1-cp-0",
        "redfish-virtualmedia+https://10.0.0.8/redfish/v1/Systems/1",
        "redfish-virtualmedia://10.0.0.8/redfish/v1/Systems/1",
        "redfish://10.0.0.8",
        "redfish+http://10.0.0.8:8000",
        "fake://capi-1/capi-1-cp-0",
        "ipmi://10.0.0.8",
        "ipmi+https://10.0.0.8",
        "redfish-uefihttp://10.0.0.8",
        "ilo5-virtualmedia://10.0.0.8",
        "irmc://10.0.0.8",
        "libvirt://10.0.0.8",
        "10.0.0.8",
    ] {
        let registered = capstan_drivers::BmcAddress::parse(address).is_ok();
        let text = edit(&fixture(), FIRST_BMC, &format!("address: {address}"));
        let report = lint_text(&text);
        let refused = report
            .diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error && d.location.path == "spec.bmc.address");
        assert_eq!(
            registered,
            !refused,
            "{address}: registration {}, lint {}:\n{}",
            if registered {
                "accepts it"
            } else {
                "refuses it"
            },
            if refused { "refuses it" } else { "accepts it" },
            report.render_human(false)
        );
    }
}
