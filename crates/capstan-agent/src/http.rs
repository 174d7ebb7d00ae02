//! A small blocking HTTP/1.1 client over `std::net`: enough for the agent's heartbeats and image
//! downloads (plain HTTP; integrity comes from checksums, identity from the bearer token).
//!
//! Every request says `Connection: close`, so a body without `Content-Length` ends at EOF; chunked
//! bodies are decoded. Requests have connect and read timeouts, so a vanished server is an error,
//! not a hang.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{0:?} is not an http:// URL")]
    Url(String),
    #[error("connecting to {address}")]
    Connect {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("talking to {address}")]
    Io {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{address} sent a malformed response: {reason}")]
    Malformed { address: String, reason: String },
}

/// An `http://host[:port]/path` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Self, HttpError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| HttpError::Url(url.to_owned()))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => (
                host,
                port.parse().map_err(|_| HttpError::Url(url.to_owned()))?,
            ),
            _ => (authority, 80),
        };
        if host.is_empty() {
            return Err(HttpError::Url(url.to_owned()));
        }
        Ok(Self {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            path: path.to_owned(),
        })
    }

    /// `base` joined with an absolute `path`.
    pub fn join(base: &str, path: &str) -> Result<Self, HttpError> {
        Self::parse(&format!("{}{path}", base.trim_end_matches('/')))
    }

    fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// A response whose body is still to be read.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    body: Body,
    address: String,
}

enum Body {
    Length(std::io::Take<BufReader<TcpStream>>),
    Chunked {
        reader: BufReader<TcpStream>,
        left: u64,
        done: bool,
    },
    Eof(BufReader<TcpStream>),
}

impl Response {
    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `Content-Length`, when given.
    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length")?.trim().parse().ok()
    }

    /// Reads the whole body (bounded by `limit` bytes).
    pub fn bytes(mut self, limit: u64) -> Result<Vec<u8>, HttpError> {
        let mut out = Vec::new();
        let address = self.address.clone();
        (&mut self)
            .take(limit)
            .read_to_end(&mut out)
            .map_err(|source| HttpError::Io { address, source })?;
        Ok(out)
    }
}

impl Read for Response {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.body {
            Body::Length(reader) => reader.read(buf),
            Body::Eof(reader) => reader.read(buf),
            Body::Chunked { reader, left, done } => {
                if *done {
                    return Ok(0);
                }
                if *left == 0 {
                    let mut line = String::new();
                    reader.read_line(&mut line)?;
                    if line.trim().is_empty() {
                        line.clear();
                        reader.read_line(&mut line)?;
                    }
                    let size = u64::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                        .map_err(|_| {
                            std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size")
                        })?;
                    if size == 0 {
                        *done = true;
                        return Ok(0);
                    }
                    *left = size;
                }
                let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let n = reader.read(&mut buf[..want])?;
                if n == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "chunk cut short",
                    ));
                }
                *left -= n as u64;
                Ok(n)
            }
        }
    }
}

/// Sends one request and reads the response head.
pub fn request(
    method: &str,
    url: &Url,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Response, HttpError> {
    let address = url.address();
    let target = address
        .to_socket_addrs()
        .map_err(|source| HttpError::Connect {
            address: address.clone(),
            source,
        })?
        .next()
        .ok_or_else(|| HttpError::Connect {
            address: address.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
        })?;
    let stream =
        TcpStream::connect_timeout(&target, timeout).map_err(|source| HttpError::Connect {
            address: address.clone(),
            source,
        })?;
    let io = |source| HttpError::Io {
        address: address.clone(),
        source,
    };
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let _ = stream.set_nodelay(true);
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: capstan-agent\r\n",
        url.path, url.host
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(body) = body {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut writer = stream.try_clone().map_err(io)?;
    writer.write_all(head.as_bytes()).map_err(io)?;
    if let Some(body) = body {
        writer.write_all(body).map_err(io)?;
    }
    writer.flush().map_err(io)?;
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).map_err(io)?;
    let malformed = |reason: &str| HttpError::Malformed {
        address: address.clone(),
        reason: reason.to_owned(),
    };
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| malformed(&format!("status line {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).map_err(io)?;
        if n == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let chunked = header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let length = header("content-length").and_then(|v| v.trim().parse::<u64>().ok());
    let body = if method == "HEAD" || status == 204 || status == 304 {
        Body::Length(reader.take(0))
    } else if chunked {
        Body::Chunked {
            reader,
            left: 0,
            done: false,
        }
    } else if let Some(length) = length {
        Body::Length(reader.take(length))
    } else {
        Body::Eof(reader)
    };
    let response = Response {
        status,
        headers,
        body,
        address,
    };
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://10.0.2.2:6180/images/a.img").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("10.0.2.2", 6180, "/images/a.img")
        );
        let u = Url::parse("http://example").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/"));
        assert!(Url::parse("https://x/").is_err());
        assert_eq!(Url::join("http://h:1/", "/a").unwrap().path, "/a");
    }

    /// The schemes the host controller, render and lint let through are exactly those this
    /// client speaks.
    #[test]
    fn the_client_speaks_every_download_scheme_and_no_other() {
        use capstan_model::agent::{DOWNLOAD_SCHEMES, check_download_url};
        for scheme in DOWNLOAD_SCHEMES {
            let url = format!("{scheme}://images.example:8080/os.raw");
            assert!(Url::parse(&url).is_ok(), "{url}");
        }
        for url in [
            "https://images.example/os.raw",
            "ftp://images.example/os.raw",
            "file:///os.raw",
        ] {
            assert!(Url::parse(url).is_err(), "{url}");
            assert!(check_download_url(url).is_err(), "{url}");
        }
    }
}
