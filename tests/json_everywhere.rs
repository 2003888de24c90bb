//! Issue 28, "JSON-only is not everywhere" and "a wrong JSON type reads as
//! 'is required'": every POST of the web process that takes a JSON body
//! refuses any other declared type with 415 and writes nothing (the
//! incident switch, an order's cancel and payment method among them, which
//! took `text/plain`); a field of the wrong JSON type is a 422 naming the
//! field, the type it must be and the type it got, and writes nothing; a
//! bodiless POST (resume, finance's retry) takes no body or a JSON one
//! without fields; an order id of 150 × "é" (300 bytes, 150 characters) is
//! enqueued and then found by the operator's search. On both backends,
//! over real HTTP.

#[macro_use]
mod common;

use cobro::domain::ChargeRequest;
use cobro::state::{Event, State};
use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    every_json_post_refuses_another_content_type_and_writes_nothing,
    a_wrong_json_type_is_named_with_the_type_and_writes_nothing,
    bodiless_posts_take_no_body_or_an_empty_json_one,
    a_body_that_is_not_json_is_a_400_on_every_json_post,
    a_nul_in_a_persons_text_or_an_order_id_is_refused_naming_it,
    an_order_id_of_150_accented_letters_is_enqueued_and_found,
);

/// `POST {path}` as `who` with `body` under `content_type` (none when
/// `None`) and a fresh `Idempotency-Key`: the status and the JSON answer.
async fn post(
    web: &Web,
    who: &str,
    path: &str,
    content_type: Option<&str>,
    body: String,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", web.url))
        .bearer_auth(secret(who))
        .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
        .body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// What the database holds that any of these posts could change.
async fn snapshot(db: &TestDb, ids: &[uuid::Uuid]) -> String {
    let mut out = format!("attempts={} ", db.attempts().await);
    for id in ids {
        let (a, _) = db.store.load(*id).await.unwrap();
        out += &format!(
            "{}:{:?}:{}:{:?}:{:?} ",
            a.id, a.state, a.version, a.payment_method, a.next_action_at
        );
    }
    let paused = db.store.pause_state().await.unwrap().map(|s| s.paused);
    out + &format!("paused={paused:?}")
}

/// Every POST route family that takes a JSON body, with a body it would
/// accept: (who, path, body).
fn json_posts(
    approved: uuid::Uuid,
    review: &cobro::store::Attempt,
) -> Vec<(&'static str, String, Value)> {
    vec![
        (
            "app",
            "/charges".into(),
            json!({"order_id": "je-new", "amount_minor": 700, "currency": "USD"}),
        ),
        (
            "app",
            "/refunds".into(),
            json!({"attempt_id": approved, "amount_minor": 100}),
        ),
        (
            "app",
            "/orders/je-pending/cancel".into(),
            json!({"reason": "customer_request"}),
        ),
        (
            "app",
            "/orders/je-pending/payment-method".into(),
            json!({"payment_method": "pm_new"}),
        ),
        (
            "ana",
            "/control/pause".into(),
            json!({"reason": "incident"}),
        ),
        (
            "ana",
            format!("/finance/api/attempts/{}/resolve", review.id),
            json!({"action": "approve", "version": review.version, "note": "seen",
                   "charge_id": "ch_1"}),
        ),
        (
            "ana",
            "/finance/api/check-now".into(),
            json!({"note": "all"}),
        ),
        (
            "ana",
            "/finance/api/cases/1/resolve".into(),
            json!({"note": "ok"}),
        ),
        (
            "ana",
            "/finance/api/cases/1/refund-duplicate".into(),
            json!({"charge_id": "ch_2"}),
        ),
    ]
}

struct Seeded {
    approved: uuid::Uuid,
    pending: uuid::Uuid,
    review: cobro::store::Attempt,
}

async fn seed(db: &TestDb) -> Seeded {
    let req = ChargeRequest::parse("je-approved", 5_000, "EUR", None, None).unwrap();
    let approved = db.store.enqueue(&req).await.unwrap().attempt_id;
    let a = db.store.load(approved).await.unwrap().0;
    let a = step(&db.store, &a, Event::Claim, None).await;
    step(&db.store, &a, Event::Approved, None).await;
    let req = ChargeRequest::parse("je-pending", 2_500, "USD", None, Some("pm_old")).unwrap();
    let pending = db.store.enqueue(&req).await.unwrap().attempt_id;
    let review = in_review(&db.store, "je-review").await;
    Seeded {
        approved,
        pending,
        review,
    }
}

async fn every_json_post_refuses_another_content_type_and_writes_nothing(db: &TestDb) {
    let web = web_on(&db.store).await;
    let s = seed(db).await;
    let ids = [s.approved, s.pending, s.review.id];
    let before = snapshot(db, &ids).await;
    for (who, path, body) in json_posts(s.approved, &s.review) {
        for ct in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("application/jsonp"),
            None,
        ] {
            let (status, reply) = post(&web, who, &path, ct, body.to_string()).await;
            assert_eq!(status, 415, "{path} as {ct:?}: {reply}");
            assert_eq!(reply["error"], "Content-Type must be application/json");
        }
        // A route that takes a body wants it declared even when empty.
        let (status, reply) = post(&web, who, &path, None, String::new()).await;
        assert_eq!(status, 415, "{path} with nothing: {reply}");
    }
    assert_eq!(snapshot(db, &ids).await, before, "nothing written");
    // The same posts declared as JSON get past the check and act (so the
    // snapshot would have seen them).
    for (who, path, body) in json_posts(s.approved, &s.review) {
        let ct = Some("application/json; charset=utf-8");
        let (status, reply) = post(&web, who, &path, ct, body.to_string()).await;
        assert_ne!(status, 415, "{path}: {reply}");
    }
    assert_ne!(snapshot(db, &ids).await, before, "the JSON posts acted");
    web.stop().await;
}

/// Declared as JSON but not JSON: 400 on every route, as the OpenAPI
/// document says (finance's API used to answer 422), and nothing written.
async fn a_body_that_is_not_json_is_a_400_on_every_json_post(db: &TestDb) {
    let web = web_on(&db.store).await;
    let s = seed(db).await;
    let ids = [s.approved, s.pending, s.review.id];
    let before = snapshot(db, &ids).await;
    let mut posts = json_posts(s.approved, &s.review);
    let retry = format!("/finance/api/attempts/{}/retry", s.review.id);
    posts.push(("ana", retry, Value::Null));
    let ct = Some("application/json");
    for (who, path, _) in posts {
        let (status, reply) = post(&web, who, &path, ct, "{\"note\": ".into()).await;
        assert_eq!(status, 400, "{path}: {reply}");
        let error = reply["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("the body is not JSON"), "{path}: {reply}");
    }
    assert_eq!(snapshot(db, &ids).await, before, "nothing written");
    web.stop().await;
}

/// A NUL (PostgreSQL refuses it in text) in a person's text or in an order
/// id of a path or a query used to reach the database and fail there, as a
/// 503 "the database is not available; retry", which a retry cannot cure.
/// Each is refused before, naming its field, and nothing is written.
async fn a_nul_in_a_persons_text_or_an_order_id_is_refused_naming_it(db: &TestDb) {
    let web = web_on(&db.store).await;
    let s = seed(db).await;
    let case = open_case(db, "unmatched_charge", "je-case", "ch_nul", "{}").await;
    let ids = [s.approved, s.pending, s.review.id];
    let before = snapshot(db, &ids).await;
    let ct = Some("application/json");
    let posts: Vec<(&str, String, Value, &str)> = vec![
        (
            "ana",
            "/control/pause".into(),
            json!({"reason": "inc\0ident"}),
            "reason",
        ),
        (
            "ana",
            format!("/finance/api/attempts/{}/resolve", s.review.id),
            json!({"action": "approve", "version": s.review.version, "note": "seen\0",
                   "charge_id": "ch_1"}),
            "note",
        ),
        (
            "ana",
            "/finance/api/check-now".into(),
            json!({"note": "a\0b"}),
            "note",
        ),
        (
            "ana",
            format!("/finance/api/cases/{case}/resolve"),
            json!({"note": "done\0"}),
            "note",
        ),
        (
            "app",
            "/orders/je%00pending/cancel".into(),
            json!({"reason": "customer_request"}),
            "order_id",
        ),
        (
            "app",
            "/orders/je%00pending/payment-method".into(),
            json!({"payment_method": "pm_new"}),
            "order_id",
        ),
    ];
    for (who, path, body, field) in posts {
        let (status, reply) = post(&web, who, &path, ct, body.to_string()).await;
        assert_eq!(status, 422, "{path}: {reply}");
        assert_eq!(reply["field"], field, "{path}: {reply}");
        assert!(
            reply["error"]
                .as_str()
                .unwrap_or_default()
                .contains("U+0000"),
            "{path}: {reply}"
        );
    }
    let resp = reqwest::Client::new()
        .get(format!("{}/attempts?order_id=je%00pending", web.url))
        .bearer_auth(secret("app"))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let reply: Value = resp.json().await.unwrap_or(Value::Null);
    assert_eq!(
        (status, &reply["field"]),
        (400, &json!("order_id")),
        "{reply}"
    );
    assert_eq!(snapshot(db, &ids).await, before, "nothing written");
    assert_eq!(
        db.store.open_cases().await.unwrap().len(),
        1,
        "the case is still open"
    );
    web.stop().await;
}

async fn a_wrong_json_type_is_named_with_the_type_and_writes_nothing(db: &TestDb) {
    let web = web_on(&db.store).await;
    let s = seed(db).await;
    let ids = [s.approved, s.pending, s.review.id];
    let before = snapshot(db, &ids).await;
    let resolve = format!("/finance/api/attempts/{}/resolve", s.review.id);
    let cases: Vec<(&str, String, Value, &str, &str)> = vec![
        (
            "app",
            "/charges".into(),
            json!({"order_id": "je-t", "amount_minor": "1999", "currency": "USD"}),
            "amount_minor",
            "amount_minor must be an integer (minor units, e.g. 1999 for 19.99 USD); got a string",
        ),
        (
            "app",
            "/charges".into(),
            json!({"order_id": 42, "amount_minor": 1999, "currency": "USD"}),
            "order_id",
            "order_id must be a string (your order's id); got an integer",
        ),
        (
            "app",
            "/charges".into(),
            json!({"order_id": "je-t", "amount_minor": 1999, "currency": ["USD"]}),
            "currency",
            "currency must be a string (an ISO 4217 code, e.g. \"USD\"); got a list",
        ),
        (
            "app",
            "/refunds".into(),
            json!({"attempt_id": 12345, "amount_minor": 100}),
            "attempt_id",
            "attempt_id must be a string (the UUID of the APROBADO charge attempt to refund); got an integer",
        ),
        (
            "app",
            "/refunds".into(),
            json!({"attempt_id": s.approved, "amount_minor": true}),
            "amount_minor",
            "amount_minor must be an integer (minor units, e.g. 1999 for 19.99 USD); got true or false",
        ),
        (
            "app",
            "/orders/je-pending/cancel".into(),
            json!({"reason": 1}),
            "reason",
            "reason must be a string (paid_by_other_means, customer_request, fraud_suspected, duplicate_order or other); got an integer",
        ),
        (
            "app",
            "/orders/je-pending/payment-method".into(),
            json!({"payment_method": {"token": "pm_new"}}),
            "payment_method",
            "payment_method must be a string (the gateway's payment-method token); got an object",
        ),
        (
            "ana",
            "/control/pause".into(),
            json!({"reason": false}),
            "reason",
            "reason must be a string (why sending is paused, shown to everyone who looks); got true or false",
        ),
        (
            "ana",
            resolve.clone(),
            json!({"action": "approve", "version": s.review.version.to_string(),
                   "note": "seen", "charge_id": "ch_1"}),
            "version",
            "version must be an integer (the attempt's version you saw); got a string",
        ),
        (
            "ana",
            resolve,
            json!({"action": "approve", "version": s.review.version,
                   "note": "seen", "charge_id": 7}),
            "charge_id",
            "charge_id must be a string (the gateway's charge id); got an integer",
        ),
        (
            "ana",
            "/finance/api/check-now".into(),
            json!({"note": "all", "min_age_secs": "3600"}),
            "min_age_secs",
            "min_age_secs must be an integer (seconds); got a string",
        ),
        (
            "ana",
            "/finance/api/cases/1/resolve".into(),
            json!({"note": 5}),
            "note",
            "note must be a string (what you checked and why); got an integer",
        ),
        (
            "ana",
            "/finance/api/cases/1/refund-duplicate".into(),
            json!({"charge_id": null}),
            "charge_id",
            "",
        ),
    ];
    for (who, path, body, field, message) in cases {
        let (status, reply) =
            post(&web, who, &path, Some("application/json"), body.to_string()).await;
        assert_eq!(status, 422, "{path} {body}: {reply}");
        assert_eq!(reply["field"], field, "{path} {body}: {reply}");
        if !message.is_empty() {
            assert_eq!(reply["error"], message, "{path} {body}");
        }
        assert!(
            !reply["error"].as_str().unwrap().contains("is required")
                || body.get(field).is_some_and(Value::is_null),
            "a wrong type reads as missing: {reply}"
        );
    }
    assert_eq!(snapshot(db, &ids).await, before, "nothing written");
    web.stop().await;
}

async fn bodiless_posts_take_no_body_or_an_empty_json_one(db: &TestDb) {
    let web = web_on(&db.store).await;
    db.store
        .set_sending_paused(true, "test", Some("incident"))
        .await
        .unwrap();
    let paused = || async {
        db.store
            .pause_state()
            .await
            .unwrap()
            .is_some_and(|s| s.paused)
    };
    // A declared type that is not JSON, or a JSON body with a field: refused,
    // still paused.
    let (status, _) = post(
        &web,
        "ana",
        "/control/resume",
        Some("text/plain"),
        String::new(),
    )
    .await;
    assert_eq!(status, 415);
    let (status, reply) = post(
        &web,
        "ana",
        "/control/resume",
        Some("application/json"),
        r#"{"reason": "over"}"#.into(),
    )
    .await;
    assert_eq!(status, 422, "{reply}");
    assert_eq!(reply["field"], "reason");
    assert!(paused().await, "a refused resume changed nothing");
    // `curl -X POST` (no body, no type) and `{}` as JSON both resume.
    let (status, reply) = post(&web, "ana", "/control/resume", None, String::new()).await;
    assert_eq!((status, &reply["paused"]), (200, &json!(false)), "{reply}");
    let (status, _) = post(
        &web,
        "ana",
        "/control/resume",
        Some("application/json"),
        "{}".into(),
    )
    .await;
    assert_eq!(status, 200);

    // Finance's retry: the same rule, checked before the attempt is.
    let retry = format!("/finance/api/attempts/{}/retry", uuid::Uuid::new_v4());
    let (status, _) = post(&web, "ana", &retry, Some("text/plain"), "{}".into()).await;
    assert_eq!(status, 415);
    let (status, reply) = post(
        &web,
        "ana",
        &retry,
        Some("application/json"),
        r#"{"now": true}"#.into(),
    )
    .await;
    assert_eq!((status, &reply["field"]), (422, &json!("now")), "{reply}");
    let (status, _) = post(&web, "ana", &retry, None, String::new()).await;
    assert_eq!(status, 404, "read as a retry of an unknown attempt");
    web.stop().await;
}

async fn an_order_id_of_150_accented_letters_is_enqueued_and_found(db: &TestDb) {
    let web = web_on(&db.store).await;
    let order = "é".repeat(150);
    assert_eq!((order.len(), order.chars().count()), (300, 150));
    let body = json!({"order_id": order, "amount_minor": 700, "currency": "USD"});
    let (status, created) = post(
        &web,
        "app",
        "/charges",
        Some("application/json"),
        body.to_string(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let http = reqwest::Client::new();
    let search = |order: String| {
        http.get(format!("{}/attempts", web.url))
            .query(&[("order_id", order)])
            .bearer_auth(secret("agent"))
            .send()
    };
    let found = search(order.clone()).await.unwrap();
    assert_eq!(found.status(), 200);
    let found: Value = found.json().await.unwrap();
    let items = found["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{found}");
    assert_eq!(items[0]["id"], created["attempt_id"], "{found}");
    assert_eq!(items[0]["order_id"], order.as_str());
    assert_eq!(items[0]["state"], State::Pendiente.as_str());
    // Past the limit, counted in characters too: 201 × "é".
    let over = search("é".repeat(201)).await.unwrap();
    assert_eq!(over.status(), 400);
    let over: Value = over.json().await.unwrap();
    assert_eq!(over["field"], "order_id");
    assert_eq!(
        over["error"],
        "invalid order_id: must be at most 200 characters, got 201"
    );
    web.stop().await;
}
