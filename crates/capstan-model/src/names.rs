//! The longest names of the kinds whose names capstan's controllers derive other names and label
//! values from: the one table the API server admits new objects by and `capstan render` checks a
//! spec's names by, so that a rendered bundle is never refused at apply.
//!
//! The limits follow each kind's chain of derived names:
//!
//! - a Cluster's name is the value of `cluster.x-k8s.io/cluster-name` on everything of the
//!   cluster (63);
//! - a KubeadmConfig's name is the value of `bootstrap.capstan.io/report` on its report ConfigMap
//!   (63);
//! - a MachineSet's Machines are `SET-xxxxx`, and each Machine's KubeadmConfig is named after it
//!   (63 − 6 = 57); a KubeadmControlPlane's Machines likewise (57);
//! - a MachineDeployment's MachineSets are `DEPLOYMENT-<10-character template hash>` (57 − 11 =
//!   46);
//! - a BareMetalHost's name is the value of `capstan.io/agent-session` on its agent-session
//!   Secret (63);
//! - a Metal3Machine's name gets `-networkdata` for its networkData Secret (253 − 12 = 241).

/// The most characters of a label value.
pub const LABEL_VALUE: usize = 63;
/// The most characters of an object name (a DNS subdomain).
pub const OBJECT_NAME: usize = 253;
/// What a MachineSet or KubeadmControlPlane appends for each Machine: `-` and five characters.
const MACHINE_SUFFIX: usize = 6;
/// What a MachineDeployment appends for each MachineSet: `-` and a 10-character template hash.
const SET_SUFFIX: usize = 11;
/// The KubeadmConfig of a Machine made from a template is named as the Machine.
const KUBEADM_CONFIG: usize = LABEL_VALUE;
const MACHINE_SET: usize = KUBEADM_CONFIG - MACHINE_SUFFIX;

/// How long the name of one kind may be, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameLimit {
    pub group: &'static str,
    pub kind: &'static str,
    /// The longest name whose derived names and labels all fit.
    pub max: usize,
    /// What is derived from the name that needs the bound.
    pub because: &'static str,
}

/// Every kind with a bound of its own (below the 253 characters of any name).
pub const NAME_LIMITS: &[NameLimit] = &[
    NameLimit {
        group: "cluster.x-k8s.io",
        kind: "Cluster",
        max: LABEL_VALUE,
        because: "it is the value of label cluster.x-k8s.io/cluster-name (at most 63 characters), which every object of the cluster carries",
    },
    NameLimit {
        group: "cluster.x-k8s.io",
        kind: "MachineDeployment",
        max: MACHINE_SET - SET_SUFFIX,
        because: "its MachineSets are named NAME-<10-character template hash>, and a MachineSet's name must leave room for its Machines' names (at most 57 characters, see MachineSet)",
    },
    NameLimit {
        group: "cluster.x-k8s.io",
        kind: "MachineSet",
        max: MACHINE_SET,
        because: "its Machines are named NAME-<5 characters>, and each Machine's KubeadmConfig is named as the Machine, whose name is the value of label bootstrap.capstan.io/report (at most 63 characters)",
    },
    NameLimit {
        group: "controlplane.cluster.x-k8s.io",
        kind: "KubeadmControlPlane",
        max: MACHINE_SET,
        because: "its Machines are named NAME-<5 characters>, and each Machine's KubeadmConfig is named as the Machine, whose name is the value of label bootstrap.capstan.io/report (at most 63 characters)",
    },
    NameLimit {
        group: "bootstrap.cluster.x-k8s.io",
        kind: "KubeadmConfig",
        max: KUBEADM_CONFIG,
        because: "it is the value of label bootstrap.capstan.io/report (at most 63 characters) on the config's bootstrap report ConfigMap",
    },
    NameLimit {
        group: "metal3.io",
        kind: "BareMetalHost",
        max: LABEL_VALUE,
        because: "it is the value of label capstan.io/agent-session (at most 63 characters) on the host's agent session Secret",
    },
    NameLimit {
        group: "infrastructure.cluster.x-k8s.io",
        kind: "Metal3Machine",
        max: OBJECT_NAME - "-networkdata".len(),
        because: "its networkData Secret is named NAME-networkdata, and a Secret's name has at most 253 characters",
    },
];

/// The bound on names of `group`/`kind`, when something is derived from them.
pub fn name_limit(group: &str, kind: &str) -> Option<&'static NameLimit> {
    NAME_LIMITS
        .iter()
        .find(|l| l.group == group && l.kind == kind)
}

impl NameLimit {
    /// Why `name` does not fit, when it does not: `must be no more than N characters (it has M):
    /// …`.
    pub fn refusal(&self, name: &str) -> Option<String> {
        let length = name.chars().count();
        (length > self.max).then(|| {
            format!(
                "must be no more than {} characters (it has {length}): {}",
                self.max, self.because
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_follow_the_chains_of_derived_names() {
        let max = |group, kind| name_limit(group, kind).map(|l| l.max);
        assert_eq!(max("cluster.x-k8s.io", "Cluster"), Some(63));
        assert_eq!(max("cluster.x-k8s.io", "MachineSet"), Some(57));
        assert_eq!(max("cluster.x-k8s.io", "MachineDeployment"), Some(46));
        assert_eq!(
            max("infrastructure.cluster.x-k8s.io", "Metal3Machine"),
            Some(241)
        );
        assert_eq!(max("", "ConfigMap"), None);
        // The longest deployment name still gives Machines (and their KubeadmConfigs) whose names
        // are label values.
        let machine = format!("{}-0123456789-abcde", "d".repeat(46));
        assert_eq!(machine.len(), LABEL_VALUE);
    }

    #[test]
    fn a_refusal_names_the_limit_and_the_length() {
        let limit = name_limit("cluster.x-k8s.io", "Cluster").unwrap();
        let text = limit.refusal(&"c".repeat(253)).unwrap();
        assert!(
            text.starts_with("must be no more than 63 characters (it has 253)"),
            "{text}"
        );
        assert!(text.contains("cluster.x-k8s.io/cluster-name"), "{text}");
        assert_eq!(limit.refusal(&"c".repeat(63)), None);
    }
}
