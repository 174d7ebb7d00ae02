//! kubectl against Kubernetes' own kinds on the embedded API: protobuf bodies from `kubectl create`,
//! the workload kinds a ClusterResourceSet applies (ServiceAccounts, RBAC, ConfigMaps, Services,
//! DaemonSets, Deployments) with their schemas and defaults, `kubectl scale`, a drain that evicts
//! Pods under a PodDisruptionBudget, strategic merge patches from `kubectl apply`/`kubectl patch`,
//! and the namespace lifecycle; and the battery of everyday kubectl commands run with kubectl 1.27,
//! 1.31 and 1.33, reporting passed/total per version (docs/api.md lists the commands and results).

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

/// One battery step: a kubectl command (stdin closed), what its output (stdout and stderr together) must contain,
/// in this order, and must not contain; whether it must fail; an editor (a `sed` expression run on
/// the file `kubectl edit` opens); and a name under which its trimmed output is saved, for later
/// steps to use as `{name}`. `{dir}` in arguments is the directory holding [`FIXTURES`].
#[derive(Clone, Default)]
struct Step {
    args: &'static [&'static str],
    expect: &'static [&'static str],
    absent: &'static [&'static str],
    fails: bool,
    editor: Option<&'static str>,
    save: Option<&'static str>,
}

/// A step that must succeed and print each of `expect`, in order.
fn run(args: &'static [&'static str], expect: &'static [&'static str]) -> Step {
    Step {
        args,
        expect,
        ..Step::default()
    }
}

/// A step that must fail (non-zero exit) and print each of `expect`, in order.
fn fail(args: &'static [&'static str], expect: &'static [&'static str]) -> Step {
    Step {
        args,
        expect,
        fails: true,
        ..Step::default()
    }
}

impl Step {
    fn without(self, absent: &'static [&'static str]) -> Self {
        Step { absent, ..self }
    }
    fn editor(self, sed: &'static str) -> Self {
        Step {
            editor: Some(sed),
            ..self
        }
    }
    fn save(self, name: &'static str) -> Self {
        Step {
            save: Some(name),
            ..self
        }
    }
}

/// Files the battery's commands read (`--from-file`, `-f`).
const FIXTURES: &[(&str, &str)] = &[
    ("settings.properties", "mode=fast\n"),
    (
        "web.yaml",
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: battery
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
"#,
    ),
    (
        "web2.yaml",
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: battery
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.28
        env:
        - {name: A, value: "1"}
      - name: sidecar
        image: busybox:1.36
"#,
    ),
    (
        "md.yaml",
        r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata:
  name: workers
  namespace: battery
spec:
  clusterName: c1
  replicas: 1
  selector:
    matchLabels: {pool: workers}
  template:
    metadata:
      labels: {pool: workers}
    spec:
      clusterName: c1
      version: v1.31.0
      bootstrap:
        dataSecretName: boot
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: Metal3MachineTemplate
        name: workers
"#,
    ),
    (
        "md2.yaml",
        r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata:
  name: workers
  namespace: battery
  labels: {team: blue}
spec:
  clusterName: c1
  replicas: 1
  selector:
    matchLabels: {pool: workers}
  template:
    metadata:
      labels: {pool: workers}
    spec:
      clusterName: c1
      version: v1.31.1
      bootstrap:
        dataSecretName: boot
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: Metal3MachineTemplate
        name: workers
"#,
    ),
    (
        "kcp.yaml",
        r#"apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: cp
  namespace: battery
spec:
  replicas: 1
  version: v1.31.0
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: Metal3MachineTemplate
        name: cp
  kubeadmConfigSpec: {format: cloud-config}
"#,
    ),
    (
        "ssa1.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: battery\ndata:\n  level: low\n  extra: \"yes\"\n",
    ),
    (
        "ssa-tuner.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: battery\ndata:\n  level: high\n",
    ),
    (
        "ssa2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: battery\ndata:\n  keep: \"1\"\n",
    ),
    (
        "cfg-replace.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: battery\n  labels: {replaced: \"true\"}\ndata:\n  a: replaced\n",
    ),
    (
        "diffed.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: diffed\n  namespace: battery\ndata:\n  mode: fast\n",
    ),
    (
        "diffed-changed.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: diffed\n  namespace: battery\ndata:\n  mode: slow\n",
    ),
    (
        "held.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: battery\n  finalizers: [example.com/hold]\n",
    ),
    (
        "held-doomed.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: doomed\n  finalizers: [example.com/hold]\n",
    ),
    (
        "event.yaml",
        r#"apiVersion: v1
kind: Event
metadata:
  name: web.scaled
  namespace: battery
involvedObject:
  apiVersion: apps/v1
  kind: Deployment
  name: web
  namespace: battery
reason: ScalingReplicaSet
message: Scaled up replica set web-1 to 1
type: Normal
source:
  component: deployment-controller
firstTimestamp: "2026-01-01T00:00:00Z"
lastTimestamp: "2026-01-01T00:00:00Z"
count: 1
"#,
    ),
];

const NS: &str = "battery";

/// A status a Deployment controller would write once the rollout is complete.
const AVAILABLE: &str = r#"{"status":{"observedGeneration":100,"replicas":4,"updatedReplicas":4,"readyReplicas":4,"availableReplicas":4,"conditions":[{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"ok"},{"type":"Progressing","status":"True","reason":"NewReplicaSetAvailable","message":"ok"}]}}"#;

/// The battery: everyday kubectl commands, each checked by its output or by a follow-up `get`.
/// Every command runs in namespace `battery` unless it names another (`-n` is added first).
fn battery() -> Vec<Step> {
    vec![
        // create
        run(&["create", "namespace", NS], &["namespace/battery created"]),
        run(&["get", "ns", NS, "-o", "jsonpath={.status.phase}"], &["Active"]),
        run(
            &["create", "secret", "generic", "bmc", "--from-literal=username=admin", "--from-literal=password=s3cret"],
            &["secret/bmc created"],
        ),
        run(&["get", "secret", "bmc", "-o", "jsonpath={.data.password} {.type}"], &["czNjcmV0 Opaque"]),
        run(
            &["create", "configmap", "settings", "--from-file={dir}/settings.properties"],
            &["configmap/settings created"],
        ),
        run(&["get", "cm", "settings", "-o", "jsonpath={.data.settings\\.properties}"], &["mode=fast"]),
        run(&["create", "configmap", "cfg", "--from-literal=a=b"], &["configmap/cfg created"]),
        run(&["create", "serviceaccount", "robot"], &["serviceaccount/robot created"]),
        run(&["get", "sa", "robot", "-o", "name"], &["serviceaccount/robot"]),
        run(
            &["create", "deployment", "api", "--image=nginx:1.27", "--replicas=2"],
            &["deployment.apps/api created"],
        ),
        run(
            &["get", "deploy", "api", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image} {.spec.strategy.type}"],
            &["2 nginx:1.27 RollingUpdate"],
        ),
        run(&["create", "service", "clusterip", "api", "--tcp=80:8080"], &["service/api created"]),
        run(
            &["get", "svc", "api", "-o", "jsonpath={.spec.type} {.spec.ports[0].targetPort}"],
            &["ClusterIP 8080"],
        ),
        run(
            &["create", "role", "reader", "--verb=get,list", "--resource=pods"],
            &["role.rbac.authorization.k8s.io/reader created"],
        ),
        run(
            &["create", "rolebinding", "reader", "--role=reader", "--serviceaccount=battery:robot"],
            &["rolebinding.rbac.authorization.k8s.io/reader created"],
        ),
        run(
            &["get", "rolebinding", "reader", "-o", "jsonpath={.roleRef.name} {.subjects[0].name}"],
            &["reader robot"],
        ),
        run(
            &["create", "clusterrole", "node-reader", "--verb=get,list", "--resource=nodes"],
            &["clusterrole.rbac.authorization.k8s.io/node-reader created"],
        ),
        run(
            &["create", "clusterrolebinding", "node-reader", "--clusterrole=node-reader", "--user=alice"],
            &["clusterrolebinding.rbac.authorization.k8s.io/node-reader created"],
        ),
        run(
            &["create", "poddisruptionbudget", "api", "--selector=app=api", "--min-available=1"],
            &["poddisruptionbudget.policy/api created"],
        ),
        run(&["get", "pdb", "api", "-o", "jsonpath={.spec.minAvailable}"], &["1"]),
        // auth
        run(&["auth", "can-i", "list", "pods", "--as=system:serviceaccount:battery:robot"], &["yes"]),
        fail(&["auth", "can-i", "delete", "pods", "--as=system:serviceaccount:battery:robot"], &["no"]),
        run(&["auth", "can-i", "list", "nodes", "--as=alice"], &["yes"]),
        fail(&["auth", "can-i", "get", "secrets", "--as=alice"], &["no"]),
        run(&["auth", "whoami"], &["capstan-admin", "system:masters"]),
        run(
            &["auth", "can-i", "--list", "--as=system:serviceaccount:battery:robot"],
            &["pods", "[get list]"],
        ),
        // client-side apply
        run(&["apply", "-f", "{dir}/web.yaml"], &["deployment.apps/web created"]),
        run(&["apply", "-f", "{dir}/web.yaml"], &["deployment.apps/web unchanged"]),
        run(&["apply", "-f", "{dir}/web2.yaml"], &["deployment.apps/web configured"]),
        run(
            &["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[*].image} {.spec.template.spec.containers[0].env[*].name}"],
            &["nginx:1.28 busybox:1.36 A"],
        )
        .without(&["A B"]),
        run(&["get", "deploy", "web", "-o", "json"], &["last-applied-configuration"]).without(&["$setElementOrder"]),
        run(&["apply", "-f", "{dir}/md.yaml"], &["machinedeployment.cluster.x-k8s.io/workers created"]),
        run(&["apply", "-f", "{dir}/md2.yaml"], &["machinedeployment.cluster.x-k8s.io/workers configured"]),
        run(
            &["get", "md", "workers", "-o", "jsonpath={.metadata.labels.team} {.spec.template.spec.version}"],
            &["blue v1.31.1"],
        ),
        // server-side apply
        run(&["apply", "--server-side", "-f", "{dir}/ssa1.yaml"], &["configmap/ssa serverside-applied"]),
        fail(
            &["apply", "--server-side", "--field-manager=tuner", "-f", "{dir}/ssa-tuner.yaml"],
            &["conflict with \"kubectl\"", ".data.level"],
        ),
        run(
            &["apply", "--server-side", "--field-manager=tuner", "--force-conflicts", "-f", "{dir}/ssa-tuner.yaml"],
            &["configmap/ssa serverside-applied"],
        ),
        run(
            &["get", "cm", "ssa", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager} {.data.level}"],
            &["kubectl tuner high"],
        ),
        // The applier stops setting `extra` (removed) and no longer owns `level` (kept).
        run(&["apply", "--server-side", "-f", "{dir}/ssa2.yaml"], &["configmap/ssa serverside-applied"]),
        run(&["get", "cm", "ssa", "-o", "jsonpath={.data}"], &["\"keep\":\"1\"", "\"level\":\"high\""]).without(&["extra"]),
        run(
            &["apply", "--server-side", "-f", "{dir}/kcp.yaml"],
            &["kubeadmcontrolplane.controlplane.cluster.x-k8s.io/cp serverside-applied"],
        ),
        // patch: strategic (the default), merge and json, on built-in and custom kinds
        run(
            &["patch", "deploy", "web", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"busybox:1.37"}]}}}}"#],
            &["deployment.apps/web patched"],
        ),
        run(
            &["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[*].image}"],
            &["nginx:1.28 busybox:1.37"],
        ),
        run(
            &["patch", "deploy", "web", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","$patch":"delete"}]}}}}"#],
            &["deployment.apps/web patched"],
        ),
        run(
            &["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[*].name}"],
            &["web"],
        )
        .without(&["sidecar"]),
        run(
            &["patch", "deploy", "web", "--type=merge", "-p", r#"{"spec":{"revisionHistoryLimit":5}}"#],
            &["deployment.apps/web patched"],
        ),
        run(
            &["patch", "deploy", "web", "--type=json", "-p", r#"[{"op":"add","path":"/metadata/labels","value":{"tier":"front"}}]"#],
            &["deployment.apps/web patched"],
        ),
        run(
            &["get", "deploy", "web", "-o", "jsonpath={.spec.revisionHistoryLimit} {.metadata.labels.tier}"],
            &["5 front"],
        ),
        run(&["patch", "cm", "cfg", "-p", r#"{"metadata":{"finalizers":["example.com/a"]}}"#], &["configmap/cfg patched"]),
        run(&["patch", "cm", "cfg", "-p", r#"{"metadata":{"finalizers":["example.com/b"]}}"#], &["configmap/cfg patched"]),
        run(
            &["get", "cm", "cfg", "-o", "jsonpath={.metadata.finalizers}"],
            &[r#"["example.com/a","example.com/b"]"#],
        ),
        run(
            &["patch", "cm", "cfg", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#],
            &["configmap/cfg patched"],
        ),
        run(&["patch", "cm", "cfg", "--type=merge", "-p", r#"{"metadata":{"finalizers":["example.com/c"]}}"#], &["configmap/cfg patched"]),
        run(&["patch", "cm", "cfg", "--type=merge", "-p", r#"{"metadata":{"finalizers":[]}}"#], &["configmap/cfg patched"]),
        run(&["get", "cm", "cfg", "-o", "json"], &["\"name\": \"cfg\""]).without(&["finalizers"]),
        run(
            &["patch", "md", "workers", "--type=merge", "-p", r#"{"spec":{"replicas":2}}"#],
            &["machinedeployment.cluster.x-k8s.io/workers patched"],
        ),
        run(&["get", "md", "workers", "-o", "jsonpath={.spec.replicas}"], &["2"]),
        run(
            &["patch", "md", "workers", "--type=json", "-p", r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#],
            &["machinedeployment.cluster.x-k8s.io/workers patched"],
        ),
        run(&["get", "md", "workers", "-o", "jsonpath={.spec.replicas}"], &["3"]),
        fail(
            &["patch", "md", "workers", "-p", r#"{"spec":{"replicas":9}}"#],
            &["application/strategic-merge-patch+json is not supported by cluster.x-k8s.io/v1beta2, Kind=MachineDeployment"],
        ),
        // edit
        run(&["edit", "cm", "cfg"], &["configmap/cfg edited"]).editor("s/^  a: b$/  a: edited/"),
        run(&["get", "cm", "cfg", "-o", "jsonpath={.data.a}"], &["edited"]),
        run(&["edit", "deploy", "web"], &["deployment.apps/web edited"]).editor("s/image: nginx:1.28/image: nginx:1.29/"),
        run(&["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"], &["nginx:1.29"]),
        run(&["edit", "md", "workers"], &["machinedeployment.cluster.x-k8s.io/workers edited"]).editor("s/^  replicas: 3$/  replicas: 4/"),
        run(&["get", "md", "workers", "-o", "jsonpath={.spec.replicas}"], &["4"]),
        // replace
        run(&["replace", "-f", "{dir}/cfg-replace.yaml"], &["configmap/cfg replaced"]),
        run(&["get", "cm", "cfg", "-o", "jsonpath={.data.a} {.metadata.labels.replaced}"], &["replaced true"]),
        // scale
        run(&["scale", "deploy", "web", "--replicas=3"], &["deployment.apps/web scaled"]),
        fail(&["scale", "deploy", "web", "--current-replicas=2", "--replicas=4"], &["Expected replicas to be 2, was 3"]),
        run(&["scale", "deploy", "web", "--current-replicas=3", "--replicas=4"], &["deployment.apps/web scaled"]),
        run(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"], &["4"]),
        run(&["scale", "md", "workers", "--replicas=5"], &["machinedeployment.cluster.x-k8s.io/workers scaled"]),
        run(&["get", "md", "workers", "-o", "jsonpath={.spec.replicas}"], &["5"]),
        run(&["scale", "kcp", "cp", "--replicas=3"], &["kubeadmcontrolplane.controlplane.cluster.x-k8s.io/cp scaled"]),
        run(&["get", "kcp", "cp", "-o", "jsonpath={.spec.replicas}"], &["3"]),
        // label and annotate
        run(&["label", "cm", "cfg", "tier=a"], &["configmap/cfg labeled"]),
        fail(&["label", "cm", "cfg", "tier=b"], &["'tier' already has a value (a), and --overwrite is false"]),
        run(&["label", "cm", "cfg", "tier=b", "--overwrite"], &["configmap/cfg labeled"]),
        run(&["get", "cm", "-l", "tier=b", "-o", "name"], &["configmap/cfg"]).without(&["settings"]),
        run(&["label", "cm", "cfg", "tier-"], &["configmap/cfg unlabeled"]),
        run(&["get", "cm", "cfg", "--show-labels"], &["LABELS", "replaced=true"]).without(&["tier="]),
        run(&["annotate", "cm", "cfg", "note=hello"], &["configmap/cfg annotate"]),
        run(&["annotate", "cm", "cfg", "note=bye", "--overwrite"], &["configmap/cfg annotate"]),
        run(&["get", "cm", "cfg", "-o", "jsonpath={.metadata.annotations.note}"], &["bye"]),
        run(&["annotate", "cm", "cfg", "note-"], &["configmap/cfg annotate"]),
        run(&["get", "cm", "cfg", "-o", "jsonpath={.metadata.annotations}"], &[]).without(&["note"]),
        run(&["label", "md", "workers", "env=prod"], &["machinedeployment.cluster.x-k8s.io/workers labeled"]),
        run(&["get", "md", "-l", "env=prod", "-o", "name"], &["machinedeployment.cluster.x-k8s.io/workers"]),
        // get, every output
        run(&["scale", "deploy", "api", "--replicas=6"], &["deployment.apps/api scaled"]),
        run(&["get", "deploy"], &["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "api", "0/6", "web"]),
        run(&["get", "deploy", "-o", "wide"], &["CONTAINERS", "IMAGES", "SELECTOR", "api", "nginx", "nginx:1.27", "app=api", "web", "nginx:1.29", "app=web"]),
        run(&["get", "cm"], &["NAME", "DATA", "AGE", "cfg", "1"]),
        run(&["get", "secret", "bmc"], &["NAME", "TYPE", "DATA", "AGE", "bmc", "Opaque", "2"]),
        run(&["get", "svc", "api"], &["TYPE", "CLUSTER-IP", "PORT(S)", "api", "ClusterIP", "80/TCP"]),
        run(&["get", "deploy", "web", "-o", "json"], &["\"kind\": \"Deployment\"", "\"replicas\": 4"]),
        run(&["get", "deploy", "web", "-o", "yaml"], &["kind: Deployment", "replicas: 4"]),
        run(&["get", "deploy", "-o", "name"], &["deployment.apps/api", "deployment.apps/web"]),
        run(&["get", "deploy", "-o", "jsonpath={.items[*].metadata.name}"], &["api web"]),
        run(
            &["get", "deploy", "-o", "custom-columns=NAME:.metadata.name,REPLICAS:.spec.replicas"],
            &["NAME", "REPLICAS", "api", "6", "web", "4"],
        ),
        run(
            &["get", "deploy", "-o", "go-template={{range .items}}{{.metadata.name}}:{{.spec.replicas}} {{end}}"],
            &["api:6 web:4"],
        ),
        run(&["get", "deploy", "--sort-by=.metadata.name"], &["api", "web"]),
        run(&["get", "deploy", "--sort-by=.spec.replicas"], &["web", "api"]),
        run(&["get", "cm", "--sort-by=.metadata.name", "-o", "name"], &["configmap/cfg", "configmap/settings", "configmap/ssa"]),
        run(&["get", "cm", "--field-selector", "metadata.name=cfg", "-o", "name"], &["configmap/cfg"]).without(&["settings"]),
        run(&["get", "cm", "--field-selector", "metadata.name!=cfg", "-o", "name"], &["configmap/settings"]).without(&["configmap/cfg"]),
        run(&["get", "md", "workers"], &["NAME", "workers"]),
        // watch with selectors
        run(&["create", "configmap", "watched", "--from-literal=a=b"], &["configmap/watched created"]),
        run(&["get", "cm", "watched", "-o", "jsonpath={.metadata.resourceVersion}"], &[]).save("rv"),
        run(&["label", "cm", "watched", "watch=yes"], &["configmap/watched labeled"]),
        run(&["label", "cm", "watched", "watch-"], &["configmap/watched unlabeled"]),
        run(
            &["get", "--raw", "/api/v1/namespaces/battery/configmaps?watch=1&labelSelector=watch%3Dyes&resourceVersion={rv}&timeoutSeconds=2"],
            &["\"type\":\"ADDED\"", "\"name\":\"watched\"", "\"type\":\"DELETED\"", "\"name\":\"watched\""],
        ),
        run(&["label", "cm", "watched", "watch=yes"], &["configmap/watched labeled"]),
        run(&["get", "cm", "-l", "watch=yes", "-w", "--request-timeout=2s"], &["watched"]).without(&["cfg"]),
        run(
            &["get", "cm", "--field-selector", "metadata.name=watched", "-w", "--output-watch-events", "--request-timeout=2s"],
            &["ADDED", "watched"],
        )
        .without(&["settings"]),
        // delete with every cascade, and --wait
        run(&["create", "deployment", "d-bg", "--image=x"], &["deployment.apps/d-bg created"]),
        run(&["delete", "deploy", "d-bg", "--cascade=background"], &["deployment.apps \"d-bg\" deleted"]),
        fail(&["get", "deploy", "d-bg"], &["NotFound"]),
        run(&["create", "deployment", "d-fg", "--image=x"], &["deployment.apps/d-fg created"]),
        run(&["delete", "deploy", "d-fg", "--cascade=foreground", "--wait=false"], &["deployment.apps \"d-fg\" deleted"]),
        run(&["get", "deploy", "d-fg", "-o", "jsonpath={.metadata.finalizers} {.metadata.deletionTimestamp}"], &["[\"foregroundDeletion\"] 2"]),
        run(&["create", "deployment", "d-or", "--image=x"], &["deployment.apps/d-or created"]),
        run(&["delete", "deploy", "d-or", "--cascade=orphan", "--wait=false"], &["deployment.apps \"d-or\" deleted"]),
        run(&["get", "deploy", "d-or", "-o", "jsonpath={.metadata.finalizers} {.metadata.deletionTimestamp}"], &["[\"orphan\"] 2"]),
        // What the garbage collector of `capstan serve` does once the dependents are handled (this
        // test server runs no controllers): the finalizers go, and so do the objects.
        run(&["patch", "deploy", "d-fg", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#], &["deployment.apps/d-fg patched"]),
        run(&["patch", "deploy", "d-or", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#], &["deployment.apps/d-or patched"]),
        run(&["get", "deploy", "-o", "name"], &["deployment.apps/api"]).without(&["d-fg", "d-or"]),
        run(&["create", "configmap", "gone", "--from-literal=a=b"], &["configmap/gone created"]),
        run(&["delete", "cm", "gone", "--wait=true", "--timeout=30s"], &["configmap \"gone\" deleted"]),
        fail(&["get", "cm", "gone"], &["NotFound"]),
        // wait
        run(&["patch", "deploy", "web", "--subresource=status", "--type=merge", "-p", AVAILABLE], &["deployment.apps/web patched"]),
        run(&["wait", "deploy/web", "--for=condition=Available", "--timeout=20s"], &["deployment.apps/web condition met"]),
        run(&["wait", "deploy/web", "--for=jsonpath={.spec.replicas}=4", "--timeout=20s"], &["deployment.apps/web condition met"]),
        run(&["apply", "-f", "{dir}/held.yaml"], &["configmap/held created"]),
        run(&["delete", "cm", "held", "--wait=false"], &["configmap \"held\" deleted"]),
        fail(&["wait", "cm/held", "--for=delete", "--timeout=2s"], &["timed out"]),
        run(&["patch", "cm", "held", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#], &["configmap/held patched"]),
        run(&["wait", "cm/held", "--for=delete", "--timeout=20s"], &[]),
        fail(&["get", "cm", "held"], &["NotFound"]),
        // diff
        run(&["apply", "-f", "{dir}/diffed.yaml"], &["configmap/diffed created"]),
        run(&["diff", "-f", "{dir}/diffed.yaml"], &[]).without(&["mode"]),
        fail(&["diff", "-f", "{dir}/diffed-changed.yaml"], &["-  mode: fast", "+  mode: slow"]).without(&["generation", "annotations: {}", "resourceVersion"]),
        // explain
        run(&["explain", "deployment.spec.replicas"], &["replicas", "<integer>"]),
        run(&["explain", "pods.spec.containers.image"], &["image", "<string>"]),
        run(&["explain", "machinedeployments"], &["cluster.x-k8s.io", "MachineDeployment"]),
        run(&["explain", "bmh"], &["metal3.io", "BareMetalHost"]),
        // events
        run(&["create", "-f", "{dir}/event.yaml"], &["event/web.scaled created"]),
        run(&["events"], &["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE", "Normal", "ScalingReplicaSet", "Deployment/web", "Scaled up replica set web-1 to 1"]),
        run(&["events", "--for", "deployment/web"], &["ScalingReplicaSet"]),
        run(
            &["get", "events", "--field-selector", "involvedObject.name=web,reason=ScalingReplicaSet"],
            &["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE", "Normal", "ScalingReplicaSet", "deployment/web"],
        ),
        run(&["get", "events", "--field-selector", "reason=Nothing"], &["No resources found"]),
        // rollout
        run(&["rollout", "restart", "deploy/web"], &["deployment.apps/web restarted"]),
        run(&["get", "deploy", "web", "-o", "jsonpath={.spec.template.metadata.annotations}"], &["kubectl.kubernetes.io/restartedAt"]),
        run(&["patch", "deploy", "web", "--subresource=status", "--type=merge", "-p", AVAILABLE], &["deployment.apps/web patched"]),
        run(&["rollout", "status", "deploy/web", "--timeout=20s"], &["deployment \"web\" successfully rolled out"]),
        // namespaces
        run(&["api-resources", "--api-group=apps", "-o", "name"], &["deployments.apps"]),
        run(&["create", "namespace", "doomed"], &["namespace/doomed created"]),
        run(&["-n", "doomed", "apply", "-f", "{dir}/held-doomed.yaml"], &["configmap/held created"]),
        run(&["delete", "namespace", "doomed", "--wait=false"], &["namespace \"doomed\" deleted"]),
        run(&["get", "ns", "doomed", "-o", "jsonpath={.status.phase}"], &["Terminating"]),
        fail(&["-n", "doomed", "create", "configmap", "late"], &["because it is being terminated"]),
        run(&["-n", "doomed", "get", "cm", "-o", "name"], &["configmap/held"]),
        run(
            &["-n", "doomed", "patch", "cm", "held", "--type=json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#],
            &["configmap/held patched"],
        ),
        run(&["wait", "ns/doomed", "--for=delete", "--timeout=60s"], &[]),
        fail(&["get", "ns", "doomed"], &["NotFound"]),
        run(&["delete", "namespace", NS, "--timeout=60s"], &["namespace \"battery\" deleted"]),
        fail(&["get", "ns", NS], &["NotFound"]),
        run(&["get", "cm", "-A", "-o", "name"], &[]).without(&["configmap/cfg", "configmap/settings"]),
    ]
}

/// A shell script for `KUBE_EDITOR` that runs `sed` on the file kubectl opens.
fn editor_script(dir: &Path, index: usize, sed: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(format!("editor-{index}.sh"));
    std::fs::write(&path, format!("#!/bin/sh\nsed -i '{sed}' \"$1\"\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Runs the battery with kubectl at `binary`; returns (passed, total, failures).
fn run_battery(binary: &Path) -> (usize, usize, Vec<String>) {
    let server = start();
    let fixtures = server.dir.path().join("fixtures");
    std::fs::create_dir_all(&fixtures).unwrap();
    for (name, content) in FIXTURES {
        std::fs::write(fixtures.join(name), content).unwrap();
    }
    let steps = battery();
    let mut saved: Vec<(String, String)> = vec![("dir".into(), fixtures.display().to_string())];
    let mut passed = 0;
    let mut failures = Vec::new();
    for (index, s) in steps.iter().enumerate() {
        let substitute = |arg: &str| {
            saved.iter().fold(arg.to_owned(), |a, (k, v)| {
                a.replace(&format!("{{{k}}}"), v)
            })
        };
        let mut args: Vec<String> = Vec::new();
        if !s.args.contains(&"-n") && !s.args.contains(&"-A") {
            args.extend(["-n".to_owned(), NS.to_owned()]);
        }
        args.extend(s.args.iter().map(|a| substitute(a)));
        let mut command = Command::new(binary);
        command
            .arg("--kubeconfig")
            .arg(&server.kubeconfig)
            .args(&args)
            .env("HOME", server.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(sed) = s.editor {
            command.env("KUBE_EDITOR", editor_script(server.dir.path(), index, sed));
        }
        let mut child = command.spawn().unwrap();
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let mut rest = text.as_str();
        let in_order = s.expect.iter().all(|wanted| match rest.find(wanted) {
            Some(at) => {
                rest = &rest[at + wanted.len()..];
                true
            }
            None => false,
        });
        let good = out.status.success() != s.fails
            && in_order
            && !s.absent.iter().any(|unwanted| text.contains(unwanted));
        if let Some(name) = s.save {
            saved.push((name.to_owned(), stdout.trim().to_owned()));
        }
        if good {
            passed += 1;
        } else {
            failures.push(format!(
                "step {index}: kubectl {} (exit {:?}):\n{text}",
                args.join(" "),
                out.status.code()
            ));
        }
    }
    (passed, steps.len(), failures)
}

/// The battery with each kubectl version; prints passed/total per version, then fails listing every
/// step that did not behave as against kube-apiserver.
#[test]
fn battery_passes_with_kubectl_1_27_1_31_and_1_33() {
    let mut report = Vec::new();
    let mut all_failures = Vec::new();
    let versions: Vec<String> = match std::env::var("CAPSTAN_BATTERY_VERSIONS") {
        Ok(list) => list.split(',').map(str::to_owned).collect(),
        Err(_) => vec!["1.27".into(), "1.31".into(), "1.33".into()],
    };
    for version in &versions {
        let binary = Path::new("/usr/lib/google-cloud-sdk/bin").join(format!("kubectl.{version}"));
        assert!(binary.exists(), "{} is expected", binary.display());
        let (passed, total, failures) = run_battery(&binary);
        report.push(format!("kubectl {version}: {passed}/{total}"));
        all_failures.extend(
            failures
                .into_iter()
                .map(|f| format!("kubectl {version}: {f}")),
        );
    }
    println!("{}", report.join("\n"));
    assert!(
        all_failures.is_empty(),
        "{}\n\n{}",
        report.join("\n"),
        all_failures.join("\n\n")
    );
}
