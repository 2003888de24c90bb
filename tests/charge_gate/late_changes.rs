//! What the gateway may still change after cobro recorded an outcome: a
//! refund Stripe reports failed after it succeeded (it stays APROBADO,
//! marked failed once, a case opens and its amount is free again), a
//! refund it reports made that we hold as declined (a case opens), and a
//! PaymentIntent that may still succeed, which finance cannot decline
//! outright (a charge or refund that was sent: `finance_declines.rs`).

use cobro::domain::{ChargeRequest, IdempotencyKey};
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, Change, RefundMark};
use cobro::webhook::{Scheme, Verifier};
use serde_json::json;

use super::common::{
    self, TestDb, ask_refund, assert_last_move, enqueued, start_web, step, web_on,
};
use super::doors::post;

on_both_dbs!(
    a_refund_that_fails_after_success_opens_a_case_and_frees_its_amount,
    a_refund_made_at_the_gateway_that_we_hold_declined_opens_a_case,
    a_duplicates_refund_made_after_another_was_asked_opens_its_case,
    a_refunds_news_under_a_charges_key_moves_nothing,
    finance_cannot_decline_a_payment_object_that_may_still_succeed,
    a_dispute_finds_its_charge_by_payment_intent_on_any_day,
);

/// Posts `body` to the web process's webhook route, signed by `v`: 200.
async fn signed(web: &common::Web, v: &Verifier, body: &str) {
    let mut post = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("Content-Type", "application/json")
        .body(body.to_owned());
    for (k, val) in v.sign("", chrono::Utc::now().timestamp(), body.as_bytes()) {
        post = post.header(k, val);
    }
    let resp = post.send().await.unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
}

/// A 3,000 USD charge of `order`, approved as PaymentIntent `pi`.
async fn approved(db: &TestDb, order: &str, pi: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    step(&db.store, &a, Event::Approved, Some(pi)).await
}

/// Clearing refund `id`'s `mark` by raw SQL is refused: a mark is never undone.
async fn mark_is_never_undone(db: &TestDb, mark: RefundMark, id: uuid::Uuid) {
    let (pg, lite) = match mark {
        RefundMark::FailedAfterSuccess => (
            "UPDATE cobro.payment_attempts SET refund_failed_at = NULL WHERE id = $1::uuid",
            "UPDATE payment_attempts SET refund_failed_at = NULL WHERE id = ?1",
        ),
        RefundMark::MadeAfterDecline => (
            "UPDATE cobro.payment_attempts SET refund_made_at = NULL WHERE id = $1::uuid",
            "UPDATE payment_attempts SET refund_made_at = NULL WHERE id = ?1",
        ),
    };
    let err = db.exec(pg, lite, &[&id.to_string()]).await.unwrap_err();
    assert!(err.to_string().contains("never undone"), "{err}");
}

/// A Stripe verifier and the web process that uses it.
async fn stripe_web(db: &TestDb) -> (common::Web, Verifier) {
    let secret = "whsec_cobro_test_refund_failed_0123456789";
    let v = Verifier::new(
        Scheme::Stripe,
        vec![cobro::webhook::Secret::parse(Scheme::Stripe, secret).unwrap()],
    )
    .unwrap();
    (start_web(&db.store, v.clone()).await, v)
}

/// Stripe's `refund.updated` for refund `id` of `amount` cents under our
/// refund `key`, with `status`.
fn refund_updated(event: &str, id: &str, status: &str, amount: i64, key: uuid::Uuid) -> String {
    json!({
        "id": event, "type": "refund.updated", "object": "event",
        "created": chrono::Utc::now().timestamp(),
        "data": {"object": {
            "id": id, "object": "refund", "status": status,
            "failure_reason": if status == "failed" { "expired_or_canceled_card" } else { "" },
            "amount": amount, "currency": "usd", "payment_intent": "pi_1",
            "metadata": {cobro::gateway::stripe::META_KEY: key.to_string()}
        }}
    })
    .to_string()
}

/// The fourth situation: Stripe says a refund we hold APROBADO
/// failed (`refund.updated`, status `failed`). It is not a no-op: the
/// refund stays APROBADO (settled states stay settled) but is marked
/// failed, once, a case opens for finance, and its amount can be refunded
/// again.
async fn a_refund_that_fails_after_success_opens_a_case_and_frees_its_amount(db: &TestDb) {
    use cobro::domain::Amount;
    let (web, v) = stripe_web(db).await;
    let charge = approved(db, "gate-refund-failed", "pi_1").await;
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

    let body = refund_updated(
        "evt_refund_failed",
        "re_1",
        "failed",
        3_000,
        r.idempotency_key,
    );
    signed(&web, &v, &body).await;

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
    mark_is_never_undone(db, RefundMark::FailedAfterSuccess, r.id).await;
    web.stop().await;
}

/// The sixth situation: finance's decline of an attempt whose
/// PaymentIntent exists at the gateway would leave it able to succeed
/// later. In review it is asked for (202; the worker cancels the object at
/// the gateway first: tests/stripe_local.rs); still being checked it is
/// refused, saying why. Neither records a decline.
async fn finance_cannot_decline_a_payment_object_that_may_still_succeed(db: &TestDb) {
    let web = web_on(&db.store).await;
    let a = in_doubt_with_intent(&db.store, "gate-pi", "pi_open_1").await;
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
    assert_last_move(&db.store, a.id, "finance_decline_requested", "finance:luis").await;
    let now = db.store.load(a.id).await.unwrap().0;
    assert_eq!(now.state, State::EnRevision);
    assert_eq!(now.decline_code, None);
    web.stop().await;
}

/// Review of refunds (stop 40): a refund we hold `RECHAZADO` (declined by
/// the gateway's first answer, or by finance) that the gateway then reports
/// made. It is not a no-op: the refund stays `RECHAZADO` (settled states
/// stay settled), marked made, once; its amount counts as refunded again,
/// and a case opens for finance, naming the refund.
async fn a_refund_made_at_the_gateway_that_we_hold_declined_opens_a_case(db: &TestDb) {
    let (web, v) = stripe_web(db).await;
    let charge = approved(db, "gate-refund-made", "pi_1").await;
    let r = ask_refund(&db.store, charge.id, 1_000, "app").await;
    let r = db.store.load(r.refund_id).await.unwrap().0;
    let r = step(&db.store, &r, Event::Claim, None).await;
    let r = step(&db.store, &r, Event::Declined, Some("expired_card")).await;
    assert!(common::open_case_ids(&db.store).await.is_empty());

    let body = refund_updated(
        "evt_refund_made",
        "re_7",
        "succeeded",
        1_000,
        r.idempotency_key,
    );
    signed(&web, &v, &body).await;
    let now = db.store.load(r.id).await.unwrap().0;
    assert_eq!(now.state, State::Rechazado, "settled states stay settled");
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].kind.as_str(), "unmatched_refund");
    assert_eq!(cases[0].attempt_id, Some(r.id));
    assert_eq!(cases[0].gateway_ref.as_deref(), Some("re_7"));
    let reason = cases[0].details["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not refunded twice"), "{reason}");
    let log = db.store.transitions(r.id).await.unwrap();
    assert_eq!(log.last().unwrap().cause, "refund_made_after_decline");
    // Delivered again: still one case, one mark.
    let again = body.replace("evt_refund_made", "evt_refund_made_2");
    signed(&web, &v, &again).await;
    assert_eq!(db.store.open_cases().await.unwrap().len(), 1);
    assert_eq!(db.store.transitions(r.id).await.unwrap().len(), log.len());
    // Its 1,000 count as refunded: 2,000 are left, not 3,000.
    let over = db
        .store
        .request_refund(
            charge.id,
            cobro::domain::Amount::parse(2_001).unwrap(),
            IdempotencyKey::generate(),
            "app",
        )
        .await;
    assert!(
        matches!(over, Err(cobro::store::RefundError::ExceedsCapture(_))),
        "{over:?}"
    );
    ask_refund(&db.store, charge.id, 2_000, "app").await;
    mark_is_never_undone(db, RefundMark::MadeAfterDecline, r.id).await;
    web.stop().await;
}

/// A refund of a duplicate the gateway declined, asked again (a second
/// refund of it, live), then made after all: the duplicate is refunded
/// twice at the gateway. The news opens its case; the mark, which would
/// make a second refund of one duplicate count (`one_refund_per_duplicate`),
/// is not set. Before, the mark failed the webhook's transaction: 503 on
/// every delivery, and no case.
async fn a_duplicates_refund_made_after_another_was_asked_opens_its_case(db: &TestDb) {
    let (web, v) = stripe_web(db).await;
    let a = approved(db, "gate-dup", "pi_anchor").await;
    let listed = json!({"id": "pi_dup", "status": "approved", "order_id": "gate-dup",
                        "amount_minor": 3_000, "currency": "USD"});
    let double = cobro::domain::Finding {
        kind: cobro::domain::CaseKind::DoubleCharge,
        dedupe_key: "double_charge:gate-dup:pi_anchor,pi_dup".into(),
        order_id: Some("gate-dup".into()),
        attempt_id: None,
        gateway_ref: Some("pi_anchor,pi_dup".into()),
        details: json!({"gateway": [listed], "unrefunded": 2}),
    };
    let window = cobro::domain::Window::new(a.created_at, chrono::Utc::now()).unwrap();
    let case = db.store.record_cases(&window, &[double]).await.unwrap()[0].id;
    let ask = || db.store.refund_duplicate(case, "pi_dup", "ana");
    let first = db
        .store
        .load(ask().await.unwrap().refund_id)
        .await
        .unwrap()
        .0;
    let first = step(&db.store, &first, Event::Claim, None).await;
    let first = step(&db.store, &first, Event::Declined, Some("expired_card")).await;
    let second = ask().await.unwrap();
    assert!(second.created, "the first was declined: a second refund");

    let made = refund_updated(
        "evt_dup_made",
        "re_dup_1",
        "succeeded",
        3_000,
        first.idempotency_key,
    );
    signed(&web, &v, &made).await;
    let cases = db.store.open_cases().await.unwrap();
    let unmatched = cases
        .iter()
        .find(|c| c.dedupe_key == "unmatched_refund:re_dup_1")
        .expect("the made refund's case");
    assert_eq!(unmatched.attempt_id, Some(first.id));
    let reason = unmatched.details["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("refunded twice at the gateway"), "{reason}");
    let log = db.store.transitions(first.id).await.unwrap();
    assert_ne!(log.last().unwrap().cause, "refund_made_after_decline");
    let now = db.store.load(second.refund_id).await.unwrap().0;
    assert_eq!(
        now.state,
        State::Pendiente,
        "the second refund is untouched"
    );
    web.stop().await;
}

/// Review of the webhook door (stop 40): Stripe's news of a refund that
/// carries a charge's key (same amount) is not news of the charge: it does
/// not approve it; an `amount_mismatch` case opens instead.
async fn a_refunds_news_under_a_charges_key_moves_nothing(db: &TestDb) {
    let (web, v) = stripe_web(db).await;
    let req = ChargeRequest::parse("gate-kind", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Unknown, None).await;
    let body = refund_updated("evt_kind", "re_9", "succeeded", 3_000, a.idempotency_key);
    signed(&web, &v, &body).await;
    let now = db.store.load(a.id).await.unwrap().0;
    assert_eq!(
        now.state,
        State::Desconocido,
        "a refund's news does not approve a charge"
    );
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].dedupe_key, "amount_mismatch:re_9");
    let reason = cases[0].details["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("it is about a refund, the attempt is a charge"),
        "{reason}"
    );
    web.stop().await;
}

/// A 30.00 USD charge for `order` whose PaymentIntent `pi` was created and
/// recorded, then whose confirm had an unknown outcome: `DESCONOCIDO`.
async fn in_doubt_with_intent(
    store: &cobro::store::Store,
    order: &str,
    pi: &'static str,
) -> Attempt {
    let req = ChargeRequest::parse(order, 3_000, "USD", None, None).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    let mut prepared = Change::new(Some(Event::Prepared), "payment_intent_created", "worker:w");
    prepared.gateway_ref = Some(pi);
    let Applied::Moved(a) = store.apply(&a, &prepared).await.unwrap() else {
        panic!("not recorded");
    };
    step(store, &a, Event::Unknown, None).await
}

/// Review of the webhook door (stop 40): Stripe's `charge.dispute.created`
/// names the PaymentIntent. A charge still in review a day before the
/// dispute (its PaymentIntent recorded, no charge id yet) was not found:
/// only the dispute's day was read. It is found by its PaymentIntent, so
/// the case names the attempt and the order (and holds the order).
async fn a_dispute_finds_its_charge_by_payment_intent_on_any_day(db: &TestDb) {
    let (web, v) = stripe_web(db).await;
    let a = in_doubt_with_intent(&db.store, "gate-dispute", "pi_disputed_1").await;
    step(&db.store, &a, Event::ChecksExhausted, None).await;
    let tomorrow = chrono::Utc::now().timestamp() + 86_400;
    let body = json!({
        "id": "evt_dispute_late", "object": "event", "type": "charge.dispute.created",
        "created": tomorrow,
        "data": {"object": {"id": "dp_late", "object": "dispute", "amount": 3000,
            "currency": "usd", "reason": "fraudulent", "status": "needs_response",
            "payment_intent": "pi_disputed_1", "created": tomorrow}}
    })
    .to_string();
    signed(&web, &v, &body).await;
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].kind.as_str(), "dispute");
    assert_eq!(cases[0].attempt_id, Some(a.id));
    assert_eq!(cases[0].order_id.as_deref(), Some("gate-dispute"));
    web.stop().await;
}
