//! `POST /charges` (enqueue over HTTP, `Idempotency-Key` header, Stripe's
//! convention) and `GET /charges/{attempt_id}` (also `GET /attempts/{attempt_id}`).
//!
//! Invariant: the same semantics as the library and SQL enqueue, because it
//! calls them. The response to a create holds only what never changes for
//! that key (attempt id, key, order, amount, currency, payment method,
//! customer), so a replay with the same key and body gets the original
//! status and body back, byte for byte, with `Idempotent-Replayed: true`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{API_BODY_LIMIT, Answer, AppState, error, invalid};
use crate::domain::{Amount, ChargeRequest, IdempotencyKey, InputError, MaxAmount};
use crate::http::auth::Caller;
use crate::http::{Type, is_json, typed};
use crate::store::{EnqueueError, StoreError};

/// The header carrying the client's key on every create endpoint.
pub(super) const KEY: &str = "Idempotency-Key";

/// The fields `POST /charges` takes.
const FIELDS: &[&str] = &[
    "order_id",
    "amount_minor",
    "currency",
    "payment_method",
    "customer",
];

/// What `amount_minor` must be, as every create route words it.
pub(super) const AMOUNT: Type = Type::Integer("minor units, e.g. 1999 for 19.99 USD");

/// The type of each field of `POST /charges`.
const TYPES: &[(&str, Type)] = &[
    ("order_id", Type::Text("your order's id")),
    ("amount_minor", AMOUNT),
    ("currency", Type::Text("an ISO 4217 code, e.g. \"USD\"")),
    (
        "payment_method",
        Type::Text("the gateway's payment-method token"),
    ),
    (
        "customer",
        Type::Text("the gateway's customer id the payment method is saved to"),
    ),
];

/// What every create endpoint checks before its own fields: the JSON
/// content type (415), the `Idempotency-Key` header (a UUID), the body
/// (read within the route's size limit: 413 past it), a JSON body, and no
/// field but `fields` (422 naming it, [`super::known_fields`]), each field
/// of `types` of its JSON type (422 naming it, [`typed`]). `Err` is the
/// finished error response.
pub(super) fn keyed_json(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    fields: &[&str],
    types: &[(&str, Type)],
) -> Result<(IdempotencyKey, Value), Box<Response>> {
    if !is_json(headers) {
        return Err(Box::new(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            "Content-Type must be application/json",
        )));
    }
    let Some(raw_key) = headers.get(KEY).and_then(|v| v.to_str().ok()) else {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            Some(KEY),
            "the Idempotency-Key header is required",
        )));
    };
    let key = IdempotencyKey::parse(raw_key)
        .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, Some(KEY), e.reason)))?;
    let body = body.map_err(|rejection| {
        let message = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            format!("the body exceeds the limit of {API_BODY_LIMIT} bytes")
        } else {
            rejection.body_text()
        };
        Box::new(error(rejection.status(), None, message))
    })?;
    let v = super::parsed_json(&body)?;
    super::known_fields(&v, fields)?;
    typed(&v, types)?;
    Ok((key, v))
}

/// `amount_minor` from a create body: a whole number from 1 to the ceiling.
/// The deployment's own maximum is the database's (the settings row the
/// `charge_gate` trigger reads, set by `cobro migrate --max-amount-minor`),
/// so HTTP, SQL and Rust callers meet one limit with one message. A number
/// too large for an `i64` is refused as over the maximum, not as missing;
/// one of another JSON type as what it is ([`AMOUNT`]).
/// `Err` is the finished 422 naming the field.
pub(super) fn amount(v: &Value) -> Result<Amount, Box<Response>> {
    typed(v, &[("amount_minor", AMOUNT)])?;
    let max = MaxAmount::CEILING;
    let refused = |e: InputError| Box::new(invalid(&e));
    let n = match v.get("amount_minor") {
        Some(Value::Number(n)) => n,
        _ => {
            return Err(Box::new(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("amount_minor"),
                "is required: a whole number of minor units (1999 = 19.99 USD), never a decimal",
            )));
        }
    };
    if let Some(minor) = n.as_i64() {
        return Amount::parse_within(minor, max).map_err(refused);
    }
    // A u64 above i64::MAX, or a number written too large for one (1e30):
    // over the maximum whatever else is wrong with it.
    let over = n.is_u64() || n.as_f64().is_some_and(|f| f > max.minor() as f64);
    Err(refused(if over {
        max.refusal(n)
    } else {
        InputError::new(
            "amount_minor",
            format!(
                "must be a whole number of minor units (1999 = 19.99 USD), never a decimal, got {n}"
            ),
        )
    }))
}

/// 201 with `body` and a `Location`, or the same with
/// `Idempotent-Replayed: true` when the key was already used for it.
pub(super) fn created(body: Value, location: String, replayed: bool) -> Response {
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    let h = resp.headers_mut();
    if let Ok(loc) = HeaderValue::from_str(&location) {
        h.insert("location", loc);
    }
    if replayed {
        h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    resp
}

#[utoipa::path(
    post,
    path = "/charges",
    operation_id = "post_charges",
    summary = "Enqueue a charge",
    tag = "charges",
    description = "Enqueue a charge. The `Idempotency-Key` header (a UUID) makes a retry of this request safe: the same key and body get the first answer back with `Idempotent-Replayed: true`.",
    request_body = crate::web::openapi::ChargeBody,
    params(crate::web::openapi::IdempotencyKey),
    responses(
        (status = 201, description = "Enqueued (or replayed); `Location` is the attempt.", body = crate::web::openapi::ChargeCreated),
        (status = 409, description = "The key was used for another body, or the database's charge rule refused the order (`reason`: approved, live_attempt, open_case, cancelled).", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::KeyedBodyRefusals,
        crate::web::openapi::Unavailable
    )
)]
pub(super) async fn create(
    State(app): AppState,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let (key, v) = keyed_json(&headers, body, FIELDS, TYPES)?;
    let raw_key = key.to_string();
    let raw_key = raw_key.as_str();
    let text = |field: &str| v.get(field).and_then(Value::as_str);
    let (order_id, currency, payment_method) =
        (text("order_id"), text("currency"), text("payment_method"));
    let required =
        |field: &str| error(StatusCode::UNPROCESSABLE_ENTITY, Some(field), "is required");
    let order_id = order_id.ok_or_else(|| required("order_id"))?;
    let currency = currency.ok_or_else(|| required("currency"))?;
    let amount = amount(&v)?.minor();
    let req = ChargeRequest::parse(order_id, amount, currency, Some(raw_key), payment_method)
        .and_then(|r| r.with_customer(text("customer")));
    let req = req.map_err(|e| invalid(&e))?;
    Ok(match app.store.enqueue_as(&req, &caller.actor()).await {
        Ok(out) => {
            let mut body = json!({
                "attempt_id": out.attempt_id,
                "idempotency_key": out.idempotency_key,
                "order_id": req.order_id,
                "amount_minor": req.amount.minor(),
                "currency": req.currency.code(),
            });
            if let Some(pm) = &req.payment_method {
                body["payment_method"] = json!(pm.token());
            }
            if let Some(customer) = &req.customer {
                body["customer"] = json!(customer.id());
            }
            created(body, format!("/charges/{}", out.attempt_id), !out.created)
        }
        Err(EnqueueError::Invalid(e)) => invalid(&e),
        Err(EnqueueError::KeyReused(m)) => error(StatusCode::CONFLICT, Some(KEY), m),
        Err(
            e @ (EnqueueError::LiveAttempt(_)
            | EnqueueError::AlreadyApproved(_)
            | EnqueueError::Held(..)),
        ) => super::conflict(e.hold(), e.to_string()),
        Err(EnqueueError::Db(e)) => super::db_failed(
            &crate::store::StoreError::Db(e),
            "enqueue failed",
            "retry with the same key",
        ),
    })
}

/// `GET /charges/{attempt_id}`, `GET /refunds/{refund_id}`, `GET
/// /attempts/{attempt_id}`: the attempt, its full transition history, its
/// lookups and, for a refund, the charge it refunds ([`crate::finance::detail`]).
#[utoipa::path(
    get,
    path = "/charges/{attempt_id}",
    operation_id = "get_charges_attempt_id",
    summary = "Read a charge attempt",
    tag = "charges",
    description = "One attempt with its state, history and gateway lookups.",
    params(
        ("attempt_id" = String, Path, description = "The attempt's UUID.")
    ),
    responses(
        crate::web::openapi::AttemptRead
    )
)]
pub(super) async fn show(State(app): AppState, Path(id): Path<String>) -> Response {
    let Ok(id) = Uuid::try_parse(&id) else {
        return error(
            StatusCode::BAD_REQUEST,
            Some("attempt_id"),
            "must be a UUID",
        );
    };
    match crate::finance::detail(&app.store, id).await {
        Ok(detail) => Json(detail).into_response(),
        Err(StoreError::NotFound(_)) => error(StatusCode::NOT_FOUND, None, "no such attempt"),
        Err(e) => super::db_failed(&e, "reading an attempt failed", "try again"),
    }
}

/// `GET /attempts/{attempt_id}`: the same answer as `GET /charges/{attempt_id}`.
#[utoipa::path(
    get,
    path = "/attempts/{attempt_id}",
    operation_id = "get_attempts_attempt_id",
    summary = "Read an attempt",
    tag = "operator",
    description = "One attempt with its state, history and gateway lookups (the same answer as `GET /charges/{attempt_id}`).",
    params(
        ("attempt_id" = String, Path, description = "The attempt's UUID.")
    ),
    responses(
        crate::web::openapi::AttemptRead
    )
)]
pub(super) async fn show_attempt(app: AppState, id: Path<String>) -> Response {
    show(app, id).await
}

/// `GET /refunds/{refund_id}`: a refund is an attempt; the same answer.
#[utoipa::path(
    get,
    path = "/refunds/{refund_id}",
    operation_id = "get_refunds_refund_id",
    summary = "Read a refund",
    tag = "refunds",
    description = "A refund (an attempt of kind refund) with its state, history and gateway lookups.",
    params(
        ("refund_id" = String, Path, description = "The refund's UUID.")
    ),
    responses(
        crate::web::openapi::AttemptRead
    )
)]
pub(super) async fn show_refund(app: AppState, id: Path<String>) -> Response {
    show(app, id).await
}
