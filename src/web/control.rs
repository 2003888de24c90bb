//! The incident switch over HTTP (scope `finance:write`):
//! `POST /control/pause` with `{"reason": "…"}` stops sending new charges
//! on every worker (within a second); `POST /control/resume` turns it off;
//! `GET /control/pause` (the same scope) says how it stands. Pausing
//! takes a JSON body (415 otherwise); resuming takes none, so an empty
//! body without a `Content-Type` is fine, and a JSON one may not carry
//! fields ([`crate::http::no_fields`]).
//!
//! Invariant: the store keeps who and why for every change, in an
//! append-only history; the caller's key name is the actor.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Answer, AppState, error};
use crate::http::auth::Caller;
use crate::http::{Type, no_fields, typed};

#[utoipa::path(
    post,
    path = "/control/pause",
    operation_id = "post_control_pause",
    summary = "Pause sending",
    tag = "control",
    description = "Pause sending to the gateway (the incident switch), with a reason everyone sees.",
    request_body = crate::web::openapi::PauseBody,
    responses(
        (status = 200, description = "Sending is paused.", body = crate::web::openapi::PauseState),
        (status = 422, description = "`reason` is missing or empty, or an unknown field.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::PlainJsonBodyRefusals,
        crate::web::openapi::Unavailable
    )
)]
pub(super) async fn pause(
    State(app): AppState,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let what = "why sending is paused, shown to everyone who looks";
    let v = super::json_body(body, &["reason"])?;
    typed(&v, &[("reason", Type::Text(what))])?;
    let reason = v.get("reason").and_then(Value::as_str).map(str::to_owned);
    let Some(reason) = reason.filter(|r| !r.trim().is_empty()) else {
        return Err(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("reason"),
            "is required: why sending is paused (shown to everyone who looks)",
        )
        .into());
    };
    // The store keeps the first 500 characters; a control character would
    // fail the write (PostgreSQL refuses NUL) or break the line it is shown on.
    crate::domain::text::note("reason", &reason, usize::MAX, "a reason")
        .map_err(|e| super::invalid(&e))?;
    Ok(set(&app, &caller, true, Some(&reason)).await)
}

#[utoipa::path(
    post,
    path = "/control/resume",
    operation_id = "post_control_resume",
    summary = "Resume sending",
    tag = "control",
    description = "Resume sending. The body is empty or `{}`.",
    responses(
        (status = 200, description = "Sending resumed.", body = crate::web::openapi::PauseState),
        (status = 422, description = "The body has a field (none is taken).", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::JsonBodyRefusals,
        crate::web::openapi::Unavailable
    )
)]
pub(super) async fn resume(
    State(app): AppState,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let Ok(body) = body else {
        return Err(error(StatusCode::PAYLOAD_TOO_LARGE, None, "the body is too large").into());
    };
    no_fields(&body)?;
    Ok(set(&app, &caller, false, None).await)
}

#[utoipa::path(
    get,
    path = "/control/pause",
    operation_id = "get_control_pause",
    summary = "Read the incident switch",
    tag = "control",
    description = "Whether sending is paused, by whom and why.",
    responses(
        (status = 200, description = "The switch.", body = crate::web::openapi::PauseState),
        crate::web::openapi::Unavailable
    )
)]
pub(super) async fn show(State(app): AppState) -> Response {
    match app.store.pause_state().await {
        Ok(s) => Json(json!({ "paused": s.as_ref().is_some_and(|s| s.paused), "switch": s }))
            .into_response(),
        Err(e) => db_failed(&e),
    }
}

async fn set(app: &super::App, caller: &Caller, paused: bool, reason: Option<&str>) -> Response {
    match app
        .store
        .set_sending_paused(paused, &caller.actor(), reason)
        .await
    {
        Ok(s) => Json(json!({ "paused": s.paused, "switch": s })).into_response(),
        Err(e) => db_failed(&e),
    }
}

/// The database failed: [`super::db_failed`].
fn db_failed(e: &crate::store::StoreError) -> Response {
    super::db_failed(e, "incident switch", "retry")
}
