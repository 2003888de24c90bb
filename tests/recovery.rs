//! Whether business retries pay, read from the rows on `/metrics`: orders
//! declined, retried with a new attempt through the store's own business
//! retry, and settled through the state machine; each retry counted under
//! the class of the decline before it, and the recovered share of the
//! settled ones per class. A refund sharing the order id is not a retry's
//! predecessor. On both backends.

#[macro_use]
mod common;

use cobro::domain::ChargeRequest;
use cobro::state::Event;
use cobro::store::{Attempt, RetryOutcome, Store};
use common::*;

on_both_dbs!(retries_are_counted_by_the_class_of_the_decline_before_them,);

/// How a retry is left.
#[derive(Clone, Copy)]
enum Then {
    Approve,
    Decline(&'static str),
    /// Claimed, no answer yet (`EN_PROCESO`).
    Claim,
    /// Not touched (`PENDIENTE`).
    Leave,
}

async fn declined_first(store: &Store, order: &str, code: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 1_500, "USD", None, Some("pm_test_visa")).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Declined, Some(code)).await
}

/// Retries the declined `a` (as finance's manual retry does) and moves the
/// new attempt as told.
async fn retry(store: &Store, a: &Attempt, then: Then) -> Attempt {
    let r = store.business_retry(a.id, 4, "test", None).await.unwrap();
    assert_eq!(r.attempt_number, a.attempt_number + 1);
    let (n, _) = store.load(r.attempt_id).await.unwrap();
    let claimed = match then {
        Then::Leave => return n,
        _ => step(store, &n, Event::Claim, None).await,
    };
    match then {
        Then::Approve => step(store, &claimed, Event::Approved, None).await,
        Then::Decline(code) => step(store, &claimed, Event::Declined, Some(code)).await,
        Then::Claim | Then::Leave => claimed,
    }
}

async fn scrape(base: &str) -> String {
    let resp = get_as(&format!("{base}/metrics"), As::Bearer("prom")).await;
    assert_eq!(resp.status(), 200);
    resp.text().await.expect("body")
}

fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let prefix = format!("{name}{{");
    text.lines().filter(|l| l.starts_with(&prefix)).collect()
}

async fn retries_are_counted_by_the_class_of_the_decline_before_them(db: &TestDb) {
    let s = &db.store;
    let v = test_verifier();
    let web = start_web(s, v).await;

    let before = scrape(&web.url).await;
    assert!(
        before.contains(
            "cobro_business_retries{class=\"insufficient_funds\",outcome=\"recovered\"} 0"
        )
    );
    assert!(samples(&before, "cobro_business_retry_recovery_ratio").is_empty());

    // insufficient_funds: recovered on the 2nd attempt; refunded in part
    // (the refund is attempt 1 of the order too, and must not count).
    let a = declined_first(s, "rec-funds-a", "insufficient_funds").await;
    let won = retry(s, &a, Then::Approve).await;
    ask_refund(s, won.id, 500, "test").await;
    // insufficient_funds twice: the 2nd attempt declined, the 3rd recovered.
    let b1 = declined_first(s, "rec-funds-b", "insufficient_funds").await;
    let b2 = retry(s, &b1, Then::Decline("insufficient_funds")).await;
    retry(s, &b2, Then::Approve).await;
    // issuer_unavailable (two codes of the class): one recovered, one
    // declined with another class's code, one still in flight.
    let c = declined_first(s, "rec-issuer-c", "processing_error").await;
    retry(s, &c, Then::Approve).await;
    let d1 = declined_first(s, "rec-issuer-d", "try_again_later").await;
    let d2 = retry(s, &d1, Then::Decline("do_not_honor")).await;
    retry(s, &d2, Then::Leave).await;
    let e = declined_first(s, "rec-issuer-e", "try_again_later").await;
    retry(s, &e, Then::Claim).await;
    // A declined order never retried counts nowhere.
    declined_first(s, "rec-never", "stolen_card").await;

    // The store's tally: by the previous attempt's code and outcome.
    let g = s.gauges().await.unwrap();
    let mut tally: Vec<(Option<&str>, &str, i64)> = g
        .business_retries
        .iter()
        .map(|t| (t.decline_code.as_deref(), t.outcome.as_str(), t.count))
        .collect();
    tally.sort();
    assert_eq!(
        tally,
        vec![
            (Some("do_not_honor"), RetryOutcome::Pending.as_str(), 1),
            (Some("insufficient_funds"), "declined", 1),
            (Some("insufficient_funds"), "recovered", 2),
            (Some("processing_error"), "recovered", 1),
            (Some("try_again_later"), "declined", 1),
            (Some("try_again_later"), "pending", 1),
        ]
    );

    // The scrape: every (class, outcome) pair, and the ratio where settled.
    let text = scrape(&web.url).await;
    let mut counts: Vec<&str> = samples(&text, "cobro_business_retries")
        .into_iter()
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    counts.sort();
    assert_eq!(
        counts,
        vec![
            "cobro_business_retries{class=\"generic_declined\",outcome=\"pending\"} 1",
            "cobro_business_retries{class=\"insufficient_funds\",outcome=\"declined\"} 1",
            "cobro_business_retries{class=\"insufficient_funds\",outcome=\"recovered\"} 2",
            "cobro_business_retries{class=\"issuer_unavailable\",outcome=\"declined\"} 1",
            "cobro_business_retries{class=\"issuer_unavailable\",outcome=\"pending\"} 1",
            "cobro_business_retries{class=\"issuer_unavailable\",outcome=\"recovered\"} 1",
        ],
        "{text}"
    );
    assert_eq!(samples(&text, "cobro_business_retries").len(), 8 * 3);
    let mut ratios = samples(&text, "cobro_business_retry_recovery_ratio");
    ratios.sort();
    let two_thirds = format!(
        "cobro_business_retry_recovery_ratio{{class=\"insufficient_funds\"}} {}",
        2.0 / 3.0
    );
    assert_eq!(
        ratios,
        vec![
            two_thirds.as_str(),
            "cobro_business_retry_recovery_ratio{class=\"issuer_unavailable\"} 0.5",
        ],
        "generic_declined has only a pending retry: no ratio"
    );
    assert!(text.contains("# TYPE cobro_business_retry_recovery_ratio gauge"));

    web.stop().await;
}
