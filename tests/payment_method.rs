//! A new payment-method token for the next business retry (issue 14,
//! item 2): `POST /orders/{order_id}/payment-method`,
//! `Store::update_payment_method`, `cobro.update_payment_method`. A real
//! worker declines an order against the simulator, the app gives a new
//! token, and the gateway sees the retry charged with it; every refusal
//! names the field and writes nothing. On both backends.

#[macro_use]
mod common;
#[path = "common/declines.rs"]
mod declines;

use std::time::Duration;

use cobro::sim::Faults;
use cobro::state::State;
use common::*;
use declines::*;
use serde_json::{Value, json};

on_both_dbs!(the_next_retry_charges_the_new_payment_method_and_refusals_name_the_field,);

/// The body that gives `pm` as the order's payment method from now on.
fn new_method(pm: &str) -> Value {
    json!({ "payment_method": pm })
}

async fn post_method(web: &Web, key: &str, order: &str, body: Value) -> (u16, Value) {
    let url = format!("{}/orders/{order}/payment-method", web.url);
    post_json(&url, As::Bearer(key), &body).await
}

async fn the_next_retry_charges_the_new_payment_method_and_refusals_name_the_field(db: &TestDb) {
    let (sim, worker) = sim_and_worker(db, Faults::default()).await;
    let web = web_on(&db.store).await;
    decline_with(&sim.url(), "insufficient_funds").await;
    let first = declined(&db.store, "pm-1", Some("pm_card_old")).await;
    assert!(
        first.next_action_at.is_some(),
        "a business retry is scheduled"
    );

    // Refused, with nothing written: card data, a missing token, no scope.
    let (s, e) = post_method(&web, "app", "pm-1", new_method("4242 4242 4242 4242")).await;
    assert_refused(s, &e, 422, "payment_method");
    let (s, e) = post_method(&web, "app", "pm-1", new_method("pm_4242424242424242")).await;
    assert_refused(s, &e, 422, "payment_method");
    assert!(e["error"].as_str().unwrap().contains("card number"), "{e}");
    let (s, e) = post_method(&web, "app", "pm-1", json!({})).await;
    assert_refused(s, &e, 422, "payment_method");
    let (s, _) = post_method(&web, "agent", "pm-1", new_method("pm_card_new")).await;
    assert_eq!(s, 403, "charges:write is needed");
    let (s, e) = post_method(&web, "app", "nobody", new_method("pm_card_new")).await;
    assert_refused(s, &e, 404, "order_id");

    // Accepted for the pending retry, recorded with who gave it.
    let (s, ok) = post_method(&web, "app", "pm-1", new_method("pm_card_new")).await;
    assert_eq!(s, 200, "{ok}");
    assert_eq!(ok["after_attempt_id"], json!(first.id));
    assert!(ok["next_retry_at"].is_string(), "{ok}");
    let who = db
        .scalar(
            "SELECT count(*) FROM cobro.payment_method_updates WHERE order_id = 'pm-1' AND actor = 'api:app'",
            "SELECT count(*) FROM payment_method_updates WHERE order_id = 'pm-1' AND actor = 'api:app'",
        )
        .await;
    assert_eq!(who, 1);

    // The retry charges the new token at the gateway.
    set_faults(&sim.url(), &Faults::default()).await;
    due_now(db, first.id).await;
    let attempts = eventually(Duration::from_secs(15), "the retry approved", || async {
        let all = db.store.attempts_for_order("pm-1").await.unwrap();
        (all.len() == 2 && all[1].state == State::Aprobado).then_some(all)
    })
    .await;
    assert_eq!(attempts[1].payment_method.as_deref(), Some("pm_card_new"));
    let l = ledger(&sim.url()).await;
    let sent: Vec<_> = l
        .entries
        .iter()
        .filter(|e| e.order_id == "pm-1")
        .map(|e| (e.status.as_str(), e.payment_method.as_deref()))
        .collect();
    assert_eq!(
        sent,
        [
            ("declined", Some("pm_card_old")),
            ("approved", Some("pm_card_new"))
        ],
        "the gateway saw the old token declined and the new one charged"
    );

    // Approved now: refused, naming the order.
    let (s, e) = post_method(&web, "app", "pm-1", new_method("pm_card_newer")).await;
    assert_refused(s, &e, 409, "order_id");
    assert!(e["error"].as_str().unwrap().contains("approved"), "{e}");
    // A final decline has no retry pending: refused the same way.
    decline_with(&sim.url(), "stolen_card").await;
    declined(&db.store, "pm-2", Some("pm_card_old")).await;
    let (s, e) = post_method(&web, "app", "pm-2", new_method("pm_card_new")).await;
    assert_refused(s, &e, 409, "order_id");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("no business retry pending"),
        "{e}"
    );
    // The library says the same, and so does the SQL function.
    let token = cobro::domain::PaymentMethod::parse("pm_card_new").unwrap();
    let refused = db.store.update_payment_method("pm-2", &token, "app").await;
    assert!(
        matches!(
            refused,
            Err(cobro::store::MethodUpdateError::NoRetryPending(_))
        ),
        "{refused:?}"
    );
    if let Some(pool) = db.store.pg_pool() {
        let sql = "SELECT update_id FROM cobro.update_payment_method($1, $2, 'sql')";
        let err = sqlx::query(sql)
            .bind("pm-2")
            .bind("pm_card_new")
            .execute(pool)
            .await
            .unwrap_err();
        let code = err
            .as_database_error()
            .and_then(|d| d.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("CB010"), "{err}");
        let err = sqlx::query(sql)
            .bind("pm-2")
            .bind("4111111111111111")
            .execute(pool)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("invalid payment_method"), "{err}");
    }

    worker.stop().await;
    web.stop().await;
    sim.shutdown().await;
}
