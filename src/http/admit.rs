//! Who gets a connection slot: the admission step of [`super::serve`].
//!
//! A new connection is served normally when a slot is free and its client
//! address holds fewer than its share; otherwise it is an *overflow*
//! connection, with a small pool of its own: its first bytes are read for
//! a short while, a health or readiness probe (`GET /health`, `GET
//! /ready`) is served on it, and anything else is answered `503` with
//! `Retry-After` and closed. With the overflow pool full too, the
//! connection is closed at once.
//!
//! Invariant: nothing waits for a slot (no connection is left in the
//! kernel's backlog because the server is full); a probe or a refusal
//! holds an overflow slot for at most [`SNIFF`] plus [`PROBE_DEADLINE`] or
//! [`DRAIN`]; the per-client counts hold exactly the served connections
//! open, and an address leaves the table with its last one.

use std::collections::HashMap;
use std::io::Cursor;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections beyond the limits being looked at, probed or refused at once.
pub const OVERFLOW: usize = 64;

/// How long an overflow connection has to show its request line.
pub const SNIFF: Duration = Duration::from_millis(500);

/// The longest a probe served on an overflow connection may take: the
/// probe's own wait on the database (2 s, `web::health::DEADLINE`) plus a
/// second for its head and answer, so a slow database is answered with
/// its 503 and reason rather than a dropped connection.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(3);

/// How long a refused connection is read (and discarded) after its 503, so
/// closing with unread bytes does not reset the answer away.
pub const DRAIN: Duration = Duration::from_secs(1);

/// The paths a probe may ask for on an overflow connection.
pub const PROBE_PATHS: [&str; 2] = ["/health", "/ready"];

/// Why a connection did not get a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Every one of `max_connections` is open.
    Server,
    /// This address holds its `max_connections_per_client`.
    Client(usize),
}

/// What to do with a new connection.
pub enum Admit {
    /// Serve it; the ticket frees its slot and its client's share on drop.
    Serve(Ticket),
    /// Probe or refuse it ([`overflow`]), holding an overflow slot.
    Overflow(OwnedSemaphorePermit, Full),
    /// Close it at once: the overflow pool is full as well.
    Close,
}

/// A served connection's slot and its share of its client's cap.
pub struct Ticket {
    _slot: OwnedSemaphorePermit,
    ip: IpAddr,
    clients: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = clients.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                clients.remove(&self.ip);
            }
        }
    }
}

/// The slots of one listener.
pub struct Admission {
    slots: Arc<Semaphore>,
    overflow: Arc<Semaphore>,
    per_client: usize,
    clients: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Admission {
    pub fn new(max_connections: usize, per_client: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max_connections)),
            overflow: Arc::new(Semaphore::new(OVERFLOW)),
            per_client,
            clients: Arc::default(),
        }
    }

    /// Decides at once, never waiting, for a connection from `ip`.
    pub fn admit(&self, ip: IpAddr) -> Admit {
        let ip = ip.to_canonical();
        let full = {
            let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
            let held = clients.get(&ip).copied().unwrap_or(0);
            if held >= self.per_client {
                Full::Client(self.per_client)
            } else if let Ok(slot) = self.slots.clone().try_acquire_owned() {
                *clients.entry(ip).or_default() += 1;
                return Admit::Serve(Ticket {
                    _slot: slot,
                    ip,
                    clients: self.clients.clone(),
                });
            } else {
                Full::Server
            }
        };
        match self.overflow.clone().try_acquire_owned() {
            Ok(permit) => Admit::Overflow(permit, full),
            Err(_) => Admit::Close,
        }
    }
}

/// Whether a request starting with `head` is a probe: `Some(true)` once it
/// is, `Some(false)` once it cannot be, `None` while it could still be.
pub fn is_probe(head: &[u8]) -> Option<bool> {
    let mut open = false;
    for method in ["GET ", "HEAD "] {
        for path in PROBE_PATHS {
            for end in [" ", "?"] {
                let line = format!("{method}{path}{end}");
                let line = line.as_bytes();
                if head.starts_with(line) {
                    return Some(true);
                }
                open |= line.starts_with(head);
            }
        }
    }
    if open { None } else { Some(false) }
}

/// Reads from `conn` into `head` until [`is_probe`] decides (or the peer
/// stops sending); whether it is a probe.
async fn sniff(conn: &mut (impl AsyncRead + Unpin), head: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 32];
    loop {
        if let Some(probe) = is_probe(head) {
            return probe;
        }
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
}

/// An overflow connection: a probe is served (one request, `http` with
/// keep-alive off), anything else gets 503 with `Retry-After`.
pub async fn overflow(
    mut stream: TcpStream,
    full: Full,
    router: Router,
    http: hyper::server::conn::http1::Builder,
    sniff_for: Duration,
) {
    let mut head = Vec::with_capacity(32);
    let probe = tokio::time::timeout(sniff_for, sniff(&mut stream, &mut head))
        .await
        .unwrap_or(false);
    if !probe {
        let _ = tokio::time::timeout(DRAIN, refuse(stream, full)).await;
        return;
    }
    // The bytes already read go first, then the rest of the connection.
    let (read, write) = stream.into_split();
    let io = tokio::io::join(Cursor::new(head).chain(read), write);
    let service = TowerToHyperService::new(router);
    let conn = http.serve_connection(TokioIo::new(io), service);
    let _ = tokio::time::timeout(PROBE_DEADLINE, conn).await;
}

/// 503 with `Retry-After` and a JSON body saying which limit was met; then
/// whatever the client still sends is read and dropped until it closes.
async fn refuse(mut stream: TcpStream, full: Full) {
    let message = match full {
        Full::Server => "the server is at its connection limit; retry in a moment".to_owned(),
        Full::Client(n) => format!(
            "too many connections from your address (at most {n} at once); \
             close one or retry in a moment"
        ),
    };
    let body = json!({ "error": message }).to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\n{}content-length: {}\r\n\r\n{body}",
        super::headers::RAW,
        body.len()
    );
    if stream.write_all(answer.as_bytes()).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 1024];
    while let Ok(n) = stream.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_known_by_its_request_line_and_nothing_else() {
        for (head, want) in [
            (&b""[..], None),
            (b"G", None),
            (b"GET /hea", None),
            (b"GET /health", None),
            (b"GET /health ", Some(true)),
            (b"GET /health?verbose=1 ", Some(true)),
            (b"HEAD /ready HTTP/1.1\r\n", Some(true)),
            (b"GET /healthz ", Some(false)),
            (b"POST /health ", Some(false)),
            (b"GET /charges ", Some(false)),
            (b"\x16\x03\x01", Some(false)),
        ] {
            assert_eq!(is_probe(head), want, "{:?}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn a_client_past_its_share_overflows_and_its_share_comes_back() {
        let admission = Admission::new(3, 2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let first = admission.admit(a);
        let second = admission.admit(a);
        assert!(matches!(first, Admit::Serve(_)));
        assert!(matches!(second, Admit::Serve(_)));
        assert!(matches!(
            admission.admit(a),
            Admit::Overflow(_, Full::Client(2))
        ));
        let other = admission.admit(b);
        assert!(matches!(other, Admit::Serve(_)));
        assert!(matches!(
            admission.admit(b),
            Admit::Overflow(_, Full::Server)
        ));
        drop(first);
        assert!(matches!(admission.admit(a), Admit::Serve(_)));
        drop((second, other));
        let counts = admission.clients.lock().unwrap();
        assert!(counts.is_empty(), "{counts:?}");
    }

    #[test]
    fn with_the_overflow_pool_full_a_connection_is_closed() {
        let admission = Admission::new(1, 1);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let _held = admission.admit(ip);
        let overflowing: Vec<Admit> = (0..OVERFLOW).map(|_| admission.admit(ip)).collect();
        assert!(overflowing.iter().all(|a| matches!(a, Admit::Overflow(..))));
        assert!(matches!(admission.admit(ip), Admit::Close));
    }
}
