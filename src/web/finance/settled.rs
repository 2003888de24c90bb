//! `GET /finance/settlements.csv?from=…&to=…`: the settled charges of a
//! window (gross, the gateway's fee, net) as CSV, for finance's books.
//!
//! Invariant: read-only; `from` and `to` (RFC 3339 or YYYY-MM-DD, half-open
//! on the settlement time) default to the last 31 days and may span at
//! most 366 days, so one answer stays bounded; a bad one is a 422 naming
//! the field.

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{TimeDelta, Utc};
use serde::Deserialize;

use super::FinanceState;
use super::api::db_failed;
use crate::web::error;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(in crate::web) struct Params {
    from: Option<String>,
    to: Option<String>,
}

#[utoipa::path(
    get,
    path = "/finance/settlements.csv",
    operation_id = "get_finance_settlements_csv",
    summary = "Settlements (CSV)",
    tag = "finance",
    description = "What the gateway settled between `from` and `to`, as CSV.",
    params(
        Params
    ),
    responses(
        (status = 200, description = "The settlements as CSV.", content_type = "text/csv"),
        (status = 422, description = "`from` or `to` is malformed, or `to` is before `from`.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn csv(State(fin): FinanceState, Query(p): Query<Params>) -> Response {
    let when = |field: &'static str, raw: Option<String>, default| match raw {
        None => Ok(default),
        Some(r) => crate::recon::parse_when(&r).map_err(|e| (field, e.reason)),
    };
    let now = Utc::now();
    let to = when("to", p.to, now + TimeDelta::seconds(1));
    let from = when("from", p.from, now - TimeDelta::days(31));
    let (from, to) = match (from, to) {
        (Ok(f), Ok(t)) if f < t && t - f <= TimeDelta::days(366) => (f, t),
        (Ok(_), Ok(_)) => {
            let why = "must be after from, at most 366 days later";
            return error(StatusCode::UNPROCESSABLE_ENTITY, Some("to"), why);
        }
        (Err((field, why)), _) | (_, Err((field, why))) => {
            return error(StatusCode::UNPROCESSABLE_ENTITY, Some(field), &why);
        }
    };
    match fin.store.settlements(from, to).await {
        Ok(rows) => {
            let name = format!(
                "attachment; filename=\"cobro-settlements-{}.csv\"",
                from.format("%Y-%m-%d")
            );
            (
                [
                    (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
                    (header::CONTENT_DISPOSITION, name),
                ],
                crate::finance::settlements_csv(&rows),
            )
                .into_response()
        }
        Err(e) => db_failed(&e),
    }
}
