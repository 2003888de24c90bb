//! Proxy mode (`--upstream URL`): the simulator as a fault-injecting reverse proxy in front of
//! a real Stripe-compatible server (localstripe, say). Every request whose path starts with
//! `/v1/` is forwarded to the upstream (method, path, query string, body bytes and the
//! headers in `upstream::FORWARDED_HEADERS`) and the upstream's status, `Content-Type` and
//! body are relayed back; the simulator's own `/v1/` endpoints are off, `/control/*`,
//! `/ledger` and `/health` stay. `GET /control/proxy` answers the [`ProxyStats`].
//!
//! Executing requests (every method but `GET` and `HEAD`) meet, in this order: rate limit
//! (429), outage (503), request lost (held `hold_ms`, then dropped), 5xx (503), 503 with
//! `Retry-After`, latency, the forwarding, then response lost (dropped after the upstream
//! answered) or a held reply (sent after `hold_ms`). Reads meet rate limit, outage, lookup
//! fail (503), latency, the forwarding. An upstream that cannot be reached or does not answer
//! within `upstream::UPSTREAM_TIMEOUT` is a 502 `{"error":"upstream_unreachable"}`. The
//! knobs the upstream decides (decline, record-on-complete, execution time, no idempotency,
//! per-order draws, webhooks) are refused (see [`check_config`]).
//!
//! Invariant: a request is forwarded at most once, and only after its pre-forwarding faults
//! and any refusal window's cut passed. Its draws happen in one locked section on arrival,
//! from the simulator's shared dice, in the simulator's own order (request lost → 5xx → 503
//! with `Retry-After` → response lost → hold, or lookup fail), and a knob at zero draws
//! nothing: the same seed and request order meet the same faults. A fault after the
//! forwarding touches only the reply; what the upstream executed stays executed.

use axum::{
    Json, Router,
    body::Bytes,
    extract::{ConnectInfo, State},
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::{any, get},
};
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use super::{
    SimConfig,
    conn::ConnKill,
    faults::{Dice, Faults, InvalidFaults},
    flow::{CutWatch, drop_connection},
    limit::{throttle, too_many_requests, unavailable_for},
    server::{AppState, error, unavailable},
    upstream::{Outgoing, Proxy, Relayed, forwarded_headers},
};

/// What proxy mode did, at `GET /control/proxy` (cleared by `POST /control/reset`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyStats {
    /// Requests sent to the upstream (answered or not).
    pub forwarded: u64,
    /// Of those, executing requests (every method but `GET` and `HEAD`).
    pub executing_forwarded: u64,
    /// The upstream answered an executing request; the client's connection was dropped.
    pub response_lost_after_upstream: u64,
    /// The upstream answered an executing request; its reply was held `hold_ms`.
    pub timeout_after_upstream: u64,
    /// Held `hold_ms`, then dropped; never forwarded.
    pub request_lost: u64,
    /// 503 without `Retry-After` (`p_5xx`); never forwarded.
    pub refused_5xx: u64,
    /// 503 with `Retry-After` (`p_503_retry_after`); never forwarded.
    pub refused_503_retry_after: u64,
    /// Reads answered 503 (`p_lookup_fail`); never forwarded.
    pub lookup_failed: u64,
    /// 429 above the rate limit; never forwarded.
    pub throttled: u64,
    /// The upstream could not be reached or did not answer in time (502 to the client).
    pub upstream_errors: u64,
}

/// The settings proxy mode refuses, given by flag: the upstream decides the outcome.
fn upstream_decides(faults: &Faults) -> impl Iterator<Item = (&'static str, &'static str)> {
    [
        (faults.p_decline > 0.0, "p_decline", "--p-decline"),
        (
            !faults.decline_codes.is_empty(),
            "decline_codes",
            "--decline-code",
        ),
        (
            faults.record_on_complete,
            "record_on_complete",
            "--record-on-complete",
        ),
        (faults.execution_ms > 0, "execution_ms", "--execution-ms"),
    ]
    .into_iter()
    .filter_map(|(set, field, flag)| set.then_some((field, flag)))
}

/// Refuses a configuration with any setting the upstream decides (or that needs the
/// simulator's own ledger), naming every such flag.
pub(crate) fn check_config(cfg: &SimConfig) -> Result<(), String> {
    let own = [
        (!cfg.idempotent, "--no-idempotency"),
        (cfg.per_order_draws, "--per-order-draws"),
        (cfg.webhooks.is_some(), "--webhook-url"),
    ];
    let flags: Vec<&str> = upstream_decides(&cfg.faults)
        .map(|(_, flag)| flag)
        .chain(
            own.into_iter()
                .filter_map(|(set, flag)| set.then_some(flag)),
        )
        .collect();
    if flags.is_empty() {
        return Ok(());
    }
    Err(format!(
        "--upstream: {} do not apply in proxy mode (the upstream decides); unset them",
        flags.join(", ")
    ))
}

/// Refuses faults (from `PUT /control/faults`) with a knob the upstream decides.
pub(crate) fn check_faults(faults: &Faults) -> Result<(), InvalidFaults> {
    match upstream_decides(faults).next() {
        None => Ok(()),
        Some((field, _)) => Err(InvalidFaults {
            field,
            message: format!("{field} does not apply in proxy mode (the upstream decides)"),
        }),
    }
}

/// Which faults a request meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Creates, confirms, refunds, cancels: every method but `GET` and `HEAD`.
    Executing,
    /// `GET` and `HEAD`.
    Read,
}

impl Class {
    fn of(method: &Method) -> Self {
        if method == Method::GET || method == Method::HEAD {
            Self::Read
        } else {
            Self::Executing
        }
    }
}

/// What happens to the reply of a forwarded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterUpstream {
    Relay,
    /// Drop the client's connection instead (`p_response_lost`).
    Lose,
    /// Hold the reply `hold_ms`, then send it (`p_timeout_after_charge`).
    Hold,
}

/// What the locked section decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// 429 with `Retry-After` (seconds).
    Throttled(u64),
    Outage,
    /// Hold, then drop the connection.
    LoseRequest,
    /// 503 (`p_5xx`).
    Unavailable,
    /// 503 with `Retry-After` (seconds).
    UnavailableFor(u64),
    /// 503 (`p_lookup_fail`).
    LookupFailed,
    Forward(AfterUpstream),
}

/// The faults of one request that got past the rate limit, drawn in their fixed order.
fn decide(class: Class, faults: &Faults, dice: &mut Dice) -> Plan {
    if faults.outage {
        return Plan::Outage;
    }
    if class == Class::Read {
        if dice.fire(faults.p_lookup_fail) {
            return Plan::LookupFailed;
        }
        return Plan::Forward(AfterUpstream::Relay);
    }
    if dice.fire(faults.p_request_lost) {
        return Plan::LoseRequest;
    }
    if dice.fire(faults.p_5xx) {
        return Plan::Unavailable;
    }
    if dice.fire(faults.p_503_retry_after) {
        return Plan::UnavailableFor(faults.retry_after());
    }
    if dice.fire(faults.p_response_lost) {
        return Plan::Forward(AfterUpstream::Lose);
    }
    if dice.fire(faults.p_timeout_after_charge) {
        return Plan::Forward(AfterUpstream::Hold);
    }
    Plan::Forward(AfterUpstream::Relay)
}

impl ProxyStats {
    /// Counts a request answered (or dropped) without forwarding.
    fn count_refusal(&mut self, plan: Plan) {
        match plan {
            Plan::Throttled(_) => self.throttled += 1,
            Plan::LoseRequest => self.request_lost += 1,
            Plan::Unavailable => self.refused_5xx += 1,
            Plan::UnavailableFor(_) => self.refused_503_retry_after += 1,
            Plan::LookupFailed => self.lookup_failed += 1,
            Plan::Outage | Plan::Forward(_) => {}
        }
    }
}

/// The proxy's routes: `/v1/*` forwarded, `GET /control/proxy`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/{*path}", any(forward))
        .route("/control/proxy", get(stats))
}

async fn stats(State(app): State<AppState>) -> Response {
    Json(app.with(|s| s.proxy_stats.clone())).into_response()
}

/// One request under `/v1/`: plan its faults, then answer, drop, or forward and relay.
async fn forward(
    State(app): State<AppState>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(proxy) = app.proxy().cloned() else {
        return error(StatusCode::NOT_FOUND, "not_found");
    };
    let class = Class::of(&method);
    // Like the simulator's own charges: an executing request cut by a refusal window is
    // counted in `cut_in_flight`.
    let _watch = match class {
        Class::Executing => Some(CutWatch {
            app: &app,
            conn: &conn,
        }),
        Class::Read => None,
    };
    let (plan, faults) = app.with(|s| {
        let plan = match throttle(s, std::time::Instant::now()) {
            Some(retry_after) => Plan::Throttled(retry_after),
            None => decide(class, &s.faults, &mut s.dice),
        };
        s.proxy_stats.count_refusal(plan);
        (plan, s.faults.clone())
    });
    let exchange = Exchange {
        app: &app,
        conn: &conn,
        method: &method,
        path: uri.path(),
        faults,
    };
    let after = match exchange.before_upstream(plan).await {
        Ok(after) => after,
        Err(answer) => return answer,
    };
    let outgoing = Outgoing {
        path_and_query: uri
            .path_and_query()
            .map_or(uri.path(), |pq| pq.as_str())
            .to_owned(),
        method: method.clone(),
        headers: forwarded_headers(&headers),
        body,
    };
    match exchange.send(proxy, outgoing, class).await {
        Ok(relayed) => exchange.after_upstream(after, relayed).await,
        Err(answer) => answer,
    }
}

/// One request being proxied: what its fault steps act on and log.
struct Exchange<'a> {
    app: &'a AppState,
    conn: &'a ConnKill,
    method: &'a Method,
    path: &'a str,
    /// The faults in force when it arrived.
    faults: Faults,
}

impl Exchange<'_> {
    /// Carries out the faults before the forwarding: `Err` is the answer (or the dropped
    /// connection) instead, `Ok` what becomes of the reply once the upstream answered.
    async fn before_upstream(&self, plan: Plan) -> Result<AfterUpstream, Response> {
        let Self { method, path, .. } = *self;
        Err(match plan {
            Plan::Forward(after) => return Ok(after),
            Plan::Throttled(retry_after) => {
                debug!(%method, path, retry_after, "sim proxy: 429 (rate limit)");
                too_many_requests(retry_after)
            }
            Plan::Outage => {
                debug!(%method, path, "sim proxy: 503 (outage)");
                unavailable()
            }
            Plan::LoseRequest => {
                debug!(%method, path, "sim proxy: request lost; holding then dropping");
                tokio::time::sleep(self.faults.hold()).await;
                drop_connection(self.conn)
            }
            Plan::Unavailable => {
                debug!(%method, path, "sim proxy: 503 (injected)");
                unavailable()
            }
            Plan::UnavailableFor(retry_after) => {
                debug!(%method, path, retry_after, "sim proxy: 503 with Retry-After (injected)");
                unavailable_for(retry_after)
            }
            Plan::LookupFailed => {
                debug!(%method, path, "sim proxy: read -> 503 (injected)");
                unavailable()
            }
        })
    }

    /// Waits the latency, then forwards (unless a refusal window cut the connection
    /// meanwhile). `Err` is the answer instead: the dropped connection, or 502 when the
    /// upstream could not be reached or did not answer in time.
    async fn send(
        &self,
        proxy: Proxy,
        outgoing: Outgoing,
        class: Class,
    ) -> Result<Relayed, Response> {
        let Self { method, path, .. } = *self;
        if let Some(latency) = self.faults.latency() {
            tokio::time::sleep(latency).await;
        }
        if self.conn.is_killed() {
            debug!(%method, path, "sim proxy: connection cut before forwarding; not forwarded");
            return Err(drop_connection(self.conn));
        }
        self.app.with(|s| {
            s.proxy_stats.forwarded += 1;
            if class == Class::Executing {
                s.proxy_stats.executing_forwarded += 1;
            }
        });
        // A task of its own: a client gone meanwhile never cuts the upstream call short.
        let answered = match tokio::spawn(proxy.send(outgoing)).await {
            Ok(answered) => answered.map_err(|e| e.to_string()),
            Err(e) => Err(format!("forwarding task failed: {e}")),
        };
        answered.map_err(|e| {
            self.app.with(|s| s.proxy_stats.upstream_errors += 1);
            warn!(%method, path, error = %e, "sim proxy: upstream unreachable -> 502");
            error(StatusCode::BAD_GATEWAY, "upstream_unreachable")
        })
    }

    /// Carries out the faults after the upstream answered: relays its answer, holds it
    /// first, or drops the client's connection instead.
    async fn after_upstream(&self, after: AfterUpstream, relayed: Relayed) -> Response {
        let Self { method, path, .. } = *self;
        let status = relayed.status.as_u16();
        match after {
            AfterUpstream::Relay => debug!(%method, path, status, "sim proxy: relayed"),
            AfterUpstream::Lose => {
                self.app
                    .with(|s| s.proxy_stats.response_lost_after_upstream += 1);
                debug!(%method, path, status, "sim proxy: upstream answered; response lost");
                return drop_connection(self.conn);
            }
            AfterUpstream::Hold => {
                self.app.with(|s| s.proxy_stats.timeout_after_upstream += 1);
                debug!(%method, path, status, "sim proxy: upstream answered; holding the reply");
                tokio::time::sleep(self.faults.hold()).await;
            }
        }
        relayed.into_response()
    }
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
