//! The transition log, held by the database whatever door writes: it is
//! append-only; every change of an attempt's state, and every mark of a
//! refund, has its row (CB021), on both backends. (Moved out of
//! `enqueue.rs`, which holds the app's side of a charge.)

#[macro_use]
mod common;

use cobro::domain::ChargeRequest;
use cobro::state::{Event, State};
use cobro::store::{Applied, Change};
use common::{Backend, TestDb, ask_refund, enqueued, raw_move, step};

on_both_dbs!(
    the_transition_log_is_append_only,
    every_change_of_state_has_its_log_row,
    every_mark_of_a_refund_has_its_log_row,
);

/// A charge of `amount` US cents for `order`, with a fresh key.
fn req(order: &str, amount: i64) -> ChargeRequest {
    ChargeRequest::parse(order, amount, "USD", None, None).unwrap()
}

async fn the_transition_log_is_append_only(db: &TestDb) {
    db.store.enqueue(&req("o-1", 1000)).await.unwrap();
    let statements: &[(&str, &str)] = &[
        (
            "UPDATE cobro.attempt_transitions SET cause = 'edited'",
            "UPDATE attempt_transitions SET cause = 'edited'",
        ),
        (
            "DELETE FROM cobro.attempt_transitions",
            "DELETE FROM attempt_transitions",
        ),
        (
            "TRUNCATE cobro.attempt_transitions",
            "DELETE FROM attempt_transitions WHERE 1",
        ),
    ];
    for (pg, lite) in statements {
        let err = db.exec(pg, lite, &[]).await.expect_err(pg);
        assert!(err.to_string().contains("append-only"), "{pg}: {err}");
    }
    assert_eq!(db.store.transition_rows().await.unwrap(), 1);
}

/// `err` is the database's refusal of a write without its log row (CB021).
fn refused_for_its_row(b: Backend, err: sqlx::Error) {
    assert!(err.to_string().contains("without its row in"), "{err}");
    if b == Backend::Postgres {
        let code = err.as_database_error().and_then(|e| e.code());
        assert_eq!(code.as_deref(), Some("CB021"), "{err}");
    }
}

/// Every change of an attempt's state has its row in the transition log,
/// whatever door moved it: a raw UPDATE without one, or with a row that is
/// not its own (another version), is refused (CB021) and writes nothing;
/// one that writes its row goes through. The store's own moves carry the
/// attempt's version, and a compare-and-set that lost writes no row.
async fn every_change_of_state_has_its_log_row(db: &TestDb) {
    let id = db
        .store
        .enqueue(&req("o-1", 1000))
        .await
        .unwrap()
        .attempt_id;
    let (enqueued, _) = db.store.load(id).await.unwrap();
    let claim = (
        "UPDATE cobro.payment_attempts SET state = 'EN_PROCESO', version = version + 1",
        "UPDATE payment_attempts SET state = 'EN_PROCESO', version = version + 1",
    );
    let refused_for_its_row = |err| refused_for_its_row(db.backend, err);
    refused_for_its_row(db.exec(claim.0, claim.1, &[]).await.unwrap_err());
    // A row of another version (the attempt's old one) is not its row.
    let stale_row = (
        "INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor, version)
         SELECT id, 'PENDIENTE', 'EN_PROCESO', 'raw_sql', 'test', version FROM cobro.payment_attempts",
        "INSERT INTO attempt_transitions (attempt_id, from_state, to_state, cause, actor, version, at)
         SELECT id, 'PENDIENTE', 'EN_PROCESO', 'raw_sql', 'test', version, 0 FROM payment_attempts",
    );
    let (stale_row, claim) = (db.sql(stale_row.0, stale_row.1), db.sql(claim.0, claim.1));
    refused_for_its_row(db.in_one_tx(&[stale_row, claim], &[]).await.unwrap_err());
    assert_eq!(db.store.load(id).await.unwrap().0.state, State::Pendiente);
    assert_eq!(db.store.transition_rows().await.unwrap(), 1);

    // With its row, the same move goes through.
    assert_eq!(
        raw_move(db, "order_id = 'o-1'", "EN_PROCESO")
            .await
            .unwrap(),
        1
    );
    assert_eq!(db.store.load(id).await.unwrap().0.state, State::EnProceso);
    if db.backend == Backend::Postgres {
        // PostgreSQL checks at commit: the row may follow the move.
        db.in_one_tx(
            &[
                "UPDATE cobro.payment_attempts SET state = 'DESCONOCIDO', version = version + 1",
                "INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor, version)
                 SELECT id, 'EN_PROCESO', 'DESCONOCIDO', 'raw_sql', 'test', version FROM cobro.payment_attempts",
            ],
            &[],
        )
        .await
        .unwrap();
    }

    // The store's own moves: a compare-and-set that lost writes no row...
    let rows = db.store.transition_rows().await.unwrap();
    let change = Change::new(Some(Event::Claim), "test", "worker:test");
    assert!(matches!(
        db.store.apply(&enqueued, &change).await.unwrap(),
        Applied::Lost
    ));
    assert_eq!(db.store.transition_rows().await.unwrap(), rows);
    // ...and one that moved logs the attempt's new version.
    let (now, _) = db.store.load(id).await.unwrap();
    let mut approved = Change::new(Some(Event::Approved), "test", "worker:test");
    approved.charge_id = Some("ch_logged");
    let Applied::Moved(moved) = db.store.apply(&now, &approved).await.unwrap() else {
        panic!("lost a race nobody runs");
    };
    assert_eq!(moved.state, State::Aprobado);
    let unlogged = db
        .scalar(
            "SELECT count(*) FROM cobro.attempt_transitions t JOIN cobro.payment_attempts a ON a.id = t.attempt_id
              WHERE t.from_state IS NOT NULL AND t.version IS NULL",
            "SELECT count(*) FROM attempt_transitions t JOIN payment_attempts a ON a.id = t.attempt_id
              WHERE t.from_state IS NOT NULL AND t.version IS NULL",
        )
        .await;
    assert_eq!(unlogged, 0);
    let last = db
        .scalar(
            "SELECT max(version) FROM cobro.attempt_transitions",
            "SELECT max(version) FROM attempt_transitions",
        )
        .await;
    assert_eq!(last, moved.version);
}

/// A refund's mark (failed after success, made after a decline) frees or
/// holds its amount as a move of state would, so it has its log row too:
/// a raw UPDATE that sets one without its row is refused (CB021) and
/// writes nothing; one with its row goes through.
async fn every_mark_of_a_refund_has_its_log_row(db: &TestDb) {
    let charge = enqueued(&db.store, &req("o-marks", 3000)).await;
    let charge = step(&db.store, &charge, Event::Claim, None).await;
    let charge = step(&db.store, &charge, Event::Approved, Some("ch_marks")).await;
    let refund = |minor| ask_refund(&db.store, charge.id, minor, "test");
    let made = db.store.load(refund(1000).await.refund_id).await.unwrap().0;
    let made = step(&db.store, &made, Event::Claim, None).await;
    let made = step(&db.store, &made, Event::Declined, Some("expired_card")).await;
    let failed = db.store.load(refund(500).await.refund_id).await.unwrap().0;
    let failed = step(&db.store, &failed, Event::Claim, None).await;
    let failed = step(&db.store, &failed, Event::Approved, Some("re_marks")).await;
    let rows = db.store.transition_rows().await.unwrap();
    let (made_id, failed_id) = (made.id.to_string(), failed.id.to_string());
    let unlogged = [
        (
            "UPDATE cobro.payment_attempts SET refund_made_at = now(), version = version + 1 WHERE id = $1::uuid",
            "UPDATE payment_attempts SET refund_made_at = 1, version = version + 1 WHERE id = ?1",
            &made_id,
        ),
        (
            "UPDATE cobro.payment_attempts SET refund_failed_at = now(), version = version + 1 WHERE id = $1::uuid",
            "UPDATE payment_attempts SET refund_failed_at = 1, version = version + 1 WHERE id = ?1",
            &failed_id,
        ),
    ];
    for (pg, lite, id) in unlogged {
        refused_for_its_row(db.backend, db.exec(pg, lite, &[id]).await.unwrap_err());
    }
    assert_eq!(db.store.transition_rows().await.unwrap(), rows);
    assert_eq!(
        db.store.load(made.id).await.unwrap().0.version,
        made.version
    );
    // With its row (the mark's cause, the new version), it goes through.
    let logged = [
        db.sql(
            "INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor, version)
             SELECT id, state, state, 'refund_made_after_decline', 'raw_sql', version + 1
               FROM cobro.payment_attempts WHERE id = $1::uuid",
            "INSERT INTO attempt_transitions (attempt_id, from_state, to_state, cause, actor, version, at)
             SELECT id, state, state, 'refund_made_after_decline', 'raw_sql', version + 1, 0
               FROM payment_attempts WHERE id = ?1",
        ),
        db.sql(unlogged[0].0, unlogged[0].1),
    ];
    db.in_one_tx(&logged, &[&made_id]).await.unwrap();
    assert_eq!(db.store.transition_rows().await.unwrap(), rows + 1);
}
