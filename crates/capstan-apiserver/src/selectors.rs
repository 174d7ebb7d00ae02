//! Label selectors (`env=prod,tier!=web,app in (a,b),!legacy`) and field selectors
//! (`metadata.name=x,status.phase!=Running`), parsed from query strings and matched against objects.

use std::collections::BTreeMap;

/// A malformed selector.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unable to parse selector {text:?}: {problem}")]
pub struct SelectorError {
    pub text: String,
    pub problem: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelRequirement>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn set_values(text: &str, original: &str) -> Result<Vec<String>, SelectorError> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| SelectorError {
            text: original.to_owned(),
            problem: "expected a parenthesised value list".into(),
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top_level(text) {
            let err = |problem: &str| SelectorError {
                text: text.to_owned(),
                problem: problem.to_owned(),
            };
            if let Some(key) = part.strip_prefix('!') {
                reqs.push(LabelRequirement::DoesNotExist(key.trim().to_owned()));
            } else if let Some((k, v)) = part.split_once("!=") {
                reqs.push(LabelRequirement::NotEquals(
                    k.trim().to_owned(),
                    v.trim().to_owned(),
                ));
            } else if let Some((k, v)) = part.split_once("==") {
                reqs.push(LabelRequirement::Equals(
                    k.trim().to_owned(),
                    v.trim().to_owned(),
                ));
            } else if let Some((k, v)) = part.split_once('=') {
                reqs.push(LabelRequirement::Equals(
                    k.trim().to_owned(),
                    v.trim().to_owned(),
                ));
            } else if let Some(idx) = part.find(" notin ") {
                let values = set_values(&part[idx + 7..], text)?;
                reqs.push(LabelRequirement::NotIn(
                    part[..idx].trim().to_owned(),
                    values,
                ));
            } else if let Some(idx) = part.find(" in ") {
                let values = set_values(&part[idx + 4..], text)?;
                reqs.push(LabelRequirement::In(part[..idx].trim().to_owned(), values));
            } else if part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                reqs.push(LabelRequirement::Exists(part.to_owned()));
            } else {
                return Err(err(
                    "expected key, key=value, key!=value, key in (..), key notin (..) or !key",
                ));
            }
        }
        Ok(Self(reqs))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|req| match req {
            LabelRequirement::Equals(k, v) => labels.get(k) == Some(v),
            LabelRequirement::NotEquals(k, v) => labels.get(k) != Some(v),
            LabelRequirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            LabelRequirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            LabelRequirement::Exists(k) => labels.contains_key(k),
            LabelRequirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A parsed field selector: equality and inequality on dotted paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top_level(text) {
            let (path, equal, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError {
                    text: text.to_owned(),
                    problem: format!("{part:?} is not field=value or field!=value"),
                });
            };
            reqs.push((path.trim().to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    /// Whether `object` satisfies every requirement (a missing field reads as "").
    pub fn matches(&self, object: &serde_json::Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let mut current = object;
            for seg in path.split('.') {
                current = current.get(seg).unwrap_or(&serde_json::Value::Null);
            }
            let actual = match current {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The labels of an object.
pub fn labels_of(object: &serde_json::Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn label_selector_forms() {
        let sel = LabelSelector::parse(
            "env=prod,tier!=web,app in (a, b),!legacy,cluster.x-k8s.io/cluster-name",
        )
        .unwrap();
        assert!(sel.matches(&labels(&[
            ("env", "prod"),
            ("app", "b"),
            ("cluster.x-k8s.io/cluster-name", "c")
        ])));
        assert!(!sel.matches(&labels(&[
            ("env", "prod"),
            ("app", "c"),
            ("cluster.x-k8s.io/cluster-name", "c")
        ])));
        assert!(!sel.matches(&labels(&[
            ("env", "prod"),
            ("app", "a"),
            ("legacy", "1"),
            ("cluster.x-k8s.io/cluster-name", "c")
        ])));
        let notin = LabelSelector::parse("app notin (a,b)").unwrap();
        assert!(notin.matches(&labels(&[])));
        assert!(!notin.matches(&labels(&[("app", "a")])));
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("").unwrap().is_empty());
    }

    #[test]
    fn field_selector_forms() {
        let obj = serde_json::json!({"metadata": {"name": "x", "namespace": "d"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("metadata.name=x,status.phase!=Pending")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace==e")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("spec.missing=").unwrap().matches(&obj));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
