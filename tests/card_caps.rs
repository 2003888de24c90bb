//! Every card network's cap at every door (issue 29 item 5): Mastercard's
//! 10 retries of one card in 24 hours and 35 in 30 days beside Visa's 15
//! in 30 days, in the database's rule; finance's manual retry is refused
//! at a cap unless it records an override with a reason, which is kept in
//! the append-only log, carried to the new attempt and shown on it. On
//! both backends; the history is backdated, not waited for.

#[macro_use]
mod common;

use cobro::domain::ChargeRequest;
use cobro::state::Event;
use cobro::store::{Attempt, CardCaps, RetryError, Store};
use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    mastercard_refuses_the_eleventh_retry_in_a_day_and_the_thirty_sixth_in_thirty_days,
    a_manual_retry_at_a_cap_needs_an_override_with_a_reason,
    the_command_line_retry_honours_the_caps_unless_overridden,
);

/// The caps of a default deployment (Visa 15/30 d, Mastercard 10/24 h and
/// 35/30 d; every cap applies, as cobro does not know the card's brand).
fn default_caps() -> CardCaps {
    cobro::retry::CardCapArgs::default().caps()
}

/// A declined charge of `order` on `card`, its retry scheduled.
async fn declined_on(store: &Store, order: &str, card: &str) -> Attempt {
    let req = ChargeRequest::parse(order, 2_000, "USD", None, Some(card)).unwrap();
    let a = enqueued(store, &req).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Declined, Some("insufficient_funds")).await
}

/// `n` business retries of `card` (each of its own order), made now.
async fn retries(db: &TestDb, card: &str, from: usize, n: usize, caps: CardCaps) {
    for i in from..from + n {
        let a = declined_on(&db.store, &format!("{card}-{i}"), card).await;
        db.store
            .business_retry_capped(a.id, 4, caps, "scheduler", None)
            .await
            .unwrap_or_else(|e| panic!("retry {} of {card}: {e}", i + 1));
    }
}

async fn mastercard_refuses_the_eleventh_retry_in_a_day_and_the_thirty_sixth_in_thirty_days(
    db: &TestDb,
) {
    // 24 hours: ten retries go through, the eleventh is refused by name.
    retries(db, "pm_mc_day", 0, 10, default_caps()).await;
    let eleventh = declined_on(&db.store, "pm_mc_day-10", "pm_mc_day").await;
    let refused = db
        .store
        .business_retry_capped(eleventh.id, 4, default_caps(), "scheduler", None)
        .await
        .unwrap_err();
    assert!(matches!(refused, RetryError::CardCap(_)), "{refused}");
    let why = refused.to_string();
    assert!(
        why.contains("10 business retries in the last 24 hours")
            && why.contains("Mastercard's limit (COBRO_RETRY_MC_CAP_24H=10)")
            && why.contains("override_reason"),
        "{why}"
    );
    assert_eq!(
        db.store
            .attempts_for_order("pm_mc_day-10")
            .await
            .unwrap()
            .len(),
        1,
        "nothing written"
    );
    // The day is over (the history backdated): the eleventh goes through.
    two_days_ago(db, "pm_mc_day").await;
    db.store
        .business_retry_capped(eleventh.id, 4, default_caps(), "scheduler", None)
        .await
        .expect("a day later the 24-hour cap lets it through");

    // 30 days: Visa's 15 would stop the 16th first (an unknown brand gets
    // every cap), so this deployment sets COBRO_RETRY_CARD_CAP=0.
    let mastercard = CardCaps {
        visa_30d: None,
        ..default_caps()
    };
    for batch in 0..3 {
        retries(db, "pm_mc_month", batch * 10, 10, mastercard).await;
        two_days_ago(db, "pm_mc_month").await;
    }
    retries(db, "pm_mc_month", 30, 5, mastercard).await;
    let thirty_sixth = declined_on(&db.store, "pm_mc_month-35", "pm_mc_month").await;
    let refused = db
        .store
        .business_retry_capped(thirty_sixth.id, 4, mastercard, "scheduler", None)
        .await
        .unwrap_err();
    let why = refused.to_string();
    assert!(
        matches!(refused, RetryError::CardCap(_))
            && why.contains("35 business retries in the last 30 days")
            && why.contains("COBRO_RETRY_MC_CAP_30D=35"),
        "{why}"
    );
    // With the default caps Visa's 15 in 30 days speaks first.
    let visa = db
        .store
        .business_retry_capped(thirty_sixth.id, 4, default_caps(), "scheduler", None)
        .await
        .unwrap_err()
        .to_string();
    assert!(visa.contains("COBRO_RETRY_CARD_CAP=15"), "{visa}");
    // Another card is not affected.
    retries(db, "pm_other", 0, 1, mastercard).await;
}

async fn a_manual_retry_at_a_cap_needs_an_override_with_a_reason(db: &TestDb) {
    retries(db, "pm_busy", 0, 10, default_caps()).await;
    let a = declined_on(&db.store, "busy-order", "pm_busy").await;
    let web = web_on(&db.store).await;
    let http = reqwest::Client::new();
    let retry = |body: Option<Value>| retry_of(&http, &web.url, a.id, body);
    let logged = |id| {
        let store = db.store.clone();
        async move { store.transitions(id).await.unwrap().len() }
    };
    let before = logged(a.id).await;

    // At the cap: refused, naming the cap and how to override; nothing written.
    for body in [None, Some(json!({}))] {
        let (status, err) = retry(body).await;
        assert_eq!(status, 409, "{err}");
        let why = err["error"].as_str().unwrap_or_default();
        assert!(
            why.contains("COBRO_RETRY_MC_CAP_24H=10") && why.contains("override_reason"),
            "{err}"
        );
    }
    // An override without a reason is refused, naming the field.
    for reason in [json!(""), json!("   "), json!("a\u{0}b"), json!(7)] {
        let (status, err) = retry(Some(json!({ "override_reason": reason }))).await;
        assert_refused(status, &err, 422, "override_reason");
    }
    assert_eq!(logged(a.id).await, before, "a refusal writes nothing");
    assert_eq!(db.store.load(a.id).await.unwrap().0.version, a.version);

    // With a reason it goes through: kept in the declined attempt's log...
    let reason = "customer phoned: salary arrived, asked us to try again";
    let (status, asked) = retry(Some(json!({ "override_reason": reason }))).await;
    assert_eq!(status, 202, "{asked}");
    assert_eq!(asked["cap_override"], reason);
    let log = db.store.transitions(a.id).await.unwrap();
    let last = log.last().unwrap();
    assert_eq!(
        (
            last.cause.as_str(),
            last.actor.as_str(),
            last.error_kind.as_deref()
        ),
        ("retry_requested", "finance:luis", Some("cap_override"))
    );
    assert_eq!(last.evidence.as_ref().unwrap()["detail"], reason);

    // ... and the database's rule lets the worker's retry (the same caps)
    // through, carrying the reason onto the new attempt.
    let (seen, _) = db.store.load(a.id).await.unwrap();
    let new = db
        .store
        .business_retry_capped(a.id, 4, default_caps(), "worker:w", Some(seen.version))
        .await
        .expect("the override lets the retry through");
    assert_eq!(new.cap_override.as_deref(), Some(reason));
    let first = &db.store.transitions(new.attempt_id).await.unwrap()[0];
    assert_eq!(first.cause, "business_retry");
    assert_eq!(first.evidence.as_ref().unwrap()["cap_override"], reason);

    // Shown on the attempt: the finance API and the page.
    let detail: Value = get_json(
        &format!("{}/finance/api/attempts/{}", web.url, new.attempt_id),
        As::Bearer("ana"),
    )
    .await;
    assert!(detail.to_string().contains(reason), "{detail}");
    let page = get_text(
        &format!("{}/finance/attempts/{}", web.url, new.attempt_id),
        As::Bearer("ana"),
    )
    .await;
    assert!(
        page.contains("card-network caps overridden by finance: customer phoned"),
        "{page}"
    );

    // The override served that request only: the next card retry is capped.
    let other = declined_on(&db.store, "busy-order-2", "pm_busy").await;
    let (status, err) = retry_of(&http, &web.url, other.id, None).await;
    assert_eq!(status, 409, "{err}");
    web.stop().await;
}

async fn retry_of(
    http: &reqwest::Client,
    url: &str,
    id: uuid::Uuid,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http
        .post(format!("{url}/finance/api/attempts/{id}/retry"))
        .bearer_auth(secret("luis"));
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json::<Value>().await.unwrap())
}

fn cobro(db: &TestDb, args: &[&str]) -> std::process::Output {
    cobro_cmd(&db.url, args)
        .env_remove("COBRO_RETRY_CARD_CAP")
        .env_remove("COBRO_RETRY_MC_CAP_24H")
        .env_remove("COBRO_RETRY_MC_CAP_30D")
        .output()
        .expect("run cobro")
}

/// `cobro retry`, the same door by shell: refused at a cap naming it and
/// the flag; an empty reason refused naming the field; with a reason the
/// request is accepted and the reason kept in the log.
async fn the_command_line_retry_honours_the_caps_unless_overridden(db: &TestDb) {
    retries(db, "pm_cli", 0, 10, default_caps()).await;
    let a = declined_on(&db.store, "cli-capped", "pm_cli").await;
    let id = a.id.to_string();
    let base = [
        "retry",
        "--attempt",
        id.as_str(),
        "--actor",
        "ana",
        "--json",
    ];
    let before = db.store.transitions(a.id).await.unwrap().len();

    let out = cobro(db, &base);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("COBRO_RETRY_MC_CAP_24H=10") && err.contains("--override-reason"),
        "{err}"
    );
    let out = cobro(db, &[&base[..], &["--override-reason", "  "]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("override_reason"),
        "{err}"
    );
    assert_eq!(db.store.transitions(a.id).await.unwrap().len(), before);

    let why = "finance call 2026-12-03: customer asked";
    let out = cobro(db, &[&base[..], &["--override-reason", why]].concat());
    assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cap_override"], why);
    let log = db.store.transitions(a.id).await.unwrap();
    let last = log.last().unwrap();
    assert_eq!(
        (last.actor.as_str(), last.error_kind.as_deref()),
        ("manual:ana", Some("cap_override"))
    );
    assert_eq!(last.evidence.as_ref().unwrap()["detail"], why);
}
