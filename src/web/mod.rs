//! The `web` process (`cobro serve`): gateway webhooks, the HTTP API,
//! finance's pages, metrics and a health check.
//!
//! Routes ([`crate::http::auth`] checks the callers; the scope and the
//! credential of each guarded route are one row of [`access::GUARDED`],
//! which its router and the OpenAPI document both read):
//! - `POST /webhooks/gateway`: anyone; the signature decides ([`webhooks`]).
//!   Without webhook secrets it is not mounted (404), logged at start-up.
//! - `GET /health`, `GET /ready`: anyone; whether the database answers
//!   and has the schema this binary needs ([`health`]).
//! - `GET /openapi.json`: anyone; the OpenAPI 3.1 document of these
//!   routes, mounted beside `/health` on every listener ([`openapi`]).
//! - `POST /charges`, `GET /charges/{attempt_id}` (the attempt, its
//!   history and lookups) ([`charges`]).
//! - `POST /refunds`, `GET /refunds/{refund_id}` ([`refunds`]).
//! - `GET /attempts?order_id=&key=&state=&kind=&from=&to=&cursor=&limit=`
//!   and `GET /attempts/{attempt_id}` (an API key): the operator's search
//!   over every attempt, and one attempt with its history and lookups (the
//!   same handler as `GET /charges/{attempt_id}`) ([`operator`]).
//! - `GET /operator/attempts`, `GET /operator/attempts/{id}` (the
//!   browser's sign-in or an API key): the same as pages, with the
//!   incident switch's banner ([`operator`]).
//! - `POST /orders/{order_id}/cancel`: stop what was not sent ([`cancel`]).
//! - `POST /orders/{order_id}/payment-method`: a new token for the order's
//!   next business retry ([`payment_method`]).
//! - `POST /control/pause`, `POST /control/resume`, `GET /control/pause`:
//!   the incident switch ([`control`]).
//! - `/finance…`: the escalation queue, its pages, forms and JSON API
//!   ([`finance`]).
//!
//! - `GET /`: a signed-in landing page linking the pages the key may see
//!   ([`home`]; it checks its caller itself); `GET /assets/cobro.css`: the
//!   pages' stylesheet.
//!
//! The pages (finance's, the operator's, the landing page) share [`html`];
//! every response carries its no-framing, no-sniffing, same-origin-referrer
//! headers.
//! - `GET /metrics` ([`crate::metrics`]).
//!
//! With `COBRO_INTERNAL_LISTEN` the public listener serves only the webhook
//! receiver, `/health`, `/ready` and `/openapi.json`, and everything else
//! is on the internal one.
//!
//! Invariant: the process refuses to start with malformed webhook secrets
//! or keys; every route but the webhook receiver, `/health`, `/ready`
//! and `/openapi.json` checks a credential and a scope before its handler runs; every JSON body
//! a caller sends is refused (422 naming the field, nothing written) when
//! it has a top-level field the route does not take ([`known_fields`]) or
//! a field of the wrong JSON type (422 naming the field and the type,
//! [`crate::http::typed`]); every POST with a body requires
//! `application/json` (415);
//! secrets never reach logs or `Debug`; every listener runs with timeouts
//! and limits.

mod access;
mod cancel;
mod charges;
mod control;
pub mod finance;
mod health;
mod home;
mod html;
mod openapi;
mod operator;
mod payment_method;
mod process;
mod refunds;
mod webhooks;

pub use openapi::document as openapi_document;
pub use process::{ServeArgs, run};

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::middleware::from_fn;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::backoff::parse_duration_arg as duration;
use crate::http::auth::ApiKeys;
pub(crate) use crate::http::error;
use crate::http::{json_only, json_or_nothing};
use access::Guarded;

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

/// 422 for input the domain refused, naming its field
/// ([`crate::domain::InputError`]).
pub(crate) fn invalid(e: &crate::domain::InputError) -> Response {
    error(
        StatusCode::UNPROCESSABLE_ENTITY,
        Some(e.field),
        e.to_string(),
    )
}

/// A refusal a handler gives up with: the finished error response, boxed
/// so that a `Result` carrying it stays small. A handler that returns
/// [`Answer`] refuses with `?` on the helpers that return
/// `Result<_, Box<Response>>` ([`json_body`], [`known_fields`],
/// [`crate::http::typed`], …) or with `Err(error(…).into())`; the client
/// reads the same response either way.
pub(crate) struct Refusal(Box<Response>);

impl From<Box<Response>> for Refusal {
    fn from(refused: Box<Response>) -> Self {
        Self(refused)
    }
}

impl From<Response> for Refusal {
    fn from(refused: Response) -> Self {
        Self(Box::new(refused))
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        *self.0
    }
}

/// What a handler answers: its response, or the refusal it stopped at.
pub(crate) type Answer = Result<Response, Refusal>;

/// The `{order_id}` of a route's path, checked against the enqueue's rules
/// before the handler runs: no order has an id that fails them, and one
/// with a NUL would fail the database's read as if it were down. A bad one
/// is refused with 422 naming it ([`invalid`]).
pub(crate) struct OrderInPath(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for OrderInPath {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Response> {
        let axum::extract::Path(order_id) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(IntoResponse::into_response)?;
        crate::domain::OrderId::parse(&order_id).map_err(|e| invalid(&e))?;
        Ok(Self(order_id))
    }
}

/// A failed database call as the client reads it. A refusal by one of the
/// database's rules (errors reference) that the route's own check did not
/// meet first (a race it lost, a rule added to the database): the
/// transaction rolled back and a retry meets the same rule, so no "retry"
/// is advised. A rule a request can run into (the order's or attempt's
/// state, a key, an amount) is a 409 with its code and words, `CB404` a
/// 404, bad input a 422 naming the field; a rule only cobro's own writes
/// can break (a missing log row, `CB021`; a settlement rewritten, `CB030`;
/// the isolation level, `CB013`) is a 500 whose words go to the log only.
/// When the schema is missing or behind the binary, 503 with the fix
/// (`cobro migrate`); else 503 with `advice` ("retry with the same key",
/// …). The driver's words (hosts, users, files) go to the log only.
pub(crate) fn db_failed(e: &crate::store::StoreError, failed: &str, advice: &str) -> Response {
    /// The rules a request can run into: 409 with their words.
    const CONFLICTS: [&str; 12] = [
        "CB001", "CB002", "CB003", "CB005", "CB006", "CB007", "CB008", "CB010", "CB011", "CB012",
        "CB020", "CB409",
    ];
    if let Some((code, words)) = e.rule_refusal() {
        let answer = |status: StatusCode| {
            let message =
                format!("{words} (the database's rule {code} refused it; nothing was written)");
            (status, Json(json!({ "error": message, "code": code }))).into_response()
        };
        return match code.as_str() {
            "22023" => invalid(&crate::store::invalid_from_message(&words)),
            "CB404" => answer(StatusCode::NOT_FOUND),
            c if CONFLICTS.contains(&c) => {
                tracing::warn!(%code, "{failed}: refused by a database rule: {words}");
                answer(StatusCode::CONFLICT)
            }
            _ => {
                tracing::error!(%code, "{failed}: a write of cobro's own broke a database rule: {words}");
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    None,
                    format!(
                        "a write of cobro's own broke the database's rule {code}: a defect in cobro, not in the request; nothing was written, and the server's log has the details"
                    ),
                )
            }
        };
    }
    tracing::warn!(error = %e, "{failed}");
    let message = if e.is_missing_schema() {
        format!(
            "the database schema is missing or older than this cobro: {}",
            crate::store::MIGRATE_HINT
        )
    } else {
        format!("the database is not available; {advice}")
    };
    error(StatusCode::SERVICE_UNAVAILABLE, None, message)
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
    let v = parsed_json(&body)?;
    known_fields(&v, fields)?;
    Ok(v)
}

/// A request body as JSON, or the 400 every JSON route answers when it is
/// not JSON (with the parser's line and column).
pub(crate) fn parsed_json(body: &[u8]) -> Result<serde_json::Value, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            None,
            format!("the body is not JSON: {e}"),
        ))
    })
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
use crate::metrics::Scraper;
use crate::store::Store;
use crate::webhook::Verifier;

/// The largest body of an API request (charges, refunds, finance); larger
/// gets 413. Webhooks have their own limit (`COBRO_MAX_BODY_BYTES`).
pub const API_BODY_LIMIT: usize = 16 * 1024;

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
    /// `/health`, `/ready` and `/openapi.json`.
    fn parts(self) -> (Router, Router, Router) {
        let keys = Arc::new(self.keys);
        let app = Arc::new(App {
            scraper: Scraper::new(self.store.clone(), self.metrics_cache),
            rejects: webhooks::RejectSampler::default(),
            health: health::Probe::default(),
            store: self.store.clone(),
            verifier: self.verifier,
            max_body: self.max_webhook_body,
            body_deadline: self.webhook_body_timeout,
            retry: self.retry.clone(),
        });
        let mut public = Router::new();
        if app.verifier.is_some() {
            public = public.route(
                "/webhooks/gateway",
                post(webhooks::receive).layer(DefaultBodyLimit::max(self.max_webhook_body)),
            );
        }
        let public = public.with_state(app.clone());
        let internal = Router::new()
            .guarded("/charges", post(charges::create), &keys)
            .guarded("/charges/{attempt_id}", get(charges::show), &keys)
            .guarded("/attempts/{attempt_id}", get(charges::show_attempt), &keys)
            .guarded("/refunds", post(refunds::create), &keys)
            .guarded("/refunds/{refund_id}", get(charges::show_refund), &keys)
            .guarded(
                "/orders/{order_id}/cancel",
                post(cancel::cancel).layer(from_fn(json_only)),
                &keys,
            )
            .guarded(
                "/orders/{order_id}/payment-method",
                post(payment_method::update).layer(from_fn(json_only)),
                &keys,
            )
            .guarded(
                "/control/pause",
                post(control::pause)
                    .layer(from_fn(json_only))
                    .get(control::show),
                &keys,
            )
            .guarded(
                "/control/resume",
                post(control::resume).layer(from_fn(json_or_nothing)),
                &keys,
            )
            .guarded("/metrics", get(metrics), &keys)
            .with_state(app.clone())
            .route("/", get(home::landing).with_state(keys.clone()))
            .route(html::STYLESHEET_PATH, get(html::stylesheet))
            .merge(operator::router(self.store.clone(), keys.clone()))
            .merge(finance::router(
                self.store,
                finance::FinanceConfig {
                    // Finance's manual retry honours the worker's caps.
                    card_caps: self.retry.card_caps(),
                    ..self.finance
                },
                keys.clone(),
            ))
            .layer(DefaultBodyLimit::max(API_BODY_LIMIT));
        let health = Router::new()
            .route("/health", get(health::health))
            .route("/ready", get(health::ready))
            .route("/openapi.json", get(openapi::openapi_json))
            .with_state(app);
        let safe = axum::middleware::map_response(html::security_headers);
        (
            public.layer(safe.clone()),
            internal.layer(safe.clone()),
            health.layer(safe),
        )
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
    /// `/health` and `/ready`'s shared look at the database.
    health: health::Probe,
}

pub(crate) type AppState = State<Arc<App>>;

/// How long `/health` and `/ready` answer from one look at the database.
pub const HEALTH_FRESH: Duration = health::FRESH;

#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "get_metrics",
    summary = "Prometheus metrics",
    tag = "operations",
    description = "Prometheus metrics, in the text exposition format.",
    responses(
        (status = 200, description = "The metrics.", content_type = "text/plain; version=0.0.4")
    )
)]
async fn metrics(State(app): AppState) -> Response {
    app.scraper.response().await
}
