//! Refunds, protected like charges: their own key, states, log rows and
//! queue; the database refuses a refund of anything but an APROBADO charge
//! and any refund past the captured amount, even under concurrency; a lost
//! response is looked up by key, never re-sent blindly. On both backends.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::{Amount, ChargeRequest, IdempotencyKey};
use cobro::sim::Faults;
use cobro::state::{Event, State};
use cobro::store::{Attempt, RefundError, Store};
use common::*;
use serde_json::{Value, json};
use uuid::Uuid;

on_both_dbs!(
    a_refund_of_anything_but_an_approved_charge_is_refused_clearly,
    the_same_refund_key_twice_is_one_refund,
    twenty_concurrent_partial_refunds_never_exceed_the_capture,
    the_database_refuses_an_over_refund_written_by_hand,
    a_lost_refund_response_is_looked_up_and_refunded_once,
    a_lost_refund_request_is_resent_with_the_same_key,
    refunds_over_http_with_an_idempotency_key,
);

async fn pending_charge(store: &Store, order: &str, amount: i64) -> Attempt {
    let req = ChargeRequest::parse(order, amount, "EUR", None, Some("pm_test")).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    store.load(id).await.unwrap().0
}

/// A charge approved without a gateway (for the database-only tests).
async fn approved_charge(store: &Store, order: &str, amount: i64) -> Attempt {
    let a = pending_charge(store, order, amount).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Approved, None).await
}

/// A charge sent by the rig's worker and approved at the simulator.
async fn approved_by_worker(store: &Store, order: &str, amount: i64) -> Attempt {
    let a = pending_charge(store, order, amount).await;
    settled(store, a.id, State::Aprobado, Duration::from_secs(20)).await
}

fn amount(minor: i64) -> Amount {
    Amount::parse(minor).unwrap()
}

async fn refund(store: &Store, charge: Uuid, minor: i64) -> Result<Uuid, RefundError> {
    store
        .request_refund(charge, amount(minor), IdempotencyKey::generate(), "test")
        .await
        .map(|r| r.refund_id)
}

async fn a_refund_of_anything_but_an_approved_charge_is_refused_clearly(db: &TestDb) {
    let pending = pending_charge(&db.store, "r-pending", 1_000).await;
    let declined = {
        let a = pending_charge(&db.store, "r-declined", 1_000).await;
        let a = step(&db.store, &a, Event::Claim, None).await;
        step(&db.store, &a, Event::Declined, None).await
    };
    let in_doubt = {
        let a = pending_charge(&db.store, "r-doubt", 1_000).await;
        let a = step(&db.store, &a, Event::Claim, None).await;
        step(&db.store, &a, Event::Unknown, None).await
    };
    let before = db.attempts().await;
    for (charge, state) in [
        (&pending, "PENDIENTE"),
        (&declined, "RECHAZADO"),
        (&in_doubt, "DESCONOCIDO"),
    ] {
        let err = refund(&db.store, charge.id, 100).await.unwrap_err();
        let RefundError::NotRefundable(msg) = &err else {
            panic!("{state}: expected NotRefundable, got {err:?}");
        };
        assert!(msg.contains(state) && msg.contains("APROBADO"), "{msg}");
    }
    let missing = Uuid::new_v4();
    let err = refund(&db.store, missing, 100).await.unwrap_err();
    assert!(
        matches!(&err, RefundError::NotFound(m) if m.contains(&missing.to_string())),
        "{err:?}"
    );
    // A refund is not refundable either.
    let charge = approved_charge(&db.store, "r-ok", 1_000).await;
    let first = refund(&db.store, charge.id, 100).await.unwrap();
    let err = refund(&db.store, first, 50).await.unwrap_err();
    assert!(matches!(err, RefundError::NotRefundable(_)), "{err:?}");
    // Bad amounts never reach the database; the error names the field.
    assert_eq!(Amount::parse(0).unwrap_err().field, "amount_minor");
    assert_eq!(Amount::parse(-5).unwrap_err().field, "amount_minor");
    assert_eq!(
        db.attempts().await,
        before + 2,
        "only the approved charge and its one refund were written"
    );
}

async fn the_same_refund_key_twice_is_one_refund(db: &TestDb) {
    let charge = approved_charge(&db.store, "r-key", 1_000).await;
    let key = IdempotencyKey::generate();
    let first = db
        .store
        .request_refund(charge.id, amount(300), key, "app")
        .await
        .unwrap();
    let again = db
        .store
        .request_refund(charge.id, amount(300), key, "app")
        .await
        .unwrap();
    assert!(first.created && !again.created);
    assert_eq!(first.refund_id, again.refund_id);
    assert_eq!(first.idempotency_key, key.uuid());
    assert_ne!(
        key.uuid(),
        charge.idempotency_key,
        "a refund has its own key"
    );

    // The same key for another amount, or a charge's key, is refused.
    let err = db
        .store
        .request_refund(charge.id, amount(301), key, "app")
        .await
        .unwrap_err();
    assert!(matches!(err, RefundError::KeyReused(_)), "{err:?}");
    let charge_key = IdempotencyKey::from_uuid(charge.idempotency_key);
    let err = db
        .store
        .request_refund(charge.id, amount(300), charge_key, "app")
        .await
        .unwrap_err();
    assert!(matches!(err, RefundError::KeyReused(_)), "{err:?}");

    let refunds = db.store.refunds_of(charge.id).await.unwrap();
    assert_eq!(refunds.len(), 1);
    let r = &refunds[0];
    assert_eq!(
        (r.kind.as_str(), r.refund_of, r.state),
        ("refund", Some(charge.id), State::Pendiente)
    );
    assert_eq!((r.order_id.as_str(), r.currency.as_str()), ("r-key", "EUR"));
    assert_eq!(r.payment_method, None, "a refund carries no payment method");
    let log = db.store.transitions(r.id).await.unwrap();
    assert_eq!(log.len(), 1, "its own log, one row so far");
    assert_eq!(
        (log[0].cause.as_str(), log[0].actor.as_str()),
        ("refund_requested", "app")
    );
    // Its wake-up went to its own queue.
    let queued = db
        .scalar(
            "SELECT count(*) FROM apalis.jobs WHERE job_type = 'cobro.refund'",
            "SELECT count(*) FROM Jobs WHERE job_type = 'cobro.refund'",
        )
        .await;
    assert_eq!(queued, 1);
}

async fn twenty_concurrent_partial_refunds_never_exceed_the_capture(db: &TestDb) {
    let charge = approved_charge(&db.store, "r-race", 1_000).await;
    let asks = (0..20).map(|_| refund(&db.store, charge.id, 70));
    let results = futures::future::join_all(asks).await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(matches!(r, RefundError::ExceedsCapture(_)), "{r:?}");
    }
    assert_eq!(ok, 14, "14 × 70 = 980 fits in 1000; a 15th would not");
    let refunds = db.store.refunds_of(charge.id).await.unwrap();
    let total: i64 = refunds.iter().map(|r| r.amount_minor).sum();
    assert_eq!(total, 980);

    // A refund the gateway declined frees its amount; the rest still binds.
    let failed = step(&db.store, &refunds[0], Event::Claim, None).await;
    step(&db.store, &failed, Event::Declined, None).await;
    refund(&db.store, charge.id, 90).await.unwrap(); // 910 + 90 = 1000
    let err = refund(&db.store, charge.id, 1).await.unwrap_err();
    assert!(
        matches!(&err, RefundError::ExceedsCapture(m) if m.contains("exceeds")),
        "{err:?}"
    );
}

async fn the_database_refuses_an_over_refund_written_by_hand(db: &TestDb) {
    let charge = approved_charge(&db.store, "r-hand", 500).await;
    let pending = pending_charge(&db.store, "r-hand-2", 500).await;
    let insert = |refund_of: &Attempt, amount: &'static str| {
        let (id, key, of) = (
            Uuid::new_v4().to_string(),
            Uuid::new_v4().to_string(),
            refund_of.id.to_string(),
        );
        let order = refund_of.order_id.clone();
        let db = &db;
        async move {
            db.exec(
                "INSERT INTO cobro.payment_attempts
                    (id, order_id, amount_minor, currency, idempotency_key, state, kind, refund_of)
                 VALUES ($1::uuid, $2, $3::bigint, 'EUR', $4::uuid, 'PENDIENTE', 'refund', $5::uuid)",
                "INSERT INTO payment_attempts
                    (id, order_id, amount_minor, currency, idempotency_key, state, kind, refund_of,
                     created_at, updated_at)
                 VALUES (?1, ?2, CAST(?3 AS INTEGER), 'EUR', ?4, 'PENDIENTE', 'refund', ?5, 0, 0)",
                &[&id, &order, amount, &key, &of],
            )
            .await
        }
    };
    insert(&charge, "400").await.expect("within the capture");
    // PostgreSQL says it in the SQLSTATE, SQLite at the head of the message.
    let code = |e: sqlx::Error| {
        let db = e.as_database_error().expect("refused by the database");
        format!("{} {}", db.code().unwrap_or_default(), db.message())
    };
    let over = code(insert(&charge, "101").await.unwrap_err());
    assert!(over.contains("CB008"), "{over}");
    let not_approved = code(insert(&pending, "1").await.unwrap_err());
    assert!(not_approved.contains("CB007"), "{not_approved}");
    // What an attempt sends never changes after it is written.
    let changed = db
        .exec(
            "UPDATE cobro.payment_attempts SET amount_minor = 5000 WHERE id = $1::uuid",
            "UPDATE payment_attempts SET amount_minor = 5000 WHERE id = ?1",
            &[&charge.id.to_string()],
        )
        .await;
    assert!(changed.is_err(), "the captured amount is fixed");
}

async fn a_lost_refund_response_is_looked_up_and_refunded_once(db: &TestDb) {
    let (sim, worker) = sim_and_worker(db, Faults::default()).await;
    let charge = approved_by_worker(&db.store, "r-lost", 2_500).await;

    // The gateway refunds, then the response is lost.
    set_faults(&sim.url(), &answers_lost()).await;
    let key = IdempotencyKey::generate();
    let asked = db
        .store
        .request_refund(charge.id, amount(1_000), key, "app")
        .await
        .unwrap();
    let r = settled(
        &db.store,
        asked.refund_id,
        State::Aprobado,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        path(&db.store, r.id).await,
        ["PENDIENTE", "EN_PROCESO", "DESCONOCIDO", "APROBADO"]
    );
    let log = db.store.transitions(r.id).await.unwrap();
    assert_eq!(log[2].error_kind.as_deref(), Some("connection_closed"));
    assert_eq!(log[3].cause, "lookup_approved");
    assert_eq!(r.send_count, 1, "resolved by lookup, never re-sent");

    let l = ledger(&sim.url()).await;
    assert_eq!(l.refunds.len(), 1, "exactly one refund at the gateway");
    let at_gateway = &l.refunds[0];
    assert_eq!(at_gateway.idempotency_key, key.to_string());
    assert_eq!(at_gateway.amount_minor, 1_000);
    assert_eq!(
        Some(&at_gateway.charge_id),
        charge.gateway_charge_id.as_ref()
    );
    assert_eq!(
        r.gateway_charge_id.as_deref(),
        Some(at_gateway.refund_id.as_str())
    );
    assert_eq!(l.entries.len(), 1, "the charge itself was made once");
    assert!(
        db.store.notices(false).await.unwrap().is_empty(),
        "refunds write no customer notices"
    );
    finish(worker, sim).await;
}

async fn a_lost_refund_request_is_resent_with_the_same_key(db: &TestDb) {
    let (sim, worker) = sim_and_worker(db, Faults::default()).await;
    let charge = approved_by_worker(&db.store, "r-resend", 2_500).await;
    set_faults(&sim.url(), &requests_lost()).await;
    let asked = ask_refund(&db.store, charge.id, 2_500, "app").await;
    settled(
        &db.store,
        asked.refund_id,
        State::Desconocido,
        Duration::from_secs(20),
    )
    .await;
    set_faults(&sim.url(), &Faults::default()).await; // the network heals
    let r = settled(
        &db.store,
        asked.refund_id,
        State::Aprobado,
        Duration::from_secs(20),
    )
    .await;
    let log = db.store.transitions(r.id).await.unwrap();
    let causes: Vec<&str> = log.iter().map(|t| t.cause.as_str()).collect();
    assert_eq!(
        causes,
        [
            "refund_requested",
            "claim",
            "gateway_unknown",
            "lookup_not_found",
            "gateway_approved"
        ]
    );
    assert_eq!(r.send_count, 2);
    let l = ledger(&sim.url()).await;
    assert_eq!(l.refunds.len(), 1, "refunded once");
    assert_eq!(
        l.refunds[0].idempotency_key,
        asked.idempotency_key.to_string()
    );
    finish(worker, sim).await;
}

async fn refunds_over_http_with_an_idempotency_key(db: &TestDb) {
    let web = web_on(&db.store).await;
    let charge = approved_charge(&db.store, "r-http", 1_000).await;
    let pending = pending_charge(&db.store, "r-http-2", 1_000).await;
    let url = format!("{}/refunds", web.url);
    let post = |key: Option<String>, body: Value| {
        let url = url.clone();
        async move { post_keyed(&url, As::Bearer("app"), key.as_deref(), &body.to_string()).await }
    };
    let key = Uuid::new_v4().to_string();
    let body = json!({ "attempt_id": charge.id, "amount_minor": 600 });

    let first = post(Some(key.clone()), body.clone()).await;
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let replay = post(Some(key.clone()), body.clone()).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        replay.json::<Value>().await.unwrap(),
        first,
        "same body back"
    );
    assert_eq!(db.store.refunds_of(charge.id).await.unwrap().len(), 1);

    let shown: Value = get_json(
        &format!(
            "{}/refunds/{}",
            web.url,
            first["refund_id"].as_str().unwrap()
        ),
        As::Bearer("app"),
    )
    .await;
    assert_eq!(shown["attempt"]["kind"], "refund");
    assert_eq!(
        shown["transitions"][0]["actor"], "api:app",
        "the key's name is the actor"
    );
    assert_eq!(shown["attempt"]["refund_of"], json!(charge.id));

    let fresh_key = || Some(Uuid::new_v4().to_string());
    let cases = [
        (
            fresh_key(),
            json!({ "attempt_id": charge.id, "amount_minor": 401 }),
            409,
            "amount_minor",
        ),
        (
            fresh_key(),
            json!({ "attempt_id": pending.id, "amount_minor": 1 }),
            409,
            "attempt_id",
        ),
        (
            fresh_key(),
            json!({ "attempt_id": charge.id, "amount_minor": 1.5 }),
            422,
            "amount_minor",
        ),
        (
            fresh_key(),
            json!({ "attempt_id": charge.id, "amount_minor": 0 }),
            422,
            "amount_minor",
        ),
        (fresh_key(), json!({ "amount_minor": 1 }), 422, "attempt_id"),
        (
            fresh_key(),
            json!({ "attempt_id": Uuid::new_v4(), "amount_minor": 1 }),
            404,
            "attempt_id",
        ),
        (
            None,
            json!({ "attempt_id": charge.id, "amount_minor": 1 }),
            400,
            "Idempotency-Key",
        ),
        (
            Some(key.clone()),
            json!({ "attempt_id": charge.id, "amount_minor": 7 }),
            409,
            "Idempotency-Key",
        ),
    ];
    for (key, body, status, field) in cases {
        let resp = post(key, body.clone()).await;
        assert_eq!(resp.status(), status, "{body}");
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["field"], field, "{body}: {err}");
    }
    assert_eq!(
        db.store.refunds_of(charge.id).await.unwrap().len(),
        1,
        "no refused request wrote anything"
    );
    web.stop().await;
}
