//! The wake-up fetch claims the charges it takes, in its own transaction
//! (`Wakes::claiming`): one transaction fewer per charge, and the same
//! claim, through the same state machine and compare-and-set, as a handler
//! writes. Driven through the backend's database half directly, on both
//! backends, against the simulator over HTTP.

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::{Faults, SimHandle};
use cobro::state::State;
use cobro::store::{ClaimPlan, Store};
use cobro::wakeq::{LiteDb, Outcome, PgDb, WakeConfig, WakeDb, Wakeup};
use common::*;
use uuid::Uuid;

on_both_dbs!(
    a_fetch_claims_due_charges_up_to_its_free_handlers_and_they_are_sent_once,
    a_fetch_leaves_the_claim_to_the_handler_while_sending_is_paused,
    a_charge_claimed_by_a_fetch_that_never_handed_it_out_is_resolved_by_its_lease,
    a_claim_is_given_back_unsent_when_sending_was_paused_after_the_fetch,
    a_claim_handled_late_is_given_back_and_claimed_again,
    a_claim_given_back_at_shutdown_is_sent_once_by_the_next_worker,
);

/// A real, idle worker claims a lone charge in the transaction of the
/// fetch that takes its wake-up: PostgreSQL's `now()` is the transaction's
/// start, so the claim's log row and the job's lock carry the same instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_worker_claims_a_lone_charge_in_its_fetch() {
    let Some((db, sim)) = postgres_db_and_sim(Faults::default()).await else {
        return;
    };
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let id = enqueue(&db.store, "order-lone").await;
    settled(&db.store, id, State::Aprobado, Duration::from_secs(10)).await;
    let same: bool = sqlx::query_scalar(
        "SELECT t.at = j.lock_at
           FROM cobro.attempt_transitions t
           JOIN apalis.jobs j ON cobro.wake_target(j.job) = t.attempt_id
          WHERE t.attempt_id = $1 AND t.cause = 'claim'",
    )
    .bind(id)
    .fetch_one(db.store.pg_pool().unwrap())
    .await
    .unwrap();
    assert!(same, "claimed in the fetch's transaction");
    finish(worker, sim).await;
    db.drop_db().await;
}

async fn enqueue(store: &Store, order: &str) -> Uuid {
    let req = ChargeRequest::parse(order, 2_500, "USD", None, Some("pm_test_visa")).unwrap();
    store.enqueue(&req).await.unwrap().attempt_id
}

fn config() -> WakeConfig {
    WakeConfig {
        queue: cobro::store::CHARGE_QUEUE,
        batch: 10,
        poll: Duration::from_millis(500),
        orphaned_after: Duration::from_secs(10),
        concurrency: 8,
    }
}

/// Registers `worker` and runs one fetch on the backend's database half,
/// claiming up to `up_to` with `plan`.
async fn fetch(store: &Store, worker: &str, plan: Arc<dyn ClaimPlan>, up_to: usize) -> Vec<Wakeup> {
    let cfg = config();
    let claims = Some((plan, up_to));
    match (store.pg_pool(), store.sqlite_pool()) {
        (Some(p), _) => {
            let db = PgDb::new(p.clone());
            db.register(worker.into(), &cfg).await.unwrap();
            db.fetch(worker.into(), &cfg, Vec::new(), claims)
                .await
                .unwrap()
        }
        (None, Some(p)) => {
            let db = LiteDb(p.clone());
            db.register(worker.into(), &cfg).await.unwrap();
            db.fetch(worker.into(), &cfg, Vec::new(), claims)
                .await
                .unwrap()
        }
        (None, None) => unreachable!("a store is on one backend"),
    }
}

/// Each attempt's transitions, in order: the state it went to and why.
async fn states_and_causes(store: &Store, id: Uuid) -> Vec<(String, String)> {
    store
        .transitions(id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.to_state, t.cause))
        .collect()
}

/// `(state, cause)` pairs as [`states_and_causes`] gives them.
fn pairs(want: &[(&str, &str)]) -> Vec<(String, String)> {
    want.iter()
        .map(|(s, c)| (s.to_string(), c.to_string()))
        .collect()
}

/// Three charges due, two handlers free: the fetch claims the first two
/// (committed with it: another connection sees them `EN_PROCESO`, leased to
/// this worker, with their log rows) and leaves the third `PENDIENTE`.
/// Handed to the engine, the claimed ones are sent at once, the other is
/// claimed by its handler; each order is charged once, and every log reads
/// as a handler's claim would.
async fn a_fetch_claims_due_charges_up_to_its_free_handlers_and_they_are_sent_once(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let ids = [
        enqueue(&db.store, "order-claim-1").await,
        enqueue(&db.store, "order-claim-2").await,
        enqueue(&db.store, "order-claim-3").await,
    ];
    let engine = Arc::new(engine(&db.store, &sim.url(), "claimer"));
    let got = fetch(&db.store, "claimer-fetch", engine.clone(), 2).await;

    assert_eq!(got.len(), 3, "every due wake-up is taken");
    let claimed: Vec<&Wakeup> = got.iter().filter(|w| w.claimed.is_some()).collect();
    assert_eq!(claimed.len(), 2, "claims stop at the free handlers");
    assert!(
        got[0].claimed.is_some() && got[1].claimed.is_some(),
        "oldest first"
    );
    for w in &claimed {
        let (row, _) = w.seen.as_ref().expect("a claim returns its row");
        assert_eq!(row.state, State::EnProceso);
        assert_eq!(row.lease_owner.as_deref(), Some("claimer"));
        assert_eq!(row.send_count, 1);
        // Committed: a fresh read sees the claim.
        let (stored, _) = db.store.load(row.id).await.unwrap();
        assert_eq!(stored.state, State::EnProceso);
        assert_eq!(stored.version, row.version);
    }
    let rest = got.iter().find(|w| w.claimed.is_none()).unwrap();
    let (row, _) = rest.seen.as_ref().unwrap();
    assert_eq!(row.state, State::Pendiente);
    assert_eq!(
        db.store.load(row.id).await.unwrap().0.state,
        State::Pendiente
    );

    for w in got {
        let id = w.attempt_id.unwrap();
        engine.process_seen(id, w.seen, w.claimed).await.unwrap();
    }
    for id in ids {
        assert_eq!(db.store.load(id).await.unwrap().0.state, State::Aprobado);
        assert_eq!(
            states_and_causes(&db.store, id).await,
            pairs(&[
                ("PENDIENTE", "enqueued"),
                ("EN_PROCESO", "claim"),
                ("APROBADO", "gateway_approved"),
            ])
        );
    }
    let l = ledger(&sim.url()).await;
    assert_eq!(l.entries.len(), 3, "each order charged once");
    assert!(approved_per_order(&l).values().all(|n| *n == 1));
    sim.shutdown().await;
}

/// While sending is paused, the fetch claims nothing: the handler parks
/// the charge as before, and nothing reaches the gateway.
async fn a_fetch_leaves_the_claim_to_the_handler_while_sending_is_paused(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let id = enqueue(&db.store, "order-paused").await;
    db.store
        .set_sending_paused(true, "test", Some("incident"))
        .await
        .unwrap();
    let pause = Arc::new(cobro::pause::Pause::new(db.store.clone()));
    assert!(pause.refresh().await.unwrap());
    let engine = Arc::new(engine(&db.store, &sim.url(), "paused").with_pause(pause));

    let got = fetch(&db.store, "paused-fetch", engine.clone(), 8).await;
    assert_eq!(got.len(), 1);
    assert!(got[0].claimed.is_none(), "nothing is claimed while paused");
    assert_eq!(db.store.load(id).await.unwrap().0.state, State::Pendiente);

    let w = got.into_iter().next().unwrap();
    engine.process_seen(id, w.seen, w.claimed).await.unwrap();
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Pendiente);
    assert!(a.parked_since.is_some(), "the handler parked it");
    assert_eq!(a.send_count, 0);
    assert!(ledger(&sim.url()).await.entries.is_empty());
    sim.shutdown().await;
}

/// A fetch claims a charge, and its process dies before handing it out
/// (nothing sent). The claim is a lease like any other: once it expires a
/// live worker marks the attempt `DESCONOCIDO`, looks it up by its key,
/// finds nothing, and sends it with the same key; charged once.
async fn a_charge_claimed_by_a_fetch_that_never_handed_it_out_is_resolved_by_its_lease(
    db: &TestDb,
) {
    let sim = start_sim(true, Faults::default()).await;
    let id = enqueue(&db.store, "order-claimed-lost").await;
    let gone = Arc::new(engine(&db.store, &sim.url(), "gone"));
    let got = fetch(&db.store, "gone-fetch", gone, 8).await;
    assert!(got[0].claimed.is_some());
    drop(got); // the process dies here

    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    settled(&db.store, id, State::Aprobado, Duration::from_secs(30)).await;
    let states = path(&db.store, id).await;
    assert_eq!(
        states,
        [
            "PENDIENTE",
            "EN_PROCESO",
            "DESCONOCIDO",
            "EN_PROCESO",
            "APROBADO"
        ],
        "the lease expires into a lookup, then one send with the same key"
    );
    let l = ledger(&sim.url()).await;
    assert_eq!(l.entries.len(), 1, "charged once");
    finish(worker, sim).await;
}

/// Sending is paused between the fetch that claimed a charge and its
/// handler: the handler gives the claim back unsent (`PENDIENTE`, parked,
/// as a handler parks a charge while paused); nothing reaches the gateway.
async fn a_claim_is_given_back_unsent_when_sending_was_paused_after_the_fetch(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let id = enqueue(&db.store, "order-paused-late").await;
    let pause = Arc::new(cobro::pause::Pause::new(db.store.clone()));
    let engine = Arc::new(engine(&db.store, &sim.url(), "paused-late").with_pause(pause.clone()));
    let got = fetch(&db.store, "paused-late-fetch", engine.clone(), 8).await;
    assert!(got[0].claimed.is_some());

    db.store
        .set_sending_paused(true, "test", Some("incident"))
        .await
        .unwrap();
    assert!(pause.refresh().await.unwrap());
    let w = got.into_iter().next().unwrap();
    engine.process_seen(id, w.seen, w.claimed).await.unwrap();

    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Pendiente);
    assert!(a.parked_since.is_some(), "parked until sending resumes");
    assert_eq!(a.lease_owner, None);
    assert_eq!(
        states_and_causes(&db.store, id).await,
        pairs(&[
            ("PENDIENTE", "enqueued"),
            ("EN_PROCESO", "claim"),
            ("PENDIENTE", "claim_released_sending_paused"),
        ])
    );
    assert!(ledger(&sim.url()).await.entries.is_empty(), "nothing sent");
    sim.shutdown().await;
}

/// A charge claimed in the fetch whose handler starts later than
/// `CLAIM_FRESH` is given back and claimed again by its handler, so the
/// log's claim is the send's; charged once.
async fn a_claim_handled_late_is_given_back_and_claimed_again(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let id = enqueue(&db.store, "order-late-handler").await;
    let engine = Arc::new(engine(&db.store, &sim.url(), "late"));
    let got = fetch(&db.store, "late-fetch", engine.clone(), 8).await;
    let w = got.into_iter().next().unwrap();
    let began = w.claimed.expect("claimed in the fetch");
    let long_ago = began
        .checked_sub(cobro::engine::CLAIM_FRESH + Duration::from_millis(100))
        .unwrap();
    engine
        .process_seen(id, w.seen, Some(long_ago))
        .await
        .unwrap();

    assert_eq!(db.store.load(id).await.unwrap().0.state, State::Aprobado);
    sent_once_after_release(db, &sim, id, "claim_released_late").await;
    sim.shutdown().await;
}

/// Attempt `id` was claimed, given back (`cause`), claimed again and
/// approved, and the gateway holds one charge of it.
async fn sent_once_after_release(db: &TestDb, sim: &SimHandle, id: Uuid, cause: &str) {
    assert_eq!(
        states_and_causes(&db.store, id).await,
        pairs(&[
            ("PENDIENTE", "enqueued"),
            ("EN_PROCESO", "claim"),
            ("PENDIENTE", cause),
            ("EN_PROCESO", "claim"),
            ("APROBADO", "gateway_approved"),
        ])
    );
    assert_eq!(ledger(&sim.url()).await.entries.len(), 1, "charged once");
}

/// A worker shuts down with a charge its fetch claimed but never handed
/// out: the release gives the claim back (due at once, with a wake-up of
/// its own) and acknowledges the old wake-up; the next worker sends it
/// once, without waiting for a lease to expire.
async fn a_claim_given_back_at_shutdown_is_sent_once_by_the_next_worker(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let id = enqueue(&db.store, "order-shutdown").await;
    let leaving = Arc::new(engine(&db.store, &sim.url(), "leaving"));
    let worker = "leaving-fetch";
    let got = fetch(&db.store, worker, leaving.clone(), 8).await;
    let w = got.into_iter().next().unwrap();
    let (row, _) = w.seen.expect("claimed with its row");
    let acks = vec![(w.job_id, Outcome::Done)];
    let unsent = Some((leaving as Arc<dyn ClaimPlan>, vec![row]));
    match (db.store.pg_pool(), db.store.sqlite_pool()) {
        (Some(p), _) => PgDb::new(p.clone())
            .release(worker.into(), acks, Vec::new(), unsent)
            .await
            .unwrap(),
        (None, Some(p)) => LiteDb(p.clone())
            .release(worker.into(), acks, Vec::new(), unsent)
            .await
            .unwrap(),
        (None, None) => unreachable!(),
    }
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Pendiente);
    assert_eq!(a.lease_owner, None);

    // The sweeper out of reach: only the give-back's own wake-up can bring it.
    let mut args = worker_args(&db.url, &sim.url());
    args.sweep_grace = Duration::from_secs(600);
    args.sweep_interval = Duration::from_secs(60);
    let next = spawn_worker(args);
    settled(&db.store, id, State::Aprobado, Duration::from_secs(10)).await;
    sent_once_after_release(db, &sim, id, "claim_released_shutdown").await;
    next.stop().await;
    sim.shutdown().await;
}
