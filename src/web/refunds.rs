//! `POST /refunds` (request a refund over HTTP, `Idempotency-Key` header)
//! and `GET /refunds/{refund_id}`.
//!
//! Invariant: the same semantics as the library and the SQL function,
//! because it calls them; the database refuses a refund of anything but an
//! APROBADO charge and any refund past the captured amount. The response to
//! a create holds only what never changes for that key, so a replay gets the
//! same status and body back with `Idempotent-Replayed: true`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use super::charges::{KEY, amount, created, keyed_json};
use super::{Answer, AppState, error, invalid};
use crate::http::Type;
use crate::http::auth::Caller;
use crate::store::RefundError;

#[utoipa::path(
    post,
    path = "/refunds",
    operation_id = "post_refunds",
    summary = "Ask for a refund",
    tag = "refunds",
    description = "Ask for a refund of an APROBADO (approved) charge, with an `Idempotency-Key` header (a UUID).",
    request_body = crate::web::openapi::RefundBody,
    params(crate::web::openapi::IdempotencyKey),
    responses(
        (status = 201, description = "Enqueued (or replayed); `Location` is the refund.", body = crate::web::openapi::RefundCreated),
        (status = 404, description = "No such charge attempt.", body = crate::web::openapi::ErrorBody),
        (status = 409, description = "The charge is not refundable, the amount exceeds what was captured, or the key was used for another body.", body = crate::web::openapi::ErrorBody),
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
    let what = "the UUID of the APROBADO charge attempt to refund";
    let fields = ["attempt_id", "amount_minor"];
    let types = [("attempt_id", Type::Text(what))];
    let (key, v) = keyed_json(&headers, body, &fields, &types)?;
    let refused = |message| {
        error(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("attempt_id"),
            message,
        )
    };
    let Some(raw) = v.get("attempt_id").and_then(Value::as_str) else {
        return Err(refused(format!("is required: {what}")).into());
    };
    let attempt_id = Uuid::try_parse(raw).map_err(|_| {
        refused(format!(
            "attempt_id must be {what}; got a string that is not a UUID"
        ))
    })?;
    let amount = amount(&v)?;
    let requested = app
        .store
        .request_refund(attempt_id, amount, key, &caller.actor())
        .await;
    Ok(match requested {
        Ok(r) => {
            let body = json!({
                "refund_id": r.refund_id,
                "idempotency_key": r.idempotency_key,
                "attempt_id": attempt_id,
                "amount_minor": amount.minor(),
            });
            created(body, format!("/refunds/{}", r.refund_id), !r.created)
        }
        Err(RefundError::Invalid(e)) => invalid(&e),
        Err(RefundError::NotFound(m)) => error(StatusCode::NOT_FOUND, Some("attempt_id"), m),
        Err(RefundError::NotRefundable(m)) => error(StatusCode::CONFLICT, Some("attempt_id"), m),
        Err(RefundError::ExceedsCapture(m)) => error(StatusCode::CONFLICT, Some("amount_minor"), m),
        Err(RefundError::KeyReused(m)) => error(StatusCode::CONFLICT, Some(KEY), m),
        Err(RefundError::Db(e)) => super::db_failed(
            &crate::store::StoreError::Db(e),
            "refund request failed",
            "retry with the same key",
        ),
    })
}
