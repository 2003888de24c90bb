//! The simulator's shared state and HTTP routing: the axum `Router`, the control/ledger/
//! health endpoints and the JSON reply helpers used by every handler.
//!
//! Invariant: all mutable simulator state (faults, rng, ledger, key index, stats, rate-limit
//! bucket) lives in one `Mutex<Inner>` that is only ever locked for short synchronous
//! sections, never across an `.await`, so every request sees and updates that state
//! atomically and in request order. Replacing the faults resets the rate-limit bucket and
//! the refusal schedule's origin only when their own knobs changed.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::json;
use tokio::sync::{Notify, futures::Notified};
use tracing::{debug, info};

use super::{
    SimConfig,
    books::Books,
    faults::{Dice, Faults},
    flow::{create_payment, lookup_payment},
    inject::{inject, refund_failed},
    ledger::{ChargeBody, RefundBody},
    limit::Bucket,
    listing::{list_charges, list_refunds},
    proxy::{self, ProxyStats},
    refuse::{Network, refuse},
    settlement,
    upstream::Proxy,
};

/// Everything that changes while the simulator runs.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) faults: Faults,
    pub(crate) dice: Dice,
    pub(crate) books: Books,
    /// `Some(seed)` when faults are drawn per order (see `SimConfig::per_order_draws`).
    pub(crate) per_order_seed: Option<u64>,
    /// Charge and refund requests seen per order id (for per-order draws).
    pub(crate) order_requests: std::collections::HashMap<String, u64>,
    /// The rate limit's tokens (`Faults::rate_limit_per_s`).
    pub(crate) bucket: Bucket,
    /// When the current refusal schedule took effect (its windows are offsets from here).
    pub(crate) refusals_since: Instant,
    /// What proxy mode did (all zero otherwise).
    pub(crate) proxy_stats: ProxyStats,
    /// The payouts `POST /control/payout` made.
    pub(crate) payouts: super::settlement::Payouts,
}

#[derive(Debug)]
struct Shared {
    idempotent: bool,
    inner: Mutex<Inner>,
    outbox: Option<super::webhooks::Outbox>,
    /// `Some` in proxy mode: `/v1/` goes to the upstream.
    proxy: Option<Proxy>,
    network: Network,
    /// Woken whenever the faults are replaced (the refusal schedule's driver waits on it).
    faults_replaced: Notify,
}

/// Handle to the simulator state shared by all handlers.
#[derive(Clone, Debug)]
pub(crate) struct AppState(Arc<Shared>);

impl AppState {
    pub(crate) fn new(cfg: SimConfig, network: Network, proxy: Option<Proxy>) -> Self {
        let outbox = cfg
            .webhooks
            .map(|t| super::webhooks::Outbox::start(t, cfg.seed));
        Self(Arc::new(Shared {
            outbox,
            proxy,
            idempotent: cfg.idempotent,
            inner: Mutex::new(Inner {
                faults: cfg.faults,
                dice: Dice::new(cfg.seed),
                books: Books::default(),
                per_order_seed: cfg.per_order_draws.then_some(cfg.seed),
                order_requests: Default::default(),
                bucket: Bucket::default(),
                refusals_since: Instant::now(),
                proxy_stats: ProxyStats::default(),
                payouts: Default::default(),
            }),
            network,
            faults_replaced: Notify::new(),
        }))
    }

    /// The listening socket's gate and the live connections.
    pub(crate) fn network(&self) -> &Network {
        &self.0.network
    }

    /// The upstream, in proxy mode.
    pub(crate) fn proxy(&self) -> Option<&Proxy> {
        self.0.proxy.as_ref()
    }

    /// A future that completes at the next replacement of the faults.
    pub(crate) fn faults_replaced(&self) -> Notified<'_> {
        self.0.faults_replaced.notified()
    }

    /// Puts `faults` in force (already validated). A changed rate limit starts from a full
    /// bucket; a changed refusal schedule counts its windows from now.
    fn replace_faults(&self, faults: Faults) {
        self.with(|s| {
            if s.faults.rate_limit() != faults.rate_limit() {
                s.bucket = Bucket::default();
            }
            if s.faults.refusal_schedule() != faults.refusal_schedule() {
                s.refusals_since = Instant::now();
            }
            s.faults = faults;
        });
        self.0.faults_replaced.notify_waiters();
    }

    /// Queues a webhook for an executed charge (when webhooks are on).
    pub(crate) fn emit_webhook(&self, result: &super::ledger::ChargeResult) {
        if let Some(outbox) = &self.0.outbox {
            outbox.emit(result);
        }
    }

    pub(crate) fn idempotent(&self) -> bool {
        self.0.idempotent
    }

    /// Runs `f` with the state locked. `f` is synchronous, so the lock never spans an await.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut guard = self.0.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }
}

/// The simulator's routes; in proxy mode `/v1/` is the upstream's (see `proxy`).
pub(crate) fn router(state: AppState) -> Router {
    let payments = match state.proxy() {
        Some(_) => proxy::routes(),
        None => Router::new()
            .route(
                "/v1/charges",
                post(create_payment::<ChargeBody>).get(list_charges),
            )
            .route("/v1/charges/{key}", get(lookup_payment::<ChargeBody>))
            .route(
                "/v1/refunds",
                post(create_payment::<RefundBody>).get(list_refunds),
            )
            .route("/v1/refunds/{key}", get(lookup_payment::<RefundBody>))
            .route("/v1/balance_transactions", get(settlement::list_balance))
            .route("/v1/balance/history", get(settlement::list_balance))
            .route("/v1/payouts", get(settlement::list_payouts)),
    };
    payments
        .route("/ledger", get(get_ledger))
        .route("/control/faults", get(get_faults).put(put_faults))
        .route("/control/reset", post(reset))
        .route("/control/inject", post(inject))
        .route("/control/refund-failed", post(refund_failed))
        .route("/control/refuse", post(refuse))
        .route("/control/payout", post(settlement::pay_out))
        .route("/control/card-updated", post(card_updated))
        .route("/health", get(health))
        .fallback(not_found)
        .with_state(state)
}

/// `{"error": error}` with the given status.
pub(crate) fn error(status: StatusCode, error: &str) -> Response {
    (status, Json(json!({ "error": error }))).into_response()
}

/// 400 `{"error": message, "field": field}`.
pub(crate) fn bad_request(field: &str, message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": message, "field": field })),
    )
        .into_response()
}

/// 503 `{"error": "unavailable"}`.
pub(crate) fn unavailable() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "unavailable")
}

async fn get_ledger(State(app): State<AppState>) -> Response {
    debug!("sim: GET /ledger");
    let mut ledger = app.with(|s| s.books.snapshot());
    if let Some(outbox) = &app.0.outbox {
        use std::sync::atomic::Ordering;
        ledger.stats.webhooks_delivered = outbox.counters.delivered.load(Ordering::Relaxed);
        ledger.stats.webhooks_failed = outbox.counters.failed.load(Ordering::Relaxed);
    }
    Json(ledger).into_response()
}

async fn get_faults(State(app): State<AppState>) -> Response {
    debug!("sim: GET /control/faults");
    Json(app.with(|s| s.faults.clone())).into_response()
}

async fn put_faults(State(app): State<AppState>, body: Bytes) -> Response {
    let faults: Faults = match serde_json::from_slice(&body) {
        Ok(f) => f,
        Err(e) => return bad_request("body", &format!("invalid faults JSON: {e}")),
    };
    let in_proxy_mode = |f: &Faults| match app.proxy() {
        Some(_) => proxy::check_faults(f),
        None => Ok(()),
    };
    if let Err(invalid) = faults.validate().and_then(|()| in_proxy_mode(&faults)) {
        return bad_request(invalid.field, &invalid.message);
    }
    info!(?faults, "sim: faults replaced");
    app.replace_faults(faults.clone());
    Json(faults).into_response()
}

async fn reset(State(app): State<AppState>) -> Response {
    info!("sim: ledger (charges and refunds), key stores and stats (proxy's too) reset");
    app.with(|s| {
        s.books.reset();
        s.order_requests.clear();
        s.proxy_stats = ProxyStats::default();
        s.payouts.reset();
    });
    Json(json!({ "ok": true })).into_response()
}

/// The card network updated the card behind `{"payment_method": "pm_…"}`
/// (its account updater): a signed `payment_method.updated` is sent to the
/// webhook receiver. 409 when webhooks are off.
async fn card_updated(State(app): State<AppState>, body: Bytes) -> Response {
    let token = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("payment_method")?.as_str().map(str::to_owned));
    let Some(token) = token.filter(|t| crate::domain::text::id(t).is_ok()) else {
        return bad_request("payment_method", "a payment method token is required");
    };
    let Some(outbox) = &app.0.outbox else {
        return error(StatusCode::CONFLICT, "webhooks are off (no --webhook-url)");
    };
    info!(payment_method = %token, "sim: card updated; webhook queued");
    outbox.emit_card_updated(&token);
    Json(json!({ "ok": true })).into_response()
}

async fn health() -> Response {
    Json(json!({ "ok": true })).into_response()
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not_found")
}
