//! The Stripe adapter against a scripted server on 127.0.0.1 that answers
//! as Stripe does where localstripe cannot (idempotency errors, decline and
//! advice codes, `payment_intent_unexpected_state`, 429 with `Retry-After`,
//! `processing`, the `created` filter and paging), and records every request
//! so the tests can check what was sent.
//!
//! One idea per file: `charges.rs` (what a create and a confirm send, and
//! how their answers and lookups read), `untrusted.rs` (Stripe's words and
//! ids stored bounded or not taken, a redirect never followed),
//! `listings.rs` (the `created` window, paging, a page that fails whole),
//! `oversized.rs` (an answer or a page too large to be a real one is never
//! read), `proxies.rs` (a 4xx without Stripe's error object is not
//! Stripe's word), `startup.rs` (the probe and the secret key). This file
//! holds the scripted server and the calls they make.

mod charges;
mod listings;
mod oversized;
mod proxies;
mod startup;
mod untrusted;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::*;
use crate::domain::{Amount, Currency, IdempotencyKey, OrderId, PaymentMethod};
use crate::gateway::Deferral;

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    uri: String,
    headers: HeaderMap,
    body: String,
}

#[derive(Default)]
struct Script {
    answers: VecDeque<(u16, Value, Option<&'static str>)>,
    seen: Vec<Seen>,
}

type Shared = Arc<Mutex<Script>>;

async fn answer(
    State(s): State<Shared>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = s.lock().unwrap();
    s.seen.push(Seen {
        method,
        uri: uri.to_string(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let (code, body, retry_after) = s.answers.pop_front().unwrap_or((599, json!({}), None));
    let mut r = (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response();
    if let Some(v) = retry_after {
        r.headers_mut().insert("Retry-After", v.parse().unwrap());
    }
    r
}

struct Fake {
    script: Shared,
    gw: StripeGateway,
}

impl Fake {
    async fn start(answers: Vec<(u16, Value, Option<&'static str>)>) -> Self {
        let script: Shared = Arc::new(Mutex::new(Script {
            answers: answers.into(),
            seen: Vec::new(),
        }));
        let app = Router::new().fallback(answer).with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            script,
            gw: scripted_gateway(url, FindConfig::default()),
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.lock().unwrap().seen.clone()
    }
}

/// The adapter against a scripted server at `url`, with the key the tests
/// look for in the `Authorization` header, finding lost charges as `find` says.
pub(super) fn scripted_gateway(url: String, find: FindConfig) -> StripeGateway {
    StripeGateway::new(StripeConfig {
        api_base: url,
        secret_key: SecretKey::new("sk_test_scripted_0123"),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        ca_file: None,
        off_session_retries: true,
        created_filter: true,
        find,
    })
    .unwrap()
}

fn call(pi: Option<&str>, retry: bool) -> ChargeCall {
    ChargeCall {
        key: IdempotencyKey::generate(),
        attempt_id: Some(uuid::Uuid::new_v4()),
        order_id: OrderId::parse("ord-1").unwrap(),
        amount: Amount::parse(1_999).unwrap(),
        currency: Currency::parse("EUR").unwrap(),
        payment_method: Some(PaymentMethod::parse("pm_card_visa").unwrap()),
        customer: None,
        gateway_ref: pi.map(Into::into),
        merchant_initiated: retry,
    }
}

fn intent(id: &str, status: &str, key: &str) -> Value {
    json!({"id": id, "object": "payment_intent", "status": status, "amount": 1999,
           "currency": "eur", "created": 1_764_547_200, "metadata": {"cobro_key": key}})
}
