//! Each card network's retry caps apply to its own cards (issue 29 item 5,
//! follow-up), on both backends: a Visa card is held to Visa's 15 retries
//! in 30 days only (its 11th in a day goes through), a Mastercard to 10 in
//! 24 hours and 35 in 30 days only (its 16th in 30 days goes through), and
//! a card whose brand is unknown (never reported, or another network) to
//! every cap. The brand is the one the gateway's answers reported, kept in
//! the transition log's evidence; once it comes through the real path (the
//! simulator declines a `pm_card_mastercard`, the worker records it). The
//! history is backdated, not waited for.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::gateway::Evidence;
use cobro::state::{Event, State};
use cobro::store::{Applied, Attempt, CardCaps, Change, RetryError, Store};
use common::*;

on_both_dbs!(
    a_visa_card_is_held_to_visas_cap_only,
    a_mastercard_is_held_to_mastercards_caps_only,
    an_unknown_brand_keeps_every_cap,
    the_brand_the_simulator_reports_decides_the_caps,
);

/// The caps of a default deployment (Visa 15/30 d, Mastercard 10/24 h and
/// 35/30 d).
fn caps() -> CardCaps {
    cobro::retry::CardCapArgs::default().caps()
}

/// A declined charge of `order` on `card`, the gateway's answer reporting
/// `brand` (none: the answer said nothing of it).
async fn declined_on(store: &Store, order: &str, card: &str, brand: Option<&str>) -> Attempt {
    let req = ChargeRequest::parse(order, 2_000, "USD", None, Some(card)).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    let ev = Evidence {
        call: "charge".into(),
        http_status: Some(402),
        error_kind: "declined".into(),
        card_brand: brand.map(str::to_owned),
        ..Default::default()
    };
    let mut c = Change::new(Some(Event::Declined), "test", "worker:test");
    c.decline_code = Some("insufficient_funds");
    c.evidence = Some(&ev);
    match store.apply(&a, &c).await.unwrap() {
        Applied::Moved(now) => *now,
        Applied::Lost => panic!("lost a race nobody runs"),
    }
}

/// `n` business retries of `card` (each of its own order, declined with no
/// brand in the answer), made now.
async fn retries(store: &Store, card: &str, from: usize, n: usize) {
    for i in from..from + n {
        let a = declined_on(store, &format!("{card}-{i}"), card, None).await;
        store
            .business_retry_capped(a.id, 4, caps(), "scheduler", None)
            .await
            .unwrap_or_else(|e| panic!("retry {} of {card}: {e}", i + 1));
    }
}

/// The refusal of the retry of `a`, as text; panics if it went through.
async fn refused(store: &Store, a: &Attempt) -> String {
    let e = store
        .business_retry_capped(a.id, 4, caps(), "scheduler", None)
        .await
        .unwrap_err();
    assert!(matches!(e, RetryError::CardCap(_)), "{e}");
    e.to_string()
}

async fn a_visa_card_is_held_to_visas_cap_only(db: &TestDb) {
    let s = &db.store;
    // The card's first charge was declined; the answer said "visa".
    let first = declined_on(s, "visa-first", "pm_v", Some("visa")).await;
    retries(s, "pm_v", 0, 10).await;
    // The 11th and more within 24 hours: Mastercard's 10 does not apply.
    s.business_retry_capped(first.id, 4, caps(), "scheduler", None)
        .await
        .expect("a Visa card's 11th retry in a day goes through");
    retries(s, "pm_v", 10, 4).await;
    // 15 in 30 days: the 16th is refused, by Visa's cap.
    let sixteenth = declined_on(s, "visa-16", "pm_v", None).await;
    let why = refused(s, &sixteenth).await;
    assert!(
        why.contains("15 business retries in the last 30 days")
            && why.contains("Visa's limit (COBRO_RETRY_CARD_CAP=15)")
            && why.contains("override_reason")
            && !why.contains("unknown"),
        "{why}"
    );
    assert_eq!(s.attempts_for_order("visa-16").await.unwrap().len(), 1);
}

async fn a_mastercard_is_held_to_mastercards_caps_only(db: &TestDb) {
    let s = &db.store;
    declined_on(s, "mc-first", "pm_m", Some("mastercard")).await;
    retries(s, "pm_m", 0, 10).await;
    // The 11th in 24 hours is refused, by Mastercard's daily cap.
    let eleventh = declined_on(s, "mc-11", "pm_m", None).await;
    let why = refused(s, &eleventh).await;
    assert!(
        why.contains("10 business retries in the last 24 hours")
            && why.contains("Mastercard's limit (COBRO_RETRY_MC_CAP_24H=10)")
            && !why.contains("unknown"),
        "{why}"
    );
    // Spread beyond 24 hours: the 16th in 30 days goes through (Visa's 15
    // does not apply to a Mastercard), and so on up to 35.
    two_days_ago(db, "pm_m").await;
    retries(s, "pm_m", 10, 6).await;
    two_days_ago(db, "pm_m").await;
    retries(s, "pm_m", 16, 10).await;
    two_days_ago(db, "pm_m").await;
    retries(s, "pm_m", 26, 9).await;
    // 35 in 30 days: the 36th is refused, by Mastercard's monthly cap.
    let why = refused(s, &eleventh).await;
    assert!(
        why.contains("35 business retries in the last 30 days")
            && why.contains("Mastercard's limit (COBRO_RETRY_MC_CAP_30D=35)"),
        "{why}"
    );
    assert_eq!(s.attempts_for_order("mc-11").await.unwrap().len(), 1);
}

async fn an_unknown_brand_keeps_every_cap(db: &TestDb) {
    let s = &db.store;
    // Another network's brand, and no brand at all: every cap applies.
    declined_on(s, "amex-first", "pm_a", Some("amex")).await;
    for card in ["pm_a", "pm_none"] {
        retries(s, card, 0, 10).await;
        let eleventh = declined_on(s, &format!("{card}-next"), card, None).await;
        let why = refused(s, &eleventh).await;
        assert!(
            why.contains("COBRO_RETRY_MC_CAP_24H=10")
                && why.contains("the card's brand is unknown: every network's caps apply"),
            "{card}: {why}"
        );
        // A day later Visa's 15 in 30 days still stops it.
        two_days_ago(db, card).await;
        retries(s, card, 10, 5).await;
        let why = refused(s, &eleventh).await;
        assert!(why.contains("COBRO_RETRY_CARD_CAP=15"), "{card}: {why}");
    }
}

/// The real path: the simulator, a real HTTP server, declines a
/// `pm_card_mastercard` and reports its brand; the worker records the
/// decline with it; the caps then are Mastercard's.
async fn the_brand_the_simulator_reports_decides_the_caps(db: &TestDb) {
    let s = &db.store;
    let faults = declining("insufficient_funds");
    let sim = start_sim(true, faults).await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    let card = "pm_card_mastercard";
    let req = ChargeRequest::parse("real-mc", 4_200, "EUR", None, Some(card)).unwrap();
    let id = s.enqueue(&req).await.unwrap().attempt_id;
    let real = settled(s, id, State::Rechazado, Duration::from_secs(15)).await;
    worker.stop().await;
    let l = ledger(&sim.url()).await;
    assert_eq!(
        l.entries[0].to_result().card_brand.as_deref(),
        Some("mastercard")
    );
    let log = s.transitions(id).await.unwrap();
    let decline = log.iter().find(|t| t.to_state == "RECHAZADO").unwrap();
    assert_eq!(
        decline.evidence.as_ref().unwrap()["card_brand"],
        "mastercard",
        "{log:?}"
    );

    // Ten retries of that card today: the eleventh is Mastercard's to refuse.
    retries(s, card, 0, 10).await;
    let why = refused(s, &real).await;
    assert!(
        why.contains("COBRO_RETRY_MC_CAP_24H=10") && !why.contains("unknown"),
        "{why}"
    );
    // Spread over days, 16 in 30 days: the next goes through (Visa's 15
    // would have stopped an unknown brand).
    two_days_ago(db, card).await;
    retries(s, card, 10, 6).await;
    s.business_retry_capped(real.id, 4, caps(), "scheduler", None)
        .await
        .expect("a Mastercard's 17th retry in 30 days goes through");
    sim.shutdown().await;
}
