//! `cobro serve` as a real process: the public listener serves only the
//! webhook receiver and `/health` when `COBRO_INTERNAL_LISTEN` puts the
//! API, finance and metrics on a listener of their own; `PORT` is honoured
//! when `COBRO_LISTEN` is unset; malformed keys stop the start-up without
//! showing a hash; SIGTERM stops it with exit 0.

#[macro_use]
mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::json;

on_both_dbs!(the_public_listener_serves_only_webhooks_and_health,);

fn serve(db_url: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cobro"));
    cmd.arg("serve")
        .env("DATABASE_URL", db_url)
        .env("COBRO_WEBHOOK_SECRETS", test_secret())
        .env("RUST_LOG", "warn")
        .env_remove("COBRO_LISTEN")
        .env_remove("PORT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("start cobro serve")
}

async fn up(base: &str) {
    eventually(Duration::from_secs(20), "cobro serve answers", || async {
        reqwest::get(format!("{base}/health"))
            .await
            .ok()
            .filter(|r| r.status() == 200)
    })
    .await;
}

/// SIGTERM, then the exit status.
fn terminate(mut child: Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success());
    for _ in 0..200 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("cobro serve did not stop within 10 s of SIGTERM");
}

async fn the_public_listener_serves_only_webhooks_and_health(db: &TestDb) {
    let (public, internal) = (free_port(), free_port());
    let web = serve(
        &db.url,
        &[
            ("COBRO_LISTEN", format!("127.0.0.1:{public}")),
            ("COBRO_INTERNAL_LISTEN", format!("127.0.0.1:{internal}")),
            ("COBRO_API_KEYS", test_keys_config()),
        ],
    );
    let (public, internal) = (
        format!("http://127.0.0.1:{public}"),
        format!("http://127.0.0.1:{internal}"),
    );
    up(&public).await;
    up(&internal).await;
    let http = reqwest::Client::new();
    let charge = json!({"order_id": "split-1", "amount_minor": 1999, "currency": "USD"});
    let post_charge = |base: &str| {
        http.post(format!("{base}/charges"))
            .bearer_auth(secret("app"))
            .header("Idempotency-Key", "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b")
            .json(&charge)
            .send()
    };
    // Public: the receiver (the signature decides), /health, /ready and
    // /openapi.json, nothing else.
    assert_eq!(post_charge(&public).await.unwrap().status(), 404);
    for path in ["/finance", "/finance/api/summary", "/metrics"] {
        let resp = get_as(&format!("{public}{path}"), As::Bearer("ana")).await;
        assert_eq!(resp.status(), 404, "{path} on the public listener");
    }
    let hook = http
        .post(format!("{public}/webhooks/gateway"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status(), 400, "unsigned");
    // The OpenAPI document is on both, like /health, without a credential.
    for base in [&public, &internal] {
        let doc = get_as(&format!("{base}/openapi.json"), As::Nobody).await;
        assert_eq!(doc.status(), 200, "/openapi.json on {base}");
    }
    // Internal: the API with its keys.
    assert_eq!(post_charge(&internal).await.unwrap().status(), 201);
    let metrics = get_as(&format!("{internal}/metrics"), As::Bearer("prom")).await;
    assert_eq!(metrics.status(), 200);
    let no_key = get_as(&format!("{internal}/metrics"), As::Nobody).await;
    assert_eq!(no_key.status(), 401);
    assert_eq!(db.attempts().await, 1);
    let status = terminate(web);
    assert_eq!(status.code(), Some(0), "SIGTERM: a clean exit");
}

#[tokio::test]
async fn port_is_honoured_when_cobro_listen_is_unset() {
    let dir = std::env::temp_dir().join(format!("cobro_t_port_{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("cobro.db").display());
    // Migrated: /health answers 503 on a database that never was.
    let migrated = Command::new(env!("CARGO_BIN_EXE_cobro"))
        .args(["migrate", "--database-url", &url])
        .output()
        .unwrap();
    assert!(migrated.status.success());
    let port = free_port();
    let web = serve(&url, &[("PORT", port.to_string())]);
    up(&format!("http://127.0.0.1:{port}")).await;
    assert_eq!(terminate(web).code(), Some(0));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn malformed_keys_stop_the_start_without_showing_them() {
    let hash = cobro::http::auth::hash_hex("some-secret");
    for (keys, why) in [
        (format!("app:charges:write:{}", &hash[..60]), "short hash"),
        (format!("app:charges:erase:{hash}"), "unknown scope"),
        (
            "app:charges:write:plain-secret-value".to_owned(),
            "a plaintext secret",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cobro"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("DATABASE_URL", "sqlite::memory:")
            .env("COBRO_WEBHOOK_SECRETS", test_secret())
            .env("COBRO_API_KEYS", &keys)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{why}: it started");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("COBRO_API_KEYS"), "{why}: {stderr}");
        assert!(
            !stderr.contains(&hash[..60]) && !stderr.contains("plain-secret-value"),
            "{why}: leaked: {stderr}"
        );
    }
}
