//! The web process for a test: `cobro serve`'s routes on 127.0.0.1:0 with
//! the test API keys ([`TEST_KEYS`], each one's secret [`secret`]`(name)`),
//! or any router through cobro's hardened server loop, and its finish; a
//! test webhook secret and its verifier; a free port for a `cobro serve`
//! the test starts.

use std::time::Duration;

use cobro::store::Store;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A test webhook secret (Standard Webhooks format, 32 random bytes).
pub fn test_secret() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// A Standard Webhooks verifier with a fresh [`test_secret`], for a web
/// process whose webhooks the test does not sign.
pub fn test_verifier() -> cobro::webhook::Verifier {
    cobro::webhook::Verifier::from_env_value(
        cobro::webhook::Scheme::StandardWebhooks,
        &test_secret(),
    )
    .expect("a verifier of the test secret")
}

/// The test API keys: name, scopes. Each one's secret is [`secret`]`(name)`.
pub const TEST_KEYS: &[(&str, &str)] = &[
    ("app", "charges:write+refunds:write+attempts:read"),
    ("ana", "finance:read+finance:write"),
    ("luis", "finance:read+finance:write"),
    ("agent", "finance:read+attempts:read"),
    ("prom", "metrics:read"),
];

/// The secret of test key `name` (only its SHA-256 is configured).
pub fn secret(name: &str) -> String {
    format!("test-secret-of-{name}-0123456789")
}

/// [`TEST_KEYS`] as `COBRO_API_KEYS` holds them: hashes only.
pub fn test_keys_config() -> String {
    let entries: Vec<String> = TEST_KEYS
        .iter()
        .map(|(name, scopes)| {
            format!(
                "{name}:{scopes}:{}",
                cobro::http::auth::hash_hex(&secret(name))
            )
        })
        .collect();
    entries.join(",")
}

/// [`TEST_KEYS`] as the web process holds them.
pub fn test_keys() -> cobro::http::auth::ApiKeys {
    cobro::http::auth::ApiKeys::parse(&test_keys_config()).expect("test keys")
}

/// A port free on 127.0.0.1 now, for a process the test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The web process (`cobro serve`'s routes, with [`test_keys`] and fresh
/// metrics) on 127.0.0.1:0, until dropped or stopped.
pub struct Web {
    pub url: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

pub async fn start_web(store: &Store, verifier: cobro::webhook::Verifier) -> Web {
    start_web_cfg(web_config(store, verifier)).await
}

/// [`start_web`] with a [`test_verifier`]: for a test that signs no
/// webhook.
pub async fn web_on(store: &Store) -> Web {
    start_web(store, test_verifier()).await
}

/// The web settings of [`start_web`], to adjust before [`start_web_cfg`].
pub fn web_config(store: &Store, verifier: cobro::webhook::Verifier) -> cobro::web::WebConfig {
    let mut cfg = cobro::web::WebConfig::new(store.clone(), verifier);
    cfg.keys = test_keys();
    cfg.metrics_cache = Duration::ZERO;
    cfg
}

/// The web process with these settings, one listener, default limits.
pub async fn start_web_cfg(cfg: cobro::web::WebConfig) -> Web {
    serve_router(cfg.router(), cobro::http::serve::HttpLimits::default()).await
}

/// Any router on 127.0.0.1:0 through cobro's hardened server loop.
pub async fn serve_router(app: axum::Router, limits: cobro::http::serve::HttpLimits) -> Web {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind web");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        cobro::http::serve::serve(listener, app, &limits, async move {
            let _ = rx.await;
        })
        .await
        .expect("web server");
    });
    Web { url, stop, task }
}

impl Web {
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
