//! The payment endpoints of the simulator: `POST /v1/charges` (validation, fault injection,
//! idempotent execution) and `GET /v1/charges/{key}` (lookup by idempotency key).
//!
//! Invariant: a charge request executes at most once per request, and only after the
//! pre-execution faults (outage, request lost, 5xx) passed; every fault draw and the ledger
//! update of one request happen in a single locked section, so the draws of one request are
//! contiguous in the seeded sequence and a dropped or held reply never undoes an execution.

use axum::{
    Json,
    body::Bytes,
    extract::{ConnectInfo, Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::Value;
use tracing::debug;
use uuid::Uuid;

use super::{
    books::Execution,
    conn::ConnKill,
    faults::Dice,
    ledger::{ChargeBody, ChargeResult},
    server::{AppState, Inner, bad_request, error, unavailable},
};

/// Header carrying the client's idempotency key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// What the locked section decided for one charge request.
enum Plan {
    /// Never charged; hold, then drop the connection.
    LoseRequest,
    /// 503 before charging.
    Unavailable,
    /// Idempotent mode, key seen with other parameters: 409.
    KeyReused,
    /// Executed or replayed; maybe lose or hold the reply.
    Reply {
        result: ChargeResult,
        replay: bool,
        lose_response: bool,
        hold: bool,
    },
}

pub(crate) async fn create_charge(
    State(app): State<AppState>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let faults = app.with(|s| {
        s.books.stats_mut().charge_requests += 1;
        s.faults.clone()
    });
    if faults.outage {
        debug!("sim: POST /v1/charges -> 503 (outage)");
        return unavailable();
    }
    if let Some(latency) = faults.latency() {
        tokio::time::sleep(latency).await;
    }
    let (key, charge) = match idempotency_key(&headers).and_then(|k| Ok((k, parse_charge(&body)?)))
    {
        Ok(valid) => valid,
        Err(invalid) => {
            debug!(field = invalid.field, error = %invalid.message, "sim: POST /v1/charges -> 400");
            return bad_request(invalid.field, &invalid.message);
        }
    };

    let idempotent = app.idempotent();
    let plan = app.with(|s| {
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
                let n = order_requests.entry(charge.order_id.clone()).or_insert(0);
                own = Dice::for_order(*seed, &charge.order_id, *n);
                *n += 1;
                &mut own
            }
            None => shared,
        };
        if dice.fire(faults.p_request_lost) {
            books.stats_mut().dropped += 1;
            return Plan::LoseRequest;
        }
        if dice.fire(faults.p_5xx) {
            return Plan::Unavailable;
        }
        let execution = books.execute(idempotent, &key, &charge, || {
            dice.fire(faults.p_decline)
                .then(|| dice.decline_code(&faults.decline_codes))
        });
        let (result, replay) = match execution {
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
    });

    match plan {
        Plan::LoseRequest => {
            debug!(%key, order_id = %charge.order_id, "sim: request lost; holding then dropping");
            tokio::time::sleep(faults.hold()).await;
            drop_connection(&conn)
        }
        Plan::Unavailable => {
            debug!(%key, "sim: POST /v1/charges -> 503 (injected)");
            unavailable()
        }
        Plan::KeyReused => {
            debug!(%key, "sim: POST /v1/charges -> 409 (key reused)");
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
                order_id = %result.order_id,
                charge_id = %result.charge_id,
                status = %result.status,
                replay,
                lose_response,
                hold,
                "sim: POST /v1/charges"
            );
            if !replay {
                app.emit_webhook(&result);
            }
            if lose_response {
                return drop_connection(&conn);
            }
            if hold {
                tokio::time::sleep(faults.hold()).await;
            }
            charge_reply(result)
        }
    }
}

pub(crate) async fn lookup_charge(
    State(app): State<AppState>,
    Path(key): Path<String>,
) -> Response {
    let (outage, latency, p_fail) = app.with(|s| {
        s.books.stats_mut().lookup_requests += 1;
        (s.faults.outage, s.faults.latency(), s.faults.p_lookup_fail)
    });
    if outage {
        debug!(%key, "sim: GET /v1/charges/{{key}} -> 503 (outage)");
        return unavailable();
    }
    if let Some(latency) = latency {
        tokio::time::sleep(latency).await;
    }
    let key = normalize_key(&key);
    let found = app.with(|s| {
        if s.dice.fire(p_fail) {
            return Err(());
        }
        Ok(key.as_deref().and_then(|k| s.books.lookup(k)))
    });
    match found {
        Err(()) => {
            debug!(?key, "sim: lookup -> 503 (injected)");
            unavailable()
        }
        Ok(None) => {
            debug!(?key, "sim: lookup -> 404");
            error(StatusCode::NOT_FOUND, "not_found")
        }
        Ok(Some(result)) => {
            debug!(?key, charge_id = %result.charge_id, "sim: lookup -> 200");
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
fn charge_reply(result: ChargeResult) -> Response {
    let status = if result.is_approved() {
        StatusCode::OK
    } else {
        StatusCode::PAYMENT_REQUIRED
    };
    (status, Json(result)).into_response()
}

/// Why a charge request was rejected with 400.
struct Invalid {
    field: &'static str,
    message: String,
}

fn invalid(field: &'static str, message: impl Into<String>) -> Invalid {
    Invalid {
        field,
        message: message.into(),
    }
}

/// The canonical (lowercase, hyphenated) form of a UUID key, or `None` if it is not a UUID.
fn normalize_key(raw: &str) -> Option<String> {
    Uuid::parse_str(raw.trim())
        .ok()
        .map(|u| u.hyphenated().to_string())
}

fn idempotency_key(headers: &HeaderMap) -> Result<String, Invalid> {
    let Some(raw) = headers.get(IDEMPOTENCY_KEY_HEADER) else {
        return Err(invalid(
            IDEMPOTENCY_KEY_HEADER,
            "missing Idempotency-Key header",
        ));
    };
    raw.to_str()
        .ok()
        .and_then(normalize_key)
        .ok_or_else(|| invalid(IDEMPOTENCY_KEY_HEADER, "Idempotency-Key must be a UUID"))
}

fn is_currency(s: &str) -> bool {
    s.len() == 3 && s.bytes().all(|b| b.is_ascii_uppercase())
}

fn parse_charge(body: &[u8]) -> Result<ChargeBody, Invalid> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| invalid("body", format!("invalid JSON body: {e}")))?;
    let Value::Object(map) = value else {
        return Err(invalid("body", "body must be a JSON object"));
    };
    let order_id = match map.get("order_id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => {
            return Err(invalid("order_id", "order_id must be a non-empty string"));
        }
    };
    let amount_minor = match map.get("amount_minor").and_then(Value::as_i64) {
        Some(a) if a > 0 => a,
        _ => {
            return Err(invalid(
                "amount_minor",
                "amount_minor must be an integer > 0",
            ));
        }
    };
    let currency = match map.get("currency") {
        Some(Value::String(s)) if is_currency(s) => s.clone(),
        _ => {
            return Err(invalid("currency", "currency must be 3 uppercase letters"));
        }
    };
    let payment_method = match map.get("payment_method") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(invalid("payment_method", "payment_method must be a string"));
        }
    };
    Ok(ChargeBody {
        order_id,
        amount_minor,
        currency,
        payment_method,
    })
}
