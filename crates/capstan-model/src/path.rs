//! Field paths inside an object (`spec.template.spec.hostSelector.matchLabels`, `spec.users[0].name`).
//!
//! One type names a place in an object for every consumer: schema violations, lint diagnostics, render
//! errors and the position index that maps a path back to a `file:line`.

use std::fmt;

/// One step of a [`FieldPath`]: a mapping key or a sequence index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathSegment {
    /// A key of a mapping.
    Key(String),
    /// An index into a sequence.
    Index(usize),
}

/// A path from the root of an object to one of its fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(Vec<PathSegment>);

impl FieldPath {
    /// The empty path: the object itself.
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// Parses a dotted path such as `spec.users[0].name`. Keys that contain dots cannot be written in
    /// this form; build such paths with [`FieldPath::key`].
    pub fn parse(text: &str) -> Self {
        let mut path = Self::root();
        for part in text.split('.').filter(|p| !p.is_empty()) {
            let (key, rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !key.is_empty() {
                path.0.push(PathSegment::Key(key.to_owned()));
            }
            for idx in rest.split('[').filter(|s| !s.is_empty()) {
                match idx.trim_end_matches(']').parse() {
                    Ok(i) => path.0.push(PathSegment::Index(i)),
                    Err(_) => path
                        .0
                        .push(PathSegment::Key(idx.trim_end_matches(']').to_owned())),
                }
            }
        }
        path
    }

    /// This path extended by a mapping key.
    #[must_use]
    pub fn key(&self, key: impl Into<String>) -> Self {
        let mut next = self.clone();
        next.0.push(PathSegment::Key(key.into()));
        next
    }

    /// This path extended by a sequence index.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.0.push(PathSegment::Index(index));
        next
    }

    /// The path one step up, or `None` at the root.
    pub fn parent(&self) -> Option<Self> {
        let (_, rest) = self.0.split_last()?;
        Some(Self(rest.to_vec()))
    }

    /// The steps of this path.
    pub fn segments(&self) -> &[PathSegment] {
        &self.0
    }

    /// Whether this is the root path.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// Looks the path up in a JSON value.
    pub fn lookup<'a>(&self, value: &'a serde_json::Value) -> Option<&'a serde_json::Value> {
        self.0.iter().try_fold(value, |v, seg| match seg {
            PathSegment::Key(k) => v.get(k.as_str()),
            PathSegment::Index(i) => v.get(*i),
        })
    }

    /// The RFC 6901 JSON pointer form (`/spec/users/0/name`), as JSON patch uses.
    pub fn to_json_pointer(&self) -> String {
        let mut out = String::new();
        for seg in &self.0 {
            out.push('/');
            match seg {
                PathSegment::Key(k) => out.push_str(&k.replace('~', "~0").replace('/', "~1")),
                PathSegment::Index(i) => out.push_str(&i.to_string()),
            }
        }
        out
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("<root>");
        }
        for (n, seg) in self.0.iter().enumerate() {
            match seg {
                PathSegment::Key(k) if k.contains('.') || k.contains('[') => write!(f, "[{k:?}]")?,
                PathSegment::Key(k) if n == 0 => f.write_str(k)?,
                PathSegment::Key(k) => write!(f, ".{k}")?,
                PathSegment::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

impl From<&str> for FieldPath {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for text in ["spec.users[0].name", "metadata.labels", "items[3][1].x"] {
            assert_eq!(FieldPath::parse(text).to_string(), text);
        }
        assert_eq!(FieldPath::root().to_string(), "<root>");
    }

    #[test]
    fn keys_with_dots_are_bracketed() {
        let p = FieldPath::parse("metadata.labels").key("cluster.x-k8s.io/cluster-name");
        assert_eq!(
            p.to_string(),
            r#"metadata.labels["cluster.x-k8s.io/cluster-name"]"#
        );
        assert_eq!(
            p.to_json_pointer(),
            "/metadata/labels/cluster.x-k8s.io~1cluster-name"
        );
    }

    #[test]
    fn lookup_follows_keys_and_indices() {
        let v = serde_json::json!({"spec": {"users": [{"name": "a"}]}});
        assert_eq!(
            FieldPath::parse("spec.users[0].name").lookup(&v),
            Some(&serde_json::json!("a"))
        );
        assert_eq!(FieldPath::parse("spec.users[1]").lookup(&v), None);
        assert_eq!(
            FieldPath::parse("spec.users[0].name").parent(),
            Some(FieldPath::parse("spec.users[0]"))
        );
    }
}
