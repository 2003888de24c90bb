//! HTTP tests of load shedding: the rate limit's 429 with `Retry-After` (charges, refunds,
//! lookups and listings alike, never the control endpoints) and the injected 503 with
//! `Retry-After`; neither executes anything. And knobs that draw nothing leave the seeded
//! faults as they were.
//!
//! Invariant: each test starts its own simulator and checks over HTTP that the ledger holds
//! exactly the requests that were let through.

use std::collections::BTreeSet;

use futures::future::join_all;

use super::*;

/// The `Retry-After` of a response, in seconds.
fn retry_after(resp: &Response) -> Option<u64> {
    resp.headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

#[tokio::test]
async fn a_burst_above_the_rate_gets_429s_and_only_the_others_execute() -> TestResult {
    let sim = Sim::faulty(faults(|f| {
        f.rate_limit_per_s = 1.0;
        f.rate_limit_burst = 5;
    }))
    .await?
    .timeout(Duration::from_secs(10))?;
    let keys: Vec<String> = (0..20).map(|_| key()).collect();
    let sent = keys.iter().enumerate().map(|(i, k)| {
        let sim = &sim;
        async move {
            let resp = sim.charge(k, &body(&format!("o{i}"), 100)).await?;
            let status = resp.status();
            let after = retry_after(&resp);
            let answer: Value = resp.json().await?;
            TestResult::Ok((k.clone(), status, after, answer))
        }
    });
    let mut approved = BTreeSet::new();
    let mut throttled = 0;
    for answer in join_all(sent).await {
        let (k, status, after, answer) = answer?;
        match status {
            StatusCode::OK => {
                approved.insert(k);
            }
            StatusCode::TOO_MANY_REQUESTS => {
                throttled += 1;
                assert!(after.is_some_and(|s| s >= 1), "Retry-After: {after:?}");
                assert_eq!(answer, json!({"error": "rate_limited"}));
            }
            other => panic!("unexpected {other}: {answer}"),
        }
    }
    assert!(approved.len() >= 5, "the burst passes: {}", approved.len());
    assert!(throttled >= 1, "nothing throttled");
    let l = sim.ledger().await?;
    let recorded: BTreeSet<String> = l
        .entries
        .iter()
        .map(|e| e.idempotency_key.clone())
        .collect();
    assert_eq!(
        recorded, approved,
        "exactly the requests let through executed"
    );
    assert_eq!(
        (l.stats.throttled, l.stats.charge_requests),
        (throttled, 20)
    );
    sim.stop().await
}

#[tokio::test]
async fn lookups_refunds_and_listings_are_throttled_control_endpoints_are_not() -> TestResult {
    let sim = Sim::start().await?;
    let k = key();
    let charged: ChargeResult = sim.charge(&k, &body("o", 500)).await?.json().await?;
    // One token, refilled every ten seconds: the first request passes, the rest wait.
    let slow = faults(|f| {
        f.rate_limit_per_s = 0.1;
        f.rate_limit_burst = 1;
    });
    assert_eq!(sim.put_faults(&slow).await?.status(), StatusCode::OK);
    assert_eq!(sim.lookup(&k).await?.status(), StatusCode::OK);
    let throttled = [
        sim.lookup(&k).await?,
        sim.lookup_refund(&key()).await?,
        sim.refund(&key(), &refund_of(&charged, 100)).await?,
        sim.get("/v1/charges").send().await?,
    ];
    for resp in throttled {
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(retry_after(&resp).is_some_and(|s| s >= 1));
    }
    // Control, ledger and health are outside the API's limit.
    for path in ["/control/faults", "/health", "/ledger"] {
        let resp = sim.get(path).send().await?;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
    }
    let l = sim.ledger().await?;
    assert!(l.refunds.is_empty(), "a throttled refund never executes");
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.stats.throttled, 4);
    sim.stop().await
}

#[tokio::test]
async fn injected_503_with_retry_after_executes_nothing() -> TestResult {
    let sim = Sim::faulty(faults(|f| {
        f.p_503_retry_after = 1.0;
        f.retry_after_s = 7;
    }))
    .await?;
    let k = key();
    let answers = [
        sim.charge(&k, &body("o", 700)).await?,
        sim.refund(&key(), &refund_body("ch_000001", "o", 100))
            .await?,
    ];
    for resp in answers {
        assert_eq!(retry_after(&resp), Some(7));
        assert_error(resp, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await?;
    }
    // Lookups are not affected by it.
    assert_eq!(sim.lookup(&k).await?.status(), StatusCode::NOT_FOUND);
    let l = sim.ledger().await?;
    assert!(l.entries.is_empty() && l.refunds.is_empty());
    assert_eq!(l.stats.unavailable_retry_after, 2);
    // The plain injected 503 still carries no Retry-After.
    sim.put_faults(&faults(|f| f.p_5xx = 1.0)).await?;
    let plain = sim.charge(&k, &body("o", 700)).await?;
    assert_eq!(plain.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after(&plain), None);
    sim.stop().await
}

#[tokio::test]
async fn knobs_that_draw_nothing_leave_the_seeded_faults_alone() -> TestResult {
    let base = faults(|f| {
        f.p_decline = 0.5;
        f.decline_codes = vec!["do_not_honor".to_owned(), "insufficient_funds".to_owned()];
    });
    let with_knobs = Faults {
        rate_limit_per_s: 10_000.0,
        record_on_complete: true,
        retry_after_s: 9,
        ..base.clone()
    };
    let runs = [
        decline_codes(7, base).await?,
        decline_codes(7, with_knobs).await?,
    ];
    assert_eq!(runs[0], runs[1]);
    assert_eq!(runs[0].len(), 24);
    Ok(())
}
