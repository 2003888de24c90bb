//! The operator's pages: `/operator/attempts` (a search form and a page
//! of attempts, newest first, with a *Next page* link) and
//! `/operator/attempts/{id}` (an attempt's facts, its full history and its
//! lookups). Read-only: the search is a GET form.
//!
//! Invariant: the HTML is maud's (every value escaped by construction,
//! [`crate::web::html`]); a page holds at most the search's bounded page
//! of attempts; no card data (a payment method is the gateway's opaque
//! token) and no secret is shown; the pause banner tops every page.

use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use uuid::Uuid;

use super::OperatorState;
use crate::domain::decimal;
use crate::http::auth::Caller as Person;
use crate::operator::{self, AttemptsPage, Search, SearchError};
use crate::state::State as AttemptState;
use crate::store::{Attempt, StoreError};
use crate::web::finance::{banner, pause_banner};
use crate::web::html::{checks, history, select, shell, url_encode};

fn page(title: &str, person: &Person, body: Markup) -> Markup {
    shell("cobro operator", title, person, body)
}

fn time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[utoipa::path(
    get,
    path = "/operator/attempts",
    operation_id = "get_operator_attempts",
    summary = "Search attempts (page)",
    tag = "operator",
    description = "The operator view's search, as a page.",
    params(crate::web::openapi::AttemptSearch),
    responses(
        (status = 200, description = "The page.", content_type = "text/html"),
        (status = 400, description = "A parameter is malformed (the page says which).", content_type = "text/html"),
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn list(
    State(op): OperatorState,
    Extension(person): Extension<Person>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let parsed = Search::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let (search, found) = match parsed {
        Err(bad) => (Search::default(), Err(bad.to_string())),
        Ok(s) => {
            let found = match operator::search(&op.store, &s).await {
                Ok(page) => Ok(page),
                Err(SearchError::Invalid(e)) => Err(e.to_string()),
                Err(SearchError::Store(e)) => return super::db_failed(&e),
            };
            (s, found)
        }
    };
    let status = if found.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    let body = html! {
        (banner(&op.store).await)
        (form(&search))
        @match &found {
            Ok(found) => { (table(found, &search)) }
            Err(problem) => { p.note.err #problem { (problem) } }
        }
    };
    (status, page("All attempts", &person, body)).into_response()
}

fn form(s: &Search) -> Markup {
    let text = |name: &str, label: &str, v: &Option<String>, hint: &str| {
        html! {
            label.inline {
                (label) " "
                input.search type="text" name=(name) id={ "search-" (name) } placeholder=(hint)
                    value=(v.as_deref().unwrap_or(""));
            }
        }
    };
    let mut states = vec![("", "any state")];
    states.extend(AttemptState::ALL.iter().map(|s| (s.as_str(), s.as_str())));
    html! {
        form #search method="get" action="/operator/attempts" {
            (text("order_id", "Order", &s.order_id, "exact order id"))
            (text("key", "Idempotency key", &s.key, "a UUID"))
            br;
            (select("state", s.state.as_deref(), &states)) " "
            (select("kind", s.kind.as_deref(), &[
                ("", "any kind"),
                ("charge", "charges (first and retries)"),
                ("initial", "first charges"),
                ("business_retry", "business retries"),
                ("refund", "refunds"),
            ])) " "
            (text("from", "Created from", &s.from, "2026-12-01"))
            (text("to", "to", &s.to, "2026-12-01 (included)"))
            button type="submit" { "Search" } " "
            a href="/operator/attempts" { "Clear" }
        }
    }
}

fn kind_label(a: &Attempt) -> &'static str {
    match a.kind.as_str() {
        "initial" => "first charge",
        "business_retry" => "business retry",
        "refund" => "refund",
        _ => "other",
    }
}

fn table(found: &AttemptsPage, s: &Search) -> Markup {
    if found.items.is_empty() {
        return html! { p #empty { "No attempt matches." } };
    }
    let next = found.next_cursor.as_ref().map(|next| {
        let mut query: Vec<String> = s
            .filters()
            .into_iter()
            .map(|(k, v)| format!("{k}={}", url_encode(v)))
            .collect();
        if let Some(limit) = s.limit.as_deref().filter(|l| !l.trim().is_empty()) {
            query.push(format!("limit={}", url_encode(limit.trim())));
        }
        query.push(format!("cursor={}", url_encode(next)));
        format!("/operator/attempts?{}", query.join("&"))
    });
    html! {
        table #attempts {
            thead { tr {
                th { "Created" } th { "Order" } th { "Kind" } th { "State" } th.num { "Amount" }
                th.num { "Sends / checks" } th { "Idempotency key" } th {}
            } }
            tbody {
                @for a in &found.items {
                    tr data-attempt=(a.id) {
                        td { (time(a.created_at)) }
                        td { (a.order_id) }
                        td { (kind_label(a)) " #" (a.attempt_number) }
                        td.state { (a.state) }
                        td.num { (decimal(a.amount_minor, &a.currency)) " " (a.currency) }
                        td.num { (a.send_count) " / " (a.check_count) }
                        td { code { (a.idempotency_key) } }
                        td { a.open href={ "/operator/attempts/" (a.id) } { "Open" } }
                    }
                }
            }
        }
        @if let Some(href) = next {
            p { a #next href=(href) { "Next page" } }
        }
    }
}

#[utoipa::path(
    get,
    path = "/operator/attempts/{id}",
    operation_id = "get_operator_attempts_id",
    summary = "One attempt (page)",
    tag = "operator",
    description = "One attempt, as a page.",
    params(crate::web::openapi::AttemptId),
    responses(crate::web::openapi::AttemptPage)
)]
pub(in crate::web) async fn detail(
    State(op): OperatorState,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = Uuid::try_parse(&id) else {
        let body = html! { p.note.err #problem { "invalid id: must be a UUID" } };
        return (
            StatusCode::BAD_REQUEST,
            page("Not an attempt", &person, body),
        )
            .into_response();
    };
    let d = match crate::finance::detail(&op.store, id).await {
        Ok(d) => d,
        Err(StoreError::NotFound(_)) => {
            let body = html! { p.note.err #problem { "No such attempt." } };
            return (StatusCode::NOT_FOUND, page("Not found", &person, body)).into_response();
        }
        Err(e) => return super::db_failed(&e),
    };
    let a = &d.attempt;
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let at = |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or("-".into(), time);
    let body = html! {
        (pause_banner(&op.store).await)
        table #facts { tbody {
            tr { th { "Attempt" } td {
                code { (a.id) } " (" (kind_label(a)) " #" (a.attempt_number)
                ", version " (a.version) ")"
            } }
            tr { th { "Order" } td {
                a #order href={ "/operator/attempts?order_id=" (url_encode(&a.order_id)) } { (a.order_id) }
            } }
            tr { th { "Amount" } td { (decimal(a.amount_minor, &a.currency)) " " (a.currency) } }
            tr { th { "State" } td #state { (a.state) } }
            tr { th { "Idempotency key" } td { code { (a.idempotency_key) } } }
            tr { th { "Payment method (gateway token)" } td { code { (opt(&a.payment_method)) } } }
            tr { th { "Customer (gateway id)" } td { code { (opt(&a.customer)) } } }
            tr { th { "Created / updated" } td { (time(a.created_at)) " / " (time(a.updated_at)) } }
            tr { th { "Sends / checks" } td { (a.send_count) " / " (a.check_count) } }
            tr { th { "Gateway charge" } td { (opt(&a.gateway_charge_id)) } }
            tr { th { "Decline code" } td { (opt(&a.decline_code)) } }
            tr { th { "Cancelled" } td { (opt(&a.cancel_reason)) } }
            tr { th { "Next action at" } td { (at(a.next_action_at)) } }
            tr { th { "Held by" } td { (opt(&a.lease_owner)) " until " (at(a.lease_expires_at)) } }
            tr { th { "Parked since" } td { (at(a.parked_since)) } }
            @if let Some(c) = &d.refund_of {
                tr { th { "Refund of" } td {
                    @if let Some(g) = &a.refund_of_gateway {
                        "the duplicate gateway charge " b { (g) } ", anchored on "
                    }
                    a href={ "/operator/attempts/" (c.id) } { code { (c.id) } }
                } }
            }
        } }
        @if matches!(a.state, AttemptState::Desconocido | AttemptState::EnRevision) {
            p.note {
                "In doubt: finance decides it in "
                a href={ "/finance/attempts/" (a.id) } { "the escalation queue" } "."
            }
        }
        (history(&d.transitions))
        (checks(&d.checks))
    };
    let title = format!("Attempt for order {}", a.order_id);
    page(&title, &person, body).into_response()
}
