//! ResourceQuotas of object counts through kubectl and a kube client against the API server
//! in-process over real TLS: a namespace's quota caps how many Machines, hosts and clusters its
//! users may create (403 naming the quota), `kubectl describe quota` shows what is used, a user
//! with `edit` in the namespace can neither raise nor remove the quota, racing creates cannot
//! pass a limit together, and a quota of what capstan does not count is refused.
//!
//! Every wait polls with a deadline ([`WAIT`]).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};
use support::{kubectl, ok, start};

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);

const SETUP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: team-a, namespace: team-a}
spec:
  hard:
    count/machines.cluster.x-k8s.io: 2
    count/baremetalhosts.metal3.io: "1"
    count/clusters.cluster.x-k8s.io: 1
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-edit, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
"#;

fn machine(name: &str) -> String {
    format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {{name: {name}, namespace: team-a}}
spec:
  clusterName: c
  bootstrap: {{dataSecretName: data}}
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: Metal3Machine, name: {name}}}
"#
    )
}

/// `kubectl` as user alice (impersonated by the admin).
fn as_alice(server: &support::Server, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut all = vec!["--as", "alice"];
    all.extend_from_slice(args);
    kubectl(server, &all, stdin)
}

/// Polls `kubectl describe quota team-a` until it has a line with `key`, `used` and `hard`.
fn wait_for_usage(server: &support::Server, key: &str, used: &str, hard: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let described = ok(&kubectl(
            server,
            &["describe", "quota", "team-a", "-n", "team-a"],
            None,
        ));
        let shown = described.lines().any(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words == [key, used, hard]
        });
        if shown {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "describe quota never showed {key} {used} {hard}:\n{described}"
        );
        std::thread::sleep(POLL);
    }
}

#[test]
fn quotas_cap_object_counts_per_namespace_and_report_what_is_used() {
    let server = start();
    ok(&kubectl(&server, &["apply", "-f", "-"], Some(SETUP)));
    wait_for_usage(&server, "count/machines.cluster.x-k8s.io", "0", "2");

    // Two Machines fit; the third is refused naming the quota, as kube-apiserver words it.
    for name in ["m-1", "m-2"] {
        ok(&as_alice(
            &server,
            &["create", "-f", "-"],
            Some(&machine(name)),
        ));
    }
    let refused = as_alice(&server, &["create", "-f", "-"], Some(&machine("m-3")));
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("Error from server (Forbidden)")
            && stderr.contains(r#"machines.cluster.x-k8s.io "m-3" is forbidden: exceeded quota: team-a, requested: count/machines.cluster.x-k8s.io=1, used: count/machines.cluster.x-k8s.io=2, limited: count/machines.cluster.x-k8s.io=2"#),
        "{stderr}"
    );
    wait_for_usage(&server, "count/machines.cluster.x-k8s.io", "2", "2");

    // The quota is the platform team's: a user who may edit the namespace may not change it.
    let raised = as_alice(
        &server,
        &[
            "patch",
            "quota",
            "team-a",
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            r#"{"spec":{"hard":{"count/machines.cluster.x-k8s.io":"1000"}}}"#,
        ],
        None,
    );
    assert!(!raised.status.success());
    assert!(String::from_utf8_lossy(&raised.stderr).contains("Forbidden"));
    let removed = as_alice(
        &server,
        &["delete", "quota", "team-a", "-n", "team-a"],
        None,
    );
    assert!(!removed.status.success());

    // A deleted Machine makes room again, and the status follows.
    ok(&as_alice(
        &server,
        &["delete", "machine", "m-1", "-n", "team-a"],
        None,
    ));
    wait_for_usage(&server, "count/machines.cluster.x-k8s.io", "1", "2");
    ok(&as_alice(
        &server,
        &["create", "-f", "-"],
        Some(&machine("m-3")),
    ));

    // Other namespaces are not limited by it.
    ok(&kubectl(
        &server,
        &["create", "-f", "-"],
        Some(&machine("m-4").replace("namespace: team-a", "namespace: default")),
    ));

    // The table kubectl get prints.
    let table = ok(&kubectl(&server, &["get", "quota", "-n", "team-a"], None));
    assert!(
        table.contains("count/machines.cluster.x-k8s.io: 2/2"),
        "{table}"
    );
}

#[test]
fn a_quota_of_what_capstan_does_not_count_is_refused_naming_the_key() {
    let server = start();
    let out = kubectl(
        &server,
        &[
            "create",
            "quota",
            "compute",
            "--hard=requests.cpu=4,count/machines.cluster.x-k8s.io=3",
        ],
        None,
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.hard[requests.cpu]: Unsupported value")
            && stderr.contains("count/<resource>.<group>"),
        "{stderr}"
    );
    ok(&kubectl(
        &server,
        &[
            "create",
            "quota",
            "objects",
            "--hard=count/machines.cluster.x-k8s.io=3,secrets=10",
        ],
        None,
    ));
}

#[test]
fn racing_creates_cannot_pass_a_limit_together() {
    let server = start();
    ok(&kubectl(
        &server,
        &["create", "quota", "maps", "--hard=count/configmaps=3"],
        None,
    ));
    let runtime = support::racing_runtime();
    let created = runtime.block_on(async {
        let client = server.client().await;
        let maps: Api<ConfigMap> = Api::namespaced(client, "default");
        let creates = (0..12).map(|i| {
            let maps = maps.clone();
            async move {
                let map: ConfigMap = serde_json::from_value(
                    serde_json::json!({"metadata": {"name": format!("race-{i}")}}),
                )
                .unwrap();
                maps.create(&PostParams::default(), &map).await
            }
        });
        let results = futures::future::join_all(creates).await;
        for result in &results {
            if let Err(kube::Error::Api(status)) = result {
                assert_eq!(status.code, 403, "{status:?}");
                assert!(
                    status.message.contains("exceeded quota: maps"),
                    "{status:?}"
                );
            }
        }
        results.iter().filter(|r| r.is_ok()).count()
    });
    // The namespace's system ConfigMaps count too: none are made here, so exactly three.
    assert_eq!(created, 3);
}
