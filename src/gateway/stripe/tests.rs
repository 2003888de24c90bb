//! The Stripe adapter against a scripted server on 127.0.0.1 that answers
//! as Stripe does where localstripe cannot (idempotency errors, decline and
//! advice codes, `payment_intent_unexpected_state`, 429 with `Retry-After`,
//! `processing`, the `created` filter and paging), and records every request
//! so the tests can check what was sent.

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
        let gw = StripeGateway::new(StripeConfig {
            api_base: url,
            secret_key: SecretKey::new("sk_test_scripted_0123"),
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(2),
            ca_file: None,
            off_session_retries: true,
            created_filter: true,
            find: FindConfig::default(),
        })
        .unwrap();
        Self { script, gw }
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.lock().unwrap().seen.clone()
    }
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

#[tokio::test]
async fn the_create_sends_the_key_the_version_and_no_confirm() {
    let c = call(None, false);
    let f = Fake::start(vec![(
        200,
        intent("pi_1", "requires_confirmation", &c.key.to_string()),
        None,
    )])
    .await;
    let got = f.gw.prepare(&c).await;
    assert!(
        matches!(&got, Prepared::Created { gateway_ref, .. } if gateway_ref == "pi_1"),
        "{got:?}"
    );
    let seen = f.seen();
    let s = &seen[0];
    assert_eq!(
        (s.method.as_str(), s.uri.as_str()),
        ("POST", "/v1/payment_intents")
    );
    assert_eq!(s.headers["authorization"], "Bearer sk_test_scripted_0123");
    assert_eq!(s.headers["stripe-version"], STRIPE_VERSION);
    assert_eq!(s.headers["idempotency-key"], c.key.to_string().as_str());
    for part in [
        "amount=1999",
        "currency=eur",
        "confirm=false",
        "payment_method=pm_card_visa",
    ] {
        assert!(s.body.split('&').any(|p| p == part), "{part} in {}", s.body);
    }
    assert!(
        s.body
            .contains(&format!("metadata%5Bcobro_key%5D={}", c.key)),
        "{}",
        s.body
    );
}

#[tokio::test]
async fn a_create_refused_or_unanswered_never_charges_and_never_declines_on_a_guess() {
    let c = call(None, false);
    let idem = json!({"error": {"type": "idempotency_error", "message": "Keys for idempotent requests can only be used with the same parameters"}});
    let f = Fake::start(vec![
        (401, json!({"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}}), None),
        (400, idem, None),
        (500, json!({"error": {"type": "api_error"}}), None),
        (409, json!({"error": {"type": "invalid_request_error", "code": "idempotency_key_in_use"}}), None),
    ])
    .await;
    let auth = f.gw.prepare(&c).await;
    assert!(
        matches!(&auth, Prepared::Failed(ChargeOutcome::Deferred { why: Deferral::NotExecuted, evidence, .. }) if evidence.error_kind == "auth_failed"),
        "{auth:?}"
    );
    let idem = f.gw.prepare(&c).await;
    assert!(
        matches!(&idem, Prepared::Failed(ChargeOutcome::Refused { evidence }) if evidence.error_kind == "idempotency_error"),
        "{idem:?}"
    );
    let five = f.gw.prepare(&c).await;
    assert!(
        matches!(
            five,
            Prepared::Failed(ChargeOutcome::Deferred {
                why: Deferral::Unconfirmed,
                ..
            })
        ),
        "{five:?}"
    );
    // 409: our own earlier request with this key is still running; the
    // create is tried again later, with the same key.
    let busy = f.gw.prepare(&c).await;
    assert!(
        matches!(
            busy,
            Prepared::Failed(ChargeOutcome::Deferred {
                why: Deferral::Unconfirmed,
                ..
            })
        ),
        "{busy:?}"
    );
}

#[tokio::test]
async fn a_decline_keeps_every_code_and_advice_not_to_retry_is_final() {
    let c = call(Some("pi_9"), true);
    let err = json!({"error": {"type": "card_error", "code": "card_declined", "decline_code": "do_not_honor",
        "advice_code": "do_not_try_again", "network_advice_code": "03", "network_decline_code": "05",
        "payment_intent": {"id": "pi_9"}}});
    let f = Fake::start(vec![(402, err, None)]).await;
    let got = f.gw.charge(&c).await;
    let ChargeOutcome::Declined {
        code,
        charge_id,
        evidence,
    } = &got
    else {
        panic!("{got:?}");
    };
    assert_eq!(code, "do_not_honor/do_not_try_again");
    assert_eq!(charge_id.as_deref(), Some("pi_9"));
    let detail = evidence.detail.clone().unwrap_or_default();
    for part in [
        "network_advice_code=03",
        "network_decline_code=05",
        "advice_code=do_not_try_again",
    ] {
        assert!(detail.contains(part), "{detail}");
    }
    let seen = f.seen();
    assert_eq!(seen[0].uri, "/v1/payment_intents/pi_9/confirm");
    assert_eq!(
        seen[0].headers["idempotency-key"],
        format!("{}-confirm", c.key).as_str()
    );
    assert!(
        seen[0].body.contains("off_session=true"),
        "a business retry is merchant-initiated"
    );
}

#[tokio::test]
async fn stripes_words_are_stored_bounded_and_nul_free_and_an_unusable_id_is_never_kept() {
    let c = call(Some("pi_9"), false);
    let key = c.key.to_string();
    let long = "Your card was declined.\0 ".repeat(4_000);
    let err = json!({"error": {"type": "card_error", "code": "card_declined",
        "decline_code": format!("do_not\0honor{long}"), "message": long, "param": long}});
    let mut failed = intent("pi_9", "requires_payment_method", &key);
    failed["last_payment_error"] = err["error"].clone();
    let f = Fake::start(vec![
        (402, err.clone(), None),
        // A confirm answered with a PaymentIntent whose id cannot be stored.
        (200, intent("pi_\0_9", "succeeded", &key), None),
        // A create that returns one: not created (nothing to record).
        (200, intent("pi_\0", "requires_confirmation", &key), None),
        // A decline read back by lookup.
        (200, failed, None),
    ])
    .await;
    let got = f.gw.charge(&c).await;
    let ChargeOutcome::Declined { code, evidence, .. } = &got else {
        panic!("{got:?}");
    };
    assert!(code.len() <= 64 && !code.contains('\0'), "{code}");
    assert!(code.starts_with(r"do_not\u0000honor"), "{code}");
    let detail = evidence.detail.clone().unwrap_or_default();
    assert!(detail.len() <= 1000 && !detail.contains('\0'), "{detail}");

    let approved_bad_id = f.gw.charge(&c).await;
    assert!(
        matches!(&approved_bad_id, ChargeOutcome::Unknown { evidence } if evidence.error_kind == "bad_body"),
        "never an approval with an altered id: {approved_bad_id:?}"
    );
    let created = f.gw.prepare(&call(None, false)).await;
    assert!(
        matches!(
            created,
            Prepared::Failed(ChargeOutcome::Deferred {
                why: Deferral::Unconfirmed,
                ..
            })
        ),
        "{created:?}"
    );
    let by_ref = LookupCall {
        gateway_ref: Some("pi_9".into()),
        ..LookupCall::by_key(c.key)
    };
    let found = f.gw.lookup(&by_ref).await;
    assert!(
        matches!(&found, LookupOutcome::Declined { code, evidence, .. }
            if code.len() <= 64 && !code.contains('\0')
                && evidence.detail.as_ref().is_some_and(|d| d.len() <= 1000 && !d.contains('\0'))),
        "{found:?}"
    );
}

#[tokio::test]
async fn a_listing_with_an_id_that_cannot_be_stored_fails_whole() {
    let page = json!({"object": "list", "has_more": false, "data": [
        intent("pi_1", "succeeded", "k1"),
        intent("pi_\0_2", "succeeded", "k2"),
    ]});
    let f = Fake::start(vec![(200, page, None)]).await;
    let from = chrono::DateTime::from_timestamp(1_764_547_000, 0).unwrap();
    let to = chrono::DateTime::from_timestamp(1_764_548_000, 0).unwrap();
    let got = f.gw.list(Listed::Charges, from, to).await;
    assert!(
        matches!(&got, Err(ListError::BadPage { detail, .. })
            if detail.contains("holds the control character U+0000") && !detail.contains('\0')),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_redirect_is_never_followed_and_never_a_decline() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Where a followed redirect would land: it counts and approves.
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let elsewhere = Router::new().fallback(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        async { axum::Json(json!({"id": "pi_elsewhere", "status": "succeeded"})) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, elsewhere).await.unwrap() });
    let app = Router::new().fallback(move |uri: axum::http::Uri| {
        let to = format!("{other}{}", uri.path());
        let status = if uri.path().ends_with("/confirm") || uri.path() == "/v1/refunds" {
            StatusCode::TEMPORARY_REDIRECT
        } else if uri.path() == "/v1/payment_intents" {
            StatusCode::SEE_OTHER
        } else {
            StatusCode::PERMANENT_REDIRECT
        };
        async move { (status, [(axum::http::header::LOCATION, to)]) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let gw = StripeGateway::new(StripeConfig {
        api_base: url,
        secret_key: SecretKey::new("sk_test_scripted_0123"),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        ca_file: None,
        off_session_retries: true,
        created_filter: true,
        find: FindConfig::default(),
    })
    .unwrap();

    let c = call(Some("pi_7"), false);
    let confirm = gw.charge(&c).await;
    assert!(
        matches!(&confirm, ChargeOutcome::Deferred { why: Deferral::NotExecuted, evidence, .. }
            if evidence.error_kind == "redirected" && evidence.http_status == Some(307)),
        "{confirm:?}"
    );
    let refund = gw
        .refund(&RefundCall {
            key: IdempotencyKey::generate(),
            charge_id: "pi_7".into(),
            order_id: OrderId::parse("ord-1").unwrap(),
            amount: Amount::parse(100).unwrap(),
            currency: Currency::parse("EUR").unwrap(),
        })
        .await;
    assert!(
        matches!(
            &refund,
            ChargeOutcome::Deferred {
                why: Deferral::NotExecuted,
                ..
            }
        ),
        "{refund:?}"
    );
    // A 303 to the create: an unconfirmed PaymentIntent moves no money.
    let create = gw.prepare(&call(None, false)).await;
    assert!(
        matches!(&create, Prepared::Failed(ChargeOutcome::Deferred { why: Deferral::Unconfirmed, evidence, .. })
            if evidence.error_kind == "redirected"),
        "{create:?}"
    );
    let by_ref = LookupCall {
        gateway_ref: Some("pi_7".into()),
        ..LookupCall::by_key(c.key)
    };
    let found = gw.lookup(&by_ref).await;
    assert!(
        matches!(&found, LookupOutcome::Failed { evidence } if evidence.error_kind == "redirected"),
        "{found:?}"
    );
    let probe = gw.probe().await;
    assert!(
        matches!(&probe, LookupOutcome::Failed { evidence } if evidence.error_kind == "redirected"),
        "{probe:?}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing reached the other host"
    );
}

#[tokio::test]
async fn a_confirm_refused_as_unexpected_state_is_looked_up_never_recreated() {
    let c = call(Some("pi_5"), false);
    let key = c.key.to_string();
    let unexpected = json!({"error": {"type": "invalid_request_error", "code": "payment_intent_unexpected_state"}});
    let f = Fake::start(vec![
        (400, unexpected.clone(), None),
        (200, intent("pi_5", "succeeded", &key), None),
        (400, unexpected, None),
        (200, intent("pi_5", "requires_confirmation", &key), None),
    ])
    .await;
    let got = f.gw.charge(&c).await;
    assert!(
        matches!(&got, ChargeOutcome::Approved { charge_id, .. } if charge_id == "pi_5"),
        "{got:?}"
    );
    // Still unconfirmed after a 400: the confirm itself is refused; finance.
    let refused = f.gw.charge(&c).await;
    assert!(
        matches!(refused, ChargeOutcome::Refused { .. }),
        "{refused:?}"
    );
    let paths: Vec<String> = f
        .seen()
        .iter()
        .map(|s| format!("{} {}", s.method, s.uri))
        .collect();
    assert_eq!(
        paths,
        [
            "POST /v1/payment_intents/pi_5/confirm",
            "GET /v1/payment_intents/pi_5",
            "POST /v1/payment_intents/pi_5/confirm",
            "GET /v1/payment_intents/pi_5",
        ],
        "no create"
    );
}

#[tokio::test]
async fn throttled_processing_and_not_confirmed_read_as_they_should() {
    let c = call(Some("pi_7"), false);
    let key = c.key.to_string();
    let f = Fake::start(vec![
        (
            429,
            json!({"error": {"type": "invalid_request_error", "code": "rate_limit"}}),
            Some("7"),
        ),
        (200, intent("pi_7", "processing", &key), None),
        (200, intent("pi_7", "processing", &key), None),
        (200, intent("pi_7", "requires_confirmation", &key), None),
        (
            404,
            json!({"error": {"type": "invalid_request_error", "code": "resource_missing"}}),
            None,
        ),
        (200, intent("pi_7", "succeeded", "another-key"), None),
    ])
    .await;
    let throttled = f.gw.charge(&c).await;
    assert!(
        matches!(throttled, ChargeOutcome::Deferred { why: Deferral::NotExecuted, retry_after: Some(d), .. } if d == Duration::from_secs(7)),
        "{throttled:?}"
    );
    assert!(
        matches!(f.gw.charge(&c).await, ChargeOutcome::Unknown { .. }),
        "processing is unknown"
    );
    let look = LookupCall {
        key: c.key,
        gateway_ref: Some("pi_7".into()),
        charge_id: None,
        since: None,
        last_sent: None,
        make_final: false,
    };
    assert!(
        matches!(f.gw.lookup(&look).await, LookupOutcome::Failed { .. }),
        "processing: check again"
    );
    assert!(
        matches!(f.gw.lookup(&look).await, LookupOutcome::NotFound { .. }),
        "unconfirmed: confirm it again"
    );
    assert!(
        matches!(f.gw.lookup(&look).await, LookupOutcome::Failed { .. }),
        "a 404 for our own PaymentIntent is no answer"
    );
    assert!(
        matches!(f.gw.lookup(&look).await, LookupOutcome::Failed { .. }),
        "a PaymentIntent carrying another key is never taken as ours"
    );
}

#[tokio::test]
async fn listings_send_the_window_and_walk_every_page() {
    let p1 = json!({"object": "list", "has_more": true, "data": [
        intent("pi_b", "succeeded", "k2"), intent("pi_a", "requires_payment_method", "k1")]});
    let mut declined = intent("pi_c", "requires_payment_method", "k3");
    declined["last_payment_error"] =
        json!({"code": "card_declined", "decline_code": "insufficient_funds"});
    let p2 = json!({"object": "list", "has_more": false, "data": [declined, intent("pi_d", "canceled", "k4")]});
    let f = Fake::start(vec![(200, p1, None), (200, p2, None)]).await;
    let from = chrono::DateTime::from_timestamp(1_764_547_000, 0).unwrap();
    let to = chrono::DateTime::from_timestamp(1_764_548_000, 0).unwrap();
    let records = f.gw.list(Listed::Charges, from, to).await.unwrap();
    let ids: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.id.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(
        ids,
        [("pi_b", "approved"), ("pi_c", "declined")],
        "unconfirmed and canceled executed nothing"
    );
    assert_eq!(records[0].currency, "EUR");
    let seen = f.seen();
    assert!(
        seen[0].uri.contains("created%5Bgte%5D=1764547000"),
        "{}",
        seen[0].uri
    );
    assert!(
        seen[0].uri.contains("created%5Blt%5D=1764548001"),
        "{}",
        seen[0].uri
    );
    assert!(
        seen[1].uri.contains("starting_after=pi_a"),
        "{}",
        seen[1].uri
    );
    // A failed page fails the whole listing.
    let f = Fake::start(vec![
        (
            200,
            json!({"has_more": true, "data": [intent("pi_x", "succeeded", "k")]}),
            None,
        ),
        (500, json!({}), None),
    ])
    .await;
    assert!(f.gw.list(Listed::Charges, from, to).await.is_err());
}

#[tokio::test]
async fn the_probe_takes_stripes_own_404_as_an_answer_and_a_401_as_a_failure() {
    let f = Fake::start(vec![
        (
            404,
            json!({"error": {"type": "invalid_request_error", "code": "resource_missing"}}),
            None,
        ),
        (
            401,
            json!({"error": {"type": "invalid_request_error"}}),
            None,
        ),
    ])
    .await;
    assert!(matches!(f.gw.probe().await, LookupOutcome::NotFound { .. }));
    let bad = f.gw.probe().await;
    assert!(
        matches!(&bad, LookupOutcome::Deferred { evidence, .. } if evidence.error_kind == "auth_failed"),
        "{bad:?}"
    );
    assert!(
        f.seen()[0]
            .uri
            .starts_with("/v1/payment_intents/pi_cobroprobe")
    );
}

#[test]
fn the_secret_key_never_shows() {
    let key = SecretKey::new("sk_test_51Habcdefghijklmnop");
    let shown = format!("{key:?}");
    assert!(!shown.contains("51Habc"), "{shown}");
    assert!(shown.starts_with("sk_test"), "{shown}");
    let cfg = StripeConfig {
        api_base: DEFAULT_API_BASE.into(),
        secret_key: key,
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
        ca_file: None,
        off_session_retries: true,
        created_filter: true,
        find: FindConfig::default(),
    };
    assert!(!format!("{cfg:?}").contains("51Habc"));
}

#[test]
fn an_empty_key_is_refused_at_start_up() {
    let cfg = StripeConfig {
        api_base: DEFAULT_API_BASE.into(),
        secret_key: SecretKey::new("  "),
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
        ca_file: None,
        off_session_retries: true,
        created_filter: true,
        find: FindConfig::default(),
    };
    let err = StripeGateway::new(cfg).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("STRIPE_SECRET_KEY")));
}
