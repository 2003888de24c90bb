//! Stripe's webhooks, verified with `Stripe-Signature`: localstripe's own
//! signed `payment_intent.succeeded` settling a DESCONOCIDO attempt once, an
//! event without cobro's metadata matched by its PaymentIntent, and a
//! dispute opening a finance case. On both backends, with localstripe
//! (`pip install localstripe`) on a free loopback port.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::state::{Event, State};
use cobro::webhook::{Scheme, Secret, Verifier};
use common::*;
use stripe_support::*;

#[path = "common/stripe.rs"]
mod stripe_support;

on_both_dbs!(
    a_webhook_from_localstripe_settles_a_desconocido_attempt_once,
    a_dispute_opens_a_case_for_finance_once,
    an_event_without_cobros_metadata_finds_its_attempt_by_payment_intent,
);

/// The web process's Stripe signing secret and its verifier.
fn stripe_verifier() -> (&'static str, Verifier) {
    let secret = "whsec_cobro_test_localstripe_0123456789";
    let verifier = Verifier::new(
        Scheme::Stripe,
        vec![Secret::parse(Scheme::Stripe, secret).unwrap()],
    )
    .unwrap();
    (secret, verifier)
}

/// `body` POSTed to the web process's webhook route, signed as Stripe does.
async fn post_signed(web: &Web, verifier: &Verifier, body: &[u8]) -> reqwest::Response {
    let now = chrono::Utc::now().timestamp();
    let mut post = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("Content-Type", "application/json")
        .body(body.to_vec());
    for (k, v) in verifier.sign("", now, body) {
        post = post.header(k, v);
    }
    post.send().await.unwrap()
}

/// An attempt as a worker leaves it when it vanishes after sending the
/// confirm: DESCONOCIDO, its PaymentIntent created (unconfirmed here) and
/// recorded.
async fn desconocido_with_intent(
    db: &TestDb,
    stripe: &LocalStripe,
    req: &ChargeRequest,
) -> (uuid::Uuid, String) {
    let id = db.store.enqueue(req).await.unwrap().attempt_id;
    let (a, _) = db.store.load(id).await.unwrap();
    let a = step(&db.store, &a, Event::Claim, None).await;
    let pi = stripe.create_intent(req, &id.to_string()).await;
    let mut record = cobro::store::Change::new(
        Some(Event::Prepared),
        "payment_intent_created",
        "worker:gone",
    );
    record.gateway_ref = Some(&pi);
    record.lease = cobro::store::Lease::Take {
        owner: "gone",
        ttl: Duration::from_secs(30),
    };
    let a = match db.store.apply(&a, &record).await.unwrap() {
        cobro::store::Applied::Moved(a) => *a,
        cobro::store::Applied::Lost => panic!("nobody races this"),
    };
    let a = step(&db.store, &a, Event::Unknown, None).await;
    assert_eq!(a.state, State::Desconocido);
    (id, pi)
}

/// A worker confirmed the PaymentIntent and vanished before recording the
/// answer (the attempt is DESCONOCIDO, its next check far away): Stripe's
/// `payment_intent.succeeded`, signed by localstripe, settles it; the same
/// event again is a duplicate.
async fn a_webhook_from_localstripe_settles_a_desconocido_attempt_once(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let (secret, verifier) = stripe_verifier();
    let web = start_web(&db.store, verifier.clone()).await;
    stripe
        .register_webhook(&format!("{}/webhooks/gateway", web.url), secret)
        .await;
    let req = visa_charge("ord-wh", 2_500);
    let (id, pi) = desconocido_with_intent(db, &stripe, &req).await;
    stripe.confirm(&pi).await;
    let a = settled(&db.store, id, State::Aprobado, Duration::from_secs(20)).await;
    assert_eq!(a.gateway_charge_id.as_deref(), Some(pi.as_str()));
    let last = db.store.transitions(id).await.unwrap().pop().unwrap();
    assert_eq!(
        last.cause, "webhook_approved",
        "settled by the webhook: {last:?}"
    );
    // localstripe's event, replayed with a valid signature: stored once.
    let event = stripe.event("payment_intent.succeeded").await;
    let body = serde_json::to_vec(&event).unwrap();
    let replay = post_signed(&web, &verifier, &body).await;
    assert!(replay.status().is_success(), "{}", replay.status());
    let text = replay.text().await.unwrap();
    assert!(text.contains("duplicate"), "{text}");
    let stored = db
        .scalar(
            "SELECT count(*) FROM cobro.webhook_events WHERE event_type = 'payment_intent.succeeded'",
            "SELECT count(*) FROM webhook_events WHERE event_type = 'payment_intent.succeeded'",
        )
        .await;
    assert_eq!(stored, 1);
    let applied = db
        .scalar(
            "SELECT count(*) FROM cobro.webhook_events WHERE outcome = 'applied'",
            "SELECT count(*) FROM webhook_events WHERE outcome = 'applied'",
        )
        .await;
    assert_eq!(applied, 1);
    web.stop().await;
}

/// `charge.dispute.created` (localstripe does not make disputes: signed
/// here, in Stripe's shape) opens one case, matched to the attempt by its
/// PaymentIntent; a redelivery opens nothing more.
async fn a_dispute_opens_a_case_for_finance_once(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let worker = spawn_worker(stripe_worker_args(&db.url, &stripe.url));
    let a = charged_by_worker(&db.store, &visa_charge("ord-dispute", 3_300)).await;
    let id = a.id;
    worker.stop().await;
    let (_, verifier) = stripe_verifier();
    let web = start_web(&db.store, verifier.clone()).await;
    let now = chrono::Utc::now().timestamp();
    let event = serde_json::json!({
        "id": "evt_dispute_1", "object": "event", "type": "charge.dispute.created", "created": now,
        "data": {"object": {"id": "dp_1", "object": "dispute", "amount": 3300, "currency": "eur",
            "reason": "fraudulent", "status": "needs_response",
            "payment_intent": a.gateway_charge_id, "created": now}}
    });
    let body = serde_json::to_vec(&event).unwrap();
    for _ in 0..2 {
        let answer = post_signed(&web, &verifier, &body).await;
        assert!(answer.status().is_success());
    }
    let cases = db.store.open_cases().await.unwrap();
    let disputes: Vec<_> = cases.iter().filter(|c| c.kind == "dispute").collect();
    assert_eq!(disputes.len(), 1, "{cases:?}");
    assert_eq!(disputes[0].attempt_id, Some(id));
    assert_eq!(disputes[0].order_id.as_deref(), Some("ord-dispute"));
    web.stop().await;
}

/// A PaymentIntent event whose object carries no cobro metadata (Stripe
/// trims nothing, but another integration may have rewritten it) still
/// settles its attempt, found by the PaymentIntent id recorded on it.
async fn an_event_without_cobros_metadata_finds_its_attempt_by_payment_intent(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let (_, verifier) = stripe_verifier();
    let web = start_web(&db.store, verifier.clone()).await;
    let req = visa_charge("ord-nometa", 900);
    let (id, pi) = desconocido_with_intent(db, &stripe, &req).await;
    stripe.confirm(&pi).await;
    let now = chrono::Utc::now().timestamp();
    let event = serde_json::json!({
        "id": "evt_nometa_1", "object": "event", "type": "payment_intent.succeeded", "created": now,
        "data": {"object": {"id": pi, "object": "payment_intent", "status": "succeeded", "metadata": {}}}
    });
    let body = serde_json::to_vec(&event).unwrap();
    let answer = post_signed(&web, &verifier, &body)
        .await
        .text()
        .await
        .unwrap();
    assert!(answer.contains("applied"), "{answer}");
    let a = settled(&db.store, id, State::Aprobado, Duration::from_secs(5)).await;
    assert_eq!(a.gateway_charge_id.as_deref(), Some(pi.as_str()));
    web.stop().await;
}
