//! The `web` process (`cobro serve`): gateway webhooks, HTTP enqueue and a
//! health check.
//!
//! Routes:
//! - `POST /webhooks/gateway`: signed gateway events ([`webhooks`]).
//! - `POST /charges` with `Idempotency-Key`, `GET /charges/{attempt_id}` ([`charges`]).
//! - `POST /refunds` with `Idempotency-Key`, `GET /refunds/{refund_id}` ([`refunds`]).
//! - `GET /health`: the process is up and the database answers.
//! - `/finance…`: the escalation queue for finance, behind authentication ([`finance`]).
//! - `GET /metrics`: Prometheus text format, no auth ([`crate::metrics`]).
//!
//! Invariant: the process refuses to start without valid webhook secrets;
//! secrets never reach logs or `Debug`.

mod charges;
pub mod finance;
mod refunds;
mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use serde_json::json;
use tracing::info;

use crate::backoff::parse_duration_arg as duration;
use crate::store::Store;
use crate::webhook::{Scheme, Verifier};

/// Every setting of `cobro serve`, as a flag or an environment variable.
#[derive(Clone, Args)]
pub struct ServeArgs {
    /// Where to listen. Unset: `0.0.0.0:$PORT` when the platform sets
    /// `PORT` (Heroku, Dokku, honcho), else `127.0.0.1:8080`.
    #[arg(long, env = "COBRO_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// The port a Procfile platform assigns; used only when `COBRO_LISTEN`
    /// is unset.
    #[arg(long, env = "PORT", hide = true)]
    pub port: Option<u16>,
    /// `postgres://…` or `sqlite://path`.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// Active webhook signing secrets, comma-separated (several during a
    /// rotation). Standard Webhooks: `whsec_<base64>`; Stripe: `whsec_…`.
    #[arg(long, env = "COBRO_WEBHOOK_SECRETS", hide_env_values = true)]
    pub webhook_secrets: String,
    /// `standard` (Standard Webhooks) or `stripe` (`Stripe-Signature`).
    #[arg(long, env = "COBRO_WEBHOOK_SCHEME", default_value = "standard")]
    pub webhook_scheme: String,
    /// How far a webhook's timestamp may be from now, either way.
    #[arg(long, env = "COBRO_WEBHOOK_TOLERANCE", default_value = "300s", value_parser = duration)]
    pub webhook_tolerance: Duration,
    /// Largest accepted request body; larger ones get 413.
    #[arg(long, env = "COBRO_MAX_BODY_BYTES", default_value_t = 65_536)]
    pub max_body_bytes: usize,
    /// A decline by webhook schedules the business retry like the worker does.
    #[command(flatten)]
    pub retry: crate::retry::RetryArgs,
    /// The finance pages and API.
    #[command(flatten)]
    pub finance: finance::FinanceArgs,
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("listen", &self.listen_addr())
            .field("webhook_scheme", &self.webhook_scheme)
            .field("webhook_secrets", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl ServeArgs {
    /// `COBRO_LISTEN`, else `0.0.0.0:$PORT`, else `127.0.0.1:8080`.
    pub fn listen_addr(&self) -> SocketAddr {
        match (self.listen, self.port) {
            (Some(addr), _) => addr,
            (None, Some(port)) => SocketAddr::from(([0, 0, 0, 0], port)),
            (None, None) => SocketAddr::from(([127, 0, 0, 1], 8080)),
        }
    }

    pub fn verifier(&self) -> anyhow::Result<Verifier> {
        let scheme: Scheme = self
            .webhook_scheme
            .parse()
            .map_err(|e| anyhow::anyhow!("COBRO_WEBHOOK_SCHEME: {e}"))?;
        let verifier = Verifier::from_env_value(scheme, &self.webhook_secrets)
            .map_err(|e| anyhow::anyhow!("COBRO_WEBHOOK_SECRETS: {e}"))?;
        Ok(verifier.with_tolerance(self.webhook_tolerance))
    }
}

pub(crate) struct App {
    pub(crate) store: Store,
    pub(crate) verifier: Verifier,
    pub(crate) max_body: usize,
    pub(crate) retry: crate::retry::RetryPolicy,
}

pub(crate) type AppState = State<Arc<App>>;

/// The routes, for a store, a verifier and the business-retry policy.
pub fn router(
    store: Store,
    verifier: Verifier,
    max_body: usize,
    retry: crate::retry::RetryPolicy,
) -> Router {
    crate::metrics::install();
    let app = Arc::new(App {
        store,
        verifier,
        max_body,
        retry,
    });
    Router::new()
        .route("/webhooks/gateway", post(webhooks::receive))
        .route("/charges", post(charges::create))
        .route("/charges/{attempt_id}", get(charges::show))
        .route("/refunds", post(refunds::create))
        .route("/refunds/{refund_id}", get(charges::show))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        // Our own limit (recorded, 413) applies first; this one only stops
        // absurd bodies from being read at all.
        .layer(DefaultBodyLimit::max(max_body.max(1 << 20)))
        .with_state(app)
}

async fn health(State(app): AppState) -> Response {
    match app.store.ping().await {
        Ok(()) => Json(json!({"ok": true, "database": app.store.backend()})).into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"ok": false, "error": e.to_string()})),
        )
            .into_response(),
    }
}

async fn metrics(State(app): AppState) -> Response {
    crate::metrics::response(&app.store).await
}

pub(crate) fn error(
    status: StatusCode,
    field: Option<&str>,
    message: impl Into<String>,
) -> Response {
    let mut body = json!({ "error": message.into() });
    if let Some(f) = field {
        body["field"] = json!(f);
    }
    (status, Json(body)).into_response()
}

/// Runs the web process until `shutdown` resolves.
pub async fn run(
    args: ServeArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let verifier = args.verifier()?;
    let retry = args
        .retry
        .policy()
        .map_err(|e| anyhow::anyhow!("COBRO_RETRY_SCHEDULE: {e}"))?;
    let finance = args
        .finance
        .config(args.retry.max_attempts)
        .map_err(anyhow::Error::msg)?;
    let store = Store::connect(&args.database_url, 10)
        .await
        .context("connecting to DATABASE_URL")?;
    let addr = args.listen_addr();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    info!(addr = %listener.local_addr()?, scheme = ?verifier.scheme(), "cobro web listening");
    axum::serve(
        listener,
        router(store.clone(), verifier, args.max_body_bytes, retry)
            .merge(finance::router(store, finance)),
    )
    .with_graceful_shutdown(shutdown)
    .await?;
    info!("cobro web stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: super::ServeArgs,
    }

    fn listen(args: &[&str]) -> String {
        let mut argv = vec![
            "cobro",
            "--database-url",
            "sqlite://x",
            "--webhook-secrets",
            "s",
        ];
        argv.extend_from_slice(args);
        Cli::parse_from(argv).serve.listen_addr().to_string()
    }

    #[test]
    fn listen_follows_cobro_listen_then_port_then_loopback() {
        assert_eq!(listen(&[]), "127.0.0.1:8080");
        assert_eq!(listen(&["--port", "5000"]), "0.0.0.0:5000");
        assert_eq!(
            listen(&["--port", "5000", "--listen", "127.0.0.1:9000"]),
            "127.0.0.1:9000"
        );
    }
}
