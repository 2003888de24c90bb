//! The `web` process (`cobro serve`): gateway webhooks, the HTTP API,
//! finance's pages, metrics and a health check.
//!
//! Routes, and who may call them ([`crate::http::auth`]):
//! - `POST /webhooks/gateway`: anyone; the signature decides ([`webhooks`]).
//!   Without webhook secrets it is not mounted (404), logged at start-up.
//! - `GET /health`, `GET /ready`: anyone; whether the database answers
//!   and has the schema this binary needs ([`health`]).
//! - `POST /charges` (`charges:write`), `GET /charges/{attempt_id}`
//!   (`attempts:read`: the attempt, its history and lookups) ([`charges`]).
//! - `POST /refunds` (`refunds:write`), `GET /refunds/{refund_id}`
//!   (`attempts:read`) ([`refunds`]).
//! - `GET /attempts?order_id=&key=&state=&kind=&from=&to=&cursor=&limit=`
//!   and `GET /attempts/{attempt_id}` (`attempts:read`, Bearer): the
//!   operator's search over every attempt, and one attempt with its
//!   history and lookups (the same handler as `GET /charges/{attempt_id}`)
//!   ([`operator`]).
//! - `GET /operator/attempts`, `GET /operator/attempts/{id}`
//!   (`attempts:read`, Basic or Bearer): the same as pages, with the
//!   incident switch's banner ([`operator`]).
//! - `POST /orders/{order_id}/cancel` (`charges:write`): stop what was not
//!   sent ([`cancel`]).
//! - `POST /orders/{order_id}/payment-method` (`charges:write`): a new token
//!   for the order's next business retry ([`payment_method`]).
//! - `POST /control/pause`, `POST /control/resume`, `GET /control/pause`
//!   (`finance:write`): the incident switch ([`control`]).
//! - `/finance…`: the escalation queue (`finance:read`, `finance:write`) ([`finance`]).
//!
//! The pages (finance's and the operator's) share [`html`].
//! - `GET /metrics` (`metrics:read`) ([`crate::metrics`]).
//!
//! With `COBRO_INTERNAL_LISTEN` the public listener serves only the webhook
//! receiver and `/health`, and everything else is on the internal one.
//!
//! Invariant: the process refuses to start with malformed webhook secrets
//! or keys; every route but the webhook receiver and `/health`
//! checks a credential and a scope before its handler runs; every JSON body
//! a caller sends is refused (422 naming the field, nothing written) when
//! it has a top-level field the route does not take ([`known_fields`]) or
//! a field of the wrong JSON type (422 naming the field and the type,
//! [`crate::http::typed`]); every POST with a body requires
//! `application/json` (415);
//! secrets never reach logs or `Debug`; every listener runs with timeouts
//! and limits.

mod cancel;
mod charges;
mod control;
pub mod finance;
mod health;
mod html;
mod operator;
mod payment_method;
mod refunds;
mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::middleware::from_fn;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use serde_json::json;
use tracing::{info, warn};

use crate::backoff::parse_duration_arg as duration;
use crate::http::auth::{ApiKeyArgs, ApiKeys, Guard, Scope, Via};
pub(crate) use crate::http::error;
use crate::http::{json_only, json_or_nothing};

/// 409 for a refusal by the database's charge rule: the message, and
/// `"reason"` naming which part refused (`approved`, `live_attempt`,
/// `open_case`, `cancelled`) when one did.
pub(crate) fn conflict(hold: Option<crate::store::Hold>, message: impl Into<String>) -> Response {
    let mut body = json!({ "error": message.into() });
    if let Some(h) = hold {
        body["field"] = json!("order_id");
        body["reason"] = json!(h.as_str());
    }
    (StatusCode::CONFLICT, Json(body)).into_response()
}

/// A small JSON request body, read within the API limit: 413 when it is
/// too large, 400 when it is not JSON, 422 when it has a field other than
/// `fields` ([`known_fields`]) (the routes that take one field).
pub(crate) fn json_body(
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
    fields: &[&str],
) -> Result<serde_json::Value, Box<Response>> {
    let Ok(body) = body else {
        return Err(Box::new(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            "the body is too large",
        )));
    };
    let v = serde_json::from_slice(&body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            None,
            format!("the body is not JSON: {e}"),
        ))
    })?;
    known_fields(&v, fields)?;
    Ok(v)
}

/// Every JSON body the web process takes is checked here before anything
/// else reads it: a top-level field other than `fields` (a misspelled
/// `paymentMethod`, say) is refused with 422 naming it, rather than dropped
/// in silence, so nothing is written on a request the caller did not mean.
/// A body that is not an object is left to the route (it refuses it as
/// missing its fields).
pub(crate) fn known_fields(v: &serde_json::Value, fields: &[&str]) -> Result<(), Box<Response>> {
    let Some(unknown) = v
        .as_object()
        .and_then(|o| o.keys().find(|k| !fields.contains(&k.as_str())))
    else {
        return Ok(());
    };
    let name = crate::domain::text::stored(unknown, crate::domain::text::Kind::Id);
    Err(Box::new(error(
        StatusCode::UNPROCESSABLE_ENTITY,
        Some(&name),
        format!(
            "unknown field {name:?}; expected one of: {}",
            fields.join(", ")
        ),
    )))
}
use crate::http::serve::{HttpLimits, serve};
use crate::metrics::Scraper;
use crate::store::Store;
use crate::webhook::{Scheme, Verifier};

/// The largest body of an API request (charges, refunds, finance); larger
/// gets 413. Webhooks have their own limit (`COBRO_MAX_BODY_BYTES`).
pub const API_BODY_LIMIT: usize = 16 * 1024;

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
    /// A second listener for the API, finance and metrics (e.g. on a private
    /// network); the public one then serves only webhooks and /health.
    #[arg(long, env = "COBRO_INTERNAL_LISTEN")]
    pub internal_listen: Option<SocketAddr>,
    /// `postgres://…` or `sqlite://path`.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// Active webhook signing secrets, comma-separated (several during a
    /// rotation). Standard Webhooks: `whsec_<base64>`; Stripe: `whsec_…`.
    /// Unset: the webhook route is off (404) and everything else serves.
    #[arg(
        long,
        env = "COBRO_WEBHOOK_SECRETS",
        hide_env_values = true,
        default_value = "",
        hide_default_value = true
    )]
    pub webhook_secrets: String,
    /// `standard` (Standard Webhooks) or `stripe` (`Stripe-Signature`).
    #[arg(long, env = "COBRO_WEBHOOK_SCHEME", default_value = "standard")]
    pub webhook_scheme: String,
    /// How far a webhook's timestamp may be from now, either way.
    #[arg(long, env = "COBRO_WEBHOOK_TOLERANCE", default_value = "300s", value_parser = duration)]
    pub webhook_tolerance: Duration,
    /// Largest accepted webhook body; larger ones get 413.
    #[arg(long, env = "COBRO_MAX_BODY_BYTES", default_value_t = 65_536)]
    pub max_body_bytes: usize,
    /// A webhook's whole body must arrive within this (a gateway sends it
    /// at once); else 408 and the connection is closed.
    #[arg(long, env = "COBRO_WEBHOOK_BODY_TIMEOUT", default_value = "5s", value_parser = duration)]
    pub webhook_body_timeout: Duration,
    /// Database gauges on `/metrics` are reused for this long.
    #[arg(long, env = "COBRO_METRICS_CACHE", default_value = "5s", value_parser = duration)]
    pub metrics_cache: Duration,
    /// Who may call the API, finance and metrics routes.
    #[command(flatten)]
    pub api_keys: ApiKeyArgs,
    /// Timeouts and the connection limit of every listener.
    #[command(flatten)]
    pub http: HttpLimits,
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
            .field("internal_listen", &self.internal_listen)
            .field("webhook_scheme", &self.webhook_scheme)
            .field("webhook_secrets", &"<redacted>")
            .field("api_keys", &self.api_keys)
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

    /// The webhook verifier; `None` when no secrets are set (the webhook
    /// route is then off).
    pub fn verifier(&self) -> anyhow::Result<Option<Verifier>> {
        if self.webhook_secrets.trim().is_empty() {
            return Ok(None);
        }
        let scheme: Scheme = self
            .webhook_scheme
            .parse()
            .map_err(|e| anyhow::anyhow!("COBRO_WEBHOOK_SCHEME: {e}"))?;
        let verifier = Verifier::from_env_value(scheme, &self.webhook_secrets)
            .map_err(|e| anyhow::anyhow!("COBRO_WEBHOOK_SECRETS: {e}"))?;
        Ok(Some(verifier.with_tolerance(self.webhook_tolerance)))
    }
}

/// What the routes need: built by `cobro serve` from [`ServeArgs`], or by a
/// test or an embedding program directly.
pub struct WebConfig {
    pub store: Store,
    /// `None`: no webhook secrets; the webhook route is not mounted (404).
    pub verifier: Option<Verifier>,
    pub keys: ApiKeys,
    pub retry: crate::retry::RetryPolicy,
    pub finance: finance::FinanceConfig,
    /// Largest accepted webhook body.
    pub max_webhook_body: usize,
    /// How long a webhook's whole body may take to arrive.
    pub webhook_body_timeout: Duration,
    pub metrics_cache: Duration,
}

impl WebConfig {
    /// The defaults of `cobro serve`, with no API keys.
    pub fn new(store: Store, verifier: Verifier) -> Self {
        Self {
            store,
            verifier: Some(verifier),
            keys: ApiKeys::default(),
            retry: Default::default(),
            finance: finance::FinanceConfig::default(),
            max_webhook_body: 65_536,
            webhook_body_timeout: Duration::from_secs(5),
            metrics_cache: crate::metrics::GAUGE_TTL,
        }
    }

    /// Every route, for one listener.
    pub fn router(self) -> Router {
        let (public, internal, health) = self.parts();
        public.merge(internal).merge(health)
    }

    /// (public, internal) listeners: the webhook receiver and `/health`;
    /// everything else (credentials required) and `/health`.
    pub fn split(self) -> (Router, Router) {
        let (public, internal, health) = self.parts();
        (public.merge(health.clone()), internal.merge(health))
    }

    /// The webhook receiver (when there are secrets); the guarded routes;
    /// `/health` and `/ready`.
    fn parts(self) -> (Router, Router, Router) {
        let keys = Arc::new(self.keys);
        let app = Arc::new(App {
            scraper: Scraper::new(self.store.clone(), self.metrics_cache),
            rejects: webhooks::RejectSampler::default(),
            store: self.store.clone(),
            verifier: self.verifier,
            max_body: self.max_webhook_body,
            body_deadline: self.webhook_body_timeout,
            retry: self.retry,
        });
        let mut public = Router::new();
        if app.verifier.is_some() {
            public = public.route(
                "/webhooks/gateway",
                post(webhooks::receive).layer(DefaultBodyLimit::max(self.max_webhook_body)),
            );
        }
        let public = public.with_state(app.clone());
        let bearer = |scope| Guard::new(keys.clone(), scope, Via::Bearer);
        let internal = Router::new()
            .route(
                "/charges",
                bearer(Scope::ChargesWrite).on(post(charges::create)),
            )
            .route(
                "/charges/{attempt_id}",
                bearer(Scope::AttemptsRead).on(get(charges::show)),
            )
            .route(
                "/attempts/{attempt_id}",
                bearer(Scope::AttemptsRead).on(get(charges::show)),
            )
            .route(
                "/refunds",
                bearer(Scope::RefundsWrite).on(post(refunds::create)),
            )
            .route(
                "/refunds/{refund_id}",
                bearer(Scope::AttemptsRead).on(get(charges::show)),
            )
            .route(
                "/orders/{order_id}/cancel",
                bearer(Scope::ChargesWrite).on(post(cancel::cancel).layer(from_fn(json_only))),
            )
            .route(
                "/orders/{order_id}/payment-method",
                bearer(Scope::ChargesWrite)
                    .on(post(payment_method::update).layer(from_fn(json_only))),
            )
            .route(
                "/control/pause",
                bearer(Scope::FinanceWrite).on(post(control::pause)
                    .layer(from_fn(json_only))
                    .get(control::show)),
            )
            .route(
                "/control/resume",
                bearer(Scope::FinanceWrite)
                    .on(post(control::resume).layer(from_fn(json_or_nothing))),
            )
            .route("/metrics", bearer(Scope::MetricsRead).on(get(metrics)))
            .with_state(app.clone())
            .merge(operator::router(self.store.clone(), keys.clone()))
            .merge(finance::router(self.store, self.finance, keys.clone()))
            .layer(DefaultBodyLimit::max(API_BODY_LIMIT));
        let health = Router::new()
            .route("/health", get(health::health))
            .route("/ready", get(health::ready))
            .with_state(app);
        (public, internal, health)
    }
}

pub(crate) struct App {
    pub(crate) store: Store,
    pub(crate) verifier: Option<Verifier>,
    pub(crate) max_body: usize,
    pub(crate) body_deadline: Duration,
    pub(crate) retry: crate::retry::RetryPolicy,
    pub(crate) rejects: webhooks::RejectSampler,
    scraper: Scraper,
}

pub(crate) type AppState = State<Arc<App>>;

async fn metrics(State(app): AppState) -> Response {
    app.scraper.response().await
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
    let keys = args.api_keys.keys().map_err(anyhow::Error::msg)?;
    args.http.check().map_err(anyhow::Error::msg)?;
    if args.webhook_body_timeout.is_zero() {
        anyhow::bail!("COBRO_WEBHOOK_BODY_TIMEOUT must be more than 0");
    }
    if keys.is_empty() {
        warn!(
            "no API keys (COBRO_API_KEYS): only the webhook receiver, /health and /ready will answer"
        );
    }
    if verifier.is_none() {
        warn!(
            "no webhook secrets (COBRO_WEBHOOK_SECRETS): POST /webhooks/gateway answers 404; set COBRO_WEBHOOK_SECRETS (and COBRO_WEBHOOK_SCHEME) to receive the gateway's webhooks"
        );
    }
    let store = Store::connect(&args.database_url, 10)
        .await
        .context("connecting to DATABASE_URL")?;
    // Served anyway: /health and /ready say the same to the platform.
    if let Some(problem) = store.readiness().await?.problem() {
        warn!("{problem}; /ready answers 503 until then");
    }
    let addr = args.listen_addr();
    let public = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let internal = match args.internal_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding COBRO_INTERNAL_LISTEN {addr}"))?,
        ),
        None => None,
    };
    let cfg = WebConfig {
        store,
        verifier,
        keys,
        retry,
        finance: args.finance.config(),
        max_webhook_body: args.max_body_bytes,
        webhook_body_timeout: args.webhook_body_timeout,
        metrics_cache: args.metrics_cache,
    };
    info!(
        addr = %public.local_addr()?,
        keys = cfg.keys.len(),
        scheme = ?cfg.verifier.as_ref().map(Verifier::scheme),
        "cobro web listening"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    match internal {
        None => serve(public, cfg.router(), &args.http, stopped()).await?,
        Some(internal) => {
            info!(addr = %internal.local_addr()?, "API, finance and metrics on the internal listener");
            let (public_routes, internal_routes) = cfg.split();
            tokio::try_join!(
                serve(public, public_routes, &args.http, stopped()),
                serve(internal, internal_routes, &args.http, stopped()),
            )?;
        }
    }
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
