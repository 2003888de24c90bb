//! HTTP tests of load shedding: the rate limit's 429 with `Retry-After` (charges, refunds,
//! lookups and listings alike, never the control endpoints) and the injected 503 with
//! `Retry-After`; neither executes anything. And knobs that draw nothing leave the seeded
//! faults as they were.
//!
//! Invariant: each test starts its own simulator and checks over HTTP that the ledger holds
//! exactly the requests that were let through.

use std::{collections::BTreeSet, time::Duration};

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::*;

/// The `Retry-After` of a response, in seconds.
fn retry_after(resp: &reqwest::Response) -> Option<u64> {
    resp.headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

#[tokio::test]
async fn a_burst_above_the_rate_gets_429s_and_only_the_others_execute() -> TestResult {
    let sim = start_with(Faults {
        rate_limit_per_s: 1.0,
        rate_limit_burst: 5,
        ..Faults::default()
    })
    .await?;
    let c = client(Duration::from_secs(10))?;
    let keys: Vec<String> = (0..20).map(|_| key()).collect();
    let sent = keys.iter().enumerate().map(|(i, k)| {
        let c = c.clone();
        let sim = &sim;
        async move {
            let resp = charge(&c, sim, k, &body(&format!("o{i}"), 100)).await?;
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
    let l = ledger(&c, &sim).await?;
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
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn lookups_refunds_and_listings_are_throttled_control_endpoints_are_not() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let k = key();
    let charged: ChargeResult = charge(&c, &sim, &k, &body("o", 500)).await?.json().await?;
    // One token, refilled every ten seconds: the first request passes, the rest wait.
    let slow = Faults {
        rate_limit_per_s: 0.1,
        rate_limit_burst: 1,
        ..Faults::default()
    };
    assert_eq!(put_faults(&c, &sim, &slow).await?.status(), StatusCode::OK);
    assert_eq!(lookup(&c, &sim, &k).await?.status(), StatusCode::OK);
    let throttled = [
        lookup(&c, &sim, &k).await?,
        lookup_refund(&c, &sim, &key()).await?,
        refund(&c, &sim, &key(), &refund_body(&charged.charge_id, "o", 100)).await?,
        c.get(format!("{}/v1/charges", sim.url())).send().await?,
    ];
    for resp in throttled {
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(retry_after(&resp).is_some_and(|s| s >= 1));
    }
    // Control, ledger and health are outside the API's limit.
    for path in ["/control/faults", "/health", "/ledger"] {
        let resp = c.get(format!("{}{path}", sim.url())).send().await?;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
    }
    let l = ledger(&c, &sim).await?;
    assert!(l.refunds.is_empty(), "a throttled refund never executes");
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.stats.throttled, 4);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn injected_503_with_retry_after_executes_nothing() -> TestResult {
    let sim = start_with(Faults {
        p_503_retry_after: 1.0,
        retry_after_s: 7,
        ..Faults::default()
    })
    .await?;
    let c = client(Duration::from_secs(5))?;
    let k = key();
    let answers = [
        charge(&c, &sim, &k, &body("o", 700)).await?,
        refund(&c, &sim, &key(), &refund_body("ch_000001", "o", 100)).await?,
    ];
    for resp in answers {
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry_after(&resp), Some(7));
        assert_eq!(resp.json::<Value>().await?, json!({"error": "unavailable"}));
    }
    // Lookups are not affected by it.
    assert_eq!(lookup(&c, &sim, &k).await?.status(), StatusCode::NOT_FOUND);
    let l = ledger(&c, &sim).await?;
    assert!(l.entries.is_empty() && l.refunds.is_empty());
    assert_eq!(l.stats.unavailable_retry_after, 2);
    // The plain injected 503 still carries no Retry-After.
    put_faults(
        &c,
        &sim,
        &Faults {
            p_5xx: 1.0,
            ..Faults::default()
        },
    )
    .await?;
    let plain = charge(&c, &sim, &k, &body("o", 700)).await?;
    assert_eq!(plain.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after(&plain), None);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn knobs_that_draw_nothing_leave_the_seeded_faults_alone() -> TestResult {
    let base = Faults {
        p_decline: 0.5,
        decline_codes: vec!["do_not_honor".to_owned(), "insufficient_funds".to_owned()],
        ..Faults::default()
    };
    let with_knobs = Faults {
        rate_limit_per_s: 10_000.0,
        record_on_complete: true,
        retry_after_s: 9,
        ..base.clone()
    };
    let mut runs = Vec::new();
    for faults in [base, with_knobs] {
        let sim = start(SimConfig {
            seed: 7,
            faults,
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
    assert_eq!(runs[0].len(), 24);
    Ok(())
}
