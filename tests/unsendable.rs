//! No poison attempts: a stored attempt that cannot be turned into a
//! gateway call (a row edited by hand, or written by an older version with
//! looser rules) is never sent and never stays `PENDIENTE`. A real worker
//! moves it to `EN_REVISION` with evidence naming the field, and finance's
//! queue lists it. Both backends.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::finance::{DEFAULT_STALE_AFTER, Filter, queue};
use cobro::state::State;
use common::*;
use uuid::Uuid;

on_both_dbs!(
    a_pending_row_the_parser_refuses_goes_to_finance_unsent,
    an_unknown_row_the_parser_refuses_is_looked_up_then_goes_to_finance_unsent,
);

/// Writes an attempt the way an older version (or a person with psql)
/// could: straight into the table, bypassing `cobro.enqueue_charge` and the
/// Rust parsers. Returns its id.
async fn insert_by_hand(db: &TestDb, order_id: &str, state: &str) -> Uuid {
    let id = Uuid::new_v4();
    let (id_text, key) = (id.to_string(), Uuid::new_v4().to_string());
    db.exec(
        "INSERT INTO cobro.payment_attempts
            (id, order_id, amount_minor, currency, payment_method, idempotency_key, state,
             send_count, next_action_at)
         VALUES ($1::uuid, $2, 2500, 'USD', 'pm_test_visa', $3::uuid, $4,
                 CASE WHEN $4 = 'PENDIENTE' THEN 0 ELSE 1 END, now())",
        "INSERT INTO payment_attempts
            (id, order_id, amount_minor, currency, payment_method, idempotency_key, state,
             send_count, next_action_at, created_at, updated_at)
         VALUES (?1, ?2, 2500, 'USD', 'pm_test_visa', ?3, ?4,
                 CASE WHEN ?4 = 'PENDIENTE' THEN 0 ELSE 1 END,
                 CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
                 CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
                 CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))",
        &[&id_text, order_id, &key, state],
    )
    .await
    .expect("insert the attempt by hand");
    db.store.wake(id).await.unwrap();
    id
}

/// The attempt in review: its last transition, from `from`, says why, and
/// finance's queue lists it. Nothing was charged. One that was sent before
/// (`sent`) keeps being looked up by the review janitor (first check after
/// the default 5 min); one never sent has nothing to find: a person decides.
async fn assert_in_review_unsent(
    db: &TestDb,
    sim_url: &str,
    id: Uuid,
    from: &str,
    detail: &str,
    sent: bool,
) {
    let a = settled(&db.store, id, State::EnRevision, Duration::from_secs(20)).await;
    assert_eq!(a.lease_owner, None, "no worker holds it");

    let log = db.store.transitions(id).await.unwrap();
    let last = log.last().expect("a transition-log row");
    if sent {
        let first_check = a.next_action_at.expect("the janitor's first check") - last.at;
        assert!(
            (first_check.num_milliseconds() - 300_000).abs() <= 50,
            "first janitor check {first_check:?} after entering review"
        );
    } else {
        assert_eq!(
            a.next_action_at, None,
            "nothing is scheduled: a person decides"
        );
    }
    assert_eq!(
        (last.from_state.as_deref(), last.to_state.as_str()),
        (Some(from), "EN_REVISION")
    );
    assert_eq!(last.cause, "unsendable");
    assert_eq!(last.error_kind.as_deref(), Some("invalid_stored_row"));
    let evidence = last.evidence.as_ref().expect("evidence");
    assert_eq!(evidence["detail"], detail, "the evidence names the field");
    assert_eq!(evidence["call"], "charge", "the call that was not made");

    let found = queue(&db.store, DEFAULT_STALE_AFTER, &Filter::default())
        .await
        .unwrap();
    let listed = found
        .iter()
        .find(|e| e.attempt.id == id)
        .expect("finance's queue lists it");
    assert_eq!(listed.reason(), "en_revision");

    // It stays there: the sweeper (every 500 ms, 2 s grace in tests) does
    // not bring it back, and nothing reaches the gateway.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (still, _) = db.store.load(id).await.unwrap();
    assert_eq!(still.state, State::EnRevision);
    assert_eq!(db.store.transitions(id).await.unwrap().len(), log.len());
    let l = ledger(sim_url).await;
    assert!(l.entries.is_empty(), "nothing charged: {:?}", l.entries);
    assert_eq!(l.stats.charge_requests, 0, "no charge request was sent");
}

async fn a_pending_row_the_parser_refuses_goes_to_finance_unsent(db: &TestDb) {
    let sim = start_sim(true, Default::default()).await;
    // U+00A0 at the end: the old SQL function's btrim() kept it, the parser
    // refuses it; it used to stay PENDIENTE for ever, holding its order.
    let id = insert_by_hand(db, "o-nbsp\u{00A0}", "PENDIENTE").await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));

    assert_in_review_unsent(
        db,
        &sim.url(),
        id,
        "PENDIENTE",
        "invalid order_id: must not end with whitespace, found U+00A0",
        false,
    )
    .await;
    let a = db.store.load(id).await.unwrap().0;
    assert_eq!(a.send_count, 0);
    assert!(db.store.checks(id).await.unwrap().is_empty());

    finish(worker, sim).await;
}

async fn an_unknown_row_the_parser_refuses_is_looked_up_then_goes_to_finance_unsent(db: &TestDb) {
    let sim = start_sim(true, Default::default()).await;
    // Sent by an older version, outcome unknown: the lookup finds nothing,
    // and a re-send is impossible, so finance decides.
    let id = insert_by_hand(db, "o-\u{FEFF}bom", "DESCONOCIDO").await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));

    assert_in_review_unsent(
        db,
        &sim.url(),
        id,
        "DESCONOCIDO",
        "invalid order_id: must not contain control or invisible format characters, found U+FEFF",
        true,
    )
    .await;
    let last = db.store.transitions(id).await.unwrap().pop().unwrap();
    assert_eq!(last.lookup_result.as_deref(), Some("not_found"));
    let checks = db.store.checks(id).await.unwrap();
    assert_eq!(checks.len(), 1, "the lookup is recorded");
    assert_eq!(checks[0].lookup_result, "not_found");
    assert_eq!(ledger(&sim.url()).await.stats.lookup_requests, 1);

    finish(worker, sim).await;
}
