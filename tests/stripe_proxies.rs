//! A 4xx from something in front of Stripe (a proxy's or load balancer's
//! 408 with an empty body) is not Stripe's answer, through the real engine
//! and store on both backends: to the create, the charge goes back to
//! `PENDIENTE` (an unconfirmed PaymentIntent moved no money; it is created
//! again with the same key), never `RECHAZADO`; to the confirm, it is
//! `DESCONOCIDO`, looked up, found still unconfirmed and confirmed again
//! (the same PaymentIntent), so it ends `APROBADO`, never in finance's
//! queue on a guess.
//!
//! And a 500 Stripe keeps for the key and replays (`Idempotent-Replayed`)
//! sends the charge to finance instead of a day of creates.
//!
//! The gateway is a real HTTP server on 127.0.0.1: Stripe's shapes, with
//! the proxy's 408 (or Stripe's 500) where the scenario puts it.

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use cobro::backoff::CheckSchedule;
use cobro::domain::ChargeRequest;
use cobro::gateway::stripe::{FindConfig, SecretKey};
use cobro::gateway::{StripeConfig, StripeGateway};
use cobro::state::State;
use common::*;
use serde_json::json;

on_both_dbs!(
    a_proxys_408_to_the_create_puts_the_charge_back_and_never_declines_it,
    a_proxys_408_to_the_confirm_is_looked_up_and_confirmed_again_never_sent_to_finance,
    a_create_500_stripe_replays_goes_to_finance_not_a_day_of_creates,
);

/// What the server answers a create.
#[derive(Clone, Copy, PartialEq)]
enum Create {
    /// The PaymentIntent, unconfirmed.
    Made,
    /// The proxy's 408.
    Lost,
    /// Stripe's 500 with its error object; every later create with the
    /// key gets it replayed (`Idempotent-Replayed: true`), as Stripe keeps
    /// a key's first answer for 24 hours.
    Failed,
}

/// What the server has seen and what it answers next.
#[derive(Default)]
struct Stripe {
    /// The proxy answers this many confirms 408 (an empty body) first.
    lost_confirms: usize,
    confirms: usize,
    /// A confirm got through: the PaymentIntent succeeded.
    succeeded: bool,
    /// Every request, as `METHOD /path`.
    seen: Vec<String>,
    creates: usize,
}

type Shared = Arc<Mutex<Stripe>>;

/// A proxy's answer: 408 with nothing in it.
fn proxy_408() -> Response {
    StatusCode::REQUEST_TIMEOUT.into_response()
}

fn pi(status: &str) -> Response {
    axum::Json(json!({"id": "pi_proxied", "object": "payment_intent", "status": status,
                      "amount": 1999, "currency": "usd", "created": chrono::Utc::now().timestamp()}))
    .into_response()
}

/// Stripe's own 500, replayed after the first.
fn stripe_500(replayed: bool) -> Response {
    let body = json!({"error": {"type": "api_error", "message": "An unknown error occurred"}});
    let mut resp = (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response();
    if replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", "true".parse().unwrap());
    }
    resp
}

/// Stripe behind a proxy on 127.0.0.1, answering creates as `create`.
async fn stripe(create: Create, lost_confirms: usize) -> (String, Shared) {
    let s: Shared = Arc::new(Mutex::new(Stripe {
        lost_confirms,
        ..Stripe::default()
    }));
    let state = s.clone();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri| {
        let s = state.clone();
        async move {
            let mut s = s.lock().unwrap();
            s.seen.push(format!("{method} {}", uri.path()));
            match (method, uri.path()) {
                (Method::POST, "/v1/payment_intents") => {
                    s.creates += 1;
                    match create {
                        Create::Made => pi("requires_confirmation"),
                        Create::Lost => proxy_408(),
                        Create::Failed => stripe_500(s.creates > 1),
                    }
                }
                (Method::POST, "/v1/payment_intents/pi_proxied/confirm") => {
                    s.confirms += 1;
                    if s.confirms <= s.lost_confirms {
                        return proxy_408();
                    }
                    s.succeeded = true;
                    pi("succeeded")
                }
                (Method::GET, "/v1/payment_intents/pi_proxied") if s.succeeded => pi("succeeded"),
                (Method::GET, "/v1/payment_intents/pi_proxied") => pi("requires_confirmation"),
                _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    });
    let url = stand_in(app).await;
    (url, s)
}

/// An engine on Stripe at `api_base`, checking at a tenth of the usual
/// 2-4-8-16-32 s.
fn engine(db: &TestDb, api_base: &str) -> cobro::engine::Engine {
    let gw = StripeGateway::new(StripeConfig {
        api_base: api_base.into(),
        secret_key: SecretKey::new("sk_test_proxied_0123"),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        ca_file: None,
        off_session_retries: false,
        created_filter: true,
        find: FindConfig::default(),
    })
    .unwrap();
    cobro::engine::Engine::new(
        db.store.clone(),
        Arc::new(gw),
        engine_config("proxied", CheckSchedule::default().scaled(0.1)),
    )
}

async fn enqueue(db: &TestDb, order: &str) -> uuid::Uuid {
    let req = ChargeRequest::parse(order, 1_999, "USD", None, Some("pm_card_visa")).unwrap();
    db.store.enqueue(&req).await.unwrap().attempt_id
}

async fn a_proxys_408_to_the_create_puts_the_charge_back_and_never_declines_it(db: &TestDb) {
    let (url, seen) = stripe(Create::Lost, 0).await;
    let id = enqueue(db, "proxied-create").await;

    engine(db, &url).process(id).await.unwrap();

    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::Pendiente, "created again later, same key");
    assert_eq!(a.decline_code, None);
    let p = path(&db.store, id).await;
    assert!(
        p.iter().all(|s| s == "PENDIENTE" || s == "EN_PROCESO"),
        "{p:?}"
    );
    assert!(
        causes(&db.store, id)
            .await
            .iter()
            .any(|c| c == "gateway_create_unanswered"),
        "{p:?}"
    );
    let ev = a.last_evidence.unwrap_or_default();
    assert_eq!(ev["http_status"], 408, "{ev}");
    assert_eq!(ev["error_kind"], "http_4xx_unexpected", "{ev}");
    let seen = seen.lock().unwrap().seen.clone();
    assert!(
        seen.iter().all(|r| r == "POST /v1/payment_intents"),
        "nothing but creates: {seen:?}"
    );
}

async fn a_proxys_408_to_the_confirm_is_looked_up_and_confirmed_again_never_sent_to_finance(
    db: &TestDb,
) {
    let (url, seen) = stripe(Create::Made, 1).await;
    let id = enqueue(db, "proxied-confirm").await;
    let e = engine(db, &url);

    let a = eventually(Duration::from_secs(10), "the charge to settle", || async {
        e.process(id).await.unwrap();
        let (a, _) = db.store.load(id).await.unwrap();
        (a.state != State::Desconocido && a.state != State::Pendiente).then_some(a)
    })
    .await;
    assert_eq!(a.state, State::Aprobado);
    assert_eq!(a.gateway_charge_id.as_deref(), Some("pi_proxied"));
    let p = path(&db.store, id).await;
    assert!(
        p.iter().any(|s| s == "DESCONOCIDO"),
        "in doubt first: {p:?}"
    );
    assert!(
        !p.iter().any(|s| s == "EN_REVISION" || s == "RECHAZADO"),
        "{p:?}"
    );
    let seen = seen.lock().unwrap().seen.clone();
    assert_eq!(
        seen.iter()
            .filter(|r| *r == "POST /v1/payment_intents")
            .count(),
        1,
        "one PaymentIntent, confirmed again: {seen:?}"
    );
    assert_eq!(
        seen.iter()
            .filter(|r| *r == "POST /v1/payment_intents/pi_proxied/confirm")
            .count(),
        2,
        "{seen:?}"
    );
}

/// Stripe answered the create 500 and keeps that answer for the key for
/// 24 hours: the first 500 may be a passing fault (created again later,
/// same key), but once Stripe says it replays it, sending again gets the
/// same 500 all day. Finance gets the attempt (nothing was confirmed, so
/// nothing charged), instead of a create every few seconds for a day.
async fn a_create_500_stripe_replays_goes_to_finance_not_a_day_of_creates(db: &TestDb) {
    let (url, seen) = stripe(Create::Failed, 0).await;
    let id = enqueue(db, "replayed-500").await;
    let e = engine(db, &url);

    // (the engine sends again within this call: the deferral is short)
    e.process(id).await.unwrap();

    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::EnRevision);
    assert_eq!(
        causes(&db.store, id).await,
        [
            "enqueued",
            "claim",
            "gateway_create_unanswered",
            "claim",
            "gateway_refused"
        ],
        "the first 500 may pass: created again; its replay goes to finance"
    );
    let ev = a.last_evidence.unwrap_or_default();
    assert_eq!(ev["error_kind"], "idempotent_replay_of_error", "{ev}");
    let detail = ev["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("cobro escalations resolve"), "{detail}");
    let seen = seen.lock().unwrap().seen.clone();
    assert_eq!(
        seen,
        ["POST /v1/payment_intents", "POST /v1/payment_intents"],
        "two creates, never a confirm"
    );
}
