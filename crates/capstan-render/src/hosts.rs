//! Per-host objects: the BMC credentials Secret, the `networkData` Secret and the BareMetalHost.
//!
//! The BareMetalHost has no image: CAPM3 sets it when a machine claims the host. Its `networkData`
//! is set here, before any claim, and CAPM3 leaves it alone because the Metal3MachineTemplates have
//! no data template. Hosts are selected by capstan's own labels (`capstan.dev/cluster`, `/role`,
//! `/pool`), not by `cluster.x-k8s.io/cluster-name`, which CAPM3 removes from hosts it releases.

use std::collections::BTreeMap;
use std::path::Path;

use capstan_model::core::{ByteString, Secret};
use capstan_model::meta::SecretReference;
use capstan_model::metal3::{BareMetalHost, BareMetalHostSpec, BmcDetails, RootDeviceHints};
use serde_json::Value;

use crate::cluster::object_meta;
use crate::encode;
use crate::error::{Problem, RenderError};
use crate::network::{network_data, to_json};
use crate::spec::{self, BmcCredentials};
use crate::validate::{HostPlan, Plan};

/// Key of the network document in the `networkData` Secret.
pub const NETWORK_DATA_KEY: &str = "networkData";

/// Name of a host's BMC credentials Secret.
pub(crate) fn bmc_secret_name(host: &str) -> String {
    format!("{host}-bmc-secret")
}

/// Name of a host's `networkData` Secret.
pub(crate) fn network_data_secret_name(host: &str) -> String {
    format!("{host}-network-data")
}

/// Reads a host's BMC password from wherever the spec says it is.
pub(crate) fn resolve_password(
    plan: &Plan<'_>,
    host: &HostPlan<'_>,
    spec_dir: &Path,
) -> Result<String, Problem> {
    let credentials: &BmcCredentials = host.credentials;
    let source = &plan.spec.source;
    if let Some(password) = &credentials.password {
        return Ok(password.clone());
    }
    if let Some(file) = &credentials.password_file {
        let at = host.credentials_path.key("passwordFile");
        let path = spec_dir.join(file);
        return match std::fs::read_to_string(&path) {
            Ok(text) => {
                let password = text
                    .strip_suffix('\n')
                    .map(|t| t.strip_suffix('\r').unwrap_or(t))
                    .unwrap_or(&text);
                if password.is_empty() {
                    Err(source.problem(&at, format!("{} is empty", path.display())))
                } else {
                    Ok(password.to_owned())
                }
            }
            Err(err) => Err(source.problem(
                &at,
                format!("cannot read the password file {}: {err}", path.display()),
            )),
        };
    }
    if let Some(variable) = &credentials.password_env {
        let at = host.credentials_path.key("passwordEnv");
        return match std::env::var(variable) {
            Ok(value) if !value.is_empty() => Ok(value),
            Ok(_) => Err(source.problem(
                &at,
                format!("the environment variable {variable} is empty; export the BMC password in it"),
            )),
            Err(_) => Err(source.problem(
                &at,
                format!("the environment variable {variable} is not set; export the BMC password in it before rendering"),
            )),
        };
    }
    Err(source.problem(
        &host.credentials_path,
        "no BMC password: set password, passwordFile or passwordEnv",
    ))
}

fn root_device_hints(hints: &spec::RootDeviceHints) -> RootDeviceHints {
    RootDeviceHints {
        device_name: hints.device_name.clone(),
        hctl: hints.hctl.clone(),
        model: hints.model.clone(),
        vendor: hints.vendor.clone(),
        serial_number: hints.serial_number.clone(),
        min_size_gigabytes: hints.min_size_gigabytes.map(i64::from),
        wwn: hints.wwn.clone(),
        wwn_with_extension: hints.wwn_with_extension.clone(),
        wwn_vendor_extension: hints.wwn_vendor_extension.clone(),
        rotational: hints.rotational,
    }
}

/// The objects of `hosts/<host>.yaml`: BMC Secret, networkData Secret, BareMetalHost.
pub(crate) fn host_objects(
    plan: &Plan<'_>,
    host: &HostPlan<'_>,
    password: &str,
) -> Result<Vec<Value>, RenderError> {
    let name = &host.host.name;
    let credentials_secret = Secret {
        metadata: object_meta(plan, bmc_secret_name(name), &[]),
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([
            (
                "password".to_owned(),
                ByteString(password.as_bytes().to_vec()),
            ),
            (
                "username".to_owned(),
                ByteString(host.credentials.username.as_bytes().to_vec()),
            ),
        ])),
        ..Secret::default()
    };
    let network_secret = Secret {
        metadata: object_meta(plan, network_data_secret_name(name), &[]),
        type_: Some("Opaque".to_owned()),
        string_data: Some(BTreeMap::from([(
            NETWORK_DATA_KEY.to_owned(),
            to_json(&network_data(&host.interfaces)),
        )])),
        ..Secret::default()
    };
    let mut bmh = BareMetalHost::new(
        name.clone(),
        None,
        BareMetalHostSpec {
            online: true,
            bmc: Some(BmcDetails {
                address: host.host.bmc.address.clone(),
                credentials_name: bmc_secret_name(name),
                disable_certificate_verification: host.disable_certificate_verification,
            }),
            boot_mac_address: Some(host.boot_mac.clone()),
            network_data: Some(SecretReference {
                name: Some(network_data_secret_name(name)),
                namespace: Some(plan.spec.namespace.clone()),
            }),
            root_device_hints: host.root_device_hints.map(root_device_hints),
            ..BareMetalHostSpec::default()
        },
    );
    let mut meta = object_meta(plan, name.clone(), &[]);
    meta.labels = Some(host.labels.clone());
    bmh.metadata = meta;
    Ok(vec![
        encode(&credentials_secret)?,
        encode(&network_secret)?,
        encode(&bmh)?,
    ])
}
