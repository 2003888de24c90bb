//! HTTP tests of proxy mode: a small upstream on 127.0.0.1 (counts what reaches it and echoes
//! it back) behind the simulator in proxy mode, the seeded faults around the forwarding, and
//! `GET /control/proxy`.
//!
//! Invariant: each test starts its own upstream and simulator; the upstream's count says
//! what was forwarded, the client sees only what the proxy let through.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, Method, StatusCode, Uri},
    routing::any,
};

use super::*;

/// A stand-in for localstripe: counts the POSTs that reach it, answers 402 under
/// `/v1/declined`, 200 elsewhere, with what it received as JSON.
struct EchoUpstream {
    url: String,
    posts: Arc<AtomicU64>,
}

impl EchoUpstream {
    async fn start() -> TestResult<Self> {
        let posts = Arc::new(AtomicU64::new(0));
        let app = Router::new()
            .route("/v1/{*path}", any(echo))
            .with_state(posts.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { url, posts })
    }

    fn posts(&self) -> u64 {
        self.posts.load(Ordering::SeqCst)
    }
}

async fn echo(
    State(posts): State<Arc<AtomicU64>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Json<Value>) {
    if method == Method::POST {
        posts.fetch_add(1, Ordering::SeqCst);
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let status = if uri.path().starts_with("/v1/declined") {
        StatusCode::PAYMENT_REQUIRED
    } else {
        StatusCode::OK
    };
    let echoed = json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query(),
        "authorization": header("authorization"),
        "idempotency_key": header("idempotency-key"),
        "stripe_version": header("stripe-version"),
        "content_type": header("content-type"),
        "accept": header("accept"),
        "cookie": header("cookie"),
        "body": String::from_utf8_lossy(&body),
    });
    (status, Json(echoed))
}

/// Starts the simulator in proxy mode in front of `upstream`.
async fn spawn_in_front_of(upstream: &str, cfg: SimConfig) -> TestResult<SimHandle> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    Ok(spawn_proxy(listener, cfg, upstream.parse()?).await?)
}

/// The simulator in proxy mode in front of `upstream`, with these faults and a 10 s client.
async fn proxy_in_front_of(upstream: &str, faults: Faults) -> TestResult<Sim> {
    let handle = spawn_in_front_of(upstream, config(|c| c.faults = faults)).await?;
    Sim::around(handle)?.timeout(Duration::from_secs(10))
}

/// A fresh [`EchoUpstream`] and the simulator in proxy mode in front of it.
async fn echo_proxy(faults: Faults) -> TestResult<(EchoUpstream, Sim)> {
    let upstream = EchoUpstream::start().await?;
    let sim = proxy_in_front_of(&upstream.url, faults).await?;
    Ok((upstream, sim))
}

impl Api {
    async fn proxy_stats(&self) -> TestResult<ProxyStats> {
        let resp = self.get("/control/proxy").send().await?;
        Ok(resp.error_for_status()?.json().await?)
    }

    /// A Stripe-style form POST through the proxy.
    async fn create_intent(&self, path: &str) -> reqwest::Result<Response> {
        self.post(path)
            .header("authorization", "Bearer sk_test_123")
            .header("idempotency-key", "key-1")
            .header("stripe-version", "2024-06-20")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .header("cookie", "not=forwarded")
            .body("amount=1000&currency=eur&confirm=true")
            .send()
            .await
    }
}

#[tokio::test]
async fn a_post_reaches_the_upstream_with_its_headers_and_body_and_the_answer_comes_back()
-> TestResult {
    let (upstream, sim) = echo_proxy(Faults::default()).await?;

    let resp = sim
        .create_intent("/v1/payment_intents?expand[]=latest_charge")
        .await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let echoed: Value = resp.json().await?;
    assert_eq!(
        echoed,
        json!({
            "method": "POST",
            "path": "/v1/payment_intents",
            "query": "expand[]=latest_charge",
            "authorization": "Bearer sk_test_123",
            "idempotency_key": "key-1",
            "stripe_version": "2024-06-20",
            "content_type": "application/x-www-form-urlencoded",
            "accept": "application/json",
            "cookie": null,
            "body": "amount=1000&currency=eur&confirm=true",
        })
    );
    // The upstream's status is relayed as it is; reads are forwarded too; the simulator's
    // own /v1/charges is the upstream's now; /health stays the simulator's.
    let declined = sim.create_intent("/v1/declined").await?;
    assert_eq!(declined.status(), StatusCode::PAYMENT_REQUIRED);
    let read = sim.get("/v1/charges/ch_1").send().await?;
    let read: Value = read.error_for_status()?.json().await?;
    assert_eq!(
        (&read["method"], &read["path"]),
        (&json!("GET"), &json!("/v1/charges/ch_1"))
    );
    let health = sim.get("/health").send().await?;
    assert_eq!(health.status(), StatusCode::OK);

    assert_eq!(upstream.posts(), 2);
    assert_eq!(
        sim.proxy_stats().await?,
        ProxyStats {
            forwarded: 3,
            executing_forwarded: 2,
            ..ProxyStats::default()
        }
    );
    sim.stop().await
}

#[tokio::test]
async fn after_the_upstream_answered_the_reply_is_lost_or_held() -> TestResult {
    let (upstream, sim) = echo_proxy(faults(|f| f.p_response_lost = 1.0)).await?;

    assert_dropped(sim.create_intent("/v1/payment_intents").await);
    assert_eq!(upstream.posts(), 1);
    // Reads never lose their response.
    let read = sim.get("/v1/charges/ch_1").send().await?;
    assert_eq!(read.status(), StatusCode::OK);
    // A held reply: the upstream executed it, the client gets it hold_ms later.
    let held = faults(|f| {
        f.p_timeout_after_charge = 1.0;
        f.hold_ms = 50;
    });
    sim.put_faults(&held).await?.error_for_status()?;
    let sent = std::time::Instant::now();
    let resp = sim.create_intent("/v1/payment_intents").await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(sent.elapsed() >= Duration::from_millis(50));
    assert_eq!(upstream.posts(), 2);
    assert_eq!(
        sim.proxy_stats().await?,
        ProxyStats {
            forwarded: 3,
            executing_forwarded: 2,
            response_lost_after_upstream: 1,
            timeout_after_upstream: 1,
            ..ProxyStats::default()
        }
    );
    sim.stop().await
}

#[tokio::test]
async fn request_lost_and_5xx_never_reach_the_upstream() -> TestResult {
    let lost = faults(|f| {
        f.p_request_lost = 1.0;
        f.hold_ms = 50;
    });
    let (upstream, sim) = echo_proxy(lost).await?;

    assert_dropped(sim.create_intent("/v1/payment_intents").await);
    sim.put_faults(&faults(|f| f.p_5xx = 1.0))
        .await?
        .error_for_status()?;
    let resp = sim.create_intent("/v1/payment_intents").await?;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(resp.headers().get("retry-after").is_none());

    assert_eq!(upstream.posts(), 0);
    assert_eq!(
        sim.proxy_stats().await?,
        ProxyStats {
            request_lost: 1,
            refused_5xx: 1,
            ..ProxyStats::default()
        }
    );
    sim.stop().await
}

#[tokio::test]
async fn lookup_fail_rate_limit_and_an_unreachable_upstream() -> TestResult {
    // A port nothing listens on: bound, then released.
    let gone = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let failing = faults(|f| {
        f.p_lookup_fail = 1.0;
        f.rate_limit_per_s = 0.001;
        f.rate_limit_burst = 2;
    });
    let sim = proxy_in_front_of(&format!("http://{gone}"), failing).await?;

    let read = sim.get("/v1/charges/ch_1").send().await?;
    assert_eq!(read.status(), StatusCode::SERVICE_UNAVAILABLE);
    let post = sim.create_intent("/v1/payment_intents").await?;
    assert_error(post, StatusCode::BAD_GATEWAY, "upstream_unreachable").await?;
    let throttled = sim.create_intent("/v1/payment_intents").await?;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    // What the upstream decides cannot be set at run time either.
    let decline = faults(|f| f.p_decline = 0.5);
    assert_eq!(
        sim.put_faults(&decline).await?.status(),
        StatusCode::BAD_REQUEST
    );

    assert_eq!(
        sim.proxy_stats().await?,
        ProxyStats {
            forwarded: 1,
            executing_forwarded: 1,
            lookup_failed: 1,
            throttled: 1,
            upstream_errors: 1,
            ..ProxyStats::default()
        }
    );
    sim.stop().await
}

#[tokio::test]
async fn proxy_mode_refuses_what_the_upstream_decides() -> TestResult {
    let cfg = config(|c| c.idempotent = false);
    let started = spawn_in_front_of("http://127.0.0.1:9", cfg).await;
    let refused = started.map(|_| ()).map_err(|e| e.to_string());
    assert!(
        matches!(refused, Err(ref e) if e.contains("--no-idempotency")),
        "{refused:?}"
    );
    Ok(())
}
