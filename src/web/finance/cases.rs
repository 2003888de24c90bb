//! Reconciliation cases on the finance page: the table with a close form
//! per case, and the form's handler.
//!
//! Invariant: a case is closed only by a form carrying the user's form
//! token, once, with a note; the name recorded is the signed-in user's.

use std::fmt::Write;

use axum::extract::{Extension, Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::FinanceState;
use super::api::unavailable;
use super::page::{esc, page};
use crate::finance;
use crate::http::auth::Caller as Person;

pub(super) fn table(person: &Person, cases: &[crate::store::ReconCase]) -> String {
    let mut out = format!(
        "<h2>Reconciliation cases</h2><p>What the daily comparison with the gateway found: {} open.</p>",
        cases.len()
    );
    if cases.is_empty() {
        out.push_str("<p id=\"no-cases\">No open cases.</p>");
        return out;
    }
    let token = person.form_token();
    out.push_str(
        "<table id=\"cases\"><thead><tr><th>#</th><th>Kind</th><th>Order</th><th>Gateway</th>\
         <th>Our attempt</th><th>Window</th><th>What each side says</th><th>Close</th></tr></thead><tbody>",
    );
    for c in cases {
        let attempt = c.attempt_id.map_or(String::from("-"), |a| {
            format!("<a href=\"/finance/attempts/{a}\"><code>{a}</code></a>")
        });
        let _ = write!(
            out,
            "<tr data-case=\"{id}\"><td>{id}</td><td>{kind}</td><td>{order}</td><td>{gw}</td><td>{attempt}</td>\
             <td>{from} – {to}</td><td><code>{details}</code></td><td>\
             <form method=\"post\" action=\"/finance/cases/{id}/resolve\">\
             <input type=\"hidden\" name=\"form_token\" value=\"{token}\">\
             <textarea name=\"note\" rows=\"2\" required placeholder=\"what you did about it\"></textarea>\
             <button type=\"submit\">Close case</button></form>{refund}</td></tr>",
            id = c.id,
            kind = esc(&c.kind),
            order = esc(c.order_id.as_deref().unwrap_or("-")),
            gw = esc(c.gateway_ref.as_deref().unwrap_or("-")),
            from = c.window_from.format("%Y-%m-%d %H:%M"),
            to = c.window_to.format("%Y-%m-%d %H:%M"),
            details = esc(&c.details.to_string()),
            refund = duplicate_forms(c, &token),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// For a `double_charge` case: one "refund this duplicate" form per
/// gateway charge the case lists (the database refuses the order's own
/// approved charge, and a second refund of one duplicate).
fn duplicate_forms(c: &crate::store::ReconCase, token: &str) -> String {
    if c.kind != "double_charge" {
        return String::new();
    }
    let mut out = String::new();
    for id in c.gateway_ref.as_deref().unwrap_or_default().split(',') {
        let _ = write!(
            out,
            "<form method=\"post\" action=\"/finance/cases/{case}/refund-duplicate\" class=\"refund-duplicate\">\
             <input type=\"hidden\" name=\"form_token\" value=\"{token}\">\
             <input type=\"hidden\" name=\"charge_id\" value=\"{id}\">\
             <button type=\"submit\">Refund duplicate {id}</button></form>",
            case = c.id,
            id = esc(id.trim()),
        );
    }
    out
}

#[derive(Debug, Deserialize)]
pub(super) struct DuplicateForm {
    form_token: String,
    charge_id: String,
}

/// Refunds a duplicate from the page, approved by the signed-in person.
pub(super) async fn refund_duplicate(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<i64>,
    Form(form): Form<DuplicateForm>,
) -> Response {
    if !person.form_token_ok(&form.form_token) {
        let body = "<p class=\"note err\">This form did not come from the finance page. Nothing was changed.</p>";
        return (StatusCode::FORBIDDEN, page("Refused", &person, body)).into_response();
    }
    match fin
        .store
        .refund_duplicate(id, &form.charge_id, &person.name)
        .await
    {
        Ok(r) => Redirect::to(&format!(
            "/finance/attempts/{}?duplicate_refund_of_case={id}",
            r.refund_id
        ))
        .into_response(),
        Err(crate::store::RefundError::Db(e)) => unavailable(&crate::store::StoreError::Db(e)),
        Err(e) => {
            let status = match e {
                crate::store::RefundError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                crate::store::RefundError::NotFound(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::CONFLICT,
            };
            let body = format!(
                "<p class=\"note err\" id=\"problem\">{}</p><p><a href=\"/finance\">Back to the queue</a></p>",
                esc(&e.to_string())
            );
            (status, page("Nothing refunded", &person, &body)).into_response()
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct CaseForm {
    form_token: String,
    #[serde(default)]
    note: String,
}

pub(super) async fn resolve(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<i64>,
    Form(form): Form<CaseForm>,
) -> Response {
    if !person.form_token_ok(&form.form_token) {
        let body = "<p class=\"note err\">This form did not come from the finance page. Nothing was changed.</p>";
        return (StatusCode::FORBIDDEN, page("Refused", &person, body)).into_response();
    }
    match finance::resolve_case(&fin.store, id, &person.name, &form.note).await {
        Ok(_) => Redirect::to(&format!("/finance?resolved_case={id}")).into_response(),
        Err(crate::store::CaseError::Store(e)) => unavailable(&e),
        Err(e) => {
            let status = match e {
                crate::store::CaseError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                crate::store::CaseError::NotFound(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::CONFLICT,
            };
            let body = format!(
                "<p class=\"note err\" id=\"problem\">{}</p><p><a href=\"/finance\">Back to the queue</a></p>",
                esc(&e.to_string())
            );
            (status, page("Case not closed", &person, &body)).into_response()
        }
    }
}
