//! Parsing of the payment endpoints' input: the `Idempotency-Key` header and the JSON body
//! fields charges and refunds share, each failure naming the offending field.
//!
//! Invariant: what these functions return is already canonical (a lowercase hyphenated UUID
//! key, a non-blank id, an amount > 0, a 3-uppercase-letter currency); anything else is an
//! [`Invalid`] that the endpoint answers with 400 `{"error", "field"}`.

use axum::http::HeaderMap;
use serde_json::{Map, Value};
use uuid::Uuid;

/// Header carrying the client's idempotency key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// Why a request was rejected with 400.
#[derive(Debug)]
pub(crate) struct Invalid {
    pub(crate) field: &'static str,
    pub(crate) message: String,
}

pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Invalid {
    Invalid {
        field,
        message: message.into(),
    }
}

/// The canonical (lowercase, hyphenated) form of a UUID key, or `None` if it is not a UUID.
pub(crate) fn normalize_key(raw: &str) -> Option<String> {
    Uuid::parse_str(raw.trim())
        .ok()
        .map(|u| u.hyphenated().to_string())
}

/// The request's `Idempotency-Key`, which must be present and a UUID.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<String, Invalid> {
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

/// The body as a JSON object.
pub(crate) fn object(body: &[u8]) -> Result<Map<String, Value>, Invalid> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| invalid("body", format!("invalid JSON body: {e}")))?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(invalid("body", "body must be a JSON object")),
    }
}

/// A required string field that is not blank.
pub(crate) fn non_empty(map: &Map<String, Value>, field: &'static str) -> Result<String, Invalid> {
    match map.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        _ => Err(invalid(
            field,
            format!("{field} must be a non-empty string"),
        )),
    }
}

/// `amount_minor`: an integer > 0.
pub(crate) fn amount_minor(map: &Map<String, Value>) -> Result<i64, Invalid> {
    match map.get("amount_minor").and_then(Value::as_i64) {
        Some(a) if a > 0 => Ok(a),
        _ => Err(invalid(
            "amount_minor",
            "amount_minor must be an integer > 0",
        )),
    }
}

/// `currency`: three uppercase ASCII letters.
pub(crate) fn currency(map: &Map<String, Value>) -> Result<String, Invalid> {
    match map.get("currency") {
        Some(Value::String(s)) if is_currency(s) => Ok(s.clone()),
        _ => Err(invalid("currency", "currency must be 3 uppercase letters")),
    }
}

fn is_currency(s: &str) -> bool {
    s.len() == 3 && s.bytes().all(|b| b.is_ascii_uppercase())
}
