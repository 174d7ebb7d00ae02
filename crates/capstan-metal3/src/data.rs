//! Per-machine metaData and networkData from a Metal3DataTemplate, with addresses from IPPools.
//!
//! For a Metal3Machine with `spec.dataTemplate`, each pass of the machine moves one step along
//! CAPM3's chain: a Metal3DataClaim `<m3m>` (owned by the machine) → a Metal3Data
//! `<template>-<index>` (owned by the claim, the lowest index free in the template; the name makes
//! two claims for one index collide at the API server) → one IPClaim `<data>-<pool>` per IPPool the
//! template names (owned by the Metal3Data; capstan's IPAM controller allocates the address, so node
//! addresses, the VIP and LoadBalancer pools share one source) → the rendering: metaData keys merged
//! into the host's `<m3m>-metadata` Secret and `network_data.json` in Secret `<m3m>-networkdata`.
//! Deleting the machine deletes the claim, and owner references take the rest (the IPClaim's
//! finalizer returns the address to its pool).
//!
//! Supported template fields — metaData: `strings`, `objectNames`, `indexes`,
//! `ipAddressesFrom{IPPool,Pool}`, `prefixesFrom{IPPool,Pool}`, `gatewaysFrom{IPPool,Pool}`,
//! `dnsServersFrom{IPPool,Pool}`; networkData: `links.ethernets` (`id`, `type`, `mtu`,
//! `macAddress.string` / `.fromHostInterface`), `networks.ipv4` (`id`, `link`,
//! `ipAddressFromIPPool` / `fromPoolRef`, `routes` with `gateway.string` / `.fromIPPool`) and
//! `services.dns`. Anything else in a template is ignored.

use crate::{Metal3Error, api};
use capstan_infra::{Progress, Waiting};
use capstan_model::capm3::v1beta2::{
    Metal3Data, Metal3DataClaim, Metal3DataTemplate, Metal3Machine,
};
use capstan_model::ipam::{IPAddress, IPClaim};
use capstan_model::meta::{LABEL_CLUSTER_NAME, SecretReference};
use capstan_model::metal3::BareMetalHost;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

/// Label on a Metal3Data naming the Metal3DataClaim (and so the Metal3Machine) it renders for.
pub const LABEL_DATA_CLAIM: &str = "infrastructure.cluster.x-k8s.io/data-claim";
/// Label on a Metal3Data naming its template.
pub const LABEL_DATA_TEMPLATE: &str = "infrastructure.cluster.x-k8s.io/data-template";

/// What a machine's Metal3Data rendered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RenderedData {
    /// metaData keys, merged into the host's metaData Secret.
    pub meta_data: Map<String, Value>,
    /// The Secret with `networkData`, when the template has networkData.
    pub network_data_secret: Option<String>,
}

/// The networkData Secrets this provider may have pointed a host at for `machine`.
pub fn network_data_names(machine: &str) -> Vec<String> {
    vec![format!("{machine}-networkdata")]
}

fn owner(api_version: &str, kind: &str, meta: &ObjectMeta) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The pools a template names, by where they appear.
pub fn pools_of(template: &Value) -> BTreeSet<String> {
    let mut pools = BTreeSet::new();
    let meta = &template["metaData"];
    for list in [
        "ipAddressesFromIPPool",
        "ipAddressesFromPool",
        "prefixesFromIPPool",
        "prefixesFromPool",
        "gatewaysFromIPPool",
        "gatewaysFromPool",
        "dnsServersFromIPPool",
        "dnsServersFromPool",
    ] {
        for entry in meta[list].as_array().into_iter().flatten() {
            if let Some(name) = entry["name"].as_str() {
                pools.insert(name.to_owned());
            }
        }
    }
    for network in template["networkData"]["networks"]["ipv4"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(pool) = ipv4_pool(network) {
            pools.insert(pool);
        }
        for route in network["routes"].as_array().into_iter().flatten() {
            if let Some(pool) = route["gateway"]["fromIPPool"].as_str() {
                pools.insert(pool.to_owned());
            }
        }
    }
    pools
}

fn ipv4_pool(network: &Value) -> Option<String> {
    network["ipAddressFromIPPool"]
        .as_str()
        .or_else(|| network["fromPoolRef"]["name"].as_str())
        .or_else(|| network["ipAddressFromPool"].as_str())
        .map(str::to_owned)
}

/// One allocated address as the template reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allocation {
    pub address: String,
    pub prefix: Option<i32>,
    pub gateway: Option<String>,
    pub dns_servers: Vec<String>,
}

fn netmask(prefix: i32) -> String {
    let bits = u32::try_from(prefix.clamp(0, 32)).unwrap_or(0);
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    Ipv4Addr::from(mask).to_string()
}

/// The rendering of `template` (its spec, as JSON) for machine `index`.
pub fn render(
    template: &Value,
    index: i32,
    names: &BTreeMap<&str, String>,
    host: &BareMetalHost,
    addresses: &BTreeMap<String, Allocation>,
) -> (Map<String, Value>, Option<Value>) {
    let meta = &template["metaData"];
    let mut out = Map::new();
    for entry in meta["strings"].as_array().into_iter().flatten() {
        if let (Some(k), Some(v)) = (entry["key"].as_str(), entry["value"].as_str()) {
            out.insert(k.into(), json!(v));
        }
    }
    for entry in meta["objectNames"].as_array().into_iter().flatten() {
        if let (Some(k), Some(object)) = (entry["key"].as_str(), entry["object"].as_str())
            && let Some(name) = names.get(object.to_ascii_lowercase().as_str())
        {
            out.insert(k.into(), json!(name));
        }
    }
    for entry in meta["indexes"].as_array().into_iter().flatten() {
        if let Some(k) = entry["key"].as_str() {
            let offset = entry["offset"].as_i64().unwrap_or(0);
            let step = entry["step"].as_i64().unwrap_or(1);
            let value = offset + step * i64::from(index);
            let prefix = entry["prefix"].as_str().unwrap_or_default();
            let suffix = entry["suffix"].as_str().unwrap_or_default();
            out.insert(k.into(), json!(format!("{prefix}{value}{suffix}")));
        }
    }
    let from_pool = |lists: [&str; 2],
                     pick: &dyn Fn(&Allocation) -> Option<Value>,
                     out: &mut Map<String, Value>| {
        for list in lists {
            for entry in meta[list].as_array().into_iter().flatten() {
                if let (Some(k), Some(pool)) = (entry["key"].as_str(), entry["name"].as_str())
                    && let Some(value) = addresses.get(pool).and_then(pick)
                {
                    out.insert(k.into(), value);
                }
            }
        }
    };
    from_pool(
        ["ipAddressesFromIPPool", "ipAddressesFromPool"],
        &|a| Some(json!(a.address)),
        &mut out,
    );
    from_pool(
        ["prefixesFromIPPool", "prefixesFromPool"],
        &|a| a.prefix.map(|p| json!(p)),
        &mut out,
    );
    from_pool(
        ["gatewaysFromIPPool", "gatewaysFromPool"],
        &|a| a.gateway.clone().map(Value::from),
        &mut out,
    );
    from_pool(
        ["dnsServersFromIPPool", "dnsServersFromPool"],
        &|a| Some(json!(a.dns_servers)),
        &mut out,
    );

    let network = &template["networkData"];
    if network.is_null() {
        return (out, None);
    }
    let nics = host
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .map(|h| h.nics.clone())
        .unwrap_or_default();
    let mut links = Vec::new();
    for link in network["links"]["ethernets"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mac = link["macAddress"]["string"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| {
                let interface = link["macAddress"]["fromHostInterface"].as_str()?;
                nics.iter()
                    .find(|n| n.name.as_deref() == Some(interface))
                    .and_then(|n| n.mac.clone())
            });
        let mut rendered =
            json!({"id": link["id"], "type": link["type"].as_str().unwrap_or("phy")});
        if let Some(mac) = mac {
            rendered["ethernet_mac_address"] = json!(mac);
        }
        if let Some(mtu) = link["mtu"].as_i64() {
            rendered["mtu"] = json!(mtu);
        }
        links.push(rendered);
    }
    let mut networks = Vec::new();
    for net in network["networks"]["ipv4"].as_array().into_iter().flatten() {
        let Some(allocation) = ipv4_pool(net).and_then(|p| addresses.get(&p).cloned()) else {
            continue;
        };
        let mut routes = Vec::new();
        for route in net["routes"].as_array().into_iter().flatten() {
            let gateway = route["gateway"]["string"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| {
                    addresses
                        .get(route["gateway"]["fromIPPool"].as_str()?)?
                        .gateway
                        .clone()
                });
            let prefix = i32::try_from(route["prefix"].as_i64().unwrap_or(0)).unwrap_or(0);
            routes.push(json!({
                "network": route["network"].as_str().unwrap_or("0.0.0.0"),
                "netmask": netmask(prefix),
                "gateway": gateway,
            }));
        }
        networks.push(json!({
            "id": net["id"],
            "type": "ipv4",
            "link": net["link"],
            "ip_address": allocation.address,
            "netmask": netmask(allocation.prefix.unwrap_or(24)),
            "routes": routes,
        }));
    }
    let services: Vec<Value> = network["services"]["dns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|address| json!({"type": "dns", "address": address}))
        .collect();
    (
        out,
        Some(json!({"links": links, "networks": networks, "services": services})),
    )
}

/// One step towards `machine`'s rendered data: `Done(None)` without a data template.
pub async fn rendered_data(
    client: &Client,
    machine: &Metal3Machine,
    host: &BareMetalHost,
) -> Result<Progress<Option<RenderedData>>, Metal3Error> {
    let Some(template_name) = machine
        .spec
        .data_template
        .as_ref()
        .and_then(|t| t.name.clone())
    else {
        return Ok(Progress::Done(None));
    };
    let namespace = machine.namespace().unwrap_or_default();
    let name = machine.name_any();
    let cluster = machine.labels().get(LABEL_CLUSTER_NAME).cloned();
    let mut labels = BTreeMap::new();
    if let Some(cluster) = &cluster {
        labels.insert(LABEL_CLUSTER_NAME.to_owned(), cluster.clone());
    }
    let templates: Api<Metal3DataTemplate> = Api::namespaced(client.clone(), &namespace);
    let Some(template) = templates.get_opt(&template_name).await.map_err(api(
        "reading",
        "Metal3DataTemplate",
        &namespace,
        &template_name,
    ))?
    else {
        return Ok(Progress::Waiting(Waiting::new(
            "DataTemplateMissing",
            format!(
                "Metal3DataTemplate {namespace}/{template_name} (spec.dataTemplate) does not exist: create it or remove spec.dataTemplate"
            ),
        )));
    };
    // The claim.
    let claims: Api<Metal3DataClaim> = Api::namespaced(client.clone(), &namespace);
    let claim = match claims.get_opt(&name).await.map_err(api(
        "reading",
        "Metal3DataClaim",
        &namespace,
        &name,
    ))? {
        Some(claim) => claim,
        None => {
            let mut claim = Metal3DataClaim::new(&name, Some(&namespace), Default::default());
            claim.spec.template.name = Some(template_name.clone());
            claim.metadata.labels = Some(labels.clone());
            claim.metadata.owner_references =
                owner(&machine.api_version, "Metal3Machine", &machine.metadata).map(|o| vec![o]);
            match claims.create(&PostParams::default(), &claim).await {
                Ok(created) => created,
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    return Ok(Progress::Waiting(Waiting::new(
                        "WaitingForData",
                        "Metal3DataClaim created meanwhile",
                    )));
                }
                Err(err) => return Err(api("creating", "Metal3DataClaim", &namespace, &name)(err)),
            }
        }
    };
    // The data, at the lowest free index of the template.
    let datas: Api<Metal3Data> = Api::namespaced(client.clone(), &namespace);
    let of_template = datas
        .list(&ListParams::default().labels(&format!("{LABEL_DATA_TEMPLATE}={template_name}")))
        .await
        .map_err(api("listing", "Metal3Data", &namespace, ""))?
        .items;
    let data = match of_template
        .iter()
        .find(|d| d.spec.claim.name.as_deref() == Some(name.as_str()))
    {
        Some(data) => data.clone(),
        None => {
            let used: BTreeSet<i32> = of_template.iter().map(|d| d.spec.index).collect();
            let index = (0..).find(|i| !used.contains(i)).unwrap_or_default();
            let data_name = format!("{template_name}-{index}");
            let mut data = Metal3Data::new(&data_name, Some(&namespace), Default::default());
            data.spec.index = index;
            data.spec.claim = capstan_model::meta::ObjectReference {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            };
            data.spec.template.name = Some(template_name.clone());
            data.spec.meta_data = Some(SecretReference {
                name: Some(crate::machine::meta_data_secret(&name)),
                namespace: Some(namespace.clone()),
            });
            if !template
                .spec
                .network_data
                .as_ref()
                .is_none_or(Value::is_null)
            {
                data.spec.network_data = Some(SecretReference {
                    name: network_data_names(&name).into_iter().next(),
                    namespace: Some(namespace.clone()),
                });
            }
            let mut data_labels = labels.clone();
            data_labels.insert(LABEL_DATA_TEMPLATE.to_owned(), template_name.clone());
            data_labels.insert(LABEL_DATA_CLAIM.to_owned(), name.clone());
            data.metadata.labels = Some(data_labels);
            data.metadata.owner_references =
                owner(&claim.api_version, "Metal3DataClaim", &claim.metadata).map(|o| vec![o]);
            return match crate::tolerate_conflict(datas.create(&PostParams::default(), &data).await)
            {
                Ok(()) => Ok(Progress::Waiting(Waiting::new(
                    "WaitingForData",
                    format!("Metal3Data {namespace}/{data_name} requested"),
                ))),
                Err(err) => Err(api("creating", "Metal3Data", &namespace, &data_name)(err)),
            };
        }
    };
    let data_name = data.name_any();
    // The addresses.
    let template_value = serde_json::to_value(&template.spec).unwrap_or(Value::Null);
    let ip_claims: Api<IPClaim> = Api::namespaced(client.clone(), &namespace);
    let ip_addresses: Api<IPAddress> = Api::namespaced(client.clone(), &namespace);
    let mut allocations = BTreeMap::new();
    let mut missing = Vec::new();
    for pool in pools_of(&template_value) {
        let claim_name = format!("{data_name}-{pool}");
        let found = ip_claims.get_opt(&claim_name).await.map_err(api(
            "reading",
            "IPClaim",
            &namespace,
            &claim_name,
        ))?;
        let Some(ip_claim) = found else {
            let mut ip_claim = IPClaim::new(&claim_name, Some(&namespace), Default::default());
            ip_claim.spec.pool.name = Some(pool.clone());
            ip_claim.spec.pool.namespace = Some(namespace.clone());
            ip_claim.metadata.labels = Some(labels.clone());
            ip_claim.metadata.owner_references =
                owner(&data.api_version, "Metal3Data", &data.metadata).map(|o| vec![o]);
            match crate::tolerate_conflict(
                ip_claims.create(&PostParams::default(), &ip_claim).await,
            ) {
                Ok(()) => {}
                Err(err) => return Err(api("creating", "IPClaim", &namespace, &claim_name)(err)),
            }
            missing.push(format!("{pool} (IPClaim {claim_name} created)"));
            continue;
        };
        let status = ip_claim.status.clone().unwrap_or_default();
        if let Some(error) = status.error_message.filter(|e| !e.is_empty()) {
            missing.push(format!("{pool}: {error}"));
            continue;
        }
        let Some(address_name) = status.address.and_then(|a| a.name) else {
            missing.push(format!(
                "{pool} (IPClaim {claim_name} waiting for an address)"
            ));
            continue;
        };
        let Some(address) = ip_addresses.get_opt(&address_name).await.map_err(api(
            "reading",
            "IPAddress",
            &namespace,
            &address_name,
        ))?
        else {
            missing.push(format!("{pool} (IPAddress {address_name} missing)"));
            continue;
        };
        allocations.insert(
            pool,
            Allocation {
                address: address.spec.address,
                prefix: address.spec.prefix,
                gateway: address.spec.gateway,
                dns_servers: address.spec.dns_servers.unwrap_or_default(),
            },
        );
    }
    if !missing.is_empty() {
        return Ok(Progress::Waiting(
            Waiting::new(
                "WaitingForIPAddress",
                format!("waiting for addresses from IPPools: {}", missing.join("; ")),
            )
            .retry_after(std::time::Duration::from_secs(2)),
        ));
    }
    let mut names = BTreeMap::new();
    names.insert("metal3machine", name.clone());
    names.insert("baremetalhost", host.name_any());
    if let Some(owner) = crate::owner_machine(machine) {
        names.insert("machine", owner);
    }
    let (meta_data, network) = render(&template_value, data.spec.index, &names, host, &allocations);
    let network_data_secret = match network {
        Some(network) => {
            let secret_name = network_data_names(&name)
                .into_iter()
                .next()
                .unwrap_or_default();
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
            let bytes = ByteString(serde_json::to_vec(&network).unwrap_or_default());
            let current = secrets.get_opt(&secret_name).await.map_err(api(
                "reading",
                "Secret",
                &namespace,
                &secret_name,
            ))?;
            if current.is_none() {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(secret_name.clone()),
                        namespace: Some(namespace.clone()),
                        labels: Some(labels.clone()),
                        owner_references: owner(&data.api_version, "Metal3Data", &data.metadata)
                            .map(|o| vec![o]),
                        ..Default::default()
                    },
                    data: Some([("networkData".to_owned(), bytes)].into()),
                    type_: Some("Opaque".into()),
                    ..Default::default()
                };
                match crate::tolerate_conflict(
                    secrets.create(&PostParams::default(), &secret).await,
                ) {
                    Ok(()) => {}
                    Err(err) => {
                        return Err(api("creating", "Secret", &namespace, &secret_name)(err));
                    }
                }
            }
            Some(secret_name)
        }
        None => None,
    };
    if data.status.as_ref().and_then(|s| s.ready) != Some(true) {
        let patch = json!({"status": {"ready": true}});
        datas
            .patch_status(&data_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api(
                "patching status of",
                "Metal3Data",
                &namespace,
                &data_name,
            ))?;
        let patch =
            json!({"status": {"renderedData": {"name": data_name, "namespace": namespace}}});
        claims
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api(
                "patching status of",
                "Metal3DataClaim",
                &namespace,
                &name,
            ))?;
    }
    Ok(Progress::Done(Some(RenderedData {
        meta_data,
        network_data_secret,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_metadata_and_network_data_from_pools() {
        let template = json!({
            "metaData": {
                "strings": [{"key": "role", "value": "worker"}],
                "objectNames": [{"key": "name", "object": "machine"}],
                "indexes": [{"key": "index", "offset": 10, "step": 2, "prefix": "n-"}],
                "ipAddressesFromIPPool": [{"key": "ip", "name": "nodes"}],
                "gatewaysFromPool": [{"key": "gw", "name": "nodes"}],
            },
            "networkData": {
                "links": {"ethernets": [{"id": "enp1s0", "type": "phy", "macAddress": {"fromHostInterface": "enp1s0"}}]},
                "networks": {"ipv4": [{"id": "v4", "link": "enp1s0", "ipAddressFromIPPool": "nodes",
                    "routes": [{"network": "0.0.0.0", "prefix": 0, "gateway": {"fromIPPool": "nodes"}}]}]},
                "services": {"dns": ["192.0.2.53"]},
            },
        });
        assert_eq!(pools_of(&template), BTreeSet::from(["nodes".to_owned()]));
        let host: BareMetalHost = serde_json::from_value(json!({
            "metadata": {"name": "h0"}, "spec": {},
            "status": {"provisioning": {"state": "available", "ID": ""}, "hardware": {"nics": [{"name": "enp1s0", "mac": "52:54:00:00:00:01"}]}},
        })).unwrap();
        let allocations = BTreeMap::from([(
            "nodes".to_owned(),
            Allocation {
                address: "192.0.2.10".into(),
                prefix: Some(24),
                gateway: Some("192.0.2.1".into()),
                dns_servers: vec![],
            },
        )]);
        let names = BTreeMap::from([("machine", "capi-1-md-0-abc".to_owned())]);
        let (meta, network) = render(&template, 3, &names, &host, &allocations);
        assert_eq!(meta["role"], "worker");
        assert_eq!(meta["name"], "capi-1-md-0-abc");
        assert_eq!(meta["index"], "n-16");
        assert_eq!(meta["ip"], "192.0.2.10");
        assert_eq!(meta["gw"], "192.0.2.1");
        let network = network.unwrap();
        assert_eq!(
            network["links"][0]["ethernet_mac_address"],
            "52:54:00:00:00:01"
        );
        assert_eq!(network["networks"][0]["ip_address"], "192.0.2.10");
        assert_eq!(network["networks"][0]["netmask"], "255.255.255.0");
        assert_eq!(network["networks"][0]["routes"][0]["gateway"], "192.0.2.1");
        assert_eq!(network["networks"][0]["routes"][0]["netmask"], "0.0.0.0");
        assert_eq!(network["services"][0]["address"], "192.0.2.53");
    }
}
