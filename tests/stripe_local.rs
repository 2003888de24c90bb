//! Charging through Stripe's API, against `localstripe` (a fake Stripe
//! server from PyPI that nobody here wrote) started on a free loopback port
//! by `scripts/localstripe/serve`. localstripe ignores `Idempotency-Key` and
//! answers a bare 400 where Stripe says `payment_intent_unexpected_state`:
//! a memoryless gateway, where only the two-step design (create unconfirmed,
//! record, confirm that one) keeps a customer from being charged twice.
//! Counts are taken from localstripe's own list API. On both backends.

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

on_both_backends!(
    a_charge_is_one_succeeded_payment_intent_recorded_before_its_confirm,
    a_declined_card_is_rechazado_with_stripes_code,
    a_bad_secret_key_declines_nothing_and_opens_the_breaker,
    a_webhook_from_localstripe_settles_a_desconocido_attempt_once,
);

async fn a_charge_is_one_succeeded_payment_intent_recorded_before_its_confirm(b: Backend) {
    init_logs();
    let db = TestDb::new(b).await;
    let stripe = LocalStripe::start().await;
    let worker = spawn_worker(stripe_worker_args(&db.url, &stripe.url));
    let mut ids = Vec::new();
    for (i, amount) in [1_999, 50, 123_456].into_iter().enumerate() {
        let req = ChargeRequest::parse(
            &format!("ord-{i}"),
            amount,
            "EUR",
            None,
            Some("pm_card_visa"),
        )
        .unwrap();
        ids.push((db.store.enqueue(&req).await.unwrap().attempt_id, req));
    }
    for (id, req) in &ids {
        let a = settled(&db.store, *id, State::Aprobado, Duration::from_secs(30)).await;
        let pi = a
            .gateway_ref
            .clone()
            .expect("the PaymentIntent is on the attempt");
        assert!(pi.starts_with("pi_"), "{pi}");
        assert_eq!(a.gateway_charge_id.as_deref(), Some(pi.as_str()));
        let causes: Vec<String> = db
            .store
            .transitions(*id)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.cause)
            .collect();
        assert_eq!(
            causes,
            [
                "enqueued",
                "claim",
                "payment_intent_created",
                "gateway_approved"
            ],
            "recorded between the claim and the answer"
        );
        let at_stripe = stripe.intents().await;
        let ours: Vec<_> = at_stripe
            .iter()
            .filter(|p| p.key.as_deref() == Some(&req.key.to_string()))
            .collect();
        assert_eq!(ours.len(), 1, "one PaymentIntent per attempt");
        assert_eq!(ours[0].id, pi);
        assert_eq!(ours[0].status, "succeeded");
        assert_eq!(ours[0].amount, req.amount.minor(), "to the cent");
        assert_eq!(ours[0].currency, "eur");
        assert_eq!(ours[0].order.as_deref(), Some(req.order_id.as_str()));
    }
    // The database refuses to point the attempt at another PaymentIntent.
    let (a, _) = db.store.load(ids[0].0).await.unwrap();
    let mut c = cobro::store::Change::new(None, "test", "test");
    c.gateway_ref = Some("pi_another");
    assert!(
        db.store.apply(&a, &c).await.is_err(),
        "gateway_ref is set once"
    );
    worker.stop().await;
    db.drop_db().await;
}

async fn a_declined_card_is_rechazado_with_stripes_code(b: Backend) {
    init_logs();
    let db = TestDb::new(b).await;
    let stripe = LocalStripe::start().await;
    let worker = spawn_worker(stripe_worker_args(&db.url, &stripe.url));
    let req = ChargeRequest::parse("ord-dec", 4_200, "USD", None, Some(DECLINED_CARD)).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = settled(&db.store, id, State::Rechazado, Duration::from_secs(30)).await;
    assert_eq!(a.decline_code.as_deref(), Some("card_declined"));
    let detail = a
        .last_evidence
        .as_ref()
        .and_then(|e| e.get("detail"))
        .and_then(|d| d.as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        detail.contains("code=card_declined"),
        "raw codes kept: {detail}"
    );
    assert_eq!(
        a.next_action_at, None,
        "card_declined is not retried by default"
    );
    let intents = stripe.intents().await;
    let pi = intents
        .iter()
        .find(|p| p.key.as_deref() == Some(&req.key.to_string()))
        .expect("the PaymentIntent exists");
    assert_eq!(pi.status, "requires_payment_method");
    worker.stop().await;
    db.drop_db().await;
}

async fn a_bad_secret_key_declines_nothing_and_opens_the_breaker(b: Backend) {
    init_logs();
    let db = TestDb::new(b).await;
    let stripe = LocalStripe::start().await;
    let mut args = stripe_worker_args(&db.url, &stripe.url);
    // localstripe, like Stripe, answers 401 to a key that is not a secret key.
    args.gateway.stripe_secret_key = Some("rk_test_revoked".into());
    let worker = spawn_worker(args);
    let mut ids = Vec::new();
    for i in 0..3 {
        let req = ChargeRequest::parse(
            &format!("ord-key-{i}"),
            1_000,
            "EUR",
            None,
            Some("pm_card_visa"),
        )
        .unwrap();
        ids.push(db.store.enqueue(&req).await.unwrap().attempt_id);
    }
    let health = eventually(
        Duration::from_secs(30),
        "the breaker to open on 401s",
        || async {
            let h = db.store.gateway_health().await.unwrap();
            h.breakers
                .iter()
                .any(|r| {
                    r.is_open()
                        && r.last_failure
                            .as_deref()
                            .is_some_and(|f| f.starts_with("auth_failed"))
                })
                .then_some(h)
        },
    )
    .await;
    assert!(
        health
            .breakers
            .iter()
            .all(|r| r.gateway.contains("127.0.0.1"))
    );
    for id in &ids {
        let (a, _) = db.store.load(*id).await.unwrap();
        assert!(
            matches!(a.state, State::Pendiente | State::EnProceso),
            "a configuration fault is never a decline: {}",
            a.state
        );
        assert_eq!(a.gateway_ref, None, "nothing was created");
        let kinds: Vec<Option<String>> = db
            .store
            .transitions(*id)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.error_kind)
            .collect();
        assert!(
            kinds.iter().flatten().all(|k| k == "auth_failed"),
            "{kinds:?}"
        );
    }
    assert!(
        stripe.intents().await.is_empty(),
        "nothing reached Stripe's books"
    );
    worker.stop().await;
    db.drop_db().await;
}

/// A worker confirmed the PaymentIntent and vanished before recording the
/// answer (the attempt is DESCONOCIDO, its next check far away): Stripe's
/// `payment_intent.succeeded`, signed by localstripe, settles it; the same
/// event again is a duplicate.
async fn a_webhook_from_localstripe_settles_a_desconocido_attempt_once(b: Backend) {
    init_logs();
    let db = TestDb::new(b).await;
    let stripe = LocalStripe::start().await;
    let secret = "whsec_cobro_test_localstripe_0123456789";
    let verifier = Verifier::new(
        Scheme::Stripe,
        vec![Secret::parse(Scheme::Stripe, secret).unwrap()],
    )
    .unwrap();
    let web = start_web(&db.store, verifier.clone()).await;
    stripe
        .register_webhook(&format!("{}/webhooks/gateway", web.url), secret)
        .await;
    let req = ChargeRequest::parse("ord-wh", 2_500, "EUR", None, Some("pm_card_visa")).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let (a, _) = db.store.load(id).await.unwrap();
    let a = step(&db.store, &a, Event::Claim, None).await;
    // What the worker did before it vanished: create, record, confirm.
    let pi = stripe.create_intent(&req, &id.to_string()).await;
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
    let now = chrono::Utc::now().timestamp();
    let mut post = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("Content-Type", "application/json")
        .body(body.clone());
    for (k, v) in verifier.sign("", now, &body) {
        post = post.header(k, v);
    }
    let replay = post.send().await.unwrap();
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
    db.drop_db().await;
}
