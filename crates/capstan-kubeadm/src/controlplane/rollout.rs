//! Rollouts: which Machines are outdated, and replacing them one at a time.
//!
//! A Machine is outdated when its version, or the hash of `kubeadmConfigSpec` and
//! `machineTemplate` ([`ANNOTATION_SPEC_HASH`]), differs from the spec, when it was created before a
//! passed `spec.rollout.after`, or when its certificates expire within
//! `spec.rollout.before.certificatesExpiryDays` (see [`super::certificates`]). While any is, the
//! rollout creates Machines while there are fewer than `replicas + maxSurge`, else removes the oldest
//! outdated one (`maxSurge` 0: remove first, then create, which needs 3 or more replicas to keep
//! etcd's quorum). It decides after remediation (a broken Machine is replaced before healthy
//! outdated ones) and after every Machine has a Node (one change at a time), and before scaling,
//! which would otherwise remove up-to-date Machines to reach the replica count.

use super::machines::{Member, oldest};
use super::{ANNOTATION_SPEC_HASH, Decision, Refusal, Step};
use capstan_model::capi::v1beta2::Machine;
use kube::ResourceExt;
use serde_json::Value;

/// `spec.rollout.strategy.rollingUpdate.maxSurge` (a number, or a number as a string); 1 unset.
pub(super) fn max_surge(spec: &Value) -> i64 {
    spec.pointer("/rollout/strategy/rollingUpdate/maxSurge")
        .and_then(|v| {
            v.as_i64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .unwrap_or(1)
}

/// `spec.rollout.after`, once it has passed at `now`: Machines created before it are replaced.
pub(super) fn after(spec: &Value, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
    spec.pointer("/rollout/after")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .filter(|after| *after <= now)
}

/// Whether `machine` is what the spec makes now: `version`, the spec `hash`, and not created before
/// a passed `rollout_after` (certificate expiry is judged later, once it is known).
pub(super) fn is_up_to_date(
    machine: &Machine,
    version: &str,
    hash: &str,
    rollout_after: Option<jiff::Timestamp>,
) -> bool {
    machine.spec.version.as_deref() == Some(version)
        && machine
            .annotations()
            .get(ANNOTATION_SPEC_HASH)
            .map(String::as_str)
            == Some(hash)
        && !rollout_after.is_some_and(|after| {
            machine
                .metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|created| created.0 < after)
        })
}

/// The rollout's decision phase: while a Machine is outdated, surge or replace; else continue.
pub(super) fn decide(members: &[Member], replicas: i64, surge: i64) -> Decision {
    if members.iter().all(|m| m.up_to_date) {
        return Decision::Continue;
    }
    if surge == 0 && replicas < 3 {
        return Decision::Decided(Step::Refuse(Refusal {
            reason: "MaxSurgeZeroNeedsThreeReplicas",
            message: format!(
                "a rollout with maxSurge 0 removes a Machine before adding one, which with {replicas} replica(s) loses etcd quorum; set spec.rollout.strategy.rollingUpdate.maxSurge to 1 or use 3 or more replicas"
            ),
        }));
    }
    let count = i64::try_from(members.len()).unwrap_or(i64::MAX);
    if count < replicas + surge {
        return Decision::Decided(Step::Create { init: false });
    }
    Decision::Decided(
        oldest(members.iter().filter(|m| !m.up_to_date)).map_or(Step::Settled, Step::Remove),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::machines::tests::member;
    use serde_json::json;

    #[test]
    fn rollout_respects_max_surge() {
        let old = [
            member("a", true, false, "2026-01-01T00:00:00Z"),
            member("b", true, false, "2026-01-01T00:01:00Z"),
            member("c", true, true, "2026-01-01T00:02:00Z"),
        ];
        let create = Decision::Decided(Step::Create { init: false });
        let remove = |name: &str| Decision::Decided(Step::Remove(name.into()));
        // (case, members, replicas, maxSurge, decision)
        let cases: [(&str, &[Member], i64, i64, Decision); 6] = [
            ("surge 1: a new Machine first", &old, 3, 1, create),
            (
                "surge 1 and surged: the oldest outdated goes",
                &old,
                2,
                1,
                remove("a"),
            ),
            (
                "surge 0: the oldest outdated goes first",
                &old,
                3,
                0,
                remove("a"),
            ),
            (
                "surge 0, one removed: its replacement",
                &old[1..],
                3,
                0,
                Decision::Decided(Step::Create { init: false }),
            ),
            (
                "everything up to date: scaling decides",
                &old[2..],
                1,
                0,
                Decision::Continue,
            ),
            ("no Machine: scaling decides", &[], 3, 1, Decision::Continue),
        ];
        for (case, members, replicas, surge, want) in cases {
            assert_eq!(decide(members, replicas, surge), want, "{case}");
        }
    }

    #[test]
    fn max_surge_zero_needs_three_replicas() {
        for (replicas, refused) in [(1, true), (2, true), (3, false), (5, false)] {
            let members = [member("a", true, false, "2026-01-01T00:00:00Z")];
            let refusal = matches!(
                decide(&members, replicas, 0),
                Decision::Decided(Step::Refuse(Refusal {
                    reason: "MaxSurgeZeroNeedsThreeReplicas",
                    ..
                }))
            );
            assert_eq!(refusal, refused, "{replicas} replicas");
        }
    }

    #[test]
    fn max_surge_reads_numbers_and_strings() {
        let cases = [
            (json!({}), 1),
            (
                json!({"rollout": {"strategy": {"rollingUpdate": {"maxSurge": 0}}}}),
                0,
            ),
            (
                json!({"rollout": {"strategy": {"rollingUpdate": {"maxSurge": "0"}}}}),
                0,
            ),
            (
                json!({"rollout": {"strategy": {"rollingUpdate": {"maxSurge": "x"}}}}),
                1,
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(max_surge(&spec), want, "{spec}");
        }
    }

    #[test]
    fn up_to_date_is_the_version_the_hash_and_rollout_after() {
        let now: jiff::Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        let mut machine = member("a", true, true, "2026-01-01T00:00:00Z").machine;
        machine.spec.version = Some("v1.31.2".into());
        machine
            .annotations_mut()
            .insert(ANNOTATION_SPEC_HASH.into(), "h".into());
        let passed = after(&json!({"rollout": {"after": "2026-02-01T00:00:00Z"}}), now);
        let future = after(&json!({"rollout": {"after": "2026-07-01T00:00:00Z"}}), now);
        assert_eq!(
            future, None,
            "a rollout.after still to come replaces nothing yet"
        );
        let cases = [
            ("the same", "v1.31.2", "h", None, true),
            ("another version", "v1.31.3", "h", None, false),
            ("another spec", "v1.31.2", "g", None, false),
            (
                "created before a passed rollout.after",
                "v1.31.2",
                "h",
                passed,
                false,
            ),
            (
                "created after rollout.after",
                "v1.31.2",
                "h",
                after(&json!({"rollout": {"after": "2025-12-01T00:00:00Z"}}), now),
                true,
            ),
        ];
        for (case, version, hash, rollout_after, want) in cases {
            assert_eq!(
                is_up_to_date(&machine, version, hash, rollout_after),
                want,
                "{case}"
            );
        }
    }
}
