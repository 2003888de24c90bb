//! What the charge rule holds after an attempt exists, found by a review of
//! every door: a case that opens before the attempt is first sent holds
//! the send (the worker gives it to finance instead); a duplicate's refund
//! needs its case in the database, not only in Rust; a cancel is written
//! once; an attempt is never replaced; the rule's own tables change only by
//! migration; and on PostgreSQL the rules run only under READ COMMITTED,
//! the level at which they read what others committed.

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::{Event, State};
use cobro::store::CancelReason;

use super::common::{
    self, Backend, TestDb, causes, enqueued, ledger, open_case, postgres_db, raw_send_is_held,
    start_sim, step,
};

on_both_dbs!(
    a_case_that_opens_before_the_first_send_holds_the_send,
    a_duplicates_refund_needs_its_open_case_in_the_database,
    a_cancel_is_written_once,
    a_cancel_that_holds_the_order_is_recorded_over_one_that_did_not,
    the_rules_own_tables_and_rows_are_not_rewritten,
);

/// The review's scenario: retry #2 of an order was created (PENDIENTE),
/// then a late approval of #1 opened a case. The rule used to run only when
/// #2 was inserted, so #2 was still sent: the order charged twice.
async fn a_case_that_opens_before_the_first_send_holds_the_send(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let req = ChargeRequest::parse("gate-late-case", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    open_case(db, "unmatched_charge", "gate-late-case", "ch_late", "{}").await;

    // Every door that would send it meets the rule: a raw UPDATE (that
    // writes its log row)...
    raw_send_is_held(db, a.id).await;
    // ... and the worker, which gives it to finance instead of sending.
    let engine = common::engine(&db.store, &sim.url(), "worker-held");
    engine.process(a.id).await.unwrap();
    let (held, _) = db.store.load(a.id).await.unwrap();
    assert_eq!(held.state, State::EnRevision, "{held:?}");
    assert!(
        causes(&db.store, a.id)
            .await
            .contains(&"order_held".to_owned())
    );
    assert_eq!(
        ledger(&sim.url()).await.stats.charge_requests,
        0,
        "nothing was sent"
    );

    // A case that does not hold the order (the gateway lacks a charge we
    // hold approved) does not stop a send.
    let req = ChargeRequest::parse("gate-harmless-case", 3_000, "USD", None, None).unwrap();
    let b2 = enqueued(&db.store, &req).await;
    open_case(
        db,
        "missing_at_gateway",
        "gate-harmless-case",
        "ch_late",
        "{}",
    )
    .await;
    let sent = step(&db.store, &b2, Event::Claim, None).await;
    assert_eq!(sent.state, State::EnProceso);
    sim.shutdown().await;
}

/// A refund of a duplicate (`refund_of_gateway`) returns another charge's
/// money: the database takes it only when an open double_charge case of the
/// order lists that charge as approved, for at least the refund's amount.
async fn a_duplicates_refund_needs_its_open_case_in_the_database(db: &TestDb) {
    let req = ChargeRequest::parse("gate-dup", 1_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let anchor = step(&db.store, &a, Event::Approved, Some("ch_own")).await;
    let insert = |charge: &'static str, amount: &'static str| {
        let db = &db;
        let anchor = anchor.id.to_string();
        async move {
            db.exec(
                "INSERT INTO cobro.payment_attempts (id, order_id, amount_minor, currency, idempotency_key, state, kind, refund_of, refund_of_gateway)
                 VALUES (gen_random_uuid(), 'gate-dup', $2::bigint, 'USD', gen_random_uuid(), 'PENDIENTE', 'refund', $1::uuid, $3)",
                "INSERT INTO payment_attempts (id, order_id, amount_minor, currency, idempotency_key, state, kind, refund_of, refund_of_gateway, created_at, updated_at)
                 VALUES (lower(hex(randomblob(18))), 'gate-dup', CAST(?2 AS INTEGER), 'USD', lower(hex(randomblob(18))), 'PENDIENTE', 'refund', ?1, ?3, 0, 0)",
                &[&anchor, amount, charge],
            )
            .await
        }
    };
    // No case: another order's charge, any amount, is refused.
    let err = insert("ch_other", "99999999").await.unwrap_err();
    assert!(err.to_string().contains("double_charge case"), "{err}");
    let listed = r#"{"gateway": [
        {"id": "ch_own", "status": "approved", "order_id": "gate-dup", "amount_minor": 1000, "currency": "USD"},
        {"id": "ch_dup", "status": "approved", "order_id": "gate-dup", "amount_minor": 1000, "currency": "USD"},
        {"id": "ch_failed", "status": "declined", "order_id": "gate-dup", "amount_minor": 1000, "currency": "USD"}]}"#;
    open_case(
        db,
        "double_charge",
        "gate-dup",
        "ch_own,ch_dup,ch_failed",
        listed,
    )
    .await;
    for (charge, amount, why) in [
        ("ch_dup", "1001", "more than the duplicate"),
        ("ch_failed", "1000", "a charge the case lists as declined"),
        ("ch_other", "1000", "a charge the case does not list"),
    ] {
        let err = insert(charge, amount).await.unwrap_err();
        assert!(
            err.to_string().contains("double_charge case"),
            "{why}: {err}"
        );
    }
    insert("ch_dup", "1000").await.unwrap();
}

/// A cancel whose reason means "do not charge" holds the order; clearing
/// or rewording it by hand would lift the hold.
async fn a_cancel_is_written_once(db: &TestDb) {
    let req = ChargeRequest::parse("gate-cancel-once", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    db.store
        .cancel_order("gate-cancel-once", CancelReason::FraudSuspected, "ops")
        .await
        .unwrap();
    for set in ["NULL", "'customer_request'"] {
        let err = db
            .exec(
                if set == "NULL" {
                    "UPDATE cobro.payment_attempts SET cancel_reason = NULL WHERE id = $1::uuid"
                } else {
                    "UPDATE cobro.payment_attempts SET cancel_reason = 'customer_request' WHERE id = $1::uuid"
                },
                if set == "NULL" {
                    "UPDATE payment_attempts SET cancel_reason = NULL WHERE id = ?1"
                } else {
                    "UPDATE payment_attempts SET cancel_reason = 'customer_request' WHERE id = ?1"
                },
                &[&a.id.to_string()],
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("never undone"), "{set}: {err}");
    }
    let again = ChargeRequest::parse("gate-cancel-once", 3_000, "USD", None, None).unwrap();
    let e = db.store.enqueue(&again).await.unwrap_err();
    assert_eq!(e.hold(), Some(cobro::store::Hold::Cancelled), "{e}");
}

/// The review's case: a cancel for the customer, then "fraud suspected".
/// Nothing is left in flight, but the hold is recorded over the first
/// reason, so no door charges the order again; and the database takes that
/// change (a reason made one that holds), never the reverse.
async fn a_cancel_that_holds_the_order_is_recorded_over_one_that_did_not(db: &TestDb) {
    let req = ChargeRequest::parse("gate-upgrade", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    db.store
        .cancel_order("gate-upgrade", CancelReason::CustomerRequest, "app")
        .await
        .unwrap();
    let again = db
        .store
        .cancel_order("gate-upgrade", CancelReason::FraudSuspected, "finance:ana")
        .await
        .unwrap();
    assert_eq!(again.retries_stopped, vec![a.id], "{again:?}");
    let (held, _) = db.store.load(a.id).await.unwrap();
    assert_eq!(
        (held.state, held.cancel_reason.as_deref()),
        (State::Rechazado, Some("fraud_suspected"))
    );
    let new_key = ChargeRequest::parse("gate-upgrade", 3_000, "USD", None, None).unwrap();
    let e = db.store.enqueue(&new_key).await.unwrap_err();
    assert_eq!(e.hold(), Some(cobro::store::Hold::Cancelled), "{e}");
    // Already held: a third cancel finds nothing left to do.
    assert!(
        db.store
            .cancel_order("gate-upgrade", CancelReason::DuplicateOrder, "app")
            .await
            .is_err()
    );
    let back = db
        .exec(
            "UPDATE cobro.payment_attempts SET cancel_reason = 'other' WHERE id = $1::uuid",
            "UPDATE payment_attempts SET cancel_reason = 'other' WHERE id = ?1",
            &[&a.id.to_string()],
        )
        .await
        .unwrap_err();
    assert!(back.to_string().contains("never undone"), "{back}");
}

/// On SQLite, `INSERT OR REPLACE` deletes a row and inserts another, so no
/// UPDATE rule ran: a declined attempt could become approved. And the rule's
/// tables of harmless case kinds and holding cancel reasons change only by
/// migration, as PostgreSQL's functions do.
async fn the_rules_own_tables_and_rows_are_not_rewritten(db: &TestDb) {
    let req = ChargeRequest::parse("gate-replace", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let declined = step(&db.store, &a, Event::Declined, Some("card_declined")).await;
    if db.backend == Backend::Sqlite {
        let err = db
            .exec(
                "",
                "INSERT OR REPLACE INTO payment_attempts (id, order_id, amount_minor, currency, idempotency_key, state, created_at, updated_at)
                 SELECT id, order_id, amount_minor, currency, idempotency_key, 'APROBADO', created_at, updated_at
                   FROM payment_attempts WHERE id = ?1",
                &[&declined.id.to_string()],
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("never replaced"), "{err}");
        for sql in [
            "INSERT INTO harmless_case_kinds VALUES ('unmatched_charge')",
            "DELETE FROM order_holding_cancel_reasons",
            "UPDATE order_holding_cancel_reasons SET reason = 'x'",
        ] {
            let err = db.exec("", sql, &[]).await.unwrap_err();
            assert!(
                err.to_string().contains("only by migration"),
                "{sql}: {err}"
            );
        }
    } else {
        // PostgreSQL's upsert is an UPDATE: the settled state holds.
        let err = db
            .exec(
                "INSERT INTO cobro.payment_attempts SELECT * FROM cobro.payment_attempts WHERE id = $1::uuid
                 ON CONFLICT (id) DO UPDATE SET state = 'PENDIENTE'",
                "",
                &[&declined.id.to_string()],
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("stays settled"), "{err}");
    }
    assert_eq!(
        db.store.load(declined.id).await.unwrap().0.state,
        State::Rechazado
    );
}

/// The rules read what other transactions committed after their lock; a
/// REPEATABLE READ or SERIALIZABLE transaction reads its old snapshot, so
/// it could enqueue a charge for an order approved meanwhile, or refund
/// twice. Such a transaction is refused before it writes (CB013).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_rules_refuse_a_transaction_that_reads_an_old_snapshot() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let pool = db.store.pg_pool().unwrap().clone();
    let req = ChargeRequest::parse("gate-snapshot", 1_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let charge = step(&db.store, &a, Event::Approved, Some("ch_snap")).await;
    let calls: [(&str, &'static str); 2] = [
        (
            "a charge",
            "SELECT * FROM cobro.enqueue_charge('gate-snapshot-2', 1000, 'USD')",
        ),
        (
            "a refund",
            "SELECT * FROM cobro.request_refund($1, 1000, gen_random_uuid())",
        ),
    ];
    for level in [
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    ] {
        for (what, sql) in calls {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query(level).execute(&mut *tx).await.unwrap();
            let call = sqlx::query(sql);
            let call = if what == "a refund" {
                call.bind(charge.id)
            } else {
                call
            };
            let err = call.execute(&mut *tx).await.unwrap_err();
            let db_err = err.as_database_error().expect("a database error");
            assert_eq!(
                db_err.code().as_deref(),
                Some("CB013"),
                "{level}, {what}: {err}"
            );
            assert!(db_err.message().contains("READ COMMITTED"), "{err}");
            tx.rollback().await.unwrap();
        }
    }
    // The same calls under READ COMMITTED (the default) go through.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT * FROM cobro.enqueue_charge('gate-snapshot-2', 1000, 'USD')")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // cobro's own connections are READ COMMITTED even when the database's
    // default is not.
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{name}\" SET default_transaction_isolation = 'repeatable read'"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let store = cobro::store::Store::connect(&db.url, 2).await.unwrap();
    let req = ChargeRequest::parse("gate-snapshot-3", 1_000, "USD", None, None).unwrap();
    store.enqueue(&req).await.unwrap();
    db.drop_db().await;
}
