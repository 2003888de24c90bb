//! The seed's fleet, charged through Stripe's API: cobro → the simulator in
//! proxy mode (`cobro gateway-sim --upstream`, seeded faults around real
//! forwarding) → localstripe, a memoryless Stripe server nobody here wrote.
//! 15 % of the answers to executing requests (creates, confirms, refunds)
//! are lost after localstripe executed them (10 % dropped connections, 5 %
//! held past the client's timeout); 5 % of the cards are declined. Counted
//! from localstripe's own list API: no order with two succeeded
//! PaymentIntents, every approved order with exactly one, to the cent. On
//! both backends (1,000 orders on PostgreSQL, 300 on SQLite, whose single
//! writer makes the run slower, not different).

#[macro_use]
mod common;

use std::collections::HashMap;
use std::time::Duration;

use cobro::domain::{ChargeRequest, PaymentMethod};
use cobro::sim::{Faults, ProxyStats, SimConfig, SimHandle, Upstream};
use cobro::state::State;
use common::*;
use stripe_support::*;

#[path = "common/stripe.rs"]
mod stripe_support;

on_both_dbs!(
    a_refund_whose_answer_is_lost_is_one_refund,
    ; by_backend:
    the_fleet_through_a_lossy_proxy_charges_no_order_twice,
    saved_cards_and_their_retries_through_a_lossy_proxy_are_charged_once_with_their_customer,
);

async fn start_proxy(upstream: &str, seed: u64, faults: Faults) -> SimHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind proxy");
    let cfg = SimConfig {
        per_order_draws: false,
        webhooks: None,
        idempotent: true,
        seed,
        faults,
    };
    cobro::sim::spawn_proxy(
        listener,
        cfg,
        upstream.parse::<Upstream>().expect("upstream"),
    )
    .await
    .expect("start the proxy")
}

async fn proxy_stats(url: &str) -> ProxyStats {
    reqwest::get(format!("{url}/control/proxy"))
        .await
        .expect("GET /control/proxy")
        .json()
        .await
        .expect("proxy stats")
}

/// How many transitions have this cause, over every attempt.
async fn with_cause(db: &TestDb, cause: &str) -> i64 {
    let (pg, lite) = match cause {
        "gateway_create_unanswered" => (
            "SELECT count(*) FROM cobro.attempt_transitions WHERE cause = 'gateway_create_unanswered'",
            "SELECT count(*) FROM attempt_transitions WHERE cause = 'gateway_create_unanswered'",
        ),
        "gateway_unknown" => (
            "SELECT count(*) FROM cobro.attempt_transitions WHERE cause = 'gateway_unknown'",
            "SELECT count(*) FROM attempt_transitions WHERE cause = 'gateway_unknown'",
        ),
        "confirm_timed_out" => (
            "SELECT count(*) FROM cobro.attempt_transitions WHERE cause = 'gateway_unknown' AND error_kind = 'timeout'",
            "SELECT count(*) FROM attempt_transitions WHERE cause = 'gateway_unknown' AND error_kind = 'timeout'",
        ),
        "confirm_cut" => (
            "SELECT count(*) FROM cobro.attempt_transitions WHERE cause = 'gateway_unknown' AND error_kind = 'connection_closed'",
            "SELECT count(*) FROM attempt_transitions WHERE cause = 'gateway_unknown' AND error_kind = 'connection_closed'",
        ),
        "lookup_approved" => (
            "SELECT count(*) FROM cobro.attempt_transitions WHERE cause = 'lookup_approved'",
            "SELECT count(*) FROM attempt_transitions WHERE cause = 'lookup_approved'",
        ),
        other => panic!("no query for {other}"),
    };
    db.scalar(pg, lite).await
}

/// A fresh database, localstripe, and the simulator as a lossy proxy in
/// front of it (10 % of the answers lost after Stripe executed, 5 % held
/// past the client's timeout), with worker settings that charge through it
/// 16 at a time.
async fn lossy_fleet(
    b: Backend,
    seed: u64,
) -> (TestDb, LocalStripe, SimHandle, cobro::runtime::WorkerArgs) {
    let db = TestDb::new(b).await;
    let stripe = LocalStripe::start().await;
    let proxy = start_proxy(
        &stripe.url,
        seed,
        Faults {
            p_response_lost: 0.10,
            p_timeout_after_charge: 0.05,
            hold_ms: 2_500,
            ..Faults::default()
        },
    )
    .await;
    let mut args = stripe_worker_args(&db.url, &proxy.url());
    args.concurrency = 16;
    (db, stripe, proxy, args)
}

async fn the_fleet_through_a_lossy_proxy_charges_no_order_twice(b: Backend) {
    if !localstripe_installed() {
        return;
    }
    init_logs();
    let orders = match b {
        Backend::Postgres => 1_000,
        Backend::Sqlite => 300,
    };
    let (db, stripe, proxy, args) = lossy_fleet(b, 20261203).await;
    let worker = spawn_worker(args);
    let mut ours: HashMap<String, (uuid::Uuid, i64, bool)> = HashMap::new();
    for i in 0..orders {
        let declined = i % 20 == 7;
        let card = if declined {
            DECLINED_CARD
        } else {
            "pm_card_visa"
        };
        let amount = 100 + (i as i64) * 37;
        let order = format!("fleet-{i:04}");
        let req = ChargeRequest::parse(&order, amount, "EUR", None, Some(card)).unwrap();
        let id = db.store.enqueue(&req).await.unwrap().attempt_id;
        ours.insert(order, (id, amount, declined));
    }
    eventually(
        Duration::from_secs(600),
        "every order APROBADO or RECHAZADO",
        || async {
            let open = db
                .scalar(
                    "SELECT count(*) FROM cobro.payment_attempts WHERE state NOT IN ('APROBADO', 'RECHAZADO')",
                    "SELECT count(*) FROM payment_attempts WHERE state NOT IN ('APROBADO', 'RECHAZADO')",
                )
                .await;
            (open == 0).then_some(())
        },
    )
    .await;
    // Answers still held by the proxy reach nobody; let them finish.
    tokio::time::sleep(Duration::from_secs(3)).await;
    worker.stop().await;

    let intents = stripe.intents().await;
    let mut succeeded: HashMap<String, Vec<&Intent>> = HashMap::new();
    for pi in intents.iter().filter(|p| p.status == "succeeded") {
        let order = pi
            .order
            .clone()
            .expect("cobro's metadata on every PaymentIntent");
        succeeded.entry(order).or_default().push(pi);
    }
    let twice = succeeded.values().filter(|v| v.len() > 1).count();
    assert_eq!(twice, 0, "orders charged twice, counted by localstripe");
    let (mut approved, mut declined) = (0, 0);
    for (order, (id, amount, card_declined)) in &ours {
        let (a, _) = db.store.load(*id).await.unwrap();
        let at_stripe = succeeded.get(order).map_or(0, Vec::len);
        match a.state {
            State::Aprobado => {
                approved += 1;
                assert_eq!(at_stripe, 1, "{order}: approved here, one charge there");
                let pi = succeeded[order][0];
                assert_eq!(pi.amount, *amount, "{order}: to the cent");
                assert_eq!(Some(pi.id.as_str()), a.gateway_charge_id.as_deref());
                assert!(!card_declined, "{order}: a declining card approved");
            }
            State::Rechazado => {
                declined += 1;
                assert_eq!(at_stripe, 0, "{order}: declined here, charged there");
                assert!(
                    card_declined,
                    "{order}: a good card declined ({:?})",
                    a.decline_code
                );
            }
            other => panic!("{order} ended {other}"),
        }
    }
    let orphans = intents
        .iter()
        .filter(|p| p.status == "requires_confirmation")
        .count();
    let stats = proxy_stats(&proxy.url()).await;
    let creates_unanswered = with_cause(&db, "gateway_create_unanswered").await;
    let confirms_unknown = with_cause(&db, "gateway_unknown").await;
    let settled_by_lookup = with_cause(&db, "lookup_approved").await;
    eprintln!(
        "stripe fleet ({b:?}): {orders} orders, {approved} approved (one succeeded PaymentIntent each), \
         {declined} declined, 0 charged twice; localstripe holds {} PaymentIntents ({orphans} never \
         confirmed: creates whose answer was lost, re-created with the same key by a server that \
         ignores keys); proxy: {} executing requests forwarded, {} answers dropped and {} held past \
         the timeout after localstripe executed; {creates_unanswered} creates unanswered, \
         {confirms_unknown} sends DESCONOCIDO, {settled_by_lookup} settled by GET PaymentIntent",
        intents.len(),
        stats.executing_forwarded,
        stats.response_lost_after_upstream,
        stats.timeout_after_upstream,
    );
    assert_eq!(approved + declined, orders);
    assert!(stats.response_lost_after_upstream > 0 && stats.timeout_after_upstream > 0);
    assert!(creates_unanswered > 0, "a lost create was exercised");
    assert!(
        confirms_unknown > 0 && settled_by_lookup > 0,
        "a lost confirm was exercised"
    );
    db.drop_db().await;
}

/// Saved cards, as merchants who retry payments keep them: each order's
/// card is attached to a Customer at localstripe, and cobro charges it with
/// that Customer through the lossy proxy. A quarter of the cards decline;
/// the app saves a good card to the same Customer (`POST
/// /orders/{id}/payment-method`'s store call) and finance retries the order
/// (a business retry: new attempt, new key, off-session). Counted at
/// localstripe: every order exactly one succeeded PaymentIntent, carrying
/// the order's Customer, whatever answers the proxy lost.
async fn saved_cards_and_their_retries_through_a_lossy_proxy_are_charged_once_with_their_customer(
    b: Backend,
) {
    if !localstripe_installed() {
        return;
    }
    init_logs();
    let orders = match b {
        Backend::Postgres => 120,
        Backend::Sqlite => 60,
    };
    let (db, stripe, proxy, mut args) = lossy_fleet(b, 20261212).await;
    // Real Stripe takes `off_session=true` on confirm, and cobro sends it
    // for business retries (src/gateway/stripe/tests/charges.rs checks the form);
    // localstripe refuses any confirm parameter ("Unexpected off_session"),
    // so this run leaves it off.
    args.gateway.stripe_off_session_retries = false;
    // localstripe declines with `card_declined`: retried here, but not
    // before finance asks (the schedule's first delay is a day).
    args.retry.retryable_declines = format!("{},card_declined", cobro::retry::DEFAULT_RETRYABLE);
    let worker = spawn_worker(args);

    // order -> (customer, first attempt, declines at first)
    let mut ours: HashMap<String, (String, uuid::Uuid, bool)> = HashMap::new();
    for i in 0..orders {
        let declines = i % 4 == 1;
        // localstripe attaches 4000000000000341 and declines charging it.
        let number = if declines {
            "4000000000000341"
        } else {
            "4242424242424242"
        };
        let (cus, pm) = stripe.customer_with_card(number).await;
        let order = format!("saved-{i:04}");
        let req = ChargeRequest::parse(&order, 1_000 + i as i64 * 13, "EUR", None, Some(&pm))
            .unwrap()
            .with_customer(Some(&cus))
            .unwrap();
        let id = db.store.enqueue(&req).await.unwrap().attempt_id;
        ours.insert(order, (cus, id, declines));
    }
    let long = Duration::from_secs(300);
    let mut retries = Vec::new();
    for (order, (cus, first, declines)) in &ours {
        if !*declines {
            continue;
        }
        let declined = settled(&db.store, *first, State::Rechazado, long).await;
        assert_eq!(declined.decline_code.as_deref(), Some("card_declined"));
        // The customer saves a new card; the app hands it to cobro.
        let good = stripe.payment_method("4242424242424242").await;
        stripe.attach(&good, cus).await;
        let token = PaymentMethod::parse(&good).unwrap();
        db.store
            .update_payment_method(order, &token, "test")
            .await
            .unwrap();
        let retried = db
            .store
            .business_retry(*first, 3, "finance", None)
            .await
            .unwrap();
        retries.push((order.clone(), retried.attempt_id));
    }
    for (order, (cus, first, declines)) in &ours {
        let end = if *declines { None } else { Some(*first) };
        if let Some(id) = end {
            let a = settled(&db.store, id, State::Aprobado, long).await;
            assert_eq!(a.customer.as_deref(), Some(cus.as_str()), "{order}");
        }
    }
    for (order, id) in &retries {
        let a = settled(&db.store, *id, State::Aprobado, long).await;
        assert_eq!(a.kind, "business_retry", "{order}");
        assert_eq!(
            a.customer.as_deref(),
            Some(ours[order].0.as_str()),
            "{order}: the retry keeps its Customer"
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    worker.stop().await;

    let intents = stripe.intents().await;
    let mut succeeded: HashMap<String, Vec<&Intent>> = HashMap::new();
    for pi in intents.iter().filter(|p| p.status == "succeeded") {
        let order = pi.order.clone().expect("cobro's metadata");
        succeeded.entry(order).or_default().push(pi);
    }
    for (order, (cus, _, _)) in &ours {
        let charged = succeeded.get(order).map_or(&[][..], Vec::as_slice);
        assert_eq!(
            charged.len(),
            1,
            "{order}: one succeeded PaymentIntent at localstripe"
        );
        assert_eq!(
            charged[0].customer.as_deref(),
            Some(cus.as_str()),
            "{order}: the succeeded PaymentIntent carries the order's Customer"
        );
    }
    let stats = proxy_stats(&proxy.url()).await;
    let unknown = with_cause(&db, "gateway_unknown").await;
    eprintln!(
        "saved cards ({b:?}): {orders} orders, {} business retries, one succeeded PaymentIntent \
         each with its Customer; proxy lost {} answers and held {} past the timeout; {unknown} \
         sends DESCONOCIDO",
        retries.len(),
        stats.response_lost_after_upstream,
        stats.timeout_after_upstream,
    );
    assert!(!retries.is_empty());
    assert!(
        stats.response_lost_after_upstream + stats.timeout_after_upstream > 0,
        "the proxy lost answers"
    );
    db.drop_db().await;
}

async fn a_refund_whose_answer_is_lost_is_one_refund(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let proxy = start_proxy(&stripe.url, 7, Faults::default()).await;
    let worker = spawn_worker(stripe_worker_args(&db.url, &proxy.url()));
    let approved = charged_by_worker(&db.store, &visa_charge("ord-refund", 10_000)).await;
    let charge = approved.id;
    let pi = approved.gateway_charge_id.clone().unwrap();
    // From now on every answer to a POST is lost after localstripe ran it.
    set_faults(&proxy.url(), &answers_lost()).await;
    let refund = ask_refund(&db.store, charge, 2_500, "app").await.refund_id;
    let done = settled(&db.store, refund, State::Aprobado, Duration::from_secs(30)).await;
    let causes = causes(&db.store, refund).await;
    assert!(causes.contains(&"gateway_unknown".to_owned()), "{causes:?}");
    assert_eq!(
        causes.last().map(String::as_str),
        Some("lookup_approved"),
        "{causes:?}"
    );
    let refunds = stripe.refunds().await;
    assert_eq!(
        refunds.len(),
        1,
        "exactly one refund at Stripe: {refunds:?}"
    );
    let (id, of, amount, key) = &refunds[0];
    assert_eq!(Some(id.as_str()), done.gateway_charge_id.as_deref());
    assert_eq!(of.as_deref(), Some(pi.as_str()));
    assert_eq!(*amount, 2_500);
    assert_eq!(
        key.as_deref(),
        Some(done.idempotency_key.to_string().as_str())
    );
    worker.stop().await;
}
