//! `POST /orders/{order_id}/payment-method` with `{"payment_method":
//! "pm_…"}` (scope `charges:write`): a new payment-method token for the
//! order's next business retry (the customer updated their card).
//!
//! Invariant: the library's rule, because it calls it
//! (`Store::update_payment_method`): only an opaque token (never card data),
//! only while the order's latest attempt is declined with a retry pending;
//! every refusal names the field and changes nothing.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;

use super::{Answer, AppState, OrderInPath, error};
use crate::domain::PaymentMethod;
use crate::http::auth::Caller;
use crate::http::{Type, typed};
use crate::store::MethodUpdateError;

#[utoipa::path(
    post,
    path = "/orders/{order_id}/payment-method",
    operation_id = "post_orders_order_id_payment_method",
    summary = "Set a new payment method for the next retry",
    tag = "orders",
    description = "A new payment-method token for the order's next business retry.",
    request_body = crate::web::openapi::PaymentMethodBody,
    params(crate::web::openapi::OrderId),
    responses(
        (status = 200, description = "The order's next retry will use the new token.", body = crate::store::MethodUpdated),
        (status = 404, description = "No such order.", body = crate::web::openapi::ErrorBody),
        (status = 409, description = "The order is already approved or has no retry pending.", body = crate::web::openapi::ErrorBody),
        (status = 422, description = "`payment_method` is missing or malformed, or an unknown field.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::PlainJsonBodyRefusals,
        crate::web::openapi::Unavailable
    )
)]
pub(super) async fn update(
    State(app): AppState,
    Extension(caller): Extension<Caller>,
    OrderInPath(order_id): OrderInPath,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let v = super::json_body(body, &["payment_method"])?;
    let what = "the gateway's payment-method token";
    typed(&v, &[("payment_method", Type::Text(what))])?;
    let token = match v
        .get("payment_method")
        .and_then(|t| t.as_str())
        .map(PaymentMethod::parse)
    {
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            return Err(error(StatusCode::UNPROCESSABLE_ENTITY, Some(e.field), e.reason).into());
        }
        None => {
            return Err(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("payment_method"),
                "is required: the gateway's payment-method token",
            )
            .into());
        }
    };
    let updated = app
        .store
        .update_payment_method(&order_id, &token, &caller.actor())
        .await;
    Ok(match updated {
        Ok(done) => (StatusCode::OK, Json(json!(done))).into_response(),
        Err(e @ MethodUpdateError::NotFound(_)) => {
            error(StatusCode::NOT_FOUND, Some("order_id"), e.to_string())
        }
        Err(e @ (MethodUpdateError::AlreadyApproved(_) | MethodUpdateError::NoRetryPending(_))) => {
            error(StatusCode::CONFLICT, Some("order_id"), e.to_string())
        }
        Err(MethodUpdateError::Invalid(reason)) => error(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("payment_method"),
            reason,
        ),
        Err(MethodUpdateError::Store(e)) => super::db_failed(
            &e,
            "payment-method update failed",
            "nothing was changed; retry",
        ),
    })
}
