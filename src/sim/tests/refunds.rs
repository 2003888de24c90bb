//! HTTP tests of `POST /v1/refunds` and `GET /v1/refunds/{key}`: approvals, idempotent
//! replays, 409 on key reuse, the four decline codes, partial refunds, lookups, 400s, and
//! the charge faults applied to refunds (lost response, 5xx, outage, per-order draws).
//!
//! Invariant: each test starts its own simulator and checks over HTTP that the ledger's
//! `refunds` hold exactly the refunds executed, whatever the client observed.

use super::*;

impl Api {
    /// `POST /control/refund-failed` with `body`: the status and the JSON answer.
    async fn fail_refund(&self, body: Value) -> TestResult<(StatusCode, Value)> {
        let resp = self
            .post("/control/refund-failed")
            .json(&body)
            .send()
            .await?;
        Ok((resp.status(), resp.json().await?))
    }

    /// Refunds with a fresh key; returns the HTTP status and the decoded answer.
    async fn refund_once(&self, b: &RefundBody) -> TestResult<(StatusCode, RefundResult)> {
        let resp = self.refund(&key(), b).await?;
        Ok((resp.status(), resp.json().await?))
    }
}

/// A simulator (default config) with one approved charge of 1000 EUR for order "o".
async fn charged() -> TestResult<(Sim, ChargeResult)> {
    let sim = Sim::start().await?;
    let ch = sim.approved("o", 1000).await?;
    Ok((sim, ch))
}

#[tokio::test]
async fn refund_is_approved_and_lands_in_ledger() -> TestResult {
    let sim = Sim::start().await?;
    let ch = sim.approved("order-1", 1000).await?;
    let k = key();
    let resp = sim.refund(&k, &refund_of(&ch, 400)).await?;
    let r: RefundResult = expect_json(resp, StatusCode::OK).await?;
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
    let l = sim.ledger().await?;
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
    sim.stop().await
}

#[tokio::test]
async fn same_refund_key_twice_refunds_once() -> TestResult {
    let (sim, ch) = charged().await?;
    let (k, b) = (key(), refund_of(&ch, 700));
    let first: RefundResult = sim.refund(&k, &b).await?.json().await?;
    let again: RefundResult = expect_json(sim.refund(&k, &b).await?, StatusCode::OK).await?;
    assert_eq!(again, first);
    let l = sim.ledger().await?;
    assert_eq!(l.refunds.len(), 1);
    assert_eq!((l.stats.refund_replays, l.stats.refund_requests), (1, 2));
    sim.stop().await
}

#[tokio::test]
async fn refund_key_reused_with_other_amount_is_409() -> TestResult {
    let (sim, ch) = charged().await?;
    let k = key();
    let first = sim.refund(&k, &refund_of(&ch, 100)).await?;
    assert_eq!(first.status(), StatusCode::OK);
    let resp = sim.refund(&k, &refund_of(&ch, 101)).await?;
    assert_error(resp, StatusCode::CONFLICT, "idempotency_key_reused").await?;
    assert_eq!(sim.ledger().await?.refunds.len(), 1);
    sim.stop().await
}

#[tokio::test]
async fn over_refund_is_402_amount_exceeds_charge() -> TestResult {
    let (sim, ch) = charged().await?;
    let k = key();
    let resp = sim.refund(&k, &refund_of(&ch, 1001)).await?;
    let r: RefundResult = expect_json(resp, StatusCode::PAYMENT_REQUIRED).await?;
    assert_eq!(
        (r.status.as_str(), r.decline_code.as_deref()),
        (DECLINED, Some(AMOUNT_EXCEEDS_CHARGE))
    );
    assert!(r.refund_id.starts_with("re_"));
    // Recorded (a retry replays the decline) but it counts for nothing.
    let again = sim.refund(&k, &refund_of(&ch, 1001)).await?;
    let again: RefundResult = expect_json(again, StatusCode::PAYMENT_REQUIRED).await?;
    assert_eq!(again, r);
    let (status, full) = sim.refund_once(&refund_of(&ch, 1000)).await?;
    assert_eq!((status, full.status.as_str()), (StatusCode::OK, APPROVED));
    let l = sim.ledger().await?;
    let statuses: Vec<&str> = l.refunds.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, [DECLINED, APPROVED]);
    sim.stop().await
}

#[tokio::test]
async fn refunds_of_unknown_declined_or_other_currency_charges_are_declined() -> TestResult {
    let (sim, ch) = charged().await?;
    sim.put_faults(&faults(|f| f.p_decline = 1.0)).await?;
    let declined: ChargeResult = sim.charge(&key(), &body("o2", 500)).await?.json().await?;
    assert_eq!(declined.status, DECLINED);
    let usd = RefundBody {
        currency: "USD".to_owned(),
        ..refund_of(&ch, 100)
    };
    let cases = [
        (refund_body("ch_999999", "o", 100), CHARGE_NOT_FOUND),
        (refund_of(&declined, 100), CHARGE_NOT_APPROVED),
        (usd, CURRENCY_MISMATCH),
    ];
    for (b, code) in cases {
        let (status, r) = sim.refund_once(&b).await?;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{b:?}");
        assert_eq!(r.decline_code.as_deref(), Some(code), "{b:?}");
    }
    // p_decline is for charges only: a valid refund is still approved.
    let (status, _) = sim.refund_once(&refund_of(&ch, 1000)).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sim.ledger().await?.refunds.len(), 4);
    sim.stop().await
}

#[tokio::test]
async fn partial_refunds_sum_to_the_charge_then_one_cent_more_is_declined() -> TestResult {
    let (sim, ch) = charged().await?;
    for amount in [250, 250, 500] {
        let (status, _) = sim.refund_once(&refund_of(&ch, amount)).await?;
        assert_eq!(status, StatusCode::OK, "{amount}");
    }
    let (status, r) = sim.refund_once(&refund_of(&ch, 1)).await?;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(r.decline_code.as_deref(), Some(AMOUNT_EXCEEDS_CHARGE));
    let l = sim.ledger().await?;
    let refunded: i64 = l
        .refunds_for_charge(&ch.charge_id)
        .filter(|r| r.is_approved())
        .map(|r| r.amount_minor)
        .sum();
    assert_eq!((refunded, l.refunds.len()), (1000, 4));
    sim.stop().await
}

#[tokio::test]
async fn refund_lookup_found_missing_and_failing() -> TestResult {
    let (sim, ch) = charged().await?;
    let k = key();
    let refunded: RefundResult = sim.refund(&k, &refund_of(&ch, 10)).await?.json().await?;
    let resp = sim.lookup_refund(&k.to_uppercase()).await?;
    assert_eq!(
        expect_json::<RefundResult>(resp, StatusCode::OK).await?,
        refunded
    );
    // Charge keys and refund keys live apart.
    for missing in [key(), ch.idempotency_key.clone()] {
        let resp = sim.lookup_refund(&missing).await?;
        assert_error(resp, StatusCode::NOT_FOUND, "not_found").await?;
    }
    sim.put_faults(&faults(|f| f.p_lookup_fail = 1.0)).await?;
    assert_eq!(
        sim.lookup_refund(&k).await?.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    let stats = sim.ledger().await?.stats;
    assert_eq!(
        (stats.refund_lookup_requests, stats.lookup_requests),
        (4, 0)
    );
    sim.stop().await
}

#[tokio::test]
async fn invalid_refunds_are_400_with_field() -> TestResult {
    let sim = Sim::start().await?;
    let no_key = sim.post("/v1/refunds").json(&refund_body("ch_1", "o", 1));
    let no_key = no_key.send().await?;
    assert_bad_request(no_key, IDEMPOTENCY_KEY_HEADER, "no key").await?;
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
        let err = assert_bad_request(sim.refund(&key(), &b).await?, field, &b).await?;
        assert!(err["error"].is_string());
    }
    let l = sim.ledger().await?;
    assert!(l.refunds.is_empty());
    assert_eq!(l.stats.refund_requests, 7);
    sim.stop().await
}

#[tokio::test]
async fn refund_response_lost_still_refunds_and_lookup_finds_it() -> TestResult {
    let (sim, ch) = charged().await?;
    sim.put_faults(&faults(|f| f.p_response_lost = 1.0)).await?;
    let (k, b) = (key(), refund_of(&ch, 600));
    assert_dropped(sim.refund(&k, &b).await);
    let l = sim.ledger().await?;
    assert_eq!(l.refunds.len(), 1);
    assert_eq!(
        (l.refunds[0].idempotency_key.as_str(), l.stats.dropped),
        (k.as_str(), 1)
    );
    let found: RefundResult = expect_json(sim.lookup_refund(&k).await?, StatusCode::OK).await?;
    assert_eq!(found, l.refunds[0].to_result());
    // A retry with the same key replays; its reply is lost too, but nothing is refunded twice.
    assert_dropped(sim.refund(&k, &b).await);
    let l = sim.ledger().await?;
    assert_eq!((l.refunds.len(), l.stats.refund_replays), (1, 1));
    sim.stop().await
}

#[tokio::test]
async fn refund_timeout_after_execution_holds_reply_but_refunds() -> TestResult {
    let (sim, ch) = charged().await?;
    sim.put_faults(&faults(|f| {
        f.p_timeout_after_charge = 1.0;
        f.hold_ms = 5_000;
    }))
    .await?;
    let impatient = sim.client(Duration::from_millis(300))?;
    let err = impatient.refund(&key(), &refund_of(&ch, 1)).await;
    assert!(matches!(err, Err(ref e) if e.is_timeout()), "{err:?}");
    assert_eq!(sim.ledger().await?.refunds.len(), 1);
    sim.stop().await
}

#[tokio::test]
async fn refund_request_lost_5xx_and_outage_refund_nothing() -> TestResult {
    let (sim, ch) = charged().await?;
    let (k, b) = (key(), refund_of(&ch, 1000));
    let lost = faults(|f| {
        f.p_request_lost = 1.0;
        f.hold_ms = 50;
    });
    let p_5xx = faults(|f| f.p_5xx = 1.0);
    let outage = faults(|f| f.outage = true);
    sim.put_faults(&lost).await?;
    assert_dropped(sim.refund(&k, &b).await);
    for faults in [p_5xx, outage] {
        sim.put_faults(&faults).await?;
        let resp = sim.refund(&k, &b).await?;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE, "{faults:?}");
        assert_eq!(resp.json::<Value>().await?, json!({"error": "unavailable"}));
    }
    assert_eq!(
        sim.lookup_refund(&k).await?.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(sim.ledger().await?.refunds.is_empty());
    // Once the gateway is back the same key executes, once.
    sim.put_faults(&Faults::default()).await?;
    assert_eq!(sim.refund(&k, &b).await?.status(), StatusCode::OK);
    assert_eq!(sim.lookup_refund(&k).await?.status(), StatusCode::OK);
    let l = sim.ledger().await?;
    assert_eq!((l.refunds.len(), l.stats.refund_requests), (1, 4));
    sim.stop().await
}

#[tokio::test]
async fn non_idempotent_mode_refunds_every_request() -> TestResult {
    let sim = Sim::with(config(|c| c.idempotent = false)).await?;
    let ch = sim.approved("o", 1000).await?;
    let (k, b) = (key(), refund_of(&ch, 500));
    let statuses = [
        sim.refund(&k, &b).await?.status(),
        sim.refund(&k, &b).await?.status(),
        sim.refund(&k, &b).await?.status(),
    ];
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::OK, StatusCode::PAYMENT_REQUIRED]
    );
    let l = sim.ledger().await?;
    assert_eq!((l.refunds.len(), l.stats.refund_replays), (3, 0));
    let found: RefundResult = sim.lookup_refund(&k).await?.json().await?;
    assert_eq!(found.refund_id, l.refunds[0].refund_id);
    // Reset clears refunds with the rest.
    let reset = sim.post("/control/reset").send().await?;
    assert_eq!(reset.status(), StatusCode::OK);
    assert_eq!(sim.ledger().await?, Ledger::default());
    sim.stop().await
}

#[tokio::test]
async fn per_order_draws_give_each_refund_the_same_faults_whatever_the_arrival_order() -> TestResult
{
    let mut runs = Vec::new();
    for reversed in [false, true] {
        let sim = Sim::with(config(|c| {
            c.seed = 11;
            c.per_order_draws = true;
        }))
        .await?;
        let mut orders: Vec<String> = (0..24).map(|i| format!("o{i}")).collect();
        if reversed {
            orders.reverse();
        }
        let mut charges = Vec::new();
        for order in &orders {
            charges.push(sim.approved(order, 100).await?);
        }
        sim.put_faults(&faults(|f| f.p_response_lost = 0.5)).await?;
        let mut lost = Vec::new();
        for ch in charges {
            let answered = sim.refund(&key(), &refund_of(&ch, 100)).await;
            lost.push((ch.order_id, answered.is_err()));
        }
        lost.sort();
        assert_eq!(sim.ledger().await?.refunds.len(), 24);
        runs.push(lost);
        sim.stop().await?;
    }
    assert_eq!(runs[0], runs[1], "same faults order by order");
    assert!(runs[0].iter().any(|(_, l)| *l) && runs[0].iter().any(|(_, l)| !*l));
    Ok(())
}

#[tokio::test]
async fn a_refund_that_fails_after_it_succeeded_is_told_declined_and_frees_its_amount() -> TestResult
{
    let (sim, ch) = charged().await?;
    let k = key();
    let r: RefundResult = sim.refund(&k, &refund_of(&ch, 1000)).await?.json().await?;
    assert_eq!(r.status, APPROVED);
    let (status, failed) = sim.fail_refund(json!({"refund_id": r.refund_id})).await?;
    assert_eq!(status, StatusCode::OK, "{failed}");
    assert_eq!(
        (failed["status"].as_str(), failed["decline_code"].as_str()),
        (Some(DECLINED), Some("declined"))
    );
    // Lookups and the ledger tell it failed; its amount can be refunded again.
    let looked: RefundResult = expect_json(sim.lookup_refund(&k).await?, StatusCode::OK).await?;
    assert_eq!(
        (looked.status.as_str(), looked.decline_code.as_deref()),
        (DECLINED, Some("declined"))
    );
    assert_eq!(sim.ledger().await?.refunds[0].status, DECLINED);
    let (status, again) = sim.refund_once(&refund_of(&ch, 1000)).await?;
    assert_eq!((status, again.status.as_str()), (StatusCode::OK, APPROVED));
    // Once failed it stays failed; an unknown refund or a malformed body changes nothing.
    let refused = [
        (
            json!({"refund_id": r.refund_id, "reason": "lost_or_stolen_card"}),
            (StatusCode::CONFLICT, "error", "refund_not_approved"),
        ),
        (
            json!({"refund_id": "re_999999"}),
            (StatusCode::NOT_FOUND, "error", "refund_not_found"),
        ),
        (
            json!({"refund_id": again.refund_id, "reason": "a\u{0}b"}),
            (StatusCode::BAD_REQUEST, "field", "reason"),
        ),
        (
            json!({"refund_id": again.refund_id, "why": "x"}),
            (StatusCode::BAD_REQUEST, "field", "body"),
        ),
    ];
    for (asked, (want, key, says)) in refused {
        let (status, body) = sim.fail_refund(asked.clone()).await?;
        assert_eq!((status, body[key].as_str()), (want, Some(says)), "{asked}");
    }
    let l = sim.ledger().await?;
    assert_eq!(
        l.refunds
            .iter()
            .map(|r| r.status.as_str())
            .collect::<Vec<_>>(),
        [DECLINED, APPROVED]
    );
    sim.stop().await
}
