//! A gateway without idempotency that records a charge only when it
//! completes (the simulator's `--no-idempotency --record-on-complete`): a
//! lookup while the first send is still executing says "not found". Taken
//! at its word, that "not found" makes cobro re-send, and the order is
//! charged twice: the first test shows it, with cobro told (wrongly) that
//! the gateway honours keys. Told the truth (`COBRO_GATEWAY_IDEMPOTENT=false`
//! and the gateway's longest processing time), cobro believes only a "not
//! found" taken after that time, and charges once. On both backends.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::State;
use common::*;

on_both_backends!(
    trusting_an_early_not_found_charges_a_slow_memoryless_gateway_twice,
    waiting_out_the_processing_time_charges_it_once,
);

/// Every charge is executed and recorded 2.5 s after it arrives; its reply
/// comes only then, after the worker's 1.5 s request timeout.
fn slow_memoryless() -> Faults {
    Faults {
        p_timeout_after_charge: 1.0,
        hold_ms: 2_500,
        record_on_complete: true,
        ..Faults::default()
    }
}

async fn charge_once_through(b: Backend, idempotent: bool, order: &str) -> (usize, Vec<String>) {
    init_logs();
    let db = TestDb::new(b).await;
    let sim = start_sim(false, slow_memoryless()).await;
    let mut args = worker_args(&db.url, &sim.url());
    args.gateway_idempotent = idempotent;
    args.gateway_max_processing = Duration::from_secs(4);
    let worker = spawn_worker(args);
    let req = ChargeRequest::parse(order, 4_200, "USD", None, Some("pm_x")).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    settled(&db.store, id, State::Aprobado, Duration::from_secs(30)).await;
    // Let any send still executing at the gateway complete.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let charges = ledger(&sim.url())
        .await
        .entries_for_key(&req.key.to_string())
        .count();
    let causes = causes(&db.store, id).await;
    finish(worker, sim).await;
    db.drop_db().await;
    (charges, causes)
}

async fn trusting_an_early_not_found_charges_a_slow_memoryless_gateway_twice(b: Backend) {
    let (charges, causes) = charge_once_through(b, true, "memoryless-1").await;
    assert!(
        causes.iter().any(|c| c == "lookup_not_found"),
        "re-sent on the early not found: {causes:?}"
    );
    assert!(
        charges >= 2,
        "the double charge this configuration risks: {charges} charge(s), {causes:?}"
    );
}

async fn waiting_out_the_processing_time_charges_it_once(b: Backend) {
    let (charges, causes) = charge_once_through(b, false, "memoryless-2").await;
    assert_eq!(charges, 1, "{causes:?}");
    assert!(
        !causes.iter().any(|c| c == "lookup_not_found"),
        "never re-sent: {causes:?}"
    );
}
