//! Stripe lookups through the real engine and store, on both backends:
//! a 429 on any lookup path (retrieve by id, search, list) defers the
//! check and never spends one of the 2-4-8-16-32 s checks; a search "not
//! found" within its lag leaves the attempt `DESCONOCIDO`, checked again,
//! with nothing re-sent; and against localstripe (which does not serve
//! search) the configured search falls back to the listing and finds the
//! PaymentIntent no id was recorded for.
//!
//! The gateway is a real HTTP server on 127.0.0.1 answering in Stripe's
//! shapes (search results, lists, PaymentIntents, 429 with `Retry-After`).

#[macro_use]
mod common;
#[path = "common/stripe.rs"]
mod stripe;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{OriginalUri, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use cobro::domain::ChargeRequest;
use cobro::gateway::stripe::{FindConfig, SecretKey};
use cobro::gateway::{StripeConfig, StripeGateway};
use cobro::state::{Event, State as St};
use cobro::store::{Applied, Change, Lease};
use common::*;
use serde_json::{Value, json};
use stripe::local_stripe;

on_both_dbs!(
    a_429_on_every_lookup_path_spends_no_check,
    a_search_not_found_within_its_lag_is_checked_again_and_nothing_is_sent,
    against_localstripe_search_falls_back_to_the_listing,
);

/// Which endpoint a request went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Search,
    List,
    Retrieve,
    /// A create or a confirm: a send.
    Post,
}

/// Status, body, `Retry-After`.
type Queue = VecDeque<(u16, Value, Option<&'static str>)>;

#[derive(Default)]
struct Fake {
    /// Answers given first, per route, before `truth`.
    first: Vec<(Route, Queue)>,
    truth: Vec<(Route, Value)>,
    seen: Vec<Route>,
}

type Shared = Arc<Mutex<Fake>>;

async fn answer(
    State(s): State<Shared>,
    method: Method,
    OriginalUri(uri): OriginalUri,
) -> Response {
    let route = match (method, uri.path()) {
        (Method::POST, _) => Route::Post,
        (_, "/v1/payment_intents/search") => Route::Search,
        (_, "/v1/payment_intents") => Route::List,
        _ => Route::Retrieve,
    };
    let mut f = s.lock().unwrap();
    f.seen.push(route);
    let queued = f
        .first
        .iter_mut()
        .find(|(r, _)| *r == route)
        .and_then(|(_, q)| q.pop_front());
    let (code, body, retry_after) = queued.unwrap_or_else(|| {
        f.truth
            .iter()
            .find(|(r, _)| *r == route)
            .map_or((500, json!({}), None), |(_, v)| (200, v.clone(), None))
    });
    let mut r = (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response();
    if let Some(v) = retry_after {
        r.headers_mut().insert("Retry-After", v.parse().unwrap());
    }
    r
}

async fn fake(f: Fake) -> (String, Shared) {
    let s: Shared = Arc::new(Mutex::new(f));
    let app = Router::new().fallback(answer).with_state(s.clone());
    let url = stand_in(app).await;
    (url, s)
}

/// An engine on Stripe's API at `api_base`, with the default 2-4-8-16-32 s
/// checks (so one `process` does one check) and a 300 ms deferral backoff.
fn engine(
    db: &TestDb,
    api_base: &str,
    find: FindConfig,
    created_filter: bool,
) -> cobro::engine::Engine {
    let gw = StripeGateway::new(StripeConfig {
        api_base: api_base.into(),
        secret_key: SecretKey::new(stripe::TEST_KEY),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        ca_file: None,
        off_session_retries: false,
        created_filter,
        find,
    })
    .unwrap();
    cobro::engine::Engine::new(
        db.store.clone(),
        Arc::new(gw),
        engine_config("lookups", cobro::backoff::CheckSchedule::default()),
    )
}

/// A charge whose confirm got no answer: `DESCONOCIDO`, with its
/// PaymentIntent recorded (`pi`) or not (a worker vanished before it could
/// record it).
async fn in_doubt(db: &TestDb, order: &str, pi: Option<&str>) -> (ChargeRequest, uuid::Uuid) {
    let req = ChargeRequest::parse(order, 50_000, "USD", None, Some("pm_card_visa")).unwrap();
    let a = enqueued(&db.store, &req).await;
    let id = a.id;
    let mut a = step(&db.store, &a, Event::Claim, None).await;
    if let Some(pi) = pi {
        let mut record = Change::new(
            Some(Event::Prepared),
            "payment_intent_created",
            "worker:gone",
        );
        record.gateway_ref = Some(pi);
        record.lease = Lease::Take {
            owner: "gone",
            ttl: Duration::from_secs(30),
        };
        let Applied::Moved(now) = db.store.apply(&a, &record).await.unwrap() else {
            panic!("nobody races this");
        };
        a = *now;
    }
    step(&db.store, &a, Event::Unknown, None).await;
    (req, id)
}

fn intent(id: &str, status: &str, key: &str) -> Value {
    json!({"id": id, "object": "payment_intent", "status": status, "amount": 50_000,
           "currency": "usd", "created": chrono::Utc::now().timestamp(),
           "metadata": {"cobro_key": key}})
}

async fn a_429_on_every_lookup_path_spends_no_check(db: &TestDb) {
    let search = FindConfig {
        search: true,
        ..FindConfig::default()
    };
    for (n, route, find) in [
        (1, Route::Retrieve, FindConfig::default()),
        (2, Route::Search, search),
        (3, Route::List, FindConfig::default()),
    ] {
        let order = format!("throttled-{n}");
        let pi = format!("pi_t{n}");
        let recorded = (route == Route::Retrieve).then_some(pi.as_str());
        let (req, id) = in_doubt(db, &order, recorded).await;
        let key = req.key.to_string();
        let truth = intent(&pi, "succeeded", &key);
        let throttled = (
            429,
            json!({"error": {"type": "rate_limit_error"}}),
            Some("2"),
        );
        let (url, seen) = fake(Fake {
            first: vec![(route, VecDeque::from([throttled]))],
            truth: vec![
                (Route::Retrieve, truth.clone()),
                (
                    Route::Search,
                    json!({"object": "search_result", "data": [truth.clone()], "has_more": false}),
                ),
                (
                    Route::List,
                    json!({"object": "list", "data": [truth], "has_more": false}),
                ),
            ],
            seen: Vec::new(),
        })
        .await;
        let e = engine(db, &url, find, true);

        // The 429: no check spent, still in doubt, looked up again later.
        e.process(id).await.unwrap();
        let (a, _) = db.store.load(id).await.unwrap();
        assert_eq!(a.state, St::Desconocido, "{route:?}");
        assert_eq!(a.check_count, 0, "{route:?}: a 429 is not a check");
        let ev = a.last_evidence.clone().unwrap_or_default();
        assert_eq!(ev["http_status"], 429, "{route:?}: {ev}");
        assert_eq!(ev["error_kind"], "throttled", "{route:?}: {ev}");
        assert!(
            a.next_action_at.is_some(),
            "{route:?}: looked up again later"
        );
        assert!(db.store.checks(id).await.unwrap().is_empty(), "{route:?}");

        // Then the truth: one check, approved, nothing sent.
        tokio::time::sleep(Duration::from_millis(2_300)).await;
        e.process(id).await.unwrap();
        let (a, _) = db.store.load(id).await.unwrap();
        assert_eq!(a.state, St::Aprobado, "{route:?}");
        assert_eq!(
            a.check_count, 1,
            "{route:?}: only the answered lookup counts"
        );
        assert_eq!(a.gateway_charge_id.as_deref(), Some(pi.as_str()));
        let seen = seen.lock().unwrap().seen.clone();
        assert!(
            !seen.contains(&Route::Post),
            "{route:?}: nothing re-sent: {seen:?}"
        );
        assert_eq!(seen.first(), Some(&route), "{seen:?}");
    }
}

async fn a_search_not_found_within_its_lag_is_checked_again_and_nothing_is_sent(db: &TestDb) {
    let (_, id) = in_doubt(db, "lagging-1", None).await;
    let (url, seen) = fake(Fake {
        truth: vec![(
            Route::Search,
            json!({"object": "search_result", "data": [], "has_more": false}),
        )],
        ..Fake::default()
    })
    .await;
    let find = FindConfig {
        search: true,
        search_lag: Duration::from_secs(60),
        max_pages: 10,
    };
    let e = engine(db, &url, find, true);
    e.process(id).await.unwrap();
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, St::Desconocido, "not a clearance");
    assert_eq!(a.check_count, 1, "a check, on the schedule");
    assert!(a.next_action_at.is_some(), "checked again");
    let checks = db.store.checks(id).await.unwrap();
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(checks[0].lookup_result, "failed", "{checks:?}");
    assert_eq!(
        checks[0].error_kind.as_deref(),
        Some("search_lag"),
        "{checks:?}"
    );
    assert_eq!(
        seen.lock().unwrap().seen,
        vec![Route::Search],
        "only the search; nothing re-sent"
    );
}

async fn against_localstripe_search_falls_back_to_the_listing(db: &TestDb) {
    let Some(ls) = local_stripe().await else {
        return;
    };
    let (req, id) = in_doubt(db, "unrecorded-1", None).await;
    // The vanished worker created and confirmed it; no id was recorded.
    let pi = ls.create_intent(&req, &id.to_string()).await;
    ls.confirm(&pi).await;
    let find = FindConfig {
        search: true,
        ..FindConfig::default()
    };
    let e = engine(db, &ls.url, find, false);
    e.process(id).await.unwrap();
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, St::Aprobado);
    assert_eq!(a.gateway_charge_id.as_deref(), Some(pi.as_str()));
    assert_eq!(a.check_count, 1);
    let intents = ls.intents().await;
    assert_eq!(intents.len(), 1, "nothing created again: {intents:?}");
}
