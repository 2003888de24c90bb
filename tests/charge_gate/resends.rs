//! What holds a send that follows a lookup, found by a review of the
//! worker's decisions: a resend after "not found" is a new charge at the
//! gateway, so it meets the holds a first send meets; and finance's "check
//! now" of an attempt that was never sent looks it up and never sends it.

use cobro::domain::ChargeRequest;
use cobro::finance;
use cobro::sim::Faults;
use cobro::state::{Event, State};

use super::common::{
    self, TestDb, causes, check_now, due_now, enqueued, ledger, open_case, raw_send_is_held,
    start_sim, step,
};

on_both_dbs!(
    a_resend_after_not_found_meets_the_hold,
    check_now_of_an_attempt_never_sent_never_sends_it,
);

/// Retry #2 of an order was sent, its answer lost, and a late approval of
/// #1 opened a case meanwhile. The lookup of #2 finds nothing, so a resend
/// would be executed as a new charge beside #1's: the order charged twice.
/// The database refuses it, the worker gives #2 to finance.
async fn a_resend_after_not_found_meets_the_hold(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let req = ChargeRequest::parse("resend-held", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = step(&db.store, &a, Event::Unknown, None).await;
    assert_eq!(a.state, State::Desconocido);
    open_case(db, "unmatched_charge", "resend-held", "ch_late", "{}").await;

    // A raw resend (that writes its log row) meets the rule...
    raw_send_is_held(db, a.id).await;
    // ...and so does the worker's, after its lookup.
    let engine = common::engine(&db.store, &sim.url(), "worker-resend");
    due_now(db, a.id).await;
    engine.process(a.id).await.unwrap();
    let (held, _) = db.store.load(a.id).await.unwrap();
    assert_eq!(held.state, State::EnRevision, "{held:?}");
    assert_eq!(
        causes(&db.store, a.id).await.last().map(String::as_str),
        Some("order_held")
    );
    assert_eq!(held.check_count, 1, "the lookup is recorded");
    let stats = ledger(&sim.url()).await.stats;
    assert_eq!((stats.lookup_requests, stats.charge_requests), (1, 0));
    sim.shutdown().await;
}

/// The review's sequence: a charge held before its first send goes to
/// finance unsent; finance's "check now" looks it up. "Not found" is
/// certain for an attempt never sent, and a send then would be a first send
/// decided by a lookup, whether the case is still open or closed since.
async fn check_now_of_an_attempt_never_sent_never_sends_it(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let req = ChargeRequest::parse("check-now-held", 3_000, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let case = open_case(db, "unmatched_charge", "check-now-held", "ch_late", "{}").await;
    let engine = common::engine(&db.store, &sim.url(), "worker-check-now");
    engine.process(a.id).await.unwrap();
    assert_eq!(
        db.store.load(a.id).await.unwrap().0.state,
        State::EnRevision
    );

    for case_open in [true, false] {
        if !case_open {
            finance::resolve_case(&db.store, case, "ana", "the late approval was refunded")
                .await
                .unwrap();
        }
        let (seen, _) = db.store.load(a.id).await.unwrap();
        check_now(&db.store, &seen, "look once more").await;
        engine.process(a.id).await.unwrap();
        let (back, _) = db.store.load(a.id).await.unwrap();
        assert_eq!(back.state, State::EnRevision, "case open: {case_open}");
        assert_eq!(
            causes(&db.store, a.id).await.last().map(String::as_str),
            Some("lookup_not_found_never_sent"),
            "case open: {case_open}"
        );
        assert_eq!(back.next_action_at, None, "nothing for the janitor to find");
    }
    let stats = ledger(&sim.url()).await.stats;
    assert_eq!((stats.lookup_requests, stats.charge_requests), (2, 0));
    sim.shutdown().await;
}
