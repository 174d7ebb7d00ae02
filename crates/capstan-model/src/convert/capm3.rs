//! CAPM3's `infrastructure.cluster.x-k8s.io` kinds: Metal3Cluster, Metal3Machine,
//! Metal3MachineTemplate and Metal3DataTemplate.

use serde_json::{Map, Value};

use super::ConvertError;
use super::common::{
    CONDITIONS_AND_FAILURES, StatusShape, failure_domains_down, failure_domains_up, status_down,
    status_up,
};
use super::tree::{each_item, get, join, put, rename, take, with_value};

const PROVISIONED_STATUS: StatusShape = StatusShape {
    deprecated: CONDITIONS_AND_FAILURES.deprecated,
    v1beta2: &[],
    initialization: &[("ready", "provisioned")],
};

/// Metal3Cluster, v1beta1 → v1beta2.
pub(super) fn metal3_cluster_up(object: &mut Value) -> Result<(), ConvertError> {
    with_value(object, &["spec"], "", metal3_cluster_spec_up)?;
    status_up(object, &PROVISIONED_STATUS)?;
    with_value(object, &["status"], "", |status, at| {
        failure_domains_up(status, "failureDomains", at)
    })
}

/// Metal3Cluster, v1beta2 → v1beta1.
pub(super) fn metal3_cluster_down(object: &mut Value) -> Result<(), ConvertError> {
    with_value(object, &["spec"], "", |spec, at| {
        failure_domains_down(spec, "failureDomains", at)
    })?;
    with_value(object, &["status"], "", |status, at| {
        failure_domains_down(status, "failureDomains", at)
    })?;
    status_down(object, &PROVISIONED_STATUS)
}

fn metal3_cluster_spec_up(spec: &mut Value, at: &str) -> Result<(), ConvertError> {
    failure_domains_up(spec, "failureDomains", at)?;
    // `noCloudProvider` (deprecated, removed in v1beta2) is the negation of `cloudProviderEnabled`,
    // which wins when both are set.
    if let Some(no_cloud_provider) = take(spec, &["noCloudProvider"]) {
        let Some(no_cloud_provider) = no_cloud_provider.as_bool() else {
            return Err(ConvertError::WrongType {
                path: format!("{at}.noCloudProvider"),
                expected: "a boolean",
            });
        };
        if get(spec, &["cloudProviderEnabled"]).is_none() {
            put(
                spec,
                &["cloudProviderEnabled"],
                Value::Bool(!no_cloud_provider),
                at,
            )?;
        }
    }
    Ok(())
}

/// A full `corev1.ObjectReference` → the `{name, namespace}` v1beta2 keeps of it.
fn keep_name_and_namespace(reference: &mut Value, at: &str) -> Result<(), ConvertError> {
    let fields = reference
        .as_object_mut()
        .ok_or_else(|| ConvertError::not_an_object(at))?;
    for field in ["apiVersion", "kind", "uid", "resourceVersion", "fieldPath"] {
        fields.remove(field);
    }
    Ok(())
}

/// A Metal3Machine spec (also the template of a Metal3MachineTemplate), up.
fn metal3_machine_spec_up(spec: &mut Value, at: &str) -> Result<(), ConvertError> {
    with_value(spec, &["image"], at, |image, _| {
        rename(image, "format", "diskFormat");
        Ok(())
    })?;
    with_value(spec, &["dataTemplate"], at, keep_name_and_namespace)
}

fn metal3_machine_spec_down(spec: &mut Value, at: &str) -> Result<(), ConvertError> {
    with_value(spec, &["image"], at, |image, _| {
        rename(image, "diskFormat", "format");
        Ok(())
    })
}

/// Metal3Machine, v1beta1 → v1beta2.
pub(super) fn metal3_machine_up(object: &mut Value) -> Result<(), ConvertError> {
    with_value(object, &["spec"], "", metal3_machine_spec_up)?;
    if let Some(status) = object.get_mut("status") {
        // Dropped in v1beta2 (the stash keeps it).
        take(status, &["phase"]);
        with_value(status, &["renderedData"], "status", keep_name_and_namespace)?;
    }
    status_up(object, &PROVISIONED_STATUS)
}

/// Metal3Machine, v1beta2 → v1beta1.
pub(super) fn metal3_machine_down(object: &mut Value) -> Result<(), ConvertError> {
    with_value(object, &["spec"], "", metal3_machine_spec_down)?;
    status_down(object, &PROVISIONED_STATUS)
}

/// Metal3MachineTemplate, v1beta1 → v1beta2.
pub(super) fn metal3_machine_template_up(object: &mut Value) -> Result<(), ConvertError> {
    with_value(
        object,
        &["spec", "template", "spec"],
        "",
        metal3_machine_spec_up,
    )
}

/// Metal3MachineTemplate, v1beta2 → v1beta1.
pub(super) fn metal3_machine_template_down(object: &mut Value) -> Result<(), ConvertError> {
    with_value(
        object,
        &["spec", "template", "spec"],
        "",
        metal3_machine_spec_down,
    )?;
    // v1beta1 templates carry no metadata for the Metal3Machines (the stash keeps it).
    with_value(object, &["spec", "template"], "", |template, _| {
        take(template, &["metadata"]);
        Ok(())
    })
}

/// Metal3DataTemplate `metaData` lists whose `...FromIPPool` names v1beta2 shortened to `...FromPool`.
const FROM_POOL_LISTS: [(&str, &str); 4] = [
    ("ipAddressesFromIPPool", "ipAddressesFromPool"),
    ("prefixesFromIPPool", "prefixesFromPool"),
    ("gatewaysFromIPPool", "gatewaysFromPool"),
    ("dnsServersFromIPPool", "dnsServersFromPool"),
];

/// A map → a list of `{name, <value_key>: value}` in the map's order.
fn named_list_up(
    container: &mut Value,
    key: &str,
    value_key: &str,
    at: &str,
) -> Result<(), ConvertError> {
    with_value(container, &[key], at, |value, at| {
        let Value::Object(map) = value else {
            return Err(ConvertError::not_an_object(at));
        };
        let list = std::mem::take(map)
            .into_iter()
            .map(|(name, item)| {
                let mut entry = Map::new();
                entry.insert("name".into(), Value::String(name));
                entry.insert(value_key.to_owned(), item);
                Value::Object(entry)
            })
            .collect();
        *value = Value::Array(list);
        Ok(())
    })
}

/// A list of `{name, <value_key>: value}` → a map (a later duplicate wins; a missing value is null).
fn named_list_down(
    container: &mut Value,
    key: &str,
    value_key: &str,
    at: &str,
) -> Result<(), ConvertError> {
    with_value(container, &[key], at, |value, at| {
        let Value::Array(list) = value else {
            return Err(ConvertError::WrongType {
                path: at.to_owned(),
                expected: "a list",
            });
        };
        let mut map = Map::new();
        for (index, entry) in list.iter().enumerate() {
            let Some(Value::String(name)) = entry.get("name") else {
                return Err(ConvertError::WrongType {
                    path: join(&format!("{at}[{index}]"), "name"),
                    expected: "a string",
                });
            };
            map.insert(
                name.clone(),
                entry.get(value_key).cloned().unwrap_or(Value::Null),
            );
        }
        *value = Value::Object(map);
        Ok(())
    })
}

/// Metal3DataTemplate, v1beta1 → v1beta2.
pub(super) fn metal3_data_template_up(object: &mut Value) -> Result<(), ConvertError> {
    if let Some(spec) = object.get_mut("spec") {
        // Removed in v1beta2 (the stash keeps it).
        take(spec, &["templateReference"]);
        with_value(spec, &["metaData"], "spec", |meta_data, _| {
            for (older, newer) in FROM_POOL_LISTS {
                rename(meta_data, older, newer);
            }
            Ok(())
        })?;
        each_item(
            spec,
            &["networkData", "links", "bonds"],
            "spec",
            |bond, at| named_list_up(bond, "parameters", "value", at),
        )?;
    }
    with_value(object, &["status"], "", |status, at| {
        named_list_up(status, "indexes", "index", at)
    })
}

/// Fills in the IP pool `apiGroup` and `kind` that v1beta2 defaults and v1beta1 requires.
fn pool_reference_defaults(reference: &mut Value, at: &str) -> Result<(), ConvertError> {
    let fields = reference
        .as_object_mut()
        .ok_or_else(|| ConvertError::not_an_object(at))?;
    fields
        .entry("apiGroup")
        .or_insert_with(|| Value::from("ipam.metal3.io"));
    fields
        .entry("kind")
        .or_insert_with(|| Value::from("IPPool"));
    Ok(())
}

/// Metal3DataTemplate, v1beta2 → v1beta1.
pub(super) fn metal3_data_template_down(object: &mut Value) -> Result<(), ConvertError> {
    if let Some(spec) = object.get_mut("spec") {
        with_value(spec, &["metaData"], "spec", |meta_data, at| {
            for (older, newer) in FROM_POOL_LISTS {
                each_item(meta_data, &[newer], at, pool_reference_defaults)?;
                rename(meta_data, newer, older);
            }
            Ok(())
        })?;
        with_value(
            spec,
            &["networkData", "networks"],
            "spec",
            |networks, at| {
                for family in ["ipv4", "ipv6"] {
                    each_item(networks, &[family], at, |network, at| {
                        with_value(network, &["fromPoolRef"], at, pool_reference_defaults)
                    })?;
                }
                for family in ["ipv4", "ipv4DHCP", "ipv6", "ipv6DHCP", "ipv6SLAAC"] {
                    each_item(networks, &[family], at, |network, at| {
                        each_item(network, &["routes"], at, |route, at| {
                            with_value(
                                route,
                                &["gateway", "fromPoolRef"],
                                at,
                                pool_reference_defaults,
                            )
                        })
                    })?;
                }
                Ok(())
            },
        )?;
        each_item(
            spec,
            &["networkData", "links", "bonds"],
            "spec",
            |bond, at| named_list_down(bond, "parameters", "value", at),
        )?;
    }
    with_value(object, &["status"], "", |status, at| {
        named_list_down(status, "indexes", "index", at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_cloud_provider_becomes_cloud_provider_enabled() {
        let mut object = json!({"spec": {"noCloudProvider": true}});
        metal3_cluster_up(&mut object).unwrap();
        assert_eq!(object, json!({"spec": {"cloudProviderEnabled": false}}));
        let mut both = json!({"spec": {"noCloudProvider": true, "cloudProviderEnabled": true}});
        metal3_cluster_up(&mut both).unwrap();
        assert_eq!(both, json!({"spec": {"cloudProviderEnabled": true}}));
        let mut bad = json!({"spec": {"noCloudProvider": "yes"}});
        assert!(metal3_cluster_up(&mut bad).is_err());
    }

    #[test]
    fn image_format_and_data_template() {
        let mut object = json!({"spec": {"image": {"url": "u", "format": "raw"},
            "dataTemplate": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3DataTemplate", "name": "d", "namespace": "n"}}});
        metal3_machine_up(&mut object).unwrap();
        assert_eq!(
            object,
            json!({"spec": {"image": {"url": "u", "diskFormat": "raw"}, "dataTemplate": {"name": "d", "namespace": "n"}}})
        );
    }

    #[test]
    fn data_template_lists_and_pool_names() {
        let mut object = json!({"spec": {"clusterName": "capi-1", "templateReference": "old",
            "metaData": {"ipAddressesFromIPPool": [{"key": "ip", "name": "pool", "apiGroup": "ipam.metal3.io", "kind": "IPPool"}]},
            "networkData": {"links": {"bonds": [{"id": "bond0", "bondMode": "802.3ad", "parameters": {"miimon": "100", "lacp-rate": "fast"}}]}}},
            "status": {"indexes": {"capi-1-x7k2p": 0, "capi-1-9mzfx": 1}}});
        metal3_data_template_up(&mut object).unwrap();
        assert_eq!(
            object,
            json!({"spec": {"clusterName": "capi-1",
                "metaData": {"ipAddressesFromPool": [{"key": "ip", "name": "pool", "apiGroup": "ipam.metal3.io", "kind": "IPPool"}]},
                "networkData": {"links": {"bonds": [{"id": "bond0", "bondMode": "802.3ad",
                    "parameters": [{"name": "miimon", "value": "100"}, {"name": "lacp-rate", "value": "fast"}]}]}}},
                "status": {"indexes": [{"name": "capi-1-x7k2p", "index": 0}, {"name": "capi-1-9mzfx", "index": 1}]}})
        );
        metal3_data_template_down(&mut object).unwrap();
        assert_eq!(
            object["status"]["indexes"],
            json!({"capi-1-x7k2p": 0, "capi-1-9mzfx": 1})
        );
        assert_eq!(
            object["spec"]["networkData"]["links"]["bonds"][0]["parameters"],
            json!({"miimon": "100", "lacp-rate": "fast"})
        );
        assert!(
            object["spec"]["metaData"]
                .get("ipAddressesFromIPPool")
                .is_some()
        );
        let mut bad = json!({"status": {"indexes": [{"index": 0}]}});
        assert!(metal3_data_template_down(&mut bad).is_err());
    }
}
