//! The request flow every payment endpoint of the simulator shares (`POST /v1/charges`,
//! `POST /v1/refunds` and their lookups by key): counting, rate limit, outage and latency,
//! validation, the seeded fault plan around the execution, when the execution is recorded,
//! and what finally reaches the client.
//!
//! Invariant: a payment request executes at most once, and only after the pre-execution
//! faults (rate limit, outage, a refusal window's cut, request lost, 5xx, 503 with
//! `Retry-After`) passed; its fault draws happen in one locked section on arrival, always in
//! the order request lost → 5xx → 503 with `Retry-After` → (decline) → response lost → hold,
//! so the draws of one request are contiguous in the seeded sequence, and a knob left at
//! zero draws nothing. It is recorded in that same section, or, in record-on-complete mode
//! when its processing takes time (`execution_ms`, a held reply), by a task of its own at
//! the end of that time whatever became of the client's connection: the draws do not move,
//! only the write does. A dropped or held reply never undoes an execution.

use axum::{
    Json,
    body::Bytes,
    extract::{ConnectInfo, Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use tokio::time::Instant;
use tracing::{debug, warn};

pub(crate) use super::books::Kind;
use super::{
    books::{Books, Recalled},
    conn::ConnKill,
    faults::{Dice, Faults},
    ledger::{ChargeResult, RefundResult, Stats},
    limit::{throttle, too_many_requests, unavailable_for},
    parse::{Invalid, idempotency_key, normalize_key},
    server::{AppState, Inner, bad_request, error, unavailable},
};

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

/// A parsed payment request (a charge or a refund body): how the flow recalls, draws for
/// and records it.
pub(crate) trait Payment: Sized + Send + 'static {
    type Result: Answer + Send + 'static;
    /// What is drawn for a new execution on arrival (a charge's decline code).
    type Drawn: Send + 'static;
    const KIND: Kind;
    fn order_id(&self) -> &str;
    /// What a known key gets instead of executing (idempotent mode), or `None`.
    fn recall(
        &self,
        books: &mut Books,
        idempotent: bool,
        key: &str,
    ) -> Option<Recalled<Self::Result>>;
    /// The draws of a new execution, taken before the response-lost and hold draws.
    fn draw(dice: &mut Dice, faults: &Faults) -> Self::Drawn;
    /// Appends the executed request to the books.
    fn record(&self, books: &mut Books, key: &str, drawn: Self::Drawn) -> Self::Result;
    /// After it is recorded, outside the lock and before its reply (a charge's webhook).
    fn recorded(app: &AppState, result: &Self::Result);
    /// The request's body, checked field by field.
    fn parse(body: &[u8]) -> Result<Self, Invalid>;
    /// What the books hold under a key (the lookup's answer).
    fn find(books: &Books, key: &str) -> Option<Self::Result>;
}

/// `POST /v1/charges` and `POST /v1/refunds`: the axum handler of payment `P`.
pub(crate) async fn create_payment<P: Payment>(
    State(app): State<AppState>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    create(&app, &conn, &headers, &body, P::parse).await
}

/// `GET /v1/charges/{key}` and `GET /v1/refunds/{key}`: payment `P`'s lookup by key.
pub(crate) async fn lookup_payment<P: Payment>(
    State(app): State<AppState>,
    Path(key): Path<String>,
) -> Response {
    lookup(&app, P::KIND, &key, P::find).await
}

/// A whole `POST` of a payment endpoint: admit, plan, respond. Counts the request in
/// `cut_in_flight` when a refusal window cuts its connection before its reply is out
/// (whether the handler ran to the end or was dropped with the connection).
pub(crate) async fn create<P: Payment>(
    app: &AppState,
    conn: &ConnKill,
    headers: &HeaderMap,
    body: &[u8],
    parse: impl FnOnce(&[u8]) -> Result<P, Invalid>,
) -> Response {
    let _watch = CutWatch { app, conn };
    let Admitted { faults, key, body } = match admit(app, P::KIND, headers, body, parse).await {
        Ok(admitted) => admitted,
        Err(response) => return response,
    };
    let planned = plan(app, &faults, &key, body, conn);
    if let Plan::Reply {
        result,
        replay: false,
        ..
    } = &planned
    {
        P::recorded(app, result);
    }
    respond(app, &key, planned, conn, &faults).await
}

/// Counts its request in `cut_in_flight` when dropped after a refusal window cut the
/// connection.
pub(crate) struct CutWatch<'a> {
    pub(crate) app: &'a AppState,
    pub(crate) conn: &'a ConnKill,
}

impl Drop for CutWatch<'_> {
    fn drop(&mut self) {
        if self.conn.was_cut() {
            self.app.with(|s| s.books.stats_mut().cut_in_flight += 1);
        }
    }
}

/// A request that got past rate limit, outage, latency and validation.
struct Admitted<B> {
    /// The faults in force when the request arrived.
    faults: Faults,
    /// The canonical idempotency key.
    key: String,
    body: B,
}

/// Counts the request, answers 429 above the rate limit and 503 in an outage, waits the
/// injected latency, then parses the key and the body with `parse` (400 naming the field).
/// `Err` is the answer to send.
async fn admit<B>(
    app: &AppState,
    kind: Kind,
    headers: &HeaderMap,
    body: &[u8],
    parse: impl FnOnce(&[u8]) -> Result<B, Invalid>,
) -> Result<Admitted<B>, Response> {
    let (faults, throttled) = app.with(|s| {
        kind.count_request(s.books.stats_mut());
        (s.faults.clone(), throttle(s, std::time::Instant::now()))
    });
    if let Some(retry_after) = throttled {
        debug!(
            path = kind.path(),
            retry_after, "sim: POST -> 429 (rate limit)"
        );
        return Err(too_many_requests(retry_after));
    }
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

/// What happens to the reply of a request that executed or was replayed.
#[derive(Debug, Clone, Copy)]
struct ReplyFaults {
    /// Drop the connection instead of replying.
    lose_response: bool,
    /// Hold the reply for `hold_ms`.
    hold: bool,
}

/// What the locked section decided for one request.
enum Plan<P: Payment> {
    /// A refusal window (or shutdown) cut the connection first: never executed, no draws.
    Cut,
    /// Never executed; hold, then drop the connection.
    LoseRequest,
    /// 503 before executing.
    Unavailable,
    /// 503 with `Retry-After` (seconds) before executing.
    UnavailableFor(u64),
    /// Idempotent mode, key seen with other parameters: 409.
    KeyReused,
    /// Idempotent mode, the key's first request is still executing: 409.
    KeyInUse,
    /// Executed (recorded already) or replayed; maybe lose or hold the reply.
    Reply {
        result: P::Result,
        replay: bool,
        faults: ReplyFaults,
    },
    /// Record-on-complete: executed and recorded at the end of its processing.
    Deferred {
        body: P,
        drawn: P::Drawn,
        faults: ReplyFaults,
    },
}

/// Decides one admitted request in a single locked section: draws its faults around its
/// execution, from the order's own dice when draws are per order (one counter per order id,
/// shared by its charge and refund requests).
fn plan<P: Payment>(
    app: &AppState,
    faults: &Faults,
    key: &str,
    body: P,
    conn: &ConnKill,
) -> Plan<P> {
    let idempotent = app.idempotent();
    app.with(|s| {
        if conn.is_killed() {
            return Plan::Cut;
        }
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
                let n = order_requests
                    .entry(body.order_id().to_owned())
                    .or_insert(0);
                own = Dice::for_order(*seed, body.order_id(), *n);
                *n += 1;
                &mut own
            }
            None => shared,
        };
        decide(dice, books, faults, idempotent, key, body)
    })
}

/// The fault draws of one request, in their fixed order, around its execution.
fn decide<P: Payment>(
    dice: &mut Dice,
    books: &mut Books,
    faults: &Faults,
    idempotent: bool,
    key: &str,
    body: P,
) -> Plan<P> {
    if dice.fire(faults.p_request_lost) {
        books.stats_mut().dropped += 1;
        return Plan::LoseRequest;
    }
    if dice.fire(faults.p_5xx) {
        return Plan::Unavailable;
    }
    if dice.fire(faults.p_503_retry_after) {
        books.stats_mut().unavailable_retry_after += 1;
        return Plan::UnavailableFor(faults.retry_after());
    }
    match body.recall(books, idempotent, key) {
        Some(Recalled::Replayed(result)) => {
            return Plan::Reply {
                result,
                replay: true,
                faults: reply_faults(dice, books, faults),
            };
        }
        Some(Recalled::KeyReused) => return Plan::KeyReused,
        Some(Recalled::InFlight) => return Plan::KeyInUse,
        None => {}
    }
    let drawn = P::draw(dice, faults);
    let reply = reply_faults(dice, books, faults);
    let takes_time = reply.hold || faults.execution_ms > 0;
    if faults.record_on_complete && takes_time {
        if idempotent {
            books.begin(P::KIND, key);
        }
        books.stats_mut().deferred += 1;
        return Plan::Deferred {
            body,
            drawn,
            faults: reply,
        };
    }
    Plan::Reply {
        result: body.record(books, key, drawn),
        replay: false,
        faults: reply,
    }
}

/// The draws after the execution: response lost, then (if not lost) hold.
fn reply_faults(dice: &mut Dice, books: &mut Books, faults: &Faults) -> ReplyFaults {
    let lose_response = dice.fire(faults.p_response_lost);
    if lose_response {
        books.stats_mut().dropped += 1;
    }
    let hold = !lose_response && dice.fire(faults.p_timeout_after_charge);
    ReplyFaults {
        lose_response,
        hold,
    }
}

/// Carries a plan out: drops the connection, answers 503 or 409, or sends the result
/// (after the processing time and the hold, when planned); a deferred request is executed
/// and recorded by a task of its own, which finishes even if this handler is dropped.
async fn respond<P: Payment>(
    app: &AppState,
    key: &str,
    plan: Plan<P>,
    conn: &ConnKill,
    faults: &Faults,
) -> Response {
    let path = P::KIND.path();
    match plan {
        Plan::Cut => {
            debug!(%key, path, "sim: connection cut before deciding; not executed");
            drop_connection(conn)
        }
        Plan::LoseRequest => {
            debug!(%key, path, "sim: request lost; holding then dropping");
            tokio::time::sleep(faults.hold()).await;
            drop_connection(conn)
        }
        Plan::Unavailable => {
            debug!(%key, path, "sim: POST -> 503 (injected)");
            unavailable()
        }
        Plan::UnavailableFor(retry_after) => {
            debug!(%key, path, retry_after, "sim: POST -> 503 with Retry-After (injected)");
            unavailable_for(retry_after)
        }
        Plan::KeyReused => {
            debug!(%key, path, "sim: POST -> 409 (key reused)");
            error(StatusCode::CONFLICT, "idempotency_key_reused")
        }
        Plan::KeyInUse => {
            debug!(%key, path, "sim: POST -> 409 (key in use by a request still executing)");
            error(StatusCode::CONFLICT, "idempotency_key_in_use")
        }
        Plan::Reply {
            result,
            replay,
            faults: reply_faults,
        } => {
            debug!(
                %key,
                path,
                id = result.id(),
                approved = result.is_approved(),
                replay,
                lose_response = reply_faults.lose_response,
                hold = reply_faults.hold,
                "sim: POST executed"
            );
            if !replay && faults.execution_ms > 0 {
                tokio::time::sleep(faults.execution()).await;
            }
            if reply_faults.lose_response {
                return drop_connection(conn);
            }
            if reply_faults.hold {
                tokio::time::sleep(faults.hold()).await;
            }
            reply(&result)
        }
        Plan::Deferred {
            body,
            drawn,
            faults: reply_faults,
        } => {
            let mut processing = faults.execution();
            if reply_faults.hold {
                processing += faults.hold();
            }
            debug!(
                %key,
                path,
                processing_ms = processing.as_millis(),
                lose_response = reply_faults.lose_response,
                hold = reply_faults.hold,
                "sim: POST executing; recorded when it completes"
            );
            let until = Instant::now() + processing;
            let completion =
                tokio::spawn(complete(app.clone(), key.to_owned(), body, drawn, until));
            match completion.await {
                Ok(_) if reply_faults.lose_response => drop_connection(conn),
                Ok(result) => reply(&result),
                Err(e) => {
                    warn!(%key, path, error = %e, "sim: execution task failed");
                    error(StatusCode::INTERNAL_SERVER_ERROR, "internal")
                }
            }
        }
    }
}

/// Record-on-complete: waits until the processing ends, then executes and records the
/// request (releasing its key) and returns its result.
async fn complete<P: Payment>(
    app: AppState,
    key: String,
    body: P,
    drawn: P::Drawn,
    until: Instant,
) -> P::Result {
    tokio::time::sleep_until(until).await;
    let result = app.with(|s| {
        s.books.settle(P::KIND, &key);
        body.record(&mut s.books, &key, drawn)
    });
    debug!(%key, path = P::KIND.path(), id = result.id(), "sim: executed on completion");
    P::recorded(&app, &result);
    result
}

/// A lookup by key: counts it, answers 429 above the rate limit and 503 in an outage, waits
/// the injected latency, draws `p_lookup_fail` (503) from the shared dice, then answers 200
/// with what `find` has for the canonical key, or 404 `{"error":"not_found"}` (also while
/// its request is still executing in record-on-complete mode).
pub(crate) async fn lookup<R: Answer>(
    app: &AppState,
    kind: Kind,
    raw_key: &str,
    find: impl FnOnce(&Books, &str) -> Option<R>,
) -> Response {
    let path = kind.path();
    let (throttled, outage, latency, p_fail) = app.with(|s| {
        kind.count_lookup(s.books.stats_mut());
        let throttled = throttle(s, std::time::Instant::now());
        (
            throttled,
            s.faults.outage,
            s.faults.latency(),
            s.faults.p_lookup_fail,
        )
    });
    if let Some(retry_after) = throttled {
        debug!(
            key = raw_key,
            path, retry_after, "sim: lookup -> 429 (rate limit)"
        );
        return too_many_requests(retry_after);
    }
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
pub(crate) fn drop_connection(conn: &ConnKill) -> Response {
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
