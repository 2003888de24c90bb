//! PostgreSQL's wake-up notifications: one listening connection per worker
//! process, shared by its charge and refund queues (each notification
//! costs the listening backend a transaction of its own), and both queues
//! still woken by it alone.

mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::State;
use common::*;

/// With the poll interval and the sweeper out of reach, only a
/// notification can wake a queue: a charge and then its refund are each
/// done within seconds, through the process's one listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_listener_per_process_wakes_both_queues() {
    let Some((db, sim)) = postgres_db_and_sim(Faults::default()).await else {
        return;
    };
    let mut args = worker_args(&db.url, &sim.url());
    args.poll_interval = Duration::from_secs(60);
    args.missed_heartbeats = 10;
    args.sweep_grace = Duration::from_secs(600);
    args.sweep_interval = Duration::from_secs(60);
    let worker = spawn_worker(args);

    // Both queues registered, and their first fetch (at start) done.
    eventually(
        Duration::from_secs(10),
        "both queues to register",
        || async {
            let n = db
                .scalar("SELECT count(*) FROM apalis.workers", "SELECT 0")
                .await;
            (n == 2).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let listeners = db
        .scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
            "SELECT 0",
        )
        .await;
    assert_eq!(listeners, 1, "one listening connection for both queues");

    for order in ["order-heard-1", "order-heard-2"] {
        let req = ChargeRequest::parse(order, 3_000, "USD", None, Some("pm_test_visa")).unwrap();
        let id = db.store.enqueue(&req).await.unwrap().attempt_id;
        settled(&db.store, id, State::Aprobado, Duration::from_secs(5)).await;
        let refund = ask_refund(&db.store, id, 1_000, "app").await;
        settled(
            &db.store,
            refund.refund_id,
            State::Aprobado,
            Duration::from_secs(5),
        )
        .await;
    }
    finish(worker, sim).await;
    db.drop_db().await;
}
