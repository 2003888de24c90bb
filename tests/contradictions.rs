//! Evidence that contradicts an attempt we hold as settled never vanishes,
//! on both backends: a late approval (by webhook, or by the lookup a worker
//! makes before a business retry) for an attempt we hold as `RECHAZADO`
//! opens one case for finance and cancels the scheduled retry, so the order
//! is not charged again under a new key; a late decline of an `APROBADO`
//! charge opens a case too; and news whose object is not the attempt its
//! key names (another amount or currency) moves nothing and opens a case.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::{Event, State};
use cobro::store::Attempt;
use cobro::webhook::{Scheme, Verifier};
use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    a_late_approval_by_webhook_opens_a_case_and_cancels_the_retry,
    a_late_decline_of_an_approved_charge_opens_a_case,
    an_approval_of_another_charge_under_an_approved_ones_key_opens_a_case,
    the_lookup_before_a_business_retry_stops_it_when_the_gateway_approved,
    news_of_another_amount_or_currency_moves_nothing_and_opens_a_case,
);

async fn webhook(web: &Web, v: &Verifier, id: &str, kind: &str, a: &Attempt) -> Value {
    let body = json!({
        "id": id, "type": kind, "created": chrono::Utc::now().timestamp(),
        "data": {"charge_id": "ch_late", "idempotency_key": a.idempotency_key,
                 "status": if kind == "charge.succeeded" { "approved" } else { "declined" },
                 "decline_code": (kind == "charge.failed").then_some("card_declined")}
    });
    signed(web, v, id, &body).await
}

/// Posts `body` (event `id`) signed by `v`; the receiver's 200 answer.
async fn signed(web: &Web, v: &Verifier, id: &str, body: &Value) -> Value {
    let body = body.to_string();
    let mut req = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("content-type", "application/json")
        .body(body.clone());
    for (k, val) in v.sign(id, chrono::Utc::now().timestamp(), body.as_bytes()) {
        req = req.header(k, val);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

async fn a_late_approval_by_webhook_opens_a_case_and_cancels_the_retry(db: &TestDb) {
    let secret = test_secret();
    let v = Verifier::from_env_value(Scheme::StandardWebhooks, &secret).unwrap();
    let web = start_web(&db.store, v.clone()).await;
    let a = declined_with_retry(&db.store, "late-1", Duration::from_secs(86_400)).await;

    let reply = webhook(&web, &v, "evt_late_1", "charge.succeeded", &a).await;
    assert_eq!(
        reply["outcome"]["result"], "noop",
        "a settled attempt does not move"
    );
    let now = db.store.load(a.id).await.unwrap().0;
    assert_eq!(now.state, State::Rechazado);
    assert_eq!(now.next_action_at, None, "the business retry is cancelled");
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(
        (cases[0].kind.as_str(), cases[0].dedupe_key.as_str()),
        ("unmatched_charge", "unmatched_charge:ch_late")
    );
    assert_eq!(cases[0].attempt_id, Some(a.id));
    assert!(
        cases[0].details["reason"]
            .as_str()
            .unwrap()
            .contains("business retry was cancelled"),
        "{}",
        cases[0].details
    );
    // The same news again (another delivery id): still one case.
    let reply = webhook(&web, &v, "evt_late_2", "charge.succeeded", &a).await;
    assert_eq!(reply["outcome"]["result"], "noop");
    assert_eq!(db.store.open_cases().await.unwrap().len(), 1);
    // And no retry ever comes: a worker finds nothing due.
    let sim = start_sim(true, Faults::default()).await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        db.store.attempts_for_order("late-1").await.unwrap().len(),
        1
    );
    assert!(ledger(&sim.url()).await.entries.is_empty());
    worker.stop().await;
    sim.shutdown().await;
    web.stop().await;
}

async fn a_late_decline_of_an_approved_charge_opens_a_case(db: &TestDb) {
    let secret = test_secret();
    let v = Verifier::from_env_value(Scheme::StandardWebhooks, &secret).unwrap();
    let web = start_web(&db.store, v.clone()).await;
    let req = ChargeRequest::parse("late-2", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let id = a.id;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Approved, Some("ch_ok")).await;

    let reply = webhook(&web, &v, "evt_late_3", "charge.failed", &a).await;
    assert_eq!(reply["outcome"]["result"], "noop");
    assert_eq!(db.store.load(id).await.unwrap().0.state, State::Aprobado);
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].kind, "missing_at_gateway");
    assert_eq!(cases[0].attempt_id, Some(id));
    web.stop().await;
}

/// The same news reconciliation would judge ("APROBADO with another
/// gateway id"): a second charge approved under one key. News of the
/// charge we hold is a duplicate and opens nothing.
async fn an_approval_of_another_charge_under_an_approved_ones_key_opens_a_case(db: &TestDb) {
    let v = Verifier::from_env_value(Scheme::StandardWebhooks, &test_secret()).unwrap();
    let web = start_web(&db.store, v.clone()).await;
    let approved_as = |order: &'static str, charge: &'static str| {
        let store = db.store.clone();
        async move {
            let req = ChargeRequest::parse(order, 3_000, "USD", None, None).unwrap();
            let a = enqueued(&store, &req).await;
            let a = step(&store, &a, Event::Claim, None).await;
            step(&store, &a, Event::Approved, Some(charge)).await
        }
    };
    // The webhook's news is of ch_late.
    let ours = approved_as("twice-0", "ch_late").await;
    let reply = webhook(&web, &v, "evt_twice_0", "charge.succeeded", &ours).await;
    assert_eq!(reply["outcome"]["result"], "noop");
    assert!(db.store.open_cases().await.unwrap().is_empty());

    let other = approved_as("twice-1", "ch_first").await;
    let reply = webhook(&web, &v, "evt_twice_1", "charge.succeeded", &other).await;
    assert_eq!(reply["outcome"]["result"], "noop");
    let now = db.store.load(other.id).await.unwrap().0;
    assert_eq!(
        (now.state, now.gateway_charge_id.as_deref()),
        (State::Aprobado, Some("ch_first"))
    );
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].dedupe_key, "unmatched_charge:ch_late");
    assert_eq!(cases[0].attempt_id, Some(other.id));
    let reason = cases[0].details["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("we hold the attempt as APROBADO with ch_first"),
        "{reason}"
    );
    web.stop().await;
}

async fn the_lookup_before_a_business_retry_stops_it_when_the_gateway_approved(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    // We hold the attempt as declined (say a proxy's 400 was read as a
    // refusal), but the gateway executed it: its books have an approved
    // charge under the attempt's key.
    let a = declined_with_retry(&db.store, "late-4", Duration::from_millis(200)).await;
    let injected = reqwest::Client::new()
        .post(format!("{}/control/inject", sim.url()))
        .json(
            &json!({"order_id": "late-4", "amount_minor": 3000, "currency": "USD",
                      "idempotency_key": a.idempotency_key}),
        )
        .send()
        .await
        .unwrap();
    assert!(injected.status().is_success());
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    eventually(Duration::from_secs(20), "the case", || async {
        let cases = db.store.open_cases().await.unwrap();
        (!cases.is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        db.store.attempts_for_order("late-4").await.unwrap().len(),
        1,
        "no business retry: no second key charged the order"
    );
    assert_eq!(
        ledger(&sim.url()).await.entries.len(),
        1,
        "the gateway's one charge"
    );
    let now = db.store.load(a.id).await.unwrap().0;
    assert_eq!((now.state, now.next_action_at), (State::Rechazado, None));
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases[0].kind, "unmatched_charge");
    assert!(
        cases[0].details["source"]
            .as_str()
            .unwrap()
            .contains("before its business retry")
    );
    finish(worker, sim).await;
}

/// Review of the webhook door (stop 40): an event names our attempt by key
/// alone. One that says another amount or currency than the attempt's is
/// not news of it: nothing moves, an `amount_mismatch` case opens (once);
/// the same news with the attempt's own amount then settles it.
async fn news_of_another_amount_or_currency_moves_nothing_and_opens_a_case(db: &TestDb) {
    let v = Verifier::from_env_value(Scheme::StandardWebhooks, &test_secret()).unwrap();
    let web = start_web(&db.store, v.clone()).await;
    let req = ChargeRequest::parse("mismatch-1", 2_500, "EUR", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Unknown, None).await;
    let said = |id: &'static str, amount: i64, currency: &str| {
        let body = json!({
            "id": id, "type": "charge.succeeded", "created": chrono::Utc::now().timestamp(),
            "data": {"charge_id": "ch_other", "idempotency_key": a.idempotency_key,
                     "amount_minor": amount, "currency": currency, "status": "approved"}
        });
        let (web, v) = (&web, &v);
        async move { signed(web, v, id, &body).await }
    };
    for (id, amount, currency) in [("evt_mm_1", 25_000, "EUR"), ("evt_mm_2", 2_500, "USD")] {
        let reply = said(id, amount, currency).await;
        assert_eq!(reply["outcome"]["result"], "noop", "{reply}");
        let now = db.store.load(a.id).await.unwrap().0;
        assert_eq!(now.state, State::Desconocido, "{id}: nothing moves");
    }
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "one case for the object: {cases:?}");
    assert_eq!(
        (cases[0].kind.as_str(), cases[0].dedupe_key.as_str()),
        ("amount_mismatch", "amount_mismatch:ch_other")
    );
    assert_eq!(cases[0].attempt_id, Some(a.id));
    let reason = cases[0].details["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("amount 25000 minor units, the attempt's 2500"),
        "{reason}"
    );
    // Its own amount and currency (any case): news of it, applied.
    let reply = said("evt_mm_3", 2_500, "eur").await;
    assert_eq!(reply["outcome"]["result"], "applied", "{reply}");
    let now = db.store.load(a.id).await.unwrap().0;
    assert_eq!(now.state, State::Aprobado);
    web.stop().await;
}
