//! The finance page: server-rendered HTML, no scripts, no front-end build.
//! `/finance` lists the queue with filters and a CSV link; an item's page
//! shows its evidence and full history with the three resolutions as forms.
//!
//! Invariant: every value from the database or the request is HTML-escaped
//! ([`esc`]); every form carries the user's form token and the version shown,
//! so a forged post or a stale page resolves nothing.

use std::fmt::Write;

use axum::extract::{Extension, Form, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;
use uuid::Uuid;

use super::FinanceState;
use super::api::{bad_id, unavailable};
use crate::domain::decimal;
use crate::finance::{self, Filter, Resolution, ResolveError, ResolveRequest};
use crate::http::auth::Caller as Person;
use crate::store::{Escalated, StoreError};

pub(super) use crate::web::html::esc;
use crate::web::html::{checks, history, select, shell, url_encode};

pub(super) fn page(title: &str, person: &Person, body: &str) -> Html<String> {
    shell("cobro finance", title, person, body)
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    state: Option<String>,
    currency: Option<String>,
    kind: Option<String>,
    /// Minimum age in hours.
    min_age_h: Option<String>,
    resolved: Option<String>,
    resolved_case: Option<String>,
    /// The next page's cursor.
    after: Option<String>,
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

pub(super) async fn list(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Query(q): Query<ListQuery>,
) -> Response {
    let request = finance::PageRequest {
        after: q.after.clone(),
        limit: None,
    };
    let queue = match finance::queue_page(&fin.store, fin.cfg.stale_after, &q.filter(), &request)
        .await
    {
        Ok(page) => page,
        Err(finance::QueueError::Store(e)) => return unavailable(&e),
        Err(finance::QueueError::Invalid(e)) => {
            let body = format!(
                "<p class=\"note err\" id=\"problem\">{}</p><p><a href=\"/finance\">Back to the queue</a></p>",
                esc(&e.to_string())
            );
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                page("Escalation queue", &person, &body),
            )
                .into_response();
        }
    };
    let items = &queue.items;
    let cases = match finance::open_cases(&fin.store).await {
        Ok(cases) => cases,
        Err(e) => return unavailable(&e),
    };
    let mut body = super::gateway::banner(&fin.store).await;
    if let Some(id) = q.resolved_case.as_deref() {
        let _ = write!(
            body,
            "<p class=\"note ok\" id=\"flash\">Closed reconciliation case {}.</p>",
            esc(id)
        );
    }
    if let Some(n) = q.checked.as_deref() {
        let _ = write!(
            body,
            "<p class=\"note ok\" id=\"flash\">Check again now: {} attempt(s) in review scheduled for a lookup now.</p>",
            esc(n)
        );
    }
    if let Some(id) = q.resolved.as_deref() {
        let _ = write!(
            body,
            "<p class=\"note ok\" id=\"flash\">Resolved attempt <code>{}</code>.</p>",
            esc(id)
        );
    }
    let _ = write!(
        body,
        "<p>Attempts in <b>EN_REVISION</b>, and <b>DESCONOCIDO</b> ones older than {} min, oldest first.</p>\
         <form method=\"get\" action=\"/finance\">{} {} <label style=\"display:inline\">Currency \
         <input type=\"text\" name=\"currency\" size=\"4\" style=\"width:4rem\" value=\"{}\"></label> \
         <label style=\"display:inline\">At least <input type=\"text\" name=\"min_age_h\" style=\"width:4rem\" value=\"{}\"> h old</label> \
         <button type=\"submit\">Filter</button></form>\
         <p><a id=\"csv\" href=\"/finance/escalations.csv?{}\">Export CSV</a> · <span id=\"total\">{}</span> item(s) in all{}</p>",
        fin.cfg.stale_after.as_secs() / 60,
        select(
            "state",
            q.state.as_deref(),
            &[
                ("", "any state"),
                ("EN_REVISION", "EN_REVISION"),
                ("DESCONOCIDO", "DESCONOCIDO")
            ]
        ),
        select(
            "kind",
            q.kind.as_deref(),
            &[
                ("", "charges and refunds"),
                ("charge", "charges"),
                ("refund", "refunds")
            ]
        ),
        esc(q.currency.as_deref().unwrap_or("")),
        esc(q.min_age_h.as_deref().unwrap_or("")),
        q.query_string(),
        queue.total,
        if q.after.is_some() {
            format!(", this page {}", items.len())
        } else {
            String::new()
        },
    );
    if items.is_empty() {
        body.push_str("<p id=\"empty\">Nothing needs finance right now.</p>");
    } else {
        body.push_str(&table(items));
    }
    if let Some(next) = &queue.next {
        let sep = if q.query_string().is_empty() { "" } else { "&" };
        let _ = write!(
            body,
            "<p><a id=\"next\" href=\"/finance?{}{sep}after={}\">Next page</a></p>",
            q.query_string(),
            url_encode(next)
        );
    }
    if queue.total > 0 {
        body.push_str(&bulk_form(&person, &q));
    }
    body.push_str(&super::cases::table(&person, &cases));
    page("Escalation queue", &person, &body).into_response()
}

/// Bulk "check again now" for the filters shown: the filters ride along
/// as hidden fields, with the form token.
fn bulk_form(person: &Person, q: &ListQuery) -> String {
    let hidden = |name: &str, v: &Option<String>| {
        v.as_deref()
            .filter(|v| !v.is_empty())
            .map(|v| {
                format!(
                    "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
                    esc(v)
                )
            })
            .unwrap_or_default()
    };
    format!(
        "<form class=\"inline\" id=\"check_now_all\" method=\"post\" action=\"/finance/check-now\">\
         <input type=\"hidden\" name=\"form_token\" value=\"{token}\">{state}{currency}{kind}{age}\
         <b>Check again now</b>: every attempt in EN_REVISION matching these filters (all pages) \
         is looked up at the gateway now instead of at its next automatic check. \
         DESCONOCIDO attempts keep their own, faster schedule.\
         <label>Note <textarea name=\"note\" rows=\"2\" required></textarea></label>\
         <button type=\"submit\">Check all again now</button></form>",
        token = person.form_token(),
        state = hidden("state", &q.state),
        currency = hidden("currency", &q.currency),
        kind = hidden("kind", &q.kind),
        age = hidden("min_age_h", &q.min_age_h),
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct CheckNowForm {
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
pub(super) async fn check_now(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Form(form): Form<CheckNowForm>,
) -> Response {
    if !person.form_token_ok(&form.form_token) {
        let body = "<p class=\"note err\">This form did not come from the finance page. Nothing was changed.</p>";
        return (StatusCode::FORBIDDEN, page("Refused", &person, body)).into_response();
    }
    let q = ListQuery {
        state: form.state,
        currency: form.currency,
        kind: form.kind,
        min_age_h: form.min_age_h,
        ..ListQuery::default()
    };
    match finance::check_now_all(
        &fin.store,
        fin.cfg.stale_after,
        &q.filter(),
        &person.name,
        &form.note,
    )
    .await
    {
        Ok(done) => {
            let filters = q.query_string();
            let sep = if filters.is_empty() { "" } else { "&" };
            Redirect::to(&format!(
                "/finance?{filters}{sep}checked={}",
                done.scheduled
            ))
            .into_response()
        }
        Err(finance::QueueError::Store(e)) => unavailable(&e),
        Err(finance::QueueError::Invalid(e)) => {
            let body = format!(
                "<p class=\"note err\" id=\"problem\">{}. Nothing was changed.</p><p><a href=\"/finance?{}\">Back to the queue</a></p>",
                esc(&e.to_string()),
                q.query_string()
            );
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                page("Escalation queue", &person, &body),
            )
                .into_response()
        }
    }
}

/// "next automatic check at …" for an item of the queue.
fn next_check(e: &Escalated) -> String {
    match e.next_check_at {
        Some(at) => format!("{} UTC", at.format("%Y-%m-%d %H:%M")),
        None => "none (never sent: finance decides)".into(),
    }
}

fn table(items: &[Escalated]) -> String {
    let mut out = String::from(
        "<table id=\"queue\"><thead><tr><th>Order</th><th>Kind</th><th>State</th><th class=\"num\">Amount</th>\
         <th>Age</th><th class=\"num\">Checks</th><th>Next automatic check at</th><th>Last gateway evidence</th><th></th></tr></thead><tbody>",
    );
    for e in items {
        let a = &e.attempt;
        let (status, kind, lookup) = finance::last_evidence(a);
        let evidence = [
            status.map(|s| format!("HTTP {s}")),
            kind,
            lookup.map(|l| format!("lookup: {l}")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
        let _ = write!(
            out,
            "<tr data-attempt=\"{id}\"><td>{order}</td><td>{kind}</td><td>{state}</td>\
             <td class=\"num\">{amount} {cur}</td><td>{age}</td><td class=\"num\">{checks}</td>\
             <td class=\"next-check\">{next}</td><td>{evidence}</td><td><a class=\"open\" href=\"/finance/attempts/{id}\">Open</a></td></tr>",
            id = a.id,
            order = esc(&a.order_id),
            kind = if a.is_refund() { "refund" } else { "charge" },
            state = a.state,
            amount = decimal(a.amount_minor, &a.currency),
            cur = esc(&a.currency),
            age = age(e.age_secs),
            checks = a.check_count,
            next = next_check(e),
            evidence = esc(&evidence),
        );
    }
    out.push_str("</tbody></table>");
    out
}

fn age(secs: i64) -> String {
    match secs {
        s if s < 3_600 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3_600),
        s => format!("{} d", s / 86_400),
    }
}

pub(super) async fn detail(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = Uuid::try_parse(&id) else {
        return bad_id();
    };
    render_detail(&fin, &person, id, None, StatusCode::OK).await
}

async fn render_detail(
    fin: &super::Finance,
    person: &Person,
    id: Uuid,
    problem: Option<&str>,
    status: StatusCode,
) -> Response {
    let d = match finance::detail(&fin.store, id).await {
        Ok(d) => d,
        Err(StoreError::NotFound(_)) => {
            let body = "<p class=\"note err\">No such attempt.</p>";
            return (StatusCode::NOT_FOUND, page("Not found", person, body)).into_response();
        }
        Err(e) => return unavailable(&e),
    };
    let a = &d.attempt;
    let mut body = String::new();
    if let Some(p) = problem {
        let _ = write!(body, "<p class=\"note err\" id=\"problem\">{}</p>", esc(p));
    }
    let (status_code, kind, lookup) = finance::last_evidence(a);
    let _ = write!(
        body,
        "<table id=\"facts\"><tbody>\
         <tr><th>Attempt</th><td><code>{id}</code> ({what}, version <span id=\"version\">{version}</span>)</td></tr>\
         <tr><th>Order</th><td>{order}</td></tr>\
         <tr><th>Amount</th><td>{amount} {cur}</td></tr>\
         <tr><th>State</th><td id=\"state\">{state}</td></tr>\
         <tr><th>Idempotency key</th><td><code>{key}</code></td></tr>\
         <tr><th>Created</th><td>{created}</td></tr>\
         <tr><th>Sends / checks</th><td>{sends} / {checks}</td></tr>\
         <tr><th>Next automatic check at</th><td id=\"next-check\">{next}</td></tr>\
         <tr><th>Last evidence</th><td>HTTP {http}, {kind}, lookup {lookup}</td></tr>{refund}\
         </tbody></table>",
        id = a.id,
        what = if a.is_refund() { "refund" } else { "charge" },
        version = a.version,
        order = esc(&a.order_id),
        amount = decimal(a.amount_minor, &a.currency),
        cur = esc(&a.currency),
        state = a.state,
        key = a.idempotency_key,
        created = a.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
        sends = a.send_count,
        checks = a.check_count,
        next = match (a.state, a.next_action_at) {
            (crate::state::State::Desconocido | crate::state::State::EnRevision, Some(at)) => {
                format!("{} UTC", at.format("%Y-%m-%d %H:%M:%S"))
            }
            (crate::state::State::EnRevision, None) => "none (never sent: finance decides)".into(),
            _ => "-".into(),
        },
        http = status_code.map_or("-".into(), |s| s.to_string()),
        kind = esc(kind.as_deref().unwrap_or("-")),
        lookup = esc(lookup.as_deref().unwrap_or("-")),
        refund = d.refund_of.as_ref().map_or(String::new(), |c| match &a.refund_of_gateway {
            Some(dup) => format!(
                "<tr><th>Refund of</th><td>the duplicate gateway charge <b>{}</b> \
                 (anchored on <code>{}</code>, whose own gateway charge {} is not refunded)</td></tr>",
                esc(dup),
                c.id,
                esc(c.gateway_charge_id.as_deref().unwrap_or("-"))
            ),
            None => format!(
                "<tr><th>Refund of</th><td><code>{}</code> (gateway charge {})</td></tr>",
                c.id,
                esc(c.gateway_charge_id.as_deref().unwrap_or("-"))
            ),
        }),
    );
    if matches!(
        a.state,
        crate::state::State::Desconocido | crate::state::State::EnRevision
    ) {
        body.push_str(&forms(person, a.id, a.version));
    } else {
        body.push_str("<p class=\"note ok\">Settled: nothing to resolve.</p>");
    }
    body.push_str(&history(&d.transitions));
    body.push_str(&checks(&d.checks));
    let title = format!("Order {}", a.order_id);
    let body = super::gateway::pause_banner(&fin.store).await + &body;
    (status, page(&title, person, &body)).into_response()
}

fn forms(person: &Person, id: Uuid, version: i64) -> String {
    let token = person.form_token();
    let hidden = format!(
        "<input type=\"hidden\" name=\"version\" value=\"{version}\">\
         <input type=\"hidden\" name=\"form_token\" value=\"{token}\">"
    );
    let note = "<label>Note <textarea name=\"note\" rows=\"2\" required></textarea></label>";
    format!(
        "<h2>Resolve</h2>\
         <form class=\"inline\" id=\"approve\" method=\"post\" action=\"/finance/attempts/{id}/resolve\">{hidden}\
         <input type=\"hidden\" name=\"action\" value=\"approve\"><b>The gateway charged</b>\
         <label>Gateway charge id <input type=\"text\" name=\"charge_id\" required></label>{note}\
         <button type=\"submit\">Mark APROBADO</button></form>\
         <form class=\"inline\" id=\"decline\" method=\"post\" action=\"/finance/attempts/{id}/resolve\">{hidden}\
         <input type=\"hidden\" name=\"action\" value=\"decline\"><b>The gateway did not charge</b>\
         <label>Decline code <input type=\"text\" name=\"code\" value=\"finance_declined\" required></label>{note}\
         <button type=\"submit\">Mark RECHAZADO</button></form>\
         <form class=\"inline\" id=\"check_now\" method=\"post\" action=\"/finance/attempts/{id}/resolve\">{hidden}\
         <input type=\"hidden\" name=\"action\" value=\"check_now\"><b>Not sure yet</b>{note}\
         <button type=\"submit\">Check again now</button></form>"
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct ResolveForm {
    action: String,
    version: i64,
    form_token: String,
    #[serde(default)]
    note: String,
    charge_id: Option<String>,
    code: Option<String>,
}

pub(super) async fn resolve(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
    Form(form): Form<ResolveForm>,
) -> Response {
    let Ok(id) = Uuid::try_parse(&id) else {
        return bad_id();
    };
    if !person.form_token_ok(&form.form_token) {
        let body = "<p class=\"note err\">This form did not come from the finance page. Nothing was changed.</p>";
        return (StatusCode::FORBIDDEN, page("Refused", &person, body)).into_response();
    }
    let resolution = match form.action.as_str() {
        "approve" => Resolution::Approve {
            charge_id: form.charge_id.unwrap_or_default().trim().to_owned(),
        },
        "decline" => Resolution::Decline {
            code: form.code.unwrap_or_default().trim().to_owned(),
        },
        "check_now" => Resolution::CheckNow,
        _ => {
            return render_detail(
                &fin,
                &person,
                id,
                Some("Unknown action."),
                StatusCode::UNPROCESSABLE_ENTITY,
            )
            .await;
        }
    };
    let req = ResolveRequest {
        attempt_id: id,
        version: form.version,
        resolution,
        by: &person.name,
        note: &form.note,
    };
    match finance::resolve(&fin.store, &req).await {
        Ok(_) => Redirect::to(&format!("/finance?resolved={id}")).into_response(),
        Err(ResolveError::Store(e)) => unavailable(&e),
        Err(e) => {
            let status = match e {
                ResolveError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                ResolveError::NotFound(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::CONFLICT,
            };
            render_detail(&fin, &person, id, Some(&e.to_string()), status).await
        }
    }
}

pub(super) async fn summary(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
) -> Response {
    match finance::summarize(&fin.store, fin.cfg.stale_after, chrono::Utc::now()).await {
        Ok(s) => {
            let body = format!(
                "{}<p><a href=\"/finance/api/summary\">JSON</a></p><pre id=\"summary\">{}</pre>",
                super::gateway::pause_banner(&fin.store).await,
                esc(&s.to_text())
            );
            let mut resp = page("Daily summary", &person, &body).into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/html; charset=utf-8"),
            );
            resp
        }
        Err(e) => unavailable(&e),
    }
}
