//! Connection hygiene against unauthenticated peers: idle TLS sessions, half-sent request heads and
//! silent TCP connections are closed; with the connection cap reached the server waits, then serves
//! again once those are gone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use capstan_apiserver::conn::ConnectionLimits;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::raw::{address, connect, request};
use support::start_with;

fn limits() -> ConnectionLimits {
    ConnectionLimits {
        handshake_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        max_connections: 4,
    }
}

/// Whether the peer closed the stream before `deadline` (a read answering 0 bytes or an error).
fn closed_by_server(stream: &mut impl Read, deadline: Duration) -> bool {
    let until = Instant::now() + deadline;
    let mut buf = [0u8; 256];
    while Instant::now() < until {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
    false
}

#[test]
fn an_idle_tls_session_is_closed() {
    let server = start_with(limits());
    let mut stream = connect(&server);
    stream
        .sock
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert!(closed_by_server(&mut stream, Duration::from_secs(60)));
}

#[test]
fn a_half_sent_request_head_is_closed() {
    let server = start_with(limits());
    let mut stream = connect(&server);
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        .unwrap();
    stream.flush().unwrap();
    stream
        .sock
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert!(closed_by_server(&mut stream, Duration::from_secs(60)));
}

#[test]
fn a_tcp_connection_that_never_shakes_hands_is_closed() {
    let server = start_with(limits());
    let mut tcp = TcpStream::connect(address(&server)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert!(closed_by_server(&mut tcp, Duration::from_secs(60)));
}

#[test]
fn with_the_connection_cap_reached_the_server_serves_again_once_they_close() {
    let server = start_with(limits());
    // Take every slot with silent connections, and one more that waits in the backlog.
    let silent: Vec<TcpStream> = (0..limits().max_connections + 1)
        .map(|_| TcpStream::connect(address(&server)).unwrap())
        .collect();
    // A real request queues behind them and is served once the silent ones have been closed.
    let (code, body) = request(
        &server,
        "GET",
        "/api/v1/namespaces",
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
    drop(silent);
    let (code, _) = request(&server, "GET", "/healthz", "text/plain", b"");
    assert_eq!(code, 200);
}

#[test]
fn a_long_request_in_flight_is_not_idle() {
    let server = start_with(limits());
    // A watch for three seconds, with nothing to report: longer than the idle timeout.
    let started = Instant::now();
    let (code, body) = request(
        &server,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=3&resourceVersion=1",
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "the watch ended early: the connection was closed as idle"
    );
}
