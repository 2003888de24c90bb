//! `POST /control/inject` (body [`Injection`]): writes a charge or a refund straight into
//! the books, as if the gateway had executed it for someone other than cobro: a charge made
//! outside cobro, a second charge for an order, a charge under a key of ours that cobro
//! never saw answered, a refund nobody asked cobro for. A test and demo facility, like
//! `/control/faults`; a real gateway has nothing like it. Answer: 200 with the new
//! [`LedgerEntry`] or [`RefundEntry`].
//!
//!
//! `POST /control/refund-failed` (body `{"refund_id": "re_…", "reason": "…"}`, the reason
//! optional, default [`REFUND_FAILED_REASON`]): an approved refund fails after it succeeded,
//! as Stripe's refunds can when the card's bank returns the money. Answer: 200 with the
//! [`RefundEntry`] as it now stands (declined, `decline_code` the reason), 404 for no such
//! refund, 409 when it is declined already, 400 naming the field of a malformed body.
//!
//! Invariant: an injection appends exactly one entry (next `seq`, new id), bypassing
//! idempotency and faults; an injected refund is still approved or declined by the books'
//! rules, so approved refunds never exceed their charge. A failed refund changes only its
//! own status and code. No webhook is sent.

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use chrono::Utc;
use tracing::info;
use uuid::Uuid;

use super::{
    books::RefundNotFailed,
    ledger::{ChargeBody, Injection, LedgerEntry, RefundBody, RefundEntry},
    parse::{Invalid, invalid, normalize_key},
    server::{AppState, bad_request, error},
};

/// Why a refund failed when `POST /control/refund-failed` names no reason
/// (one of Stripe's `failure_reason` values).
pub const REFUND_FAILED_REASON: &str = "declined";

/// Body of `POST /control/refund-failed`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundFailure {
    refund_id: String,
    #[serde(default)]
    reason: Option<String>,
}

pub(crate) async fn refund_failed(State(app): State<AppState>, body: Bytes) -> Response {
    let failure = match serde_json::from_slice::<RefundFailure>(&body) {
        Ok(f) => f,
        Err(e) => return bad_request("body", &format!("invalid refund-failed JSON: {e}")),
    };
    if crate::domain::text::id(&failure.refund_id).is_err() {
        return bad_request("refund_id", "refund_id must be a refund's id (re_…)");
    }
    let reason = failure.reason.as_deref().unwrap_or(REFUND_FAILED_REASON);
    if crate::domain::text::id(reason).is_err() {
        return bad_request(
            "reason",
            "reason must be 1-255 bytes with no control character",
        );
    }
    match app.with(|s| s.books.fail_refund(&failure.refund_id, reason)) {
        Ok(entry) => {
            info!(?entry, "sim: refund failed after it succeeded");
            Json(entry).into_response()
        }
        Err(RefundNotFailed::Unknown) => error(StatusCode::NOT_FOUND, "refund_not_found"),
        Err(RefundNotFailed::NotApproved) => error(StatusCode::CONFLICT, "refund_not_approved"),
    }
}

pub(crate) async fn inject(State(app): State<AppState>, body: Bytes) -> Response {
    let parsed = serde_json::from_slice::<Injection>(&body)
        .map_err(|e| invalid("body", format!("invalid injection JSON: {e}")))
        .and_then(checked);
    let (inj, key) = match parsed {
        Ok(ok) => ok,
        Err(e) => return bad_request(e.field, &e.message),
    };
    match inj.kind.as_str() {
        "charge" => Json(inject_charge(&app, &inj, &key)).into_response(),
        "refund" => match inj.charge_id.clone() {
            Some(charge_id) => Json(inject_refund(&app, &inj, &key, charge_id)).into_response(),
            None => bad_request("charge_id", "an injected refund needs charge_id"),
        },
        _ => bad_request("kind", "kind must be \"charge\" or \"refund\""),
    }
}

/// The injection with its canonical key (a fresh one when none was given).
fn checked(inj: Injection) -> Result<(Injection, String), Invalid> {
    if inj.order_id.trim().is_empty() {
        return Err(invalid("order_id", "order_id must be a non-empty string"));
    }
    if inj.amount_minor <= 0 {
        return Err(invalid(
            "amount_minor",
            "amount_minor must be an integer > 0",
        ));
    }
    let currency_ok =
        inj.currency.len() == 3 && inj.currency.bytes().all(|b| b.is_ascii_uppercase());
    if !currency_ok {
        return Err(invalid("currency", "currency must be 3 uppercase letters"));
    }
    let key = match &inj.idempotency_key {
        None => Uuid::new_v4().hyphenated().to_string(),
        Some(raw) => normalize_key(raw)
            .ok_or_else(|| invalid("idempotency_key", "idempotency_key must be a UUID"))?,
    };
    Ok((inj, key))
}

fn inject_charge(app: &AppState, inj: &Injection, key: &str) -> Option<LedgerEntry> {
    let body = ChargeBody {
        order_id: inj.order_id.clone(),
        amount_minor: inj.amount_minor,
        currency: inj.currency.clone(),
        payment_method: None,
    };
    let at = inj.at.unwrap_or_else(Utc::now);
    let entry = app.with(|s| {
        s.books
            .execute_at(false, key, &body, || inj.decline_code.clone(), at);
        s.books.stats_mut().injected += 1;
        s.books.charges().last().cloned()
    });
    info!(?entry, "sim: charge injected");
    entry
}

fn inject_refund(
    app: &AppState,
    inj: &Injection,
    key: &str,
    charge_id: String,
) -> Option<RefundEntry> {
    let body = RefundBody {
        charge_id,
        order_id: inj.order_id.clone(),
        amount_minor: inj.amount_minor,
        currency: inj.currency.clone(),
    };
    let at = inj.at.unwrap_or_else(Utc::now);
    let entry = app.with(|s| {
        s.books.refund_at(false, key, &body, at);
        s.books.stats_mut().injected += 1;
        s.books.refunds().last().cloned()
    });
    info!(?entry, "sim: refund injected");
    entry
}
