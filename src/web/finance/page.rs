//! The finance page: server-rendered HTML, no scripts, no front-end build.
//! `/finance` lists a page of the queue with filters and a CSV link, then
//! a page of the open reconciliation cases ([`super::cases`]); an item's
//! page ([`super::detail`]) shows its evidence and full history with the
//! three resolutions as forms.
//!
//! Invariant: the HTML is maud's (every value escaped by construction,
//! [`crate::web::html`]); every form carries the sign-in's expiring form
//! token (and, to resolve, the version shown), so a forged post, one from
//! another sign-in, an old page or a stale version changes nothing.

use std::time::Duration;

use axum::extract::{Extension, Form, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::FinanceState;
use super::api::db_failed;
use crate::domain::decimal;
use crate::finance::{self, Filter};
use crate::http::auth::Caller as Person;
use crate::store::Escalated;

use crate::web::html::{select, shell, url_encode};
use crate::web::{Answer, Refusal};

pub(super) fn page(title: &str, person: &Person, body: Markup) -> Markup {
    shell("cobro finance", title, person, body)
}

/// A problem shown on its own page, with the way back to the queue.
pub(super) fn problem(status: StatusCode, title: &str, person: &Person, text: &str) -> Response {
    let body = html! {
        p.note.err #problem { (text) }
        p { a href="/finance" { "Back to the queue" } }
    };
    (status, page(title, person, body)).into_response()
}

/// `Ok` when the form's token is this sign-in's and fresh; otherwise the
/// refusal: 403, saying to reload the page (which carries a fresh token),
/// nothing written.
pub(super) fn form_token_ok(person: &Person, token: &str, ttl: Duration) -> Result<(), Refusal> {
    let Err(why) = person.check_form_token(token, ttl) else {
        return Ok(());
    };
    let body = html! {
        p.note.err #problem {
            (why) ". Reload the page and submit the form again. Nothing was changed."
        }
        p { a href="/finance" { "Back to the queue" } }
    };
    Err((StatusCode::FORBIDDEN, page("Refused", person, body))
        .into_response()
        .into())
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(in crate::web) struct ListQuery {
    state: Option<String>,
    currency: Option<String>,
    kind: Option<String>,
    /// Minimum age in hours.
    min_age_h: Option<String>,
    resolved: Option<String>,
    resolved_case: Option<String>,
    /// The next page's cursor.
    after: Option<String>,
    /// The next page of cases' cursor.
    cases_after: Option<String>,
    /// After a bulk "check again now": how many were scheduled.
    checked: Option<String>,
}

impl ListQuery {
    fn filter(&self) -> Filter {
        Filter {
            state: self.state.clone(),
            currency: self.currency.clone(),
            kind: self.kind.clone(),
            min_age_secs: self
                .min_age_h
                .as_deref()
                .and_then(|h| h.trim().parse::<f64>().ok())
                .filter(|h| h.is_finite() && *h >= 0.0)
                .map(|h| (h * 3600.0) as i64),
        }
    }

    fn query_string(&self) -> String {
        let pairs = [
            ("state", &self.state),
            ("currency", &self.currency),
            ("kind", &self.kind),
            ("min_age_h", &self.min_age_h),
        ];
        pairs
            .iter()
            .filter_map(|(k, v)| v.as_deref().filter(|v| !v.is_empty()).map(|v| (k, v)))
            .map(|(k, v)| format!("{k}={}", url_encode(v)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

#[utoipa::path(
    get,
    path = "/finance",
    operation_id = "get_finance",
    summary = "Escalation queue (page)",
    tag = "finance",
    description = "Finance's escalation queue and open reconciliation cases, as a page with forms.",
    params(
        ListQuery
    ),
    responses(
        (status = 200, description = "The page.", content_type = "text/html"),
        (status = 422, description = "A filter is malformed (the page says which).", content_type = "text/html"),
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn list(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Query(q): Query<ListQuery>,
) -> Response {
    let request = finance::PageRequest {
        after: q.after.clone(),
        limit: None,
    };
    let queue =
        match finance::queue_page(&fin.store, fin.cfg.stale_after, &q.filter(), &request).await {
            Ok(page) => page,
            Err(finance::QueueError::Store(e)) => return db_failed(&e),
            Err(finance::QueueError::Invalid(e)) => {
                let status = StatusCode::UNPROCESSABLE_ENTITY;
                return problem(status, "Escalation queue", &person, &e.to_string());
            }
        };
    let cases_request = finance::PageRequest {
        after: q.cases_after.clone(),
        limit: None,
    };
    let cases = match finance::cases_page(&fin.store, &cases_request, "cases_after").await {
        Ok(cases) => cases,
        Err(finance::QueueError::Store(e)) => return db_failed(&e),
        Err(finance::QueueError::Invalid(e)) => {
            let status = StatusCode::UNPROCESSABLE_ENTITY;
            return problem(status, "Escalation queue", &person, &e.to_string());
        }
    };
    let filters = q.query_string();
    let sep = if filters.is_empty() { "" } else { "&" };
    let token = person.form_token();
    let body = html! {
        (super::gateway::banner(&fin.store).await)
        @if let Some(id) = &q.resolved_case {
            p.note.ok #flash { "Closed reconciliation case " (id) "." }
        }
        @if let Some(n) = &q.checked {
            p.note.ok #flash {
                "Check again now: " (n) " attempt(s) in review scheduled for a lookup now."
            }
        }
        @if let Some(id) = &q.resolved {
            p.note.ok #flash { "Resolved attempt " code { (id) } "." }
        }
        p {
            "Attempts in " b { "EN_REVISION" } ", and " b { "DESCONOCIDO" }
            " ones older than " (fin.cfg.stale_after.as_secs() / 60) " min, oldest first."
        }
        form method="get" action="/finance" {
            (select("state", q.state.as_deref(), &[
                ("", "any state"),
                ("EN_REVISION", "EN_REVISION"),
                ("DESCONOCIDO", "DESCONOCIDO"),
            ]))
            " "
            (select("kind", q.kind.as_deref(), &[
                ("", "charges and refunds"),
                ("charge", "charges"),
                ("refund", "refunds"),
            ]))
            " "
            label.inline {
                "Currency "
                input.short type="text" name="currency" size="4" value=(q.currency.as_deref().unwrap_or(""));
            }
            label.inline {
                "At least "
                input.short type="text" name="min_age_h" value=(q.min_age_h.as_deref().unwrap_or(""));
                " h old"
            }
            button type="submit" { "Filter" }
        }
        p {
            a #csv href={ "/finance/escalations.csv?" (filters) } { "Export CSV" }
            " · " span #total { (queue.total) } " item(s) in all"
            @if q.after.is_some() { ", this page " (queue.items.len()) }
        }
        @if queue.items.is_empty() {
            p #empty { "Nothing needs finance right now." }
        } @else {
            (table(&queue.items))
        }
        @if let Some(next) = &queue.next {
            p { a #next href={ "/finance?" (filters) (sep) "after=" (url_encode(next)) } { "Next page" } }
        }
        @if queue.total > 0 {
            (bulk_form(&token, &q))
        }
        (super::cases::table(&token, &cases, &filters))
    };
    page("Escalation queue", &person, body).into_response()
}

/// Bulk "check again now" for the filters shown: the filters ride along
/// as hidden fields, with the form token.
fn bulk_form(token: &str, q: &ListQuery) -> Markup {
    let hidden = [
        ("state", &q.state),
        ("currency", &q.currency),
        ("kind", &q.kind),
        ("min_age_h", &q.min_age_h),
    ];
    html! {
        form.inline #check_now_all method="post" action="/finance/check-now" {
            input type="hidden" name="form_token" value=(token);
            @for (name, value) in hidden {
                @if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                    input type="hidden" name=(name) value=(v);
                }
            }
            b { "Check again now" }
            ": every attempt in EN_REVISION matching these filters (all pages) is looked up at \
             the gateway now instead of at its next automatic check. DESCONOCIDO attempts keep \
             their own, faster schedule."
            label { "Note " textarea name="note" rows="2" required {} }
            button type="submit" { "Check all again now" }
        }
    }
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(in crate::web) struct CheckNowForm {
    form_token: String,
    #[serde(default)]
    note: String,
    state: Option<String>,
    currency: Option<String>,
    kind: Option<String>,
    min_age_h: Option<String>,
}

/// The bulk "check again now" form: same token and same-origin checks as
/// a resolution, the signed-in person as actor.
#[utoipa::path(
    post,
    path = "/finance/check-now",
    operation_id = "post_finance_check_now",
    summary = "Check again now, in bulk (form)",
    tag = "finance",
    description = "The queue page's bulk form: the next gateway lookup of every attempt in review that the filters select is pulled to now.",
    request_body(content = CheckNowForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "Scheduled: back to the page."),
        crate::web::openapi::FormRefusals
    )
)]
pub(in crate::web) async fn check_now(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Form(form): Form<CheckNowForm>,
) -> Answer {
    form_token_ok(&person, &form.form_token, fin.cfg.form_token_ttl)?;
    let q = ListQuery {
        state: form.state,
        currency: form.currency,
        kind: form.kind,
        min_age_h: form.min_age_h,
        ..ListQuery::default()
    };
    let scheduled = finance::check_now_all(
        &fin.store,
        fin.cfg.stale_after,
        &q.filter(),
        &person.name,
        &form.note,
    )
    .await;
    Ok(match scheduled {
        Ok(done) => {
            let filters = q.query_string();
            let sep = if filters.is_empty() { "" } else { "&" };
            Redirect::to(&format!(
                "/finance?{filters}{sep}checked={}",
                done.scheduled
            ))
            .into_response()
        }
        Err(finance::QueueError::Store(e)) => db_failed(&e),
        Err(finance::QueueError::Invalid(e)) => {
            let body = html! {
                p.note.err #problem { (e) ". Nothing was changed." }
                p { a href={ "/finance?" (q.query_string()) } { "Back to the queue" } }
            };
            let status = StatusCode::UNPROCESSABLE_ENTITY;
            (status, page("Escalation queue", &person, body)).into_response()
        }
    })
}

/// "next automatic check at …" for an item of the queue.
fn next_check(e: &Escalated) -> String {
    match e.next_check_at {
        Some(at) => format!("{} UTC", at.format("%Y-%m-%d %H:%M")),
        None => "none (never sent: finance decides)".into(),
    }
}

fn table(items: &[Escalated]) -> Markup {
    html! {
        table #queue {
            thead { tr {
                th { "Order" } th { "Kind" } th { "State" } th.num { "Amount" } th { "Age" }
                th.num { "Checks" } th { "Next automatic check at" } th { "Last gateway evidence" } th {}
            } }
            tbody {
                @for e in items {
                    @let a = &e.attempt;
                    tr data-attempt=(a.id) {
                        td { (a.order_id) }
                        td { (if a.is_refund() { "refund" } else { "charge" }) }
                        td { (a.state) }
                        td.num { (decimal(a.amount_minor, &a.currency)) " " (a.currency) }
                        td { (age(e.age_secs)) }
                        td.num { (a.check_count) }
                        td.next-check { (next_check(e)) }
                        td { (evidence(a)) }
                        td { a.open href={ "/finance/attempts/" (a.id) } { "Open" } }
                    }
                }
            }
        }
    }
}

/// The last gateway evidence in a line: "HTTP 503, timeout, lookup: not_found".
fn evidence(a: &crate::store::Attempt) -> String {
    let (status, kind, lookup) = finance::last_evidence(a);
    [
        status.map(|s| format!("HTTP {s}")),
        kind,
        lookup.map(|l| format!("lookup: {l}")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ")
}

fn age(secs: i64) -> String {
    match secs {
        s if s < 3_600 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3_600),
        s => format!("{} d", s / 86_400),
    }
}

#[utoipa::path(
    get,
    path = "/finance/summary",
    operation_id = "get_finance_summary",
    summary = "Daily summary (page)",
    tag = "finance",
    description = "The daily summary, as a page.",
    responses(
        (status = 200, description = "The page.", content_type = "text/html"),
        crate::web::openapi::Unavailable
    )
)]
pub(in crate::web) async fn summary(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
) -> Response {
    match finance::summarize(&fin.store, fin.cfg.stale_after, chrono::Utc::now()).await {
        Ok(s) => {
            let body = html! {
                (super::gateway::pause_banner(&fin.store).await)
                p { a href="/finance/api/summary" { "JSON" } }
                pre #summary { (s.to_text()) }
            };
            page("Daily summary", &person, body).into_response()
        }
        Err(e) => db_failed(&e),
    }
}
