//! Object keys: which resource (`group/plural`), which namespace (empty for cluster-scoped), which name.

use std::fmt;

/// The identity of a stored object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// `group/plural` (`cluster.x-k8s.io/clusters`), or `/plural` for the core group.
    pub resource: String,
    /// The namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// A key in `namespace` (empty for cluster-scoped).
    pub fn new(
        resource: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.resource, self.name)
        } else {
            write!(f, "{} {}/{}", self.resource, self.namespace, self.name)
        }
    }
}
