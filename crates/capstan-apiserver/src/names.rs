//! Admission of new objects whose names capstan's controllers derive other names and label values
//! from, as Cluster API's webhooks refuse a Cluster or MachineDeployment whose name is not a valid
//! label value: a name over its kind's bound ([`capstan_model::names`], which says why each bound
//! is what it is) is refused with `422 Invalid` on `metadata.name`, naming the limit and what needs
//! it.
//!
//! Without this, such an object is stored and then nothing works: the controllers' writes of the
//! derived objects fail (a label value over 63 characters, a Secret name over 253) and only their
//! log says why. Names are immutable, so only creates are checked; objects stored before are left
//! alone.

use crate::status::{ApiError, Cause};

/// Refuses a new object of `group`/`kind` named `name` when a name or label value capstan derives
/// from it could not exist.
pub fn check_new(group: &str, kind: &str, name: &str) -> Result<(), ApiError> {
    let Some(refusal) =
        capstan_model::names::name_limit(group, kind).and_then(|limit| limit.refusal(name))
    else {
        return Ok(());
    };
    let message = format!("Invalid value: {name:?}: {refusal}");
    Err(ApiError::Invalid {
        group: group.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        summary: format!("metadata.name: {message}"),
        causes: vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: "metadata.name".into(),
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_over_the_limit_is_refused_on_metadata_name_with_the_limit() {
        let name = "c".repeat(253);
        let err = check_new("cluster.x-k8s.io", "Cluster", &name).unwrap_err();
        assert_eq!(err.code(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        let text = err.to_string();
        assert!(text.contains("metadata.name: Invalid value"), "{text}");
        assert!(
            text.contains("no more than 63 characters (it has 253)"),
            "{text}"
        );
        check_new("cluster.x-k8s.io", "Cluster", &"c".repeat(63)).unwrap();
        check_new("", "ConfigMap", &"c".repeat(253)).unwrap();
    }
}
