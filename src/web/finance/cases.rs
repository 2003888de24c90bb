//! Reconciliation cases on the finance page: a page of the open cases
//! (oldest first, their own cursor `cases_after`, a bounded page size, the
//! total) with a close form per case, and the forms' handlers.
//!
//! Invariant: a case is closed only by a form carrying the sign-in's form
//! token, once, with a note; the name recorded is the signed-in user's.

use axum::extract::{Extension, Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use maud::{Markup, html};
use serde::Deserialize;

use super::FinanceState;
use super::api::db_failed;
use super::page::{form_token_ok, problem};
use crate::finance::{self, CasesPage};
use crate::http::auth::Caller as Person;
use crate::web::Answer;
use crate::web::html::url_encode;

/// One page of the open cases; `filters`: the queue's query string, kept
/// on the next page's link.
pub(super) fn table(token: &str, cases: &CasesPage, filters: &str) -> Markup {
    let sep = if filters.is_empty() { "" } else { "&" };
    html! {
        h2 { "Reconciliation cases" }
        p {
            "What the daily comparison with the gateway found: "
            span #cases-total { (cases.total) } " open"
            @if cases.total > cases.items.len() as i64 { ", " (cases.items.len()) " on this page" }
            "."
        }
        @if cases.items.is_empty() {
            p #no-cases { "No open cases." }
        } @else {
            table #cases {
                thead { tr {
                    th { "#" } th { "Kind" } th { "Order" } th { "Gateway" } th { "Our attempt" }
                    th { "Window" } th { "What each side says" } th { "Close" }
                } }
                tbody { @for c in &cases.items { (row(token, c)) } }
            }
        }
        @if let Some(next) = &cases.next {
            p { a #cases-next href={ "/finance?" (filters) (sep) "cases_after=" (url_encode(next)) } {
                "Next page of cases"
            } }
        }
    }
}

fn row(token: &str, c: &crate::store::ReconCase) -> Markup {
    html! {
        tr data-case=(c.id) {
            td { (c.id) }
            td { (c.kind) }
            td { (c.order_id.as_deref().unwrap_or("-")) }
            td { (c.gateway_ref.as_deref().unwrap_or("-")) }
            td {
                @if let Some(a) = c.attempt_id {
                    a href={ "/finance/attempts/" (a) } { code { (a) } }
                } @else { "-" }
            }
            td { (c.window_from.format("%Y-%m-%d %H:%M")) " – " (c.window_to.format("%Y-%m-%d %H:%M")) }
            td { code { (c.details) } }
            td {
                form method="post" action={ "/finance/cases/" (c.id) "/resolve" } {
                    input type="hidden" name="form_token" value=(token);
                    textarea name="note" rows="2" required placeholder="what you did about it" {}
                    button type="submit" { "Close case" }
                }
                (duplicate_forms(c, token))
            }
        }
    }
}

/// For a `double_charge` case: one "refund this duplicate" form per
/// gateway charge the case lists (the database refuses the order's own
/// approved charge, and a second refund of one duplicate).
fn duplicate_forms(c: &crate::store::ReconCase, token: &str) -> Markup {
    let charges: Vec<&str> = if c.kind == "double_charge" {
        c.gateway_ref
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .collect()
    } else {
        Vec::new()
    };
    html! {
        @for id in charges {
            form.refund-duplicate method="post" action={ "/finance/cases/" (c.id) "/refund-duplicate" } {
                input type="hidden" name="form_token" value=(token);
                input type="hidden" name="charge_id" value=(id);
                button type="submit" { "Refund duplicate " (id) }
            }
        }
    }
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(in crate::web) struct DuplicateForm {
    form_token: String,
    charge_id: String,
}

/// Refunds a duplicate from the page, approved by the signed-in person.
#[utoipa::path(
    post,
    path = "/finance/cases/{id}/refund-duplicate",
    operation_id = "post_finance_cases_id_refund_duplicate",
    summary = "Refund a duplicate charge (form)",
    tag = "finance",
    description = "The queue page's form refunding a gateway-side duplicate of a double-charge case.",
    request_body(content = DuplicateForm, content_type = "application/x-www-form-urlencoded"),
    params(crate::web::openapi::CaseId),
    responses(
        (status = 303, description = "Refund asked for: back to the page."),
        crate::web::openapi::FormRefusals
    )
)]
pub(in crate::web) async fn refund_duplicate(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<i64>,
    Form(form): Form<DuplicateForm>,
) -> Answer {
    form_token_ok(&person, &form.form_token, fin.cfg.form_token_ttl)?;
    let refunded = fin
        .store
        .refund_duplicate(id, &form.charge_id, &person.name)
        .await;
    Ok(match refunded {
        Ok(r) => Redirect::to(&format!(
            "/finance/attempts/{}?duplicate_refund_of_case={id}",
            r.refund_id
        ))
        .into_response(),
        Err(crate::store::RefundError::Db(e)) => db_failed(&crate::store::StoreError::Db(e)),
        Err(e) => {
            let status = match e {
                crate::store::RefundError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                crate::store::RefundError::NotFound(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::CONFLICT,
            };
            problem(status, "Nothing refunded", &person, &e.to_string())
        }
    })
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(in crate::web) struct CaseForm {
    form_token: String,
    #[serde(default)]
    note: String,
}

#[utoipa::path(
    post,
    path = "/finance/cases/{id}/resolve",
    operation_id = "post_finance_cases_id_resolve",
    summary = "Close a reconciliation case (form)",
    tag = "finance",
    description = "The queue page's form closing a reconciliation case, with a note.",
    request_body(content = CaseForm, content_type = "application/x-www-form-urlencoded"),
    params(crate::web::openapi::CaseId),
    responses(
        (status = 303, description = "Closed: back to the page."),
        crate::web::openapi::FormRefusals
    )
)]
pub(in crate::web) async fn resolve(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<i64>,
    Form(form): Form<CaseForm>,
) -> Answer {
    form_token_ok(&person, &form.form_token, fin.cfg.form_token_ttl)?;
    let closed = finance::resolve_case(&fin.store, id, &person.name, &form.note).await;
    Ok(match closed {
        Ok(_) => Redirect::to(&format!("/finance?resolved_case={id}")).into_response(),
        Err(crate::store::CaseError::Store(e)) => db_failed(&e),
        Err(e) => {
            let status = match e {
                crate::store::CaseError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                crate::store::CaseError::NotFound(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::CONFLICT,
            };
            problem(status, "Case not closed", &person, &e.to_string())
        }
    })
}
