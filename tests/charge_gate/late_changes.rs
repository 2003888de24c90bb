//! What the gateway may still change after cobro recorded an outcome: a
//! refund Stripe reports failed after it succeeded (it stays APROBADO,
//! marked failed once, a case opens and its amount is free again), and a
//! PaymentIntent that may still succeed, which finance cannot decline
//! outright.

use cobro::domain::{ChargeRequest, IdempotencyKey};
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, Change};
use cobro::webhook::{Scheme, Verifier};
use serde_json::json;

use super::common::{self, Backend, TestDb, enqueued, finish_web, start_web, step, web_on};
use super::doors::post;

on_both_backends!(
    a_refund_that_fails_after_success_opens_a_case_and_frees_its_amount,
    finance_cannot_decline_a_payment_object_that_may_still_succeed,
);

/// The fourth situation: Stripe says a refund we hold APROBADO
/// failed (`refund.updated`, status `failed`). It is not a no-op: the
/// refund stays APROBADO (settled states stay settled) but is marked
/// failed, once, a case opens for finance, and its amount can be refunded
/// again.
async fn a_refund_that_fails_after_success_opens_a_case_and_frees_its_amount(b: Backend) {
    use cobro::domain::Amount;
    let db = TestDb::new(b).await;
    let secret = "whsec_cobro_test_refund_failed_0123456789";
    let v = Verifier::new(
        Scheme::Stripe,
        vec![cobro::webhook::Secret::parse(Scheme::Stripe, secret).unwrap()],
    )
    .unwrap();
    let web = start_web(&db.store, v.clone()).await;
    let req = ChargeRequest::parse("gate-refund-failed", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let charge = step(&db.store, &a, Event::Approved, Some("pi_1")).await;
    let refund = |amount: i64| {
        let store = db.store.clone();
        async move {
            store
                .request_refund(
                    charge.id,
                    Amount::parse(amount).unwrap(),
                    IdempotencyKey::generate(),
                    "app",
                )
                .await
        }
    };
    let r = refund(3_000).await.unwrap();
    let r = db.store.load(r.refund_id).await.unwrap().0;
    let r = step(&db.store, &r, Event::Claim, None).await;
    let r = step(&db.store, &r, Event::Approved, Some("re_1")).await;
    assert!(refund(1).await.is_err(), "all of it is refunded");

    let body = json!({
        "id": "evt_refund_failed", "type": "refund.updated", "object": "event",
        "created": chrono::Utc::now().timestamp(),
        "data": {"object": {
            "id": "re_1", "object": "refund", "status": "failed",
            "failure_reason": "expired_or_canceled_card", "amount": 3000, "currency": "usd",
            "payment_intent": "pi_1",
            "metadata": {cobro::gateway::stripe::META_KEY: r.idempotency_key.to_string()}
        }}
    })
    .to_string();
    let mut post = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("Content-Type", "application/json")
        .body(body.clone());
    for (k, val) in v.sign("", chrono::Utc::now().timestamp(), body.as_bytes()) {
        post = post.header(k, val);
    }
    let resp = post.send().await.unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);

    let now = db.store.load(r.id).await.unwrap().0;
    assert_eq!(now.state, State::Aprobado, "settled states stay settled");
    let log = db.store.transitions(r.id).await.unwrap();
    assert_eq!(
        log.last().unwrap().cause,
        "refund_failed_after_success",
        "{log:?}"
    );
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].kind.as_str(), "missing_at_gateway");
    assert_eq!(cases[0].attempt_id, Some(r.id));
    // Its amount is free again, and the mark is never undone.
    refund(3_000)
        .await
        .expect("the failed refund's amount is refundable");
    let err = db
        .exec(
            "UPDATE cobro.payment_attempts SET refund_failed_at = NULL WHERE id = $1::uuid",
            "UPDATE payment_attempts SET refund_failed_at = NULL WHERE id = ?1",
            &[&r.id.to_string()],
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("never undone"), "{err}");
    finish_web(web, db).await;
}

/// The sixth situation: finance's decline of an attempt whose
/// PaymentIntent exists at the gateway would leave it able to succeed
/// later. In review it is asked for (202; the worker cancels the object at
/// the gateway first: tests/stripe_local.rs); still being checked it is
/// refused, saying why. Neither records a decline.
async fn finance_cannot_decline_a_payment_object_that_may_still_succeed(b: Backend) {
    let db = TestDb::new(b).await;
    let web = web_on(&db.store).await;
    let req = ChargeRequest::parse("gate-pi", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let mut prepared = Change::new(Some(Event::Prepared), "payment_intent_created", "worker:w");
    prepared.gateway_ref = Some("pi_open_1");
    let Applied::Moved(a) = db.store.apply(&a, &prepared).await.unwrap() else {
        panic!("not recorded");
    };
    let a = step(&db.store, &a, Event::Unknown, None).await;
    let decline = |a: &Attempt| {
        let path = format!("/finance/api/attempts/{}/resolve", a.id);
        let body = json!({"action": "decline", "version": a.version, "code": "finance_declined",
                          "note": "the customer says it failed"});
        let web = &web;
        async move { post(web, &path, "luis", None, body).await }
    };
    // DESCONOCIDO: refused, saying why.
    let (status, body) = decline(&a).await;
    assert_eq!(status, 409, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(
        msg.contains("pi_open_1") && msg.contains("once it is in EN_REVISION"),
        "{msg}"
    );
    // EN_REVISION: asked for, not recorded.
    let a = step(&db.store, &a, Event::ChecksExhausted, None).await;
    let (status, body) = decline(&a).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["state"], "EN_REVISION");
    let log = db.store.transitions(a.id).await.unwrap();
    let last = log.last().unwrap();
    assert_eq!(
        (last.cause.as_str(), last.actor.as_str()),
        ("finance_decline_requested", "finance:luis")
    );
    let now = db.store.load(a.id).await.unwrap().0;
    assert_eq!(now.state, State::EnRevision);
    assert_eq!(now.decline_code, None);
    finish_web(web, db).await;
}
