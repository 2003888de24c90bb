//! The routes open to anyone: `/health`, `/openapi.json` and the webhook
//! receiver (its signature decides, not a key); and a web process with no
//! keys configured, where every guarded route is closed.

use serde_json::{Value, json};

use super::common::{self, TestDb, secret, start_web_cfg, test_verifier, web_on};
use super::fixtures::client;

on_both_dbs!(only_the_webhook_receiver_and_health_are_open,);

async fn only_the_webhook_receiver_and_health_are_open(db: &TestDb) {
    let web = web_on(&db.store).await;
    let http = client();
    let health = http
        .get(format!("{}/health", web.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // The OpenAPI document is public: it holds no data.
    let doc = http
        .get(format!("{}/openapi.json", web.url))
        .send()
        .await
        .unwrap();
    assert_eq!(doc.status(), 200);
    let doc: Value = doc.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    // The receiver answers a stranger, and the signature decides.
    let hook = http
        .post(format!("{}/webhooks/gateway", web.url))
        .json(&json!({"id": "evt_x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        hook.status(),
        400,
        "unsigned: missing headers, not a 401 for a key"
    );
    // With no keys configured at all, every guarded route is closed.
    let v = test_verifier();
    let bare = start_web_cfg(cobro::web::WebConfig::new(db.store.clone(), v)).await;
    for path in [
        "/finance/api/summary",
        "/metrics",
        "/charges/00000000-0000-4000-8000-000000000000",
    ] {
        let resp = http
            .get(format!("{}{path}", bare.url))
            .bearer_auth(secret("app"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{path}");
        let err: Value = resp.json().await.unwrap();
        assert!(
            err["error"].as_str().unwrap().contains("COBRO_API_KEYS"),
            "{err}"
        );
    }
    // With no keys, the document is still served.
    let doc = http
        .get(format!("{}/openapi.json", bare.url))
        .send()
        .await
        .unwrap();
    assert_eq!(doc.status(), 200);
    bare.stop().await;
    web.stop().await;
}
