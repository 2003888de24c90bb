//! `GET /attempts`: a page of the search as JSON, `{"items": [...],
//! "next_cursor": "…" | null}`; a bad parameter is 400 naming it.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::OperatorState;
use crate::operator::{self, Search, SearchError};
use crate::web::error;

pub(super) async fn list(
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
        Err(SearchError::Store(e)) => super::unavailable(&e),
    }
}
