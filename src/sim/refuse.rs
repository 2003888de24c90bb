//! Refused connections: windows during which the simulator has no listening socket, so a
//! client's connect gets a real TCP "connection refused" and not one byte of its request
//! reaches the gateway; after the window it listens again on the same address, with the same
//! books, faults and dice. A window is opened by `POST /control/refuse {"for_ms": N}` or by
//! the schedule in `Faults` (`refuse_at_ms`, `refuse_for_ms`, `refuse_every_ms`).
//!
//! A connect racing the start of a window may have been queued by the kernel already: it is
//! reset rather than refused, before the simulator read a byte of it.
//!
//! A window is a real outage for the connections open when it begins: every one is cut (the
//! `POST /control/refuse` that asked for it is spared and answered with `Connection: close`).
//! A request whose bytes had not all arrived is never executed. A charge or refund fully
//! received keeps the fate it already had: decided before the cut (executed, or its
//! record-on-complete processing begun) it is, or will be, in the ledger and only its reply
//! is lost; not yet decided (still in `latency_ms`) it is never executed. Either way it is
//! counted in `stats.cut_in_flight`.
//!
//! Invariant: while the gate refuses, the listener holds no socket and any connection
//! accepted just before is cut on registration (see `conn`); nothing is executed for a
//! connection that was cut before its request was decided; `POST /control/refuse` answers
//! only once the listening socket is closed.

use std::time::Duration;

use axum::{
    Json,
    body::Bytes,
    extract::{ConnectInfo, State},
    http::header::CONNECTION,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::json;
use tokio::{sync::watch, time::Instant};
use tracing::{info, warn};

use super::{
    conn::{ConnKill, Registry},
    server::{AppState, bad_request},
};

/// The longest window `POST /control/refuse` opens: an hour.
const MAX_REFUSE_MS: u64 = 3_600_000;

/// Whether, and until when, the simulator refuses connections; and how many times the
/// listening socket was closed (so a caller can wait for it). Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Gate {
    until: std::sync::Arc<watch::Sender<Option<Instant>>>,
    closings: std::sync::Arc<watch::Sender<u64>>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            until: std::sync::Arc::new(watch::channel(None).0),
            closings: std::sync::Arc::new(watch::channel(0).0),
        }
    }
}

impl Gate {
    /// Refuses connections until `until` (a window already open and lasting longer is kept).
    fn refuse_until(&self, until: Instant) {
        self.until
            .send_modify(|current| *current = Some(current.map_or(until, |c| c.max(until))));
    }

    /// Whether connections are refused at `now`.
    pub(crate) fn refusing(&self, now: Instant) -> bool {
        self.until.borrow().is_some_and(|until| until > now)
    }

    /// Follows the end of the current window.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<Instant>> {
        self.until.subscribe()
    }

    /// Told by the listener each time it closes its socket.
    pub(crate) fn socket_closed(&self) {
        self.closings.send_modify(|n| *n += 1);
    }
}

/// The listening side of the simulator: the gate and the live connections.
#[derive(Clone, Debug, Default)]
pub(crate) struct Network {
    pub(crate) gate: Gate,
    pub(crate) registry: Registry,
}

/// Opens a refusal window until `until`: closes the listening socket (asynchronously, in
/// the listener) and cuts every live connection but `spare`.
fn open_window(app: &AppState, until: Instant, spare: Option<&ConnKill>) {
    let net = app.network();
    // The gate first: a connection accepted after the sweep below sees it (see `conn`).
    net.gate.refuse_until(until);
    let cut = net.registry.cut(spare);
    app.with(|s| s.books.stats_mut().refusal_windows += 1);
    let for_ms = until.saturating_duration_since(Instant::now()).as_millis();
    info!(for_ms, cut, "sim: refusal window opened");
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RefuseBody {
    for_ms: u64,
}

/// `POST /control/refuse {"for_ms": N}`: stop listening for N ms (1 to an hour). Answers
/// 200 `{"ok":true,"for_ms":N}` with `Connection: close` once the socket is closed, so a
/// connect right after the answer is refused.
pub(crate) async fn refuse(
    State(app): State<AppState>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    body: Bytes,
) -> Response {
    let for_ms = match serde_json::from_slice::<RefuseBody>(&body) {
        Ok(RefuseBody { for_ms }) if (1..=MAX_REFUSE_MS).contains(&for_ms) => for_ms,
        Ok(_) => {
            return bad_request(
                "for_ms",
                &format!("for_ms must be an integer from 1 to {MAX_REFUSE_MS}"),
            );
        }
        Err(e) => return bad_request("body", &format!("invalid refuse JSON: {e}")),
    };
    let gate = &app.network().gate;
    let mut closings = gate.closings.subscribe();
    closings.mark_unchanged();
    let now = Instant::now();
    // Already closed only if this connection slipped through as a window began.
    let already_closed = gate.refusing(now);
    open_window(&app, now + Duration::from_millis(for_ms), Some(&conn));
    if !already_closed {
        let closed = tokio::time::timeout(Duration::from_secs(5), closings.changed()).await;
        if !matches!(closed, Ok(Ok(()))) {
            warn!("sim: the listening socket did not report closing");
        }
    }
    (
        [(CONNECTION, "close")],
        Json(json!({ "ok": true, "for_ms": for_ms })),
    )
        .into_response()
}

/// Opens the windows of the refusal schedule in `Faults`, following every replacement of
/// the faults. Runs until aborted.
pub(crate) async fn drive_schedule(app: AppState) {
    // The last window opened: (origin of its schedule, its index).
    let mut opened: Option<(std::time::Instant, u64)> = None;
    loop {
        let replaced = app.faults_replaced();
        tokio::pin!(replaced);
        // Registered before reading the faults, so no replacement is missed.
        replaced.as_mut().enable();
        let (schedule, since) = app.with(|s| (s.faults.refusal_schedule(), s.refusals_since));
        let done = opened
            .filter(|(origin, _)| *origin == since)
            .map(|(_, i)| i);
        let elapsed = since.elapsed();
        let Some(window) = schedule.and_then(|s| s.next(elapsed, done)) else {
            replaced.await;
            continue;
        };
        let since = Instant::from_std(since);
        tokio::select! {
            () = tokio::time::sleep_until(since + window.start) => {
                open_window(&app, since + window.end, None);
                opened = Some((since.into_std(), window.index));
            }
            () = &mut replaced => {}
        }
    }
}
