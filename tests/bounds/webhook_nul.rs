//! A signed webhook carrying `\u0000` in a code is stored once and
//! applied; one whose event id or charge id carries it is refused as
//! malformed (an id is never altered).

use cobro::state::State;
use serde_json::{Value, json};

use super::common::{self, *};
use super::{charge, verifier};

on_both_dbs!(a_signed_webhook_carrying_nul_is_stored_once_and_applied_unless_in_an_id,);

async fn stored(db: &TestDb, event_id: &str) -> (String, i64) {
    match db.backend {
        Backend::Postgres => sqlx::query_as(
            "SELECT payload, count(*) OVER () FROM cobro.webhook_events WHERE event_id = $1",
        )
        .bind(event_id)
        .fetch_one(db.store.pg_pool().unwrap())
        .await
        .unwrap(),
        Backend::Sqlite => sqlx::query_as(
            "SELECT payload, count(*) OVER () FROM webhook_events WHERE event_id = ?1",
        )
        .bind(event_id)
        .fetch_one(db.store.sqlite_pool().unwrap())
        .await
        .unwrap(),
    }
}

async fn a_signed_webhook_carrying_nul_is_stored_once_and_applied_unless_in_an_id(db: &TestDb) {
    let secret = test_secret();
    let v = verifier(&secret);
    let web = start_web(&db.store, verifier(&secret)).await;
    let send = |id: &str, body: &[u8]| {
        let headers = v.sign(id, chrono::Utc::now().timestamp(), body);
        let mut req = reqwest::Client::new()
            .post(format!("{}/webhooks/gateway", web.url))
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (k, val) in headers {
            req = req.header(k, val);
        }
        async move {
            let resp = req.send().await.expect("POST /webhooks/gateway");
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };

    // A decline whose code and metadata carry NUL (serde_json writes it as
    // the escape \u0000, which PostgreSQL's jsonb refuses).
    let declined = charge(&db.store, "b-nul-1", 1_999).await;
    let body = json!({
        "id": "evt_nul_1", "type": "charge.failed", "created": chrono::Utc::now().timestamp(),
        "data": {"charge_id": "ch_nul_1", "idempotency_key": declined.idempotency_key,
                 "status": "declined", "decline_code": "card\0declined",
                 "metadata": {"note": "before\0after"}}
    })
    .to_string();
    assert!(body.contains(r"card\u0000declined") && body.contains(r"before\u0000after"));
    let (status, reply) = send("evt_nul_1", body.as_bytes()).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["outcome"]["result"], "applied", "{reply}");
    assert_eq!(reply["outcome"]["to"], "RECHAZADO", "{reply}");
    let (a, _) = db.store.load(declined.id).await.unwrap();
    assert_eq!(a.state, State::Rechazado);
    assert_eq!(a.decline_code.as_deref(), Some(r"card\u0000declined"));
    assert_eq!(stored(db, "evt_nul_1").await, (body.clone(), 1));
    let (status, reply) = send("evt_nul_1", body.as_bytes()).await;
    assert_webhook_took(status, &reply, "duplicate");

    // NUL in the event id, or in the charge id of an approval: an id is
    // never altered (a refund or a lookup by it would miss), so the event
    // is malformed; the worker's own lookup settles the attempt.
    let not_by_hook = charge(&db.store, "b-nul-2", 2_999).await;
    let msg_id = "msg_nul_2"; // a header cannot carry NUL; the JSON id can
    for (id, charge_id) in [("evt_nul\u{0}2", "ch_nul_2"), ("evt_nul_3", "ch_nul\u{0}3")] {
        let body = json!({
            "id": id, "type": "charge.succeeded",
            "data": {"charge_id": charge_id, "idempotency_key": not_by_hook.idempotency_key,
                     "status": "approved", "metadata": {"note": "\u{0}"}}
        })
        .to_string();
        let (status, reply) = send(msg_id, body.as_bytes()).await;
        assert_eq!(status, 400, "{reply}");
        let error = reply["error"].as_str().unwrap();
        assert!(
            error.starts_with("malformed_body: ")
                && error.contains("holds the control character U+0000")
                && error.contains(r"\u0000"),
            "{reply}"
        );
    }
    let (a, _) = db.store.load(not_by_hook.id).await.unwrap();
    assert_eq!(a.state, State::Pendiente);
    assert_eq!(a.gateway_charge_id, None);

    let (accepted, rejected) = db.store.webhook_counts().await.unwrap();
    assert_eq!(accepted, 1, "only the decline was stored");
    // One sample row per reason per minute (two if the minute turned).
    assert!((1..=2).contains(&rejected), "{rejected}");
    assert_eq!(
        causes(&db.store, declined.id).await,
        ["enqueued", "webhook_declined"]
    );
    web.stop().await;
}
