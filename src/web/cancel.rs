//! `POST /orders/{order_id}/cancel` with `{"reason": "paid_by_other_means"}`
//! (scope `charges:write`): stop everything of the order not yet sent.
//!
//! Invariant: the library's semantics, because it calls it: all or nothing;
//! 409 naming the attempt when one may already have reached the gateway
//! (it can only be settled). A second cancel of the same order finds
//! nothing left and answers 200 with empty lists, so a client may retry.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Answer, AppState, OrderInPath, error};
use crate::http::auth::Caller;
use crate::http::{Type, typed};
use crate::store::{CancelError, CancelReason, Cancelled};

#[utoipa::path(
    post,
    path = "/orders/{order_id}/cancel",
    operation_id = "post_orders_order_id_cancel",
    summary = "Cancel an order's unsent attempts",
    tag = "orders",
    description = "Cancel what was not sent for an order: a PENDIENTE (waiting) attempt stops; one already with the gateway is not touched.",
    request_body = crate::web::openapi::CancelBody,
    params(crate::web::openapi::OrderId),
    responses(
        (status = 200, description = "What was cancelled, or that there was nothing to cancel.", body = CancelAnswer),
        (status = 404, description = "No such order.", body = crate::web::openapi::ErrorBody),
        (status = 409, description = "Nothing was cancelled: an attempt of the order may have reached the gateway (being sent, in doubt, in review, or waiting to be sent again after an unknown outcome); it can only be settled.", body = crate::web::openapi::ErrorBody),
        (status = 422, description = "`reason` is missing or not one of the reasons, or an unknown field.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::PlainJsonBodyRefusals,
        crate::web::openapi::Unavailable
    )
)]
pub(super) async fn cancel(
    State(app): AppState,
    Extension(caller): Extension<Caller>,
    OrderInPath(order_id): OrderInPath,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    const REASONS: &str =
        "paid_by_other_means, customer_request, fraud_suspected, duplicate_order or other";
    let v = super::json_body(body, &["reason"])?;
    typed(&v, &[("reason", Type::Text(REASONS))])?;
    let reason = match v
        .get("reason")
        .and_then(Value::as_str)
        .map(CancelReason::parse)
    {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            return Err(error(StatusCode::UNPROCESSABLE_ENTITY, Some("reason"), e).into());
        }
        None => {
            return Err(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("reason"),
                format!("is required: {REASONS}"),
            )
            .into());
        }
    };
    let cancelled = app
        .store
        .cancel_order(&order_id, reason, &caller.actor())
        .await;
    Ok(match cancelled {
        Ok(done) => answer(done, None),
        Err(CancelError::NothingToCancel(_)) => answer(
            Cancelled {
                order_id,
                attempts_cancelled: Vec::new(),
                retries_stopped: Vec::new(),
            },
            Some("nothing left to cancel"),
        ),
        Err(e @ CancelError::NotFound(_)) => {
            error(StatusCode::NOT_FOUND, Some("order_id"), e.to_string())
        }
        Err(e @ CancelError::InFlight { .. }) => {
            error(StatusCode::CONFLICT, Some("order_id"), e.to_string())
        }
        Err(CancelError::Store(e)) => {
            super::db_failed(&e, "cancel failed", "nothing was cancelled; retry")
        }
    })
}

/// The answer of a cancel: what it did, and `detail` when there was nothing
/// left to cancel (both lists empty).
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct CancelAnswer {
    #[serde(flatten)]
    done: Cancelled,
    /// "nothing left to cancel", when so; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'static str>,
}

/// 200 with what was cancelled (through a JSON value, as before: its
/// fields in alphabetical order).
fn answer(done: Cancelled, detail: Option<&'static str>) -> Response {
    (StatusCode::OK, Json(json!(CancelAnswer { done, detail }))).into_response()
}
