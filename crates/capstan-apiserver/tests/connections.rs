//! Connection hygiene against unauthenticated peers: idle TLS sessions, half-sent request heads and
//! silent TCP connections are closed (a session that sends nothing after its handshake by the
//! header-read timeout, not the longer idle one); near the connection cap idle connections are shed
//! for new ones; with every slot busy the probe reserve still answers health probes and refuses
//! the rest with 429; with every slot busy the server waits, then serves again once one frees.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use capstan_apiserver::conn::ConnectionLimits;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::raw::{address, connect, request};
use support::start_with;

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn limits() -> ConnectionLimits {
    ConnectionLimits {
        handshake_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        ..ConnectionLimits::with_capacity(4, 0)
    }
}

/// Whether the peer closed the stream before `deadline` (a read answering 0 bytes or an error
/// other than the socket's read timeout, which only means nothing came yet).
fn closed_by_server(stream: &mut impl Read, deadline: Duration) -> bool {
    let until = Instant::now() + deadline;
    let mut buf = [0u8; 256];
    while Instant::now() < until {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
            Ok(_) => {}
        }
    }
    false
}

/// Timeouts long enough that nothing closes on its own during a test, with `capacity` slots of
/// which `probe_reserve` are kept for health probes.
fn long_limits(capacity: usize, probe_reserve: usize) -> ConnectionLimits {
    ConnectionLimits {
        handshake_timeout: Duration::from_secs(60),
        header_read_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(600),
        ..ConnectionLimits::with_capacity(capacity, probe_reserve)
    }
}

/// `GET /api/v1/namespaces` with the admin token on a new connection: the status code and body.
fn list_namespaces(server: &support::Server) -> (u16, String) {
    request(server, "GET", "/api/v1/namespaces", "application/json", b"")
}

/// A health probe (`GET path`, plain text) on a new connection: the status code and body.
fn probe(server: &support::Server, path: &str) -> (u16, String) {
    request(server, "GET", path, "text/plain", b"")
}

/// [`closed_by_server`] for a TLS stream, each read on its socket waiting at most `read_timeout`.
fn tls_closed_by_server(stream: &mut Tls, read_timeout: Duration, deadline: Duration) -> bool {
    stream.sock.set_read_timeout(Some(read_timeout)).unwrap();
    closed_by_server(stream, deadline)
}

#[test]
fn an_idle_tls_session_is_closed() {
    let server = start_with(limits());
    let mut stream = connect(&server);
    assert!(tls_closed_by_server(
        &mut stream,
        Duration::from_secs(30),
        Duration::from_secs(60)
    ));
}

#[test]
fn a_tls_session_that_sends_nothing_is_closed_after_the_header_read_timeout() {
    // Only the header-read timeout is short: the idle timeout would take ten minutes.
    let server = start_with(ConnectionLimits {
        handshake_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(600),
        ..ConnectionLimits::default()
    });
    let mut stream = connect(&server);
    assert!(tls_closed_by_server(
        &mut stream,
        Duration::from_secs(5),
        Duration::from_secs(30)
    ));
}

#[test]
fn near_the_cap_idle_connections_are_shed_so_new_ones_are_served() {
    let limits = long_limits(8, 2);
    let pool = limits.pool.clone();
    let server = start_with(limits);
    // Three times the cap of TLS sessions that shake hands and send nothing: each one past the
    // normal slots sheds the oldest.
    let idle: Vec<_> = (0..24).map(|_| connect(&server)).collect();
    assert!(pool.open() <= pool.capacity() + 8, "{pool:?}");
    let (code, _) = probe(&server, "/healthz");
    assert_eq!(code, 200);
    let (code, body) = list_namespaces(&server);
    assert_eq!(code, 200, "{body}");
    // The first ones were shed: closed by the server.
    let mut first = idle.into_iter().next().unwrap();
    assert!(tls_closed_by_server(
        &mut first,
        Duration::from_secs(5),
        Duration::from_secs(30)
    ));
}

/// A watch that has its response head and stays open for 20 s: a busy connection.
fn open_watch(server: &support::Server) -> impl Read {
    let mut stream = connect(server);
    let head = format!(
        "GET /api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=20 HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nAccept: application/json\r\n\r\n",
        server.token
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.flush().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "watch head");
        seen.push(byte[0]);
    }
    assert!(
        seen.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    stream
}

#[test]
fn with_every_slot_busy_health_probes_are_served_from_the_reserve_and_the_rest_refused() {
    let limits = long_limits(3, 1);
    let pool = limits.pool.clone();
    let server = start_with(limits);
    // Both normal slots hold watches, which are never shed.
    let watches: Vec<_> = (0..2).map(|_| open_watch(&server)).collect();
    let (code, body) = probe(&server, "/healthz");
    assert_eq!(code, 200, "{body}");
    let (code, _) = probe(&server, "/readyz");
    assert_eq!(code, 200);
    // Once the probes' connections are closed (an idle one would be shed to make room), only the
    // reserve is left for the next connection.
    let deadline = Instant::now() + Duration::from_secs(30);
    while pool.open() > 2 {
        assert!(Instant::now() < deadline, "{pool:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, body) = list_namespaces(&server);
    assert_eq!(code, 429, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "TooManyRequests", "{status}");
    // The watches end (closed here, or at their timeout): their slots serve everything again.
    drop(watches);
    let (code, body) = until_answered(&server, "/api/v1/namespaces");
    assert_eq!(code, 200, "{body}");
}

/// Asks `path` until it is not refused for lack of a slot, for at most 60 s.
fn until_answered(server: &support::Server, path: &str) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = request(server, "GET", path, "application/json", b"");
        if code != 429 || Instant::now() > deadline {
            return (code, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_half_sent_request_head_is_closed() {
    let server = start_with(limits());
    let mut stream = connect(&server);
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        .unwrap();
    stream.flush().unwrap();
    assert!(tls_closed_by_server(
        &mut stream,
        Duration::from_secs(30),
        Duration::from_secs(60)
    ));
}

#[test]
fn a_tcp_connection_that_never_shakes_hands_is_closed() {
    let server = start_with(limits());
    let mut tcp = TcpStream::connect(address(&server)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert!(closed_by_server(&mut tcp, Duration::from_secs(60)));
}

#[test]
fn with_the_connection_cap_reached_by_silent_connections_a_request_is_still_served() {
    let server = start_with(limits());
    // Take every slot with silent connections, and one more.
    let silent: Vec<TcpStream> = (0..limits().max_connections() + 1)
        .map(|_| TcpStream::connect(address(&server)).unwrap())
        .collect();
    // A real request takes the slot of the oldest silent one (or of one the handshake timeout
    // closed).
    let (code, body) = list_namespaces(&server);
    assert_eq!(code, 200, "{body}");
    drop(silent);
    let (code, _) = probe(&server, "/healthz");
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
