//! Plain HTTP/1.1 requests over TLS to the test server, for what kubectl cannot send (deep bodies,
//! raw patches, oversized bodies) and for connection-level tests (idle and half-sent connections).

use super::Server;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

/// A TLS client configuration trusting the test server's CA.
pub fn client_config(server: &Server) -> Arc<rustls::ClientConfig> {
    let pem = std::fs::read(&server.ca).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// The `host:port` of the server.
pub fn address(server: &Server) -> String {
    server.url.trim_start_matches("https://").to_owned()
}

/// A TLS stream to the server, handshake done.
pub fn connect(server: &Server) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let tcp = TcpStream::connect(address(server)).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(client_config(server), name).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock).unwrap();
    }
    stream
}

/// One request with the admin token; answers the status code and the body.
pub fn request(
    server: &Server,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, String) {
    request_as(
        server,
        Some(&server.token),
        method,
        path,
        content_type,
        body,
    )
}

/// One request with `token` (none: no `Authorization` header); answers the status code and body.
pub fn request_as(
    server: &Server,
    token: Option<&str>,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, String) {
    let mut stream = connect(server);
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Content-Type: {content_type}\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    stream.flush().unwrap();
    let mut response = Vec::new();
    // The server closes after the answer; a TLS close without close_notify is fine here.
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    (code, body)
}

pub fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// A JSON object nested `levels` deep under `spec`.
pub fn nested(levels: usize) -> serde_json::Value {
    let mut value = serde_json::json!("leaf");
    for _ in 0..levels {
        value = serde_json::json!({ "a": value });
    }
    value
}

/// The same nesting as YAML flow mappings (what a JSON body cannot carry past 128 levels).
pub fn nested_yaml(levels: usize) -> String {
    format!("{}leaf{}", "{a: ".repeat(levels), "}".repeat(levels))
}
