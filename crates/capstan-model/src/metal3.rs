//! Metal3 bare-metal host kinds (`metal3.io/v1alpha1`): BareMetalHost, with the inspected hardware
//! in `status.hardware`, and HardwareData.

use crate::meta::{Condition, ObjectReference, SecretReference};
use crate::resource;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// API group of the Metal3 host kinds.
pub const GROUP: &str = "metal3.io";

/// How to reach and authenticate to a host's BMC.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BmcDetails {
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub credentials_name: String,
    pub disable_certificate_verification: Option<bool>,
}

/// The OS image to provision.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    #[serde(default)]
    pub url: String,
    pub checksum: Option<String>,
    pub checksum_type: Option<String>,
    pub format: Option<String>,
}

/// Hints that pick the root device to deploy the image to.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RootDeviceHints {
    pub device_name: Option<String>,
    pub hctl: Option<String>,
    pub model: Option<String>,
    pub vendor: Option<String>,
    pub serial_number: Option<String>,
    pub min_size_gigabytes: Option<i64>,
    pub wwn: Option<String>,
    pub wwn_with_extension: Option<String>,
    pub wwn_vendor_extension: Option<String>,
    pub rotational: Option<bool>,
}

/// BareMetalHost spec.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostSpec {
    #[serde(default)]
    pub online: bool,
    pub bmc: Option<BmcDetails>,
    #[serde(rename = "bootMACAddress")]
    pub boot_mac_address: Option<String>,
    pub boot_mode: Option<String>,
    pub architecture: Option<String>,
    pub automated_cleaning_mode: Option<String>,
    pub consumer_ref: Option<ObjectReference>,
    pub description: Option<String>,
    pub externally_provisioned: Option<bool>,
    pub hardware_profile: Option<String>,
    pub image: Option<Image>,
    pub inspection_mode: Option<String>,
    pub meta_data: Option<SecretReference>,
    pub network_data: Option<SecretReference>,
    pub user_data: Option<SecretReference>,
    pub preprovisioning_network_data_name: Option<String>,
    pub root_device_hints: Option<RootDeviceHints>,
    pub custom_deploy: Option<serde_json::Value>,
    pub firmware: Option<serde_json::Value>,
    pub raid: Option<serde_json::Value>,
    pub taints: Option<serde_json::Value>,
    pub disable_power_off: Option<bool>,
}

/// One network interface found by inspection.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    pub name: Option<String>,
    pub mac: Option<String>,
    pub model: Option<String>,
    pub ip: Option<String>,
    pub speed_gbps: Option<i64>,
    pub pxe: Option<bool>,
    pub vlan_id: Option<i64>,
    pub pci_address: Option<String>,
}

/// One storage device found by inspection.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternate_names: Vec<String>,
    pub model: Option<String>,
    pub vendor: Option<String>,
    pub serial_number: Option<String>,
    pub size_bytes: Option<i64>,
    pub rotational: Option<bool>,
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub hctl: Option<String>,
    pub wwn: Option<String>,
}

/// CPU details found by inspection.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    pub arch: Option<String>,
    pub model: Option<String>,
    pub clock_megahertz: Option<f64>,
    pub count: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

/// System vendor details found by inspection.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SystemVendor {
    pub manufacturer: Option<String>,
    pub product_name: Option<String>,
    pub serial_number: Option<String>,
}

/// The hardware of a host as inspection found it.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareDetails {
    pub hostname: Option<String>,
    pub cpu: Option<Cpu>,
    pub ram_mebibytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<Nic>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage: Vec<Storage>,
    pub system_vendor: Option<SystemVendor>,
    pub firmware: Option<serde_json::Value>,
}

/// The provisioning state machine's position.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionStatus {
    #[serde(default)]
    pub state: String,
    #[serde(rename = "ID", default)]
    pub id: String,
    pub image: Option<Image>,
    pub boot_mode: Option<String>,
    pub root_device_hints: Option<RootDeviceHints>,
}

/// Start and end of one lifecycle operation.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OperationMetric {
    pub start: Option<String>,
    pub end: Option<String>,
}

/// The credentials last used (by Secret name and resourceVersion, never by value).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsStatus {
    pub credentials: Option<SecretReference>,
    pub credentials_version: Option<String>,
}

/// BareMetalHost status.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostStatus {
    #[serde(default)]
    pub operational_status: String,
    pub error_type: Option<String>,
    #[serde(default)]
    pub error_message: String,
    #[serde(default)]
    pub error_count: i64,
    #[serde(default)]
    pub powered_on: bool,
    #[serde(default)]
    pub provisioning: ProvisionStatus,
    pub hardware: Option<HardwareDetails>,
    pub hardware_profile: Option<String>,
    pub last_updated: Option<String>,
    pub good_credentials: Option<CredentialsStatus>,
    pub tried_credentials: Option<CredentialsStatus>,
    #[serde(default)]
    pub operation_history: BTreeMap<String, OperationMetric>,
    #[serde(default)]
    pub provisioning_fail_count: i64,
    pub last_attempted_image: Option<Image>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

resource!(
    /// A physical (or emulated) server managed through its BMC.
    BareMetalHost, BareMetalHostSpec, BareMetalHostStatus, "metal3.io", "v1alpha1", "baremetalhosts", Namespaced
);

/// HardwareData spec: the inspected hardware, kept apart from the host.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HardwareDataSpec {
    pub hardware: Option<HardwareDetails>,
}

resource!(
    /// Hardware details of a host, as inspection reported them.
    HardwareData, HardwareDataSpec, serde_json::Value, "metal3.io", "v1alpha1", "hardwaredata", Namespaced
);

/// The BMC address schemes Metal3 knows, with whether each supports virtual media boot.
pub const BMC_SCHEMES: &[(&str, bool)] = &[
    ("ipmi", false),
    ("libvirt", false),
    ("redfish", false),
    ("redfish-virtualmedia", true),
    ("redfish-uefihttp", false),
    ("idrac", false),
    ("idrac-redfish", false),
    ("idrac-virtualmedia", true),
    ("ilo4", false),
    ("ilo4-virtualmedia", true),
    ("ilo5", false),
    ("ilo5-redfish", false),
    ("ilo5-virtualmedia", true),
    ("irmc", false),
    ("irmc-virtualmedia", true),
    ("ibmc", false),
];

/// Splits a BMC address scheme into its driver and transport (`redfish-virtualmedia+https` →
/// (`redfish-virtualmedia`, Some(`https`))). Returns `None` for a scheme Metal3 does not know.
pub fn parse_bmc_scheme(address: &str) -> Option<(&'static str, Option<&'static str>)> {
    let scheme = address.split_once("://").map_or_else(
        // ipmi accepts a bare host; Metal3 treats a schemeless address as IPMI.
        || {
            if address.is_empty() {
                None
            } else {
                Some("ipmi")
            }
        },
        |(s, _)| Some(s),
    )?;
    let (driver, transport) = match scheme.split_once('+') {
        Some((d, t)) => (d, Some(t)),
        None => (scheme, None),
    };
    let known_driver = BMC_SCHEMES
        .iter()
        .find(|(name, _)| *name == driver)
        .map(|(n, _)| *n)?;
    let transport = match transport {
        None => None,
        Some("http") => Some("http"),
        Some("https") => Some("https"),
        Some(_) => return None,
    };
    Some((known_driver, transport))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bmc_schemes() {
        assert_eq!(
            parse_bmc_scheme("redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/1"),
            Some(("redfish-virtualmedia", Some("http")))
        );
        assert_eq!(
            parse_bmc_scheme("ipmi://10.0.0.1:623"),
            Some(("ipmi", None))
        );
        assert_eq!(parse_bmc_scheme("10.0.0.1"), Some(("ipmi", None)));
        assert_eq!(parse_bmc_scheme("redfish+ftp://x"), None);
        assert_eq!(parse_bmc_scheme("vmware://x"), None);
    }
}
