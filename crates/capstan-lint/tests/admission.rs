//! What `capstan serve` refuses at admission, lint reports as an error at `file:line` naming the
//! field: a value its schema of the kind refuses (a `bootMACAddress` that is no MAC address) and a
//! field the kind does not have (`spec.bootMACAdress`), which `kubectl apply` and `capstan apply`
//! send with strict field validation and the server refuses.

mod support;

use capstan_lint::{Diagnostic, Report, Severity};
use support::{line_of, lint_file};

const HOST: &str = "\
apiVersion: v1
kind: Secret
metadata:
  name: h0-bmc
  namespace: default
stringData:
  username: admin
  password: secret
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: h0
  namespace: default
spec:
  online: true
  bootMACAddress: 52:54:00:aa:00:01
  bmc:
    address: redfish-virtualmedia+http://192.168.122.1:8000/redfish/v1/Systems/h0
    credentialsName: h0-bmc
";

fn lint_text(text: &str) -> Report {
    lint_file("hosts.yaml", text)
}

fn errors(report: &Report) -> Vec<&Diagnostic> {
    report
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect()
}

#[test]
fn a_well_formed_host_has_no_errors() {
    let report = lint_text(HOST);
    assert!(errors(&report).is_empty(), "{}", report.render_human(false));
}

#[test]
fn a_malformed_boot_mac_address_is_an_error_at_its_line() {
    for mac in [
        "52:54:00:zz:00:01",
        "52:54:00:00:01",
        "52-54-00-aa-00-01",
        "\"\"",
    ] {
        let text = HOST.replace("52:54:00:aa:00:01", mac);
        let report = lint_text(&text);
        let found = errors(&report);
        assert_eq!(found.len(), 1, "{mac}: {}", report.render_human(false));
        let d = found[0];
        assert_eq!(d.location.file, "hosts.yaml");
        assert_eq!(d.location.line, line_of(&text, "bootMACAddress:"), "{mac}");
        assert_eq!(d.location.path, "spec.bootMACAddress", "{mac}");
        assert!(
            d.message.contains("spec.bootMACAddress"),
            "{mac}: {}",
            d.message
        );
    }
}

#[test]
fn a_misspelt_field_is_an_error_at_its_line() {
    let text = HOST.replace("bootMACAddress:", "bootMACAdress:");
    let report = lint_text(&text);
    let found = errors(&report);
    assert_eq!(found.len(), 1, "{}", report.render_human(false));
    let d = found[0];
    assert_eq!(d.rule, capstan_lint::rule_id::UNKNOWN_FIELD);
    assert_eq!(d.location.line, line_of(&text, "bootMACAdress:"));
    assert_eq!(d.location.path, "spec.bootMACAdress");
    assert!(d.message.contains("spec.bootMACAdress"), "{}", d.message);
    assert!(
        d.hint
            .as_deref()
            .is_some_and(|h| h.contains("bootMACAddress")),
        "the hint names the field the kind has: {:?}",
        d.hint
    );
}
