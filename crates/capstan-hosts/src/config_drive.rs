//! A host's config drive: `openstack/latest/{meta_data.json,network_data.json,user_data}` on an
//! ISO 9660 filesystem labelled `config-2`, built from the Secrets the host names.
//!
//! Secret keys follow Metal3: `userData` (or `value`, as CAPI bootstrap Secrets have it),
//! `networkData`, `metaData`. `meta_data.json` carries `uuid` (the host's uid, cloud-init's
//! instance id), `name` and `hostname` (the host's name), with the metaData Secret's keys merged on
//! top and also kept under `meta`.

use capstan_model::agent::CONFIG_DRIVE_LABEL;
use serde_json::{Map, Value, json};

/// Why a config drive could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigDriveError {
    #[error(
        "{field} Secret {namespace}/{name} not found: create it or remove {field} from the host"
    )]
    SecretMissing {
        field: &'static str,
        namespace: String,
        name: String,
    },
    #[error("{field} Secret {namespace}/{name} has no {keys} key")]
    KeyMissing {
        field: &'static str,
        namespace: String,
        name: String,
        keys: &'static str,
    },
    #[error("{field} Secret {namespace}/{name}: {reason}")]
    Invalid {
        field: &'static str,
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("building the config drive image")]
    Iso(#[source] capstan_iso::IsoError),
}

/// The three documents of a config drive.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigDrive {
    pub meta_data: Value,
    pub network_data: Option<Value>,
    pub user_data: Option<Vec<u8>>,
}

impl ConfigDrive {
    /// `meta_data.json` for a host, from its uid, name and the metaData Secret's map.
    pub fn meta_data(uid: &str, name: &str, extra: Option<&Map<String, Value>>) -> Value {
        let mut meta = json!({
            "uuid": uid,
            "name": name,
            "hostname": name,
            "launch_index": 0,
            "availability_zone": "",
            "files": [],
            "public_keys": {},
        });
        if let (Some(extra), Some(object)) = (extra, meta.as_object_mut()) {
            if let Some(hostname) = extra
                .get("local-hostname")
                .or_else(|| extra.get("local_hostname"))
            {
                object.insert("hostname".into(), hostname.clone());
            }
            for (key, value) in extra {
                object.insert(key.clone(), value.clone());
            }
            object.insert("meta".into(), Value::Object(extra.clone()));
        }
        meta
    }

    /// The ISO 9660 image, labelled `config-2`.
    pub fn to_iso(&self) -> Result<Vec<u8>, ConfigDriveError> {
        let mut iso =
            capstan_iso::IsoImage::new(CONFIG_DRIVE_LABEL).map_err(ConfigDriveError::Iso)?;
        let json = |value: &Value| serde_json::to_vec_pretty(value).unwrap_or_default();
        iso.add_bytes("openstack/latest/meta_data.json", json(&self.meta_data))
            .map_err(ConfigDriveError::Iso)?;
        if let Some(network) = &self.network_data {
            iso.add_bytes("openstack/latest/network_data.json", json(network))
                .map_err(ConfigDriveError::Iso)?;
        }
        if let Some(user) = &self.user_data {
            iso.add_bytes("openstack/latest/user_data", user.clone())
                .map_err(ConfigDriveError::Iso)?;
        }
        iso.to_vec().map_err(ConfigDriveError::Iso)
    }
}

/// Reads a JSON or YAML mapping (networkData and metaData Secrets hold either).
pub fn parse_mapping(text: &str) -> Result<Value, String> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Ok(value);
    }
    let documents = capstan_manifest::parse_documents("secret", text).map_err(|e| e.to_string())?;
    match documents.into_iter().next() {
        Some(document) => Ok(document.value),
        None => Err("empty document".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_data_merges_the_secret_and_names_the_host() {
        let extra: Map<String, Value> =
            serde_json::from_value(json!({"local-hostname": "node-0", "providerid": "p"})).unwrap();
        let meta = ConfigDrive::meta_data("uid-1", "h0", Some(&extra));
        assert_eq!(meta["uuid"], "uid-1");
        assert_eq!(meta["name"], "h0");
        assert_eq!(meta["hostname"], "node-0");
        assert_eq!(meta["meta"]["providerid"], "p");
        assert_eq!(meta["providerid"], "p");
    }

    #[test]
    fn mappings_parse_from_json_or_yaml() {
        assert_eq!(parse_mapping("{\"a\": 1}").unwrap()["a"], 1);
        assert_eq!(parse_mapping("a: 1\nb: x\n").unwrap()["b"], "x");
    }
}
