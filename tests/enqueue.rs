//! Enqueue: the app's side. The attempt, its first log row and its wake-up
//! job commit with the caller's transaction or not at all; keys are unique;
//! the database refuses what the code might forget. On both backends, plus
//! the PostgreSQL-only SQL function.

#[macro_use]
mod common;

use cobro::domain::{CURRENCIES, ChargeRequest};
use cobro::store::{EnqueueError, enqueue_charge, enqueue_charge_sqlite};
use common::{Backend, TestDb, postgres_db, raw_move};

on_both_dbs!(
    a_rolled_back_transaction_leaves_neither_attempt_nor_job,
    the_same_key_twice_is_one_attempt_and_a_changed_charge_is_refused,
    a_second_live_attempt_for_an_order_is_refused,
    the_database_enforces_the_invariants_without_the_code,
    the_database_knows_the_same_currencies_as_the_code,
    migrate_twice_is_a_no_op,
);

fn req(order: &str, amount: i64, key: &str) -> ChargeRequest {
    ChargeRequest::parse(order, amount, "USD", Some(key), None).unwrap()
}

const KEY: &str = "0f8b7c1e-4a52-4d0e-9a8e-3c5b2f1d7e60";

/// Enqueues inside a transaction of the caller's, then commits or rolls back.
async fn in_caller_tx(db: &TestDb, req: &ChargeRequest, commit: bool) {
    match db.backend {
        Backend::Postgres => {
            let mut tx = db.store.pg_pool().unwrap().begin().await.unwrap();
            assert!(enqueue_charge(&mut tx, req).await.unwrap().created);
            if commit {
                tx.commit().await
            } else {
                tx.rollback().await
            }
            .unwrap();
        }
        Backend::Sqlite => {
            let pool = db.store.sqlite_pool().unwrap();
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
            assert!(enqueue_charge_sqlite(&mut tx, req).await.unwrap().created);
            if commit {
                tx.commit().await
            } else {
                tx.rollback().await
            }
            .unwrap();
        }
    }
}

async fn counts(db: &TestDb) -> (i64, i64) {
    (db.attempts().await, db.store.open_wakeups().await.unwrap())
}

async fn a_rolled_back_transaction_leaves_neither_attempt_nor_job(db: &TestDb) {
    in_caller_tx(db, &req("o-1", 1000, KEY), false).await;
    assert_eq!(counts(db).await, (0, 0));
    in_caller_tx(db, &req("o-1", 1000, KEY), true).await;
    assert_eq!(counts(db).await, (1, 1));
    let id = db.store.attempts_for_order("o-1").await.unwrap()[0].id;
    let log = db.store.transitions(id).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (log[0].from_state.as_deref(), log[0].to_state.as_str()),
        (None, "PENDIENTE")
    );
}

#[tokio::test]
async fn postgres_the_sql_function_commits_and_rolls_back_with_the_caller() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let pool = db.store.pg_pool().unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT * FROM cobro.enqueue_charge('o-2', 500, 'EUR')")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(counts(&db).await, (0, 0));
    let mut tx = pool.begin().await.unwrap();
    let (created,): (bool,) = sqlx::query_as(
        "SELECT created FROM cobro.enqueue_charge('o-2', 500, 'EUR', '5b0c3a2e-8d1f-4c6b-9e7a-1f2d3c4b5a69')",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(created);
    assert_eq!(counts(&db).await, (1, 1));
    // The Rust library and the SQL function are one implementation: the
    // same key through Rust is the same attempt.
    let again = db
        .store
        .enqueue(
            &ChargeRequest::parse(
                "o-2",
                500,
                "EUR",
                Some("5b0c3a2e-8d1f-4c6b-9e7a-1f2d3c4b5a69"),
                None,
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert!(!again.created);
    db.drop_db().await;
}

async fn the_same_key_twice_is_one_attempt_and_a_changed_charge_is_refused(db: &TestDb) {
    let first = db.store.enqueue(&req("o-1", 1000, KEY)).await.unwrap();
    let again = db.store.enqueue(&req("o-1", 1000, KEY)).await.unwrap();
    assert!(first.created && !again.created);
    assert_eq!(first.attempt_id, again.attempt_id);
    assert_eq!(
        counts(db).await,
        (1, 1),
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
    assert_eq!(db.attempts().await, 1);
}

async fn a_second_live_attempt_for_an_order_is_refused(db: &TestDb) {
    db.store.enqueue(&req("o-1", 1000, KEY)).await.unwrap();
    let other_key = "5b0c3a2e-8d1f-4c6b-9e7a-1f2d3c4b5a69";
    let err = db
        .store
        .enqueue(&req("o-1", 1000, other_key))
        .await
        .unwrap_err();
    assert!(matches!(err, EnqueueError::LiveAttempt(_)), "{err:?}");
    assert!(err.to_string().contains("o-1"));
    assert_eq!(db.attempts().await, 1);

    // Once approved, a new charge for the order is refused too.
    assert_eq!(
        raw_move(db, "order_id = 'o-1'", "APROBADO").await.unwrap(),
        1
    );
    let err = db
        .store
        .enqueue(&req("o-1", 1000, other_key))
        .await
        .unwrap_err();
    assert!(matches!(err, EnqueueError::AlreadyApproved(_)), "{err:?}");
}

#[tokio::test]
async fn postgres_bad_input_through_sql_names_the_field_and_writes_nothing() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let pool = db.store.pg_pool().unwrap();
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
        let err = sqlx::query(*sql).execute(pool).await.expect_err(sql);
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
    // A malformed key never even reaches the function: the uuid type refuses it.
    assert!(
        sqlx::query("SELECT * FROM cobro.enqueue_charge('o-1', 100, 'USD', 'not-a-uuid')")
            .execute(pool)
            .await
            .is_err()
    );
    assert_eq!(counts(&db).await, (0, 0));
    db.drop_db().await;
}

async fn the_database_enforces_the_invariants_without_the_code(db: &TestDb) {
    let insert = |order: &'static str, state: &'static str, amount: &'static str| {
        let db = &db;
        async move {
            db.exec(
                "INSERT INTO cobro.payment_attempts
                    (id, order_id, amount_minor, currency, idempotency_key, state, gateway_charge_id)
                 VALUES (gen_random_uuid(), $1, $3::bigint, 'USD', gen_random_uuid(), $2, 'ch_x')",
                "INSERT INTO payment_attempts
                    (id, order_id, amount_minor, currency, idempotency_key, state, gateway_charge_id,
                     created_at, updated_at)
                 VALUES (lower(hex(randomblob(18))), ?1, CAST(?3 AS INTEGER), 'USD',
                         lower(hex(randomblob(18))), ?2, 'ch_x', 0, 0)",
                &[order, state, amount],
            )
            .await
        }
    };
    // The charge rule (the charge_gate trigger) refuses first, naming why.
    insert("o-1", "APROBADO", "100").await.unwrap();
    let err = insert("o-1", "APROBADO", "100").await.unwrap_err();
    assert!(
        err.to_string().contains("already has an approved charge"),
        "{err}"
    );
    insert("o-2", "DESCONOCIDO", "100").await.unwrap();
    let err = insert("o-2", "EN_REVISION", "100").await.unwrap_err();
    assert!(
        err.to_string().contains("already has a live attempt"),
        "{err}"
    );
    // Terminal attempts do not count as live: a declined one may sit beside a new one.
    insert("o-3", "RECHAZADO", "100").await.unwrap();
    insert("o-3", "RECHAZADO", "100").await.unwrap();
    let err = insert("o-4", "pending", "100").await.unwrap_err();
    assert!(
        err.as_database_error().unwrap().is_check_violation(),
        "{err}"
    );
    let err = insert("o-4", "PENDIENTE", "0").await.unwrap_err();
    assert!(
        err.as_database_error().unwrap().is_check_violation(),
        "{err}"
    );
}

async fn the_database_knows_the_same_currencies_as_the_code(db: &TestDb) {
    let mut code: Vec<(String, i64)> = CURRENCIES
        .iter()
        .map(|(c, e)| (c.to_string(), i64::from(*e)))
        .collect();
    code.sort();
    let rows: Vec<(String, i64)> = match db.backend {
        Backend::Postgres => {
            sqlx::query_as("SELECT code, minor_unit::bigint FROM cobro.currencies ORDER BY code")
                .fetch_all(db.store.pg_pool().unwrap())
                .await
                .unwrap()
        }
        Backend::Sqlite => sqlx::query_as("SELECT code, minor_unit FROM currencies ORDER BY code")
            .fetch_all(db.store.sqlite_pool().unwrap())
            .await
            .unwrap(),
    };
    assert_eq!(rows, code);
}

async fn migrate_twice_is_a_no_op(db: &TestDb) {
    db.store.migrate().await.expect("second migrate");
}

/// No index repeats another (the same table, columns, expressions and
/// predicate): each one is paid for on every write of the charge path.
/// apalis-postgres 1.0 left five such; `20261208000001_duplicate_indexes`
/// drops four.
#[tokio::test]
async fn postgres_no_index_duplicates_another() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let pool = db.store.pg_pool().unwrap();
    let (indexes,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname IN ('cobro', 'apalis')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(indexes > 20, "the schemas' indexes are seen: {indexes}");
    let twins: Vec<(String, String)> = sqlx::query_as(
        "SELECT a.indexrelid::regclass::text, b.indexrelid::regclass::text
           FROM pg_index a
           JOIN pg_index b ON b.indrelid = a.indrelid AND b.indexrelid > a.indexrelid
           JOIN pg_class c ON c.oid = a.indrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname IN ('cobro', 'apalis')
            AND a.indkey::text = b.indkey::text
            AND a.indclass::text = b.indclass::text
            AND a.indoption::text = b.indoption::text
            AND coalesce(pg_get_expr(a.indexprs, a.indrelid), '')
                = coalesce(pg_get_expr(b.indexprs, b.indrelid), '')
            AND coalesce(pg_get_expr(a.indpred, a.indrelid), '')
                = coalesce(pg_get_expr(b.indpred, b.indrelid), '')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    // apalis' foreign key from `jobs.lock_by` is bound to this one, and the
    // table is written only by heartbeats (the migration says why it stays).
    let kept = (
        "apalis.unique_worker_id".to_string(),
        "apalis.workers_pkey".to_string(),
    );
    let twins: Vec<_> = twins.into_iter().filter(|t| *t != kept).collect();
    assert_eq!(twins, [], "indexes that repeat another");
    db.drop_db().await;
}

/// `gateway_ref` is set once, by the database: its trigger fires only when
/// a write would change a value already set, and then it refuses.
#[tokio::test]
async fn postgres_gateway_ref_is_set_once_by_the_database() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let pool = db.store.pg_pool().unwrap();
    let id = db
        .store
        .enqueue(&req("o-ref", 500, "6f1c3a2e-8d1f-4c6b-9e7a-1f2d3c4b5a70"))
        .await
        .unwrap()
        .attempt_id;
    let set = |r: Option<&'static str>| {
        sqlx::query("UPDATE cobro.payment_attempts SET gateway_ref = $2 WHERE id = $1")
            .bind(id)
            .bind(r)
            .execute(pool)
    };
    set(Some("pi_1")).await.expect("first set");
    set(Some("pi_1")).await.expect("the same value again");
    sqlx::query("UPDATE cobro.payment_attempts SET version = version + 1 WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await
        .expect("a write that leaves it alone");
    for other in [Some("pi_2"), None] {
        let e = set(other).await.expect_err("changed or cleared");
        assert!(e.to_string().contains("set once"), "{e}");
    }
    let (r,): (Option<String>,) =
        sqlx::query_as("SELECT gateway_ref FROM cobro.payment_attempts WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(r.as_deref(), Some("pi_1"));
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_money_survives_a_power_cut_wal_and_synchronous_full_on_every_connection() {
    let db = TestDb::new(Backend::Sqlite).await;
    let pool = db.store.sqlite_pool().unwrap();
    // Hold several pooled connections at once so each one is checked.
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(pool.acquire().await.unwrap());
    }
    for conn in &mut conns {
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        let fks: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(journal, "wal");
        assert_eq!(sync, 2, "synchronous = FULL (2)");
        assert_eq!(fks, 1, "foreign keys enforced");
    }
    drop(conns);
    db.drop_db().await;
}
