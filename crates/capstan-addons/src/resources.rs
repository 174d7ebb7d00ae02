//! The resources a ClusterResourceSet names: a ConfigMap's `data` or a Secret's `data` (which must be
//! of type `addons.cluster.x-k8s.io/resource-set`), each value holding one or many YAML or JSON
//! documents; their content hash; and the documents to apply.
//!
//! The hash follows Cluster API: `sha256:` and the hex SHA-256 of the values concatenated in key
//! order (Secret values decoded), so a binding written by either implementation reads the same.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The only Secret type a ClusterResourceSet applies (as in Cluster API: it keeps ordinary Secrets,
/// such as credentials, from being copied into workload clusters by mistake).
pub const RESOURCE_SET_SECRET_TYPE: &str = "addons.cluster.x-k8s.io/resource-set";

/// The kinds a ClusterResourceSet may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceKind {
    ConfigMap,
    Secret,
}

impl ResourceKind {
    /// Parses `spec.resources[].kind`.
    pub fn parse(kind: &str) -> Option<Self> {
        match kind {
            "ConfigMap" => Some(Self::ConfigMap),
            "Secret" => Some(Self::Secret),
            _ => None,
        }
    }

    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
        }
    }
}

impl std::fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a resource's data does not give documents to apply.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResourceError {
    /// A key whose value is not YAML or JSON documents. For Secrets the parser's message is withheld:
    /// it may quote the value.
    #[error("key `{key}` of {kind} {name} is not YAML or JSON documents{detail}")]
    Unparsable {
        kind: ResourceKind,
        name: String,
        key: String,
        detail: String,
    },
    #[error(
        "Secret {name} has type `{found}`; a ClusterResourceSet applies only Secrets of type `{RESOURCE_SET_SECRET_TYPE}` (recreate it with that type)"
    )]
    WrongSecretType { name: String, found: String },
}

/// The data of one ConfigMap or Secret, values as bytes, in key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceData {
    pub kind: ResourceKind,
    pub name: String,
    pub data: BTreeMap<String, Vec<u8>>,
}

/// One document to apply, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The key of the resource's data that holds it.
    pub key: String,
    /// Its position among the documents of that key (1-based).
    pub index: usize,
    /// The object.
    pub object: Value,
}

impl Document {
    /// `Kind namespace/name` (or `Kind name`), for messages.
    pub fn describe(&self) -> String {
        let kind = self.object["kind"].as_str().unwrap_or("<no kind>");
        let name = self.object["metadata"]["name"]
            .as_str()
            .unwrap_or("<no name>");
        match self.object["metadata"]["namespace"].as_str() {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        }
    }
}

impl ResourceData {
    /// The data of a ConfigMap (`data` as text, `binaryData` ignored as upstream does).
    pub fn from_config_map(config_map: &k8s_openapi::api::core::v1::ConfigMap) -> Self {
        Self {
            kind: ResourceKind::ConfigMap,
            name: config_map.metadata.name.clone().unwrap_or_default(),
            data: config_map
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()))
                .collect(),
        }
    }

    /// The data of a Secret, refused unless its type is [`RESOURCE_SET_SECRET_TYPE`].
    pub fn from_secret(secret: &k8s_openapi::api::core::v1::Secret) -> Result<Self, ResourceError> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let type_ = secret.type_.clone().unwrap_or_default();
        if type_ != RESOURCE_SET_SECRET_TYPE {
            return Err(ResourceError::WrongSecretType { name, found: type_ });
        }
        Ok(Self {
            kind: ResourceKind::Secret,
            name,
            data: secret
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect(),
        })
    }

    /// The content hash, `sha256:<hex>` over the values in key order.
    pub fn hash(&self) -> String {
        let mut hasher = Sha256::new();
        for value in self.data.values() {
            hasher.update(value);
        }
        let digest = hasher.finalize();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }

    /// Every document of every key, in key order then document order. A key that does not parse
    /// is an error for the whole resource: applying part of a key would leave the workload cluster
    /// half-configured without anyone having asked for it.
    pub fn documents(&self) -> Result<Vec<Document>, ResourceError> {
        let mut documents = Vec::new();
        for (key, bytes) in &self.data {
            let unparsable = |detail: String| ResourceError::Unparsable {
                kind: self.kind,
                name: self.name.clone(),
                key: key.clone(),
                detail,
            };
            let text = std::str::from_utf8(bytes)
                .map_err(|_| unparsable(": it is not UTF-8 text".to_owned()))?;
            let origin = format!("{} {} key {key}", self.kind, self.name);
            let loaded = capstan_manifest::load_str(&origin, text).map_err(|err| {
                unparsable(match self.kind {
                    ResourceKind::ConfigMap => format!(": {err}"),
                    ResourceKind::Secret => String::new(),
                })
            })?;
            documents.extend(loaded.into_iter().enumerate().map(|(i, object)| Document {
                key: key.clone(),
                index: i + 1,
                object: object.value,
            }));
        }
        Ok(documents)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::ObjectMeta;

    fn config_map(data: &[(&str, &str)]) -> ResourceData {
        ResourceData::from_config_map(&ConfigMap {
            metadata: ObjectMeta {
                name: Some("cni".into()),
                ..ObjectMeta::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ConfigMap::default()
        })
    }

    #[test]
    fn hash_is_sha256_of_values_in_key_order() {
        // sha256("ab"): the values of keys "x" and "y" concatenated, whatever the insertion order.
        let expected = "sha256:fb8e20fc2e4c3f248c60c39bd652f3c1347298bb977b8b4d5903b85055620603";
        assert_eq!(config_map(&[("y", "b"), ("x", "a")]).hash(), expected);
        assert_eq!(config_map(&[("x", "a"), ("y", "b")]).hash(), expected);
        assert_ne!(config_map(&[("x", "a"), ("y", "c")]).hash(), expected);
    }

    #[test]
    fn many_documents_per_key_yaml_and_json() {
        let data = config_map(&[
            (
                "a.yaml",
                "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: one, namespace: kube-system}\n---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: two}\n",
            ),
            (
                "b.json",
                r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "three"}}]}"#,
            ),
        ]);
        let documents = data.documents().unwrap();
        let described: Vec<String> = documents.iter().map(Document::describe).collect();
        assert_eq!(
            described,
            [
                "ServiceAccount kube-system/one",
                "ConfigMap two",
                "Secret three"
            ]
        );
        assert_eq!(
            (documents[1].key.as_str(), documents[1].index),
            ("a.yaml", 2)
        );
    }

    #[test]
    fn unparsable_key_names_the_key_and_withholds_secret_content() {
        let err = config_map(&[("bad.yaml", "kind: [unclosed\n")])
            .documents()
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("key `bad.yaml` of ConfigMap cni is not YAML or JSON documents: "),
            "{text}"
        );

        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("creds".into()),
                ..ObjectMeta::default()
            },
            type_: Some(RESOURCE_SET_SECRET_TYPE.into()),
            data: Some(BTreeMap::from([(
                "x".to_owned(),
                ByteString(b"password: [hunter2\n".to_vec()),
            )])),
            ..Secret::default()
        };
        let err = ResourceData::from_secret(&secret)
            .unwrap()
            .documents()
            .unwrap_err()
            .to_string();
        assert_eq!(err, "key `x` of Secret creds is not YAML or JSON documents");
    }

    #[test]
    fn only_resource_set_secrets_are_applied() {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("creds".into()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            ..Secret::default()
        };
        assert_eq!(
            ResourceData::from_secret(&secret),
            Err(ResourceError::WrongSecretType {
                name: "creds".into(),
                found: "Opaque".into()
            })
        );
    }
}
