#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The fake BMC: idempotent verbs counted, shared state across connects, deterministic inventory.

use capstan_drivers::{
    Bmc, BmcAddress, BootDevice, ConnectOptions, Credentials, FakeBmc, Outcome, PowerState, connect,
};

#[tokio::test]
async fn verbs_are_idempotent_and_counted() {
    let bmc = FakeBmc::new("node-1");
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    assert_eq!(bmc.set_power(false).await.unwrap(), Outcome::Unchanged);
    assert_eq!(bmc.set_power(true).await.unwrap(), Outcome::Requested);
    assert_eq!(bmc.set_power(true).await.unwrap(), Outcome::Unchanged);
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::On);

    assert_eq!(
        bmc.set_one_time_boot(BootDevice::Cd).await.unwrap(),
        Outcome::Requested
    );
    assert_eq!(
        bmc.set_one_time_boot(BootDevice::Cd).await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(bmc.one_time_boot(), Some(BootDevice::Cd));
    bmc.reboot().await.unwrap();
    assert_eq!(
        bmc.one_time_boot(),
        None,
        "the override is used up by the boot"
    );

    assert_eq!(
        bmc.insert_virtual_media("http://x/a.iso").await.unwrap(),
        Outcome::Requested
    );
    assert_eq!(
        bmc.insert_virtual_media("http://x/a.iso").await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(
        bmc.insert_virtual_media("http://x/b.iso").await.unwrap(),
        Outcome::Requested
    );
    assert_eq!(bmc.inserted_media().as_deref(), Some("http://x/b.iso"));
    assert_eq!(bmc.eject_virtual_media().await.unwrap(), Outcome::Requested);
    assert_eq!(bmc.eject_virtual_media().await.unwrap(), Outcome::Unchanged);

    let counters = bmc.counters();
    assert_eq!(counters.power_on, 1);
    assert_eq!(counters.power_off, 0);
    assert_eq!(counters.reboot, 1);
    assert_eq!(counters.boot_override, 1);
    assert_eq!(counters.media_insert, 2);
    assert_eq!(counters.media_eject, 2);
}

#[tokio::test]
async fn connect_shares_state_and_inventory_is_deterministic() {
    let address = "fake://rack1-node7";
    let credentials = || Credentials::new("admin", "pw");
    let first = connect(address, credentials(), ConnectOptions::default()).unwrap();
    first.set_power(true).await.unwrap();
    let second = connect(address, credentials(), ConnectOptions::default()).unwrap();
    assert_eq!(second.power_state().await.unwrap(), PowerState::On);
    assert_eq!(second.set_power(true).await.unwrap(), Outcome::Unchanged);
    let shared = FakeBmc::shared(&BmcAddress::parse(address).unwrap());
    assert_eq!(shared.counters().power_on, 1);

    let inventory = first.inventory().await.unwrap();
    assert_eq!(inventory, second.inventory().await.unwrap());
    let other = connect(
        "fake://rack1-node8",
        credentials(),
        ConnectOptions::default(),
    )
    .unwrap()
    .inventory()
    .await
    .unwrap();
    assert_ne!(inventory.serial_number, other.serial_number);
    assert_ne!(inventory.nics[0].mac_address, other.nics[0].mac_address);
    assert!(inventory.cpu_count.unwrap() >= 1);
    assert!(inventory.memory_mib.unwrap() >= 4096);
    assert_eq!(inventory.disks.len(), 1);
}

#[test]
fn credentials_debug_hides_the_password() {
    let debug = format!("{:?}", Credentials::new("admin", "hunter2"));
    assert!(
        debug.contains("admin") && !debug.contains("hunter2"),
        "{debug}"
    );
}
