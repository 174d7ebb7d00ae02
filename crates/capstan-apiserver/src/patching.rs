//! Applying JSON patches without a way to panic.
//!
//! `json_patch::patch` undoes the applied operations when a later one fails and panics when the undo
//! itself fails (a `move` onto its own parent, then a failing `remove`, does that). The handlers
//! patch a scratch copy of the stored object and throw it away on failure, so no undo is needed:
//! the operations are applied without one, and a panic inside the library is still caught and
//! answered as an invalid patch.
//!
//! [`apply`] is the one entry for a patch document of any kind against a value; the fuzz target
//! `api_patch` drives it.

use serde_json::Value;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The patch kinds of the `Content-Type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`, for Kubernetes' own kinds.
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/apply-patch+yaml`: server-side apply.
    Apply,
}

/// Why a JSON patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// An operation failed (a missing path, a failed `test`, ...).
    #[error(transparent)]
    Operation(#[from] json_patch::PatchError),
    /// The patch library panicked; the scratch copy was discarded.
    #[error("the patch could not be applied")]
    Internal,
    /// A JSON patch that is not a list of operations.
    #[error("the JSON patch is not valid: {0}")]
    Malformed(#[source] serde_json::Error),
    /// A strategic merge patch that does not fit the object.
    #[error(transparent)]
    Strategic(#[from] crate::strategic::StrategicError),
}

/// `target` with `document` applied as a patch of `kind` (server-side apply merges, as its field
/// ownership is decided before this point).
pub fn apply(kind: PatchKind, target: &Value, document: &Value) -> Result<Value, PatchError> {
    let mut out = target.clone();
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch =
                serde_json::from_value(document.clone()).map_err(PatchError::Malformed)?;
            apply_json_patch(&mut out, &ops)?;
        }
        PatchKind::Merge | PatchKind::Apply => json_patch::merge(&mut out, document),
        PatchKind::Strategic => out = crate::strategic::apply(&out, document)?,
    }
    Ok(out)
}

/// Applies `ops` to `scratch`, a copy the caller discards on error (it is left half-patched).
pub fn apply_json_patch(
    scratch: &mut serde_json::Value,
    ops: &json_patch::Patch,
) -> Result<(), PatchError> {
    match catch_unwind(AssertUnwindSafe(|| json_patch::patch_unsafe(scratch, ops))) {
        Ok(result) => Ok(result?),
        Err(_) => Err(PatchError::Internal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ops(value: serde_json::Value) -> json_patch::Patch {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_move_onto_its_parent_then_a_failing_remove_is_an_error_not_a_panic() {
        let patch = ops(json!([
            {"op": "move", "from": "/data/k", "path": "/data"},
            {"op": "remove", "path": "/nope"}
        ]));
        let mut doc = json!({"data": {"k": "v"}});
        let err = apply_json_patch(&mut doc, &patch).unwrap_err();
        assert!(matches!(err, PatchError::Operation(_)), "{err}");
        // The library's own undo panics on this patch; that is why it is not used.
        let mut doc = json!({"data": {"k": "v"}});
        let panicked = catch_unwind(AssertUnwindSafe(|| json_patch::patch(&mut doc, &patch)));
        assert!(panicked.is_err());
    }

    #[test]
    fn a_valid_patch_applies() {
        let mut doc = json!({"a": [1, 2]});
        apply_json_patch(
            &mut doc,
            &ops(json!([{"op": "add", "path": "/a/-", "value": 3}, {"op": "test", "path": "/a/0", "value": 1}])),
        )
        .unwrap();
        assert_eq!(doc, json!({"a": [1, 2, 3]}));
    }
}
