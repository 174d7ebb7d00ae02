//! The Redfish driver: the verbs of [`Bmc`] in terms of `ComputerSystem` resources, the
//! `ComputerSystem.Reset` action, `VirtualMedia` insert/eject actions and the inventory
//! sub-collections. Tolerant of what BMCs leave out (sushy-tools' fake mode has no Memory,
//! Processors or Storage): a missing optional resource leaves that part of the inventory empty.

use crate::address::BmcAddress;
use crate::http::HttpClient;
use crate::{
    Bmc, BmcError, BmcFuture, BootDevice, ConnectOptions, Credentials, Disk, Nic, Outcome,
    PowerState, SystemInventory,
};
use http::Method;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const SYSTEMS: &str = "/redfish/v1/Systems";

/// A Redfish BMC. The system path comes from the address or, when absent, from the single member
/// of `/redfish/v1/Systems`, discovered on first use.
#[derive(Debug)]
pub struct RedfishBmc {
    client: HttpClient,
    system_path: OnceCell<String>,
}

impl RedfishBmc {
    /// A driver for `address`; sends nothing yet.
    pub fn new(
        address: BmcAddress,
        credentials: Credentials,
        options: ConnectOptions,
    ) -> Result<Self, BmcError> {
        let client = HttpClient::new(&address, &credentials, options)?;
        let system_path = OnceCell::new_with(address.system_path);
        Ok(Self {
            client,
            system_path,
        })
    }

    /// The boot override target while one is enabled (`Once` or `Continuous`), e.g. `Cd`.
    pub async fn boot_override_target(&self) -> Result<Option<String>, BmcError> {
        let system = self.system().await?;
        let boot = &system["Boot"];
        if boot["BootSourceOverrideEnabled"]
            .as_str()
            .is_none_or(|e| e == "Disabled")
        {
            return Ok(None);
        }
        Ok(boot["BootSourceOverrideTarget"]
            .as_str()
            .filter(|t| *t != "None")
            .map(str::to_owned))
    }

    /// The image in the virtual CD/DVD drive, if one is inserted.
    pub async fn inserted_media(&self) -> Result<Option<String>, BmcError> {
        let (_, media) = self.cd_media().await?;
        if !media["Inserted"].as_bool().unwrap_or(false) {
            return Ok(None);
        }
        Ok(media["Image"]
            .as_str()
            .filter(|i| !i.is_empty())
            .map(str::to_owned))
    }

    async fn system_path(&self) -> Result<&str, BmcError> {
        self.system_path
            .get_or_try_init(|| async {
                let collection = self.client.get(SYSTEMS).await?;
                let members = member_paths(&collection);
                match members.as_slice() {
                    [only] => Ok(only.clone()),
                    [] => Err(BmcError::NotFound {
                        endpoint: self.client.endpoint().to_owned(),
                        resource: format!("system in {SYSTEMS}"),
                    }),
                    many => Err(BmcError::InvalidAddress {
                        address: self.client.endpoint().to_owned(),
                        reason: format!(
                            "{SYSTEMS} lists {} systems; name one with a system path",
                            many.len()
                        ),
                    }),
                }
            })
            .await
            .map(String::as_str)
    }

    async fn system(&self) -> Result<Value, BmcError> {
        let path = self.system_path().await?;
        self.client.get(path).await
    }

    async fn read_power_state(&self) -> Result<PowerState, BmcError> {
        Ok(power_state_of(&self.system().await?))
    }

    /// POSTs `ComputerSystem.Reset` with the first of `preferred` the system allows.
    async fn reset(&self, system: &Value, preferred: &[&str]) -> Result<(), BmcError> {
        let action = &system["Actions"]["#ComputerSystem.Reset"];
        let system_path = self.system_path().await?;
        let target = match action["target"].as_str() {
            Some(target) => path_of(target).to_owned(),
            None => format!("{system_path}/Actions/ComputerSystem.Reset"),
        };
        let reset_type = match action["ResetType@Redfish.AllowableValues"].as_array() {
            None => preferred[0],
            Some(allowed) => preferred
                .iter()
                .copied()
                .find(|p| allowed.iter().any(|a| a.as_str() == Some(p)))
                .ok_or_else(|| {
                    BmcError::Unsupported(format!(
                        "{} allows none of the reset types {preferred:?}",
                        self.client.endpoint()
                    ))
                })?,
        };
        self.client
            .send_json(Method::POST, &target, &json!({ "ResetType": reset_type }))
            .await
    }

    /// The virtual CD/DVD drive: path and current state.
    async fn cd_media(&self) -> Result<(String, Value), BmcError> {
        let system = self.system().await?;
        let mut collections = Vec::new();
        if let Some(path) = system["VirtualMedia"]["@odata.id"].as_str() {
            collections.push(path.to_owned());
        }
        for manager in system["Links"]["ManagedBy"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Some(path) = manager["@odata.id"].as_str() else {
                continue;
            };
            match self.client.get(path).await {
                Ok(manager) => {
                    if let Some(path) = manager["VirtualMedia"]["@odata.id"].as_str() {
                        collections.push(path.to_owned());
                    }
                }
                Err(BmcError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        for collection in collections {
            let collection = match self.client.get(&collection).await {
                Ok(c) => c,
                Err(BmcError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            for path in member_paths(&collection) {
                let media = self.client.get(&path).await?;
                let is_cd = media["MediaTypes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| matches!(t.as_str(), Some("CD" | "DVD")));
                if is_cd {
                    return Ok((path, media));
                }
            }
        }
        Err(BmcError::Unsupported(format!(
            "{} exposes no CD/DVD virtual media",
            self.client.endpoint()
        )))
    }

    async fn eject(&self, path: &str, media: &Value) -> Result<(), BmcError> {
        match media["Actions"]["#VirtualMedia.EjectMedia"]["target"].as_str() {
            Some(target) => {
                self.client
                    .send_json(Method::POST, path_of(target), &json!({}))
                    .await
            }
            // Older BMCs eject by PATCHing the resource.
            None => {
                self.client
                    .send_json(
                        Method::PATCH,
                        path,
                        &json!({ "Image": null, "Inserted": false }),
                    )
                    .await
            }
        }
    }

    /// Members of an optional collection; an absent or unimplemented one is empty.
    async fn optional_members(&self, link: &Value) -> Result<Vec<Value>, BmcError> {
        let Some(path) = link["@odata.id"].as_str() else {
            return Ok(Vec::new());
        };
        let collection = match self.optional(path).await? {
            Some(c) => c,
            None => return Ok(Vec::new()),
        };
        let mut members = Vec::new();
        for member in member_paths(&collection) {
            if let Some(value) = self.optional(&member).await? {
                members.push(value);
            }
        }
        Ok(members)
    }

    /// GETs a resource the inventory can do without: not found or refused by the BMC is `None`;
    /// unreachable and unauthorized still fail.
    async fn optional(&self, path: &str) -> Result<Option<Value>, BmcError> {
        match self.client.get(path).await {
            Ok(v) => Ok(Some(v)),
            Err(e @ (BmcError::NotFound { .. } | BmcError::Protocol { .. })) => {
                tracing::debug!(bmc = %self.client.endpoint(), path, error = %e, "optional resource unavailable");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

impl Bmc for RedfishBmc {
    fn power_state(&self) -> BmcFuture<'_, PowerState> {
        Box::pin(self.read_power_state())
    }

    fn set_power(&self, on: bool) -> BmcFuture<'_, Outcome> {
        Box::pin(async move {
            let system = self.system().await?;
            let state = power_state_of(&system);
            let already = if on {
                matches!(state, PowerState::On | PowerState::PoweringOn)
            } else {
                matches!(state, PowerState::Off | PowerState::PoweringOff)
            };
            if already {
                return Ok(Outcome::Unchanged);
            }
            let preferred: &[&str] = if on {
                &["On", "ForceOn"]
            } else {
                &["ForceOff", "GracefulShutdown"]
            };
            self.reset(&system, preferred).await?;
            Ok(Outcome::Requested)
        })
    }

    fn reboot(&self) -> BmcFuture<'_, Outcome> {
        Box::pin(async move {
            let system = self.system().await?;
            // Restarting a system that is off is refused by some BMCs; the caller wants it running.
            let preferred: &[&str] = match power_state_of(&system) {
                PowerState::Off | PowerState::PoweringOff => &["On", "ForceOn"],
                _ => &["ForceRestart", "GracefulRestart", "PowerCycle"],
            };
            self.reset(&system, preferred).await?;
            Ok(Outcome::Requested)
        })
    }

    fn set_one_time_boot(&self, device: BootDevice) -> BmcFuture<'_, Outcome> {
        Box::pin(async move {
            let system = self.system().await?;
            let boot = &system["Boot"];
            let target = device.redfish_name();
            if let Some(allowed) =
                boot["BootSourceOverrideTarget@Redfish.AllowableValues"].as_array()
                && !allowed.iter().any(|a| a.as_str() == Some(target))
            {
                return Err(BmcError::Unsupported(format!(
                    "{} cannot boot from {target}",
                    self.client.endpoint()
                )));
            }
            if boot["BootSourceOverrideTarget"].as_str() == Some(target)
                && boot["BootSourceOverrideEnabled"].as_str() == Some("Once")
            {
                return Ok(Outcome::Unchanged);
            }
            let path = self.system_path().await?;
            let body = json!({ "Boot": {
                "BootSourceOverrideTarget": target,
                "BootSourceOverrideEnabled": "Once",
            }});
            self.client.send_json(Method::PATCH, path, &body).await?;
            Ok(Outcome::Requested)
        })
    }

    fn insert_virtual_media<'a>(&'a self, image_url: &'a str) -> BmcFuture<'a, Outcome> {
        Box::pin(async move {
            let (path, media) = self.cd_media().await?;
            let inserted = media["Inserted"].as_bool().unwrap_or(false);
            let image = media["Image"].as_str().filter(|i| !i.is_empty());
            if inserted && image == Some(image_url) {
                return Ok(Outcome::Unchanged);
            }
            if inserted || image.is_some() {
                self.eject(&path, &media).await?;
            }
            match media["Actions"]["#VirtualMedia.InsertMedia"]["target"].as_str() {
                Some(target) => {
                    let body =
                        json!({ "Image": image_url, "Inserted": true, "WriteProtected": true });
                    self.client
                        .send_json(Method::POST, path_of(target), &body)
                        .await?;
                }
                None => {
                    let body = json!({ "Image": image_url, "Inserted": true });
                    self.client.send_json(Method::PATCH, &path, &body).await?;
                }
            }
            Ok(Outcome::Requested)
        })
    }

    fn eject_virtual_media(&self) -> BmcFuture<'_, Outcome> {
        Box::pin(async move {
            let (path, media) = self.cd_media().await?;
            let inserted = media["Inserted"].as_bool().unwrap_or(false);
            let has_image = media["Image"].as_str().is_some_and(|i| !i.is_empty());
            if !inserted && !has_image {
                return Ok(Outcome::Unchanged);
            }
            self.eject(&path, &media).await?;
            Ok(Outcome::Requested)
        })
    }

    fn inventory(&self) -> BmcFuture<'_, SystemInventory> {
        Box::pin(async move {
            let system = self.system().await?;
            let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
            let processors = &system["ProcessorSummary"];
            let mut inventory = SystemInventory {
                manufacturer: text(&system["Manufacturer"]),
                model: text(&system["Model"]),
                serial_number: text(&system["SerialNumber"]),
                cpu_count: processors["Count"]
                    .as_u64()
                    .and_then(|c| u32::try_from(c).ok()),
                cpu_model: text(&processors["Model"]),
                memory_mib: system["MemorySummary"]["TotalSystemMemoryGiB"]
                    .as_f64()
                    .filter(|g| g.is_finite() && *g >= 0.0)
                    // Redfish reports GiB as a float; MiB is whole for any real machine.
                    .map(|gib| (gib * 1024.0).round() as u64),
                ..SystemInventory::default()
            };
            if inventory.cpu_count.is_none() || inventory.cpu_model.is_none() {
                let cpus = self.optional_members(&system["Processors"]).await?;
                let cpus: Vec<&Value> = cpus
                    .iter()
                    .filter(|p| p["ProcessorType"].as_str().is_none_or(|t| t == "CPU"))
                    .collect();
                if !cpus.is_empty() {
                    inventory
                        .cpu_count
                        .get_or_insert(u32::try_from(cpus.len()).unwrap_or(u32::MAX));
                    if inventory.cpu_model.is_none() {
                        inventory.cpu_model = cpus.iter().find_map(|p| text(&p["Model"]));
                    }
                }
            }
            if inventory.memory_mib.is_none() {
                let dimms = self.optional_members(&system["Memory"]).await?;
                let total: u64 = dimms.iter().filter_map(|d| d["CapacityMiB"].as_u64()).sum();
                if total > 0 {
                    inventory.memory_mib = Some(total);
                }
            }
            for nic in self.optional_members(&system["EthernetInterfaces"]).await? {
                inventory.nics.push(Nic {
                    name: text(&nic["Id"])
                        .or_else(|| text(&nic["Name"]))
                        .unwrap_or_default(),
                    mac_address: text(&nic["MACAddress"])
                        .or_else(|| text(&nic["PermanentMACAddress"])),
                    speed_mbps: nic["SpeedMbps"].as_u64(),
                });
            }
            for storage in self.optional_members(&system["Storage"]).await? {
                for link in storage["Drives"].as_array().into_iter().flatten() {
                    let Some(path) = link["@odata.id"].as_str() else {
                        continue;
                    };
                    if let Some(drive) = self.optional(path).await? {
                        inventory.disks.push(Disk {
                            name: text(&drive["Name"])
                                .or_else(|| text(&drive["Id"]))
                                .unwrap_or_default(),
                            size_bytes: drive["CapacityBytes"].as_u64(),
                            media_type: text(&drive["MediaType"]),
                            model: text(&drive["Model"]),
                            serial_number: text(&drive["SerialNumber"]),
                        });
                    }
                }
            }
            Ok(inventory)
        })
    }
}

fn power_state_of(system: &Value) -> PowerState {
    match system["PowerState"].as_str() {
        Some("On") => PowerState::On,
        Some("Off") => PowerState::Off,
        Some("PoweringOn") => PowerState::PoweringOn,
        Some("PoweringOff") => PowerState::PoweringOff,
        _ => PowerState::Unknown,
    }
}

fn member_paths(collection: &Value) -> Vec<String> {
    collection["Members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["@odata.id"].as_str().map(str::to_owned))
        .collect()
}

/// The path of an action target, which some BMCs give as an absolute URL.
fn path_of(target: &str) -> &str {
    match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    }
}
