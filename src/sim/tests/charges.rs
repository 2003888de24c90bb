//! HTTP tests of the charge, lookup and validation paths without network faults: approvals,
//! idempotent replays, non-idempotent re-execution, 409 on key reuse, lookups and 400s.
//!
//! Invariant: each test starts its own simulator and checks the ledger over HTTP.

use super::*;

#[tokio::test]
async fn approval_lands_in_ledger_once() -> TestResult {
    let sim = Sim::start().await?;
    let k = key();
    let resp = sim.charge(&k, &body("order-1", 1250)).await?;
    let result: ChargeResult = expect_json(resp, StatusCode::OK).await?;
    assert_eq!(result.status, APPROVED);
    assert_eq!(result.decline_code, None);
    assert_eq!(
        (result.idempotency_key.as_str(), result.amount_minor),
        (k.as_str(), 1250)
    );
    let l = sim.ledger().await?;
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
    let health: Value = sim.get("/health").send().await?.json().await?;
    assert_eq!(health, json!({"ok": true}));
    sim.stop().await
}

#[tokio::test]
async fn idempotent_replay_does_not_charge_again() -> TestResult {
    let sim = Sim::start().await?;
    let k = key();
    let first: ChargeResult = sim.charge(&k, &body("o", 500)).await?.json().await?;
    let resp = sim.charge(&k, &body("o", 500)).await?;
    let second: ChargeResult = expect_json(resp, StatusCode::OK).await?;
    assert_eq!(first, second);
    let l = sim.ledger().await?;
    assert_eq!(l.entries.len(), 1);
    assert_eq!(
        (l.stats.replays, l.stats.executed, l.stats.charge_requests),
        (1, 1, 2)
    );
    sim.stop().await
}

#[tokio::test]
async fn non_idempotent_mode_charges_twice_and_lookup_returns_first() -> TestResult {
    let sim = Sim::with(config(|c| c.idempotent = false)).await?;
    let k = key();
    let first: ChargeResult = sim.charge(&k, &body("o", 500)).await?.json().await?;
    let second: ChargeResult = sim.charge(&k, &body("o", 500)).await?.json().await?;
    assert_ne!(first.charge_id, second.charge_id);
    let l = sim.ledger().await?;
    assert_eq!(l.entries.len(), 2);
    assert_eq!(l.entries_for_key(&k).count(), 2);
    assert_eq!(l.stats.replays, 0);
    let found: ChargeResult = sim.lookup(&k).await?.json().await?;
    assert_eq!(found.charge_id, first.charge_id);
    sim.stop().await
}

#[tokio::test]
async fn key_reuse_with_other_amount_is_409() -> TestResult {
    let sim = Sim::start().await?;
    let k = key();
    assert_eq!(
        sim.charge(&k, &body("o", 500)).await?.status(),
        StatusCode::OK
    );
    let resp = sim.charge(&k, &body("o", 501)).await?;
    assert_error(resp, StatusCode::CONFLICT, "idempotency_key_reused").await?;
    assert_eq!(sim.ledger().await?.entries.len(), 1);
    sim.stop().await
}

#[tokio::test]
async fn lookup_found_missing_and_failing() -> TestResult {
    let sim = Sim::start().await?;
    let k = key();
    let charged: ChargeResult = sim.charge(&k, &body("o", 42)).await?.json().await?;
    let found: ChargeResult = expect_json(sim.lookup(&k).await?, StatusCode::OK).await?;
    assert_eq!(found, charged);
    let missing = sim.lookup(&key()).await?;
    assert_error(missing, StatusCode::NOT_FOUND, "not_found").await?;
    sim.put_faults(&faults(|f| f.p_lookup_fail = 1.0)).await?;
    let failing = sim.lookup(&k).await?;
    assert_eq!(failing.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(sim.ledger().await?.stats.lookup_requests, 3);
    sim.stop().await
}

#[tokio::test]
async fn invalid_requests_are_400_with_field() -> TestResult {
    let sim = Sim::start().await?;
    let no_key = sim.post("/v1/charges").json(&body("o", 1)).send().await?;
    assert_bad_request(no_key, IDEMPOTENCY_KEY_HEADER, "no key").await?;
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
        let err = assert_bad_request(sim.charge(&k, &b).await?, field, &b).await?;
        assert!(err["error"].is_string());
    }
    let l = sim.ledger().await?;
    assert!(l.entries.is_empty());
    assert_eq!(l.stats.charge_requests, 8);
    sim.stop().await
}
