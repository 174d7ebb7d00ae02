//! Shared pieces of capstan's fuzz targets: a loopback peer that answers every connection with the
//! bytes the fuzzer chose, so the clients (the agent's HTTP client, the Redfish driver) parse what a
//! broken or hostile server could send, over a real socket.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A TCP server on 127.0.0.1 whose answers are set per fuzz input: the n-th connection of an input
/// gets the n-th answer (the last one repeats).
pub struct ScriptedPeer {
    address: SocketAddr,
    answers: Arc<Mutex<(Vec<Vec<u8>>, usize)>>,
}

impl ScriptedPeer {
    /// Starts the server on an ephemeral loopback port, serving on a thread of its own.
    pub fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let answers = Arc::new(Mutex::new((Vec::<Vec<u8>>::new(), 0usize)));
        let shared = Arc::clone(&answers);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                // Read the request head (and whatever body came with it) before answering.
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = {
                    let Ok(mut guard) = shared.lock() else { return };
                    let (list, next) = &mut *guard;
                    let answer = list
                        .get((*next).min(list.len().saturating_sub(1)))
                        .cloned()
                        .unwrap_or_default();
                    *next += 1;
                    answer
                };
                let _ = stream.write_all(&answer);
            }
        });
        Ok(Self { address, answers })
    }

    /// The address clients dial.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sets the answers for the next input and starts again at the first.
    pub fn script(&self, answers: Vec<Vec<u8>>) {
        if let Ok(mut guard) = self.answers.lock() {
            *guard = (answers, 0);
        }
    }
}

/// Splits a fuzz input into pieces at a separator line, so one input scripts several answers.
pub fn split_answers(data: &[u8]) -> Vec<Vec<u8>> {
    const SEPARATOR: &[u8] = b"\n--next--\n";
    let mut pieces = Vec::new();
    let mut rest = data;
    while let Some(at) = rest.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
        pieces.push(rest[..at].to_vec());
        rest = &rest[at + SEPARATOR.len()..];
    }
    pieces.push(rest.to_vec());
    pieces
}
