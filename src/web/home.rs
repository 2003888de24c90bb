//! `GET /`: a small signed-in landing page linking the views the caller's
//! key may see (finance's queue and summary with `finance:read`, the
//! operator's search with `attempts:read`). Without credentials it asks
//! for them (401 with the Basic challenge, as every page does).
//!
//! Invariant: a link is shown only when its page would let this key in;
//! a key that can see no page gets 403 naming the scopes that would.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::html;

use super::html::shell;
use crate::http::auth::{ApiKeys, Scope, Via};

#[utoipa::path(
    get,
    path = "/",
    operation_id = "get_root",
    summary = "Landing page",
    tag = "pages",
    description = "A signed-in landing page linking the pages the key may see. Needs `finance:read` or `attempts:read`: the browser's sign-in (Basic) or an API key (Bearer).",
    responses(
        (status = 200, description = "The page.", content_type = "text/html"),
        (status = 401, description = "No credential (with the Basic challenge) or a wrong one.", body = crate::web::openapi::ErrorBody),
        (status = 403, description = "The key has neither `finance:read` nor `attempts:read`.", body = crate::web::openapi::ErrorBody)
    ),
    security(("sign_in" = ["finance:read", "attempts:read"]), ("api_key" = ["finance:read", "attempts:read"]))
)]
pub(crate) async fn landing(State(keys): State<Arc<ApiKeys>>, req: Request) -> Response {
    let Ok(person) = keys.authenticate(req.headers(), Via::Either) else {
        let mut resp = super::error(
            StatusCode::UNAUTHORIZED,
            None,
            "sign in with your name and API key secret (HTTP Basic) or an API key (Bearer)",
        );
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"cobro\", charset=\"UTF-8\""),
        );
        return resp;
    };
    let finance = person.scopes.has(Scope::FinanceRead);
    let operator = person.scopes.has(Scope::AttemptsRead);
    if !finance && !operator {
        return super::error(
            StatusCode::FORBIDDEN,
            None,
            format!(
                "the key {:?} can see no page: the pages need the scope {} or {}",
                person.name,
                Scope::FinanceRead,
                Scope::AttemptsRead
            ),
        );
    }
    let body = html! {
        p { "What this sign-in can look at:" }
        ul #views {
            @if finance {
                li { a #finance href="/finance" { "Escalation queue" }
                     ": payments finance must decide, and reconciliation cases" }
                li { a #summary href="/finance/summary" { "Daily summary" } }
            }
            @if operator {
                li { a #operator href="/operator/attempts" { "All attempts" }
                     ": search every attempt by order, key, state or date" }
            }
        }
    };
    let mut resp = shell("cobro", "cobro", &person, body).into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
