//! Poison wake-ups, on both backends: an attempt whose handling keeps
//! failing with an error that is not the gateway's (here a database trigger
//! that refuses its claim, standing in for a bug or a bad row) is
//! quarantined to finance after `COBRO_POISON_AFTER` failures, with the
//! error, and is no longer woken; other attempts go on; closing the case
//! after the fix lifts the quarantine and the charge goes through once.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::State;
use cobro::store::{ReconCase, Store};
use common::*;

on_both_dbs!(a_poison_wake_up_is_quarantined_to_finance_and_released_by_closing_its_case,);

async fn poison_case(store: &Store) -> Option<ReconCase> {
    store
        .open_cases()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.kind == "poison_wakeup")
}

async fn failures(db: &TestDb) -> i64 {
    db.scalar(
        "SELECT coalesce(sum(failures), 0)::bigint FROM cobro.wake_failures",
        "SELECT coalesce(sum(failures), 0) FROM wake_failures",
    )
    .await
}

async fn a_poison_wake_up_is_quarantined_to_finance_and_released_by_closing_its_case(db: &TestDb) {
    // The bug: every claim of this one order is refused by the database.
    db.exec(
        "CREATE FUNCTION cobro.test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'poisoned row: the test trigger refuses order %', NEW.order_id; END $$",
        "SELECT 1",
        &[],
    )
    .await
    .unwrap();
    db.exec(
        "CREATE TRIGGER test_poison BEFORE UPDATE ON cobro.payment_attempts FOR EACH ROW
         WHEN (NEW.order_id = 'poison-1' AND NEW.state = 'EN_PROCESO')
         EXECUTE FUNCTION cobro.test_poison()",
        "CREATE TRIGGER test_poison BEFORE UPDATE ON payment_attempts
         WHEN NEW.order_id = 'poison-1' AND NEW.state = 'EN_PROCESO'
         BEGIN SELECT RAISE(ABORT, 'poisoned row: the test trigger refuses order poison-1'); END",
        &[],
    )
    .await
    .unwrap();
    let sim = start_sim(true, Faults::default()).await;
    let mut args = worker_args(&db.url, &sim.url());
    args.poison_after = 3;
    let worker = spawn_worker(args);

    let enqueue = |order: &'static str| {
        let store = db.store.clone();
        async move {
            let req = ChargeRequest::parse(order, 1_200, "EUR", None, Some("pm_test")).unwrap();
            store.enqueue(&req).await.unwrap().attempt_id
        }
    };
    let poisoned = enqueue("poison-1").await;
    let healthy = enqueue("healthy-1").await;
    settled(&db.store, healthy, State::Aprobado, Duration::from_secs(20)).await;

    let case = eventually(Duration::from_secs(30), "a poison_wakeup case", || {
        poison_case(&db.store)
    })
    .await;
    assert_eq!(case.attempt_id, Some(poisoned));
    assert_eq!(case.order_id.as_deref(), Some("poison-1"));
    let error = case.details["error"].as_str().unwrap_or_default();
    assert!(error.contains("poisoned row"), "{}", case.details);
    assert!(
        case.details["failures"].as_i64() >= Some(3),
        "{}",
        case.details
    );
    let gauges = db.store.gauges().await.unwrap();
    assert!(
        gauges
            .on_call
            .open_cases_by_kind
            .contains(&("poison_wakeup".to_owned(), 1)),
        "{:?}",
        gauges.on_call.open_cases_by_kind
    );

    // Quarantined: once apalis' own retries of the last job are spent, no
    // sweep wakes it again (unquarantined, the sweeper would every 4 s).
    let mut settled_count = failures(db).await;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = failures(db).await;
        if now == settled_count {
            break;
        }
        settled_count = now;
    }
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(failures(db).await, settled_count, "no wake-up since");
    let (a, _) = db.store.load(poisoned).await.unwrap();
    assert_eq!(
        a.state,
        State::Pendiente,
        "the state machine was never bypassed"
    );
    let l = ledger(&sim.url()).await;
    assert!(
        l.entries.iter().all(|e| e.order_id != "poison-1"),
        "never sent"
    );

    // The fix, then finance closes the case: the next sweep wakes it.
    db.exec(
        "DROP TRIGGER test_poison ON cobro.payment_attempts",
        "DROP TRIGGER test_poison",
        &[],
    )
    .await
    .unwrap();
    db.store
        .resolve_case(case.id, "finance:ana", "fixed the row; release it")
        .await
        .unwrap();
    let a = settled(
        &db.store,
        poisoned,
        State::Aprobado,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(a.send_count, 1);
    let l = ledger(&sim.url()).await;
    assert_eq!(
        l.entries
            .iter()
            .filter(|e| e.order_id == "poison-1")
            .count(),
        1
    );

    finish(worker, sim).await;
}
