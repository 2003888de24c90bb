//! The operator's pages: `/operator/attempts` (a search form and a page
//! of attempts, newest first, with a *Next page* link) and
//! `/operator/attempts/{id}` (an attempt's facts, its full history and its
//! lookups). Read-only: the search is a GET form.
//!
//! Invariant: every value from the database or the request is
//! HTML-escaped; no card data (a payment method is the gateway's opaque
//! token) and no secret is shown; the pause banner tops every page.

use std::fmt::Write;

use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use uuid::Uuid;

use super::OperatorState;
use crate::domain::decimal;
use crate::http::auth::Caller as Person;
use crate::operator::{self, AttemptsPage, Search, SearchError};
use crate::state::State as AttemptState;
use crate::store::{Attempt, StoreError};
use crate::web::finance::{banner, pause_banner};
use crate::web::html::{checks, esc, history, select, shell, url_encode};

fn page(title: &str, person: &Person, body: &str) -> Html<String> {
    shell("cobro operator", title, person, body)
}

fn time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(super) async fn list(
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
                Err(SearchError::Store(e)) => return super::unavailable(&e),
            };
            (s, found)
        }
    };
    let mut body = banner(&op.store).await;
    body.push_str(&form(&search));
    let status = match &found {
        Ok(found) => {
            body.push_str(&table(found, &search));
            StatusCode::OK
        }
        Err(problem) => {
            let _ = write!(
                body,
                "<p class=\"note err\" id=\"problem\">{}</p>",
                esc(problem)
            );
            StatusCode::BAD_REQUEST
        }
    };
    (status, page("All attempts", &person, &body)).into_response()
}

fn form(s: &Search) -> String {
    let text = |name: &str, label: &str, v: &Option<String>, hint: &str| {
        format!(
            "<label style=\"display:inline-block;margin-right:1rem\">{label} \
             <input type=\"text\" name=\"{name}\" id=\"search-{name}\" placeholder=\"{hint}\" \
             style=\"width:14rem\" value=\"{}\"></label>",
            esc(v.as_deref().unwrap_or(""))
        )
    };
    let mut states = vec![("", "any state")];
    states.extend(AttemptState::ALL.iter().map(|s| (s.as_str(), s.as_str())));
    format!(
        "<form method=\"get\" action=\"/operator/attempts\" id=\"search\">{}{}<br>{} {} {}{}\
         <button type=\"submit\">Search</button> <a href=\"/operator/attempts\">Clear</a></form>",
        text("order_id", "Order", &s.order_id, "exact order id"),
        text("key", "Idempotency key", &s.key, "a UUID"),
        select("state", s.state.as_deref(), &states),
        select(
            "kind",
            s.kind.as_deref(),
            &[
                ("", "any kind"),
                ("charge", "charges (first and retries)"),
                ("initial", "first charges"),
                ("business_retry", "business retries"),
                ("refund", "refunds"),
            ]
        ),
        text("from", "Created from", &s.from, "2026-12-01"),
        text("to", "to", &s.to, "2026-12-01 (included)"),
    )
}

fn kind_label(a: &Attempt) -> &'static str {
    match a.kind.as_str() {
        "initial" => "first charge",
        "business_retry" => "business retry",
        "refund" => "refund",
        _ => "other",
    }
}

fn table(found: &AttemptsPage, s: &Search) -> String {
    if found.items.is_empty() {
        return "<p id=\"empty\">No attempt matches.</p>".into();
    }
    let mut out = String::from(
        "<table id=\"attempts\"><thead><tr><th>Created</th><th>Order</th><th>Kind</th><th>State</th>\
         <th class=\"num\">Amount</th><th class=\"num\">Sends / checks</th><th>Idempotency key</th><th></th></tr></thead><tbody>",
    );
    for a in &found.items {
        let _ = write!(
            out,
            "<tr data-attempt=\"{id}\"><td>{created}</td><td>{order}</td><td>{kind} #{number}</td>\
             <td class=\"state\">{state}</td><td class=\"num\">{amount} {cur}</td>\
             <td class=\"num\">{sends} / {checks}</td><td><code>{key}</code></td>\
             <td><a class=\"open\" href=\"/operator/attempts/{id}\">Open</a></td></tr>",
            id = a.id,
            created = time(a.created_at),
            order = esc(&a.order_id),
            kind = kind_label(a),
            number = a.attempt_number,
            state = a.state,
            amount = decimal(a.amount_minor, &a.currency),
            cur = esc(&a.currency),
            sends = a.send_count,
            checks = a.check_count,
            key = a.idempotency_key,
        );
    }
    out.push_str("</tbody></table>");
    if let Some(next) = &found.next_cursor {
        let mut query: Vec<String> = s
            .filters()
            .into_iter()
            .map(|(k, v)| format!("{k}={}", url_encode(v)))
            .collect();
        if let Some(limit) = s.limit.as_deref().filter(|l| !l.trim().is_empty()) {
            query.push(format!("limit={}", url_encode(limit.trim())));
        }
        query.push(format!("cursor={}", url_encode(next)));
        let _ = write!(
            out,
            "<p><a id=\"next\" href=\"/operator/attempts?{}\">Next page</a></p>",
            esc(&query.join("&"))
        );
    }
    out
}

pub(super) async fn detail(
    State(op): OperatorState,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = Uuid::try_parse(&id) else {
        let body = "<p class=\"note err\" id=\"problem\">invalid id: must be a UUID</p>";
        return (
            StatusCode::BAD_REQUEST,
            page("Not an attempt", &person, body),
        )
            .into_response();
    };
    let d = match crate::finance::detail(&op.store, id).await {
        Ok(d) => d,
        Err(StoreError::NotFound(_)) => {
            let body = "<p class=\"note err\" id=\"problem\">No such attempt.</p>";
            return (StatusCode::NOT_FOUND, page("Not found", &person, body)).into_response();
        }
        Err(e) => return super::unavailable(&e),
    };
    let a = &d.attempt;
    let mut body = pause_banner(&op.store).await;
    let opt = |v: &Option<String>| esc(v.as_deref().unwrap_or("-"));
    let at = |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or("-".into(), time);
    let _ = write!(
        body,
        "<table id=\"facts\"><tbody>\
         <tr><th>Attempt</th><td><code>{id}</code> ({kind} #{number}, version {version})</td></tr>\
         <tr><th>Order</th><td><a id=\"order\" href=\"/operator/attempts?order_id={order_q}\">{order}</a></td></tr>\
         <tr><th>Amount</th><td>{amount} {cur}</td></tr>\
         <tr><th>State</th><td id=\"state\">{state}</td></tr>\
         <tr><th>Idempotency key</th><td><code>{key}</code></td></tr>\
         <tr><th>Payment method (gateway token)</th><td><code>{pm}</code></td></tr>\
         <tr><th>Created / updated</th><td>{created} / {updated}</td></tr>\
         <tr><th>Sends / checks</th><td>{sends} / {checks}</td></tr>\
         <tr><th>Gateway charge</th><td>{charge}</td></tr>\
         <tr><th>Decline code</th><td>{decline}</td></tr>\
         <tr><th>Cancelled</th><td>{cancel}</td></tr>\
         <tr><th>Next action at</th><td>{next}</td></tr>\
         <tr><th>Held by</th><td>{lease} until {until}</td></tr>\
         <tr><th>Parked since</th><td>{parked}</td></tr>{refund}\
         </tbody></table>",
        id = a.id,
        kind = kind_label(a),
        number = a.attempt_number,
        version = a.version,
        order_q = url_encode(&a.order_id),
        order = esc(&a.order_id),
        amount = decimal(a.amount_minor, &a.currency),
        cur = esc(&a.currency),
        state = a.state,
        key = a.idempotency_key,
        pm = opt(&a.payment_method),
        created = time(a.created_at),
        updated = time(a.updated_at),
        sends = a.send_count,
        checks = a.check_count,
        charge = opt(&a.gateway_charge_id),
        decline = opt(&a.decline_code),
        cancel = opt(&a.cancel_reason),
        next = at(a.next_action_at),
        lease = opt(&a.lease_owner),
        until = at(a.lease_expires_at),
        parked = at(a.parked_since),
        refund = d.refund_of.as_ref().map_or(String::new(), |c| format!(
            "<tr><th>Refund of</th><td>{dup}<a href=\"/operator/attempts/{0}\"><code>{0}</code></a></td></tr>",
            c.id,
            dup = a.refund_of_gateway.as_deref().map_or(String::new(), |g| format!(
                "the duplicate gateway charge <b>{}</b>, anchored on ",
                esc(g)
            )),
        )),
    );
    if matches!(
        a.state,
        AttemptState::Desconocido | AttemptState::EnRevision
    ) {
        let _ = write!(
            body,
            "<p class=\"note\">In doubt: finance decides it in <a href=\"/finance/attempts/{}\">the escalation queue</a>.</p>",
            a.id
        );
    }
    body.push_str(&history(&d.transitions));
    body.push_str(&checks(&d.checks));
    let title = format!("Attempt for order {}", a.order_id);
    page(&title, &person, &body).into_response()
}
