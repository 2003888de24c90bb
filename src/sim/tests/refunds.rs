//! HTTP tests of `POST /v1/refunds` and `GET /v1/refunds/{key}`: approvals, idempotent
//! replays, 409 on key reuse, the four decline codes, partial refunds, lookups, 400s, and
//! the charge faults applied to refunds (lost response, 5xx, outage, per-order draws).
//!
//! Invariant: each test starts its own simulator and checks over HTTP that the ledger's
//! `refunds` hold exactly the refunds executed, whatever the client observed.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::*;

/// Charges `amount_minor` EUR for `order_id` with a fresh key and returns the approval.
async fn approved_charge(
    c: &Client,
    sim: &SimHandle,
    order_id: &str,
    amount_minor: i64,
) -> TestResult<ChargeResult> {
    let resp = charge(c, sim, &key(), &body(order_id, amount_minor)).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    Ok(resp.json().await?)
}

/// Refunds with a fresh key; returns the HTTP status and the decoded answer.
async fn refund_once(
    c: &Client,
    sim: &SimHandle,
    b: &RefundBody,
) -> TestResult<(StatusCode, RefundResult)> {
    let resp = refund(c, sim, &key(), b).await?;
    Ok((resp.status(), resp.json().await?))
}

#[tokio::test]
async fn refund_is_approved_and_lands_in_ledger() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "order-1", 1000).await?;
    let k = key();
    let resp = refund(&c, &sim, &k, &refund_body(&ch.charge_id, "order-1", 400)).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let r: RefundResult = resp.json().await?;
    assert_eq!(
        (r.status.as_str(), r.decline_code.as_deref()),
        (APPROVED, None)
    );
    assert!(r.refund_id.starts_with("re_"), "{}", r.refund_id);
    assert_eq!(
        (
            r.charge_id.as_str(),
            r.idempotency_key.as_str(),
            r.amount_minor
        ),
        (ch.charge_id.as_str(), k.as_str(), 400)
    );
    let l = ledger(&c, &sim).await?;
    assert_eq!(l.refunds.len(), 1);
    let e = &l.refunds[0];
    assert_eq!((e.seq, e.refund_id.as_str()), (1, r.refund_id.as_str()));
    assert_eq!(
        (e.order_id.as_str(), e.currency.as_str(), e.status.as_str()),
        ("order-1", "EUR", APPROVED)
    );
    assert_eq!(e.to_result(), r);
    assert_eq!(l.entries.len(), 1, "a refund is not a charge");
    assert_eq!(
        (
            l.stats.refund_requests,
            l.stats.charge_requests,
            l.stats.executed
        ),
        (1, 1, 1)
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn same_refund_key_twice_refunds_once() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    let (k, b) = (key(), refund_body(&ch.charge_id, "o", 700));
    let first: RefundResult = refund(&c, &sim, &k, &b).await?.json().await?;
    let resp = refund(&c, &sim, &k, &b).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.json::<RefundResult>().await?, first);
    let l = ledger(&c, &sim).await?;
    assert_eq!(l.refunds.len(), 1);
    assert_eq!((l.stats.refund_replays, l.stats.refund_requests), (1, 2));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refund_key_reused_with_other_amount_is_409() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    let k = key();
    let first = refund(&c, &sim, &k, &refund_body(&ch.charge_id, "o", 100)).await?;
    assert_eq!(first.status(), StatusCode::OK);
    let resp = refund(&c, &sim, &k, &refund_body(&ch.charge_id, "o", 101)).await?;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    assert_eq!(
        resp.json::<Value>().await?,
        json!({"error": "idempotency_key_reused"})
    );
    assert_eq!(ledger(&c, &sim).await?.refunds.len(), 1);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn over_refund_is_402_amount_exceeds_charge() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    let k = key();
    let resp = refund(&c, &sim, &k, &refund_body(&ch.charge_id, "o", 1001)).await?;
    assert_eq!(resp.status(), StatusCode::PAYMENT_REQUIRED);
    let r: RefundResult = resp.json().await?;
    assert_eq!(
        (r.status.as_str(), r.decline_code.as_deref()),
        (DECLINED, Some(AMOUNT_EXCEEDS_CHARGE))
    );
    assert!(r.refund_id.starts_with("re_"));
    // Recorded (a retry replays the decline) but it counts for nothing.
    let again = refund(&c, &sim, &k, &refund_body(&ch.charge_id, "o", 1001)).await?;
    assert_eq!(again.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(again.json::<RefundResult>().await?, r);
    let (status, full) = refund_once(&c, &sim, &refund_body(&ch.charge_id, "o", 1000)).await?;
    assert_eq!((status, full.status.as_str()), (StatusCode::OK, APPROVED));
    let l = ledger(&c, &sim).await?;
    let statuses: Vec<&str> = l.refunds.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, [DECLINED, APPROVED]);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refunds_of_unknown_declined_or_other_currency_charges_are_declined() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    put_faults(
        &c,
        &sim,
        &Faults {
            p_decline: 1.0,
            ..Faults::default()
        },
    )
    .await?;
    let declined: ChargeResult = charge(&c, &sim, &key(), &body("o2", 500))
        .await?
        .json()
        .await?;
    assert_eq!(declined.status, DECLINED);
    let usd = RefundBody {
        currency: "USD".to_owned(),
        ..refund_body(&ch.charge_id, "o", 100)
    };
    let cases = [
        (refund_body("ch_999999", "o", 100), CHARGE_NOT_FOUND),
        (
            refund_body(&declined.charge_id, "o2", 100),
            CHARGE_NOT_APPROVED,
        ),
        (usd, CURRENCY_MISMATCH),
    ];
    for (b, code) in cases {
        let (status, r) = refund_once(&c, &sim, &b).await?;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{b:?}");
        assert_eq!(r.decline_code.as_deref(), Some(code), "{b:?}");
    }
    // p_decline is for charges only: a valid refund is still approved.
    let (status, _) = refund_once(&c, &sim, &refund_body(&ch.charge_id, "o", 1000)).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ledger(&c, &sim).await?.refunds.len(), 4);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn partial_refunds_sum_to_the_charge_then_one_cent_more_is_declined() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    for amount in [250, 250, 500] {
        let (status, _) = refund_once(&c, &sim, &refund_body(&ch.charge_id, "o", amount)).await?;
        assert_eq!(status, StatusCode::OK, "{amount}");
    }
    let (status, r) = refund_once(&c, &sim, &refund_body(&ch.charge_id, "o", 1)).await?;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(r.decline_code.as_deref(), Some(AMOUNT_EXCEEDS_CHARGE));
    let l = ledger(&c, &sim).await?;
    let refunded: i64 = l
        .refunds_for_charge(&ch.charge_id)
        .filter(|r| r.is_approved())
        .map(|r| r.amount_minor)
        .sum();
    assert_eq!((refunded, l.refunds.len()), (1000, 4));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refund_lookup_found_missing_and_failing() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    let k = key();
    let refunded: RefundResult = refund(&c, &sim, &k, &refund_body(&ch.charge_id, "o", 10))
        .await?
        .json()
        .await?;
    let resp = lookup_refund(&c, &sim, &k.to_uppercase()).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.json::<RefundResult>().await?, refunded);
    // Charge keys and refund keys live apart.
    for missing in [key(), ch.idempotency_key.clone()] {
        let resp = lookup_refund(&c, &sim, &missing).await?;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(resp.json::<Value>().await?, json!({"error": "not_found"}));
    }
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
        lookup_refund(&c, &sim, &k).await?.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    let stats = ledger(&c, &sim).await?.stats;
    assert_eq!(
        (stats.refund_lookup_requests, stats.lookup_requests),
        (4, 0)
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn invalid_refunds_are_400_with_field() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let url = format!("{}/v1/refunds", sim.url());
    let no_key = c
        .post(&url)
        .json(&refund_body("ch_1", "o", 1))
        .send()
        .await?;
    assert_eq!(no_key.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        no_key.json::<Value>().await?["field"],
        IDEMPOTENCY_KEY_HEADER
    );
    let cases = [
        (
            json!({"order_id": "o", "amount_minor": 1, "currency": "EUR"}),
            "charge_id",
        ),
        (
            json!({"charge_id": " ", "order_id": "o", "amount_minor": 1, "currency": "EUR"}),
            "charge_id",
        ),
        (
            json!({"charge_id": "ch_1", "order_id": "", "amount_minor": 1, "currency": "EUR"}),
            "order_id",
        ),
        (
            json!({"charge_id": "ch_1", "order_id": "o", "amount_minor": -5, "currency": "EUR"}),
            "amount_minor",
        ),
        (
            json!({"charge_id": "ch_1", "order_id": "o", "amount_minor": 1, "currency": "eur"}),
            "currency",
        ),
        (json!("refund"), "body"),
    ];
    for (b, field) in cases {
        let resp = c
            .post(&url)
            .header(IDEMPOTENCY_KEY_HEADER, key())
            .json(&b)
            .send()
            .await?;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{b}");
        let err: Value = resp.json().await?;
        assert_eq!(err["field"], field, "{b}: {err}");
        assert!(err["error"].is_string());
    }
    let l = ledger(&c, &sim).await?;
    assert!(l.refunds.is_empty());
    assert_eq!(l.stats.refund_requests, 7);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refund_response_lost_still_refunds_and_lookup_finds_it() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    put_faults(
        &c,
        &sim,
        &Faults {
            p_response_lost: 1.0,
            ..Faults::default()
        },
    )
    .await?;
    let (k, b) = (key(), refund_body(&ch.charge_id, "o", 600));
    assert_dropped(refund(&c, &sim, &k, &b).await);
    let l = ledger(&c, &sim).await?;
    assert_eq!(l.refunds.len(), 1);
    assert_eq!(
        (l.refunds[0].idempotency_key.as_str(), l.stats.dropped),
        (k.as_str(), 1)
    );
    let resp = lookup_refund(&c, &sim, &k).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let found: RefundResult = resp.json().await?;
    assert_eq!(found, l.refunds[0].to_result());
    // A retry with the same key replays; its reply is lost too, but nothing is refunded twice.
    assert_dropped(refund(&c, &sim, &k, &b).await);
    let l = ledger(&c, &sim).await?;
    assert_eq!((l.refunds.len(), l.stats.refund_replays), (1, 1));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refund_timeout_after_execution_holds_reply_but_refunds() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    put_faults(
        &c,
        &sim,
        &Faults {
            p_timeout_after_charge: 1.0,
            hold_ms: 5_000,
            ..Faults::default()
        },
    )
    .await?;
    let impatient = client(Duration::from_millis(300))?;
    let err = refund(
        &impatient,
        &sim,
        &key(),
        &refund_body(&ch.charge_id, "o", 1),
    )
    .await;
    assert!(matches!(err, Err(ref e) if e.is_timeout()), "{err:?}");
    assert_eq!(ledger(&c, &sim).await?.refunds.len(), 1);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refund_request_lost_5xx_and_outage_refund_nothing() -> TestResult {
    let sim = start(SimConfig::default()).await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    let (k, b) = (key(), refund_body(&ch.charge_id, "o", 1000));
    let lost = Faults {
        p_request_lost: 1.0,
        hold_ms: 50,
        ..Faults::default()
    };
    let p_5xx = Faults {
        p_5xx: 1.0,
        ..Faults::default()
    };
    let outage = Faults {
        outage: true,
        ..Faults::default()
    };
    put_faults(&c, &sim, &lost).await?;
    assert_dropped(refund(&c, &sim, &k, &b).await);
    for faults in [p_5xx, outage] {
        put_faults(&c, &sim, &faults).await?;
        let resp = refund(&c, &sim, &k, &b).await?;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE, "{faults:?}");
        assert_eq!(resp.json::<Value>().await?, json!({"error": "unavailable"}));
    }
    assert_eq!(
        lookup_refund(&c, &sim, &k).await?.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(ledger(&c, &sim).await?.refunds.is_empty());
    // Once the gateway is back the same key executes, once.
    put_faults(&c, &sim, &Faults::default()).await?;
    assert_eq!(refund(&c, &sim, &k, &b).await?.status(), StatusCode::OK);
    assert_eq!(lookup_refund(&c, &sim, &k).await?.status(), StatusCode::OK);
    let l = ledger(&c, &sim).await?;
    assert_eq!((l.refunds.len(), l.stats.refund_requests), (1, 4));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn non_idempotent_mode_refunds_every_request() -> TestResult {
    let sim = start(SimConfig {
        idempotent: false,
        ..SimConfig::default()
    })
    .await?;
    let c = client(Duration::from_secs(5))?;
    let ch = approved_charge(&c, &sim, "o", 1000).await?;
    let (k, b) = (key(), refund_body(&ch.charge_id, "o", 500));
    let statuses = [
        refund(&c, &sim, &k, &b).await?.status(),
        refund(&c, &sim, &k, &b).await?.status(),
        refund(&c, &sim, &k, &b).await?.status(),
    ];
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::OK, StatusCode::PAYMENT_REQUIRED]
    );
    let l = ledger(&c, &sim).await?;
    assert_eq!((l.refunds.len(), l.stats.refund_replays), (3, 0));
    let found: RefundResult = lookup_refund(&c, &sim, &k).await?.json().await?;
    assert_eq!(found.refund_id, l.refunds[0].refund_id);
    // Reset clears refunds with the rest.
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
async fn per_order_draws_give_each_refund_the_same_faults_whatever_the_arrival_order() -> TestResult
{
    let mut runs = Vec::new();
    for reversed in [false, true] {
        let sim = start(SimConfig {
            seed: 11,
            per_order_draws: true,
            ..SimConfig::default()
        })
        .await?;
        let c = client(Duration::from_secs(5))?;
        let mut orders: Vec<String> = (0..24).map(|i| format!("o{i}")).collect();
        if reversed {
            orders.reverse();
        }
        let mut charges = Vec::new();
        for order in &orders {
            charges.push((order, approved_charge(&c, &sim, order, 100).await?));
        }
        put_faults(
            &c,
            &sim,
            &Faults {
                p_response_lost: 0.5,
                ..Faults::default()
            },
        )
        .await?;
        let mut lost = Vec::new();
        for (order, ch) in charges {
            let answered = refund(&c, &sim, &key(), &refund_body(&ch.charge_id, order, 100)).await;
            lost.push((order.clone(), answered.is_err()));
        }
        lost.sort();
        assert_eq!(ledger(&c, &sim).await?.refunds.len(), 24);
        runs.push(lost);
        sim.shutdown().await;
    }
    assert_eq!(runs[0], runs[1], "same faults order by order");
    assert!(runs[0].iter().any(|(_, l)| *l) && runs[0].iter().any(|(_, l)| !*l));
    Ok(())
}
