//! Issue 28, "held up by slow clients", over real TCP on 127.0.0.1: with
//! every connection slot held by clients dribbling headers, or trickling a
//! webhook body at 1 byte/s, `/health` still answers within a second and a
//! connection past the limit is told `503` with `Retry-After` at once
//! rather than parked; the webhook's own body deadline cuts the tricklers;
//! one address holding its share of connections is refused the next while
//! another address is served. Timeouts are scaled down through the
//! settings; each test takes a few seconds.

#[macro_use]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cobro::http::serve::HttpLimits;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

on_both_dbs!(
    dribbling_clients_on_every_slot_leave_health_answering_and_the_rest_refused,
    webhook_bodies_at_one_byte_a_second_are_cut_and_health_answers,
    one_address_past_its_share_is_refused_while_another_is_served,
);

fn limits(max_connections: usize, per_client: usize) -> HttpLimits {
    HttpLimits {
        header_read_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(30),
        body_timeout: Duration::from_secs(10),
        max_connections,
        max_connections_per_client: per_client,
    }
}

async fn start(db: &TestDb, limits: HttpLimits, webhook_deadline: Duration) -> (Web, String) {
    let verifier = test_verifier();
    let mut cfg = web_config(&db.store, verifier);
    cfg.webhook_body_timeout = webhook_deadline;
    let web = serve_router(cfg.router(), limits).await;
    let addr = web.url.trim_start_matches("http://").to_owned();
    (web, addr)
}

/// `GET /health` on a new connection from `from`: the status and how long
/// the answer took (panics past 10 s).
async fn health(addr: &str, from: [u8; 4]) -> (u16, Duration) {
    let started = Instant::now();
    let mut conn = connect_from(addr, from).await;
    conn.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let reply = read_reply(&mut conn, Duration::from_secs(10))
        .await
        .expect("/health never answered");
    (status_of(&reply), started.elapsed())
}

/// A connection to `addr` from the loopback address `from` (Linux routes
/// all of 127/8 to lo).
async fn connect_from(addr: &str, from: [u8; 4]) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(addr.parse().unwrap()).await.unwrap()
}

/// Whatever the server sends until it closes, or `None` if it sends
/// nothing within `limit`.
async fn read_reply(conn: &mut TcpStream, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline.into(), conn.read(&mut buf)).await {
            Err(_) if got.is_empty() => return None,
            Err(_) | Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&got).into_owned())
}

fn status_of(reply: &str) -> u16 {
    reply
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {reply:?}"))
}

/// A 503 at once, with `Retry-After`, saying why.
fn assert_shed(reply: &str, why: &str) {
    assert_eq!(status_of(reply), 503, "{reply}");
    let lower = reply.to_ascii_lowercase();
    assert!(lower.contains("\r\nretry-after: 1\r\n"), "{reply}");
    assert!(reply.contains(why), "{reply}");
    // Hand-written, and still with every answer's safety headers.
    assert!(lower.contains("\r\nx-frame-options: deny\r\n"), "{reply}");
    assert!(
        lower.contains("\r\nx-content-type-options: nosniff\r\n"),
        "{reply}"
    );
    assert!(lower.contains("frame-ancestors 'none'"), "{reply}");
}

/// Opens `n` connections from 127.0.0.1 that send a request head one
/// byte every 200 ms (the whole head would take a minute).
fn dribblers(addr: &str, n: usize) -> Vec<tokio::task::JoinHandle<Option<String>>> {
    (0..n)
        .map(|_| {
            let addr = addr.to_owned();
            tokio::spawn(async move {
                let conn = connect_from(&addr, [127, 0, 0, 1]).await;
                let (mut read, mut write) = conn.into_split();
                let head = format!("POST /charges HTTP/1.1\r\nHost: x\r\n{}", "X".repeat(300));
                let dribble = tokio::spawn(async move {
                    for b in head.bytes() {
                        if write.write_all(&[b]).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                });
                let mut got = Vec::new();
                let _ =
                    tokio::time::timeout(Duration::from_secs(20), read.read_to_end(&mut got)).await;
                dribble.abort();
                (!got.is_empty()).then(|| String::from_utf8_lossy(&got).into_owned())
            })
        })
        .collect()
}

async fn dribbling_clients_on_every_slot_leave_health_answering_and_the_rest_refused(db: &TestDb) {
    // The setting: 20 connections, a 5 s header timeout, 60
    // clients dribbling headers.
    let (web, addr) = start(db, limits(20, 64), Duration::from_secs(5)).await;
    let flood_started = Instant::now();
    let flood = dribblers(&addr, 60);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let (status, took) = health(&addr, [127, 0, 0, 3]).await;
        assert_eq!(status, 200);
        assert!(took < Duration::from_secs(1), "/health took {took:?}");
        worst = worst.max(took);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Any other request past the limit: told at once, not parked.
    let started = Instant::now();
    let mut late = connect_from(&addr, [127, 0, 0, 3]).await;
    late.write_all(b"GET /control/pause HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let reply = read_reply(&mut late, Duration::from_secs(10))
        .await
        .unwrap();
    let refused_in = started.elapsed();
    assert_shed(&reply, "connection limit");
    assert!(refused_in < Duration::from_secs(1), "{refused_in:?}");

    // Of the 60, the 40 past the limit were refused as promptly; the 20
    // served ones were cut off by the header timeout (408 or a close).
    let mut refused = 0;
    for task in flood {
        if let Some(reply) = task.await.unwrap()
            && status_of(&reply) == 503
        {
            assert_shed(&reply, "connection limit");
            refused += 1;
        }
    }
    assert_eq!(refused, 40, "the dribblers past the limit");
    eprintln!(
        "60 dribbling clients on 20 slots: /health worst {worst:?} over 5 tries; \
         a request past the limit refused in {refused_in:?}; the flood ended after {:?}",
        flood_started.elapsed()
    );
    web.stop().await;
}

async fn webhook_bodies_at_one_byte_a_second_are_cut_and_health_answers(db: &TestDb) {
    let deadline = Duration::from_secs(2);
    let (web, addr) = start(db, limits(20, 64), deadline).await;
    // 20 deliveries, each announcing 200 bytes and sending one a second.
    let tricklers: Vec<_> = (0..20)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let conn = connect_from(&addr, [127, 0, 0, 1]).await;
                let (mut read, mut write) = conn.into_split();
                write
                    .write_all(
                        b"POST /webhooks/gateway HTTP/1.1\r\nHost: x\r\n\
                          Content-Type: application/json\r\nContent-Length: 200\r\n\r\n",
                    )
                    .await
                    .unwrap();
                let trickle = tokio::spawn(async move {
                    for _ in 0..200 {
                        if write.write_all(b" ").await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                });
                let mut got = Vec::new();
                let _ =
                    tokio::time::timeout(Duration::from_secs(20), read.read_to_end(&mut got)).await;
                trickle.abort();
                (
                    String::from_utf8_lossy(&got).into_owned(),
                    started.elapsed(),
                )
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut worst = Duration::ZERO;
    for _ in 0..4 {
        let (status, took) = health(&addr, [127, 0, 0, 3]).await;
        assert_eq!(status, 200);
        assert!(took < Duration::from_secs(1), "/health took {took:?}");
        worst = worst.max(took);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut slowest = Duration::ZERO;
    for task in tricklers {
        let (reply, took) = task.await.unwrap();
        assert_eq!(status_of(&reply), 408, "{reply}");
        assert!(reply.contains("did not arrive within"), "{reply}");
        assert!(took >= deadline, "cut before the deadline: {took:?}");
        assert!(
            took < deadline + Duration::from_secs(2),
            "cut late: {took:?}"
        );
        slowest = slowest.max(took);
    }
    // Each is a rejection like any other: one sample per minute is kept.
    let reasons = db.store.rejected_webhook_reasons().await.unwrap();
    assert!(!reasons.is_empty() && reasons.len() <= 2, "{reasons:?}");
    assert!(reasons.iter().all(|r| r == "body_too_slow"), "{reasons:?}");
    eprintln!(
        "20 webhook bodies at 1 byte/s on 20 slots: /health worst {worst:?}; \
         every trickler cut by {slowest:?} (deadline {deadline:?})"
    );
    web.stop().await;
}

async fn one_address_past_its_share_is_refused_while_another_is_served(db: &TestDb) {
    let (web, addr) = start(db, limits(20, 3), Duration::from_secs(5)).await;
    // 127.0.0.1 holds its three connections, saying nothing.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_from(&addr, [127, 0, 0, 1]).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ask = format!(
        "GET /control/pause HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\n\r\n",
        secret("ana")
    );
    let started = Instant::now();
    let mut fourth = connect_from(&addr, [127, 0, 0, 1]).await;
    fourth.write_all(ask.as_bytes()).await.unwrap();
    let reply = read_reply(&mut fourth, Duration::from_secs(10))
        .await
        .unwrap();
    assert_shed(
        &reply,
        "too many connections from your address (at most 3 at once)",
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    // Another address is served, the same request.
    let mut other = connect_from(&addr, [127, 0, 0, 2]).await;
    other.write_all(ask.as_bytes()).await.unwrap();
    let reply = read_reply(&mut other, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(status_of(&reply), 200, "{reply}");
    // Once one of the three closes, the first address is served again.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = connect_from(&addr, [127, 0, 0, 1]).await;
    again.write_all(ask.as_bytes()).await.unwrap();
    let reply = read_reply(&mut again, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(status_of(&reply), 200, "{reply}");
    web.stop().await;
}
