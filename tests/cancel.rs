//! Stop and cancel (`POST /orders/{order_id}/cancel`, `Store::cancel_order`,
//! `cobro cancel`): a customer who paid by bank transfer is not charged
//! again; an attempt that may have reached the gateway (being sent, in
//! doubt, in review, or waiting to be sent again after an unknown outcome)
//! is never cancelled, only settled. On both backends, with a worker and the simulator running.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::{Event, State};
use cobro::store::{CancelError, CancelReason};
use common::*;

on_both_dbs!(
    paying_by_transfer_cancels_the_scheduled_retry_and_nothing_more_is_charged,
    an_attempt_that_may_have_charged_is_never_cancelled,
    an_unsent_attempt_is_cancelled_and_never_sent,
);

/// `POST /orders/{order}/cancel` with `reason`, as the app.
async fn post_cancel(web: &Web, order: &str, reason: &str) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/orders/{order}/cancel", web.url))
        .bearer_auth(secret("app"))
        .json(&serde_json::json!({ "reason": reason }))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

async fn paying_by_transfer_cancels_the_scheduled_retry_and_nothing_more_is_charged(db: &TestDb) {
    let (sim, worker) = sim_and_worker(db, declining("insufficient_funds")).await;
    let web = web_on(&db.store).await;
    let req = ChargeRequest::parse("transfer-1", 7_500, "USD", None, None).unwrap();
    let first = db.store.enqueue(&req).await.unwrap().attempt_id;
    let declined = settled(&db.store, first, State::Rechazado, Duration::from_secs(10)).await;
    assert!(
        declined.next_action_at.is_some(),
        "a business retry is scheduled"
    );

    // The customer paid by bank transfer; the app stops the order.
    let (status, body) = post_cancel(&web, "transfer-1", "paid_by_other_means").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["retries_stopped"], serde_json::json!([first]));
    let (a, _) = db.store.load(first).await.unwrap();
    assert_eq!((a.state, a.next_action_at), (State::Rechazado, None));
    let last = db.store.transitions(first).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.cause.as_str(), last.actor.as_str()),
        ("cancelled_paid_by_other_means", "api:app"),
        "the log says who and why"
    );

    // The day passes, and the gateway would now approve; even a stray
    // wake-up finds nothing to do.
    set_faults(&sim.url(), &Faults::default()).await;
    db.store.wake(first).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(db.attempts().await, 1, "no new attempt for the order");
    let charges = ledger(&sim.url())
        .await
        .entries
        .iter()
        .filter(|e| e.order_id == "transfer-1")
        .count();
    assert_eq!(charges, 1, "the gateway saw only the declined charge");

    // Cancelling again finds nothing left and says so without an error.
    let (status, again) = post_cancel(&web, "transfer-1", "paid_by_other_means").await;
    assert_eq!(
        (status, again["retries_stopped"].clone()),
        (200, serde_json::json!([]))
    );
    let (status, bad) = post_cancel(&web, "transfer-1", "because").await;
    assert_refused(status, &bad, 422, "reason");
    web.stop().await;
    worker.stop().await;
}

async fn an_attempt_that_may_have_charged_is_never_cancelled(db: &TestDb) {
    let web = web_on(&db.store).await;
    let req = ChargeRequest::parse("doubt-1", 1_000, "EUR", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let id = a.id;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Unknown, None).await;
    assert_eq!(a.state, State::Desconocido);
    refused_by_the_database(db.backend, raw_cancel(db, "doubt-1").await);
    let (status, body) = post_cancel(&web, "doubt-1", "customer_request").await;
    assert_eq!(status, 409, "{body}");
    let msg = body["error"]
        .as_str()
        .or(body["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        msg.contains("DESCONOCIDO") && msg.contains("only be settled"),
        "{body}"
    );
    let (after, _) = db.store.load(id).await.unwrap();
    assert_eq!(
        (after.state, after.version),
        (a.state, a.version),
        "nothing written"
    );
    // The library says the same.
    let err = db
        .store
        .cancel_order("doubt-1", CancelReason::CustomerRequest, "test")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            CancelError::InFlight {
                state: State::Desconocido,
                ..
            }
        ),
        "{err}"
    );

    // Looked up (not found), sent again with the same key, and that resend
    // put off (a 503 with Retry-After): PENDIENTE again, while its first
    // send may still be on its way. A cancel would settle it as declined
    // on a guess, and a new key could then charge the order again.
    let a = step(&db.store, &a, Event::Resend, None).await;
    step(&db.store, &a, Event::Deferred, None).await;
    let looked = db
        .exec(
            "UPDATE cobro.payment_attempts SET check_count = 1 WHERE id = $1::uuid",
            "UPDATE payment_attempts SET check_count = 1 WHERE id = ?1",
            &[&id.to_string()],
        )
        .await
        .unwrap();
    assert_eq!(looked, 1);
    let a = db.store.load(id).await.unwrap().0;
    let (status, body) = post_cancel(&web, "doubt-1", "paid_by_other_means").await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.to_string()
            .contains("PENDIENTE to be sent again, with the same key, after an unknown outcome"),
        "{body}"
    );
    let (after, _) = db.store.load(id).await.unwrap();
    assert_eq!((after.state, after.version), (State::Pendiente, a.version));
    // Nor does any other door: the database refuses the cancel itself.
    refused_by_the_database(db.backend, raw_cancel(db, "doubt-1").await);
    let (after, _) = db.store.load(id).await.unwrap();
    assert_eq!((after.state, after.cancel_reason), (State::Pendiente, None));
    // An attempt never sent is cancelled by the same raw SQL.
    let unsent = ChargeRequest::parse("unsent-2", 1_000, "EUR", None, None).unwrap();
    let unsent = db.store.enqueue(&unsent).await.unwrap().attempt_id;
    assert_eq!(raw_cancel(db, "unsent-2").await.unwrap(), vec![1, 1]);
    let (after, _) = db.store.load(unsent).await.unwrap();
    assert_eq!(after.state, State::Rechazado);
    web.stop().await;
}

/// Cancels every attempt of `order` by raw SQL, as a careful door would
/// (its log row, then the `UPDATE`, in one transaction): the rows written,
/// or the database's refusal.
async fn raw_cancel(db: &TestDb, order: &str) -> Result<Vec<u64>, sqlx::Error> {
    let log = format!(
        "INSERT INTO {t}attempt_transitions (attempt_id, from_state, to_state, cause, actor, version{at})
         SELECT id, state, 'RECHAZADO', 'cancelled', 'raw_sql', version + 1{now}
           FROM {t}payment_attempts WHERE order_id = {order}",
        t = db.sql("cobro.", ""),
        at = db.sql("", ", at"),
        now = db.sql("", ", 0"),
        order = db.sql("$1", "?1"),
    );
    let update = format!(
        "UPDATE {t}payment_attempts
            SET state = 'RECHAZADO', cancel_reason = 'customer_request', version = version + 1
          WHERE order_id = {order}",
        t = db.sql("cobro.", ""),
        order = db.sql("$1", "?1"),
    );
    db.in_one_tx(&[&log, &update], &[order]).await
}

/// `written` is the database's refusal of a cancel of an attempt that may
/// have reached the gateway (CB020).
fn refused_by_the_database(b: Backend, written: Result<Vec<u64>, sqlx::Error>) {
    let err = written.expect_err("a cancel of an attempt that may have reached the gateway");
    assert!(
        err.to_string().contains("may have reached the gateway"),
        "{err}"
    );
    if b == Backend::Postgres {
        let code = err.as_database_error().and_then(|e| e.code());
        assert_eq!(code.as_deref(), Some("CB020"), "{err}");
    }
}

async fn an_unsent_attempt_is_cancelled_and_never_sent(db: &TestDb) {
    let req = ChargeRequest::parse("unsent-1", 2_000, "EUR", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let done = db
        .store
        .cancel_order("unsent-1", CancelReason::FraudSuspected, "finance:ana")
        .await
        .unwrap();
    assert_eq!(done.attempts_cancelled, vec![id]);
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Rechazado);
    assert_eq!(a.cancel_reason.as_deref(), Some("fraud_suspected"));
    assert_eq!(a.send_count, 0);
    assert!(
        db.store.notices(false).await.unwrap().is_empty(),
        "the canceller tells the customer, not cobro"
    );
    let summary = cobro::finance::summarize(&db.store, Duration::ZERO, chrono::Utc::now())
        .await
        .unwrap();
    assert!(
        summary
            .totals
            .iter()
            .any(|l| l.state == "RECHAZADO (cancelled)" && l.count == 1),
        "the summary shows it cancelled: {:?}",
        summary.totals
    );
    // A worker and the gateway come up: nothing is sent.
    let sim = start_sim(true, Faults::default()).await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    db.store.wake(id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        ledger(&sim.url()).await.entries.is_empty(),
        "nothing reached the gateway"
    );
    assert!(matches!(
        db.store
            .cancel_order("unsent-1", CancelReason::FraudSuspected, "x")
            .await,
        Err(CancelError::NothingToCancel(_))
    ));
    assert!(matches!(
        db.store
            .cancel_order("no-such-order", CancelReason::Other, "x")
            .await,
        Err(CancelError::NotFound(_))
    ));
    worker.stop().await;
}
