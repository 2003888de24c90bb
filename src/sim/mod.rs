//! Gateway simulator: a real HTTP server with its own in-memory ledger and seeded fault
//! injection, standing in for a payment gateway in integration tests, the demo and the
//! benchmarks. Callers only ever talk to it over HTTP.
//!
//! Invariant: the ledger records exactly the charges and refunds the simulator executed,
//! whatever happened to the replies afterwards (dropped, held, replayed, cut by a refusal
//! window); for a given seed and request order the injected faults are identical from run to
//! run.
//!
//! HTTP API (JSON everywhere):
//! - `POST /v1/charges` (header `Idempotency-Key: <uuid>`, body [`ChargeBody`]):
//!   200 [`ChargeResult`] approved, 402 declined, 400 `{"error","field"}`, 409
//!   `idempotency_key_reused` (key seen with other parameters) or `idempotency_key_in_use`
//!   (its first request still executing, record-on-complete), 429 `rate_limited` with
//!   `Retry-After`, 503 outage/injected (with `Retry-After` for `p_503_retry_after`), or the
//!   connection dropped (faults) or refused (refusal window). Both answers carry
//!   `card_brand` when the token is a brand's test token (`pm_card_mastercard`,
//!   `pm_card_visa`, ...; see [`card_brand_of`]).
//! - `GET /v1/charges/{key}`: 200 [`ChargeResult`] of the first entry with that key, 404
//!   (also while it is still executing, record-on-complete), 429, 503.
//! - `POST /v1/refunds` (header `Idempotency-Key: <uuid>`, body [`RefundBody`]): the same
//!   answers and faults with [`RefundResult`]; 402 with `decline_code` [`CHARGE_NOT_FOUND`],
//!   [`CHARGE_NOT_APPROVED`], [`CURRENCY_MISMATCH`] or [`AMOUNT_EXCEEDS_CHARGE`].
//! - `GET /v1/refunds/{key}`: 200 [`RefundResult`] of the first refund with that key, 404, 503.
//! - `GET /v1/charges?from=&to=&limit=&starting_after=` and the same for `/v1/refunds`: a
//!   [`ListPage`] of the entries executed in `[from, to)`, for reconciliation (see `listing`).
//! - `GET /ledger` -> [`Ledger`]; `GET|PUT /control/faults` -> [`Faults`];
//!   `POST /control/reset`; `POST /control/inject` ([`Injection`]: a charge or refund made
//!   outside cobro, for reconciliation tests); `POST /control/refund-failed`
//!   (`{"refund_id", "reason"}`: an approved refund fails after it succeeded, see
//!   `inject`); `POST /control/refuse` (`{"for_ms": N}`: stop
//!   listening for N ms, see `refuse`); `GET /health`. None of these is rate limited.
//!
//! Proxy mode ([`spawn_proxy`], [`serve_proxy`], `--upstream URL`): every `/v1/` request is
//! forwarded to a real Stripe-compatible server with the seeded faults around it, and
//! `GET /control/proxy` -> [`ProxyStats`] (see `proxy`).

mod books;
mod charges;
mod cli;
mod conn;
mod faults;
mod flow;
mod inject;
mod ledger;
mod limit;
mod listing;
mod parse;
mod proxy;
mod refunds;
mod refuse;
mod server;
mod settlement;
#[cfg(test)]
mod tests;
mod upstream;
mod webhooks;

use std::{future::Future, io, net::SocketAddr};

use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tracing::{info, warn};

pub use cli::SimArgs;
pub use faults::{DEFAULT_DECLINE_CODE, DEFAULT_HOLD_MS, Faults, InvalidFaults};
pub use ledger::{
    AMOUNT_EXCEEDS_CHARGE, APPROVED, CHARGE_NOT_APPROVED, CHARGE_NOT_FOUND, CURRENCY_MISMATCH,
    ChargeBody, ChargeResult, DECLINED, Injection, Ledger, LedgerEntry, ListPage, RefundBody,
    RefundEntry, RefundResult, Stats, card_brand_of,
};
pub use listing::{DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};
pub use parse::IDEMPOTENCY_KEY_HEADER;
pub use proxy::ProxyStats;
pub use upstream::{FORWARDED_HEADERS, UPSTREAM_TIMEOUT, Upstream};
pub use webhooks::WebhookTarget;

use conn::{ConnKill, SimListener};
use refuse::Network;
use server::AppState;
use upstream::Proxy;

/// How the simulator behaves.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Honour `Idempotency-Key` (replay stored results); `false` executes every request.
    pub idempotent: bool,
    /// Seed of the fault-injection rng.
    pub seed: u64,
    /// Initial faults (replaceable at run time via `PUT /control/faults`).
    pub faults: Faults,
    /// Draw each charge or refund request's faults from (seed, order id, how many
    /// charge and refund requests that order already made) instead of one shared sequence, so
    /// different clients, or the same client at other concurrency, meet the
    /// same faults order by order (the demo compares worlds this way).
    pub per_order_draws: bool,
    /// Send a signed webhook for every executed charge.
    pub webhooks: Option<WebhookTarget>,
}

impl Default for SimConfig {
    /// Idempotent, seed 42, no faults.
    fn default() -> Self {
        Self {
            idempotent: true,
            seed: 42,
            faults: Faults::default(),
            per_order_draws: false,
            webhooks: None,
        }
    }
}

/// A simulator serving in a background task. Dropping the handle leaves the server running
/// until the runtime ends; call [`SimHandle::shutdown`] to stop it.
#[derive(Debug)]
pub struct SimHandle {
    /// The address the simulator listens on.
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<io::Result<()>>,
}

impl SimHandle {
    /// Base URL, e.g. `http://127.0.0.1:PORT` (an unspecified bind address maps to loopback).
    pub fn url(&self) -> String {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        format!("http://{addr}")
    }

    /// Stops accepting, drops every open connection (held requests included) and waits for
    /// the server task to end.
    pub async fn shutdown(self) {
        // The receiver is gone only if the server already stopped.
        let _ = self.stop.send(());
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "sim: server ended with an error"),
            Err(e) => warn!(error = %e, "sim: server task failed"),
        }
    }
}

fn check_config(cfg: &SimConfig, upstream: Option<&Upstream>) -> io::Result<()> {
    let invalid = |message| io::Error::new(io::ErrorKind::InvalidInput, message);
    cfg.faults
        .validate()
        .map_err(|e| invalid(format!("invalid faults: {}: {}", e.field, e.message)))?;
    match upstream {
        Some(_) => proxy::check_config(cfg).map_err(invalid),
        None => Ok(()),
    }
}

/// Starts the simulator on `listener` in a background tokio task.
pub async fn spawn(listener: TcpListener, cfg: SimConfig) -> io::Result<SimHandle> {
    start(listener, cfg, None).await
}

/// Starts the simulator in proxy mode, in front of `upstream`, in a background tokio task.
pub async fn spawn_proxy(
    listener: TcpListener,
    cfg: SimConfig,
    upstream: Upstream,
) -> io::Result<SimHandle> {
    start(listener, cfg, Some(upstream)).await
}

async fn start(
    listener: TcpListener,
    cfg: SimConfig,
    upstream: Option<Upstream>,
) -> io::Result<SimHandle> {
    let addr = listener.local_addr()?;
    check_config(&cfg, upstream.as_ref())?;
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        // A dropped handle detaches the server instead of stopping it.
        if stopped.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let task = tokio::spawn(run(listener, cfg, upstream, shutdown));
    Ok(SimHandle { addr, stop, task })
}

/// Serves the simulator on `listener` until `shutdown` completes, then stops accepting,
/// drops every open connection and returns. During a refusal window the listening socket
/// is closed and later bound again on the same address.
pub async fn serve(
    listener: TcpListener,
    cfg: SimConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    run(listener, cfg, None, shutdown).await
}

/// [`serve`] in proxy mode, in front of `upstream`.
pub async fn serve_proxy(
    listener: TcpListener,
    cfg: SimConfig,
    upstream: Upstream,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    run(listener, cfg, Some(upstream), shutdown).await
}

async fn run(
    listener: TcpListener,
    cfg: SimConfig,
    upstream: Option<Upstream>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let addr = listener.local_addr()?;
    check_config(&cfg, upstream.as_ref())?;
    info!(
        %addr,
        idempotent = cfg.idempotent,
        seed = cfg.seed,
        faults = ?cfg.faults,
        upstream = upstream.as_ref().map(tracing::field::display),
        "sim: gateway simulator listening"
    );
    if let Some(upstream) = upstream.as_ref().filter(|u| !u.is_loopback()) {
        warn!(%upstream, "sim: the upstream is not on loopback");
    }
    let proxy = upstream.map(Proxy::new).transpose()?;
    let network = Network::default();
    let state = AppState::new(cfg, network.clone(), proxy);
    let schedule = tokio::spawn(refuse::drive_schedule(state.clone()));
    let app = server::router(state);
    let listener = SimListener::new(listener, network.registry.clone(), network.gate.clone())?;
    let registry = network.registry;
    let signal = async move {
        shutdown.await;
        registry.close();
    };
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<ConnKill>(),
    )
    .with_graceful_shutdown(signal)
    .await;
    schedule.abort();
    served?;
    info!(%addr, "sim: gateway simulator stopped");
    Ok(())
}
