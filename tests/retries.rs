//! Business retries: a declined order may get a NEW attempt with a NEW key,
//! only when nothing for that order is approved or still in doubt. Seed
//! 003's pre-deploy test 4 and the guards around it, on both backends.

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, Change, RetryError, Store};
use common::*;
use uuid::Uuid;

on_both_dbs!(
    seed_test_4_two_parallel_retries_one_fails_on_the_uniqueness_constraint,
    a_hundred_orders_times_fifty_concurrent_triggers_make_one_attempt_each,
    no_retry_while_in_doubt_or_approved,
    the_maximum_number_of_attempts_is_respected,
    a_retryable_decline_is_retried_later_with_a_new_key_and_a_final_one_never,
    notices_are_written_with_their_cause_and_acknowledged_once,
    a_scheduled_retry_runs_once_even_when_woken_twice_or_late,
    the_sixteenth_retry_of_one_card_in_thirty_days_is_refused,
);

/// An order whose first attempt was declined.
async fn declined(store: &Store, order: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 2_000, "USD", None, None).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Declined, Some("insufficient_funds")).await
}

async fn seed_test_4_two_parallel_retries_one_fails_on_the_uniqueness_constraint(db: &TestDb) {
    let first = declined(&db.store, "retry-race").await;
    let (x, y) = futures::join!(
        db.store.business_retry(first.id, 4, "finance:ana", None),
        db.store.business_retry(first.id, 4, "scheduler", None),
    );
    let (won, lost) = match (x, y) {
        (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
        other => panic!("exactly one retry must win: {other:?}"),
    };
    assert!(matches!(lost, RetryError::AlreadyRetrying(_)), "{lost:?}");
    assert_eq!(won.attempt_number, 2);
    assert_ne!(
        won.idempotency_key, first.idempotency_key,
        "a new attempt has a new key"
    );
    let attempts = db.store.attempts_for_order("retry-race").await.unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[1].kind, "business_retry");
    assert_eq!(attempts[1].state, State::Pendiente);
    let log = db.store.transitions(won.attempt_id).await.unwrap();
    assert_eq!(log[0].cause, "business_retry");
}

async fn a_hundred_orders_times_fifty_concurrent_triggers_make_one_attempt_each(db: &TestDb) {
    let mut firsts = Vec::new();
    for i in 0..100 {
        firsts.push(declined(&db.store, &format!("storm-{i:03}")).await.id);
    }
    let store = Arc::new(db.store.clone());
    let limit = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = Vec::new();
    for round in 0..50 {
        for id in &firsts {
            let (store, limit, id) = (store.clone(), limit.clone(), *id);
            tasks.push(tokio::spawn(async move {
                let _slot = limit.acquire().await.unwrap();
                let actor = format!("trigger-{round}");
                store.business_retry(id, 4, &actor, None).await
            }));
        }
    }
    let mut created = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => created += 1,
            Err(RetryError::AlreadyRetrying(_)) => {}
            Err(other) => panic!("a trigger failed otherwise: {other:?}"),
        }
    }
    assert_eq!(created, 100, "exactly one new attempt per order");
    assert_eq!(db.attempts().await, 200);
    let states = db.store.count_by_state().await.unwrap();
    assert_eq!(states, [(State::Pendiente, 100), (State::Rechazado, 100)]);
}

async fn no_retry_while_in_doubt_or_approved(db: &TestDb) {
    let retry = |id: Uuid| db.store.business_retry(id, 9, "finance", None);

    // The attempt itself is in doubt: only a declined attempt is retried.
    let req = ChargeRequest::parse("doubt-1", 500, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Unknown, None).await;
    assert!(matches!(retry(a.id).await, Err(RetryError::NotDeclined(_))));
    let a = step(&db.store, &a, Event::ChecksExhausted, None).await;
    assert_eq!(a.state, State::EnRevision);
    assert!(matches!(retry(a.id).await, Err(RetryError::NotDeclined(_))));

    // A declined attempt whose order has another attempt in doubt (DESCONOCIDO, then EN_REVISION).
    let first = declined(&db.store, "doubt-2").await;
    let second = db
        .store
        .business_retry(first.id, 9, "t", None)
        .await
        .unwrap();
    let (s, _) = db.store.load(second.attempt_id).await.unwrap();
    let s = step(&db.store, &s, Event::Claim, None).await;
    let s = step(&db.store, &s, Event::Unknown, None).await;
    assert!(matches!(
        retry(first.id).await,
        Err(RetryError::AlreadyRetrying(_))
    ));
    let s = step(&db.store, &s, Event::ChecksExhausted, None).await;
    assert!(matches!(
        retry(first.id).await,
        Err(RetryError::AlreadyRetrying(_))
    ));

    // An order with an approved attempt is never retried.
    let s = step(&db.store, &s, Event::Approved, None).await;
    assert_eq!(s.state, State::Aprobado);
    assert!(matches!(
        retry(first.id).await,
        Err(RetryError::AlreadyApproved(_))
    ));
    assert!(matches!(retry(s.id).await, Err(RetryError::NotDeclined(_))));
    assert_eq!(
        db.store.attempts_for_order("doubt-2").await.unwrap().len(),
        2
    );
}

async fn the_maximum_number_of_attempts_is_respected(db: &TestDb) {
    let mut last = declined(&db.store, "max-1").await;
    for n in 2..=4 {
        let r = db
            .store
            .business_retry(last.id, 4, "t", None)
            .await
            .unwrap();
        assert_eq!(r.attempt_number, n);
        let (a, _) = db.store.load(r.attempt_id).await.unwrap();
        let a = step(&db.store, &a, Event::Claim, None).await;
        last = step(&db.store, &a, Event::Declined, Some("insufficient_funds")).await;
    }
    let refused = db.store.business_retry(last.id, 4, "t", None).await;
    assert!(
        matches!(refused, Err(RetryError::MaxAttempts(_))),
        "{refused:?}"
    );
    assert_eq!(db.attempts().await, 4);
}

async fn a_retryable_decline_is_retried_later_with_a_new_key_and_a_final_one_never(db: &TestDb) {
    let (sim, worker) = sim_and_worker(db, declining("insufficient_funds")).await;
    let req = ChargeRequest::parse("later-1", 7_500, "USD", None, None).unwrap();
    let first = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = eventually(Duration::from_secs(10), "the decline", || async {
        let (a, now) = db.store.load(first).await.unwrap();
        (a.state == State::Rechazado).then_some((a, now))
    })
    .await;
    let (a, now) = a;
    let wait = (a.next_action_at.expect("a retry is scheduled") - now).num_seconds();
    assert!(
        (69_000..=104_000).contains(&wait),
        "retry in {wait}s, nominal 1 day ±20 %"
    );

    // A day passes (the database's clock is the injectable one), and the
    // gateway would now approve.
    set_faults(&sim.url(), &Faults::default()).await;
    due_now(db, first).await;
    let attempts = eventually(
        Duration::from_secs(15),
        "the retry to be approved",
        || async {
            let all = db.store.attempts_for_order("later-1").await.unwrap();
            (all.len() == 2 && all[1].state == State::Aprobado).then_some(all)
        },
    )
    .await;
    assert_eq!(
        attempts[0].next_action_at, None,
        "the declined attempt's retry is done"
    );
    assert_eq!(attempts[1].attempt_number, 2);
    let l = ledger(&sim.url()).await;
    let keys: Vec<_> = l
        .entries
        .iter()
        .map(|e| (e.idempotency_key.clone(), e.status.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            (
                attempts[0].idempotency_key.to_string(),
                "declined".to_string()
            ),
            (
                attempts[1].idempotency_key.to_string(),
                "approved".to_string()
            ),
        ],
        "two attempts, two different keys"
    );

    // A final decline is never retried.
    set_faults(&sim.url(), &declining("stolen_card")).await;
    let req = ChargeRequest::parse("final-1", 7_500, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = settled(&db.store, id, State::Rechazado, Duration::from_secs(10)).await;
    assert_eq!(a.decline_code.as_deref(), Some("stolen_card"));
    assert_eq!(
        a.next_action_at, None,
        "nothing scheduled after a final decline"
    );
    finish(worker, sim).await;
}

async fn notices_are_written_with_their_cause_and_acknowledged_once(db: &TestDb) {
    let first = declined(&db.store, "notice-1").await; // no retry scheduled by `step`
    let notices = db.store.notices(true).await.unwrap();
    assert_eq!(notices.len(), 1);
    let n = &notices[0];
    assert_eq!(
        (n.kind.as_str(), n.attempt_id),
        ("payment_failed", first.id)
    );
    assert_eq!(n.decline_code.as_deref(), Some("insufficient_funds"));
    // A transition that lost its compare-and-set writes no notice.
    let mut late = Change::new(Some(Event::Declined), "test", "test");
    late.decline_code = Some("insufficient_funds");
    let (stale, _) = db.store.load(first.id).await.unwrap();
    let claimed = Attempt {
        state: State::EnProceso,
        version: stale.version - 1,
        ..stale
    };
    assert_eq!(
        db.store.apply(&claimed, &late).await.unwrap(),
        Applied::Lost
    );
    assert_eq!(db.store.notices(false).await.unwrap().len(), 1);

    assert!(db.store.ack_notice(n.id, "app").await.unwrap());
    assert!(
        !db.store.ack_notice(n.id, "app").await.unwrap(),
        "acknowledged once"
    );
    assert!(db.store.notices(true).await.unwrap().is_empty());
    let all = db.store.notices(false).await.unwrap();
    assert_eq!(all[0].acked_by.as_deref(), Some("app"));
}

async fn a_scheduled_retry_runs_once_even_when_woken_twice_or_late(db: &TestDb) {
    let req = ChargeRequest::parse("sched-1", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let mut decline = Change::new(Some(Event::Declined), "test", "test");
    decline.decline_code = Some("insufficient_funds");
    decline.act_in = Some(Duration::from_millis(1));
    let Applied::Moved(a) = db.store.apply(&a, &decline).await.unwrap() else {
        panic!("decline")
    };
    assert!(a.next_action_at.is_some());
    // Two wake-ups (its own and the sweeper's) both saw version v.
    let (x, y) = futures::join!(
        db.store.business_retry(a.id, 4, "w1", Some(a.version)),
        db.store.business_retry(a.id, 4, "w2", Some(a.version)),
    );
    let (won, other) = match (x, y) {
        (Ok(w), Err(o)) | (Err(o), Ok(w)) => (w, o),
        other => panic!("exactly one scheduled retry must run: {other:?}"),
    };
    assert!(matches!(other, RetryError::AlreadyHandled(_)), "{other:?}");
    // The retry is then declined for good; a very late wake-up of the first
    // attempt must not create a third one.
    let (r, _) = db.store.load(won.attempt_id).await.unwrap();
    let r = step(&db.store, &r, Event::Claim, None).await;
    step(&db.store, &r, Event::Declined, Some("stolen_card")).await;
    let late = db
        .store
        .business_retry(a.id, 4, "w3", Some(a.version))
        .await;
    assert!(
        matches!(late, Err(RetryError::AlreadyHandled(_))),
        "{late:?}"
    );
    assert_eq!(db.attempts().await, 2);
}

/// The card network's rule (Visa: 15 retries of one card in 30 days),
/// across orders: the 16th business retry of one payment method is refused
/// with the reason; another card is not affected; the store's uncapped
/// call does not count (finance's manual retry is capped in
/// tests/card_caps.rs).
async fn the_sixteenth_retry_of_one_card_in_thirty_days_is_refused(db: &TestDb) {
    let on_card = |order: String, card: &'static str| {
        let store = db.store.clone();
        async move {
            let req = ChargeRequest::parse(&order, 2_000, "USD", None, Some(card)).unwrap();
            let a = enqueued(&store, &req).await;
            let a = step(&store, &a, Event::Claim, None).await;
            step(&store, &a, Event::Declined, Some("insufficient_funds")).await
        }
    };
    let cap = cobro::store::CardCaps::visa(Some(cobro::retry::DEFAULT_CARD_CAP));
    for i in 0..15 {
        let a = on_card(format!("cap-{i}"), "pm_card_capped").await;
        db.store
            .business_retry_capped(a.id, 4, cap, "scheduler", None)
            .await
            .unwrap_or_else(|e| panic!("retry {} of the card: {e}", i + 1));
    }
    let sixteenth = on_card("cap-15".into(), "pm_card_capped").await;
    let refused = db
        .store
        .business_retry_capped(sixteenth.id, 4, cap, "scheduler", None)
        .await
        .unwrap_err();
    assert!(matches!(refused, RetryError::CardCap(_)), "{refused}");
    let why = refused.to_string();
    assert!(
        why.contains("15 business retries in the last 30 days")
            && why.contains("COBRO_RETRY_CARD_CAP=15"),
        "{why}"
    );
    let other = on_card("cap-other".into(), "pm_card_other").await;
    db.store
        .business_retry_capped(other.id, 4, cap, "scheduler", None)
        .await
        .expect("another card is not capped");
    db.store
        .business_retry(sixteenth.id, 4, "finance:ana", None)
        .await
        .expect("the uncapped store call does not count");
}
