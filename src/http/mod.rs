//! What every HTTP listener of cobro stands on: the hardened server loop
//! ([`serve`]), API keys with scopes ([`keys`]) and the check of each
//! request against them ([`auth`]). The web process and
//! the worker's metrics endpoint both use them; nothing here knows a route.
//!
//! Invariant: no listener runs without header-read, request and body
//! timeouts and a connection limit; no guarded route runs its handler
//! before the caller is authenticated and holds the route's scope.

pub mod admit;
pub mod auth;
pub mod keys;
pub mod serve;

use axum::Json;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A JSON error body: `{"error": message, "field": field}`.
pub fn error(status: StatusCode, field: Option<&str>, message: impl Into<String>) -> Response {
    let mut body = json!({ "error": message.into() });
    if let Some(f) = field {
        body["field"] = json!(f);
    }
    (status, Json(body)).into_response()
}

/// Lets a request through only with `Content-Type: application/json`, so
/// a browser form posted from another site (`text/plain`, urlencoded,
/// multipart: no CORS preflight) never reaches a JSON handler: 415.
pub async fn json_only(req: Request, next: Next) -> Response {
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|ct| ct.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            "Content-Type must be application/json",
        );
    }
    next.run(req).await
}
