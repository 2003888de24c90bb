//! HTTP tests of the charge, lookup and validation paths without network faults: approvals,
//! idempotent replays, non-idempotent re-execution, 409 on key reuse, lookups and 400s.
//!
//! Invariant: each test starts its own simulator and checks the ledger over HTTP.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn approval_lands_in_ledger_once() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let k = key();
    let resp = charge(&c, &sim, &k, &body("order-1", 1250)).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let result: ChargeResult = resp.json().await?;
    assert_eq!(result.status, APPROVED);
    assert_eq!(result.decline_code, None);
    assert_eq!(
        (result.idempotency_key.as_str(), result.amount_minor),
        (k.as_str(), 1250)
    );
    let l = ledger(&c, &sim).await?;
    assert_eq!(l.entries.len(), 1);
    let e = &l.entries[0];
    assert_eq!(
        (e.seq, e.charge_id.as_str()),
        (1, result.charge_id.as_str())
    );
    assert_eq!(
        (e.order_id.as_str(), e.currency.as_str()),
        ("order-1", "EUR")
    );
    assert_eq!((l.stats.charge_requests, l.stats.executed), (1, 1));
    let health: Value = c
        .get(format!("{}/health", sim.url()))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(health, json!({"ok": true}));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn idempotent_replay_does_not_charge_again() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let k = key();
    let first: ChargeResult = charge(&c, &sim, &k, &body("o", 500)).await?.json().await?;
    let resp = charge(&c, &sim, &k, &body("o", 500)).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let second: ChargeResult = resp.json().await?;
    assert_eq!(first, second);
    let l = ledger(&c, &sim).await?;
    assert_eq!(l.entries.len(), 1);
    assert_eq!(
        (l.stats.replays, l.stats.executed, l.stats.charge_requests),
        (1, 1, 2)
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn non_idempotent_mode_charges_twice_and_lookup_returns_first() -> TestResult {
    let sim = start(SimConfig {
        per_order_draws: false,
        webhooks: None,
        idempotent: false,
        ..SimConfig::default()
    })
    .await?;
    let c = client(Duration::from_secs(5))?;
    let k = key();
    let first: ChargeResult = charge(&c, &sim, &k, &body("o", 500)).await?.json().await?;
    let second: ChargeResult = charge(&c, &sim, &k, &body("o", 500)).await?.json().await?;
    assert_ne!(first.charge_id, second.charge_id);
    let l = ledger(&c, &sim).await?;
    assert_eq!(l.entries.len(), 2);
    assert_eq!(l.entries_for_key(&k).count(), 2);
    assert_eq!(l.stats.replays, 0);
    let found: ChargeResult = lookup(&c, &sim, &k).await?.json().await?;
    assert_eq!(found.charge_id, first.charge_id);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn key_reuse_with_other_amount_is_409() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let k = key();
    assert_eq!(
        charge(&c, &sim, &k, &body("o", 500)).await?.status(),
        StatusCode::OK
    );
    let resp = charge(&c, &sim, &k, &body("o", 501)).await?;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let err: Value = resp.json().await?;
    assert_eq!(err, json!({"error": "idempotency_key_reused"}));
    assert_eq!(ledger(&c, &sim).await?.entries.len(), 1);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn lookup_found_missing_and_failing() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let k = key();
    let charged: ChargeResult = charge(&c, &sim, &k, &body("o", 42)).await?.json().await?;
    let resp = lookup(&c, &sim, &k).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.json::<ChargeResult>().await?, charged);
    let resp = lookup(&c, &sim, &key()).await?;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.json::<Value>().await?, json!({"error": "not_found"}));
    put_faults(
        &c,
        &sim,
        &Faults {
            p_lookup_fail: 1.0,
            ..Faults::default()
        },
    )
    .await?;
    assert_eq!(
        lookup(&c, &sim, &k).await?.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(ledger(&c, &sim).await?.stats.lookup_requests, 3);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn invalid_requests_are_400_with_field() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let url = format!("{}/v1/charges", sim.url());
    let no_key = c.post(&url).json(&body("o", 1)).send().await?;
    assert_eq!(no_key.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        no_key.json::<Value>().await?["field"],
        IDEMPOTENCY_KEY_HEADER
    );
    let cases = [
        (
            "not-a-uuid",
            json!({"order_id": "o", "amount_minor": 1, "currency": "EUR"}),
            IDEMPOTENCY_KEY_HEADER,
        ),
        (
            "",
            json!({"order_id": "", "amount_minor": 1, "currency": "EUR"}),
            "order_id",
        ),
        (
            "",
            json!({"order_id": "o", "amount_minor": 0, "currency": "EUR"}),
            "amount_minor",
        ),
        (
            "",
            json!({"order_id": "o", "amount_minor": "1", "currency": "EUR"}),
            "amount_minor",
        ),
        (
            "",
            json!({"order_id": "o", "amount_minor": 1, "currency": "eur"}),
            "currency",
        ),
        ("", json!({"order_id": "o", "amount_minor": 1}), "currency"),
        ("", json!([1, 2]), "body"),
    ];
    for (k, b, field) in cases {
        let k = if k.is_empty() { key() } else { k.to_owned() };
        let resp = c
            .post(&url)
            .header(IDEMPOTENCY_KEY_HEADER, k)
            .json(&b)
            .send()
            .await?;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{b}");
        let err: Value = resp.json().await?;
        assert_eq!(err["field"], field, "{b}: {err}");
        assert!(err["error"].is_string());
    }
    let l = ledger(&c, &sim).await?;
    assert!(l.entries.is_empty());
    assert_eq!(l.stats.charge_requests, 8);
    sim.shutdown().await;
    Ok(())
}
