//! The request flow every payment endpoint of the simulator shares (`POST /v1/charges`,
//! `POST /v1/refunds` and their lookups by key): counting, outage and latency, validation,
//! the seeded fault plan around the execution, and what finally reaches the client.
//!
//! Invariant: a payment request executes at most once, and only after the pre-execution
//! faults (outage, request lost, 5xx) passed; its fault draws and its ledger update happen in
//! one locked section, always in the order request lost → 5xx → execute → response lost →
//! hold, so the draws of one request are contiguous in the seeded sequence and a dropped or
//! held reply never undoes an execution.

use axum::{
    Json,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use tracing::debug;

use super::{
    books::{Books, Execution},
    conn::ConnKill,
    faults::{Dice, Faults},
    ledger::{ChargeResult, RefundResult, Stats},
    parse::{Invalid, idempotency_key, normalize_key},
    server::{AppState, Inner, bad_request, error, unavailable},
};

/// Which payment endpoint a request hit.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Charge,
    Refund,
}

impl Kind {
    /// The collection's path, for logs.
    fn path(self) -> &'static str {
        match self {
            Kind::Charge => "/v1/charges",
            Kind::Refund => "/v1/refunds",
        }
    }

    fn count_request(self, stats: &mut Stats) {
        match self {
            Kind::Charge => stats.charge_requests += 1,
            Kind::Refund => stats.refund_requests += 1,
        }
    }

    fn count_lookup(self, stats: &mut Stats) {
        match self {
            Kind::Charge => stats.lookup_requests += 1,
            Kind::Refund => stats.refund_lookup_requests += 1,
        }
    }
}

/// A stored result the flow can send: 200 when approved, 402 when declined.
pub(crate) trait Answer: Serialize {
    /// The simulator's id of what was executed (`ch_…`, `re_…`).
    fn id(&self) -> &str;
    fn is_approved(&self) -> bool;
}

impl Answer for ChargeResult {
    fn id(&self) -> &str {
        &self.charge_id
    }
    fn is_approved(&self) -> bool {
        ChargeResult::is_approved(self)
    }
}

impl Answer for RefundResult {
    fn id(&self) -> &str {
        &self.refund_id
    }
    fn is_approved(&self) -> bool {
        RefundResult::is_approved(self)
    }
}

/// A request that got past outage, latency and validation.
pub(crate) struct Admitted<B> {
    /// The faults in force when the request arrived.
    pub(crate) faults: Faults,
    /// The canonical idempotency key.
    pub(crate) key: String,
    pub(crate) body: B,
}

/// Counts the request, answers 503 in an outage, waits the injected latency, then parses
/// the key and the body with `parse` (400 naming the field). `Err` is the answer to send.
pub(crate) async fn admit<B>(
    app: &AppState,
    kind: Kind,
    headers: &HeaderMap,
    body: &[u8],
    parse: impl FnOnce(&[u8]) -> Result<B, Invalid>,
) -> Result<Admitted<B>, Response> {
    let faults = app.with(|s| {
        kind.count_request(s.books.stats_mut());
        s.faults.clone()
    });
    if faults.outage {
        debug!(path = kind.path(), "sim: POST -> 503 (outage)");
        return Err(unavailable());
    }
    if let Some(latency) = faults.latency() {
        tokio::time::sleep(latency).await;
    }
    match idempotency_key(headers).and_then(|key| Ok((key, parse(body)?))) {
        Ok((key, body)) => Ok(Admitted { faults, key, body }),
        Err(invalid) => {
            debug!(path = kind.path(), field = invalid.field, error = %invalid.message, "sim: POST -> 400");
            Err(bad_request(invalid.field, &invalid.message))
        }
    }
}

/// What the locked section decided for one request.
pub(crate) enum Plan<R> {
    /// Never executed; hold, then drop the connection.
    LoseRequest,
    /// 503 before executing.
    Unavailable,
    /// Idempotent mode, key seen with other parameters: 409.
    KeyReused,
    /// Executed or replayed; maybe lose or hold the reply.
    Reply {
        result: R,
        replay: bool,
        lose_response: bool,
        hold: bool,
    },
}

/// Decides one admitted request in a single locked section: draws its faults around
/// `execute`, from the order's own dice when draws are per order (one counter per order id,
/// shared by its charge and refund requests).
pub(crate) fn plan<R>(
    app: &AppState,
    faults: &Faults,
    order_id: &str,
    execute: impl FnOnce(&mut Books, &mut Dice) -> Execution<R>,
) -> Plan<R> {
    app.with(|s| {
        let Inner {
            dice: shared,
            books,
            per_order_seed,
            order_requests,
            ..
        } = s;
        let mut own;
        let dice = match per_order_seed {
            Some(seed) => {
                let n = order_requests.entry(order_id.to_owned()).or_insert(0);
                own = Dice::for_order(*seed, order_id, *n);
                *n += 1;
                &mut own
            }
            None => shared,
        };
        decide(dice, books, faults, execute)
    })
}

/// The fault draws of one request, in their fixed order, around its execution.
fn decide<R>(
    dice: &mut Dice,
    books: &mut Books,
    faults: &Faults,
    execute: impl FnOnce(&mut Books, &mut Dice) -> Execution<R>,
) -> Plan<R> {
    if dice.fire(faults.p_request_lost) {
        books.stats_mut().dropped += 1;
        return Plan::LoseRequest;
    }
    if dice.fire(faults.p_5xx) {
        return Plan::Unavailable;
    }
    let (result, replay) = match execute(books, dice) {
        Execution::Executed(result) => (result, false),
        Execution::Replayed(result) => (result, true),
        Execution::KeyReused => return Plan::KeyReused,
    };
    let lose_response = dice.fire(faults.p_response_lost);
    if lose_response {
        books.stats_mut().dropped += 1;
    }
    let hold = !lose_response && dice.fire(faults.p_timeout_after_charge);
    Plan::Reply {
        result,
        replay,
        lose_response,
        hold,
    }
}

/// Carries a plan out: drops the connection, answers 503 or 409, or sends the result
/// (after holding it, when planned).
pub(crate) async fn respond<R: Answer>(
    kind: Kind,
    key: &str,
    plan: Plan<R>,
    conn: &ConnKill,
    faults: &Faults,
) -> Response {
    let path = kind.path();
    match plan {
        Plan::LoseRequest => {
            debug!(%key, path, "sim: request lost; holding then dropping");
            tokio::time::sleep(faults.hold()).await;
            drop_connection(conn)
        }
        Plan::Unavailable => {
            debug!(%key, path, "sim: POST -> 503 (injected)");
            unavailable()
        }
        Plan::KeyReused => {
            debug!(%key, path, "sim: POST -> 409 (key reused)");
            error(StatusCode::CONFLICT, "idempotency_key_reused")
        }
        Plan::Reply {
            result,
            replay,
            lose_response,
            hold,
        } => {
            debug!(
                %key,
                path,
                id = result.id(),
                approved = result.is_approved(),
                replay,
                lose_response,
                hold,
                "sim: POST executed"
            );
            if lose_response {
                return drop_connection(conn);
            }
            if hold {
                tokio::time::sleep(faults.hold()).await;
            }
            reply(&result)
        }
    }
}

/// A lookup by key: counts it, answers 503 in an outage, waits the injected latency, draws
/// `p_lookup_fail` (503) from the shared dice, then answers 200 with what `find` has for
/// the canonical key, or 404 `{"error":"not_found"}`.
pub(crate) async fn lookup<R: Answer>(
    app: &AppState,
    kind: Kind,
    raw_key: &str,
    find: impl FnOnce(&Books, &str) -> Option<R>,
) -> Response {
    let path = kind.path();
    let (outage, latency, p_fail) = app.with(|s| {
        kind.count_lookup(s.books.stats_mut());
        (s.faults.outage, s.faults.latency(), s.faults.p_lookup_fail)
    });
    if outage {
        debug!(key = raw_key, path, "sim: lookup -> 503 (outage)");
        return unavailable();
    }
    if let Some(latency) = latency {
        tokio::time::sleep(latency).await;
    }
    let key = normalize_key(raw_key);
    let found = app.with(|s| {
        if s.dice.fire(p_fail) {
            return Err(());
        }
        Ok(key.as_deref().and_then(|k| find(&s.books, k)))
    });
    match found {
        Err(()) => {
            debug!(?key, path, "sim: lookup -> 503 (injected)");
            unavailable()
        }
        Ok(None) => {
            debug!(?key, path, "sim: lookup -> 404");
            error(StatusCode::NOT_FOUND, "not_found")
        }
        Ok(Some(result)) => {
            debug!(?key, path, id = result.id(), "sim: lookup -> 200");
            Json(result).into_response()
        }
    }
}

/// Makes the connection vanish. The returned response is never delivered: the stream
/// refuses every write from now on.
fn drop_connection(conn: &ConnKill) -> Response {
    conn.kill();
    error(StatusCode::INTERNAL_SERVER_ERROR, "connection dropped")
}

/// 200 for an approval, 402 for a decline.
fn reply<R: Answer>(result: &R) -> Response {
    let status = if result.is_approved() {
        StatusCode::OK
    } else {
        StatusCode::PAYMENT_REQUIRED
    };
    (status, Json(result)).into_response()
}
