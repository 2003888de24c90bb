//! Card-network retry rules through a real worker and the simulator, on
//! both backends: a decline whose network advice says "do not try again"
//! (Mastercard merchant advice code 03) gets no business retry even though
//! its code is in the allow-list (not even finance's by hand), and the
//! customer is told it failed; a
//! "retry after 8 days" (MAC 29) pushes the retry out to 8 days, past the
//! schedule's 1 day.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::State;
use cobro::store::{Attempt, RetryError, Store};
use common::*;

on_both_dbs!(the_networks_advice_decides_the_business_retry,);

fn declining_with(advice: &str) -> Faults {
    Faults {
        p_decline: 1.0,
        decline_codes: vec!["insufficient_funds".into()],
        decline_network_advice: Some(advice.into()),
        ..Faults::default()
    }
}

async fn declined(store: &Store, order: &str) -> (Attempt, chrono::DateTime<chrono::Utc>) {
    let req = ChargeRequest::parse(order, 4_200, "EUR", None, Some("pm_test")).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    eventually(Duration::from_secs(15), "the decline", || async {
        let (a, now) = store.load(id).await.unwrap();
        (a.state == State::Rechazado).then_some((a, now))
    })
    .await
}

async fn the_networks_advice_decides_the_business_retry(db: &TestDb) {
    let (sim, worker) = sim_and_worker(db, declining_with("03")).await;

    // "Do not try again": insufficient_funds alone would be retried in a day.
    let (a, _) = declined(&db.store, "advice-03").await;
    assert_eq!(
        a.decline_code.as_deref(),
        Some("insufficient_funds/do_not_try_again")
    );
    assert_eq!(a.next_action_at, None, "no business retry");
    let notices = db.store.notices(false).await.unwrap();
    assert!(
        notices
            .iter()
            .any(|n| n.attempt_id == a.id && n.kind == "payment_failed"),
        "{notices:?}"
    );
    // Not even finance's manual retry.
    let by_hand = db.store.business_retry(a.id, 4, "manual:ana", None).await;
    assert!(
        matches!(&by_hand, Err(RetryError::NetworkAdvice(m)) if m.contains("do_not_try_again")),
        "{by_hand:?}"
    );
    let l = ledger(&sim.url()).await;
    assert_eq!(l.entries.len(), 1);
    assert_eq!(l.entries[0].network_advice_code.as_deref(), Some("03"));

    // "Retry after 8 days": the retry waits at least that, not the
    // schedule's 1 day ±20 %.
    set_faults(&sim.url(), &declining_with("29")).await;
    let (a, now) = declined(&db.store, "advice-29").await;
    assert_eq!(
        a.decline_code.as_deref(),
        Some("insufficient_funds/retry_after_192h")
    );
    let wait = (a.next_action_at.expect("a retry is scheduled") - now).num_seconds();
    let eight_days = 8 * 86_400;
    assert!(
        (eight_days - 60..=eight_days + 60).contains(&wait),
        "retry in {wait}s, advised 8 days"
    );
    let scheduled = db.store.notices(false).await.unwrap();
    assert!(
        scheduled
            .iter()
            .any(|n| n.attempt_id == a.id && n.kind == "retry_scheduled"),
        "{scheduled:?}"
    );

    finish(worker, sim).await;
}
