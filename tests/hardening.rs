//! The web process when exposed to a stranger, over real TCP on 127.0.0.1:
//! a client trickling its headers is cut off at the header-read timeout
//! while others are served; a stalled body is cut off; the connection
//! limit holds (past it, 503 at once; see also `shed_load.rs`); oversized bodies get 413 on every route; 10,000 forged
//! webhooks leave a bounded number of rows (and are all counted); database
//! gauges are cached; `/health` shows no database error text. Timeouts are
//! scaled down through `HttpLimits`; nothing here asserts a duration beyond
//! "cut off, and before the client would have finished".

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use cobro::domain::ChargeRequest;
use cobro::http::serve::HttpLimits;
use cobro::webhook::{Scheme, Verifier};
use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

on_both_dbs!(
    a_client_trickling_headers_is_cut_off_while_others_are_served,
    a_stalled_body_is_cut_off_and_writes_nothing,
    oversized_bodies_get_413_on_every_route,
    ten_thousand_forged_webhooks_leave_a_bounded_number_of_rows,
    database_gauges_are_cached_and_health_hides_database_errors,
);

fn limits(header_read: Duration, max_connections: usize) -> HttpLimits {
    HttpLimits {
        header_read_timeout: header_read,
        request_timeout: Duration::from_secs(5),
        body_timeout: Duration::from_secs(1),
        max_connections,
        max_connections_per_client: 64,
    }
}

async fn start(db: &TestDb, limits: HttpLimits) -> Web {
    serve_router(web_config(&db.store, test_verifier()).router(), limits).await
}

/// Waits until the server closes `conn` (EOF or reset), up to `limit`;
/// returns how long it took, or `None` if it stayed open.
async fn closed_within(
    conn: &mut (impl AsyncReadExt + Unpin),
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((start + limit).into(), conn.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {} // a response (e.g. 408) before the close
        }
    }
}

async fn a_client_trickling_headers_is_cut_off_while_others_are_served(db: &TestDb) {
    let timeout = Duration::from_secs(1);
    let web = start(db, limits(timeout, 64)).await;
    let addr = web.url.trim_start_matches("http://").to_owned();

    // One header byte every 100 ms: the whole head would take 30 s.
    let connected = Instant::now();
    let (mut slow, mut slow_w) = TcpStream::connect(&addr).await.unwrap().into_split();
    slow_w
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let trickle = {
        tokio::spawn(async move {
            for _ in 0..300 {
                if slow_w.write_all(b"X").await.is_err() {
                    return true; // the server hung up on us
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        })
    };
    // Meanwhile others are served, each on a connection of its own.
    let started = Instant::now();
    let mut served = 0;
    while started.elapsed() < timeout {
        let resp = reqwest::Client::new()
            .get(format!("{}/health", web.url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        served += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served >= 5, "only {served} requests served meanwhile");
    closed_within(&mut slow, Duration::from_secs(15))
        .await
        .expect("the trickling client was never disconnected");
    let cut = connected.elapsed();
    assert!(cut >= timeout, "cut off before its timeout: {cut:?}");
    assert!(
        trickle.await.unwrap(),
        "the trickle was refused before it ended"
    );
    eprintln!(
        "trickling client cut off after {cut:?} (header-read timeout {timeout:?}), {served} others served meanwhile"
    );

    // An idle keep-alive connection is closed by the same timer.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(
        closed_within(&mut idle, Duration::from_secs(15))
            .await
            .is_some(),
        "an idle keep-alive connection stayed open"
    );

    // The connection limit: with two slots taken by silent clients, a
    // third is refused at once (503, Retry-After), a health probe is still
    // answered, and once the two are cut off the third is served.
    web.stop().await;
    let web = start(db, limits(timeout, 2)).await;
    let addr = web.url.trim_start_matches("http://").to_owned();
    let _a = TcpStream::connect(&addr).await.unwrap();
    let _b = TcpStream::connect(&addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_millis(900))
        .build()
        .unwrap();
    let summary = format!("{}/finance/api/summary", web.url);
    let refused = quick
        .get(&summary)
        .bearer_auth(secret("ana"))
        .send()
        .await
        .expect("refused at once, not left waiting");
    assert_eq!(refused.status(), 503, "a third connection past two slots");
    assert_eq!(refused.headers()["retry-after"], "1");
    let probe = quick.get(format!("{}/health", web.url)).send().await;
    assert_eq!(probe.unwrap().status(), 200, "a probe past the limit");
    tokio::time::sleep(timeout + Duration::from_millis(500)).await;
    let resp = quick.get(&summary).bearer_auth(secret("ana")).send().await;
    assert_eq!(resp.unwrap().status(), 200, "served once the slots freed");
    web.stop().await;
}

async fn a_stalled_body_is_cut_off_and_writes_nothing(db: &TestDb) {
    let web = start(db, limits(Duration::from_secs(5), 64)).await;
    let addr = web.url.trim_start_matches("http://").to_owned();
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Idempotency-Key: 6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b\r\n\
         Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"order_id\": ",
        secret("app")
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    // ... and nothing more: the body stalls past the 1 s body timeout.
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(15), conn.read(&mut buf))
        .await
        .expect("the server never answered a stalled body")
        .unwrap();
    let reply = String::from_utf8_lossy(&buf[..n]).to_string();
    let status: u16 = reply[9..12].parse().unwrap();
    assert!((400..500).contains(&status), "{reply}");
    assert_eq!(db.attempts().await, 0, "nothing written");
    web.stop().await;
}

async fn oversized_bodies_get_413_on_every_route(db: &TestDb) {
    let web = web_on(&db.store).await;
    let http = reqwest::Client::new();
    let big = format!(
        "{{\"note\": \"{}\"}}",
        "x".repeat(cobro::web::API_BODY_LIMIT)
    );
    let id = uuid::Uuid::new_v4();
    for (path, key) in [
        ("/charges".to_owned(), "app"),
        ("/refunds".to_owned(), "app"),
        (format!("/finance/api/attempts/{id}/resolve"), "ana"),
        ("/finance/api/cases/1/resolve".to_owned(), "ana"),
        ("/finance/api/cases/1/refund-duplicate".to_owned(), "ana"),
    ] {
        let resp = http
            .post(format!("{}{path}", web.url))
            .bearer_auth(secret(key))
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 413, "{path}");
    }
    let form = http
        .post(format!("{}/finance/cases/1/resolve", web.url))
        .basic_auth("ana", Some(secret("ana")))
        .form(&[("note", "x".repeat(cobro::web::API_BODY_LIMIT))])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 413);
    // A head over the limit: 431, the connection is not read further.
    let resp = http
        .get(format!("{}/health", web.url))
        .header("x-padding", "y".repeat(cobro::http::serve::MAX_HEAD_BYTES))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 431);
    assert_eq!(db.attempts().await, 0);
    web.stop().await;
}

/// The values of the samples on `/metrics` whose line starts with `prefix`.
async fn metric(web: &Web, prefix: &str) -> Vec<f64> {
    let text = web.metrics().await;
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect()
}

/// `cobro_webhooks_rejected_total{reason}` summed.
async fn rejected_counter(web: &Web) -> f64 {
    metric(web, "cobro_webhooks_rejected_total{")
        .await
        .iter()
        .sum()
}

async fn ten_thousand_forged_webhooks_leave_a_bounded_number_of_rows(db: &TestDb) {
    const FORGED: usize = 10_000;
    let secret = test_secret();
    let ours = Verifier::from_env_value(Scheme::StandardWebhooks, &secret).unwrap();
    let web = start_web(&db.store, ours.clone()).await;
    let counted_before = rejected_counter(&web).await;
    let started_minute = chrono::Utc::now().timestamp() / 60;
    let other = test_verifier(); // signs with a secret the receiver does not have
    let now = chrono::Utc::now().timestamp();
    let http = reqwest::Client::new();
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
    let statuses = futures::future::join_all((0..FORGED).map(|i| {
        let http = http.clone();
        let limit = limit.clone();
        let url = format!("{}/webhooks/gateway", web.url);
        let body = format!(r#"{{"id":"evt_forged_{i}","type":"charge.succeeded","data":{{}}}}"#)
            .into_bytes();
        // Three kinds: another secret, a genuine delivery replayed an hour
        // later, no signature at all.
        let headers = match i % 3 {
            0 => other.sign(&format!("evt_forged_{i}"), now, &body),
            1 => ours.sign(&format!("evt_forged_{i}"), now - 3_600, &body),
            _ => Vec::new(),
        };
        async move {
            let _slot = limit.acquire().await.unwrap();
            let mut req = http
                .post(url)
                .header("content-type", "application/json")
                .body(body);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            req.send().await.unwrap().status().as_u16()
        }
    }))
    .await;
    let minutes = chrono::Utc::now().timestamp() / 60 - started_minute + 1;
    assert!(
        statuses.iter().all(|s| *s == 400 || *s == 401),
        "every forgery refused"
    );
    let (events, rows) = db.store.webhook_counts().await.unwrap();
    assert_eq!(events, 0, "no forged event stored");
    let reasons = db.store.rejected_webhook_reasons().await.unwrap();
    let mut distinct = reasons.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct,
        ["bad_signature", "missing_header", "timestamp_too_old"]
    );
    assert!(
        rows <= 3 * minutes,
        "{FORGED} forgeries left {rows} rows in {minutes} minute(s)"
    );
    let counted = rejected_counter(&web).await - counted_before;
    assert!(counted >= FORGED as f64, "every forgery counted: {counted}");
    eprintln!("{FORGED} forged webhooks: {rows} rows over {minutes} minute(s), {counted} counted");
    web.stop().await;
}

async fn database_gauges_are_cached_and_health_hides_database_errors(db: &TestDb) {
    let mut cfg = web_config(&db.store, test_verifier());
    cfg.metrics_cache = Duration::from_secs(2);
    let web = start_web_cfg(cfg).await;
    let attempts =
        || async { metric(&web, "cobro_attempts{kind=\"initial\",state=\"PENDIENTE\"}").await };
    assert_eq!(attempts().await, [0.0]);
    let req = ChargeRequest::parse("cached-1", 100, "USD", None, None).unwrap();
    db.store.enqueue(&req).await.unwrap();
    assert_eq!(attempts().await, [0.0], "served from the cache");
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    assert_eq!(attempts().await, [1.0], "read again once the cache is old");

    db.store.close().await;
    let resp = reqwest::get(format!("{}/health", web.url)).await.unwrap();
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        serde_json::json!({"ok": false, "database": "unreachable"})
    );
    web.stop().await;
}
