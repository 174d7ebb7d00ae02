//! The fake BMC: in memory, deterministic, for demos and scale tests. Power changes take effect
//! at once, and the inventory is generated from the address, so the same address always
//! describes the same machine. Counters record the change requests each verb actually made.
//!
//! [`crate::connect`] hands out [`FakeBmc::shared`] handles, so state survives reconnects the way
//! a real BMC's does.

use crate::address::BmcAddress;
use crate::{
    Bmc, BmcError, BmcFuture, BootDevice, Disk, Nic, Outcome, PowerState, SystemInventory,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// How many change requests a [`FakeBmc`] received; verbs that found nothing to do add nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FakeCounters {
    pub power_on: u64,
    pub power_off: u64,
    pub reboot: u64,
    pub boot_override: u64,
    pub media_insert: u64,
    pub media_eject: u64,
}

#[derive(Debug, Default)]
struct FakeState {
    powered_on: bool,
    one_time_boot: Option<BootDevice>,
    media: Option<String>,
    counters: FakeCounters,
}

/// An in-memory BMC.
#[derive(Clone, Debug)]
pub struct FakeBmc {
    name: String,
    state: Arc<Mutex<FakeState>>,
}

impl FakeBmc {
    /// A fake BMC of its own, powered off, for the machine `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            state: Arc::default(),
        }
    }

    /// The process-wide fake for `address`: every call with the same host and path shares state.
    pub fn shared(address: &BmcAddress) -> Self {
        static REGISTRY: OnceLock<Mutex<HashMap<String, FakeBmc>>> = OnceLock::new();
        let name = format!(
            "{}{}",
            address.endpoint(),
            address.system_path.as_deref().unwrap_or("")
        );
        let mut registry = REGISTRY
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        registry
            .entry(name.clone())
            .or_insert_with(|| Self::new(name))
            .clone()
    }

    /// The change requests so far.
    pub fn counters(&self) -> FakeCounters {
        self.lock().counters
    }

    /// The pending one-time boot device.
    pub fn one_time_boot(&self) -> Option<BootDevice> {
        self.lock().one_time_boot
    }

    /// The inserted image.
    pub fn inserted_media(&self) -> Option<String> {
        self.lock().media.clone()
    }

    // A panic while holding the lock cannot leave the plain-data state inconsistent.
    fn lock(&self) -> MutexGuard<'_, FakeState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn generated_inventory(&self) -> SystemInventory {
        let seed = fnv1a(self.name.as_bytes());
        let byte = |i: u32| ((seed >> (8 * (i % 8))) & 0xff) as u8;
        let cpu_count = 1 + (seed % 4) as u32;
        SystemInventory {
            manufacturer: Some("capstan".to_owned()),
            model: Some("fake".to_owned()),
            serial_number: Some(format!("FAKE-{seed:016X}")),
            cpu_count: Some(cpu_count),
            cpu_model: Some("Fake CPU @ 2.0GHz".to_owned()),
            memory_mib: Some(4096 * (1 + (seed >> 8) % 8)),
            nics: (0..2)
                .map(|n| Nic {
                    name: format!("eth{n}"),
                    // A locally administered unicast MAC (02:…) unique to this name.
                    mac_address: Some(format!(
                        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                        byte(0),
                        byte(1),
                        byte(2),
                        byte(3),
                        byte(4).wrapping_add(n)
                    )),
                    speed_mbps: Some(10_000),
                })
                .collect(),
            disks: vec![Disk {
                name: "sda".to_owned(),
                size_bytes: Some(100 * 1024 * 1024 * 1024),
                media_type: Some("SSD".to_owned()),
                model: Some("Fake Disk".to_owned()),
                serial_number: Some(format!("DISK-{seed:016X}")),
            }],
        }
    }
}

/// FNV-1a: stable across processes and releases, unlike the standard library's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Bmc for FakeBmc {
    fn power_state(&self) -> BmcFuture<'_, PowerState> {
        let on = self.lock().powered_on;
        Box::pin(async move { Ok(if on { PowerState::On } else { PowerState::Off }) })
    }

    fn set_power(&self, on: bool) -> BmcFuture<'_, Outcome> {
        let mut state = self.lock();
        let outcome = if state.powered_on == on {
            Outcome::Unchanged
        } else {
            state.powered_on = on;
            if on {
                state.counters.power_on += 1;
            } else {
                state.counters.power_off += 1;
            }
            Outcome::Requested
        };
        Box::pin(async move { Ok(outcome) })
    }

    fn reboot(&self) -> BmcFuture<'_, Outcome> {
        let mut state = self.lock();
        state.powered_on = true;
        state.counters.reboot += 1;
        // The override applies to this boot and is used up by it.
        state.one_time_boot = None;
        Box::pin(async { Ok(Outcome::Requested) })
    }

    fn set_one_time_boot(&self, device: BootDevice) -> BmcFuture<'_, Outcome> {
        let mut state = self.lock();
        let outcome = if state.one_time_boot == Some(device) {
            Outcome::Unchanged
        } else {
            state.one_time_boot = Some(device);
            state.counters.boot_override += 1;
            Outcome::Requested
        };
        Box::pin(async move { Ok(outcome) })
    }

    fn insert_virtual_media<'a>(&'a self, image_url: &'a str) -> BmcFuture<'a, Outcome> {
        let mut state = self.lock();
        let outcome = match state.media.as_deref() {
            Some(current) if current == image_url => Outcome::Unchanged,
            current => {
                if current.is_some() {
                    state.counters.media_eject += 1;
                }
                state.media = Some(image_url.to_owned());
                state.counters.media_insert += 1;
                Outcome::Requested
            }
        };
        Box::pin(async move { Ok(outcome) })
    }

    fn eject_virtual_media(&self) -> BmcFuture<'_, Outcome> {
        let mut state = self.lock();
        let outcome = if state.media.take().is_some() {
            state.counters.media_eject += 1;
            Outcome::Requested
        } else {
            Outcome::Unchanged
        };
        Box::pin(async move { Ok(outcome) })
    }

    fn inventory(&self) -> BmcFuture<'_, SystemInventory> {
        let inventory = self.generated_inventory();
        Box::pin(async move { Ok::<_, BmcError>(inventory) })
    }
}
