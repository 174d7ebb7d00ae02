//! capstan's Redfish driver against a BMC that answers anything: each verb's requests get the fuzz
//! input's answers in turn (pieces split at `\n--next--\n`, the last repeating), each piece a
//! two-byte status then a body, framed as HTTP by the loopback peer. The driver must return a
//! result (an error is fine) for every verb, never panic or hang.
#![no_main]

use capstan_drivers::{BootDevice, ConnectOptions, Credentials, connect};
use capstan_fuzz::{ScriptedPeer, split_answers};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;

fn peer() -> &'static ScriptedPeer {
    static PEER: OnceLock<ScriptedPeer> = OnceLock::new();
    PEER.get_or_init(|| ScriptedPeer::start().expect("a loopback listener"))
}

fn framed(piece: &[u8]) -> Vec<u8> {
    let (status, body) = match piece {
        [a, b, body @ ..] => (100 + u16::from_be_bytes([*a, *b]) % 500, body),
        _ => (200, piece),
    };
    let mut out = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fuzz_target!(|data: &[u8]| {
    let peer = peer();
    let answers: Vec<Vec<u8>> = split_answers(data).iter().map(|p| framed(p)).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let address = format!("redfish+http://{}/redfish/v1/Systems/1", peer.address());
    let options = ConnectOptions {
        timeout: Duration::from_secs(2),
        ..ConnectOptions::default()
    };
    let Ok(bmc) = connect(&address, Credentials::new("admin", "password"), options) else {
        return;
    };
    runtime.block_on(async {
        peer.script(answers.clone());
        let _ = bmc.power_state().await;
        peer.script(answers.clone());
        let _ = bmc.inventory().await;
        peer.script(answers.clone());
        let _ = bmc.insert_virtual_media("http://127.0.0.1/boot.iso").await;
        peer.script(answers.clone());
        let _ = bmc.set_one_time_boot(BootDevice::Cd).await;
        peer.script(answers.clone());
        let _ = bmc.reboot().await;
        peer.script(answers.clone());
        let _ = bmc.eject_virtual_media().await;
        peer.script(answers);
        let _ = bmc.set_power(false).await;
    });
});
