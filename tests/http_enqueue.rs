//! `POST /charges` with an `Idempotency-Key` header, over real HTTP: the
//! same semantics as the library and SQL enqueue.

#[macro_use]
mod common;

use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    a_replay_gets_the_original_response_and_a_changed_body_gets_409,
    bad_requests_name_what_is_wrong_and_write_nothing,
    health_says_the_database_answers,
);

const KEY: &str = "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b";

async fn create(
    web: &Web,
    key: Option<&str>,
    content_type: &str,
    body: &str,
) -> (u16, Option<String>, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}/charges", web.url))
        .bearer_auth(secret("app"))
        .header("content-type", content_type)
        .body(body.to_owned());
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await.expect("POST /charges");
    let status = resp.status().as_u16();
    let replayed = resp
        .headers()
        .get("idempotent-replayed")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, replayed, resp.json().await.unwrap_or(Value::Null))
}

async fn a_replay_gets_the_original_response_and_a_changed_body_gets_409(db: &TestDb) {
    let web = web_on(&db.store).await;
    let body = json!({"order_id": "web-1", "amount_minor": 1999, "currency": "USD",
                      "payment_method": "pm_card_visa"})
    .to_string();
    let (status, replayed, first) = create(&web, Some(KEY), "application/json", &body).await;
    assert_eq!((status, replayed.as_deref()), (201, None), "{first}");
    assert_eq!(first["idempotency_key"], KEY);
    assert_eq!(first["amount_minor"], 1999);
    let (status, replayed, again) = create(&web, Some(KEY), "application/json", &body).await;
    assert_eq!((status, replayed.as_deref()), (201, Some("true")));
    assert_eq!(again, first, "the original body, replayed");

    let changed = json!({"order_id": "web-1", "amount_minor": 2999, "currency": "USD",
                         "payment_method": "pm_card_visa"})
    .to_string();
    let (status, _, reply) = create(&web, Some(KEY), "application/json", &changed).await;
    assert_eq!(status, 409, "{reply}");
    assert_eq!(reply["field"], "Idempotency-Key");
    assert!(reply["error"].as_str().unwrap().contains(KEY));

    // Another key for an order that already has a live attempt.
    let other = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    let (status, _, reply) = create(&web, Some(other), "application/json", &body).await;
    assert_refused(status, &reply, 409, "order_id");

    // The attempt is visible over HTTP with its history.
    let id = first["attempt_id"].as_str().unwrap();
    let shown: Value = get_json(&format!("{}/charges/{id}", web.url), As::Bearer("agent")).await;
    assert_eq!(shown["attempt"]["state"], "PENDIENTE");
    assert_eq!(shown["transitions"][0]["cause"], "enqueued");
    assert_eq!(db.attempts().await, 1);
    web.stop().await;
}

async fn bad_requests_name_what_is_wrong_and_write_nothing(db: &TestDb) {
    let web = web_on(&db.store).await;
    let ok = r#"{"order_id": "web-2", "amount_minor": 500, "currency": "EUR"}"#;
    let json = "application/json";
    type Case<'a> = (Option<&'a str>, &'a str, String, u16, Option<&'a str>);
    let cases: Vec<Case> = vec![
        (None, json, ok.into(), 400, Some("Idempotency-Key")),
        (Some("not-a-uuid"), json, ok.into(), 400, Some("Idempotency-Key")),
        (Some(KEY), "text/plain", ok.into(), 415, None),
        (Some(KEY), json, "{not json".into(), 400, None),
        (Some(KEY), json, r#"{"amount_minor": 500, "currency": "EUR"}"#.into(), 422, Some("order_id")),
        (Some(KEY), json, r#"{"order_id": "", "amount_minor": 500, "currency": "EUR"}"#.into(), 422, Some("order_id")),
        (Some(KEY), json, r#"{"order_id": "o", "amount_minor": 0, "currency": "EUR"}"#.into(), 422, Some("amount_minor")),
        (Some(KEY), json, r#"{"order_id": "o", "amount_minor": 19.99, "currency": "EUR"}"#.into(), 422, Some("amount_minor")),
        (Some(KEY), json, r#"{"order_id": "o", "amount_minor": "500", "currency": "EUR"}"#.into(), 422, Some("amount_minor")),
        (Some(KEY), json, r#"{"order_id": "o", "amount_minor": 500, "currency": "EURO"}"#.into(), 422, Some("currency")),
        (Some(KEY), json, r#"{"order_id": "o", "amount_minor": 500}"#.into(), 422, Some("currency")),
        (Some(KEY), json, r#"{"order_id": 7, "amount_minor": 500, "currency": "EUR"}"#.into(), 422, Some("order_id")),
        (
            Some(KEY),
            json,
            r#"{"order_id": "o", "amount_minor": 500, "currency": "EUR", "payment_method": "4242424242424242"}"#.into(),
            422,
            Some("payment_method"),
        ),
        (Some(KEY), json, format!(r#"{{"order_id": "{}"}}"#, "x".repeat(70_000)), 413, None),
    ];
    for (key, ct, body, want, field) in &cases {
        let (status, _, reply) = create(&web, *key, ct, body).await;
        let shown = &body[..body.len().min(80)];
        assert_eq!(status, *want, "{key:?} {ct} {shown}: {reply}");
        assert_eq!(reply["field"].as_str(), *field, "{shown}: {reply}");
        assert!(reply["error"].is_string(), "{reply}");
    }
    assert_eq!(db.attempts().await, 0, "nothing written");
    web.stop().await;
}

async fn health_says_the_database_answers(db: &TestDb) {
    let web = web_on(&db.store).await;
    let resp = reqwest::get(format!("{}/health", web.url)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["ok"], true);
    web.stop().await;
}
