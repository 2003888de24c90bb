//! Requests the gateway certainly did not execute, end to end with a real
//! worker and the simulator on 127.0.0.1, on both backends: a charge whose
//! connection is refused is not `DESCONOCIDO` but waits (`PENDIENTE`) and is
//! sent again with the same key once the gateway listens; a lookup whose
//! connection is refused spends no check. Nothing is ever charged twice.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::{Faults, SimConfig, SimHandle};
use cobro::state::State;
use common::*;

on_both_backends!(
    a_refused_connection_waits_and_sends_again_with_the_same_key,
    a_lookup_that_cannot_reach_the_gateway_spends_no_check,
);

/// A 127.0.0.1 port nobody listens on (yet).
fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

async fn sim_at(addr: std::net::SocketAddr, faults: Faults) -> SimHandle {
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind sim");
    cobro::sim::spawn(
        listener,
        SimConfig {
            per_order_draws: false,
            webhooks: None,
            idempotent: true,
            seed: 7,
            faults,
        },
    )
    .await
    .expect("start gateway simulator")
}

async fn path(db: &TestDb, id: uuid::Uuid) -> Vec<String> {
    db.store
        .transitions(id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.to_state)
        .collect()
}

async fn a_refused_connection_waits_and_sends_again_with_the_same_key(b: Backend) {
    init_logs();
    let db = TestDb::new(b).await;
    let addr = free_addr();
    let worker = spawn_worker(worker_args(&db.url, &format!("http://{addr}")));
    let req = ChargeRequest::parse("defer-1", 1_500, "USD", None, Some("pm_x")).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;

    // The gateway is down: refused, again and again, never DESCONOCIDO.
    eventually(Duration::from_secs(20), "two refused sends", || async {
        let p = path(&db, id).await;
        (p.iter().filter(|s| *s == "PENDIENTE").count() >= 3).then_some(())
    })
    .await;
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Pendiente, "waiting, not in doubt");
    assert_eq!(a.check_count, 0, "nothing to look up");
    let log = db.store.transitions(id).await.unwrap();
    let deferred: Vec<_> = log
        .iter()
        .filter(|t| t.cause == "gateway_not_sent")
        .collect();
    assert!(deferred.len() >= 2, "{log:?}");
    assert!(
        deferred
            .iter()
            .all(|t| t.error_kind.as_deref() == Some("connect") && t.http_status.is_none()),
        "{deferred:?}"
    );

    // The gateway comes back on the same address: charged once, same key.
    let sim = sim_at(addr, Faults::default()).await;
    let done = settled(&db.store, id, State::Aprobado, Duration::from_secs(20)).await;
    let p = path(&db, id).await;
    assert!(!p.contains(&"DESCONOCIDO".to_owned()), "{p:?}");
    assert_eq!(done.check_count, 0);
    let ledger = ledger(&sim.url()).await;
    assert_eq!(ledger.entries.len(), 1, "charged once");
    assert_eq!(ledger.entries[0].idempotency_key, req.key.to_string());
    worker.stop().await;
    sim.shutdown().await;
    db.drop_db().await;
}

async fn a_lookup_that_cannot_reach_the_gateway_spends_no_check(b: Backend) {
    init_logs();
    let db = TestDb::new(b).await;
    let addr = free_addr();
    // The answer to the charge is lost after the gateway charged: unknown.
    let sim = sim_at(
        addr,
        Faults {
            p_response_lost: 1.0,
            ..Faults::default()
        },
    )
    .await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let req = ChargeRequest::parse("defer-2", 2_500, "EUR", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    settled(&db.store, id, State::Desconocido, Duration::from_secs(20)).await;
    let charged = ledger(&sim.url()).await;
    // Then the gateway goes away: every lookup is refused.
    sim.shutdown().await;
    assert_eq!(charged.entries.len(), 1);
    tokio::time::sleep(Duration::from_secs(4)).await; // past several 0.2-3.2 s check delays
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Desconocido, "still in doubt, not in review");
    assert_eq!(a.check_count, 0, "refused lookups are not checks");
    // Back, with its books (the charge it made under our key): one lookup
    // settles it, no resend.
    let sim = sim_at(addr, Faults::default()).await;
    let before = &charged.entries[0];
    let injected = reqwest::Client::new()
        .post(format!("{}/control/inject", sim.url()))
        .json(&serde_json::json!({
            "order_id": before.order_id, "amount_minor": before.amount_minor,
            "currency": before.currency, "idempotency_key": before.idempotency_key,
        }))
        .send()
        .await
        .unwrap();
    assert!(injected.status().is_success());
    let done = settled(&db.store, id, State::Aprobado, Duration::from_secs(20)).await;
    assert_eq!(
        (done.check_count, done.send_count),
        (1, 1),
        "one lookup, no resend"
    );
    assert_eq!(
        ledger(&sim.url()).await.entries.len(),
        1,
        "nothing charged again"
    );
    worker.stop().await;
    sim.shutdown().await;
    db.drop_db().await;
}
