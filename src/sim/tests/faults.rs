//! HTTP tests of injected faults: dropped connections (before and after charging), held
//! replies, 503s, outage, run-time fault changes, seeded reproducibility and shutdown.
//!
//! Invariant: each test starts its own simulator and checks over HTTP that the ledger holds
//! exactly the charges executed, whatever the client observed.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn response_lost_drops_connection_but_charges() -> TestResult {
    let sim = start_with(Faults {
        p_response_lost: 1.0,
        ..Faults::default()
    })
    .await?;
    let c = client(Duration::from_secs(5))?;
    let k = key();
    assert_dropped(charge(&c, &sim, &k, &body("o", 700)).await);
    let l = ledger(&c, &sim).await?;
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.entries[0].idempotency_key, k);
    assert_eq!(l.stats.dropped, 1);
    // The charge is visible through a lookup, which this fault does not affect.
    let resp = lookup(&c, &sim, &k).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    // A retry with the same key is a replay, and its reply is lost too.
    assert_dropped(charge(&c, &sim, &k, &body("o", 700)).await);
    let l = ledger(&c, &sim).await?;
    assert_eq!(
        (l.entries.len(), l.stats.replays, l.stats.dropped),
        (1, 1, 2)
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn response_lost_sends_not_one_byte() -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sim = start_with(Faults {
        p_response_lost: 1.0,
        ..Faults::default()
    })
    .await?;
    let payload = serde_json::to_string(&body("raw", 10))?;
    let request = format!(
        "POST /v1/charges HTTP/1.1\r\nHost: sim\r\nIdempotency-Key: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        key(),
        payload.len()
    );
    let mut stream = tokio::net::TcpStream::connect(sim.addr).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut received = Vec::new();
    let read =
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut received)).await?;
    // Either a clean EOF or a reset, but never any response bytes.
    assert!(
        read.is_err() || received.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&received)
    );
    let c = client(Duration::from_secs(5))?;
    assert_eq!(ledger(&c, &sim).await?.entries.len(), 1);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn request_lost_drops_connection_without_charging() -> TestResult {
    let sim = start_with(Faults {
        p_request_lost: 1.0,
        hold_ms: 100,
        ..Faults::default()
    })
    .await?;
    let c = client(Duration::from_secs(5))?;
    let started = Instant::now();
    assert_dropped(charge(&c, &sim, &key(), &body("o", 700)).await);
    assert!(started.elapsed() >= Duration::from_millis(100));
    let l = ledger(&c, &sim).await?;
    assert!(l.entries.is_empty());
    assert_eq!((l.stats.dropped, l.stats.executed), (1, 0));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn timeout_after_charge_holds_reply_but_charges() -> TestResult {
    let sim = start_with(Faults {
        p_timeout_after_charge: 1.0,
        hold_ms: 5_000,
        ..Faults::default()
    })
    .await?;
    let c = client(Duration::from_millis(300))?;
    let err = charge(&c, &sim, &key(), &body("o", 700)).await;
    assert!(matches!(err, Err(ref e) if e.is_timeout()), "{err:?}");
    assert_eq!(ledger(&c, &sim).await?.entries.len(), 1);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn injected_5xx_and_outage_charge_nothing() -> TestResult {
    let sim = start_with(Faults {
        p_5xx: 1.0,
        ..Faults::default()
    })
    .await?;
    let c = client(Duration::from_secs(5))?;
    let k = key();
    let resp = charge(&c, &sim, &k, &body("o", 700)).await?;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.json::<Value>().await?, json!({"error": "unavailable"}));
    assert!(ledger(&c, &sim).await?.entries.is_empty());
    put_faults(
        &c,
        &sim,
        &Faults {
            outage: true,
            ..Faults::default()
        },
    )
    .await?;
    let resp = charge(&c, &sim, &k, &body("o", 700)).await?;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        lookup(&c, &sim, &k).await?.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(ledger(&c, &sim).await?.entries.is_empty());
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn put_faults_changes_behaviour_at_run_time() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    assert_eq!(
        charge(&c, &sim, &key(), &body("a", 1)).await?.status(),
        StatusCode::OK
    );
    let declining = Faults {
        p_decline: 1.0,
        decline_codes: vec!["insufficient_funds".to_owned()],
        ..Faults::default()
    };
    assert_eq!(
        put_faults(&c, &sim, &declining).await?.status(),
        StatusCode::OK
    );
    let current: Faults = c
        .get(format!("{}/control/faults", sim.url()))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(current, declining);
    let resp = charge(&c, &sim, &key(), &body("b", 1)).await?;
    assert_eq!(resp.status(), StatusCode::PAYMENT_REQUIRED);
    let declined: ChargeResult = resp.json().await?;
    assert_eq!(declined.status, DECLINED);
    assert_eq!(declined.decline_code.as_deref(), Some("insufficient_funds"));
    // Invalid faults are rejected and leave the current ones in place.
    let bad = c
        .put(format!("{}/control/faults", sim.url()))
        .json(&json!({"p_5xx": 2.0}))
        .send()
        .await?;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(bad.json::<Value>().await?["field"], "p_5xx");
    put_faults(&c, &sim, &Faults::default()).await?;
    assert_eq!(
        charge(&c, &sim, &key(), &body("c", 1)).await?.status(),
        StatusCode::OK
    );
    let l = ledger(&c, &sim).await?;
    let statuses: Vec<&str> = l.entries.iter().map(|e| e.status.as_str()).collect();
    assert_eq!(statuses, [APPROVED, DECLINED, APPROVED]);
    // Reset clears the ledger, the key store and the stats.
    let reset = c
        .post(format!("{}/control/reset", sim.url()))
        .send()
        .await?;
    assert_eq!(reset.status(), StatusCode::OK);
    assert_eq!(ledger(&c, &sim).await?, Ledger::default());
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn same_seed_same_faults() -> TestResult {
    let faults = Faults {
        p_decline: 0.5,
        decline_codes: vec!["do_not_honor".to_owned(), "insufficient_funds".to_owned()],
        ..Faults::default()
    };
    let mut runs = Vec::new();
    for _ in 0..2 {
        let sim = start(SimConfig {
            seed: 7,
            faults: faults.clone(),
            ..SimConfig::default()
        })
        .await?;
        let c = client(Duration::from_secs(5))?;
        for i in 0..24 {
            charge(&c, &sim, &key(), &body(&format!("o{i}"), 100)).await?;
        }
        let l = ledger(&c, &sim).await?;
        runs.push(
            l.entries
                .into_iter()
                .map(|e| e.decline_code)
                .collect::<Vec<_>>(),
        );
        sim.shutdown().await;
    }
    assert_eq!(runs[0], runs[1]);
    assert!(runs[0].iter().any(Option::is_some) && runs[0].iter().any(Option::is_none));
    Ok(())
}

#[tokio::test]
async fn per_order_draws_give_each_order_the_same_faults_whatever_the_arrival_order() -> TestResult
{
    let faults = Faults {
        p_decline: 0.5,
        ..Faults::default()
    };
    let mut runs = Vec::new();
    for reversed in [false, true] {
        let sim = start(SimConfig {
            seed: 11,
            faults: faults.clone(),
            per_order_draws: true,
            webhooks: None,
            ..SimConfig::default()
        })
        .await?;
        let c = client(Duration::from_secs(5))?;
        let mut orders: Vec<usize> = (0..24).collect();
        if reversed {
            orders.reverse();
        }
        // Two requests per order (fresh keys, as a naive client would send).
        for i in orders {
            for _ in 0..2 {
                charge(&c, &sim, &key(), &body(&format!("o{i}"), 100)).await?;
            }
        }
        let l = ledger(&c, &sim).await?;
        let mut per_order: Vec<(String, Vec<String>)> = (0..24)
            .map(|i| {
                let order = format!("o{i}");
                let statuses = l
                    .entries
                    .iter()
                    .filter(|e| e.order_id == order)
                    .map(|e| e.status.clone())
                    .collect();
                (order, statuses)
            })
            .collect();
        per_order.sort();
        runs.push(per_order);
        sim.shutdown().await;
    }
    assert_eq!(runs[0], runs[1], "same faults order by order");
    let flat: Vec<&String> = runs[0].iter().flat_map(|(_, s)| s).collect();
    assert!(flat.iter().any(|s| *s == "declined") && flat.iter().any(|s| *s == "approved"));
    // The first and second request of an order are drawn independently.
    assert!(runs[0].iter().any(|(_, s)| s[0] != s[1]));
    Ok(())
}

#[tokio::test]
async fn shutdown_drops_held_requests_promptly() -> TestResult {
    let sim = start_with(Faults {
        p_timeout_after_charge: 1.0,
        ..Faults::default()
    })
    .await?;
    let c = client(Duration::from_secs(20))?;
    let url = sim.url();
    let held = tokio::spawn({
        let c = c.clone();
        async move {
            c.post(format!("{url}/v1/charges"))
                .header(IDEMPOTENCY_KEY_HEADER, key())
                .json(&body("o", 1))
                .send()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), sim.shutdown()).await?;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_dropped(held.await?);
    Ok(())
}
