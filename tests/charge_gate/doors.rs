//! The doors the charge-gate tests knock on, and what a held order
//! answers: `POST` as a test key, `POST /charges` with a new key,
//! finance's retry, a signed gateway webhook, and the 409 (with its
//! `reason` and the words that say why) of an order that may not be
//! charged again.

use std::time::Duration;

use cobro::webhook::Verifier;
use serde_json::{Value, json};
use uuid::Uuid;

use super::common::{As, Web, post_keyed_json};

/// A business retry scheduled a day out: nothing runs it in these tests.
pub const DAY: Duration = Duration::from_secs(86_400);

pub async fn post(
    web: &Web,
    path: &str,
    who: &str,
    key: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let url = format!("{}{path}", web.url);
    post_keyed_json(&url, As::Bearer(who), key, &body.to_string()).await
}

/// `POST /charges` for `order` with a new key.
pub async fn charge_again(web: &Web, order: &str) -> (u16, Value) {
    let body = json!({"order_id": order, "amount_minor": 3000, "currency": "USD"});
    let key = Uuid::new_v4().to_string();
    post(web, "/charges", "app", Some(&key), body).await
}

pub async fn finance_retry(web: &Web, id: Uuid) -> (u16, Value) {
    let path = format!("/finance/api/attempts/{id}/retry");
    post(web, &path, "luis", None, json!({})).await
}

pub async fn signed_webhook(web: &Web, v: &Verifier, event: Value) {
    let body = event.to_string();
    let id = event["id"].as_str().unwrap().to_owned();
    let mut req = reqwest::Client::new()
        .post(format!("{}/webhooks/gateway", web.url))
        .header("content-type", "application/json")
        .body(body.clone());
    for (k, val) in v.sign(&id, chrono::Utc::now().timestamp(), body.as_bytes()) {
        req = req.header(k, val);
    }
    assert_eq!(req.send().await.unwrap().status(), 200);
}

pub fn assert_held(what: &str, (status, body): &(u16, Value), reason: &str, says: &str) {
    assert_eq!(*status, 409, "{what}: {body}");
    assert_eq!(body["reason"], reason, "{what}: {body}");
    let msg = body["error"].as_str().unwrap_or_default();
    assert!(msg.contains(says), "{what}: {msg}");
}
