//! The OpenAPI 3.1 document of the web process, served at
//! `GET /openapi.json` and printed by `cobro openapi`.
//!
//! Each route's operation is the `#[utoipa::path]` on its own handler (the
//! method, the path, the statuses the handler returns); a guarded route's
//! credential and scope (its `security`, the sentence of its description
//! that says what it needs, its 401 and 403) are written by
//! [`guards::Guards`] from [`super::access::GUARDED`], the table the
//! routers build their guards from. This file gathers them into one
//! document with the credentials' schemes; [`bodies`] holds the schemas of
//! the JSON bodies, [`answers`] the answers and parameters many routes
//! share.
//!
//! Invariant: every route of [`super::WebConfig::router`] is in the
//! document and the document names no other (`tests/openapi.rs` reads the
//! router's source and fails on a difference either way). The document
//! holds no data: it is the same for every deployment of one version.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

mod answers;
mod bodies;
mod guards;

pub(crate) use answers::*;
pub(crate) use bodies::*;
use guards::Guards;

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "cobro",
        description = "The HTTP API of `cobro serve`: enqueue charges and refunds, read attempts, \
            cancel orders, pause sending, finance's escalation queue and pages, metrics and health. \
            Every route but the webhook receiver, `/health`, `/ready` and `/openapi.json` needs an \
            API key (`COBRO_API_KEYS`) with the scope its description names.",
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0"),
    ),
    paths(
        super::webhooks::receive,
        super::health::health,
        super::health::ready,
        openapi_json,
        super::charges::create,
        super::charges::show,
        super::charges::show_attempt,
        super::refunds::create,
        super::charges::show_refund,
        super::cancel::cancel,
        super::payment_method::update,
        super::control::pause,
        super::control::show,
        super::control::resume,
        super::metrics,
        super::home::landing,
        super::html::stylesheet,
        super::operator::api::list,
        super::operator::page::list,
        super::operator::page::detail,
        super::finance::page::list,
        super::finance::detail::detail,
        super::finance::page::summary,
        super::finance::export::csv,
        super::finance::settled::csv,
        super::finance::detail::resolve,
        super::finance::cases::resolve,
        super::finance::cases::refund_duplicate,
        super::finance::page::check_now,
        super::finance::api::list,
        super::finance::api::detail,
        super::finance::api::summary,
        super::finance::api::resolve,
        super::finance::api::retry,
        super::finance::api::check_now,
        super::finance::case_api::resolve_case,
        super::finance::case_api::refund_duplicate,
    ),
    modifiers(&Credentials, &Guards),
    tags(
        (name = "charges", description = "Enqueue a charge and read its attempt."),
        (name = "refunds", description = "Ask for a refund of an approved charge."),
        (name = "orders", description = "Cancel what was not sent; a new payment method."),
        (name = "control", description = "The incident switch: pause and resume sending."),
        (name = "operator", description = "Every attempt, searched, as JSON and as pages."),
        (name = "finance", description = "Finance's escalation queue: JSON API, pages, forms and CSV exports."),
        (name = "gateway", description = "The gateway's webhooks."),
        (name = "operations", description = "Health, readiness, metrics and this document."),
        (name = "pages", description = "The landing page and the pages' stylesheet."),
    )
)]
pub struct ApiDoc;

/// The document as JSON text (pretty), with this binary's version.
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    doc.to_pretty_json()
        .expect("the OpenAPI document serialises to JSON")
}

/// `GET /openapi.json`: this document. Public: it holds no data.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "get_openapi_json",
    summary = "This OpenAPI document",
    tag = "operations",
    responses((status = 200, description = "This document (OpenAPI 3.1).", content_type = "application/json")),
    security(())
)]
pub(super) async fn openapi_json() -> Response {
    // The same text for every request of this binary: built on the first.
    static SERVED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = SERVED.get_or_init(document).clone();
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// The credentials: an API key as a Bearer token (`COBRO_API_KEYS`), or the
/// browser's sign-in (HTTP Basic with the key's name and secret), which the
/// pages and forms take.
struct Credentials;

impl Modify for Credentials {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key's secret (`Authorization: Bearer <secret>`); \
                         the key needs the scope each route names.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "sign_in",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Basic)
                    .description(Some(
                        "The browser's sign-in: an API key's name and secret by HTTP Basic. \
                         The first page sets a sign-in cookie; a form also needs its form \
                         token (bound to that cookie, expiring after COBRO_FORM_TOKEN_TTL) \
                         and a same-origin request.",
                    ))
                    .build(),
            ),
        );
    }
}
