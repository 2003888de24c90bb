//! Finance's JSON actions on reconciliation cases: close a case with a
//! note, or refund the duplicate charge a `double_charge` case found (with
//! its own key, so asking twice is one refund). Thin like the rest of the
//! API ([`super::api`]): parse, call [`crate::finance`], map its errors.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::FinanceState;
use super::api::{NOTE, body_as, db_failed};
use crate::finance;
use crate::http::Type;
use crate::http::auth::Caller as Person;
use crate::store::{CaseError, RefundError, StoreError};
use crate::web::{Answer, error, invalid};

/// The body of `POST /finance/api/cases/{id}/resolve`.
#[derive(Deserialize, utoipa::ToSchema)]
struct CaseBody {
    /// What you found (1-2000 characters). Required: a body without it, or
    /// none, is refused naming `note`.
    #[serde(default)]
    #[schema(required = true, example = "the duplicate was refunded at the gateway")]
    note: String,
}

/// Closes a reconciliation case, as the signed-in person, with a note.
#[utoipa::path(
    post,
    path = "/finance/api/cases/{id}/resolve",
    operation_id = "post_finance_api_cases_id_resolve",
    summary = "Close a reconciliation case",
    tag = "finance",
    description = "Close a reconciliation case, with a note (required: what you found).",
    request_body = CaseBody,
    params(crate::web::openapi::CaseId),
    responses(
        (status = 200, description = "The case, closed.", body = crate::store::ReconCase),
        (status = 404, description = "No such case.", body = crate::web::openapi::ErrorBody),
        (status = 409, description = "The case is already closed.", body = crate::web::openapi::ErrorBody),
        (status = 422, description = "The note is missing, empty or of the wrong type, or an unknown field.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::PlainJsonBodyRefusals,
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn resolve_case(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<i64>,
    body: Bytes,
) -> Answer {
    // An empty body, or one without a note, is read as an empty note, which
    // `finance::resolve_case` refuses naming `note`; anything else must be a
    // JSON object with at most a note, a string.
    let note = if body.iter().all(u8::is_ascii_whitespace) {
        String::new()
    } else {
        let expected = r#"{"note": "…"}"#;
        body_as::<CaseBody>(&body, &["note"], &[NOTE], expected, None)?.note
    };
    let closed = finance::resolve_case(&fin.store, id, &person.name, &note).await;
    Ok(match closed {
        Ok(case) => Json(case).into_response(),
        Err(e) => case_error(e),
    })
}

/// The body of `POST /finance/api/cases/{id}/refund-duplicate`.
#[derive(Deserialize, utoipa::ToSchema)]
struct DuplicateBody {
    /// The duplicate's gateway charge id (one of the case's).
    #[schema(example = "ch_3PqR8sLkdIwHu7ix5e6f7g8h")]
    charge_id: String,
}

/// Refunds a gateway-side duplicate of a `double_charge` case, approved by
/// the signed-in person: 201 with the refund, 200 with the one already
/// asked for.
#[utoipa::path(
    post,
    path = "/finance/api/cases/{id}/refund-duplicate",
    operation_id = "post_finance_api_cases_id_refund_duplicate",
    summary = "Refund a duplicate charge",
    tag = "finance",
    description = "Refund a gateway-side duplicate of a double-charge case.",
    request_body = DuplicateBody,
    params(crate::web::openapi::CaseId),
    responses(
        (status = 201, description = "The refund was asked for.", body = crate::store::Refunded),
        (status = 200, description = "The same refund was already asked for.", body = crate::store::Refunded),
        (status = 404, description = "No such case.", body = crate::web::openapi::ErrorBody),
        (status = 409, description = "The charge is not this case's duplicate, or not refundable.", body = crate::web::openapi::ErrorBody),
        (status = 422, description = "`charge_id` is missing or of the wrong type, or an unknown field.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::PlainJsonBodyRefusals,
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn refund_duplicate(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<i64>,
    body: Bytes,
) -> Answer {
    let expected = r#"{"charge_id": "<the duplicate's gateway id>"}"#;
    let types = [("charge_id", Type::Text("the duplicate's gateway charge id"))];
    let body =
        body_as::<DuplicateBody>(&body, &["charge_id"], &types, expected, Some("charge_id"))?;
    let refunded = fin
        .store
        .refund_duplicate(id, &body.charge_id, &person.name)
        .await;
    Ok(match refunded {
        Ok(r) if r.created => (StatusCode::CREATED, Json(r)).into_response(),
        Ok(r) => Json(r).into_response(),
        Err(e) => duplicate_error(e),
    })
}

pub(super) fn duplicate_error(e: RefundError) -> Response {
    match e {
        RefundError::Invalid(e) => invalid(&e),
        RefundError::NotFound(m) => error(StatusCode::NOT_FOUND, Some("id"), m),
        RefundError::Db(e) => db_failed(&StoreError::Db(e)),
        other => error(StatusCode::CONFLICT, Some("charge_id"), other.to_string()),
    }
}

pub(super) fn case_error(e: CaseError) -> Response {
    match e {
        CaseError::Invalid(e) => error(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(if e.field == "resolution_note" {
                "note"
            } else {
                e.field
            }),
            e.to_string(),
        ),
        CaseError::NotFound(_) => error(StatusCode::NOT_FOUND, Some("id"), e.to_string()),
        CaseError::AlreadyResolved { .. } => error(StatusCode::CONFLICT, None, e.to_string()),
        CaseError::Store(e) => db_failed(&e),
    }
}
