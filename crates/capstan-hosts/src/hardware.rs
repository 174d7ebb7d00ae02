//! Hardware details from what a BMC tells, for hosts whose agent is simulated (the fake driver):
//! the same `status.hardware` shape a real agent's inspection fills.

use capstan_drivers::SystemInventory;
use capstan_model::metal3::{Cpu, HardwareDetails, Nic, Storage, SystemVendor};

/// `status.hardware` as far as `inventory` goes.
pub fn from_inventory(inventory: &SystemInventory) -> HardwareDetails {
    HardwareDetails {
        hostname: None,
        cpu: Some(Cpu {
            arch: Some("x86_64".into()),
            model: inventory.cpu_model.clone(),
            clock_megahertz: None,
            count: inventory.cpu_count.map(i64::from),
            flags: Vec::new(),
        }),
        ram_mebibytes: inventory.memory_mib.and_then(|m| i64::try_from(m).ok()),
        nics: inventory
            .nics
            .iter()
            .map(|nic| Nic {
                name: Some(nic.name.clone()),
                mac: nic.mac_address.clone(),
                speed_gbps: nic.speed_mbps.and_then(|s| i64::try_from(s / 1000).ok()),
                ..Nic::default()
            })
            .collect(),
        storage: inventory
            .disks
            .iter()
            .map(|disk| Storage {
                name: Some(disk.name.clone()),
                model: disk.model.clone(),
                serial_number: disk.serial_number.clone(),
                size_bytes: disk.size_bytes.and_then(|s| i64::try_from(s).ok()),
                rotational: disk.media_type.as_deref().map(|t| t == "HDD"),
                type_: disk.media_type.clone(),
                ..Storage::default()
            })
            .collect(),
        system_vendor: Some(SystemVendor {
            manufacturer: inventory.manufacturer.clone(),
            product_name: inventory.model.clone(),
            serial_number: inventory.serial_number.clone(),
        }),
        firmware: None,
    }
}
