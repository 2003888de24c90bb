//! The schemas of the JSON bodies the handlers read field by field from a
//! `serde_json::Value` (they check each field themselves so a refusal names
//! it), so there is no struct of theirs to derive a schema from, and of the
//! answers they build by hand. Every property of a request body has an
//! example: `tests/openapi.rs` posts them to the running handlers.

use serde::Serialize;
use utoipa::ToSchema;

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
