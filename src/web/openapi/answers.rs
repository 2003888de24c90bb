//! The answers and parameters many routes share, which a route's
//! `responses(...)` or `params(...)` names as one type
//! ([`utoipa::IntoResponses`], [`utoipa::IntoParams`], several composed by
//! `answers!`): the 413 and 415 of a JSON body, the database's 503, an
//! attempt read, the refusals of a page's form, the path's ids.

use std::collections::BTreeMap;

use utoipa::openapi::RefOr;
use utoipa::{IntoParams, IntoResponses};

use super::ErrorBody;

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
    /// body's ([`crate::web::json_body`] and the `json_only` layer).
    PlainJsonBodyRefusals = NotJson, JsonBodyRefusals
);

answers!(
    /// The 400, 413, 415 and 422 of a route that takes an
    /// `Idempotency-Key` header and a JSON body (`POST /charges`, `POST
    /// /refunds`): what [`crate::web::charges::keyed_json`] refuses.
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
/// sign-in's, same-origin and form token's, are [`super::guards::Guards`]').
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
