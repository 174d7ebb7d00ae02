//! Whole fixture sets: a clean capi-1, capi-1 with the pitfalls met while bringing it up (with the
//! hosts from a `kubectl get -o yaml` dump), and a CAPM3 clusterctl-style cluster.

use std::path::Path;

use capstan_lint::{LintOptions, Report, lint, rule_id as id};
use capstan_manifest::{LoadedObject, load_path};

fn load(names: &[&str]) -> Vec<LoadedObject> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    names
        .iter()
        .flat_map(|name| load_path(&dir.join(name)).expect("fixture loads"))
        .collect()
}

fn run(names: &[&str], partial: bool) -> Report {
    lint(
        load(names),
        &LintOptions {
            partial,
            schemas: None,
        },
    )
}

fn rules(report: &Report) -> Vec<&'static str> {
    let mut rules: Vec<&str> = report.diagnostics.iter().map(|d| d.rule).collect();
    rules.sort_unstable();
    rules
}

#[test]
fn clean_capi_1_has_no_findings() {
    let report = run(&["capi-1-good.yaml"], false);
    assert!(
        report.diagnostics.is_empty(),
        "{}",
        report.render_human(false)
    );
}

#[test]
fn seed_pitfalls_are_found() {
    let report = run(&["seed-capi-1.yaml", "bmh-dump.yaml"], false);
    let mut expected = vec![
        id::CILIUM_K8S_SERVICE_HOST,
        id::CILIUM_NATIVE_ROUTING_CIDR,
        id::KUBE_PROXY_NOT_SKIPPED,
        id::KUBE_VIP_SUPER_ADMIN,
        id::KUBE_VIP_VIP_ADDRESS,
        id::POD_CIDR_MISMATCH,
        id::UNKNOWN_INTERFACE,
        id::UNKNOWN_INTERFACE,
    ];
    expected.sort_unstable();
    assert_eq!(rules(&report), expected, "{}", report.render_human(false));

    // Findings inside the kube-vip manifest point at their line in the block scalar.
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed-capi-1.yaml"),
    )
    .expect("fixture");
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).expect("line") + 1;
    let vip = report
        .diagnostics
        .iter()
        .find(|d| d.rule == id::KUBE_VIP_VIP_ADDRESS)
        .expect("vip_address");
    assert_eq!(vip.location.line as usize, line_of("- name: vip_address"));
    assert_eq!(
        vip.hint.as_deref(),
        Some("set `address: 10.250.250.29` and `vip_subnet: \"32\"` instead")
    );
    let interface = report
        .diagnostics
        .iter()
        .find(|d| d.rule == id::UNKNOWN_INTERFACE && d.location.embedded_path.is_some())
        .expect("vip_interface");
    assert_eq!(interface.location.line as usize, line_of("value: ens3"));
    assert!(
        interface
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("ens2"))
    );
    assert_eq!(interface.related.len(), 3);
    assert!(
        interface.related[0]
            .location
            .file
            .ends_with("bmh-dump.yaml")
    );

    let human = report.render_human(false);
    assert!(human.contains("error[kube-vip-vip-address]: kube-vip uses `vip_address`, which kube-vip resolves as a hostname\n"));
    assert!(human.contains("lookup 10.250.250.29/32: no such host"));
    assert!(
        human.ends_with("capstan lint: 7 errors, 1 warning, 0 notes\n"),
        "{human}"
    );
    // kube-proxy-not-skipped is a warning by catalogue, so count by severity.
    assert_eq!(report.error_count() + report.warning_count(), 8);
}

#[test]
fn seed_without_hosts_is_partial() {
    let report = run(&["seed-capi-1.yaml"], true);
    assert!(!rules(&report).contains(&id::UNKNOWN_INTERFACE));
    assert!(report.has_errors());
    // Linted as the whole set, the missing hosts are a capacity problem.
    let whole = run(&["seed-capi-1.yaml"], false);
    assert!(
        rules(&whole).contains(&id::NOT_ENOUGH_HOSTS),
        "{}",
        whole.render_human(false)
    );
}

#[test]
fn host_dump_alone_is_clean() {
    let report = run(&["bmh-dump.yaml"], false);
    assert!(
        report.diagnostics.is_empty(),
        "{}",
        report.render_human(false)
    );
}

#[test]
fn capm3_template_has_no_errors() {
    let report = run(&["capm3-template.yaml"], false);
    assert!(!report.has_errors(), "{}", report.render_human(false));
    assert!(
        report.diagnostics.is_empty(),
        "{}",
        report.render_human(false)
    );
}

#[test]
fn json_output_is_complete() {
    let report = run(&["seed-capi-1.yaml", "bmh-dump.yaml"], false);
    let json = report.to_json();
    assert_eq!(json["schema"], capstan_lint::JSON_SCHEMA);
    let diagnostics = json["diagnostics"].as_array().expect("array");
    assert_eq!(diagnostics.len(), report.diagnostics.len());
    for d in diagnostics {
        for key in [
            "rule", "severity", "message", "why", "hint", "location", "related",
        ] {
            assert!(d.get(key).is_some(), "{key} missing in {d}");
        }
        assert!(d["location"]["file"].is_string());
        assert!(d["location"]["line"].as_u64().is_some_and(|l| l > 0));
        assert!(capstan_lint::explain(d["rule"].as_str().expect("rule")).is_some());
    }
}

/// The upstream CRDs, when this checkout sits next to them (as in CI); `None` otherwise.
fn reference_crds() -> Option<capstan_schema::CrdSet> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/crds");
    dir.is_dir()
        .then(|| capstan_schema::CrdSet::load_dir(&dir).expect("reference CRDs load"))
}

#[test]
fn fixtures_match_the_upstream_schemas() {
    let Some(schemas) = reference_crds() else {
        return;
    };
    let options = LintOptions {
        partial: false,
        schemas: Some(schemas),
    };
    for names in [
        &["capi-1-good.yaml"][..],
        &["capm3-template.yaml"],
        &["bmh-dump.yaml"],
    ] {
        let report = lint(load(names), &options);
        assert!(
            report.diagnostics.is_empty(),
            "{names:?}:\n{}",
            report.render_human(false)
        );
    }
    // A schema violation is reported at its field.
    let bad = load(&["capm3-template.yaml"])
        .into_iter()
        .map(|mut o| {
            if o.value["kind"] == "Metal3MachineTemplate" {
                o.value["spec"]["template"]["spec"]["automatedCleaningMode"] = "sometimes".into();
            }
            o
        })
        .collect();
    let report = lint(bad, &options);
    assert!(
        report
            .diagnostics
            .iter()
            .any(|d| d.rule == id::SCHEMA_VIOLATION
                && d.location.path == "spec.template.spec.automatedCleaningMode"),
        "{}",
        report.render_human(false)
    );
}
