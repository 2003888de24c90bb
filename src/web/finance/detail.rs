//! One item of the finance queue as a page (`/finance/attempts/{id}`): its
//! facts and evidence, the three resolutions as forms while it is in doubt
//! or in review, its full history and lookups; and the forms' handler.
//!
//! Invariant: a resolution posted from here carries the sign-in's form
//! token and the version shown; the name recorded is the signed-in user's.

use axum::extract::{Extension, Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use uuid::Uuid;

use super::FinanceState;
use super::api::{attempt_id, db_failed};
use super::page::{form_token_ok, page};
use crate::domain::decimal;
use crate::finance::{self, Resolution, ResolveError, ResolveRequest};
use crate::http::auth::Caller as Person;
use crate::state::State as AttemptState;
use crate::store::StoreError;
use crate::web::Answer;
use crate::web::html::{checks, history};

#[utoipa::path(
    get,
    path = "/finance/attempts/{id}",
    operation_id = "get_finance_attempts_id",
    summary = "One attempt in finance's view (page)",
    tag = "finance",
    description = "One attempt in finance's view, as a page with its resolve form.",
    params(crate::web::openapi::AttemptId),
    responses(crate::web::openapi::AttemptPage)
)]
pub(in crate::web) async fn detail(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
) -> Answer {
    let id = attempt_id(&id)?;
    Ok(render_detail(&fin, &person, id, None, StatusCode::OK).await)
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
            let body = html! { p.note.err { "No such attempt." } };
            return (StatusCode::NOT_FOUND, page("Not found", person, body)).into_response();
        }
        Err(e) => return db_failed(&e),
    };
    let a = &d.attempt;
    let (status_code, kind, lookup) = finance::last_evidence(a);
    let next = match (a.state, a.next_action_at) {
        (AttemptState::Desconocido | AttemptState::EnRevision, Some(at)) => {
            format!("{} UTC", at.format("%Y-%m-%d %H:%M:%S"))
        }
        (AttemptState::EnRevision, None) => "none (never sent: finance decides)".into(),
        _ => "-".into(),
    };
    let open = matches!(
        a.state,
        AttemptState::Desconocido | AttemptState::EnRevision
    );
    let body = html! {
        (super::gateway::pause_banner(&fin.store).await)
        @if let Some(p) = problem { p.note.err #problem { (p) } }
        table #facts { tbody {
            tr { th { "Attempt" } td {
                code { (a.id) } " (" (if a.is_refund() { "refund" } else { "charge" })
                ", version " span #version { (a.version) } ")"
            } }
            tr { th { "Order" } td { (a.order_id) } }
            tr { th { "Amount" } td { (decimal(a.amount_minor, &a.currency)) " " (a.currency) } }
            tr { th { "State" } td #state { (a.state) } }
            tr { th { "Idempotency key" } td { code { (a.idempotency_key) } } }
            tr { th { "Created" } td { (a.created_at.format("%Y-%m-%dT%H:%M:%SZ")) } }
            tr { th { "Sends / checks" } td { (a.send_count) " / " (a.check_count) } }
            tr { th { "Next automatic check at" } td #next-check { (next) } }
            tr { th { "Last evidence" } td {
                "HTTP " (status_code.map_or("-".into(), |s| s.to_string()))
                ", " (kind.as_deref().unwrap_or("-"))
                ", lookup " (lookup.as_deref().unwrap_or("-"))
            } }
            @if let Some(c) = &d.refund_of {
                tr { th { "Refund of" } td {
                    @if let Some(dup) = &a.refund_of_gateway {
                        "the duplicate gateway charge " b { (dup) }
                        " (anchored on " code { (c.id) } ", whose own gateway charge "
                        (c.gateway_charge_id.as_deref().unwrap_or("-")) " is not refunded)"
                    } @else {
                        code { (c.id) } " (gateway charge "
                        (c.gateway_charge_id.as_deref().unwrap_or("-")) ")"
                    }
                } }
            }
        } }
        @if open {
            (forms(&person.form_token(), a.id, a.version))
        } @else {
            p.note.ok { "Settled: nothing to resolve." }
        }
        (history(&d.transitions))
        (checks(&d.checks))
    };
    let title = format!("Order {}", a.order_id);
    (status, page(&title, person, body)).into_response()
}

/// The three resolutions, one form each: the same hidden fields (the
/// version shown, the form token, the action) and note, with what each
/// action adds.
fn forms(token: &str, id: Uuid, version: i64) -> Markup {
    let action = format!("/finance/attempts/{id}/resolve");
    let form = |name: &str, heading: &str, field: Markup, button: &str| {
        html! {
            form.inline #(name) method="post" action=(action) {
                input type="hidden" name="version" value=(version);
                input type="hidden" name="form_token" value=(token);
                input type="hidden" name="action" value=(name);
                b { (heading) }
                (field)
                label { "Note " textarea name="note" rows="2" required {} }
                button type="submit" { (button) }
            }
        }
    };
    let charge_id = html! {
        label { "Gateway charge id " input type="text" name="charge_id" required; }
    };
    let code = html! {
        label { "Decline code " input type="text" name="code" value="finance_declined" required; }
    };
    html! {
        h2 { "Resolve" }
        (form("approve", "The gateway charged", charge_id, "Mark APROBADO"))
        (form("decline", "The gateway did not charge", code, "Mark RECHAZADO"))
        (form("check_now", "Not sure yet", html! {}, "Check again now"))
    }
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(in crate::web) struct ResolveForm {
    action: String,
    version: i64,
    form_token: String,
    #[serde(default)]
    note: String,
    charge_id: Option<String>,
    code: Option<String>,
}

#[utoipa::path(
    post,
    path = "/finance/attempts/{id}/resolve",
    operation_id = "post_finance_attempts_id_resolve",
    summary = "Resolve an attempt (form)",
    tag = "finance",
    description = "The attempt page's resolve form: approve (with the gateway's charge id), decline (with a code) or check now.",
    request_body(content = ResolveForm, content_type = "application/x-www-form-urlencoded"),
    params(crate::web::openapi::AttemptId),
    responses(
        (status = 303, description = "Resolved: back to the page."),
        (status = 400, description = "`id` is not a UUID.", body = crate::web::openapi::ErrorBody),
        crate::web::openapi::FormRefusals
    )
)]
pub(in crate::web) async fn resolve(
    State(fin): FinanceState,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
    Form(form): Form<ResolveForm>,
) -> Answer {
    let id = attempt_id(&id)?;
    form_token_ok(&person, &form.form_token, fin.cfg.form_token_ttl)?;
    let resolution = match form.action.as_str() {
        "approve" => Resolution::Approve {
            charge_id: form.charge_id.unwrap_or_default().trim().to_owned(),
        },
        "decline" => Resolution::Decline {
            code: form.code.unwrap_or_default().trim().to_owned(),
        },
        "check_now" => Resolution::CheckNow,
        _ => {
            let (problem, status) = (Some("Unknown action."), StatusCode::UNPROCESSABLE_ENTITY);
            return Err(render_detail(&fin, &person, id, problem, status)
                .await
                .into());
        }
    };
    let req = ResolveRequest {
        attempt_id: id,
        version: form.version,
        resolution,
        by: &person.name,
        note: &form.note,
    };
    Ok(match finance::resolve(&fin.store, &req).await {
        Ok(_) => Redirect::to(&format!("/finance?resolved={id}")).into_response(),
        Err(ResolveError::Store(e)) => db_failed(&e),
        Err(e) => {
            let status = match e {
                ResolveError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                ResolveError::NotFound(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::CONFLICT,
            };
            render_detail(&fin, &person, id, Some(&e.to_string()), status).await
        }
    })
}
