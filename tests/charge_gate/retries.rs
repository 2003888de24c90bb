//! A business retry charged once: its key derived from the order and its
//! number (the same from Rust and PostgreSQL's SQL, under a namespace that
//! never changes), a retry created again after a lossy failover charged
//! once, and the pre-check past the key lifetime reading the gateway's
//! listing instead of a lookup by key.

use std::time::Duration;

use cobro::domain::IdempotencyKey;
use cobro::sim::Faults;
use cobro::state::State;
use cobro::store::Attempt;
use serde_json::json;
use uuid::Uuid;

use super::common::{
    self, TestDb, approved_per_order, declined_with_retry, engine, eventually, ledger,
    lookups_fail, postgres_db, set_faults, spawn_worker, start_sim, worker_args,
};
use super::declines;
use super::doors::DAY;

on_both_dbs!(
    a_business_retry_key_is_derived_from_the_order_and_its_number,
    past_the_key_lifetime_the_pre_check_reads_the_gateways_listing,
);

/// A business retry's key: the order's number two under the deployment's
/// namespace, the same from either door; PostgreSQL's SQL function
/// derives the same key Rust does.
async fn a_business_retry_key_is_derived_from_the_order_and_its_number(db: &TestDb) {
    let ns = db.store.settings().await.unwrap().key_namespace;
    let a = declined_with_retry(&db.store, "gate-key", DAY).await;
    let r = db
        .store
        .business_retry(a.id, 4, "finance:test", None)
        .await
        .unwrap();
    assert_eq!(r.attempt_number, 2);
    assert_eq!(
        r.idempotency_key,
        IdempotencyKey::for_retry(ns, "gate-key", 2).uuid()
    );
    if let Some(pool) = db.store.pg_pool() {
        for (order, n) in [("gate-key", 2), ("ñandú/ü 7", 3), ("x", 99)] {
            let sql: Uuid = sqlx::query_scalar("SELECT cobro.retry_key($1, $2)")
                .bind(order)
                .bind(n)
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(sql, IdempotencyKey::for_retry(ns, order, n).uuid());
        }
        // The namespace never changes once made.
        let err = sqlx::query("UPDATE cobro.settings SET key_namespace = gen_random_uuid()")
            .execute(pool)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("never changes"), "{err}");
    }
}

/// Issue 27, item 9: a PostgreSQL failover to a replica that lacks the
/// last commits loses a business retry's row after the retry was sent.
/// The retry is created again with the same derived key, and the gateway
/// (which honours keys) charges the order once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_retry_created_again_after_a_lossy_failover_is_charged_once() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let pool = db.store.pg_pool().unwrap().clone();
    let sim = start_sim(true, Faults::default()).await;
    declines::decline_with(&sim.url(), "insufficient_funds").await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let first = declines::declined(&db.store, "gate-failover", None).await;
    worker.stop().await;
    set_faults(&sim.url(), &Faults::default()).await;

    let charged = |want: usize| {
        let store = db.store.clone();
        async move {
            eventually(Duration::from_secs(20), "the retry approved", || {
                let store = store.clone();
                async move {
                    let all = store.attempts_for_order("gate-failover").await.unwrap();
                    let approved: Vec<Attempt> = all
                        .into_iter()
                        .filter(|a| a.state == State::Aprobado)
                        .collect();
                    (approved.len() == want).then(|| approved[0].clone())
                }
            })
            .await
        }
    };
    common::due_now(&db, first.id).await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let retry = charged(1).await;
    worker.stop().await;
    assert_eq!(
        approved_per_order(&ledger(&sim.url()).await)["gate-failover"],
        1
    );

    // The failover: the retry's rows are gone (its attempt, every row that
    // names it, its wake-ups) and the declined attempt's retry is due
    // again, as on a replica that never saw the retry's transaction.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SELECT set_config('cobro_test.gone', $1, true)")
        .bind(retry.id.to_string())
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "DO $$
         DECLARE t text;
         BEGIN
             FOR t IN SELECT table_name FROM information_schema.columns
                       WHERE table_schema = 'cobro' AND column_name = 'attempt_id'
                         AND table_name <> 'payment_attempts' LOOP
                 EXECUTE format('DELETE FROM cobro.%I WHERE attempt_id = $1', t)
                     USING current_setting('cobro_test.gone')::uuid;
             END LOOP;
         END $$",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query("DELETE FROM apalis.jobs WHERE job::text LIKE '%' || $1 || '%'")
        .bind(retry.id.to_string())
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("DELETE FROM cobro.payment_attempts WHERE id = $1")
        .bind(retry.id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    common::due_now(&db, first.id).await;

    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let again = charged(1).await;
    worker.stop().await;
    assert_ne!(again.id, retry.id, "a new row");
    assert_eq!(again.attempt_number, retry.attempt_number);
    assert_eq!(again.idempotency_key, retry.idempotency_key, "the same key");
    let ledger = ledger(&sim.url()).await;
    assert_eq!(
        approved_per_order(&ledger)["gate-failover"],
        1,
        "charged once at the gateway: {:?}",
        ledger.entries
    );
    sim.shutdown().await;
    db.drop_db().await;
}

/// The fifth situation: before a business retry the declined
/// attempt is looked up; past the gateway's key lifetime a lookup by key
/// proves nothing (the gateway forgot the key), so the pre-check reads the
/// gateway's listing. Here lookups by key all fail (they would only
/// postpone the retry) and the listing shows the gateway did charge the
/// declined key: a case opens and no retry is made.
async fn past_the_key_lifetime_the_pre_check_reads_the_gateways_listing(db: &TestDb) {
    let sim = start_sim(true, lookups_fail()).await;
    let a = declined_with_retry(&db.store, "gate-old-key", DAY).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/control/inject", sim.url()))
        .json(&json!({
            "kind": "charge", "idempotency_key": a.idempotency_key.to_string(),
            "order_id": "gate-old-key", "amount_minor": 3000, "currency": "USD",
        }))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "inject: {}", resp.status());
    // The attempt began two days ago: its key is past the 24 h lifetime.
    db.exec(
        "UPDATE cobro.payment_attempts SET created_at = now() - interval '2 days' WHERE id = $1::uuid",
        "UPDATE payment_attempts SET created_at = created_at - 172800000 WHERE id = ?1",
        &[&a.id.to_string()],
    )
    .await
    .unwrap();
    common::due_now(db, a.id).await;
    engine(&db.store, &sim.url(), "w")
        .process(a.id)
        .await
        .unwrap();
    let cases = db.store.open_cases().await.unwrap();
    assert_eq!(cases.len(), 1, "{cases:?}");
    assert_eq!(cases[0].kind.as_str(), "unmatched_charge");
    assert_eq!(
        db.store
            .attempts_for_order("gate-old-key")
            .await
            .unwrap()
            .len(),
        1,
        "no retry"
    );
    sim.shutdown().await;
}
