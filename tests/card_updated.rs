//! A card its network updated gets its scheduled business retry sooner
//! (issue 29 item 2): a signed account-updater event, in Stripe's format
//! (`payment_method.automatically_updated`) and the simulator's
//! (`payment_method.updated`), through the real webhook route, pulls the
//! retry forward to `COBRO_CARD_UPDATED_RETRY_DELAY`, never earlier than
//! the card network's advice allows and never later than scheduled; an
//! event for a card no retry uses is recorded and does nothing; a
//! duplicate does nothing. On both backends.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::state::Event;
use cobro::store::{Attempt, Store};
use cobro::webhook::{Scheme, Verifier};
use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    an_account_updater_event_pulls_the_retry_forward_in_both_formats,
    the_network_advice_and_the_schedule_bound_the_pull,
    the_simulator_sends_the_card_update_itself,
);

const DELAY: Duration = Duration::from_secs(120);

/// A charge on `card` declined with `code`, its retry due in `retry_in`.
async fn declined(
    store: &Store,
    order: &str,
    card: &str,
    code: &str,
    retry_in: Duration,
) -> Attempt {
    let req = cobro::domain::ChargeRequest::parse(order, 3_000, "USD", None, Some(card)).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    decline_for_retry(store, &a, code, retry_in).await
}

async fn web_with(store: &Store, verifier: Verifier) -> Web {
    let mut cfg = web_config(store, verifier);
    cfg.retry = cfg.retry.clone().with_card_updated_delay(DELAY);
    start_web_cfg(cfg).await
}

async fn post(web: &Web, v: &Verifier, id: &str, body: &Value) -> (u16, Value) {
    let body = body.to_string().into_bytes();
    let mut req = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("content-type", "application/json")
        .body(body.clone());
    for (k, val) in v.sign(id, chrono::Utc::now().timestamp(), &body) {
        req = req.header(k, val);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn sim_event(id: &str, card: &str) -> Value {
    json!({"id": id, "type": "payment_method.updated", "created": chrono::Utc::now().timestamp(),
           "data": {"payment_method": card}})
}

fn stripe_event(id: &str, kind: &str, card: &str) -> Value {
    json!({"id": id, "object": "event", "type": kind, "created": chrono::Utc::now().timestamp(),
           "data": {"object": {"id": card, "object": "payment_method", "type": "card",
                               "card": {"brand": "visa", "exp_month": 12, "exp_year": 2030}}}})
}

/// Seconds from now until the attempt's retry is due.
async fn due_in(store: &Store, a: &Attempt) -> i64 {
    let (now, _) = store.load(a.id).await.unwrap();
    (now.next_action_at.expect("a retry is scheduled") - chrono::Utc::now()).num_seconds()
}

async fn metric(web: &Web) -> f64 {
    let text = web.metrics().await;
    text.lines()
        .filter(|l| l.starts_with("cobro_card_updated_retries_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn an_account_updater_event_pulls_the_retry_forward_in_both_formats(db: &TestDb) {
    let three_days = Duration::from_secs(3 * 86_400);
    // The simulator's format, signed with Standard Webhooks.
    let a = declined(
        &db.store,
        "upd-sim",
        "pm_upd_sim",
        "insufficient_funds",
        three_days,
    )
    .await;
    let other = declined(
        &db.store,
        "upd-other",
        "pm_other",
        "insufficient_funds",
        three_days,
    )
    .await;
    let v = test_verifier();
    let web = web_with(&db.store, v.clone()).await;
    let before = metric(&web).await;
    let (status, reply) = post(&web, &v, "evt_upd_1", &sim_event("evt_upd_1", "pm_upd_sim")).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["outcome"]["result"], "rescheduled", "{reply}");
    let due = due_in(&db.store, &a).await;
    assert!((100..=125).contains(&due), "due in {due}s, want about 120");
    let log = db.store.transitions(a.id).await.unwrap();
    let last = log.last().unwrap();
    assert_eq!(
        (last.cause.as_str(), last.actor.as_str()),
        ("card_updated", "webhook:evt_upd_1")
    );
    assert_eq!(last.error_kind.as_deref(), Some("card_updated"));
    // Nothing else about the attempt changed.
    let (now, _) = db.store.load(a.id).await.unwrap();
    assert_eq!(
        (
            now.state,
            now.decline_code.as_deref(),
            now.payment_method.as_deref(),
            now.amount_minor
        ),
        (
            a.state,
            a.decline_code.as_deref(),
            a.payment_method.as_deref(),
            a.amount_minor
        )
    );
    assert!(metric(&web).await >= before + 1.0, "counted on /metrics");
    // Another card's retry is untouched.
    assert!(due_in(&db.store, &other).await > 86_400);
    // The same event again: a duplicate, nothing moves.
    let (status, reply) = post(&web, &v, "evt_upd_1", &sim_event("evt_upd_1", "pm_upd_sim")).await;
    assert_webhook_took(status, &reply, "duplicate");
    assert_eq!(db.store.transitions(a.id).await.unwrap().len(), log.len());
    // A card no scheduled retry uses: recorded, nothing done.
    let (status, reply) = post(&web, &v, "evt_upd_2", &sim_event("evt_upd_2", "pm_nobody")).await;
    assert_webhook_took(status, &reply, "ignored");
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM cobro.webhook_events WHERE event_id IN ('evt_upd_1', 'evt_upd_2')",
            "SELECT count(*) FROM webhook_events WHERE event_id IN ('evt_upd_1', 'evt_upd_2')"
        )
        .await,
        2
    );
    // Without the card's token the simulator's event is malformed.
    let bad = json!({"id": "evt_upd_3", "type": "payment_method.updated", "data": {}});
    assert_eq!(post(&web, &v, "evt_upd_3", &bad).await.0, 400);
    web.stop().await;

    // Stripe's format, signed as Stripe signs.
    let secret = "whsec_stripe_test_secret_0123456789abcdef";
    let stripe = Verifier::from_env_value(Scheme::Stripe, secret).unwrap();
    let web = web_with(&db.store, stripe.clone()).await;
    for (n, kind) in [
        "payment_method.automatically_updated",
        "payment_method.updated",
    ]
    .into_iter()
    .enumerate()
    {
        let card = format!("pm_upd_stripe_{n}");
        let order = format!("upd-stripe-{n}");
        let s = declined(&db.store, &order, &card, "insufficient_funds", three_days).await;
        let id = format!("evt_stripe_upd_{n}");
        let (status, reply) = post(&web, &stripe, &id, &stripe_event(&id, kind, &card)).await;
        assert_webhook_took(status, &reply, "rescheduled");
        let due = due_in(&db.store, &s).await;
        assert!((100..=125).contains(&due), "{kind}: due in {due}s");
    }
    web.stop().await;
}

async fn the_network_advice_and_the_schedule_bound_the_pull(db: &TestDb) {
    let v = test_verifier();
    let web = web_with(&db.store, v.clone()).await;
    let three_days = Duration::from_secs(3 * 86_400);
    // Mastercard MAC 25: "retry after 24 hours". The update moves the
    // retry to 24 h after the decline, not to the 2-minute delay.
    let mac = declined(
        &db.store,
        "upd-mac",
        "pm_upd_mac",
        "insufficient_funds/retry_after_24h",
        three_days,
    )
    .await;
    let (status, reply) = post(&web, &v, "evt_mac", &sim_event("evt_mac", "pm_upd_mac")).await;
    assert_webhook_took(status, &reply, "rescheduled");
    let due = due_in(&db.store, &mac).await;
    assert!((86_390..=86_410).contains(&due), "due in {due}s, want 24 h");
    // A retry already due sooner than the delay is never pushed later.
    let soon = declined(
        &db.store,
        "upd-soon",
        "pm_upd_soon",
        "insufficient_funds",
        Duration::from_secs(30),
    )
    .await;
    let (status, reply) = post(&web, &v, "evt_soon", &sim_event("evt_soon", "pm_upd_soon")).await;
    assert_webhook_took(status, &reply, "ignored");
    assert!(due_in(&db.store, &soon).await <= 30);
    // A "do not try again" stays without a retry.
    let never = declined(
        &db.store,
        "upd-never",
        "pm_upd_never",
        "insufficient_funds/do_not_try_again",
        three_days,
    )
    .await;
    let (_, reply) = post(
        &web,
        &v,
        "evt_never",
        &sim_event("evt_never", "pm_upd_never"),
    )
    .await;
    assert_eq!(reply["outcome"]["result"], "ignored", "{reply}");
    assert!(due_in(&db.store, &never).await > 86_400);
    web.stop().await;
}

/// The simulator's own account updater: `POST /control/card-updated` makes
/// it send the signed `payment_method.updated`, which moves the retry.
async fn the_simulator_sends_the_card_update_itself(db: &TestDb) {
    let secret = test_secret();
    let v = Verifier::from_env_value(Scheme::StandardWebhooks, &secret).unwrap();
    let web = web_with(&db.store, v.clone()).await;
    let sim = sim_with_webhooks(&web, v, cobro::sim::Faults::default(), 2, 50).await;
    let three_days = Duration::from_secs(3 * 86_400);
    let a = declined(
        &db.store,
        "upd-by-sim",
        "pm_sim_upd",
        "insufficient_funds",
        three_days,
    )
    .await;
    let http = reqwest::Client::new();
    let bad = http
        .post(format!("{}/control/card-updated", sim.url()))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let ok = http
        .post(format!("{}/control/card-updated", sim.url()))
        .json(&json!({"payment_method": "pm_sim_upd"}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    eventually(Duration::from_secs(10), "the retry pulled forward", || {
        let store = db.store.clone();
        let a = a.clone();
        async move { (due_in(&store, &a).await <= 125).then_some(()) }
    })
    .await;
    // Both copies delivered: one moved the retry, the other was a duplicate.
    eventually(Duration::from_secs(10), "two deliveries", || async {
        (ledger(&sim.url()).await.stats.webhooks_delivered == 2).then_some(())
    })
    .await;
    let moves = causes(&db.store, a.id)
        .await
        .iter()
        .filter(|c| *c == "card_updated")
        .count();
    assert_eq!(moves, 1);
    sim.shutdown().await;
    web.stop().await;
}
