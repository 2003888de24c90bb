//! What holds an order from a new charge, at every door (HTTP, the store,
//! raw SQL): an open case (a decline the gateway contradicts), until
//! finance resolves it; a cancel that means "do not charge", for good; and
//! a cancel never touching a pending refund.

use cobro::domain::ChargeRequest;
use cobro::state::{Event, State};
use cobro::store::{Applied, CancelReason, Change};
use serde_json::json;

use super::common::{
    self, TestDb, ask_refund, declined_with_retry, enqueued, start_web, step, test_verifier, web_on,
};
use super::doors::{DAY, assert_held, charge_again, finance_retry, post, signed_webhook};

on_both_dbs!(
    a_contradicted_decline_holds_the_order_until_finance_resolves_its_case,
    a_cancel_that_means_do_not_charge_holds_the_order_at_every_door,
    a_cancel_never_touches_a_refund,
);

/// The first situation: the gateway reports an approval for an
/// attempt we recorded RECHAZADO (charge.failed, then charge.succeeded for
/// the same key). The case opens, and no door may charge the order again
/// until finance resolves it.
async fn a_contradicted_decline_holds_the_order_until_finance_resolves_its_case(db: &TestDb) {
    let v = test_verifier();
    let web = start_web(&db.store, v.clone()).await;
    let a = declined_with_retry(&db.store, "gate-1", DAY).await;
    for (id, kind, status) in [
        ("evt_g1", "charge.failed", "declined"),
        ("evt_g2", "charge.succeeded", "approved"),
    ] {
        let event = json!({
            "id": id, "type": kind, "created": chrono::Utc::now().timestamp(),
            "data": {"charge_id": "ch_g", "idempotency_key": a.idempotency_key,
                     "status": status, "decline_code": "card_declined"}
        });
        signed_webhook(&web, &v, event).await;
    }
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    let case = cases[0].id;

    let held = format!("cobro escalations resolve-case --case {case}");
    assert_held(
        "finance's retry",
        &finance_retry(&web, a.id).await,
        "open_case",
        &held,
    );
    assert_held(
        "POST /charges",
        &charge_again(&web, "gate-1").await,
        "open_case",
        "unmatched_charge",
    );
    // The Rust door and a raw insert meet the same rule.
    let req = ChargeRequest::parse("gate-1", 3_000, "USD", None, None).unwrap();
    let e = db.store.enqueue(&req).await.unwrap_err();
    assert_eq!(e.hold(), Some(cobro::store::Hold::OpenCase), "{e}");
    let raw = db
        .exec(
            "INSERT INTO cobro.payment_attempts (id, order_id, amount_minor, currency, idempotency_key, state)
             VALUES (gen_random_uuid(), 'gate-1', 3000, 'USD', gen_random_uuid(), 'PENDIENTE')",
            "INSERT INTO payment_attempts (id, order_id, amount_minor, currency, idempotency_key, state, created_at, updated_at)
             VALUES (lower(hex(randomblob(18))), 'gate-1', 3000, 'USD', lower(hex(randomblob(18))), 'PENDIENTE', 0, 0)",
            &[],
        )
        .await
        .unwrap_err();
    // A raw insert gets the trigger's own words (constant on SQLite).
    assert!(raw.to_string().contains("may have charged it"), "{raw}");
    assert_eq!(
        db.store.attempts_for_order("gate-1").await.unwrap().len(),
        1
    );

    // Finance resolves the case with a note: the hold is lifted.
    db.store
        .resolve_case(case, "finance:ana", "refunded ch_g by hand")
        .await
        .unwrap();
    let (status, body) = charge_again(&web, "gate-1").await;
    assert_eq!(status, 201, "{body}");
    web.stop().await;
}

/// The second situation, and every cancel reason: a reason that
/// means "do not charge this order" holds it at every door; the others
/// leave it open to a new charge.
async fn a_cancel_that_means_do_not_charge_holds_the_order_at_every_door(db: &TestDb) {
    let web = web_on(&db.store).await;
    for reason in CancelReason::ALL {
        let order = format!("gate-cancel-{}", reason.as_str());
        let a = declined_with_retry(&db.store, &order, DAY).await;
        let (status, body) = post(
            &web,
            &format!("/orders/{order}/cancel"),
            "app",
            None,
            json!({"reason": reason.as_str()}),
        )
        .await;
        assert_eq!(status, 200, "{reason:?}: {body}");
        let retry = finance_retry(&web, a.id).await;
        let again = charge_again(&web, &order).await;
        if reason.holds_order() {
            let says = format!("was cancelled ({})", reason.as_str());
            assert_held("finance's retry", &retry, "cancelled", &says);
            assert_held("POST /charges", &again, "cancelled", &says);
            assert_eq!(
                db.store.attempts_for_order(&order).await.unwrap().len(),
                1,
                "{reason:?}: nothing written"
            );
        } else {
            // The order stays open: finance's retry is accepted (a worker
            // makes it), and so is the app's new charge.
            assert_eq!(retry.0, 202, "{reason:?}: {}", retry.1);
            assert_eq!(again.0, 201, "{reason:?}: {}", again.1);
        }
    }

    // A reason that holds, with nothing left to stop (no retry pending):
    // still recorded, and the order is held.
    let a = declined_with_retry(&db.store, "gate-cancel-late", DAY).await;
    let mut clear = Change::new(None, "retry_refused", "worker:test");
    clear.act_in = None;
    let a = match db.store.apply(&a, &clear).await.unwrap() {
        Applied::Moved(a) => *a,
        Applied::Lost => panic!("lost"),
    };
    db.exec(
        "UPDATE cobro.payment_attempts SET next_action_at = NULL WHERE id = $1::uuid",
        "UPDATE payment_attempts SET next_action_at = NULL WHERE id = ?1",
        &[&a.id.to_string()],
    )
    .await
    .unwrap();
    let (status, body) = post(
        &web,
        "/orders/gate-cancel-late/cancel",
        "app",
        None,
        json!({"reason": "paid_by_other_means"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_held(
        "finance's retry after a late cancel",
        &finance_retry(&web, a.id).await,
        "cancelled",
        "paid_by_other_means",
    );
    web.stop().await;
}

/// The third situation: a cancel on an approved order with a
/// pending refund leaves the refund alone (it is the customer's money).
async fn a_cancel_never_touches_a_refund(db: &TestDb) {
    let web = web_on(&db.store).await;
    let req = ChargeRequest::parse("gate-refund", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Approved, None).await;
    let refund = ask_refund(&db.store, a.id, 1_000, "app").await;
    let (status, body) = post(
        &web,
        "/orders/gate-refund/cancel",
        "app",
        None,
        json!({"reason": "customer_request"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["detail"], "nothing left to cancel", "{body}");
    let r = db.store.load(refund.refund_id).await.unwrap().0;
    assert_eq!(r.state, State::Pendiente, "the refund is untouched");
    assert_eq!(r.cancel_reason, None);
    web.stop().await;
}
