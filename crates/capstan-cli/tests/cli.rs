//! End-to-end tests of the `capstan` binary: the README's main job (`render` then `lint`), exit codes,
//! determinism, refusal without partial output, machine-readable output, `NO_COLOR`, closed
//! stdout and stderr, and `delete -f` of a set whose deletions cascade.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod support;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn capstan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .current_dir(repo_root())
        .env_remove("NO_COLOR")
        .output()
        .expect("run capstan")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every file below `dir`, by relative path, with its contents.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(
                    path.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    files
}

#[test]
fn render_then_lint_the_examples_is_clean_in_both_api_versions() {
    for example in ["examples/capi-1.yaml", "examples/super.yaml"] {
        for version in ["v1beta1", "v1beta2"] {
            let out = tempfile::tempdir().unwrap();
            let out_dir = out.path().join("bundle");
            let render = capstan(&[
                "render",
                example,
                "-o",
                out_dir.to_str().unwrap(),
                "--api-version",
                version,
            ]);
            assert!(
                render.status.success(),
                "{example} {version}: {}",
                text(&render.stderr)
            );
            assert!(
                !text(&render.stdout).contains("cilium install"),
                "the spec's Cilium manifest exists, so no `cilium install` hint: {}",
                text(&render.stdout)
            );
            let lint = capstan(&["lint", out_dir.to_str().unwrap(), "--color", "never"]);
            assert_eq!(
                lint.status.code(),
                Some(0),
                "{example} {version}:\n{}{}",
                text(&lint.stdout),
                text(&lint.stderr)
            );
            assert!(
                text(&lint.stdout).trim() == "capstan lint: 0 errors, 0 warnings, 0 notes",
                "no findings expected:\n{}",
                text(&lint.stdout)
            );
        }
    }
}

#[test]
fn render_is_byte_for_byte_deterministic() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    for dir in [&a, &b] {
        let out = capstan(&[
            "render",
            "examples/capi-1.yaml",
            "-o",
            dir.path().join("o").to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let (sa, sb) = (snapshot(&a.path().join("o")), snapshot(&b.path().join("o")));
    assert!(!sa.is_empty());
    assert_eq!(sa, sb);
}

#[test]
fn an_invalid_spec_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let spec = std::fs::read_to_string(repo_root().join("examples/super.yaml")).unwrap();
    // A key the spec does not know: the error must name the file, line and field.
    let broken = spec.replacen("hosts:", "hosts:\n  # typo below\nhostz: []\nhosts:", 1);
    let path = dir.path().join("broken.yaml");
    std::fs::write(&path, &broken).unwrap();
    let out_dir = dir.path().join("out");
    let out = capstan(&[
        "render",
        path.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert_ne!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(err.contains("broken.yaml"), "names the file: {err}");
    assert!(!out_dir.exists(), "nothing written on error");
}

#[test]
fn lint_exit_codes_distinguish_errors_from_unreadable_input() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.yaml");
    std::fs::write(&garbage, "apiVersion: v1\nkind: [unclosed\n").unwrap();
    let out = capstan(&["lint", garbage.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("garbage.yaml"));

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: h0\n  namespace: default\nspec:\n  online: true\n  bmc:\n    address: vmware://10.0.0.1\n    credentialsName: h0-bmc\n",
    )
    .unwrap();
    let out = capstan(&["lint", bad.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert!(report.to_string().contains("bad.yaml"));

    let missing = capstan(&["lint", "does/not/exist.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn no_color_means_no_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: h0\nspec:\n  online: true\n  bmc:\n    address: vmware://x\n    credentialsName: nope\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["lint", bad.to_str().unwrap()])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!text(&out.stdout).contains('\x1b') && !text(&out.stderr).contains('\x1b'));
    let forced = capstan(&["lint", bad.to_str().unwrap(), "--color", "always"]);
    assert!(
        text(&forced.stdout).contains('\x1b'),
        "--color always colours"
    );
}

#[test]
fn every_rule_has_an_explanation() {
    let out = capstan(&["lint", "--list-rules", "--format", "json"]);
    assert!(out.status.success());
    let rules: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rules.len() >= 25, "the catalogue has {} rules", rules.len());
    for rule in rules {
        let id = rule["id"].as_str().unwrap();
        let explain = capstan(&["lint", "--explain", id]);
        assert!(explain.status.success(), "{id}");
        assert!(text(&explain.stdout).contains("fix:"));
    }
    assert_eq!(
        capstan(&["lint", "--explain", "no-such-rule"])
            .status
            .code(),
        Some(2)
    );
}

/// The figures a `capstan bench … --json` run printed; the run must succeed.
fn bench_figures(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("bench")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn bench_image_write_reports_both_writers() {
    let figures = bench_figures(&["image-write", "--size-mib", "8"]);
    assert_eq!(figures["image_mib"], 8);
    for key in ["agent_mib_per_second", "dd_mib_per_second"] {
        assert!(figures[key].as_f64().unwrap() > 0.0, "{key}: {figures}");
    }
}

/// A few `fake://` hosts through a real `capstan serve`: the figures include what each host cost by
/// the server's own counters, and those agree with what a host costs (one BareMetalHost and three
/// Secrets created per host, the host controller woken more than once).
#[test]
fn bench_hosts_reports_the_server_counters_per_host() {
    let figures = bench_figures(&["hosts", "--count", "4", "--step-ms", "10"]);
    assert_eq!(figures["hosts"], 4);
    let counters: BTreeMap<String, f64> = figures["server_counters_per_host"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["counter"].as_str().unwrap().to_owned(),
                c["per_host"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        counters.get("create baremetalhosts"),
        Some(&1.0),
        "{counters:?}"
    );
    // The client's BMC Secret and the two the host controller writes for each host.
    assert_eq!(counters.get("create secrets"), Some(&3.0), "{counters:?}");
    assert!(
        counters
            .get("reconcile baremetalhost")
            .copied()
            .unwrap_or(0.0)
            >= 2.0,
        "{counters:?}"
    );
    // Largest first.
    let per_host: Vec<f64> = figures["server_counters_per_host"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["per_host"].as_f64().unwrap())
        .collect();
    assert!(per_host.windows(2).all(|w| w[0] >= w[1]), "{per_host:?}");
}

/// `--against` runs a baseline server and then the one under test with the same options, and
/// reports both.
#[test]
fn bench_hosts_against_a_baseline_reports_both_runs() {
    let figures = bench_figures(&[
        "hosts",
        "--count",
        "2",
        "--step-ms",
        "10",
        "--against",
        env!("CARGO_BIN_EXE_capstan"),
    ]);
    for run in ["baseline", "this"] {
        assert_eq!(figures[run]["hosts"], 2, "{figures}");
        assert!(
            figures[run]["server_cpu_seconds"].as_f64().unwrap() > 0.0,
            "{figures}"
        );
        assert!(
            !figures[run]["server_counters_per_host"]
                .as_array()
                .unwrap()
                .is_empty(),
            "{figures}"
        );
    }
}

/// Runs capstan with stdout on a pipe whose reader is already gone: every write fails with EPIPE,
/// as with `capstan … | head -1` once head has exited.
fn capstan_into_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .current_dir(repo_root())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run capstan")
}

#[test]
fn a_closed_stdout_ends_commands_quietly() {
    let out_dir = tempfile::tempdir().unwrap();
    let bundle = out_dir.path().join("b");
    let render = capstan(&[
        "render",
        "examples/capi-1.yaml",
        "-o",
        bundle.to_str().unwrap(),
    ]);
    assert!(render.status.success(), "{}", text(&render.stderr));
    for args in [
        vec!["lint", "--list-rules"],
        vec!["lint", "--explain", "unknown-field"],
        vec!["lint", bundle.to_str().unwrap()],
        vec!["crds"],
    ] {
        let out = capstan_into_closed_pipe(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            !text(&out.stderr).contains("panicked"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// Runs capstan (against `kubeconfig`, when given) with stderr open, or on a pipe whose reader is
/// already gone, as with `capstan … 2>&1 | true`: every write to it fails with EPIPE.
fn capstan_with_stderr(args: &[&str], kubeconfig: Option<&Path>, closed: bool) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_capstan"));
    command
        .args(args)
        .current_dir(repo_root())
        .env("NO_COLOR", "1")
        .env_remove("CAPSTAN_DATA_DIR")
        .env_remove("CAPSTAN_LOG");
    match kubeconfig {
        Some(path) => command.env("KUBECONFIG", path),
        None => command.env_remove("KUBECONFIG"),
    };
    if closed {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        command.stderr(writer);
    } else {
        command.stderr(Stdio::piped());
    }
    command
        .stdout(Stdio::piped())
        .output()
        .expect("run capstan")
}

#[test]
fn a_closed_stderr_changes_no_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let server = support::Serve::start_with(
        &dir.path().join("data"),
        &dir.path().join("serve.log"),
        &["--no-controllers"],
    );
    let kc = server.kubeconfig.clone();
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "hosts: [unclosed\n").unwrap();
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (open_bundle, closed_bundle) = (out("open"), out("closed"));
    // Each writes to stderr: progress and notes, refusals, errors, warnings, clap's usage error.
    let cases: Vec<(Vec<&str>, bool)> = vec![
        (
            vec![
                "render",
                "examples/capi-1.yaml",
                "-o",
                "{bundle}",
                "--fake-bmcs",
            ],
            false,
        ),
        (
            vec!["render", broken.to_str().unwrap(), "-o", "{bundle}"],
            false,
        ),
        (vec!["lint", "does/not/exist.yaml"], false),
        (vec!["delete", "bmh", "nope"], true),
        (vec!["get", "bmh", "nope"], true),
        // "No resources found." and the warning that --data-dir wins over $KUBECONFIG.
        (
            vec![
                "get",
                "bmh",
                "--data-dir",
                kc.parent().unwrap().to_str().unwrap(),
            ],
            true,
        ),
        (vec!["render", "--no-such-flag"], false),
    ];
    for (args, connects) in &cases {
        let mut codes = Vec::new();
        for closed in [false, true] {
            let bundle = if closed { &closed_bundle } else { &open_bundle };
            let args: Vec<&str> = args
                .iter()
                .map(|a| if *a == "{bundle}" { bundle.as_str() } else { a })
                .collect();
            let output = capstan_with_stderr(&args, connects.then_some(kc.as_path()), closed);
            if !closed {
                assert!(
                    !output.stderr.is_empty(),
                    "{args:?} writes nothing to stderr"
                );
            }
            codes.push(output.status.code());
        }
        assert_ne!(
            codes[1],
            Some(101),
            "{args:?}: a panic on the closed stderr"
        );
        assert_eq!(
            codes[1], codes[0],
            "{args:?}: exit code with stderr closed and open"
        );
    }
    // The logs too: at debug, the client logs every request.
    let mut command = Command::new(env!("CARGO_BIN_EXE_capstan"));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = command
        .args(["get", "bmh"])
        .env("KUBECONFIG", &kc)
        .env("CAPSTAN_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        std::fs::read_dir(&closed_bundle).map(|d| d.count()).ok(),
        std::fs::read_dir(&open_bundle).map(|d| d.count()).ok(),
        "render wrote the same with stderr closed"
    );
}

#[test]
fn delete_f_takes_objects_its_earlier_deletions_removed_as_done() {
    let dir = tempfile::tempdir().unwrap();
    // With controllers: the garbage collector deletes the dependents.
    let server =
        support::Serve::start_with(&dir.path().join("data"), &dir.path().join("serve.log"), &[]);
    let kc = server.kubeconfig.clone();
    let run = |args: &[&str]| {
        let out = capstan_with_stderr(args, Some(&kc), false);
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    // The owner keeps its `foregroundDeletion` finalizer until the collector has deleted the
    // dependents that block it, as a Cluster keeps its finalizer until its machines are gone; so
    // when `delete -f` (waiting for each deletion) comes to them, they are gone.
    let owner = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owner\n  finalizers: [foregroundDeletion]\ndata: {k: v}\n";
    let owner_file = dir.path().join("owner.yaml");
    std::fs::write(&owner_file, owner).unwrap();
    let (code, _, err) = run(&["apply", "-f", owner_file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let uid = support::get(&kc, "configmaps", "owner")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let dependent = |name: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}, blockOwnerDeletion: true}}\ndata: {{k: v}}\n"
        )
    };
    let set = format!(
        "{owner}---\n{}---\n{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: unrelated}}\n",
        dependent("dependent-a"),
        dependent("dependent-b")
    );
    let set_file = dir.path().join("set.yaml");
    std::fs::write(&set_file, &set).unwrap();
    let (code, _, err) = run(&["apply", "-f", set_file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");

    let (code, out, err) = run(&[
        "delete",
        "-f",
        set_file.to_str().unwrap(),
        "--timeout",
        "60",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("configmap/owner deleted\n"), "{out}");
    for name in ["dependent-a", "dependent-b"] {
        assert!(
            out.contains(&format!(
                "configmap/{name} already gone (removed with its configmap owner)\n"
            )),
            "{out}"
        );
    }
    assert!(out.contains("configmap/unrelated deleted\n"), "{out}");
    assert!(err.is_empty(), "{err}");

    // What was not there when the command started is still NotFound: a name, or the same set
    // again (unless --ignore-not-found).
    let (code, _, err) = run(&["delete", "configmap", "never-was"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not found"), "{err}");
    let (code, out, err) = run(&["delete", "-f", set_file.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(!out.contains("already gone"), "{out}");
    let (code, out, err) = run(&[
        "delete",
        "-f",
        set_file.to_str().unwrap(),
        "--ignore-not-found",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
}

#[test]
fn fake_bmcs_render_and_lint_clean() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b");
    let render = capstan(&[
        "render",
        "examples/capi-1.yaml",
        "-o",
        bundle.to_str().unwrap(),
        "--fake-bmcs",
    ]);
    assert!(render.status.success(), "{}", text(&render.stderr));
    let host = std::fs::read_to_string(bundle.join("hosts/capi-1-cp-0.yaml")).unwrap();
    assert!(host.contains("fake://capi-1/capi-1-cp-0"), "{host}");
    assert!(!host.contains("127.0.0.1:8000"), "{host}");
    let lint = capstan(&["lint", bundle.to_str().unwrap(), "--color", "never"]);
    assert_eq!(
        lint.status.code(),
        Some(0),
        "fake:// is capstan's own BMC, not an error:\n{}",
        text(&lint.stdout)
    );
    assert!(
        text(&lint.stdout).contains("4 hosts with capstan's simulated BMC"),
        "{}",
        text(&lint.stdout)
    );
}

#[test]
fn lint_finds_a_misspelled_field_without_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("host.yaml");
    std::fs::write(
        &file,
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: h0\nspec:\n  onlin: true\n",
    )
    .unwrap();
    let out = capstan(&[
        "lint",
        file.to_str().unwrap(),
        "--partial",
        "--color",
        "never",
    ]);
    // An error, as the API server refuses the field under strict field validation.
    assert_eq!(
        out.status.code(),
        Some(1),
        "an error: {}",
        text(&out.stdout)
    );
    let report = text(&out.stdout);
    assert!(
        report.contains("error[unknown-field]")
            && report.contains("host.yaml:6")
            && report.contains("did you mean `online`?"),
        "{report}"
    );
}

/// The KVM design's example: its `Cluster` is written under the infrastructure group. lint says
/// where, why and what to write instead.
#[test]
fn lint_explains_the_kvm_designs_cluster_in_the_infrastructure_group() {
    let fixture = "crates/capstan-cli/tests/fixtures/seed-003-kvm-example.yaml";
    let source = std::fs::read_to_string(repo_root().join(fixture)).unwrap();
    let line = source
        .lines()
        .position(|l| l == "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha4")
        .unwrap()
        + 1;
    let out = capstan(&["--color", "never", "lint", fixture]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}{}", text(&out.stderr));
    assert!(
        report.contains("error[wrong-api-group]: Cluster is not a kind of infrastructure.cluster.x-k8s.io: Cluster belongs to cluster.x-k8s.io"),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "--> {fixture}:{line} (Cluster example, apiVersion)"
        )),
        "{report}"
    );
    assert!(report.contains("KVMCluster"), "{report}");
    assert!(
        report.contains("write `apiVersion: cluster.x-k8s.io/v1beta2`"),
        "{report}"
    );
    // The Cluster API v1alpha4 objects are pointed at `capstan convert`.
    assert!(report.contains("capstan convert"), "{report}");
}

/// `render` writes the mixed example: a KVM control plane and a bare-metal worker pool, in one
/// Cluster with a KVMCluster as its infrastructure and no Metal3Cluster; a `machines: kvm` spec
/// without `kvm` is refused at its line.
#[test]
fn render_writes_a_mixed_cluster_and_refuses_vms_without_hypervisors() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("mixed");
    let out = capstan(&[
        "render",
        "examples/mixed.yaml",
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cluster = std::fs::read_to_string(out_dir.join("cluster/cluster.yaml")).unwrap();
    for wanted in [
        "kind: KVMCluster\n",
        "kind: KVMMachineTemplate\n",
        "kind: Metal3MachineTemplate\n",
        "uri: qemu+ssh://root@hv1.lab.example.com/system\n",
    ] {
        assert!(cluster.contains(wanted), "{wanted:?} missing:\n{cluster}");
    }
    assert!(!cluster.contains("kind: Metal3Cluster\n"), "{cluster}");
    let lint = capstan(&["lint", out_dir.to_str().unwrap()]);
    assert!(lint.status.success(), "{}", text(&lint.stdout));

    let spec = std::fs::read_to_string(repo_root().join("examples/mixed.yaml")).unwrap();
    let start = spec.find("\nkvm:\n").unwrap();
    let end = spec[start + 1..].find("\n\n").unwrap() + start + 1;
    let without_kvm = format!("{}{}", &spec[..start], &spec[end..]);
    let machines_line = without_kvm
        .lines()
        .position(|l| l == "  machines: kvm")
        .unwrap()
        + 1;
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        without_kvm.replace(
            "manifest: cilium/cilium-manifests.yaml",
            &format!(
                "manifest: {}",
                repo_root()
                    .join("examples/cilium/cilium-manifests.yaml")
                    .display()
            ),
        ),
    )
    .unwrap();
    let out = capstan(&[
        "render",
        bad.to_str().unwrap(),
        "-o",
        dir.path().join("bad").to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("bad.yaml:{machines_line}: controlPlane.machines:"))
            && stderr.contains("no `kvm` section"),
        "{stderr}"
    );
    assert!(!dir.path().join("bad").exists());
}
