//! Request paths: `/api/v1/...` and `/apis/GROUP/VERSION/...` parsed into what they address.

/// What a resource path addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `/api` or `/apis`: the group list.
    Root,
    /// `/apis/GROUP`: one group's versions.
    Group { group: String },
    /// `/api/v1`, `/apis/GROUP/VERSION`: a resource list.
    GroupVersion { group: String, version: String },
    /// A collection, an object or an object's subresource.
    Resource(ResourcePath),
}

/// A collection (`name` absent), an object, or a subresource of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub plural: String,
    /// The namespace in the path; `None` for cluster-scoped paths and all-namespace lists.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The deprecated `/watch/` path form.
    pub watch_prefix: bool,
}

/// Parses a request path. `None` for paths that are not API paths.
pub fn parse(path: &str) -> Option<Target> {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api"] | ["apis"] => return Some(Target::Root),
        ["apis", group] => {
            return Some(Target::Group {
                group: (*group).to_owned(),
            });
        }
        ["api", version, rest @ ..] => (String::new(), (*version).to_owned(), rest),
        ["apis", group, version, rest @ ..] => ((*group).to_owned(), (*version).to_owned(), rest),
        _ => return None,
    };
    let (watch_prefix, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    let resource =
        |plural: &str, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>| {
            Some(Target::Resource(ResourcePath {
                group: group.clone(),
                version: version.clone(),
                plural: plural.to_owned(),
                namespace: namespace.map(str::to_owned),
                name: name.map(str::to_owned),
                subresource: sub.map(str::to_owned),
                watch_prefix,
            }))
        };
    match rest {
        [] if !watch_prefix => Some(Target::GroupVersion { group, version }),
        // The Namespace object itself and its subresources.
        ["namespaces", name, sub @ ("status" | "finalize")] if group.is_empty() => {
            resource("namespaces", None, Some(name), Some(sub))
        }
        ["namespaces", ns, plural] => resource(plural, Some(ns), None, None),
        ["namespaces", ns, plural, name] => resource(plural, Some(ns), Some(name), None),
        ["namespaces", ns, plural, name, sub] => resource(plural, Some(ns), Some(name), Some(sub)),
        [plural] => resource(plural, None, None, None),
        [plural, name] => resource(plural, None, Some(name), None),
        [plural, name, sub] => resource(plural, None, Some(name), Some(sub)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourcePath {
        match parse(path) {
            Some(Target::Resource(r)) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn paths() {
        assert_eq!(parse("/api"), Some(Target::Root));
        assert_eq!(
            parse("/apis/cluster.x-k8s.io"),
            Some(Target::Group {
                group: "cluster.x-k8s.io".into()
            })
        );
        assert_eq!(
            parse("/apis/metal3.io/v1alpha1"),
            Some(Target::GroupVersion {
                group: "metal3.io".into(),
                version: "v1alpha1".into()
            })
        );
        let r = res("/apis/metal3.io/v1alpha1/namespaces/default/baremetalhosts/h0/status");
        assert_eq!(
            (
                r.namespace.as_deref(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            (Some("default"), Some("h0"), Some("status"))
        );
        let ns = res("/api/v1/namespaces/default");
        assert_eq!(
            (ns.plural.as_str(), ns.name.as_deref(), ns.namespace),
            ("namespaces", Some("default"), None)
        );
        let nss = res("/api/v1/namespaces/kube-system/status");
        assert_eq!(
            (
                nss.plural.as_str(),
                nss.name.as_deref(),
                nss.subresource.as_deref()
            ),
            ("namespaces", Some("kube-system"), Some("status"))
        );
        let secrets = res("/api/v1/namespaces/default/secrets");
        assert_eq!((secrets.plural.as_str(), secrets.name), ("secrets", None));
        let all = res("/apis/cluster.x-k8s.io/v1beta1/clusters");
        assert_eq!(all.namespace, None);
        assert!(res("/api/v1/watch/namespaces/default/pods").watch_prefix);
        assert_eq!(parse("/healthz"), None);
    }
}
