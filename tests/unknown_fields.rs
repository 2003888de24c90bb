//! JSON bodies refuse unknown fields (issue 27): a misspelled field
//! (`"paymentMethod"`) used to be dropped in silence and the request done
//! without it. Every route family of the web process that takes a JSON body
//! (charges, refunds, an order's cancel and payment method, the incident
//! switch, finance's API) now answers 422 naming the field and the fields
//! it takes, and writes nothing. On both backends, over real HTTP.

#[macro_use]
mod common;

use cobro::domain::ChargeRequest;
use cobro::state::{Event, State};
use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    charges_refuse_an_unknown_field_and_write_nothing,
    refunds_refuse_an_unknown_field_and_write_nothing,
    an_orders_cancel_and_payment_method_refuse_an_unknown_field,
    the_incident_switch_refuses_an_unknown_field,
    finances_api_refuses_an_unknown_field_and_moves_nothing,
);

const KEY: &str = "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b";

/// `POST {path}` as `who` with `body` (and an `Idempotency-Key`); the
/// status and the JSON answer.
async fn post(web: &Web, who: &str, path: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", web.url))
        .bearer_auth(secret(who))
        .header("Idempotency-Key", KEY)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A 422 naming `field` and listing what the route takes.
fn assert_unknown(got: &(u16, Value), field: &str, expected: &str) {
    let (status, body) = got;
    assert_eq!(*status, 422, "{body}");
    assert_eq!(body["field"], field, "{body}");
    assert_eq!(
        body["error"],
        format!("unknown field \"{field}\"; expected one of: {expected}"),
        "{body}"
    );
}

async fn charges_refuse_an_unknown_field_and_write_nothing(db: &TestDb) {
    let web = web_on(&db.store).await;
    let got = post(
        &web,
        "app",
        "/charges",
        json!({"order_id": "uf-1", "amount_minor": 1999, "currency": "USD",
               "paymentMethod": "pm_card_visa"}),
    )
    .await;
    assert_unknown(
        &got,
        "paymentMethod",
        "order_id, amount_minor, currency, payment_method, customer",
    );
    assert_eq!(db.attempts().await, 0, "nothing written");
    // The key was not used: the body meant is accepted with it.
    let (status, created) = post(
        &web,
        "app",
        "/charges",
        json!({"order_id": "uf-1", "amount_minor": 1999, "currency": "USD",
               "payment_method": "pm_card_visa"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["payment_method"], "pm_card_visa");
    web.stop().await;
}

async fn refunds_refuse_an_unknown_field_and_write_nothing(db: &TestDb) {
    let web = web_on(&db.store).await;
    let req = ChargeRequest::parse("uf-2", 5_000, "EUR", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let id = a.id;
    let a = step(&db.store, &a, Event::Claim, None).await;
    step(&db.store, &a, Event::Approved, None).await;
    let got = post(
        &web,
        "app",
        "/refunds",
        json!({"attempt_id": id, "amount_minor": 1000, "reason": "customer asked"}),
    )
    .await;
    assert_unknown(&got, "reason", "attempt_id, amount_minor");
    assert_eq!(db.attempts().await, 1, "no refund attempt");
    web.stop().await;
}

async fn an_orders_cancel_and_payment_method_refuse_an_unknown_field(db: &TestDb) {
    let web = web_on(&db.store).await;
    let req = ChargeRequest::parse("uf-3", 2_500, "USD", None, Some("pm_old")).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;

    for (path, body, field, expected) in [
        (
            "/orders/uf-3/cancel",
            json!({"reason": "customer_request", "notify_customer": true}),
            "notify_customer",
            "reason",
        ),
        (
            "/orders/uf-3/payment-method",
            json!({"payment_method": "pm_new", "card_number": "4242424242424242"}),
            "card_number",
            "payment_method",
        ),
    ] {
        assert_unknown(&post(&web, "app", path, body).await, field, expected);
    }

    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Pendiente, "not cancelled");
    assert_eq!(a.payment_method.as_deref(), Some("pm_old"), "not changed");
    assert_eq!(path(&db.store, id).await, ["PENDIENTE"]);
    web.stop().await;
}

async fn the_incident_switch_refuses_an_unknown_field(db: &TestDb) {
    let web = web_on(&db.store).await;
    let got = post(
        &web,
        "ana",
        "/control/pause",
        json!({"reason": "gateway incident", "paused": true}),
    )
    .await;
    assert_unknown(&got, "paused", "reason");
    assert!(
        db.store.pause_state().await.unwrap().is_none(),
        "the switch was never set"
    );
    web.stop().await;
}

async fn finances_api_refuses_an_unknown_field_and_moves_nothing(db: &TestDb) {
    let web = web_on(&db.store).await;
    let a = in_review(&db.store, "uf-4").await;

    // A resolution takes the fields of its action only.
    let resolve = format!("/finance/api/attempts/{}/resolve", a.id);
    for (path, body, field, expected) in [
        (
            resolve.as_str(),
            json!({"action": "approve", "version": a.version, "note": "seen at the gateway",
                   "charge_id": "ch_1", "code": "do_not_honor"}),
            "code",
            "action, version, note, charge_id",
        ),
        (
            &resolve,
            json!({"action": "check_now", "version": a.version, "note": "again", "chargeId": "ch_1"}),
            "chargeId",
            "action, version, note",
        ),
        (
            "/finance/api/check-now",
            json!({"note": "all of them", "stat": "EN_REVISION"}),
            "stat",
            "note, state, currency, kind, min_age_secs",
        ),
        // Checked before the case is looked for (there is none).
        (
            "/finance/api/cases/1/resolve",
            json!({"note": "ok", "resolution": "refunded"}),
            "resolution",
            "note",
        ),
        (
            "/finance/api/cases/1/refund-duplicate",
            json!({"charge_id": "ch_2", "amount_minor": 100}),
            "amount_minor",
            "charge_id",
        ),
    ] {
        assert_unknown(&post(&web, "ana", path, body).await, field, expected);
    }

    let (now, _) = db.store.load(a.id).await.unwrap();
    assert_eq!(now.state, State::EnRevision);
    assert_eq!(now.version, a.version, "nothing moved");
    assert_eq!(now.next_action_at, a.next_action_at, "no check pulled");
    assert_eq!(db.attempts().await, 1, "no refund");
    web.stop().await;
}
