//! Enqueue: the app's side. The attempt, its first log row and its wake-up
//! job commit with the caller's transaction or not at all; keys are unique;
//! the database refuses what the code might forget.

mod common;

use cobro::domain::{CURRENCIES, ChargeRequest};
use cobro::store::{EnqueueError, enqueue_charge};
use common::TestDb;

async fn attempts(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) FROM cobro.payment_attempts")
        .await
}

async fn jobs(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) FROM apalis.jobs WHERE job_type = 'cobro.charge'")
        .await
}

fn req(order: &str, amount: i64, key: &str) -> ChargeRequest {
    ChargeRequest::parse(order, amount, "USD", Some(key), None).unwrap()
}

const KEY: &str = "0f8b7c1e-4a52-4d0e-9a8e-3c5b2f1d7e60";

#[tokio::test]
async fn a_rolled_back_transaction_leaves_neither_attempt_nor_job() {
    let db = TestDb::new().await;

    // Rust library, inside the caller's transaction.
    let mut tx = db.store.pool().begin().await.unwrap();
    let out = enqueue_charge(&mut tx, &req("o-1", 1000, KEY))
        .await
        .unwrap();
    assert!(out.created);
    tx.rollback().await.unwrap();
    assert_eq!((attempts(&db).await, jobs(&db).await), (0, 0));

    // SQL function, as another language would call it.
    let mut tx = db.store.pool().begin().await.unwrap();
    sqlx::query("SELECT * FROM cobro.enqueue_charge('o-2', 500, 'EUR')")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!((attempts(&db).await, jobs(&db).await), (0, 0));

    // And committed, both write everything: attempt, first log row, one job.
    let mut tx = db.store.pool().begin().await.unwrap();
    enqueue_charge(&mut tx, &req("o-1", 1000, KEY))
        .await
        .unwrap();
    sqlx::query("SELECT * FROM cobro.enqueue_charge('o-2', 500, 'EUR')")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!((attempts(&db).await, jobs(&db).await), (2, 2));
    assert_eq!(
        db.scalar("SELECT count(*) FROM cobro.attempt_transitions WHERE from_state IS NULL AND to_state = 'PENDIENTE'")
            .await,
        2
    );
    db.drop_db().await;
}

#[tokio::test]
async fn the_same_key_twice_is_one_attempt_and_a_changed_charge_is_refused() {
    let db = TestDb::new().await;
    let first = db.store.enqueue(&req("o-1", 1000, KEY)).await.unwrap();
    let again = db.store.enqueue(&req("o-1", 1000, KEY)).await.unwrap();
    assert!(first.created && !again.created);
    assert_eq!(first.attempt_id, again.attempt_id);
    assert_eq!(attempts(&db).await, 1);
    assert_eq!(
        jobs(&db).await,
        1,
        "a replayed enqueue pushes no second wake-up"
    );

    for changed in [req("o-1", 1001, KEY), req("o-9", 1000, KEY)] {
        let err = db.store.enqueue(&changed).await.unwrap_err();
        assert!(matches!(err, EnqueueError::KeyReused(_)), "{err:?}");
        assert!(
            err.to_string().contains(KEY),
            "the error names the key: {err}"
        );
    }
    let eur = ChargeRequest::parse("o-1", 1000, "EUR", Some(KEY), None).unwrap();
    assert!(matches!(
        db.store.enqueue(&eur).await.unwrap_err(),
        EnqueueError::KeyReused(_)
    ));
    assert_eq!(attempts(&db).await, 1);
    db.drop_db().await;
}

#[tokio::test]
async fn a_second_live_attempt_for_an_order_is_refused() {
    let db = TestDb::new().await;
    db.store.enqueue(&req("o-1", 1000, KEY)).await.unwrap();
    let other_key = "5b0c3a2e-8d1f-4c6b-9e7a-1f2d3c4b5a69";
    let err = db
        .store
        .enqueue(&req("o-1", 1000, other_key))
        .await
        .unwrap_err();
    assert!(matches!(err, EnqueueError::LiveAttempt(_)), "{err:?}");
    assert!(err.to_string().contains("o-1"));
    assert_eq!(attempts(&db).await, 1);

    // Once approved, a new charge for the order is refused too.
    sqlx::query("UPDATE cobro.payment_attempts SET state = 'APROBADO', gateway_charge_id = 'ch_1'")
        .execute(db.store.pool())
        .await
        .unwrap();
    let err = db
        .store
        .enqueue(&req("o-1", 1000, other_key))
        .await
        .unwrap_err();
    assert!(matches!(err, EnqueueError::AlreadyApproved(_)), "{err:?}");
    db.drop_db().await;
}

#[tokio::test]
async fn bad_input_names_the_field_and_writes_nothing_even_through_sql() {
    let db = TestDb::new().await;
    let cases: &[(&str, &str)] = &[
        (
            "SELECT * FROM cobro.enqueue_charge('o-1', 0, 'USD')",
            "amount_minor",
        ),
        (
            "SELECT * FROM cobro.enqueue_charge('o-1', -100, 'USD')",
            "amount_minor",
        ),
        (
            "SELECT * FROM cobro.enqueue_charge('o-1', 100, 'XXX')",
            "currency",
        ),
        (
            "SELECT * FROM cobro.enqueue_charge('o-1', 100, 'usd')",
            "currency",
        ),
        (
            "SELECT * FROM cobro.enqueue_charge('', 100, 'USD')",
            "order_id",
        ),
        (
            "SELECT * FROM cobro.enqueue_charge(' o-1', 100, 'USD')",
            "order_id",
        ),
        (
            "SELECT * FROM cobro.enqueue_charge('o-1', 100, 'USD', '00000000-0000-0000-0000-000000000000')",
            "idempotency_key",
        ),
        (
            "SELECT * FROM cobro.enqueue_charge('o-1', 100, 'USD', NULL, '4242424242424242')",
            "payment_method",
        ),
    ];
    for (sql, field) in cases {
        let err = sqlx::query(*sql)
            .execute(db.store.pool())
            .await
            .expect_err(sql);
        let msg = err
            .as_database_error()
            .expect("database error")
            .message()
            .to_owned();
        assert!(
            msg.starts_with(&format!("invalid {field}:")),
            "{sql} -> {msg}"
        );
    }
    // A malformed key never even reaches SQL: the uuid type refuses it.
    assert!(
        sqlx::query("SELECT * FROM cobro.enqueue_charge('o-1', 100, 'USD', 'not-a-uuid')")
            .execute(db.store.pool())
            .await
            .is_err()
    );
    assert_eq!((attempts(&db).await, jobs(&db).await), (0, 0));
    db.drop_db().await;
}

#[tokio::test]
async fn the_database_enforces_the_invariants_without_the_code() {
    let db = TestDb::new().await;
    let insert = "INSERT INTO cobro.payment_attempts
        (id, order_id, amount_minor, currency, idempotency_key, state, gateway_charge_id)
        VALUES (gen_random_uuid(), $1, 100, 'USD', gen_random_uuid(), $2, 'ch_x')";
    let pool = db.store.pool();
    sqlx::query(insert)
        .bind("o-1")
        .bind("APROBADO")
        .execute(pool)
        .await
        .unwrap();
    let err = sqlx::query(insert)
        .bind("o-1")
        .bind("APROBADO")
        .execute(pool)
        .await
        .unwrap_err();
    assert_eq!(
        err.as_database_error().unwrap().constraint(),
        Some("one_approved_per_order")
    );
    sqlx::query(insert)
        .bind("o-2")
        .bind("DESCONOCIDO")
        .execute(pool)
        .await
        .unwrap();
    let err = sqlx::query(insert)
        .bind("o-2")
        .bind("EN_REVISION")
        .execute(pool)
        .await
        .unwrap_err();
    assert_eq!(
        err.as_database_error().unwrap().constraint(),
        Some("one_live_attempt_per_order")
    );
    let err = sqlx::query(insert)
        .bind("o-3")
        .bind("pending")
        .execute(pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("check constraint"), "{err}");
    let err = sqlx::query(
        "INSERT INTO cobro.payment_attempts (id, order_id, amount_minor, currency, idempotency_key, state)
         VALUES (gen_random_uuid(), 'o-4', 0, 'USD', gen_random_uuid(), 'PENDIENTE')",
    )
    .execute(pool)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("check constraint"), "{err}");
    db.drop_db().await;
}

#[tokio::test]
async fn the_transition_log_is_append_only() {
    let db = TestDb::new().await;
    db.store.enqueue(&req("o-1", 1000, KEY)).await.unwrap();
    for sql in [
        "UPDATE cobro.attempt_transitions SET cause = 'edited'",
        "DELETE FROM cobro.attempt_transitions",
        "TRUNCATE cobro.attempt_transitions",
    ] {
        let err = sqlx::query(sql)
            .execute(db.store.pool())
            .await
            .expect_err(sql);
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
    assert_eq!(
        db.scalar("SELECT count(*) FROM cobro.attempt_transitions")
            .await,
        1
    );
    db.drop_db().await;
}

#[tokio::test]
async fn the_database_knows_the_same_currencies_as_the_code() {
    let db = TestDb::new().await;
    let rows: Vec<(String, i16)> =
        sqlx::query_as("SELECT code, minor_unit FROM cobro.currencies ORDER BY code")
            .fetch_all(db.store.pool())
            .await
            .unwrap();
    let mut code: Vec<(String, i16)> = CURRENCIES
        .iter()
        .map(|(c, e)| (c.to_string(), i16::from(*e)))
        .collect();
    code.sort();
    assert_eq!(rows, code);
    db.drop_db().await;
}

#[tokio::test]
async fn migrate_twice_is_a_no_op() {
    let db = TestDb::new().await;
    db.store.migrate().await.expect("second migrate");
    db.drop_db().await;
}
