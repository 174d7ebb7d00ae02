//! What capstan's real-peer tests share, and only tests use (it is a dev-dependency): starting a
//! libvirtd and virtlogd of the test's own in its network namespace with the `default` storage
//! pool, running `virsh` against `qemu:///system`, finding the Kubernetes binaries
//! `scripts/peers.sh` builds ([`peers`]), a real kube-apiserver on its own etcd ([`kube`]), and
//! polling a condition with a deadline.
//!
//! A test-support crate: a missing peer or a failed step panics with what to do, which is how a
//! test fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod kube;
pub mod libvirt;
pub mod peers;

use std::time::{Duration, Instant};

/// Polls `check` every 200 ms until it holds or `limit` passes, and says whether it held (for
/// daemons and guests that give no readiness signal of their own).
pub fn until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    check()
}

/// A TCP port on 127.0.0.1 that was free a moment ago (for a peer told which port to listen on).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("binding a free port")
        .local_addr()
        .expect("reading the free port")
        .port()
}
