//! The OpenAPI 3.1 document of the web process, served at
//! `GET /openapi.json` and printed by `cobro openapi`.
//!
//! Each route's operation is the `#[utoipa::path]` on its own handler (the
//! method, the path, the statuses the handler returns); a guarded route's
//! credential and scope (its `security`, the sentence of its description
//! that says what it needs, its 401 and 403) are written by [`Guards`] from
//! [`access::GUARDED`], the table the routers build their guards from.
//! This file gathers them into one document and holds the schemas
//! of the JSON bodies that the handlers read field by field from a
//! `serde_json::Value` (they check each field themselves so a refusal
//! names it), so there is no struct of theirs to derive a schema from.
//! Every property of those request bodies has an example: `tests/openapi.rs`
//! posts them to the running handlers, which must take the schema's names
//! and refuse a body without a required one. It also holds the answers many
//! routes share, which a route's `responses(...)` names as one type
//! ([`utoipa::IntoResponses`], several composed by `answers!`): the 413
//! and 415 of a JSON body, the database's 503, the refusals of a page's
//! form.
//!
//! Invariant: every route of [`super::WebConfig::router`] is in the
//! document and the document names no other (`tests/openapi.rs` reads the
//! router's source and fails on a difference either way). The document
//! holds no data: it is the same for every deployment of one version.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::collections::BTreeMap;

use utoipa::openapi::RefOr;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{IntoParams, IntoResponses, Modify, OpenApi, ToSchema};

use super::access::{self, Credential, Rule};

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
    ([(header::CONTENT_TYPE, "application/json")], document()).into_response()
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

/// Every refusal: what is wrong, and the field or header it is about.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// What is wrong, in words.
    error: String,
    /// The field or header the refusal is about, when one is.
    field: Option<String>,
    /// On a 409 from the database's charge rule: which part refused
    /// (`approved`, `live_attempt`, `open_case`, `cancelled`).
    reason: Option<String>,
}

/// The body of `POST /charges` (with an `Idempotency-Key` header, a UUID).
/// Any other field is refused (422 naming it).
#[derive(Serialize, ToSchema)]
pub(crate) struct ChargeBody {
    /// Your order's id.
    #[schema(example = "order-1042")]
    order_id: String,
    /// The amount in minor units (1999 = 19.99 USD), a whole number from 1
    /// to the deployment's maximum.
    #[schema(example = 1999)]
    amount_minor: i64,
    /// An ISO 4217 code, e.g. "USD".
    #[schema(example = "USD")]
    currency: String,
    /// The gateway's payment-method token.
    #[schema(example = "pm_card_visa")]
    payment_method: Option<String>,
    /// The gateway's customer id the payment method is saved to.
    #[schema(example = "cus_PbWrDbHw2gZJ6x")]
    customer: Option<String>,
}

/// The answer to `POST /charges`: only what never changes for the key, so
/// a replay gets the same body (with `Idempotent-Replayed: true`).
#[derive(Serialize, ToSchema)]
pub(crate) struct ChargeCreated {
    attempt_id: uuid::Uuid,
    idempotency_key: String,
    order_id: String,
    amount_minor: i64,
    currency: String,
    payment_method: Option<String>,
    customer: Option<String>,
}

/// The body of `POST /refunds` (with an `Idempotency-Key` header, a UUID).
#[derive(Serialize, ToSchema)]
pub(crate) struct RefundBody {
    /// The UUID of the APROBADO (approved) charge attempt to refund.
    #[schema(example = "5b1f0f6e-2c1a-4d8e-9a57-0c3e7d2b4f10")]
    attempt_id: uuid::Uuid,
    /// The amount to refund in minor units, at most what was captured.
    #[schema(example = 500)]
    amount_minor: i64,
}

/// The answer to `POST /refunds`.
#[derive(Serialize, ToSchema)]
pub(crate) struct RefundCreated {
    refund_id: uuid::Uuid,
    idempotency_key: String,
    attempt_id: uuid::Uuid,
    amount_minor: i64,
}

/// The body of `POST /orders/{order_id}/cancel`.
#[derive(Serialize, ToSchema)]
pub(crate) struct CancelBody {
    /// paid_by_other_means, customer_request, fraud_suspected,
    /// duplicate_order or other.
    #[schema(example = "customer_request")]
    reason: String,
}

/// The body of `POST /orders/{order_id}/payment-method`.
#[derive(Serialize, ToSchema)]
pub(crate) struct PaymentMethodBody {
    /// The gateway's new payment-method token for the order's next retry.
    #[schema(example = "pm_card_mastercard")]
    payment_method: String,
}

/// The body of `POST /control/pause`.
#[derive(Serialize, ToSchema)]
pub(crate) struct PauseBody {
    /// Why sending is paused, shown to everyone who looks.
    #[schema(example = "the gateway answers 5xx; we are looking into it")]
    reason: String,
}

/// The incident switch: whether sending is paused, and who set it, when
/// and why (`switch`, null when never set).
#[derive(Serialize, ToSchema)]
pub(crate) struct PauseState {
    paused: bool,
    #[schema(value_type = Option<Object>)]
    switch: Option<serde_json::Value>,
}

/// The answer of `GET /health` and `GET /ready`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Health {
    /// Whether the database answers (and, for `/ready`, has every
    /// migration of this binary).
    ok: bool,
    /// `/health`: the backend (`postgres`, `sqlite`), or `unreachable`.
    database: Option<String>,
    /// Why not, e.g. "run `cobro migrate` with the same DATABASE_URL".
    reason: Option<String>,
}

/// The body of `POST /finance/api/attempts/{id}/resolve`, by its `action`:
/// `approve` with `charge_id`, `decline` with `code`, `check_now` with
/// neither (any other field is refused, 422 naming it); each at the
/// attempt's `version` you saw (409 if it moved since), with a note (1-2000
/// characters).
#[derive(Serialize, ToSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
#[expect(
    dead_code,
    reason = "only its schema is used: the handler reads the body field by field"
)]
pub(crate) enum ResolveBody {
    /// The gateway did charge (or refund): its id, as you found it.
    Approve {
        #[schema(example = 3)]
        version: i64,
        /// What you checked and why.
        #[schema(example = "found in the gateway's dashboard")]
        note: String,
        /// The gateway's charge id.
        #[schema(example = "ch_3PqR8sLkdIwHu7ix1a2b3c4d")]
        charge_id: String,
    },
    /// The gateway did not: a decline code for the record.
    Decline {
        #[schema(example = 3)]
        version: i64,
        /// What you checked and why.
        #[schema(example = "the gateway has no charge for this key")]
        note: String,
        /// The gateway's decline code.
        #[schema(example = "card_declined")]
        code: String,
    },
    /// Look it up again now (no state is decided).
    CheckNow {
        #[schema(example = 3)]
        version: i64,
        /// What you checked and why.
        #[schema(example = "the gateway's incident is over")]
        note: String,
    },
}

/// The body of `POST /finance/api/check-now`: the queue's filters and a
/// note.
#[derive(Serialize, ToSchema)]
pub(crate) struct CheckNowBody {
    /// What you checked and why.
    #[schema(example = "the gateway's incident is over")]
    note: String,
    /// EN_REVISION (in review) or DESCONOCIDO (in doubt: those are
    /// counted, not touched).
    #[schema(example = "EN_REVISION")]
    state: Option<String>,
    /// An ISO 4217 code, e.g. "USD".
    #[schema(example = "USD")]
    currency: Option<String>,
    /// charge or refund.
    #[schema(example = "charge")]
    kind: Option<String>,
    /// Only attempts at least this old, in seconds.
    #[schema(example = 3600)]
    min_age_secs: Option<i64>,
}

/// Answers made of others: `answers!(Name = A, B)` is an
/// [`IntoResponses`] with every status of each part, for the answers that
/// several routes give together because they share the step that gives
/// them (a body read by one function, an attempt read from the database).
macro_rules! answers {
    ($(#[$doc:meta])* $name:ident = $($part:path),+ $(,)?) => {
        $(#[$doc])*
        pub(crate) struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
                let mut all = BTreeMap::new();
                $(all.extend(<$part as IntoResponses>::responses());)+
                all
            }
        }
    };
}

/// The 503 of every route that reads or writes the database.
#[derive(IntoResponses)]
#[response(
    status = 503,
    description = "The database is not available (or its schema is missing or behind: run `cobro migrate`)."
)]
#[expect(dead_code, reason = "only its description and schema are used")]
pub(crate) struct Unavailable(ErrorBody);

/// The 413 and 415 of every route that takes a JSON body.
#[derive(IntoResponses)]
#[expect(dead_code, reason = "only its descriptions and schemas are used")]
pub(crate) enum JsonBodyRefusals {
    #[response(
        status = 413,
        description = "The body is larger than the API's limit (16 KiB)."
    )]
    TooLarge(ErrorBody),
    #[response(status = 415, description = "The body is not `application/json`.")]
    NotJson(ErrorBody),
}

/// The 400 of a body that is not JSON.
#[derive(IntoResponses)]
#[response(status = 400, description = "The body is not JSON.")]
#[expect(dead_code, reason = "only its description and schema are used")]
pub(crate) struct NotJson(ErrorBody);

answers!(
    /// The 400, 413 and 415 of a route whose only header to check is the
    /// body's ([`super::json_body`] and the `json_only` layer).
    PlainJsonBodyRefusals = NotJson, JsonBodyRefusals
);

answers!(
    /// The 400, 413, 415 and 422 of a route that takes an
    /// `Idempotency-Key` header and a JSON body (`POST /charges`, `POST
    /// /refunds`): what [`super::charges::keyed_json`] refuses.
    KeyedBodyRefusals = KeyedRefusals, JsonBodyRefusals
);

/// The 400 and 422 of the `Idempotency-Key` header and the body's fields.
#[derive(IntoResponses)]
#[expect(dead_code, reason = "only its descriptions and schemas are used")]
pub(crate) enum KeyedRefusals {
    #[response(
        status = 400,
        description = "The `Idempotency-Key` header is missing or not a UUID, or the body is not JSON."
    )]
    BadKeyOrJson(ErrorBody),
    #[response(
        status = 422,
        description = "A field is missing, of the wrong type, unknown, or out of range (`field` names it)."
    )]
    BadField(ErrorBody),
}

/// The `Idempotency-Key` header of a keyed request.
#[derive(IntoParams)]
#[into_params(names("Idempotency-Key"), parameter_in = Header)]
#[expect(dead_code, reason = "only its description and schema are used")]
pub(crate) struct IdempotencyKey(
    /// A UUID you choose per charge; the same key and body replay the first answer.
    String,
);

/// The `{id}` of a route that names an attempt.
#[derive(IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
#[expect(dead_code, reason = "only its description and schema are used")]
pub(crate) struct AttemptId(
    /// The attempt's UUID.
    String,
);

/// The `{id}` of a route that names a reconciliation case.
#[derive(IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
#[expect(dead_code, reason = "only its description and schema are used")]
pub(crate) struct CaseId(
    /// The reconciliation case's number.
    i64,
);

/// The `{order_id}` of a route that names an order.
#[derive(IntoParams)]
#[into_params(names("order_id"), parameter_in = Path)]
#[expect(dead_code, reason = "only its description and schema are used")]
pub(crate) struct OrderId(
    /// Your order's id.
    String,
);

/// The operator's search (`GET /attempts` and its page): every parameter
/// is optional; a malformed one is refused naming it.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(dead_code, reason = "only their descriptions and schemas are used")]
pub(crate) struct AttemptSearch {
    /// Only this order's attempts.
    order_id: Option<String>,
    /// Only the attempt with this idempotency key.
    key: Option<String>,
    /// Only attempts in this state (PENDIENTE, EN_PROCESO, DESCONOCIDO, APROBADO, RECHAZADO, EN_REVISION).
    state: Option<String>,
    /// initial, business_retry, refund or charge (initial and business_retry together).
    kind: Option<String>,
    /// Created at or after (RFC 3339 or a date).
    from: Option<String>,
    /// Created before (RFC 3339 or a date).
    to: Option<String>,
    /// The previous page's `next_cursor`.
    cursor: Option<String>,
    /// Attempts per page (bounded).
    limit: Option<String>,
}

answers!(
    /// The refusals of a finance action on an attempt with a JSON body
    /// (`POST /finance/api/attempts/{id}/…`): a malformed id or body, no
    /// such attempt, the body's size and type, the database.
    AttemptActionRefusals = BadIdOrJson, NoSuchAttempt, JsonBodyRefusals, Unavailable
);

/// The 400 of a route that names an attempt and takes a JSON body.
#[derive(IntoResponses)]
#[response(
    status = 400,
    description = "`id` is not a UUID, or the body is not JSON."
)]
#[expect(dead_code, reason = "only its description and schema are used")]
pub(crate) struct BadIdOrJson(ErrorBody);

/// The 404 of a route that names an attempt.
#[derive(IntoResponses)]
#[response(status = 404, description = "No such attempt.")]
#[expect(dead_code, reason = "only its description and schema are used")]
pub(crate) struct NoSuchAttempt(ErrorBody);

answers!(
    /// An attempt read as JSON (`GET /charges/{attempt_id}` and its
    /// aliases, one handler): the attempt, a malformed id, no such attempt,
    /// or the database unavailable.
    AttemptRead = AttemptFound, Unavailable
);

/// An attempt read as JSON, or the id's refusals.
#[derive(IntoResponses)]
#[expect(dead_code, reason = "only its descriptions and schemas are used")]
pub(crate) enum AttemptFound {
    #[response(
        status = 200,
        description = "The attempt, its history and its lookups."
    )]
    Found(Box<crate::finance::Detail>),
    #[response(status = 400, description = "The id in the path is not a UUID.")]
    BadId(ErrorBody),
    #[response(status = 404, description = "No such attempt.")]
    NotFound(ErrorBody),
}

answers!(
    /// An attempt's page (operator's or finance's): the page, a malformed
    /// id, no such attempt as a page, or the database unavailable.
    AttemptPage = AttemptPageFound, Unavailable
);

/// An attempt's page, or the id's refusals.
#[derive(IntoResponses)]
#[expect(dead_code, reason = "only its descriptions and schemas are used")]
pub(crate) enum AttemptPageFound {
    #[response(status = 200, description = "The page.", content_type = "text/html")]
    Page,
    #[response(status = 400, description = "`id` is not a UUID.")]
    BadId(ErrorBody),
    #[response(
        status = 404,
        description = "No such attempt.",
        content_type = "text/html"
    )]
    NotFound,
}

answers!(
    /// The refusals of a page's form by what it asks for (its answers as a
    /// page) and the database's 503.
    FormRefusals = FormRefusal, Unavailable
);

/// A page's form refused by the action it asks for (its 401 and 403, the
/// sign-in's, same-origin and form token's, are [`Guards`]').
#[derive(IntoResponses)]
#[expect(dead_code, reason = "only its descriptions and schemas are used")]
pub(crate) enum FormRefusal {
    #[response(
        status = 404,
        description = "No such attempt or case.",
        content_type = "text/html"
    )]
    NotFound,
    #[response(
        status = 409,
        description = "Refused: it moved since the page was drawn, or is already settled.",
        content_type = "text/html"
    )]
    Conflict,
    #[response(
        status = 422,
        description = "A field is missing or invalid (the page says which).",
        content_type = "text/html"
    )]
    Invalid,
}

/// The 401 of every route that takes an API key or the browser's sign-in.
const UNAUTHORIZED: &str =
    "No credential, a wrong one, or the wrong scheme (`WWW-Authenticate` says which).";

/// The 401 of every guarded route (the 403 is built from it,
/// [`Guards`]).
#[derive(IntoResponses)]
#[response(status = 401, description = UNAUTHORIZED)]
#[expect(dead_code, reason = "only its description and schema are used")]
struct Unauthorized(ErrorBody);

/// Each guarded operation's credential and scope, written from
/// [`access::GUARDED`] (the table the routers build their guards from):
/// its `security`, the sentence of its description that says what it
/// needs, its 401, and its 403 naming the scope. An operation of a guarded
/// path that states any of these itself is a mistake: the document is not
/// built.
struct Guards;

impl Modify for Guards {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        for rule in access::GUARDED {
            let Some(item) = doc.paths.paths.get_mut(rule.path) else {
                panic!(
                    "{} is in web::access::GUARDED but not in the document",
                    rule.path
                );
            };
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.options,
                &mut item.head,
                &mut item.patch,
                &mut item.trace,
            ];
            for op in operations.into_iter().flatten() {
                guard(op, rule);
            }
        }
    }
}

fn guard(op: &mut Operation, rule: &Rule) {
    let scope = rule.scope.as_str();
    let name = op.operation_id.clone().unwrap_or_else(|| rule.path.into());
    assert!(
        op.security.is_none(),
        "{name}: its security is web::access::GUARDED's, not its #[utoipa::path]'s"
    );
    let (schemes, needs): (&[&str], _) = match rule.credential {
        Credential::ApiKey => (
            &["api_key"],
            format!("Needs an API key with `{scope}` (Bearer)."),
        ),
        Credential::PageOrKey => (
            &["api_key", "sign_in"],
            format!("Needs `{scope}`: the browser's sign-in (Basic) or an API key (Bearer)."),
        ),
        Credential::Form => (
            &["sign_in"],
            format!(
                "Needs `{scope}` by the browser's sign-in (Basic), the page's form token \
                 (of this sign-in, not expired) and a same-origin request."
            ),
        ),
    };
    op.security = Some(
        schemes
            .iter()
            .map(|s| SecurityRequirement::new(*s, [scope]))
            .collect(),
    );
    op.description = Some(match op.description.take() {
        Some(what) => format!("{what} {needs}"),
        None => needs,
    });
    let Some(RefOr::T(unauthorized)) = Unauthorized::responses().remove("401") else {
        unreachable!("Unauthorized is a 401");
    };
    let forbidden = match rule.credential {
        Credential::Form => utoipa::openapi::response::Response::new(format!(
            "The key lacks `{scope}`, the request is not same-origin, or the form token is \
             stale or not of this sign-in (nothing changed)."
        )),
        Credential::ApiKey | Credential::PageOrKey => {
            let mut forbidden = unauthorized.clone();
            forbidden.description = format!("The key lacks the scope `{scope}`.");
            forbidden
        }
    };
    for (status, answer) in [("401", unauthorized), ("403", forbidden)] {
        let own = op
            .responses
            .responses
            .insert(status.into(), RefOr::T(answer));
        assert!(
            own.is_none(),
            "{name}: its {status} is web::access::GUARDED's, not its #[utoipa::path]'s"
        );
    }
}
