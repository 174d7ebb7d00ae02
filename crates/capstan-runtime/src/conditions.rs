//! Typed status conditions (`metav1.Condition` as [`capstan_model::meta::Condition`]): set one with the
//! Kubernetes rules — `lastTransitionTime` moves only when the status changes — and read them back.

use capstan_model::meta::Condition;

/// `status` of a condition that holds.
pub const TRUE: &str = "True";
/// `status` of a condition that does not hold.
pub const FALSE: &str = "False";
/// `status` of a condition that cannot be determined.
pub const UNKNOWN: &str = "Unknown";

/// Sets (adds or replaces) the condition of `new.type_` in `conditions`. `lastTransitionTime` is kept
/// when the status did not change and set to `now` when it did (or when `new` carries none). Returns
/// whether anything changed, so a reconciler writes status only when it must.
///
/// Every condition of the list comes out with a `message` (possibly empty) and a
/// `lastTransitionTime`, as `metav1.Condition` requires them: ones stored without (before capstan
/// always wrote them, or by another writer) are completed, so the list written back is one
/// upstream's schema accepts.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition, now: &str) -> bool {
    let mut completed = false;
    for condition in conditions.iter_mut() {
        completed |= complete(condition, now);
    }
    if new.message.is_none() {
        new.message = Some(String::new());
    }
    let set = match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status == new.status {
                new.last_transition_time = existing.last_transition_time.clone();
            } else if new.last_transition_time.is_none() {
                new.last_transition_time = Some(now.to_owned());
            }
            if *existing == new {
                false
            } else {
                *existing = new;
                true
            }
        }
        None => {
            if new.last_transition_time.is_none() {
                new.last_transition_time = Some(now.to_owned());
            }
            conditions.push(new);
            true
        }
    };
    completed || set
}

/// Gives `condition` the fields `metav1.Condition` requires that it lacks (an empty message, `now`
/// as its transition time); returns whether it lacked any.
fn complete(condition: &mut Condition, now: &str) -> bool {
    let mut changed = false;
    if condition.message.is_none() {
        condition.message = Some(String::new());
        changed = true;
    }
    if condition.last_transition_time.is_none() {
        condition.last_transition_time = Some(now.to_owned());
        changed = true;
    }
    changed
}

/// A condition of `type_` with `status`, `reason` and `message`, observed at `generation`. The
/// message is always given, possibly empty, as `metav1.Condition` (upstream's `v1beta2` and
/// Metal3's conditions) requires it.
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    let message = message.into();
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        observed_generation: generation,
        last_transition_time: None,
        reason: Some(reason.to_owned()),
        message: Some(message),
        severity: None,
    }
}

/// The condition of `type_`, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present and `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// Removes the condition of `type_`; returns whether it was there.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// The current time as a Kubernetes timestamp (RFC 3339, seconds).
pub fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut conditions = Vec::new();
        assert!(set_condition(
            &mut conditions,
            condition("Ready", FALSE, "Waiting", "no address yet", Some(1)),
            "2026-01-01T00:00:00Z",
        ));
        assert!(!set_condition(
            &mut conditions,
            condition("Ready", FALSE, "Waiting", "no address yet", Some(1)),
            "2026-01-01T00:05:00Z",
        ));
        assert!(set_condition(
            &mut conditions,
            condition("Ready", FALSE, "Waiting", "still waiting", Some(2)),
            "2026-01-01T00:06:00Z",
        ));
        assert_eq!(
            get(&conditions, "Ready").and_then(|c| c.last_transition_time.as_deref()),
            Some("2026-01-01T00:00:00Z")
        );
        assert!(set_condition(
            &mut conditions,
            condition("Ready", TRUE, "Allocated", "", Some(2)),
            "2026-01-01T00:07:00Z",
        ));
        let ready = get(&conditions, "Ready").cloned().unwrap_or_default();
        assert_eq!(
            ready.last_transition_time.as_deref(),
            Some("2026-01-01T00:07:00Z")
        );
        assert_eq!(ready.message.as_deref(), Some(""));
        assert!(is_true(&conditions, "Ready"));
        assert!(!is_true(&conditions, "Other"));
        assert!(remove(&mut conditions, "Ready") && conditions.is_empty());
    }

    #[test]
    fn now_is_rfc3339_in_seconds() {
        let now = now();
        assert!(now.ends_with('Z') && !now.contains('.'), "{now}");
    }

    #[test]
    fn conditions_stored_without_message_or_transition_time_are_completed() {
        let mut conditions = vec![Condition {
            type_: "Other".into(),
            status: TRUE.into(),
            reason: Some("Fine".into()),
            ..Condition::default()
        }];
        let ready = condition("Ready", TRUE, "Ready", "", Some(1));
        assert!(set_condition(
            &mut conditions,
            ready.clone(),
            "2026-01-01T00:00:00Z"
        ));
        for c in &conditions {
            assert_eq!(c.message.as_deref(), Some(""), "{c:?}");
            assert_eq!(
                c.last_transition_time.as_deref(),
                Some("2026-01-01T00:00:00Z")
            );
        }
        // Complete, the same condition again changes nothing.
        assert!(!set_condition(
            &mut conditions,
            ready,
            "2026-01-01T00:05:00Z"
        ));
    }
}
