//! Metrics in the Prometheus text format, served at `GET /metrics` by the web
//! process and, when `COBRO_METRICS_ADDR` is set, by each worker.
//!
//! Two kinds of numbers, kept apart on purpose:
//! - **Events** (this process, since it started): gateway calls by call and
//!   outcome with a latency histogram, lookups, re-sends, transitions by
//!   (from, to), escalations. Counted with the `metrics` facade into one
//!   process-wide Prometheus recorder ([`install`]).
//! - **Truths** (the database, at scrape time: `metrics/truths.rs`): attempts
//!   by (kind, state), orders with two or more approved charges, open
//!   reconciliation cases, the oldest `DESCONOCIDO`, finance's queue,
//!   business retries by decline class and outcome ([`recovery`]). Every
//!   process shows the same values; sum the event counters across
//!   processes, never these.
//!
//! Invariant: a scrape never fails because the database does not answer:
//! the process counters are still served, with `cobro_database_up 0` and
//! the database gauges left out. Nothing here decides about money, and no
//! label carries an id, a key, an amount or a secret.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State as AxumState;
use axum::response::Response;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::gateway::{ChargeOutcome, Evidence, LookupOutcome};
use crate::http::auth::{ApiKeys, Guard, Scope, Via};
use crate::http::serve::HttpLimits;
use crate::state::State;

pub mod card_updated;
mod recovery;
mod text;
mod truths;

pub use truths::{GAUGE_TTL, Scraper};

/// Counter: gateway calls by `call` (charge, lookup, refund, refund_lookup)
/// and `outcome` (approved, declined, unknown, not_sent, not_executed; for
/// lookups approved, declined, not_found, failed, not_sent, not_executed).
pub const GATEWAY_CALLS: &str = "cobro_gateway_calls_total";
pub const AUTH_FAILURES: &str = "cobro_gateway_auth_failures_total";
/// Histogram: gateway call latency in seconds, by `call`.
pub const GATEWAY_LATENCY: &str = "cobro_gateway_call_duration_seconds";
/// Counter: lookups by key (charges and refunds) by `result`.
pub const LOOKUPS: &str = "cobro_lookups_total";
/// Counter: re-sends with the same key after the gateway's "not found".
pub const RESENDS: &str = "cobro_resends_total";
/// Counter: transition-log rows written, by `from` and `to` state.
pub const TRANSITIONS: &str = "cobro_transitions_total";
/// Counter: transitions into `EN_REVISION`, by `cause`.
pub const ESCALATIONS: &str = "cobro_escalations_total";
/// Counter: webhook deliveries refused, by `reason`.
pub const WEBHOOKS_REJECTED: &str = "cobro_webhooks_rejected_total";
/// Counter: verified webhooks stored, by result (`duplicate` included).
pub const WEBHOOKS_RECEIVED: &str = "cobro_webhooks_received_total";
/// Counter: attempts this process parked while the gateway was unreachable.
pub const PARKED: &str = "cobro_attempts_parked_total";
/// Counter: parked attempts this process re-woke once the gateway answered.
pub const REWOKEN: &str = "cobro_parked_rewoken_total";
/// Counter: breaker probes this process sent, by `result` (answered, failed).
pub const PROBES: &str = "cobro_breaker_probes_total";
/// Counter: gateway calls this process held back for the rate limit.
pub const PACED: &str = "cobro_gateway_paced_total";
/// Histogram: how long a held-back call waited for its slot, in seconds.
pub const PACED_WAIT: &str = "cobro_gateway_pace_wait_seconds";

/// Latency buckets (seconds): a loopback answer to a gateway timeout.
const LATENCY_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
];

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder once (later calls return the same
/// handle; safe from many tests and processes in one binary). When another
/// recorder was installed first, cobro's counters go there and `/metrics`
/// shows only the database gauges.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        // The store reports each transition-log row it writes; count it.
        crate::store::on_transition(transition);
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(GATEWAY_LATENCY.into()), &LATENCY_BUCKETS)
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        match ::metrics::set_global_recorder(recorder) {
            Ok(()) => describe(),
            Err(_) => {
                warn!("another metrics recorder is installed; /metrics shows database gauges only")
            }
        }
        spawn_upkeep(handle.clone());
        handle
    })
}

/// Histogram samples wait in the recorder until drained; drain them even
/// when nobody scrapes, so memory stays bounded.
fn spawn_upkeep(handle: PrometheusHandle) {
    let upkeep = move || {
        loop {
            std::thread::sleep(Duration::from_secs(5));
            handle.run_upkeep();
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("cobro-metrics-upkeep".into())
        .spawn(upkeep)
    {
        warn!(error = %e, "could not start the metrics upkeep thread");
    }
}

fn describe() {
    use ::metrics::{describe_counter, describe_histogram};
    card_updated::describe();
    describe_counter!(
        GATEWAY_CALLS,
        "Gateway calls made by this process, by call and outcome."
    );
    describe_histogram!(
        GATEWAY_LATENCY,
        ::metrics::Unit::Seconds,
        "Gateway call latency seen by this process, by call."
    );
    describe_counter!(LOOKUPS, "Lookups by key made by this process, by result.");
    describe_counter!(
        RESENDS,
        "Re-sends with the same key after the gateway said it never saw it."
    );
    describe_counter!(
        TRANSITIONS,
        "Transition-log rows written by this process, by from and to state."
    );
    describe_counter!(
        ESCALATIONS,
        "Attempts this process moved to EN_REVISION, by cause."
    );
    describe_counter!(
        WEBHOOKS_REJECTED,
        "Webhook deliveries this process refused, by reason (rows are kept for a sample only)."
    );
    describe_counter!(
        WEBHOOKS_RECEIVED,
        "Verified webhooks this process stored, by result (applied, noop, unmatched, ignored, duplicate)."
    );
    describe_counter!(
        PARKED,
        "Attempts this process parked because the gateway was unreachable (breaker open) or sending was paused."
    );
    describe_counter!(
        REWOKEN,
        "Parked attempts this process re-woke, paced, once the gateway answered."
    );
    describe_counter!(PROBES, "Breaker probes this process sent, by result.");
    describe_counter!(
        PACED,
        "Gateway calls this process delayed to keep the shared rate limit."
    );
    describe_histogram!(
        PACED_WAIT,
        ::metrics::Unit::Seconds,
        "How long this process's held-back gateway calls waited for their slot."
    );
    describe_counter!(
        AUTH_FAILURES,
        "Gateway answers of 401/403 to this process: the API key is wrong or revoked."
    );
    // Unlabelled counters appear from the first scrape, at 0.
    for name in [RESENDS, PARKED, REWOKEN, PACED, AUTH_FAILURES] {
        ::metrics::counter!(name).increment(0);
    }
}

/// The gateway refused our credentials (401/403): a configuration fault.
/// Counted from the call's evidence, which the adapter marks `auth_failed`.
fn count_auth_failure(evidence: &Evidence) {
    if evidence.error_kind == "auth_failed" {
        ::metrics::counter!(AUTH_FAILURES).increment(1);
    }
}

/// A verified webhook stored, by what it did (`applied`, `noop`,
/// `unmatched`, `ignored`, `duplicate`).
pub fn webhook_received(result: &'static str) {
    ::metrics::counter!(WEBHOOKS_RECEIVED, "result" => result).increment(1);
}

/// A send (charge or refund) and its answer.
pub fn send_answered(outcome: &ChargeOutcome) {
    let name = match outcome {
        ChargeOutcome::Approved { .. } => "approved",
        ChargeOutcome::Declined { .. } => "declined",
        ChargeOutcome::Unknown { .. } => "unknown",
        ChargeOutcome::Deferred { why, .. } => why.as_str(),
        ChargeOutcome::Refused { .. } => "refused",
    };
    gateway_call(outcome.evidence(), name);
}

/// A lookup (of a charge or a refund) and its answer.
pub fn lookup_answered(outcome: &LookupOutcome) {
    let name = match outcome {
        LookupOutcome::Approved { .. } => "approved",
        LookupOutcome::Declined { .. } => "declined",
        LookupOutcome::NotFound { .. } => "not_found",
        LookupOutcome::Failed { .. } => "failed",
        LookupOutcome::Deferred { why, .. } => why.as_str(),
    };
    gateway_call(outcome.evidence(), name);
    ::metrics::counter!(LOOKUPS, "result" => name).increment(1);
}

fn gateway_call(evidence: &Evidence, outcome: &'static str) {
    count_auth_failure(evidence);
    let call = evidence.call.clone();
    ::metrics::counter!(GATEWAY_CALLS, "call" => call.clone(), "outcome" => outcome).increment(1);
    ::metrics::histogram!(GATEWAY_LATENCY, "call" => call).record(evidence.elapsed_ms as f64 / 1e3);
}

/// A webhook delivery refused (counted always; stored only as a sample).
/// A wake-up failed with an error that is not the gateway's; `quarantined`
/// when this failure sent the attempt to finance.
pub fn wakeup_failed(quarantined: bool) {
    let outcome = if quarantined {
        "quarantined"
    } else {
        "counted"
    };
    ::metrics::counter!("cobro_wakeup_failures_total", "outcome" => outcome).increment(1);
}

pub fn webhook_rejected(reason: &'static str) {
    ::metrics::counter!(WEBHOOKS_REJECTED, "reason" => reason).increment(1);
}

/// An attempt parked while the breaker is open.
pub fn parked() {
    ::metrics::counter!(PARKED).increment(1);
}

/// Parked attempts re-woken.
pub fn rewoken(n: u64) {
    ::metrics::counter!(REWOKEN).increment(n);
}

/// A breaker probe and whether the gateway answered it.
pub fn breaker_probe(outcome: &LookupOutcome) {
    let result = match outcome {
        LookupOutcome::Approved { .. }
        | LookupOutcome::Declined { .. }
        | LookupOutcome::NotFound { .. } => "answered",
        LookupOutcome::Failed { .. } | LookupOutcome::Deferred { .. } => "failed",
    };
    ::metrics::counter!(PROBES, "result" => result).increment(1);
    count_auth_failure(outcome.evidence());
}

/// A call held back `wait` for the shared rate limit.
pub fn paced(wait: Duration) {
    ::metrics::counter!(PACED).increment(1);
    ::metrics::histogram!(PACED_WAIT).record(wait.as_secs_f64());
}

/// A re-send with the same key.
pub fn resent() {
    ::metrics::counter!(RESENDS).increment(1);
}

/// A transition-log row was written (in the transaction of the change).
pub fn transition(from: State, to: State, cause: &str) {
    ::metrics::counter!(TRANSITIONS, "from" => from.as_str(), "to" => to.as_str()).increment(1);
    if to == State::EnRevision {
        ::metrics::counter!(ESCALATIONS, "cause" => cause.to_owned()).increment(1);
    }
}

async fn metrics_route(AxumState(scraper): AxumState<Arc<Scraper>>) -> Response {
    scraper.response().await
}

/// The worker's metrics server: binds `addr` (so a taken port fails the
/// start) and serves `GET /metrics`, behind a key with `metrics:read`,
/// until `stop` turns true.
pub async fn serve_worker(
    addr: Option<SocketAddr>,
    scraper: Scraper,
    keys: Arc<ApiKeys>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    use anyhow::Context;
    let Some(addr) = addr else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding COBRO_METRICS_ADDR {addr}"))?;
    info!(addr = %listener.local_addr()?, "worker metrics at /metrics");
    let guard = Guard::new(keys, Scope::MetricsRead, Via::Bearer);
    let app = axum::Router::new()
        .route("/metrics", guard.on(get(metrics_route)))
        .with_state(Arc::new(scraper));
    Ok(Some(tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let limits = HttpLimits::default();
        if let Err(e) = crate::http::serve::serve(listener, app, &limits, stopped).await {
            warn!(error = %e, "worker metrics server stopped");
        }
    })))
}
