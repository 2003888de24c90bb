//! HTTP tests of injected faults: dropped connections (before and after charging), held
//! replies, 503s, outage, run-time fault changes, seeded reproducibility and shutdown.
//!
//! Invariant: each test starts its own simulator and checks over HTTP that the ledger holds
//! exactly the charges executed, whatever the client observed.

use std::time::Instant;

use super::*;

#[tokio::test]
async fn response_lost_drops_connection_but_charges() -> TestResult {
    let sim = Sim::faulty(faults(|f| f.p_response_lost = 1.0)).await?;
    let k = key();
    assert_dropped(sim.charge(&k, &body("o", 700)).await);
    let l = sim.ledger().await?;
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.entries[0].idempotency_key, k);
    assert_eq!(l.stats.dropped, 1);
    // The charge is visible through a lookup, which this fault does not affect.
    assert_eq!(sim.lookup(&k).await?.status(), StatusCode::OK);
    // A retry with the same key is a replay, and its reply is lost too.
    assert_dropped(sim.charge(&k, &body("o", 700)).await);
    let l = sim.ledger().await?;
    assert_eq!(
        (l.entries.len(), l.stats.replays, l.stats.dropped),
        (1, 1, 2)
    );
    sim.stop().await
}

#[tokio::test]
async fn response_lost_sends_not_one_byte() -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sim = Sim::faulty(faults(|f| f.p_response_lost = 1.0)).await?;
    let payload = serde_json::to_string(&body("raw", 10))?;
    let request = format!(
        "POST /v1/charges HTTP/1.1\r\nHost: sim\r\nIdempotency-Key: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        key(),
        payload.len()
    );
    let mut stream = tokio::net::TcpStream::connect(sim.addr()).await?;
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
    assert_eq!(sim.ledger().await?.entries.len(), 1);
    sim.stop().await
}

#[tokio::test]
async fn request_lost_drops_connection_without_charging() -> TestResult {
    let sim = Sim::faulty(faults(|f| {
        f.p_request_lost = 1.0;
        f.hold_ms = 100;
    }))
    .await?;
    let started = Instant::now();
    assert_dropped(sim.charge(&key(), &body("o", 700)).await);
    assert!(started.elapsed() >= Duration::from_millis(100));
    let l = sim.ledger().await?;
    assert!(l.entries.is_empty());
    assert_eq!((l.stats.dropped, l.stats.executed), (1, 0));
    sim.stop().await
}

#[tokio::test]
async fn timeout_after_charge_holds_reply_but_charges() -> TestResult {
    let sim = Sim::faulty(faults(|f| {
        f.p_timeout_after_charge = 1.0;
        f.hold_ms = 5_000;
    }))
    .await?
    .timeout(Duration::from_millis(300))?;
    let err = sim.charge(&key(), &body("o", 700)).await;
    assert!(matches!(err, Err(ref e) if e.is_timeout()), "{err:?}");
    assert_eq!(sim.ledger().await?.entries.len(), 1);
    sim.stop().await
}

#[tokio::test]
async fn injected_5xx_and_outage_charge_nothing() -> TestResult {
    let sim = Sim::faulty(faults(|f| f.p_5xx = 1.0)).await?;
    let k = key();
    let resp = sim.charge(&k, &body("o", 700)).await?;
    assert_error(resp, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await?;
    assert!(sim.ledger().await?.entries.is_empty());
    sim.put_faults(&faults(|f| f.outage = true)).await?;
    let resp = sim.charge(&k, &body("o", 700)).await?;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        sim.lookup(&k).await?.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(sim.ledger().await?.entries.is_empty());
    sim.stop().await
}

#[tokio::test]
async fn put_faults_changes_behaviour_at_run_time() -> TestResult {
    let sim = Sim::start().await?;
    assert_eq!(
        sim.charge(&key(), &body("a", 1)).await?.status(),
        StatusCode::OK
    );
    let declining = faults(|f| {
        f.p_decline = 1.0;
        f.decline_codes = vec!["insufficient_funds".to_owned()];
    });
    assert_eq!(sim.put_faults(&declining).await?.status(), StatusCode::OK);
    let current: Faults = sim.get("/control/faults").send().await?.json().await?;
    assert_eq!(current, declining);
    let resp = sim.charge(&key(), &body("b", 1)).await?;
    let declined: ChargeResult = expect_json(resp, StatusCode::PAYMENT_REQUIRED).await?;
    assert_eq!(declined.status, DECLINED);
    assert_eq!(declined.decline_code.as_deref(), Some("insufficient_funds"));
    // Invalid faults are rejected and leave the current ones in place.
    let bad = json!({"p_5xx": 2.0});
    let resp = sim.put("/control/faults").json(&bad).send().await?;
    assert_bad_request(resp, "p_5xx", &bad).await?;
    sim.put_faults(&Faults::default()).await?;
    assert_eq!(
        sim.charge(&key(), &body("c", 1)).await?.status(),
        StatusCode::OK
    );
    let l = sim.ledger().await?;
    let statuses: Vec<&str> = l.entries.iter().map(|e| e.status.as_str()).collect();
    assert_eq!(statuses, [APPROVED, DECLINED, APPROVED]);
    // Reset clears the ledger, the key store and the stats.
    let reset = sim.post("/control/reset").send().await?;
    assert_eq!(reset.status(), StatusCode::OK);
    assert_eq!(sim.ledger().await?, Ledger::default());
    sim.stop().await
}

#[tokio::test]
async fn same_seed_same_faults() -> TestResult {
    let half_declined = faults(|f| {
        f.p_decline = 0.5;
        f.decline_codes = vec!["do_not_honor".to_owned(), "insufficient_funds".to_owned()];
    });
    let runs = [
        decline_codes(7, half_declined.clone()).await?,
        decline_codes(7, half_declined).await?,
    ];
    assert_eq!(runs[0], runs[1]);
    assert!(runs[0].iter().any(Option::is_some) && runs[0].iter().any(Option::is_none));
    Ok(())
}

#[tokio::test]
async fn per_order_draws_give_each_order_the_same_faults_whatever_the_arrival_order() -> TestResult
{
    let mut runs = Vec::new();
    for reversed in [false, true] {
        let sim = Sim::with(config(|c| {
            c.seed = 11;
            c.faults = faults(|f| f.p_decline = 0.5);
            c.per_order_draws = true;
        }))
        .await?;
        let mut orders: Vec<usize> = (0..24).collect();
        if reversed {
            orders.reverse();
        }
        // Two requests per order (fresh keys, as a naive client would send).
        for i in orders {
            for _ in 0..2 {
                sim.charge(&key(), &body(&format!("o{i}"), 100)).await?;
            }
        }
        let l = sim.ledger().await?;
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
        sim.stop().await?;
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
    let sim = Sim::faulty(faults(|f| f.p_timeout_after_charge = 1.0))
        .await?
        .timeout(Duration::from_secs(20))?;
    let held = sim.charge_later(&key(), body("o", 1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), sim.stop()).await??;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_dropped(held.await?);
    Ok(())
}
