//! What the spec asks for, judged before anything changes: condition `SpecAccepted`.
//!
//! Refused: `spec.replicas` below 1, and a `spec.version` more than one minor version above the
//! oldest Machine's (kubeadm upgrades one minor version at a time). Accepted with a Warning: an
//! even replica count, which Cluster API accepts, though etcd with an even member count tolerates no
//! more failures than with one member fewer. A refused spec decides the pass before anything else
//! ([`refuse`]): nothing is created or removed for a spec that is wrong. Any other refusal of the
//! pass (an unusable machine template, remediation or a rollout that would lose etcd) also shows
//! in `SpecAccepted`, and each new message is a Warning Event ([`warn`]).

use super::machines::Member;
use super::{Decision, Pass, Refusal, Step};
use crate::kubeadm_api::KubeVersion;
use capstan_model::meta::Condition;
use capstan_runtime::EventType;
use capstan_runtime::conditions::{self, FALSE, TRUE};

/// What the spec was judged to be.
#[derive(Debug)]
pub(super) struct SpecJudgement {
    /// `SpecAccepted` unless the pass refuses: `Accepted`, or `EvenReplicas`.
    accepted: Condition,
    /// Why the spec itself is refused.
    refusal: Option<Refusal>,
}

/// Judges `replicas` and `version` against the Machines there are.
pub(super) fn judge(
    replicas: i64,
    version: &str,
    members: &[Member],
    generation: Option<i64>,
) -> SpecJudgement {
    let refusal = if replicas < 1 {
        Some(Refusal {
            reason: "InvalidReplicas",
            message: format!(
                "spec.replicas is {replicas}; a control plane needs at least 1 (use 1, 3 or 5)"
            ),
        })
    } else {
        minor_skew(version, members).map(|message| Refusal {
            reason: "VersionSkewNotAllowed",
            message,
        })
    };
    let accepted = if replicas >= 2 && replicas % 2 == 0 {
        conditions::condition(
            "SpecAccepted",
            TRUE,
            "EvenReplicas",
            format!(
                "{replicas} replicas work, but etcd with an even member count tolerates no more failures than with {}; use an odd count",
                replicas - 1
            ),
            generation,
        )
    } else {
        conditions::condition("SpecAccepted", TRUE, "Accepted", "", generation)
    };
    SpecJudgement { accepted, refusal }
}

/// Why `desired` is more than one minor version above the oldest Machine's version, when it is.
fn minor_skew(desired: &str, members: &[Member]) -> Option<String> {
    let desired_version = KubeVersion::parse(desired).ok()?;
    let oldest = members
        .iter()
        .filter_map(|m| m.machine.spec.version.as_deref())
        .filter_map(|v| KubeVersion::parse(v).ok())
        .min()?;
    (desired_version.major != oldest.major || desired_version.minor > oldest.minor + 1).then(|| {
        format!(
            "spec.version {desired} is more than one minor version above the oldest Machine's {oldest}; kubeadm upgrades one minor version at a time: set v{}.{}.x first",
            oldest.major,
            oldest.minor + 1
        )
    })
}

/// The spec's decision phase: a refused spec decides the pass.
pub(super) fn refuse(judgement: &SpecJudgement) -> Decision {
    judgement
        .refusal
        .clone()
        .map_or(Decision::Continue, |refusal| {
            Decision::Decided(Step::Refuse(refusal))
        })
}

/// `SpecAccepted` after the decision: False with the refusal's reason when the pass refuses (the
/// spec's or another phase's), else as judged.
pub(super) fn accepted(
    judgement: &SpecJudgement,
    step: &Step,
    generation: Option<i64>,
) -> Condition {
    match step {
        Step::Refuse(Refusal { reason, message }) => {
            conditions::condition("SpecAccepted", FALSE, reason, message.clone(), generation)
        }
        _ => judgement.accepted.clone(),
    }
}

/// Whether `accepted` deserves a Warning Event: it refuses or warns, and says something new.
fn warns(accepted: &Condition, previous: Option<&Condition>) -> bool {
    (accepted.status == FALSE || accepted.reason.as_deref() == Some("EvenReplicas"))
        && previous.is_none_or(|p| p.message != accepted.message)
}

/// Publishes a Warning Event for a refused or warned spec, once per message: the condition repeats
/// every pass, the Event only when it changes.
pub(super) async fn warn(pass: &Pass<'_>, accepted: &Condition) {
    if warns(accepted, conditions::get(&pass.previous, "SpecAccepted")) {
        pass.context
            .publish(
                pass.kcp,
                EventType::Warning,
                accepted.reason.as_deref().unwrap_or("Refused"),
                "Validate",
                accepted.message.clone().unwrap_or_default(),
            )
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::machines::tests::member;

    fn versioned(version: &str) -> Member {
        let mut m = member("a", true, true, "2026-01-01T00:00:00Z");
        m.machine.spec.version = Some(version.into());
        m
    }

    #[test]
    fn skew_of_more_than_one_minor_is_refused() {
        // (Machine versions, spec.version, refused with the version to set first)
        let cases: [(&[&str], &str, Option<&str>); 7] = [
            (&["v1.30.2"], "v1.31.0", None),
            (&["v1.30.2"], "v1.30.9", None),
            (&["v1.30.2"], "v1.29.0", None),
            (&["v1.30.2"], "v1.32.0", Some("v1.31.x")),
            (&["v1.31.0", "v1.30.2"], "v1.32.0", Some("v1.31.x")),
            (&["v1.30.2"], "v2.30.0", Some("v1.31.x")),
            (&[], "v1.40.0", None),
        ];
        for (versions, desired, want) in cases {
            let members: Vec<Member> = versions.iter().map(|v| versioned(v)).collect();
            let skew = minor_skew(desired, &members);
            match want {
                None => assert_eq!(skew, None, "{versions:?} to {desired}"),
                Some(first) => assert!(
                    skew.as_deref().is_some_and(|m| m.contains(first)),
                    "{versions:?} to {desired}: {skew:?}"
                ),
            }
        }
    }

    #[test]
    fn replicas_are_judged_before_anything_changes() {
        // (replicas, SpecAccepted status and reason)
        let cases = [
            (0, FALSE, "InvalidReplicas"),
            (-1, FALSE, "InvalidReplicas"),
            (1, TRUE, "Accepted"),
            (2, TRUE, "EvenReplicas"),
            (3, TRUE, "Accepted"),
            (4, TRUE, "EvenReplicas"),
            (5, TRUE, "Accepted"),
        ];
        for (replicas, status, reason) in cases {
            let judgement = judge(replicas, "v1.31.0", &[], Some(1));
            let step = refuse(&judgement).step();
            let condition = accepted(&judgement, &step, Some(1));
            assert_eq!(
                (condition.status.as_str(), condition.reason.as_deref()),
                (status, Some(reason)),
                "{replicas} replicas"
            );
        }
        let even = judge(4, "v1.31.0", &[], None);
        assert_eq!(
            even.accepted.message.as_deref(),
            Some(
                "4 replicas work, but etcd with an even member count tolerates no more failures than with 3; use an odd count"
            )
        );
    }

    #[test]
    fn any_refusal_of_the_pass_shows_in_spec_accepted() {
        let judgement = judge(3, "v1.31.0", &[], None);
        let step = Step::Refuse(Refusal {
            reason: "MaxSurgeZeroNeedsThreeReplicas",
            message: "m".into(),
        });
        let condition = accepted(&judgement, &step, None);
        assert_eq!(condition.status, FALSE);
        assert_eq!(
            condition.reason.as_deref(),
            Some("MaxSurgeZeroNeedsThreeReplicas")
        );
        assert_eq!(condition.message.as_deref(), Some("m"));
        let settled = accepted(&judgement, &Step::Settled, None);
        assert_eq!(settled.reason.as_deref(), Some("Accepted"));
    }

    #[test]
    fn a_warning_is_published_once_per_message() {
        let refused = conditions::condition("SpecAccepted", FALSE, "InvalidReplicas", "a", None);
        let other = conditions::condition("SpecAccepted", FALSE, "InvalidReplicas", "b", None);
        let even = conditions::condition("SpecAccepted", TRUE, "EvenReplicas", "e", None);
        let fine = conditions::condition("SpecAccepted", TRUE, "Accepted", "", None);
        // (now, before, warned)
        let cases = [
            (&refused, None, true),
            (&refused, Some(&refused), false),
            (&refused, Some(&other), true),
            (&even, Some(&fine), true),
            (&even, Some(&even), false),
            (&fine, Some(&refused), false),
            (&fine, None, false),
        ];
        for (now, before, want) in cases {
            assert_eq!(warns(now, before), want, "{now:?} after {before:?}");
        }
    }
}
