//! The worker's gateway settings fail loudly, against the real binary: no
//! gateway chosen, a publishable Stripe key, a key the API refuses (a real
//! HTTP server answering 401 like Stripe does), and an unreachable API,
//! which is the gateway's outage and lets the worker start.

#[macro_use]
mod common;

use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

fn worker(db_url: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = bare_worker(db_url);
    cmd.env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "1")
        .env("COBRO_RECONCILE_AT", "off")
        .env("COBRO_GATEWAY_CONNECT_TIMEOUT", "500ms")
        .env("COBRO_GATEWAY_TIMEOUT", "1s");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn refused(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
    stderr
}

#[tokio::test]
async fn a_worker_without_a_gateway_or_with_a_publishable_key_refuses_to_start() {
    let db = TestDb::new(Backend::Sqlite).await;
    let none = refused(&worker(&db.url, &[]).output().unwrap());
    assert!(
        none.contains("no gateway configured")
            && none.contains("COBRO_GATEWAY")
            && none.contains("GATEWAY_URL"),
        "{none}"
    );
    let sim_no_url = refused(
        &worker(&db.url, &[("COBRO_GATEWAY", "sim")])
            .output()
            .unwrap(),
    );
    assert!(sim_no_url.contains("needs GATEWAY_URL"), "{sim_no_url}");
    let pk = refused(
        &worker(
            &db.url,
            &[
                ("COBRO_GATEWAY", "stripe"),
                ("STRIPE_SECRET_KEY", "pk_live_51Hpublishablevalue"),
            ],
        )
        .output()
        .unwrap(),
    );
    assert!(
        pk.contains("STRIPE_SECRET_KEY") && pk.contains("publishable"),
        "{pk}"
    );
    assert!(
        !pk.contains("publishablevalue"),
        "the key is not shown: {pk}"
    );
    db.drop_db().await;
}

/// A stand-in for Stripe's API that refuses every key with 401, as Stripe
/// does, and records what it was asked.
async fn refusing_api() -> (String, Arc<Mutex<Vec<(String, String)>>>) {
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let log = log.clone();
        async move {
            let auth = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            log.lock().unwrap().push((req.uri().to_string(), auth));
            (
                axum::http::StatusCode::UNAUTHORIZED,
                axum::Json(
                    serde_json::json!({"error": {"type": "invalid_request_error",
                    "message": "Invalid API Key provided"}}),
                ),
            )
        }
    });
    let url = stand_in(app).await;
    (url, seen)
}

#[tokio::test]
async fn a_stripe_key_the_api_refuses_stops_the_worker_at_start_up() {
    let db = TestDb::new(Backend::Sqlite).await;
    let (api, seen) = refusing_api().await;
    let mut cmd = worker(
        &db.url,
        &[
            ("COBRO_GATEWAY", "stripe"),
            ("STRIPE_SECRET_KEY", "sk_test_revoked0123"),
            ("STRIPE_API_BASE", &api),
        ],
    );
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stderr = refused(&out);
    assert!(
        stderr.contains("refused STRIPE_SECRET_KEY") && stderr.contains("401"),
        "{stderr}"
    );
    assert!(!stderr.contains("revoked0123"), "{stderr}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one start-up call: {seen:?}");
    assert_eq!(seen[0].0, "/v1/payment_intents?limit=1");
    assert_eq!(seen[0].1, "Bearer sk_test_revoked0123");
    db.drop_db().await;
}

#[tokio::test]
async fn an_unreachable_stripe_api_lets_the_worker_start() {
    let db = TestDb::new(Backend::Sqlite).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::env::temp_dir().join(format!("cobro-gwcfg-{port}.log"));
    let mut child: Child = worker(
        &db.url,
        &[
            ("COBRO_GATEWAY", "stripe"),
            ("STRIPE_SECRET_KEY", "rk_test_restricted0123"),
            ("STRIPE_API_BASE", &format!("http://127.0.0.1:{port}")),
        ],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    let started = Instant::now();
    let mut warned = String::new();
    while started.elapsed() < Duration::from_secs(20) {
        warned = std::fs::read_to_string(&log).unwrap_or_default();
        if warned.contains("starting anyway") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let still_running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(warned.contains("starting anyway"), "{warned}");
    assert!(still_running, "the outage is not the key's fault: {warned}");
    let _ = std::fs::remove_file(&log);
    db.drop_db().await;
}
