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
use cobro::state::State;
use common::*;
use stripe_support::*;

#[path = "common/stripe.rs"]
mod stripe_support;

on_both_dbs!(
    a_charge_is_one_succeeded_payment_intent_recorded_before_its_confirm,
    a_declined_card_is_rechazado_with_stripes_code,
    a_key_stripe_refuses_stops_the_worker_before_it_charges,
    a_card_that_needs_3d_secure_is_canceled_and_the_customer_told,
    reconciliation_lists_payment_intents_and_finds_a_double_charge,
    the_demo_runs_the_fleet_against_a_stripe_compatible_server,
    finances_decline_cancels_the_payment_intent_before_it_is_recorded,
);

async fn a_charge_is_one_succeeded_payment_intent_recorded_before_its_confirm(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let worker = spawn_worker(stripe_worker_args(&db.url, &stripe.url));
    let mut ids = Vec::new();
    for (i, amount) in [1_999, 50, 123_456].into_iter().enumerate() {
        let req = visa_charge(&format!("ord-{i}"), amount);
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
        assert_eq!(
            causes(&db.store, *id).await,
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
}

async fn a_declined_card_is_rechazado_with_stripes_code(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
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
}

async fn a_key_stripe_refuses_stops_the_worker_before_it_charges(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let mut ids = Vec::new();
    for i in 0..3 {
        let req = visa_charge(&format!("ord-key-{i}"), 1_000);
        ids.push(db.store.enqueue(&req).await.unwrap().attempt_id);
    }
    // localstripe, like Stripe, answers 401 to a key it does not take: the
    // start-up call finds it, and the worker stops before taking any work
    // (a key revoked later is a 401 to a charge: `auth_failed`, never a
    // decline, counted by the breaker; src/gateway/stripe/tests/).
    let mut args = stripe_worker_args(&db.url, &stripe.url);
    args.gateway.stripe_secret_key = Some("rk_test_revoked".into());
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        cobro::runtime::run(args, std::future::pending()),
    )
    .await
    .expect("refused at once, not left running")
    .expect_err("a refused key stops the start");
    let refused = format!("{refused:#}");
    assert!(
        refused.contains("refused STRIPE_SECRET_KEY") && refused.contains("401"),
        "{refused}"
    );
    assert!(!refused.contains("rk_test_revoked"), "{refused}");
    for id in &ids {
        let (a, _) = db.store.load(*id).await.unwrap();
        assert_eq!(a.state, State::Pendiente, "nothing was taken");
        assert_eq!(a.gateway_ref, None, "nothing was created");
    }
    assert!(
        stripe.intents().await.is_empty(),
        "nothing reached Stripe's books"
    );
    // The same worker with the key localstripe takes starts.
    let worker = spawn_worker(stripe_worker_args(&db.url, &stripe.url));
    let started = eventually(Duration::from_secs(30), "the charges sent", || async {
        let all = stripe.intents().await;
        (all.len() == ids.len()).then_some(all)
    })
    .await;
    assert_eq!(started.len(), 3);
    worker.stop().await;
}

/// Off-session, nobody can complete 3-D Secure: the PaymentIntent is
/// canceled (so it can never succeed behind our decline), the attempt is
/// RECHAZADO `authentication_required`, never retried on its own, and the
/// customer gets a notice.
async fn a_card_that_needs_3d_secure_is_canceled_and_the_customer_told(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    // Stripe's test card that always asks for authentication, registered
    // at the fake server as Stripe.js would in the customer's browser:
    // cobro only ever sees the pm_ token.
    let pm = stripe.payment_method("4000002760003184").await;
    let worker = spawn_worker(stripe_worker_args(&db.url, &stripe.url));
    let req = ChargeRequest::parse("ord-3ds", 7_700, "EUR", None, Some(&pm)).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = settled(&db.store, id, State::Rechazado, Duration::from_secs(30)).await;
    assert_eq!(a.decline_code.as_deref(), Some("authentication_required"));
    assert_eq!(a.next_action_at, None, "not retried on its own");
    let pi = stripe
        .intents()
        .await
        .into_iter()
        .find(|p| p.key.as_deref() == Some(&req.key.to_string()))
        .unwrap();
    assert_eq!(pi.status, "canceled");
    let notices = db.store.notices(false).await.unwrap();
    assert!(
        notices.iter().any(|n| n.attempt_id == id
            && n.kind == "payment_failed"
            && n.decline_code.as_deref() == Some("authentication_required")),
        "{notices:?}"
    );
    worker.stop().await;
}

/// Reconciliation reads localstripe's PaymentIntents (all pages, filtered
/// to the window here: localstripe has no `created` filter): our approved
/// charges match; a second charge of the same order made outside cobro is
/// a double charge for finance.
async fn reconciliation_lists_payment_intents_and_finds_a_double_charge(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let args = stripe_worker_args(&db.url, &stripe.url);
    let worker = spawn_worker(args.clone());
    let mut reqs = Vec::new();
    for i in 0..3 {
        let req = visa_charge(&format!("ord-rec-{i}"), 1_000 + i);
        charged_by_worker(&db.store, &req).await;
        reqs.push(req);
    }
    worker.stop().await;
    let gateway = args.gateway.build(args.gateway_config()).unwrap();
    let window = cobro::recon::Window::day(chrono::Utc::now().date_naive());
    let clean = cobro::recon::reconcile(&db.store, gateway.as_ref(), &window)
        .await
        .unwrap();
    assert_eq!(clean.gateway_charges, 3);
    assert_eq!(clean.opened, 0, "{:?}", clean.cases);
    // The same order charged again at Stripe, by something other than cobro.
    let again = visa_charge("ord-rec-1", 1_001);
    let pi = stripe.create_intent(&again, "not-cobro").await;
    stripe.confirm(&pi).await;
    let found = cobro::recon::reconcile(&db.store, gateway.as_ref(), &window)
        .await
        .unwrap();
    assert_eq!(found.gateway_charges, 4);
    let kinds: Vec<String> = found.cases.iter().map(|c| c.kind.to_string()).collect();
    assert!(kinds.contains(&"double_charge".to_owned()), "{kinds:?}");
}

/// `cobro demo --gateway stripe` on a small fleet, through its lossy proxy.
async fn the_demo_runs_the_fleet_against_a_stripe_compatible_server(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let opts = cobro::demo::DemoOptions {
        orders: 40,
        loss: 0.3,
        seed: 42,
        workers: 2,
        database_url: Some(db.url.clone()),
        check_schedule: "200ms,400ms,800ms,1600ms,3200ms".into(),
        gateway: stripe_worker_args(&db.url, &stripe.url).gateway,
    };
    let report = cobro::demo::run(&opts, None).await.expect("the demo runs");
    let w = &report.worlds[0];
    assert_eq!(report.worlds.len(), 1);
    assert_eq!((w.orders_charged_twice, w.orders_not_charged), (0, 0));
    assert_eq!(w.ledger_charges, 40);
    assert_eq!(w.total_charged_minor, w.intent_total_minor);
    assert!(
        w.attempts_sent > 80,
        "through the proxy: {}",
        w.attempts_sent
    );
}

/// An attempt in review whose PaymentIntent exists, unconfirmed, at the
/// gateway: left as it is, it could be confirmed and succeed behind a
/// decline recorded here. Finance's decline is asked for (the attempt stays
/// in review); the review janitor cancels the PaymentIntent at Stripe and
/// only then records RECHAZADO. A second attempt whose PaymentIntent
/// succeeded meanwhile is recorded APROBADO: the gateway's word wins.
async fn finances_decline_cancels_the_payment_intent_before_it_is_recorded(db: &TestDb) {
    use cobro::finance::{Resolution, ResolveRequest, resolve};
    use cobro::state::Event;
    use cobro::store::{Applied, Change, Lease};
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let in_review = |order: &'static str| {
        let (db, stripe) = (db, &stripe);
        async move {
            let req = visa_charge(order, 4_200);
            let a = enqueued(&db.store, &req).await;
            let id = a.id;
            let a = step(&db.store, &a, Event::Claim, None).await;
            let pi = stripe.create_intent(&req, &id.to_string()).await;
            let mut record = Change::new(
                Some(Event::Prepared),
                "payment_intent_created",
                "worker:gone",
            );
            record.gateway_ref = Some(&pi);
            record.lease = Lease::Take {
                owner: "gone",
                ttl: Duration::from_secs(30),
            };
            let Applied::Moved(a) = db.store.apply(&a, &record).await.unwrap() else {
                panic!("nobody races this");
            };
            let a = step(&db.store, &a, Event::Unknown, None).await;
            let a = step(&db.store, &a, Event::ChecksExhausted, None).await;
            (a, pi)
        }
    };
    let decline = |a: cobro::store::Attempt| {
        let store = db.store.clone();
        async move {
            let req = ResolveRequest {
                attempt_id: a.id,
                version: a.version,
                resolution: Resolution::Decline {
                    code: "customer_disputed".into(),
                },
                by: "ana",
                note: "the customer says they never paid",
            };
            resolve(&store, &req).await.unwrap()
        }
    };
    let (open, open_pi) = in_review("ord-decline-open").await;
    let (paid, paid_pi) = in_review("ord-decline-paid").await;
    for a in [&open, &paid] {
        let now = decline(a.clone()).await;
        assert_eq!(now.state, State::EnRevision, "asked for, not recorded");
        let log = db.store.transitions(a.id).await.unwrap();
        assert_eq!(log.last().unwrap().cause, "finance_decline_requested");
    }
    // The customer's bank confirms the second one before any worker runs.
    stripe.confirm(&paid_pi).await;

    let worker = spawn_worker(stripe_worker_args(&db.url, &stripe.url));
    let open = settled(
        &db.store,
        open.id,
        State::Rechazado,
        Duration::from_secs(30),
    )
    .await;
    let paid = settled(&db.store, paid.id, State::Aprobado, Duration::from_secs(30)).await;
    worker.stop().await;
    assert_eq!(open.decline_code.as_deref(), Some("canceled"));
    let log = db.store.transitions(open.id).await.unwrap();
    assert_eq!(log.last().unwrap().cause, "finance_decline_confirmed");
    assert_eq!(paid.gateway_charge_id.as_deref(), Some(paid_pi.as_str()));
    let intents = stripe.intents().await;
    let status = |pi: &str| intents.iter().find(|i| i.id == pi).unwrap().status.clone();
    assert_eq!(
        status(&open_pi),
        "canceled",
        "cancelled before the decline was recorded"
    );
    assert_eq!(status(&paid_pi), "succeeded");
}
