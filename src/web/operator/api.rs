//! `GET /attempts`: a page of the search as JSON, `{"items": [...],
//! "next_cursor": "…" | null}`; a bad parameter is 400 naming it.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::OperatorState;
use crate::operator::{self, Search, SearchError};
use crate::web::error;

#[utoipa::path(
    get,
    path = "/attempts",
    operation_id = "get_attempts",
    summary = "Search attempts",
    tag = "operator",
    description = "Search every attempt: a page of `items` and a `next_cursor` (null on the last page).",
    params(crate::web::openapi::AttemptSearch),
    responses(
        (status = 200, description = "A page of attempts.", body = crate::operator::AttemptsPage),
        (status = 400, description = "A parameter is malformed (`field` names it).", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn list(
    State(op): OperatorState,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let search = match Search::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        Ok(s) => s,
        Err(bad) => return error(StatusCode::BAD_REQUEST, Some(&bad.name), bad.reason),
    };
    match operator::search(&op.store, &search).await {
        Ok(page) => Json(page).into_response(),
        Err(SearchError::Invalid(e)) => {
            error(StatusCode::BAD_REQUEST, Some(e.field), e.to_string())
        }
        Err(SearchError::Store(e)) => super::db_failed(&e),
    }
}
