//! The finance JSON API (the queue, an attempt, the summary, resolve, retry,
//! check now); the cases' actions are in [`super::case_api`], the CSV
//! export in [`super::export`].
//!
//! Invariant: thin: parse, call [`crate::finance`], map its errors to HTTP
//! statuses with the field they concern (422 bad input, 404 unknown, 409
//! moved/settled/refused, 503 database). Every JSON body is read as JSON
//! first and refused (422 naming it) when it has a field the route does not
//! take ([`crate::web::known_fields`]: serde's `deny_unknown_fields` does
//! not work with the `flatten`ed filters and resolutions) or a field of the
//! wrong JSON type ([`crate::http::typed`]: 422 naming the field and the
//! type, where serde's message would name neither), then parsed.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::FinanceState;
use crate::finance::{
    self, Filter, PageRequest, QueueError, Resolution, ResolveError, ResolveRequest,
};
use crate::http::auth::Caller as Person;
use crate::http::{Type, typed};
use crate::store::{Escalated, OverrideReason, ReconCase, RetryError, StoreError};
use crate::web::{Answer, Refusal, conflict, error, invalid, known_fields};

/// The `{id}` of an attempt's route, or the 400 naming `id` when it is not
/// a UUID.
pub(super) fn attempt_id(raw: &str) -> Result<Uuid, Refusal> {
    Uuid::try_parse(raw)
        .map_err(|_| error(StatusCode::BAD_REQUEST, Some("id"), "must be a UUID").into())
}

/// The database failed: [`crate::web::db_failed`].
pub(super) fn db_failed(e: &StoreError) -> Response {
    crate::web::db_failed(e, "finance request failed", "try again")
}

/// The query string of the queue's list: its filters and its page. (Not
/// `#[serde(flatten)]`: a query string's numbers would not parse through it.)
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(in crate::web) struct ListParams {
    state: Option<String>,
    currency: Option<String>,
    kind: Option<String>,
    min_age_secs: Option<i64>,
    after: Option<String>,
    limit: Option<u32>,
    cases_after: Option<String>,
    cases_limit: Option<u32>,
}

impl ListParams {
    fn split(self) -> (Filter, PageRequest, PageRequest) {
        (
            Filter {
                state: self.state,
                currency: self.currency,
                kind: self.kind,
                min_age_secs: self.min_age_secs,
            },
            PageRequest {
                after: self.after,
                limit: self.limit,
            },
            PageRequest {
                after: self.cases_after,
                limit: self.cases_limit,
            },
        )
    }
}

/// One page of the queue (`?limit=`, `?after=<next>`), with the true total
/// and the next page's cursor; one page of the open reconciliation cases
/// (`?cases_limit=`, `?cases_after=<cases_next>`), with their total. Both
/// pages are bounded ([`finance::MAX_PAGE_SIZE`]).
#[utoipa::path(
    get,
    path = "/finance/api/escalations",
    operation_id = "get_finance_api_escalations",
    summary = "Escalation queue",
    tag = "finance",
    description = "A page of the escalation queue (`items`, `total`, `next`) and of the open reconciliation cases (`cases`, `cases_total`, `cases_next`).",
    params(
        ListParams
    ),
    responses(
        (status = 200, description = "The queue.", body = EscalationsPage),
        (status = 422, description = "A filter or cursor is malformed.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn list(
    State(fin): FinanceState,
    Query(p): Query<ListParams>,
) -> Response {
    let (filter, page, cases) = p.split();
    let page = match finance::queue_page(&fin.store, fin.cfg.stale_after, &filter, &page).await {
        Ok(page) => page,
        Err(e) => return queue_error(e),
    };
    match finance::cases_page(&fin.store, &cases, "cases_after").await {
        // Through a JSON value, as before: its fields in alphabetical order.
        Ok(cases) => Json(json!(EscalationsPage {
            stale_after_secs: fin.cfg.stale_after.as_secs(),
            items: page.items,
            total: page.total,
            next: page.next,
            cases: cases.items,
            cases_total: cases.total,
            cases_next: cases.next,
        }))
        .into_response(),
        Err(e) => queue_error(e),
    }
}

/// The answer of `GET /finance/api/escalations`: a page of the queue and a
/// page of the open reconciliation cases, each with its total and the
/// cursor of its next page (null on the last).
#[derive(Serialize, utoipa::ToSchema)]
pub(in crate::web) struct EscalationsPage {
    /// A `DESCONOCIDO` attempt is in the queue once this old.
    stale_after_secs: u64,
    /// Oldest first.
    items: Vec<Escalated>,
    /// Every item the filters select, on all pages.
    total: i64,
    /// `?after=` for the next page.
    next: Option<String>,
    /// Open reconciliation cases, oldest first.
    cases: Vec<ReconCase>,
    /// Every open case, on all pages.
    cases_total: i64,
    /// `?cases_after=` for the next page of cases.
    cases_next: Option<String>,
}

pub(super) fn queue_error(e: QueueError) -> Response {
    match e {
        QueueError::Invalid(e) => invalid(&e),
        QueueError::Store(e) => db_failed(&e),
    }
}

/// The body as `T`, or the finished refusal: 400 when it is not JSON (as
/// every JSON route answers, [`crate::web::parsed_json`]); 422 for a field
/// other than `fields`, a field not of its type in `types`, or not the
/// shape `expected` shows (naming `field`, when the route has one to name).
pub(super) fn body_as<T: serde::de::DeserializeOwned>(
    body: &[u8],
    fields: &[&str],
    types: &[(&str, Type)],
    expected: &str,
    field: Option<&str>,
) -> Result<T, Box<Response>> {
    let refused = |e: serde_json::Error| {
        Box::new(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            field,
            format!("expected {expected}: {e}"),
        ))
    };
    let v = crate::web::parsed_json(body)?;
    known_fields(&v, fields)?;
    typed(&v, types)?;
    serde_json::from_value(v).map_err(refused)
}

/// The fields of `POST /finance/api/check-now`.
const CHECK_NOW_FIELDS: &[&str] = &["note", "state", "currency", "kind", "min_age_secs"];

/// A note, as every finance action takes it.
pub(super) const NOTE: (&str, Type) = ("note", Type::Text("what you checked and why"));

/// The types of the fields of `POST /finance/api/check-now`.
const CHECK_NOW_TYPES: &[(&str, Type)] = &[
    NOTE,
    ("state", Type::Text("a state, e.g. \"EN_REVISION\"")),
    ("currency", Type::Text("an ISO 4217 code, e.g. \"USD\"")),
    ("kind", Type::Text("charge or refund")),
    ("min_age_secs", Type::Integer("seconds")),
];

#[derive(Deserialize)]
struct CheckNowBody {
    #[serde(flatten)]
    filter: Filter,
    #[serde(default)]
    note: String,
}

/// Bulk "check again now": the janitor's next check of every attempt in
/// review the filters select is pulled to now, as the signed-in person.
#[utoipa::path(
    post,
    path = "/finance/api/check-now",
    operation_id = "post_finance_api_check_now",
    summary = "Check again now, in bulk",
    tag = "finance",
    description = "Bulk check now: the next gateway lookup of every attempt in review that the filters select is pulled to now.",
    request_body = crate::web::openapi::CheckNowBody,
    responses(
        (status = 200, description = "How many were scheduled.", body = crate::finance::BulkCheck),
        (status = 422, description = "A filter is malformed, or an unknown field.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::PlainJsonBodyRefusals,
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn check_now(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    body: Bytes,
) -> Answer {
    let expected = r#"{"note": "…", "state"?, "currency"?, "kind"?, "min_age_secs"?}"#;
    let body = body_as::<CheckNowBody>(&body, CHECK_NOW_FIELDS, CHECK_NOW_TYPES, expected, None)?;
    let scheduled = finance::check_now_all(
        &fin.store,
        fin.cfg.stale_after,
        &body.filter,
        &person.name,
        &body.note,
    )
    .await;
    Ok(match scheduled {
        Ok(done) => Json(done).into_response(),
        Err(e) => queue_error(e),
    })
}

#[utoipa::path(
    get,
    path = "/finance/api/attempts/{id}",
    operation_id = "get_finance_api_attempts_id",
    summary = "One attempt in finance's view",
    tag = "finance",
    description = "One attempt with its history and lookups.",
    params(crate::web::openapi::AttemptId),
    responses(
        (status = 200, description = "The attempt.", body = crate::finance::Detail),
        (status = 400, description = "`id` is not a UUID.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::NoSuchAttempt,
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn detail(State(fin): FinanceState, Path(id): Path<String>) -> Answer {
    let id = attempt_id(&id)?;
    Ok(match finance::detail(&fin.store, id).await {
        Ok(d) => Json(d).into_response(),
        Err(StoreError::NotFound(_)) => error(StatusCode::NOT_FOUND, Some("id"), "no such attempt"),
        Err(e) => db_failed(&e),
    })
}

#[derive(Deserialize)]
struct ResolveBody {
    version: i64,
    #[serde(default)]
    note: String,
    #[serde(flatten)]
    resolution: Resolution,
}

#[utoipa::path(
    post,
    path = "/finance/api/attempts/{id}/resolve",
    operation_id = "post_finance_api_attempts_id_resolve",
    summary = "Resolve an attempt",
    tag = "finance",
    description = "Resolve an attempt in review: approve (with the gateway's charge id), decline (with a code) or check now, at the version you saw.",
    request_body = crate::web::openapi::ResolveBody,
    params(crate::web::openapi::AttemptId),
    responses(
        (status = 200, description = "Resolved: the attempt now.", body = crate::store::Attempt),
        (status = 202, description = "A decline was asked for; the attempt stays EN_REVISION (in review) until the gateway is final.", body = crate::store::Attempt),
        (status = 409, description = "The attempt moved since `version`, or is already settled.", body = crate::web::openapi::ErrorBody),
        (status = 422, description = "A field is missing, of the wrong type, or unknown.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::AttemptActionRefusals
    )
)]
pub(in crate::web) async fn resolve(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
    body: Bytes,
) -> Answer {
    let id = attempt_id(&id)?;
    let expected = r#"{"action": "approve"|"decline"|"check_now", "version": N, "note": "…", "charge_id"|"code": "…"}"#;
    // The fields a resolution takes depend on its action: `charge_id` to
    // approve, `code` to decline, neither to check now.
    let action = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("action").and_then(Value::as_str).map(str::to_owned));
    let fields: &[&str] = match action.as_deref() {
        Some("approve") => &["action", "version", "note", "charge_id"],
        Some("decline") => &["action", "version", "note", "code"],
        Some("check_now") => &["action", "version", "note"],
        _ => &["action", "version", "note", "charge_id", "code"],
    };
    let types = [
        ("action", Type::Text("approve, decline or check_now")),
        ("version", Type::Integer("the attempt's version you saw")),
        NOTE,
        ("charge_id", Type::Text("the gateway's charge id")),
        ("code", Type::Text("the gateway's decline code")),
    ];
    let body = body_as::<ResolveBody>(&body, fields, &types, expected, None)?;
    let req = ResolveRequest {
        attempt_id: id,
        version: body.version,
        resolution: body.resolution,
        by: &person.name,
        note: &body.note,
    };
    let declining = matches!(req.resolution, finance::Resolution::Decline { .. });
    Ok(match finance::resolve(&fin.store, &req).await {
        // A decline still in review was asked for (its payment object may
        // still succeed): a worker records it once the gateway is final.
        Ok(now) if declining && now.state == crate::state::State::EnRevision => {
            (StatusCode::ACCEPTED, Json(now)).into_response()
        }
        Ok(now) => Json(now).into_response(),
        Err(e) => resolve_error(e),
    })
}

pub(super) fn resolve_error(e: ResolveError) -> Response {
    match e {
        ResolveError::Invalid(e) => invalid(&e),
        ResolveError::NotFound(_) => error(StatusCode::NOT_FOUND, Some("id"), e.to_string()),
        ResolveError::Moved(m) => error(StatusCode::CONFLICT, Some("version"), m),
        ResolveError::NotEscalated(m) | ResolveError::Busy(m) | ResolveError::OpenAtGateway(m) => {
            error(StatusCode::CONFLICT, None, m)
        }
        ResolveError::Store(e) => db_failed(&e),
    }
}

/// A business retry finance asks for: 202 once the declined attempt's
/// retry is due now; a worker looks the attempt up at the gateway and
/// creates the new attempt (a NEW derived key) through the same guards as
/// an automatic retry. Refused at once (409 with `"reason"`) while the
/// database's charge rule holds the order, or (409 naming the cap and
/// the override) while the card is at a card network's cap. The body is
/// empty or `{"override_reason": "..."}`: finance's explicit override of
/// the caps, kept in the attempt's log, logged, and shown on the attempt;
/// an empty reason is refused (422 naming `override_reason`).
#[utoipa::path(
    post,
    path = "/finance/api/attempts/{id}/retry",
    operation_id = "post_finance_api_attempts_id_retry",
    summary = "Retry a declined attempt",
    tag = "finance",
    description = "A manual retry of a declined attempt: a new attempt with a new derived key, within the card networks' caps unless `override_reason` is given. The body may be empty.",
    request_body = RetryBody,
    params(crate::web::openapi::AttemptId),
    responses(
        (status = 202, description = "The new attempt was enqueued.", body = crate::store::RetryRequested),
        (status = 409, description = "Refused by the database's charge rule or the caps (`reason` says which).", body = crate::web::openapi::ErrorBody),
        (status = 422, description = "`override_reason` is empty or of the wrong type, or an unknown field.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::AttemptActionRefusals
    )
)]
pub(in crate::web) async fn retry(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
    body: Bytes,
) -> Answer {
    let id = attempt_id(&id)?;
    let field = OverrideReason::FIELD;
    let cap_override = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let types = [(
            field,
            Type::Text("why the card networks' caps may be passed"),
        )];
        let parsed: Result<RetryBody, _> = body_as(
            &body,
            &[field],
            &types,
            "{\"override_reason\": \"...\"} or no body",
            None,
        );
        match parsed? {
            RetryBody {
                override_reason: None,
            } => None,
            RetryBody {
                override_reason: Some(raw),
            } => match OverrideReason::parse(&raw) {
                Ok(r) => Some(r),
                Err(e) => {
                    let refused =
                        error(StatusCode::UNPROCESSABLE_ENTITY, Some(field), e.to_string());
                    return Err(refused.into());
                }
            },
        }
    };
    let actor = format!("finance:{}", person.name);
    let asked = fin
        .store
        .request_retry(id, &actor, fin.cfg.card_caps, cap_override.as_ref())
        .await;
    Ok(match asked {
        Ok(r) => {
            if let Some(reason) = &r.cap_override {
                tracing::warn!(attempt = %id, %actor, cap_override = %reason,
                    "finance overrode the card networks' caps for a manual retry");
            }
            (StatusCode::ACCEPTED, Json(r)).into_response()
        }
        Err(RetryError::NotFound(m)) => error(StatusCode::NOT_FOUND, Some("id"), m),
        Err(RetryError::Db(e)) => db_failed(&StoreError::Db(e)),
        Err(refused) => conflict(refused.hold(), refused.to_string()),
    })
}

/// The body of `POST /finance/api/attempts/{id}/retry`.
#[derive(Deserialize, utoipa::ToSchema)]
struct RetryBody {
    /// Why the card networks' caps may be passed (kept in the attempt's log).
    #[schema(example = "the customer confirmed by phone; the bank lifted the block")]
    override_reason: Option<String>,
}

#[utoipa::path(
    get,
    path = "/finance/api/summary",
    operation_id = "get_finance_api_summary",
    summary = "Daily summary",
    tag = "finance",
    description = "The daily summary: counts and amounts per state and currency.",
    responses(
        (status = 200, description = "The summary.", body = crate::finance::Summary),
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn summary(State(fin): FinanceState) -> Response {
    match finance::summarize(&fin.store, fin.cfg.stale_after, chrono::Utc::now()).await {
        Ok(s) => Json(s).into_response(),
        Err(e) => db_failed(&e),
    }
}
