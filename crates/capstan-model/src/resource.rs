//! The [`Resource`] trait: the static identity (group, version, kind, plural, scope) of every typed
//! object, and the macro that declares a typed top-level object.
//!
//! Typed objects carry `apiVersion` and `kind` as real fields so that a value read from a manifest
//! round-trips exactly and so that serialising an object always yields a complete, apply-ready document.
//!
//! With the `kube` feature every declared object also implements `kube::Resource` (from `kube-core`),
//! so `kube::Api<IPPool>` and the kube-runtime helpers work on the typed model directly.

/// Whether objects of a kind live in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Scope {
    /// Namespaced objects (`/apis/G/V/namespaces/NS/PLURAL/NAME`).
    Namespaced,
    /// Cluster-scoped objects (`/apis/G/V/PLURAL/NAME`).
    Cluster,
}

/// Static identity of a typed Kubernetes object.
pub trait Resource {
    /// API group; empty for the core group.
    const GROUP: &'static str;
    /// API version within the group (`v1beta1`).
    const VERSION: &'static str;
    /// `group/version`, or just the version for the core group.
    const API_VERSION: &'static str;
    /// Kind (`Cluster`).
    const KIND: &'static str;
    /// Plural resource name (`clusters`).
    const PLURAL: &'static str;
    /// Namespaced or cluster-scoped.
    const SCOPE: Scope;

    /// The object's metadata.
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// The object's metadata, mutable.
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// The object's name, or the empty string when unset.
    fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    /// The object's namespace, when set.
    fn namespace(&self) -> Option<&str> {
        self.meta().namespace.as_deref()
    }
}

/// Declares a typed top-level object with `apiVersion`, `kind`, `metadata`, `spec` and optional `status`.
///
/// ```text
/// resource!(Cluster, ClusterSpec, ClusterStatus, "cluster.x-k8s.io", "v1beta1", "clusters", Namespaced);
/// ```
#[macro_export]
macro_rules! resource {
    ($(#[$doc:meta])* $name:ident, $spec:ty, $status:ty, $group:literal, $version:literal, $plural:literal, $scope:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            /// `group/version` of this object.
            #[serde(default)]
            pub api_version: String,
            /// Kind of this object.
            #[serde(default)]
            pub kind: String,
            /// Standard object metadata.
            #[serde(default)]
            pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            /// Desired state.
            #[serde(default)]
            pub spec: $spec,
            /// Observed state, written by controllers.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: Option<$status>,
        }

        const _: () = {
            impl $crate::resource::Resource for $name {
                const GROUP: &'static str = $group;
                const VERSION: &'static str = $version;
                const API_VERSION: &'static str = concat!($group, "/", $version);
                const KIND: &'static str = stringify!($name);
                const PLURAL: &'static str = $plural;
                const SCOPE: $crate::resource::Scope = $crate::resource::Scope::$scope;
                fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    &self.metadata
                }
                fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    &mut self.metadata
                }
            }
        };

        $crate::__kube_resource!($name, $group, $version, $plural, $scope);

        impl $name {
            /// A new object with the given name and namespace (empty namespace for cluster-scoped kinds).
            pub fn new(name: impl Into<String>, namespace: Option<&str>, spec: $spec) -> Self {
                Self {
                    api_version: <Self as $crate::resource::Resource>::API_VERSION.to_owned(),
                    kind: <Self as $crate::resource::Resource>::KIND.to_owned(),
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.into()),
                        namespace: namespace.map(str::to_owned),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                }
            }
        }
    };
}

/// `kube::Resource` for a type declared with [`resource!`]; a no-op without the `kube` feature. The
/// feature is decided here, in capstan-model, whichever crate expands `resource!`.
#[cfg(feature = "kube")]
#[doc(hidden)]
#[macro_export]
macro_rules! __kube_resource {
    ($name:ident, $group:literal, $version:literal, $plural:literal, $scope:ident) => {
        impl $crate::resource::kube_core::Resource for $name {
            type DynamicType = ();
            type Scope = $crate::__kube_scope!($scope);

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed(stringify!($name))
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($group)
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($version)
            }
            fn api_version(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed(concat!($group, "/", $version))
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($plural)
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

#[cfg(not(feature = "kube"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __kube_resource {
    ($($any:tt)*) => {};
}

/// The `kube-core` scope marker type of a [`Scope`] variant.
#[cfg(feature = "kube")]
#[doc(hidden)]
#[macro_export]
macro_rules! __kube_scope {
    (Namespaced) => {
        $crate::resource::kube_core::NamespaceResourceScope
    };
    (Cluster) => {
        $crate::resource::kube_core::ClusterResourceScope
    };
}

/// Re-exported so the expansion of [`resource!`] names `kube-core` through this crate.
#[cfg(feature = "kube")]
#[doc(hidden)]
pub use kube_core;
