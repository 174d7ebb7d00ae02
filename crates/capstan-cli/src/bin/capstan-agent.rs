//! `capstan-agent`: started by the provisioning ramdisk's init with no arguments, it reads
//! `capstan.url` and `capstan.token` from the kernel command line. For runs by hand and tests:
//! `capstan-agent --url URL --token TOKEN [--root DIR] [--dev DIR] [--heartbeats N]`.

#[path = "../stderr.rs"]
mod stderr;

use capstan_agent::inspect::SystemRoot;
use capstan_agent::{Agent, AgentConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use stderr::errln;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let (mut url, mut token, host) = capstan_model::agent::parse_kernel_cmdline(&cmdline);
    let mut root = PathBuf::from("/");
    let mut dev = PathBuf::from("/dev");
    let mut max_heartbeats = None;
    while let Some(flag) = args.next() {
        let value = args.next();
        match (flag.as_str(), value) {
            ("--url", Some(v)) => url = Some(v),
            ("--token", Some(v)) => token = Some(v),
            ("--root", Some(v)) => root = PathBuf::from(v),
            ("--dev", Some(v)) => dev = PathBuf::from(v),
            ("--heartbeats", Some(v)) => max_heartbeats = v.parse().ok(),
            (other, _) => {
                errln!("capstan-agent: unknown or incomplete argument {other:?}");
                return ExitCode::from(2);
            }
        }
    }
    let (Some(url), Some(token)) = (url, token) else {
        errln!(
            "capstan-agent: no capstan.url and capstan.token on the kernel command line (or --url/--token)"
        );
        return ExitCode::from(2);
    };
    println!(
        "capstan-agent {}: host {} calling {url}",
        capstan_agent::VERSION,
        host.as_deref().unwrap_or("(unnamed)")
    );
    Agent::new(AgentConfig {
        url,
        token,
        system: SystemRoot::new(root),
        dev,
        max_heartbeats,
    })
    .run();
    ExitCode::SUCCESS
}
