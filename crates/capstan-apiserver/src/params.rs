//! Request parameters with a fixed set of values (`dryRun`, `fieldValidation`,
//! `propagationPolicy`): anything else is a `400`, as from kube-apiserver, rather than being read as
//! the default.

use crate::status::ApiError;
use serde_json::Value;
use std::collections::HashMap;

const DRY_RUN: &[&str] = &["All"];
const FIELD_VALIDATION: &[&str] = &["Strict", "Warn", "Ignore"];
const PROPAGATION: &[&str] = &["Orphan", "Background", "Foreground"];

fn check(name: &str, value: &str, allowed: &[&str]) -> Result<(), ApiError> {
    if allowed.contains(&value) {
        return Ok(());
    }
    Err(ApiError::BadRequest(format!(
        "invalid {name} value {value:?}: supported values: {}",
        allowed
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// A boolean query parameter as kube-apiserver reads it (Go's `strconv.ParseBool`): `watch=True`
/// from the Python client is as true as `watch=true` from kubectl.
pub fn is_true(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "True" | "TRUE")
}

/// Checks the query's enumerated parameters (empty means "not given").
pub fn validate(query: &HashMap<String, String>) -> Result<(), ApiError> {
    for (name, allowed) in [
        ("dryRun", DRY_RUN),
        ("fieldValidation", FIELD_VALIDATION),
        ("propagationPolicy", PROPAGATION),
    ] {
        if let Some(value) = query.get(name).filter(|v| !v.is_empty()) {
            check(name, value, allowed)?;
        }
    }
    Ok(())
}

/// Checks a DeleteOptions body.
pub fn validate_delete_options(options: &Value) -> Result<(), ApiError> {
    if let Some(policy) = options["propagationPolicy"].as_str() {
        check("propagationPolicy", policy, PROPAGATION)?;
    }
    if let Some(dry_run) = options["dryRun"].as_array() {
        for value in dry_run {
            check("dryRun", value.as_str().unwrap_or_default(), DRY_RUN)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn enumerated_parameters() {
        let query = |k: &str, v: &str| HashMap::from([(k.to_owned(), v.to_owned())]);
        assert!(validate(&query("dryRun", "All")).is_ok());
        assert!(validate(&query("dryRun", "")).is_ok());
        assert!(validate(&query("dryRun", "Yes")).is_err());
        assert!(validate(&query("fieldValidation", "strict")).is_err());
        assert!(validate(&query("propagationPolicy", "Background")).is_ok());
        assert!(validate_delete_options(&json!({"propagationPolicy": "Cascade"})).is_err());
        assert!(validate_delete_options(&json!({"dryRun": ["All"]})).is_ok());
    }
}
