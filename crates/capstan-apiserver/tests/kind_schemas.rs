//! capstan's own kinds are served with the schemas generated from its model, seen through kubectl
//! (the default 1.33 and an older one): `kubectl explain` describes their fields, a malformed
//! KVMMachine is refused with the field named and never stored, unknown fields follow
//! `--validate` (strict: refused, warn: pruned with a warning, ignore: pruned silently) on the
//! KVM kinds and below the root of the upstream kinds (`spec.controlPlaneRef.nmae` is refused with
//! `--validate=strict` and pruned otherwise), a KubeadmControlPlane missing upstream's required
//! fields is refused as kube-apiserver words it, and status writes are validated against the
//! status part of the schema — on the kinds shared with upstream with upstream's value rules.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use support::raw::request;
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
        // A field only upstream's schema names (the model keeps `rollout` unread) is described
        // with upstream's structure.
        let rollout = ok(&run(
            &kubectl,
            &server,
            &[
                "explain",
                "kubeadmcontrolplane.spec.rollout.strategy",
                "--api-version=controlplane.cluster.x-k8s.io/v1beta2",
            ],
            None,
        ));
        assert!(rollout.contains("rollingUpdate"), "{name}: {rollout}");
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
fn unknown_fields_follow_field_validation_on_kvm_kinds_and_upstream_fields_are_typed() {
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
    // Upstream's fields are known on upstream kinds, and wrong types refused.
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
}

const CLUSTER_WITH_TYPO: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: typo
  namespace: default
spec:
  controlPlaneRef:
    apiGroup: controlplane.cluster.x-k8s.io
    kind: KubeadmControlPlane
    name: typo-cp
    nmae: typo-cp
"#;

const MACHINE_DEPLOYMENT_WITH_TYPO: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: typo-md
  namespace: default
spec:
  clusterName: typo
  selector: {}
  template:
    spec:
      clusterName: typo
      bootstrap:
        dataSecretNam: typo-bootstrap
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: Metal3MachineTemplate
        name: typo-workers
"#;

#[test]
fn typos_below_the_root_of_upstream_kinds_are_refused_when_strict_and_pruned_otherwise() {
    for kubectl in kubectls() {
        let server = start();
        let name = kubectl.display().to_string();
        for (manifest, resource, typo, kept) in [
            (
                CLUSTER_WITH_TYPO,
                "cluster/typo",
                "spec.controlPlaneRef.nmae",
                "{.spec.controlPlaneRef.name}",
            ),
            (
                MACHINE_DEPLOYMENT_WITH_TYPO,
                "machinedeployment.v1beta1.cluster.x-k8s.io/typo-md",
                "spec.template.spec.bootstrap.dataSecretNam",
                "{.spec.template.spec.infrastructureRef.name}",
            ),
        ] {
            let message = refused(&run(
                &kubectl,
                &server,
                &["apply", "--validate=strict", "-f", "-"],
                Some(manifest),
            ));
            assert!(
                message.contains(&format!("unknown field \"{typo}\"")),
                "{name}: {message}"
            );
            let missing = run(&kubectl, &server, &["get", resource], None);
            assert!(!missing.status.success(), "{name}: {resource} was stored");
            // Without strict validation the object is stored without the unknown field, with a
            // warning naming it.
            let warned = run(
                &kubectl,
                &server,
                &["apply", "--validate=warn", "-f", "-"],
                Some(manifest),
            );
            ok(&warned);
            assert!(
                stderr(&warned).contains(typo),
                "{name}: {}",
                stderr(&warned)
            );
            let stored = ok(&run(
                &kubectl,
                &server,
                &["get", resource, "-o", "jsonpath={.spec}"],
                None,
            ));
            let leaf = typo.rsplit('.').next().unwrap();
            assert!(!stored.contains(leaf), "{name}: {leaf} kept in {stored}");
            let value = ok(&run(
                &kubectl,
                &server,
                &["get", resource, "-o", &format!("jsonpath={kept}")],
                None,
            ));
            assert!(!value.is_empty(), "{name}: {kept} lost");
        }
    }
}

#[test]
fn a_kubeadm_control_plane_missing_required_fields_is_refused_as_upstream_words_it() {
    for kubectl in kubectls() {
        let server = start();
        let name = kubectl.display().to_string();
        let kcp = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: k0
  namespace: default
spec:
  replicas: 1
"#;
        for verb in [&["apply", "-f", "-"][..], &["create", "-f", "-"][..]] {
            let message = refused(&run(&kubectl, &server, verb, Some(kcp)));
            for expected in [
                "The KubeadmControlPlane \"k0\" is invalid",
                "spec.machineTemplate: Required value",
                "spec.version: Required value",
            ] {
                assert!(message.contains(expected), "{name} {verb:?}: {message}");
            }
        }
        // The Status kube-apiserver answers (kubectl logs the body at -v=8): the group-qualified
        // kind, the causes in brackets, one FieldValueRequired cause per missing field.
        let raw = run(
            &kubectl,
            &server,
            &["create", "-f", "-", "-v=8"],
            Some(
                r#"{"apiVersion":"controlplane.cluster.x-k8s.io/v1beta2","kind":"KubeadmControlPlane","metadata":{"name":"k0","namespace":"default"},"spec":{"replicas":1,"machineTemplate":{"spec":{}}}}"#,
            ),
        );
        let body = refused(&raw);
        for expected in [
            "KubeadmControlPlane.controlplane.cluster.x-k8s.io",
            "is invalid: [spec.",
            "spec.version: Required value",
            "spec.machineTemplate.spec.infrastructureRef: Required value]",
            "FieldValueRequired",
        ] {
            assert!(body.contains(expected), "{name}: {expected} not in {body}");
        }
        let none = ok(&run(
            &kubectl,
            &server,
            &["get", "kubeadmcontrolplanes", "-o", "name"],
            None,
        ));
        assert!(none.trim().is_empty(), "{name}: stored {none}");
    }
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

#[test]
fn status_writes_upstream_would_refuse_are_refused_with_the_field_named() {
    let server = start();
    let (code, body) = request(
        &server,
        "POST",
        "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters",
        "application/json",
        br#"{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Cluster","metadata":{"name":"c0"},"spec":{"clusterNetwork":{"pods":{"cidrBlocks":["10.244.0.0/16"]}}}}"#,
    );
    assert_eq!(code, 201, "{body}");
    let patch_status = |status: &str| {
        request(
            &server,
            "PATCH",
            "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/c0/status",
            "application/merge-patch+json",
            format!(r#"{{"status":{status}}}"#).as_bytes(),
        )
    };
    // What capstan's controllers write: a `metav1.Condition` with every required field (the
    // message possibly empty), `initialization` with a field, a phase upstream knows.
    let (code, body) = patch_status(
        r#"{"phase":"Provisioning","initialization":{"infrastructureProvisioned":true},"conditions":[{"type":"Available","status":"False","reason":"WaitingForControlPlane","message":"","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1}]}"#,
    );
    assert_eq!(code, 200, "{body}");
    // What upstream's CRD refuses, each with the field named.
    for (status, field, says) in [
        (
            r#"{"conditions":[{"type":"Available","status":"False","reason":"Waiting","lastTransitionTime":"2026-01-01T00:00:00Z"}]}"#,
            "status.conditions[0].message",
            "Required value",
        ),
        (
            r#"{"conditions":[{"type":"Available","status":"False","reason":"not ready","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}"#,
            "status.conditions[0].reason",
            "does not match the pattern",
        ),
        (
            r#"{"conditions":[{"type":"Available","status":"Maybe","reason":"Waiting","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}"#,
            "status.conditions[0].status",
            "unsupported value",
        ),
        (
            r#"{"conditions":[{"type":"Available","status":"True","reason":"Ready","message":""}]}"#,
            "status.conditions[0].lastTransitionTime",
            "Required value",
        ),
        (r#"{"initialization":null,"conditions":null}"#, "", ""),
        (
            r#"{"initialization":{}}"#,
            "status.initialization",
            "at least 1",
        ),
        (r#"{"phase":"Ready"}"#, "status.phase", "unsupported value"),
    ] {
        let (code, body) = patch_status(status);
        if field.is_empty() {
            assert_eq!(code, 200, "{status}: {body}");
            continue;
        }
        assert_eq!(code, 422, "{status}: {body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["reason"], "Invalid", "{body}");
        let causes = answer["details"]["causes"].as_array().unwrap();
        assert!(
            causes.iter().any(|c| c["field"] == field),
            "{status}: {field} not named in {body}"
        );
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains(&says.to_lowercase()),
            "{status}: {says:?} not in {body}"
        );
    }
    // Nothing refused was stored.
    let (code, body) = request(
        &server,
        "GET",
        "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/c0",
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
    let stored: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stored["status"]["phase"], "Provisioning", "{body}");
    assert!(stored["status"].get("conditions").is_none(), "{body}");
}
