//! kubectl against Kubernetes' own kinds on the embedded API: protobuf bodies from `kubectl create`,
//! the workload kinds a ClusterResourceSet applies (ServiceAccounts, RBAC, ConfigMaps, Services,
//! DaemonSets, Deployments) with their schemas and defaults, `kubectl scale`, a drain that evicts
//! Pods under a PodDisruptionBudget, strategic merge patches from `kubectl apply`/`kubectl patch`,
//! and the namespace lifecycle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use support::{kubectl, kubectl_at, ok, start};

const CILIUM_LIKE: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cilium
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: cilium
rules:
- apiGroups: [""]
  resources: ["pods", "nodes"]
  verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: cilium
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cilium
subjects:
- kind: ServiceAccount
  name: cilium
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cilium-config
  namespace: kube-system
data:
  tunnel: vxlan
---
apiVersion: v1
kind: Service
metadata:
  name: hubble-peer
  namespace: kube-system
spec:
  selector:
    k8s-app: cilium
  ports:
  - name: peer-service
    port: 443
    targetPort: 4244
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: cilium
  namespace: kube-system
spec:
  selector:
    matchLabels:
      k8s-app: cilium
  template:
    metadata:
      labels:
        k8s-app: cilium
    spec:
      serviceAccountName: cilium
      hostNetwork: true
      containers:
      - name: cilium-agent
        image: quay.io/cilium/cilium:v1.16.0
        ports:
        - containerPort: 9962
          name: prometheus
        env:
        - name: K8S_NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        resources:
          requests:
            cpu: 100m
            memory: 10Mi
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cilium-operator
  namespace: kube-system
spec:
  replicas: 2
  selector:
    matchLabels:
      name: cilium-operator
  strategy:
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 50%
    type: RollingUpdate
  template:
    metadata:
      labels:
        name: cilium-operator
    spec:
      containers:
      - name: cilium-operator
        image: quay.io/cilium/operator-generic:v1.16.0
"#;

#[test]
fn kubectl_create_sends_protobuf_for_namespaces_secrets_and_configmaps() {
    let server = start();
    ok(&kubectl(&server, &["create", "namespace", "team-a"], None));
    ok(&kubectl(
        &server,
        &[
            "create",
            "secret",
            "generic",
            "node-0-bmc",
            "-n",
            "team-a",
            "--from-literal=username=admin",
            "--from-literal=password=s3cret",
        ],
        None,
    ));
    ok(&kubectl(
        &server,
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "--from-literal=mode=fast",
        ],
        None,
    ));
    let password = ok(&kubectl(
        &server,
        &[
            "get",
            "secret",
            "node-0-bmc",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.data.password} {.type}",
        ],
        None,
    ));
    assert_eq!(password.trim(), "czNjcmV0 Opaque");
    let mode = ok(&kubectl(
        &server,
        &[
            "get",
            "cm",
            "settings",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.data.mode}",
        ],
        None,
    ));
    assert_eq!(mode, "fast");
    let phase = ok(&kubectl(
        &server,
        &["get", "ns", "team-a", "-o", "jsonpath={.status.phase}"],
        None,
    ));
    assert_eq!(phase, "Active");
    // Older kubectls send JSON; both land the same.
    let older = Path::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.27");
    if older.exists() {
        ok(&kubectl_at(
            older,
            &server,
            &[
                "create",
                "secret",
                "generic",
                "old",
                "-n",
                "team-a",
                "--from-literal=a=b",
            ],
            None,
        ));
    }
}

#[test]
fn workload_kinds_are_served_with_schemas_defaults_and_scale() {
    let server = start();
    let applied = ok(&kubectl(&server, &["apply", "-f", "-"], Some(CILIUM_LIKE)));
    assert!(
        applied.contains("daemonset.apps/cilium created"),
        "{applied}"
    );
    let ds = ok(&kubectl(
        &server,
        &["-n", "kube-system", "get", "ds", "cilium"],
        None,
    ));
    assert!(ds.contains("cilium") && ds.contains("DESIRED"), "{ds}");
    let defaults = ok(&kubectl(
        &server,
        &[
            "-n",
            "kube-system",
            "get",
            "ds",
            "cilium",
            "-o",
            "jsonpath={.spec.updateStrategy.type} {.spec.template.spec.containers[0].ports[0].protocol} {.spec.template.spec.restartPolicy}",
        ],
        None,
    ));
    assert_eq!(defaults, "RollingUpdate TCP Always");
    let svc = ok(&kubectl(
        &server,
        &[
            "-n",
            "kube-system",
            "get",
            "svc",
            "hubble-peer",
            "-o",
            "jsonpath={.spec.clusterIP} {.spec.type} {.spec.ports[0].protocol}",
        ],
        None,
    ));
    assert!(
        svc.starts_with("10.96.") && svc.ends_with("ClusterIP TCP"),
        "{svc}"
    );
    // Re-applying changes nothing (defaults do not show up as drift).
    let again = ok(&kubectl(&server, &["apply", "-f", "-"], Some(CILIUM_LIKE)));
    assert!(!again.contains("configured"), "{again}");

    // Upstream schemas: a wrong type is refused with the field named; explain knows the fields.
    let bad = kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(&CILIUM_LIKE.replace("replicas: 2", "replicas: two")),
    );
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("spec.replicas"), "{stderr}");
    // Sorting by a field outside metadata needs whole objects in the Table rows.
    let sorted = ok(&kubectl(
        &server,
        &["-n", "kube-system", "get", "cm", "--sort-by=.data.tunnel"],
        None,
    ));
    assert!(sorted.contains("cilium-config"), "{sorted}");
    let explain = ok(&kubectl(
        &server,
        &["explain", "deployment.spec.replicas"],
        None,
    ));
    assert!(explain.contains("replicas"), "{explain}");

    let scaled = ok(&kubectl(
        &server,
        &[
            "-n",
            "kube-system",
            "scale",
            "deploy",
            "cilium-operator",
            "--replicas=3",
        ],
        None,
    ));
    assert!(scaled.contains("scaled"), "{scaled}");
    let replicas = ok(&kubectl(
        &server,
        &[
            "-n",
            "kube-system",
            "get",
            "deploy",
            "cilium-operator",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        None,
    ));
    assert_eq!(replicas, "3");
    // A ServiceAccount token authenticates; a tampered one does not.
    let token = ok(&kubectl(
        &server,
        &["-n", "kube-system", "create", "token", "cilium"],
        None,
    ));
    let token = token.trim();
    // It has what its ClusterRole grants (nodes, pods), and nothing else.
    ok(&kubectl(
        &server,
        &["--token", token, "get", "nodes", "-o", "name"],
        None,
    ));
    let namespaces = kubectl(&server, &["--token", token, "get", "ns"], None);
    assert!(
        String::from_utf8_lossy(&namespaces.stderr).contains("(Forbidden)"),
        "{namespaces:?}"
    );
    let tampered = format!("{token}x");
    let refused = kubectl(&server, &["--token", &tampered, "get", "nodes"], None);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Unauthorized"),
        "{refused:?}"
    );
    let resources = ok(&kubectl(&server, &["api-resources", "-o", "name"], None));
    for expected in [
        "nodes",
        "services",
        "endpoints",
        "serviceaccounts",
        "endpointslices.discovery.k8s.io",
        "deployments.apps",
        "statefulsets.apps",
        "replicasets.apps",
        "poddisruptionbudgets.policy",
        "clusterrolebindings.rbac.authorization.k8s.io",
        "certificatesigningrequests.certificates.k8s.io",
    ] {
        assert!(
            resources.lines().any(|l| l == expected),
            "{expected}: {resources}"
        );
    }
}

const NODE_AND_PODS: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: worker-0
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
  namespace: default
spec:
  minAvailable: 2
  selector:
    matchLabels:
      app: web
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: default
  labels:
    app: web
spec:
  nodeName: worker-0
  containers:
  - name: web
    image: nginx:1.27
---
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: default
  labels:
    app: web
spec:
  nodeName: worker-0
  containers:
  - name: web
    image: nginx:1.27
"#;

#[test]
fn drain_evicts_pods_only_as_far_as_their_budget_allows() {
    let server = start();
    ok(&kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(NODE_AND_PODS),
    ));
    for pod in ["web-0", "web-1"] {
        ok(&kubectl(
            &server,
            &[
                "patch",
                "pod",
                pod,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#,
            ],
            None,
        ));
    }
    // Both pods are needed by the budget: the drain cannot finish.
    let blocked = kubectl(
        &server,
        &["drain", "worker-0", "--force", "--timeout=3s"],
        None,
    );
    assert!(!blocked.status.success());
    let stderr = String::from_utf8_lossy(&blocked.stderr);
    assert!(stderr.contains("disruption budget"), "{stderr}");
    let cordoned = ok(&kubectl(
        &server,
        &[
            "get",
            "node",
            "worker-0",
            "-o",
            "jsonpath={.spec.unschedulable}",
        ],
        None,
    ));
    assert_eq!(cordoned, "true");
    let pods = ok(&kubectl(&server, &["get", "pods", "-o", "name"], None));
    assert_eq!(pods.lines().count(), 2, "{pods}");

    // With the budget relaxed, the drain evicts both.
    ok(&kubectl(
        &server,
        &[
            "patch",
            "pdb",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":0}}"#,
        ],
        None,
    ));
    ok(&kubectl(
        &server,
        &["drain", "worker-0", "--force", "--timeout=20s"],
        None,
    ));
    let pods = ok(&kubectl(&server, &["get", "pods", "-o", "name"], None));
    assert!(pods.trim().is_empty(), "{pods}");
}

#[test]
fn strategic_merge_from_apply_and_patch_keeps_lists_and_stores_no_directives() {
    let server = start();
    let deployment = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        env:
        - {name: A, value: "1"}
        - {name: B, value: "2"}
      - name: sidecar
        image: busybox:1.36
"#;
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(deployment)));
    // Client-side apply of a change sends $setElementOrder and a partial list.
    let changed = deployment
        .replace("nginx:1.27", "nginx:1.28")
        .replace("        - {name: B, value: \"2\"}\n", "");
    let out = ok(&kubectl(&server, &["apply", "-f", "-"], Some(&changed)));
    assert!(out.contains("configured"), "{out}");
    let json = ok(&kubectl(
        &server,
        &["get", "deploy", "web", "-o", "json"],
        None,
    ));
    assert!(!json.contains("$setElementOrder"), "{json}");
    let images = ok(&kubectl(
        &server,
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[*].image} {.spec.template.spec.containers[0].env[*].name}",
        ],
        None,
    ));
    assert_eq!(images, "nginx:1.28 busybox:1.36 A");

    // The default patch type is strategic: finalizers add up instead of replacing each other.
    for f in ["example.com/a", "example.com/b"] {
        ok(&kubectl(
            &server,
            &[
                "patch",
                "deploy",
                "web",
                "-p",
                &format!(r#"{{"metadata":{{"finalizers":["{f}"]}}}}"#),
            ],
            None,
        ));
    }
    let finalizers = ok(&kubectl(
        &server,
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.metadata.finalizers}",
        ],
        None,
    ));
    assert_eq!(finalizers, r#"["example.com/a","example.com/b"]"#);
    // Containers merge by name.
    ok(&kubectl(
        &server,
        &[
            "patch",
            "deploy",
            "web",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"busybox:1.37"}]}}}}"#,
        ],
        None,
    ));
    let images = ok(&kubectl(
        &server,
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[*].image}",
        ],
        None,
    ));
    assert_eq!(images, "nginx:1.28 busybox:1.37");
    // Custom resources refuse strategic merge with 415.
    ok(&kubectl(
        &server,
        &["apply", "-f", "-"],
        Some(
            "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: h\n  namespace: default\nspec:\n  online: true\n",
        ),
    ));
    let refused = kubectl(
        &server,
        &["patch", "bmh", "h", "-p", r#"{"spec":{"online":false}}"#],
        None,
    );
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("media type") || stderr.contains("not supported"),
        "{stderr}"
    );
}

#[test]
fn deleting_a_namespace_deletes_what_is_in_it() {
    let server = start();
    ok(&kubectl(&server, &["create", "namespace", "gone"], None));
    ok(&kubectl(
        &server,
        &[
            "-n",
            "gone",
            "create",
            "configmap",
            "c",
            "--from-literal=a=b",
        ],
        None,
    ));
    ok(&kubectl(
        &server,
        &["-n", "gone", "create", "serviceaccount", "robot"],
        None,
    ));
    // kubectl waits until the namespace is gone.
    ok(&kubectl(
        &server,
        &["delete", "namespace", "gone", "--timeout=60s"],
        None,
    ));
    let left = kubectl(&server, &["get", "ns", "gone"], None);
    assert!(!left.status.success());
    let cms = ok(&kubectl(&server, &["get", "cm", "-A", "-o", "name"], None));
    assert!(!cms.contains("configmap/c"), "{cms}");
}

#[test]
fn selector_watches_see_objects_enter_and_leave_the_selection() {
    let server = start();
    ok(&kubectl(
        &server,
        &["create", "configmap", "watched", "--from-literal=a=b"],
        None,
    ));
    ok(&kubectl(
        &server,
        &["create", "configmap", "sentinel", "--from-literal=a=b"],
        None,
    ));
    ok(&kubectl(
        &server,
        &["label", "cm", "sentinel", "pick=yes"],
        None,
    ));
    let mut watch = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&server.kubeconfig)
        .args([
            "get",
            "cm",
            "-l",
            "pick=yes",
            "-w",
            "--output-watch-events",
            "-o",
            "jsonpath={.type} {.object.metadata.name}{\"\\n\"}",
        ])
        .env("HOME", server.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    // The sentinel's line says kubectl has listed: it watches from that list's resourceVersion, so
    // every change made after it arrives as an event, however late kubectl started.
    assert_eq!(lines.next().unwrap().unwrap(), "ADDED sentinel");
    ok(&kubectl(
        &server,
        &["label", "cm", "watched", "pick=yes"],
        None,
    ));
    assert_eq!(lines.next().unwrap().unwrap(), "ADDED watched");
    ok(&kubectl(
        &server,
        &["label", "cm", "watched", "other=1"],
        None,
    ));
    assert_eq!(lines.next().unwrap().unwrap(), "MODIFIED watched");
    ok(&kubectl(
        &server,
        &["label", "cm", "watched", "pick-"],
        None,
    ));
    assert_eq!(lines.next().unwrap().unwrap(), "DELETED watched");
    watch.kill().unwrap();
    let _ = watch.wait();
}

/// One battery step: a kubectl command and what its output must contain ("" when only success
/// counts, `!` first when it must fail).
struct Step {
    args: &'static [&'static str],
    stdin: Option<&'static str>,
    expect: &'static str,
}

const fn step(args: &'static [&'static str], expect: &'static str) -> Step {
    Step {
        args,
        stdin: None,
        expect,
    }
}

const BATTERY: &[Step] = &[
    step(
        &["create", "namespace", "battery"],
        "namespace/battery created",
    ),
    step(
        &[
            "-n",
            "battery",
            "create",
            "secret",
            "generic",
            "bmc",
            "--from-literal=password=s3cret",
        ],
        "secret/bmc created",
    ),
    step(
        &[
            "-n",
            "battery",
            "get",
            "secret",
            "bmc",
            "-o",
            "jsonpath={.data.password}",
        ],
        "czNjcmV0",
    ),
    step(
        &[
            "-n",
            "battery",
            "create",
            "configmap",
            "cfg",
            "--from-literal=a=b",
        ],
        "configmap/cfg created",
    ),
    step(
        &["-n", "battery", "create", "serviceaccount", "robot"],
        "serviceaccount/robot created",
    ),
    Step {
        args: &["-n", "battery", "apply", "-f", "-"],
        stdin: Some(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - {name: web, image: nginx:1.27}\n",
        ),
        expect: "deployment.apps/web created",
    },
    Step {
        args: &["-n", "battery", "apply", "-f", "-"],
        stdin: Some(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - {name: web, image: nginx:1.28}\n",
        ),
        expect: "deployment.apps/web configured",
    },
    step(
        &[
            "-n",
            "battery",
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
        "nginx:1.28",
    ),
    step(
        &["-n", "battery", "scale", "deploy", "web", "--replicas=4"],
        "scaled",
    ),
    step(
        &[
            "-n",
            "battery",
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        "4",
    ),
    step(
        &[
            "-n",
            "battery",
            "patch",
            "deploy",
            "web",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/x"]}}"#,
        ],
        "patched",
    ),
    step(
        &[
            "-n",
            "battery",
            "patch",
            "deploy",
            "web",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
        "patched",
    ),
    step(
        &["-n", "battery", "label", "cm", "cfg", "tier=a"],
        "labeled",
    ),
    step(
        &["-n", "battery", "get", "cm", "-l", "tier=a", "-o", "name"],
        "configmap/cfg",
    ),
    step(&["-n", "battery", "get", "cm", "--sort-by=.data.a"], "cfg"),
    Step {
        args: &["-n", "battery", "apply", "--server-side", "-f", "-"],
        stdin: Some(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  level: low\n",
        ),
        expect: "configmap/ssa serverside-applied",
    },
    Step {
        args: &[
            "-n",
            "battery",
            "apply",
            "--server-side",
            "--field-manager=tuner",
            "-f",
            "-",
        ],
        stdin: Some(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  level: high\n",
        ),
        expect: "!conflict with \"kubectl\": .data.level",
    },
    Step {
        args: &[
            "-n",
            "battery",
            "apply",
            "--server-side",
            "--field-manager=tuner",
            "--force-conflicts",
            "-f",
            "-",
        ],
        stdin: Some(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  level: high\n",
        ),
        expect: "configmap/ssa serverside-applied",
    },
    step(
        &[
            "-n",
            "battery",
            "get",
            "cm",
            "ssa",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager} {.data.level}",
        ],
        "tuner high",
    ),
    step(
        &[
            "-n",
            "battery",
            "create",
            "deployment",
            "api",
            "--image=nginx:1.27",
            "--replicas=2",
        ],
        "deployment.apps/api created",
    ),
    step(
        &[
            "-n",
            "battery",
            "create",
            "service",
            "clusterip",
            "api",
            "--tcp=80:8080",
        ],
        "service/api created",
    ),
    step(
        &[
            "-n",
            "battery",
            "get",
            "svc",
            "api",
            "-o",
            "jsonpath={.spec.ports[0].targetPort}",
        ],
        "8080",
    ),
    step(
        &[
            "-n",
            "battery",
            "create",
            "role",
            "reader",
            "--verb=get",
            "--resource=pods",
        ],
        "role.rbac.authorization.k8s.io/reader created",
    ),
    step(
        &[
            "-n",
            "battery",
            "create",
            "poddisruptionbudget",
            "api",
            "--selector=app=api",
            "--min-available=1",
        ],
        "poddisruptionbudget.policy/api created",
    ),
    step(&["explain", "pods.spec.containers.image"], "image"),
    step(&["api-resources", "--api-group=apps"], "deployments"),
    step(
        &["delete", "namespace", "battery", "--timeout=60s"],
        "deleted",
    ),
    step(&["get", "ns", "battery"], "!NotFound"),
];

/// Runs the battery with kubectl at `binary`; returns (passed, failures).
fn run_battery(binary: &Path) -> (usize, Vec<String>) {
    let server = start();
    let mut passed = 0;
    let mut failures = Vec::new();
    for s in BATTERY {
        let out = kubectl_at(binary, &server, s.args, s.stdin);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let good = match s.expect.strip_prefix('!') {
            Some(wanted) => !out.status.success() && text.contains(wanted),
            None => out.status.success() && text.contains(s.expect),
        };
        if good {
            passed += 1;
        } else {
            failures.push(format!("kubectl {}: {text}", s.args.join(" ")));
        }
    }
    (passed, failures)
}

#[test]
fn battery_passes_with_kubectl_1_27_1_31_and_1_33() {
    let mut report = Vec::new();
    for version in ["1.27", "1.31", "1.33"] {
        let binary = Path::new("/usr/lib/google-cloud-sdk/bin").join(format!("kubectl.{version}"));
        assert!(binary.exists(), "{} is expected", binary.display());
        let (passed, failures) = run_battery(&binary);
        report.push(format!("kubectl {version}: {passed}/{}", BATTERY.len()));
        assert!(
            failures.is_empty(),
            "kubectl {version}:\n{}",
            failures.join("\n")
        );
    }
    println!("{}", report.join("\n"));
}
