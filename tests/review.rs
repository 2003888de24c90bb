//! The review janitor: `EN_REVISION` is not the end of looking. An attempt
//! in review is looked up again on a slow schedule (scaled down here through
//! configuration), settled when the gateway answers, left in review with its
//! next check moved on when it does not; past the key's lifetime through
//! the gateway's listing, never a re-send. On both backends, with the
//! simulator as a real HTTP server.

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cobro::backoff::CheckSchedule;
use cobro::domain::ChargeRequest;
use cobro::engine::{Engine, EngineConfig};
use cobro::janitor::ReviewSchedule;
use cobro::sim::Faults;
use cobro::state::{Event, State};
use cobro::store::{Attempt, Store};
use common::*;
use uuid::Uuid;

on_both_dbs!(
    not_found_stays_in_review_and_the_next_check_follows_the_schedule,
    past_the_key_lifetime_the_janitor_reads_the_listing_and_never_resends,
    ; by_backend:
    the_janitor_settles_an_attempt_the_gateway_approved_later,
    the_janitor_settles_an_attempt_the_gateway_declined,
);

async fn enqueue(store: &Store, order: &str) -> Uuid {
    let req = ChargeRequest::parse(order, 4_200, "USD", None, None).unwrap();
    store.enqueue(&req).await.unwrap().attempt_id
}

/// When the attempt last entered review, from its transition log.
async fn entered(store: &Store, id: Uuid) -> DateTime<Utc> {
    let log = store.transitions(id).await.unwrap();
    cobro::janitor::entered_review(&log).expect("entered review")
}

fn ms(d: chrono::Duration) -> i64 {
    d.num_milliseconds()
}

/// A worker whose checks run out fast and whose janitor looks every
/// 300 ms, then every 600 ms.
fn fast_review_worker(db: &TestDb, sim_url: &str) -> InProcessWorker {
    let mut args = worker_args(&db.url, sim_url);
    args.check_schedule = "50ms,50ms".into();
    args.review_schedule = "300ms,600ms".into();
    spawn_worker(args)
}

/// Charged at the gateway, answer lost, lookups failing: in review; then
/// the janitor looks (and fails) at least once; the gateway answers again.
async fn reviewed_then_gateway_answers(b: Backend, faults: Faults) -> (TestDb, Uuid, Attempt) {
    let (db, sim) = db_and_sim(b, faults).await;
    let worker = fast_review_worker(&db, &sim.url());
    let id = enqueue(&db.store, "rev-order").await;
    let review = settled(&db.store, id, State::EnRevision, Duration::from_secs(15)).await;
    let at = entered(&db.store, id).await;
    let next = review.next_action_at.expect("a janitor check is scheduled");
    let after = ms(next - at);
    // (SQLite: the log row's time is read a few ms after the update's)
    let off_grid = (after - 300).rem_euclid(600);
    assert!(
        off_grid <= 40 || off_grid >= 560,
        "next check {after} ms after entering review is on the 300 ms, 600 ms grid"
    );
    // The janitor looks while the lookups still fail: still in review.
    let checks_before = review.check_count;
    let still = eventually(Duration::from_secs(10), "a janitor check", || async {
        let (a, _) = db.store.load(id).await.unwrap();
        (a.check_count > checks_before && a.lease_owner.is_none()).then_some(a)
    })
    .await;
    assert_eq!(still.state, State::EnRevision);
    let checks = db.store.checks(id).await.unwrap();
    assert_eq!(checks.last().unwrap().lookup_result, "failed");
    set_faults(
        &sim.url(),
        &Faults {
            p_lookup_fail: 0.0,
            ..Faults::default()
        },
    )
    .await;
    let done = eventually(
        Duration::from_secs(10),
        "settled by the janitor",
        || async {
            let (a, _) = db.store.load(id).await.unwrap();
            a.state.is_terminal().then_some(a)
        },
    )
    .await;
    let l = ledger(&sim.url()).await;
    assert_eq!(l.stats.charge_requests, 1, "never re-sent");
    assert_eq!(done.send_count, 1);
    worker.stop().await;
    sim.shutdown().await;
    (db, id, done)
}

async fn the_janitor_settles_an_attempt_the_gateway_approved_later(b: Backend) {
    let faults = answers_lost_lookups_fail();
    let (db, id, done) = reviewed_then_gateway_answers(b, faults).await;
    assert_eq!(done.state, State::Aprobado);
    assert!(done.gateway_charge_id.is_some());
    let last = db.store.transitions(id).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.from_state.as_deref(), last.to_state.as_str()),
        (Some("EN_REVISION"), "APROBADO")
    );
    assert_eq!(last.cause, "review_lookup_approved");
    assert!(last.actor.starts_with("worker:"), "{}", last.actor);
    db.drop_db().await;
}

async fn the_janitor_settles_an_attempt_the_gateway_declined(b: Backend) {
    let faults = Faults {
        p_response_lost: 1.0,
        p_lookup_fail: 1.0,
        p_decline: 1.0,
        decline_codes: vec!["insufficient_funds".into()],
        ..Faults::default()
    };
    let (db, id, done) = reviewed_then_gateway_answers(b, faults).await;
    assert_eq!(done.state, State::Rechazado);
    assert_eq!(done.decline_code.as_deref(), Some("insufficient_funds"));
    let last = db.store.transitions(id).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.from_state.as_deref(), last.cause.as_str()),
        (Some("EN_REVISION"), "review_lookup_declined")
    );
    // A retryable decline keeps the engine's business-retry logic: the
    // order's next attempt is scheduled and the customer told.
    assert!(done.next_action_at.is_some(), "business retry scheduled");
    let notices = db.store.notices(false).await.unwrap();
    assert_eq!(
        notices.iter().map(|n| n.kind.as_str()).collect::<Vec<_>>(),
        ["retry_scheduled"]
    );
    db.drop_db().await;
}

fn engine(store: &Store, gateway_url: &str, key_lifetime: Duration) -> Engine {
    let name = format!("janitor-{}", Uuid::new_v4().simple());
    // One quick check, then review: the janitor is what is tested.
    let schedule = CheckSchedule::parse("50ms", 0.0).unwrap();
    Engine::new(
        store.clone(),
        Arc::new(sim_gateway(gateway_url)),
        EngineConfig {
            key_lifetime,
            review: ReviewSchedule::parse("2500ms,3s").unwrap(),
            ..engine_config(&name, schedule)
        },
    )
}

/// Claimed and unknown by hand (nothing reached the gateway).
async fn in_doubt(store: &Store, order: &str) -> Uuid {
    let id = enqueue(store, order).await;
    let a = store.load(id).await.unwrap().0;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Unknown, None).await;
    id
}

/// Waits until the attempt's next check is due (database clock).
async fn until_due(store: &Store, id: Uuid) {
    let (a, now) = store.load(id).await.unwrap();
    let wait = (a.next_action_at.unwrap() - now)
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(60)).await;
}

async fn not_found_stays_in_review_and_the_next_check_follows_the_schedule(db: &TestDb) {
    let sim = start_sim(true, lookups_fail()).await;
    let e = engine(&db.store, &sim.url(), Duration::from_secs(86_400));
    let id = in_doubt(&db.store, "rev-missing").await;
    // The one check fails: checks exhausted, in review, first janitor check
    // 2.5 s after entering review.
    e.process(id).await.unwrap();
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::EnRevision);
    let at = entered(&db.store, id).await;
    assert!(
        (ms(a.next_action_at.unwrap() - at) - 2500).abs() <= 30,
        "first check {:?} after entering review",
        a.next_action_at.unwrap() - at
    );

    // Not due yet (more than the 1.1 s a wake-up waits out): it does nothing.
    e.process(id).await.unwrap();
    assert_eq!(ledger(&sim.url()).await.stats.lookup_requests, 1);

    // Due, and the gateway has nothing: still in review, next check on the
    // schedule from the entry (2.5 s + 3 s), recorded as a check.
    set_faults(&sim.url(), &Faults::default()).await;
    until_due(&db.store, id).await;
    let log_len = db.store.transitions(id).await.unwrap().len();
    e.process(id).await.unwrap();
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::EnRevision);
    assert!(a.lease_owner.is_none());
    // (the write lands a few ms after the time it was computed at)
    assert!(
        (-5..=50).contains(&(ms(a.next_action_at.unwrap() - at) - 5500)),
        "second check {:?} after entering review",
        a.next_action_at.unwrap() - at
    );
    assert_eq!(a.check_count, 2);
    let checks = db.store.checks(id).await.unwrap();
    let last = checks.last().unwrap();
    assert_eq!(
        (last.lookup_result.as_str(), last.check_number),
        ("not_found", 2)
    );
    assert!(last.actor.starts_with("worker:janitor-"), "{}", last.actor);
    assert_eq!(
        db.store.transitions(id).await.unwrap().len(),
        log_len,
        "no state change"
    );
    let stats = ledger(&sim.url()).await.stats;
    assert_eq!((stats.lookup_requests, stats.charge_requests), (2, 0));

    // Finance's single "check again now" still goes through DESCONOCIDO;
    // its lookup counts past the schedule, so "not found" returns it to
    // review (a fresh schedule), never to a send.
    check_now(&db.store, &a, "look once more").await;
    e.process(id).await.unwrap();
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::EnRevision);
    let again = entered(&db.store, id).await;
    assert!(again > at);
    assert!((ms(a.next_action_at.unwrap() - again) - 2500).abs() <= 30);
    assert_eq!(a.send_count, 1, "its first send only: never sent again");
    assert_eq!(ledger(&sim.url()).await.stats.charge_requests, 0);
    sim.shutdown().await;
}

async fn past_the_key_lifetime_the_janitor_reads_the_listing_and_never_resends(db: &TestDb) {
    // Charged, answer lost; every lookup by key fails. The listing works.
    let sim = start_sim(true, answers_lost_lookups_fail()).await;
    // The gateway keeps keys 1 s: the janitor's first check (2.5 s after
    // review) is past it.
    let e = engine(&db.store, &sim.url(), Duration::from_secs(1));
    let charged = enqueue(&db.store, "rev-charged").await;
    e.process(charged).await.unwrap();
    let missing = in_doubt(&db.store, "rev-never-sent").await;
    e.process(missing).await.unwrap();
    for id in [charged, missing] {
        let (a, _) = db.store.load(id).await.unwrap();
        assert_eq!(a.state, State::EnRevision, "{id}");
    }
    let before = ledger(&sim.url()).await.stats;
    assert_eq!((before.charge_requests, before.lookup_requests), (1, 2));

    until_due(&db.store, charged).await;
    until_due(&db.store, missing).await;
    e.process(charged).await.unwrap();
    e.process(missing).await.unwrap();

    let (a, _) = db.store.load(charged).await.unwrap();
    assert_eq!(a.state, State::Aprobado);
    let l = ledger(&sim.url()).await;
    let key = a.idempotency_key.to_string();
    let entries: Vec<_> = l.entries_for_key(&key).collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        a.gateway_charge_id.as_deref(),
        Some(entries[0].charge_id.as_str())
    );
    let last = db.store.transitions(charged).await.unwrap().pop().unwrap();
    assert_eq!(last.cause, "review_listing_approved");

    let (m, _) = db.store.load(missing).await.unwrap();
    assert_eq!(m.state, State::EnRevision, "not listed: stays in review");
    assert!(m.next_action_at.unwrap() > Utc::now());
    let check = db.store.checks(missing).await.unwrap().pop().unwrap();
    assert_eq!(check.lookup_result, "not_found");
    assert_eq!(
        m.last_evidence.as_ref().unwrap()["call"],
        "list_charges",
        "looked up in the listing"
    );
    // No new charge request, no lookup by a key the gateway no longer keeps.
    assert_eq!(
        (l.stats.charge_requests, l.stats.lookup_requests),
        (1, 2),
        "past the key lifetime: no send, no lookup by key"
    );
    assert_eq!(l.entries.len(), 1);
    sim.shutdown().await;
}
