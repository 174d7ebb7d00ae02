//! Names of new objects that capstan derives other names and label values from, refused at
//! admission when something derived could not exist, through kubectl against the API server
//! in-process over real TLS.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{kubectl, ok, start};

fn cluster(name: &str) -> String {
    format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {{name: {name}, namespace: default}}\nspec: {{paused: true}}\n"
    )
}

fn deployment(name: &str) -> String {
    format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {{name: {name}, namespace: default}}
spec:
  clusterName: c
  selector: {{matchLabels: {{pool: p}}}}
  template:
    metadata: {{labels: {{pool: p}}}}
    spec:
      clusterName: c
      bootstrap: {{dataSecretName: data}}
      infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: Metal3MachineTemplate, name: t}}
"#
    )
}

fn host(name: &str) -> String {
    format!(
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata: {{name: {name}, namespace: default}}\nspec: {{online: false}}\n"
    )
}

/// `kubectl create` of `manifest`: its stderr when refused, `None` when created.
fn refusal(server: &support::Server, manifest: &str) -> Option<String> {
    let out = kubectl(server, &["create", "-f", "-"], Some(manifest));
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn names_whose_derived_names_or_labels_cannot_exist_are_refused_with_the_limit() {
    let server = start();
    // A 253-character Cluster name is a valid object name, but not a label value.
    let long = "c".repeat(253);
    let refused = refusal(&server, &cluster(&long)).expect("a 253-character Cluster is refused");
    assert!(
        refused.contains("metadata.name: Invalid value")
            && refused.contains("must be no more than 63 characters (it has 253)")
            && refused.contains("cluster.x-k8s.io/cluster-name"),
        "{refused}"
    );
    assert_eq!(refusal(&server, &cluster(&"c".repeat(63))), None);

    // A MachineDeployment's MachineSets, and their Machines' KubeadmConfigs, are named after it.
    let refused = refusal(&server, &deployment(&"d".repeat(47))).expect("47 characters");
    assert!(
        refused.contains("must be no more than 46 characters (it has 47)"),
        "{refused}"
    );
    assert_eq!(refusal(&server, &deployment(&"d".repeat(46))), None);

    // A host's name labels its agent session Secret.
    let refused = refusal(&server, &host(&"h".repeat(64))).expect("64 characters");
    assert!(
        refused.contains("must be no more than 63 characters (it has 64)")
            && refused.contains("capstan.io/agent-session"),
        "{refused}"
    );
    assert_eq!(refusal(&server, &host(&"h".repeat(63))), None);

    // Nothing of the refused objects was stored.
    let clusters = ok(&kubectl(&server, &["get", "clusters", "-o", "name"], None));
    assert_eq!(
        clusters.trim(),
        format!("cluster.cluster.x-k8s.io/{}", "c".repeat(63))
    );
}
