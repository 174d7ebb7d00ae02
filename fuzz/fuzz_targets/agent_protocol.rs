//! The provisioning agent's protocol from both ends. Server side: the JSON the agent sends
//! (heartbeats, step reports) and what the agent reads from the kernel command line. Agent side:
//! its own HTTP client reading whatever a server answers over a real loopback socket (the bytes are
//! the fuzz input: status line, headers, chunked or sized body), then the heartbeat answer parsed
//! as the agent does.
#![no_main]

use capstan_agent::http::{Url, request};
use capstan_fuzz::ScriptedPeer;
use capstan_model::agent::{
    ChecksumType, Heartbeat, HeartbeatResponse, StepReport, parse_kernel_cmdline,
};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;

fn peer() -> &'static ScriptedPeer {
    static PEER: OnceLock<ScriptedPeer> = OnceLock::new();
    PEER.get_or_init(|| ScriptedPeer::start().expect("a loopback listener"))
}

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<Heartbeat>(data);
    let _ = serde_json::from_slice::<StepReport>(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_kernel_cmdline(text);
        let (value, checksum) = text.split_once(' ').unwrap_or((text, ""));
        let _ = ChecksumType::parse(value, checksum);
        let _ = Url::parse(text);
    }

    let peer = peer();
    peer.script(vec![data.to_vec()]);
    let Ok(url) = Url::parse(&format!("http://{}/v1/heartbeat", peer.address())) else {
        return;
    };
    if let Ok(response) = request(
        "POST",
        &url,
        &[("Content-Type", "application/json")],
        Some(b"{}"),
        Duration::from_secs(2),
    ) {
        let _ = response.header("content-type");
        let _ = response.content_length();
        if let Ok(body) = response.bytes(1 << 20) {
            let _ = serde_json::from_slice::<HeartbeatResponse>(&body);
        }
    }
});
