//! Saved cards through Stripe's API, against localstripe: a Customer made
//! with `POST /v1/customers` and a card attached to it with `POST
//! /v1/payment_methods/{pm}/attach`, as an app saves a card. The adapter's
//! requests go through a recording tap (tests/common/stripe_tap.rs), so the
//! test reads both what cobro sent and what localstripe recorded. On both
//! backends.
//!
//! What localstripe does not do: Stripe refuses a PaymentIntent for a
//! PaymentMethod attached to a Customer unless `customer` is given;
//! localstripe accepts it and charges (it takes the Customer from the
//! card). The last test records that, so nobody reads its approval as
//! Stripe's.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::state::State;
use common::*;
use stripe_support::*;
use stripe_tap::Tap;

#[path = "common/stripe.rs"]
mod stripe_support;
#[path = "common/stripe_tap.rs"]
mod stripe_tap;

on_both_dbs!(
    a_saved_card_is_charged_with_its_customer,
    a_business_retry_of_a_saved_card_carries_the_customer_off_session,
    without_the_customer_localstripe_still_charges_a_saved_card,
);

/// A worker charging through `tap`, business retries confirmed off-session.
fn worker(db: &TestDb, tap: &Tap) -> InProcessWorker {
    let mut args = stripe_worker_args(&db.url, &tap.url);
    args.gateway.stripe_off_session_retries = true;
    spawn_worker(args)
}

async fn a_saved_card_is_charged_with_its_customer(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let tap = Tap::start(&stripe.url).await;
    let (cus, pm) = stripe.customer_with_card("4242424242424242").await;
    let worker = worker(db, &tap);
    let req = ChargeRequest::parse("saved-1", 2_500, "EUR", None, Some(&pm))
        .unwrap()
        .with_customer(Some(&cus))
        .unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = settled(&db.store, id, State::Aprobado, Duration::from_secs(30)).await;
    assert_eq!(
        a.customer.as_deref(),
        Some(cus.as_str()),
        "kept on the attempt"
    );
    let pi_id = a.gateway_ref.clone().expect("the PaymentIntent");
    let pi = stripe.object(&format!("/v1/payment_intents/{pi_id}")).await;
    assert_eq!(pi["customer"], cus.as_str(), "localstripe holds it: {pi}");
    assert_eq!(pi["payment_method"], pm.as_str());
    assert_eq!(pi["status"], "succeeded");
    let seen = tap.seen();
    let create = seen
        .iter()
        .find(|s| s.method == "POST" && s.path == "/v1/payment_intents")
        .expect("a create");
    assert_eq!(create.field("customer").as_deref(), Some(cus.as_str()));
    let confirm = seen
        .iter()
        .find(|s| s.path.ends_with("/confirm"))
        .expect("a confirm");
    assert_eq!(
        confirm.field("off_session"),
        None,
        "the first attempt is the customer's own (on-session)"
    );
    worker.stop().await;
}

async fn a_business_retry_of_a_saved_card_carries_the_customer_off_session(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let tap = Tap::start(&stripe.url).await;
    // localstripe attaches this card and declines charging it.
    let (cus, pm) = stripe.customer_with_card("4000000000000341").await;
    let worker = worker(db, &tap);
    let req = ChargeRequest::parse("saved-2", 4_000, "USD", None, Some(&pm))
        .unwrap()
        .with_customer(Some(&cus))
        .unwrap();
    let first = db.store.enqueue(&req).await.unwrap().attempt_id;
    let declined = settled(&db.store, first, State::Rechazado, Duration::from_secs(30)).await;
    assert_eq!(declined.customer.as_deref(), Some(cus.as_str()));
    // Finance's (or the worker's) business retry: a new attempt, new key.
    let retried = db
        .store
        .business_retry(first, 3, "test", None)
        .await
        .unwrap();
    let retry = settled(
        &db.store,
        retried.attempt_id,
        State::Rechazado,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(retry.kind, "business_retry");
    assert_eq!(retry.attempt_number, 2);
    assert_eq!(
        retry.customer.as_deref(),
        Some(cus.as_str()),
        "carried over"
    );
    assert_eq!(retry.payment_method.as_deref(), Some(pm.as_str()));
    let pi_id = retry
        .gateway_ref
        .clone()
        .expect("the retry's PaymentIntent");
    assert_ne!(Some(&pi_id), declined.gateway_ref.as_ref(), "a new one");
    let pi = stripe.object(&format!("/v1/payment_intents/{pi_id}")).await;
    assert_eq!(pi["customer"], cus.as_str(), "localstripe holds it: {pi}");
    let seen = tap.seen();
    let key = retried.idempotency_key.to_string();
    let create = seen
        .iter()
        .find(|s| {
            s.path == "/v1/payment_intents" && s.field("metadata[cobro_key]") == Some(key.clone())
        })
        .expect("the retry's create");
    assert_eq!(create.field("customer").as_deref(), Some(cus.as_str()));
    let confirms: Vec<_> = seen
        .iter()
        .filter(|s| s.path.ends_with("/confirm"))
        .collect();
    let retry_confirm = confirms
        .iter()
        .find(|s| s.path == format!("/v1/payment_intents/{pi_id}/confirm"))
        .expect("the retry's confirm");
    assert_eq!(
        retry_confirm.field("off_session").as_deref(),
        Some("true"),
        "a business retry is merchant-initiated"
    );
    let first_pi = declined
        .gateway_ref
        .clone()
        .expect("the first PaymentIntent");
    let first_confirm = confirms
        .iter()
        .find(|s| s.path == format!("/v1/payment_intents/{first_pi}/confirm"))
        .expect("the first confirm");
    assert_eq!(first_confirm.field("off_session"), None);
    worker.stop().await;
}

async fn without_the_customer_localstripe_still_charges_a_saved_card(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let tap = Tap::start(&stripe.url).await;
    let (_cus, pm) = stripe.customer_with_card("4242424242424242").await;
    let worker = worker(db, &tap);
    let req = ChargeRequest::parse("saved-3", 700, "EUR", None, Some(&pm)).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = settled(&db.store, id, State::Aprobado, Duration::from_secs(30)).await;
    assert_eq!(a.customer, None);
    let create = tap
        .seen()
        .into_iter()
        .find(|s| s.path == "/v1/payment_intents")
        .expect("a create");
    assert_eq!(create.field("customer"), None, "nothing invented");
    // Stripe would refuse this create; localstripe does not, and its
    // PaymentIntent names no Customer.
    let pi_id = a.gateway_ref.clone().expect("the PaymentIntent");
    let pi = stripe.object(&format!("/v1/payment_intents/{pi_id}")).await;
    assert_eq!(pi["status"], "succeeded");
    assert!(pi["customer"].is_null(), "{pi}");
    worker.stop().await;
}
