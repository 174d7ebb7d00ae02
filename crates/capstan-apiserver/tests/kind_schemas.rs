//! capstan's own kinds are served with the schemas generated from its model, seen through kubectl
//! (the default 1.33 and an older one): `kubectl explain` describes their fields, a malformed
//! KVMMachine is refused with the field named and never stored, unknown fields follow
//! `--validate` (strict: refused, warn: pruned with a warning, ignore: pruned silently) on the
//! closed KVM kinds and are kept on the upstream kinds, and status writes are validated against
//! the status part of the schema.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use support::{Server, kubectl_at, ok, start};

const OLDER_KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.27";

fn kubectls() -> Vec<PathBuf> {
    let older = PathBuf::from(OLDER_KUBECTL);
    assert!(
        older.exists(),
        "{OLDER_KUBECTL} is expected (the Google Cloud SDK's kubectl versions)"
    );
    vec![PathBuf::from("kubectl"), older]
}

const MACHINE: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: KVMMachine
metadata:
  name: m0
  namespace: default
spec:
  resources:
    cpu: 2
    memory: 2Gi
    disk: 20Gi
    dockerVolumeSize: 5Gi
  image:
    url: file:///var/lib/capstan/images/debian.qcow2
    checksum: 0123456789abcdef
  volumes:
  - name: etcd
    size: 2Gi
    mountPath: /var/lib/etcd
"#;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn refused(out: &std::process::Output) -> String {
    assert!(
        !out.status.success(),
        "accepted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr(out)
}

fn run(
    kubectl: &Path,
    server: &Server,
    args: &[&str],
    stdin: Option<&str>,
) -> std::process::Output {
    kubectl_at(kubectl, server, args, stdin)
}

#[test]
fn kubectl_explain_describes_capstan_kinds_in_every_version() {
    for kubectl in kubectls() {
        let server = start();
        let name = kubectl.display().to_string();
        let resources = ok(&run(
            &kubectl,
            &server,
            &["explain", "kvmmachine.spec.resources"],
            None,
        ));
        for expected in ["cpu", "memory", "disk", "dockerVolumeSize", "Virtual CPUs"] {
            assert!(resources.contains(expected), "{name}: {resources}");
        }
        let old = ok(&run(
            &kubectl,
            &server,
            &[
                "explain",
                "kvmmachinetemplate.spec.template.spec.resources",
                "--api-version=infrastructure.cluster.x-k8s.io/v1alpha4",
            ],
            None,
        ));
        assert!(old.contains("dockerVolumeSize"), "{name}: {old}");
        let cluster = ok(&run(
            &kubectl,
            &server,
            &[
                "explain",
                "cluster.spec",
                "--api-version=cluster.x-k8s.io/v1beta2",
            ],
            None,
        ));
        for expected in ["controlPlaneRef", "infrastructureRef", "clusterNetwork"] {
            assert!(cluster.contains(expected), "{name}: {cluster}");
        }
        let v1beta1 = ok(&run(
            &kubectl,
            &server,
            &[
                "explain",
                "machinedeployment.spec.template.spec",
                "--api-version=cluster.x-k8s.io/v1beta1",
            ],
            None,
        ));
        assert!(v1beta1.contains("infrastructureRef"), "{name}: {v1beta1}");
        let bmh = ok(&run(&kubectl, &server, &["explain", "bmh.spec.bmc"], None));
        assert!(bmh.contains("credentialsName"), "{name}: {bmh}");
    }
}

#[test]
fn malformed_kvm_machines_are_refused_with_the_field_named_and_never_stored() {
    for kubectl in kubectls() {
        let server = start();
        let name = kubectl.display().to_string();
        for (bad, field) in [
            (MACHINE.replace("cpu: 2", "cpu: two"), "spec.resources.cpu"),
            (
                MACHINE.replace("memory: 2Gi", "memory: lots"),
                "spec.resources.memory",
            ),
            (
                MACHINE.replace("    checksum: 0123456789abcdef\n", ""),
                "spec.image.checksum",
            ),
            (
                MACHINE.replace("    mountPath: /var/lib/etcd\n", ""),
                "spec.volumes[0].mountPath",
            ),
        ] {
            for verb in [&["apply", "-f", "-"][..], &["create", "-f", "-"][..]] {
                let message = refused(&run(&kubectl, &server, verb, Some(&bad)));
                assert!(
                    message.contains(field) && message.contains("is invalid"),
                    "{name} {verb:?}: {message}"
                );
            }
        }
        let none = ok(&run(
            &kubectl,
            &server,
            &["get", "kvmmachines", "-o", "name"],
            None,
        ));
        assert!(none.trim().is_empty(), "{name}: stored {none}");
        // A well-formed machine is stored, with the model's defaults; an update that breaks it is
        // refused and leaves it as it was.
        ok(&run(
            &kubectl,
            &server,
            &["apply", "-f", "-"],
            Some(MACHINE),
        ));
        let format = ok(&run(
            &kubectl,
            &server,
            &[
                "get",
                "kvmmachine",
                "m0",
                "-o",
                "jsonpath={.spec.image.format}/{.spec.image.checksumType}",
            ],
            None,
        ));
        assert_eq!(format, "qcow2/sha256", "{name}");
        let message = refused(&run(
            &kubectl,
            &server,
            &[
                "patch",
                "kvmmachine",
                "m0",
                "--type=merge",
                "-p",
                r#"{"spec":{"resources":{"disk":"big"}}}"#,
            ],
            None,
        ));
        assert!(message.contains("spec.resources.disk"), "{name}: {message}");
        let disk = ok(&run(
            &kubectl,
            &server,
            &[
                "get",
                "kvmmachine",
                "m0",
                "-o",
                "jsonpath={.spec.resources.disk}",
            ],
            None,
        ));
        assert_eq!(disk, "20Gi", "{name}");
    }
}

#[test]
fn unknown_fields_follow_field_validation_on_kvm_kinds_and_are_kept_on_upstream_kinds() {
    let kubectl = PathBuf::from("kubectl");
    let server = start();
    let with_unknown = MACHINE.replace("    cpu: 2\n", "    cpu: 2\n    gpus: 1\n");
    let message = refused(&run(
        &kubectl,
        &server,
        &["apply", "--validate=strict", "-f", "-"],
        Some(&with_unknown),
    ));
    assert!(message.contains("gpus"), "{message}");
    let warned = run(
        &kubectl,
        &server,
        &["apply", "--validate=warn", "-f", "-"],
        Some(&with_unknown),
    );
    ok(&warned);
    assert!(stderr(&warned).contains("gpus"), "{}", stderr(&warned));
    let stored = ok(&run(
        &kubectl,
        &server,
        &[
            "get",
            "kvmmachine",
            "m0",
            "-o",
            "jsonpath={.spec.resources}",
        ],
        None,
    ));
    assert!(
        stored.contains("dockerVolumeSize") && !stored.contains("gpus"),
        "{stored}"
    );
    let ignored = run(
        &kubectl,
        &server,
        &["apply", "--validate=false", "-f", "-"],
        Some(&with_unknown.replace("gpus", "tpus")),
    );
    ok(&ignored);
    assert!(!stderr(&ignored).contains("tpus"), "{}", stderr(&ignored));
    // Upstream kinds keep fields the model does not name, and still refuse wrong types.
    let cluster = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: c0
  namespace: default
spec:
  availabilityGates:
  - conditionType: Custom
  clusterNetwork:
    pods:
      cidrBlocks: ["10.244.0.0/16"]
"#;
    ok(&run(
        &kubectl,
        &server,
        &["apply", "--validate=strict", "-f", "-"],
        Some(cluster),
    ));
    let gate = ok(&run(
        &kubectl,
        &server,
        &[
            "get",
            "cluster",
            "c0",
            "-o",
            "jsonpath={.spec.availabilityGates[0].conditionType}",
        ],
        None,
    ));
    assert_eq!(gate, "Custom");
    let message = refused(&run(
        &kubectl,
        &server,
        &["apply", "-f", "-"],
        Some(&cluster.replace(r#"["10.244.0.0/16"]"#, "10.244.0.0/16")),
    ));
    assert!(
        message.contains("spec.clusterNetwork.pods.cidrBlocks"),
        "{message}"
    );
    let kcp = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: k0
  namespace: default
spec:
  replicas: 1
  machineTemplate:
    spec:
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: KVMMachineTemplate, name: t}
  kubeadmConfigSpec: {}
"#;
    let message = refused(&run(&kubectl, &server, &["apply", "-f", "-"], Some(kcp)));
    assert!(message.contains("spec.version"), "{message}");
}

#[test]
fn status_writes_are_validated_against_the_status_schema() {
    for kubectl in kubectls() {
        let server = start();
        let name = kubectl.display().to_string();
        ok(&run(
            &kubectl,
            &server,
            &["apply", "-f", "-"],
            Some(MACHINE),
        ));
        ok(&run(
            &kubectl,
            &server,
            &[
                "patch",
                "kvmmachine",
                "m0",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"ready":true,"domainState":"running","addresses":[{"type":"InternalIP","address":"10.0.0.5"}]}}"#,
            ],
            None,
        ));
        let message = refused(&run(
            &kubectl,
            &server,
            &[
                "patch",
                "kvmmachine",
                "m0",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"ready":"yes"}}"#,
            ],
            None,
        ));
        assert!(message.contains("status.ready"), "{name}: {message}");
        // The main resource ignores status; the status subresource ignores spec.
        ok(&run(
            &kubectl,
            &server,
            &[
                "patch",
                "kvmmachine",
                "m0",
                "--type=merge",
                "-p",
                r#"{"status":{"ready":false}}"#,
            ],
            None,
        ));
        let state = ok(&run(
            &kubectl,
            &server,
            &[
                "get",
                "kvmmachine",
                "m0",
                "-o",
                "jsonpath={.status.ready}/{.status.domainState}/{.status.addresses[0].address}",
            ],
            None,
        ));
        assert_eq!(state, "true/running/10.0.0.5", "{name}");
    }
}
