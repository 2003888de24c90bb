//! The lookup without a recorded PaymentIntent ([`super::find`]) against a
//! scripted server on 127.0.0.1 that answers as Stripe's search and list
//! endpoints do: search asked when configured, its lag, a server without
//! search, the listing's page cap, and a 429 on every lookup path (a
//! refund's too).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{OriginalUri, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde_json::{Value, json};

use super::*;
use crate::domain::IdempotencyKey;
use crate::gateway::Deferral;

type Answers = Arc<Mutex<(VecDeque<(u16, Value, Option<&'static str>)>, Vec<String>)>>;

async fn answer(State(s): State<Answers>, OriginalUri(uri): OriginalUri) -> Response {
    let mut s = s.lock().unwrap();
    s.1.push(uri.to_string());
    let (code, body, retry_after) = s.0.pop_front().unwrap_or((599, json!({}), None));
    let mut r = (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response();
    if let Some(v) = retry_after {
        r.headers_mut().insert("Retry-After", v.parse().unwrap());
    }
    r
}

/// A gateway on a server that gives `answers` in turn; the URIs it saw.
async fn scripted(
    answers: Vec<(u16, Value, Option<&'static str>)>,
    find: FindConfig,
) -> (StripeGateway, Answers) {
    let s: Answers = Arc::new(Mutex::new((answers.into(), Vec::new())));
    let app = Router::new().fallback(answer).with_state(s.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let gw = super::tests::scripted_gateway(url, find);
    (gw, s)
}

fn seen(s: &Answers) -> Vec<String> {
    s.lock().unwrap().1.iter().map(|u| decoded(u)).collect()
}

/// `%XX` escapes and `+` read back, so the tests read the query as sent.
fn decoded(u: &str) -> String {
    let b = u.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

fn intent(id: &str, status: &str, key: &str) -> Value {
    json!({"id": id, "object": "payment_intent", "status": status, "amount": 1999,
           "currency": "eur", "created": Utc::now().timestamp(), "metadata": {"cobro_key": key}})
}

fn search_result(data: Vec<Value>) -> Value {
    json!({"object": "search_result", "data": data, "has_more": false, "next_page": null})
}

fn list(data: Vec<Value>, has_more: bool) -> Value {
    json!({"object": "list", "data": data, "has_more": has_more})
}

const SEARCH: FindConfig = FindConfig {
    search: true,
    search_lag: Duration::from_secs(60),
    max_pages: 10,
};

/// A lookup of `key` for an attempt created and last sent `ago` ago.
fn call(key: IdempotencyKey, ago: Duration) -> LookupCall {
    let at = Utc::now() - chrono::Duration::from_std(ago).unwrap();
    LookupCall {
        since: Some(at),
        last_sent: Some(at),
        ..LookupCall::by_key(key)
    }
}

#[tokio::test]
async fn search_is_asked_by_the_key_when_configured_and_its_match_read_back_by_id() {
    let key = IdempotencyKey::generate();
    let k = key.to_string();
    let (gw, s) = scripted(
        vec![
            (
                200,
                search_result(vec![intent("pi_5", "succeeded", &k)]),
                None,
            ),
            (200, intent("pi_5", "succeeded", &k), None),
        ],
        SEARCH,
    )
    .await;
    let got = gw.lookup(&call(key, Duration::from_secs(5))).await;
    assert!(
        matches!(&got, LookupOutcome::Approved { charge_id, .. } if charge_id == "pi_5"),
        "{got:?}"
    );
    let asked = seen(&s);
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[0].starts_with("/v1/payment_intents/search?query=metadata['cobro_key']:'"),
        "{asked:?}"
    );
    assert!(asked[0].contains(&format!(":'{k}'")), "{asked:?}");
    assert!(
        asked[1].starts_with("/v1/payment_intents/pi_5"),
        "{asked:?}"
    );

    // Not configured: no search, the listing.
    let (gw, s) = scripted(
        vec![
            (
                200,
                list(vec![intent("pi_6", "succeeded", &k)], false),
                None,
            ),
            (200, intent("pi_6", "succeeded", &k), None),
        ],
        FindConfig::default(),
    )
    .await;
    let got = gw.lookup(&call(key, Duration::from_secs(5))).await;
    assert!(matches!(&got, LookupOutcome::Approved { .. }), "{got:?}");
    let listed = seen(&s);
    assert!(
        listed[0].starts_with("/v1/payment_intents?limit=100"),
        "{listed:?}"
    );
}

#[tokio::test]
async fn a_search_not_found_within_the_lag_is_not_a_clearance() {
    let key = IdempotencyKey::generate();
    let empty = || (200, search_result(vec![]), None);
    let (gw, s) = scripted(vec![empty(), empty(), empty()], SEARCH).await;
    // Sent 5 s ago, the lag is 60 s: the PaymentIntent may not be indexed.
    let soon = gw.lookup(&call(key, Duration::from_secs(5))).await;
    assert!(
        matches!(&soon, LookupOutcome::Failed { evidence } if evidence.error_kind == "search_lag"),
        "{soon:?}"
    );
    // When it was sent is unknown: not a clearance either.
    let unknown = gw.lookup(&LookupCall::by_key(key)).await;
    assert!(
        matches!(&unknown, LookupOutcome::Failed { evidence } if evidence.error_kind == "search_lag"),
        "{unknown:?}"
    );
    // Past the lag: an answer.
    let late = gw.lookup(&call(key, Duration::from_secs(120))).await;
    assert!(
        matches!(&late, LookupOutcome::NotFound { evidence } if evidence.call == "lookup"),
        "{late:?}"
    );
    assert_eq!(seen(&s).len(), 3, "only the search was asked");
}

#[tokio::test]
async fn a_search_match_without_the_key_is_not_taken() {
    let key = IdempotencyKey::generate();
    let other = IdempotencyKey::generate().to_string();
    let (gw, _) = scripted(
        vec![(
            200,
            search_result(vec![intent("pi_8", "succeeded", &other)]),
            None,
        )],
        SEARCH,
    )
    .await;
    let got = gw.lookup(&call(key, Duration::from_secs(5))).await;
    assert!(
        matches!(&got, LookupOutcome::Failed { evidence } if evidence.error_kind == "search_lag"),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_server_without_search_is_listed_instead() {
    let key = IdempotencyKey::generate();
    let k = key.to_string();
    let (gw, s) = scripted(
        vec![
            (
                404,
                json!({"error": {"message": "Not Found", "type": "invalid_request_error"}}),
                None,
            ),
            (
                200,
                list(vec![intent("pi_3", "succeeded", &k)], false),
                None,
            ),
            (200, intent("pi_3", "succeeded", &k), None),
        ],
        SEARCH,
    )
    .await;
    let got = gw.lookup(&call(key, Duration::from_secs(5))).await;
    assert!(
        matches!(&got, LookupOutcome::Approved { charge_id, .. } if charge_id == "pi_3"),
        "{got:?}"
    );
    let asked = seen(&s);
    assert!(
        asked[0].starts_with("/v1/payment_intents/search"),
        "{asked:?}"
    );
    assert!(asked[1].starts_with("/v1/payment_intents?"), "{asked:?}");
}

#[tokio::test]
async fn the_listing_stops_at_its_page_cap_and_that_is_no_clearance() {
    let key = IdempotencyKey::generate();
    let other = IdempotencyKey::generate().to_string();
    let page = |n: u32| {
        (
            200,
            list(vec![intent(&format!("pi_p{n}"), "succeeded", &other)], true),
            None,
        )
    };
    let cap = FindConfig {
        max_pages: 3,
        ..FindConfig::default()
    };
    let (gw, s) = scripted((1..=5).map(page).collect(), cap).await;
    let got = gw.lookup(&call(key, Duration::from_secs(5))).await;
    assert!(
        matches!(&got, LookupOutcome::Failed { evidence } if evidence.error_kind == "listing_capped"),
        "{got:?}"
    );
    assert_eq!(seen(&s).len(), 3, "three pages, no more");

    // The page holding the key ends the walk.
    let k = key.to_string();
    let (gw, s) = scripted(
        vec![
            page(1),
            (200, list(vec![intent("pi_k", "succeeded", &k)], true), None),
            (200, intent("pi_k", "succeeded", &k), None),
        ],
        cap,
    )
    .await;
    let got = gw.lookup(&call(key, Duration::from_secs(5))).await;
    assert!(matches!(&got, LookupOutcome::Approved { .. }), "{got:?}");
    assert_eq!(seen(&s).len(), 3, "two pages and the read-back");
}

#[tokio::test]
async fn a_429_on_every_lookup_path_is_deferred_with_its_retry_after() {
    let key = IdempotencyKey::generate();
    let throttled = || {
        (
            429,
            json!({"error": {"type": "rate_limit_error"}}),
            Some("7"),
        )
    };
    let by_id = LookupCall {
        gateway_ref: Some("pi_1".into()),
        ..call(key, Duration::from_secs(5))
    };
    for (name, find, lookup) in [
        ("retrieve by id", FindConfig::default(), by_id),
        ("search", SEARCH, call(key, Duration::from_secs(5))),
        (
            "list",
            FindConfig::default(),
            call(key, Duration::from_secs(5)),
        ),
    ] {
        let (gw, _) = scripted(vec![throttled()], find).await;
        let got = gw.lookup(&lookup).await;
        assert!(
            matches!(&got, LookupOutcome::Deferred { why: Deferral::NotExecuted, retry_after: Some(d), evidence }
                if *d == Duration::from_secs(7) && evidence.http_status == Some(429)
                    && evidence.error_kind == "throttled"),
            "{name}: {got:?}"
        );
    }
    // A later page of the listing too.
    let other = IdempotencyKey::generate().to_string();
    let (gw, _) = scripted(
        vec![
            (
                200,
                list(vec![intent("pi_a", "succeeded", &other)], true),
                None,
            ),
            throttled(),
        ],
        FindConfig::default(),
    )
    .await;
    let got = gw.lookup(&call(key, Duration::from_secs(5))).await;
    assert!(
        matches!(&got, LookupOutcome::Deferred { retry_after: Some(d), .. } if *d == Duration::from_secs(7)),
        "{got:?}"
    );
    // A refund's lookup lists the PaymentIntent's refunds: the same.
    let (gw, _) = scripted(vec![throttled()], FindConfig::default()).await;
    let refund = LookupCall {
        charge_id: Some("pi_1".into()),
        ..LookupCall::by_key(key)
    };
    let got = gw.lookup_refund(&refund).await;
    assert!(
        matches!(&got, LookupOutcome::Deferred { why: Deferral::NotExecuted, retry_after: Some(d), evidence }
            if *d == Duration::from_secs(7) && evidence.http_status == Some(429)),
        "{got:?}"
    );
}
