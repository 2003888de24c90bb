//! Requests the gateway certainly did not execute, end to end with a real
//! worker and the simulator on 127.0.0.1, on both backends: a charge whose
//! connection is refused is not `DESCONOCIDO` but waits (`PENDIENTE`) and is
//! sent again with the same key once the gateway listens; a lookup whose
//! connection is refused spends no check; a gateway answering 429 above a
//! rate costs no check and no `DESCONOCIDO`. Nothing is ever charged twice.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::{Faults, SimConfig, SimHandle};
use cobro::state::State;
use common::*;

on_both_dbs!(
    a_refused_connection_waits_and_sends_again_with_the_same_key,
    a_lookup_that_cannot_reach_the_gateway_spends_no_check,
    a_throttling_gateway_spends_no_check_and_charges_each_order_once,
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

async fn a_refused_connection_waits_and_sends_again_with_the_same_key(db: &TestDb) {
    let addr = free_addr();
    let worker = spawn_worker(worker_args(&db.url, &format!("http://{addr}")));
    let req = ChargeRequest::parse("defer-1", 1_500, "USD", None, Some("pm_x")).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;

    // The gateway is down: refused, again and again, never DESCONOCIDO.
    eventually(Duration::from_secs(20), "two refused sends", || async {
        let p = path(&db.store, id).await;
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
    let p = path(&db.store, id).await;
    assert!(!p.contains(&"DESCONOCIDO".to_owned()), "{p:?}");
    assert_eq!(done.check_count, 0);
    let ledger = ledger(&sim.url()).await;
    assert_eq!(ledger.entries.len(), 1, "charged once");
    assert_eq!(ledger.entries[0].idempotency_key, req.key.to_string());
    finish(worker, sim).await;
}

async fn a_lookup_that_cannot_reach_the_gateway_spends_no_check(db: &TestDb) {
    // The answer to the charge is lost after the gateway charged: unknown.
    let sim = start_sim(true, answers_lost()).await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let req = ChargeRequest::parse("defer-2", 2_500, "EUR", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    settled(&db.store, id, State::Desconocido, Duration::from_secs(20)).await;
    // Then the gateway stops listening for 4 s (its books kept): every
    // lookup in that time is refused, past several 0.2-3.2 s check delays.
    set_faults(&sim.url(), &Faults::default()).await;
    let refused = reqwest::Client::new()
        .post(format!("{}/control/refuse", sim.url()))
        .json(&serde_json::json!({"for_ms": 4000}))
        .send()
        .await
        .unwrap();
    assert!(refused.status().is_success());
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Desconocido, "still in doubt, not in review");
    assert_eq!(a.check_count, 0, "refused lookups are not checks");
    // Back: one lookup finds the charge, no resend.
    let done = settled(&db.store, id, State::Aprobado, Duration::from_secs(20)).await;
    assert_eq!(
        (done.check_count, done.send_count),
        (1, 1),
        "one lookup, no resend"
    );
    assert_eq!(ledger(&sim.url()).await.entries.len(), 1, "charged once");
    finish(worker, sim).await;
}

async fn a_throttling_gateway_spends_no_check_and_charges_each_order_once(db: &TestDb) {
    let sim = start_sim(
        true,
        Faults {
            rate_limit_per_s: 5.0,
            rate_limit_burst: 5,
            ..Faults::default()
        },
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let req =
            ChargeRequest::parse(&format!("throttle-{i}"), 1_000 + i, "USD", None, None).unwrap();
        ids.push(db.store.enqueue(&req).await.unwrap().attempt_id);
    }
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let mut deferred = 0;
    for id in &ids {
        let a = settled(&db.store, *id, State::Aprobado, Duration::from_secs(60)).await;
        assert_eq!(a.check_count, 0, "no check spent on a 429");
        let log = db.store.transitions(*id).await.unwrap();
        assert!(log.iter().all(|t| t.to_state != "DESCONOCIDO"), "{log:?}");
        let throttled: Vec<_> = log
            .iter()
            .filter(|t| t.cause == "gateway_not_executed")
            .collect();
        assert!(
            throttled.iter().all(|t| t.http_status == Some(429)),
            "{throttled:?}"
        );
        deferred += throttled.len();
    }
    let ledger = ledger(&sim.url()).await;
    assert_eq!(ledger.entries.len(), 30, "each order charged once");
    assert!(ledger.stats.throttled > 0, "the gateway did throttle");
    assert!(deferred > 0, "and the worker waited and sent again");
    eprintln!(
        "30 charges at 5/s: {deferred} sends deferred by 429, {} throttled",
        ledger.stats.throttled
    );
    finish(worker, sim).await;
}
