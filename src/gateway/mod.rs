//! The gateway seen from a worker: charge and refund, each by its own key,
//! and look either up by that key, with every answer classified as definite
//! (approved, declined, not found) or unknown; and, for reconciliation, list
//! what the gateway executed in a window ([`record`]).
//!
//! Every failure is classified by what the gateway could have done with the
//! request: *not sent* (the bytes never left: connection refused, DNS, TLS
//! handshake, connect timeout), *not executed* (the gateway said so before
//! executing: 429, or 503 with `Retry-After`), *unknown* (the request may
//! have left and no definite answer came: a timeout, a reset connection, an
//! EOF, another 5xx, an answer too large to be a real one, which is never
//! read), or a definite answer.
//!
//! Invariant: only the first two may be sent again without a lookup, and
//! only with the same key; an unknown outcome is never a decline and never
//! re-sent on a guess. Every outcome carries [`Evidence`] for the
//! transition log.

pub mod advice;
mod choice;
mod http;
mod record;
pub mod settlement;
pub mod stripe;
#[cfg(test)]
mod tests;

pub use choice::{GatewayChoice, GatewayKind, GatewayLink};
pub use http::{GatewayConfigError, HttpGateway, HttpGatewayConfig, parse_base_url, shown_url};
pub use record::{GatewayRecord, ListError, Listed};
pub use settlement::{SettleError, Settlement};
pub use stripe::{StripeConfig, StripeGateway};

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::domain::{Amount, Currency, Customer, IdempotencyKey, OrderId, PaymentMethod};

/// What the gateway (or the network) said, kept with each state change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// `charge`, `lookup`, `refund` or `refund_lookup`.
    pub call: String,
    /// The HTTP status, when a response arrived at all.
    pub http_status: Option<u16>,
    /// `ok`, `declined`, `not_found`, `timeout`, `connect` (not sent),
    /// `connection_closed`, `http_5xx`, `http_4xx`, `throttled` and
    /// `unavailable` (not executed), `bad_body`, `answer_too_large` (an
    /// answer past 1 MiB or a page past 8 MiB, never read).
    pub error_kind: String,
    /// The lookup's answer: `approved`, `declined`, `not_found`, `failed`.
    pub lookup_result: Option<String>,
    pub elapsed_ms: u64,
    /// A short human-readable detail (never a secret, never card data).
    pub detail: Option<String>,
    /// The card's network as the gateway reported it, allow-listed
    /// ([`crate::domain::card_caps::card_brand`]); it decides which
    /// network's retry caps apply to the card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_brand: Option<String>,
}

/// One charge request, always with the attempt's own key.
#[derive(Debug, Clone)]
pub struct ChargeCall {
    pub key: IdempotencyKey,
    /// The attempt's id, for the gateway's metadata.
    pub attempt_id: Option<uuid::Uuid>,
    pub order_id: OrderId,
    pub amount: Amount,
    pub currency: Currency,
    pub payment_method: Option<PaymentMethod>,
    /// The gateway's customer the payment method is saved to (Stripe:
    /// sent as the PaymentIntent's `customer`).
    pub customer: Option<Customer>,
    /// The object [`Gateway::prepare`] created and the attempt recorded
    /// (Stripe: the PaymentIntent to confirm); `None` for a one-step gateway.
    pub gateway_ref: Option<String>,
    /// A business retry: the merchant charges without the customer present
    /// (Stripe: `off_session`).
    pub merchant_initiated: bool,
}

/// What a lookup knows besides the key: the attempt's recorded object, a
/// refund's charge, and when the attempt began (a listing starts there).
#[derive(Debug, Clone)]
pub struct LookupCall {
    pub key: IdempotencyKey,
    /// The attempt's [`Prepared::Created`] object, if one was recorded.
    pub gateway_ref: Option<String>,
    /// A refund's charge, as the gateway names it.
    pub charge_id: Option<String>,
    /// When the attempt was created.
    pub since: Option<DateTime<Utc>>,
    /// When the last request that may have created the gateway's object
    /// started (the attempt's last claim to `EN_PROCESO`): a lookup through
    /// an index that lags (Stripe's search) believes a "not found" only
    /// once this is old enough. Filled only when no object was recorded.
    pub last_sent: Option<DateTime<Utc>>,
    /// Finance asked to decline the attempt: a payment object that could
    /// still succeed (a Stripe PaymentIntent not confirmed, or waiting) is
    /// cancelled at the gateway first, so the answer is final. A one-step
    /// gateway's lookup is final already and ignores it.
    pub make_final: bool,
}

impl LookupCall {
    /// A lookup by key alone.
    pub fn by_key(key: IdempotencyKey) -> Self {
        Self {
            key,
            gateway_ref: None,
            charge_id: None,
            since: None,
            last_sent: None,
            make_final: false,
        }
    }
}

/// What [`Gateway::prepare`] did before a charge can be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// Nothing to record first (a one-step gateway): charge now.
    Ready,
    /// An object that cannot move money yet was created with the attempt's
    /// key (Stripe: an unconfirmed PaymentIntent): record its id on the
    /// attempt, then charge it, and only it.
    Created {
        gateway_ref: String,
        evidence: Evidence,
    },
    /// No object: record this outcome instead of charging. Never
    /// `Approved`; a create that got no answer moved no money, so it is
    /// `Deferred`, not `Unknown`.
    Failed(ChargeOutcome),
}

/// One refund request, always with the refund's own key.
#[derive(Debug, Clone)]
pub struct RefundCall {
    pub key: IdempotencyKey,
    /// The gateway's id of the approved charge being refunded.
    pub charge_id: String,
    pub order_id: OrderId,
    pub amount: Amount,
    pub currency: Currency,
}

/// Why a request certainly was not executed, so it may be sent again with
/// the same key after a wait, without a lookup and without counting a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deferral {
    /// The request's bytes never left: connection refused, DNS failure, TLS
    /// handshake failure, connect timeout.
    NotSent,
    /// The gateway answered that it did not execute it, for now: 429, or a
    /// 503 with `Retry-After`.
    NotExecuted,
    /// A two-step gateway's first step got no answer: it may have created
    /// its object, but an unconfirmed object cannot move money (Stripe: a
    /// PaymentIntent created with `confirm=false`), so nothing was charged.
    Unconfirmed,
}

impl Deferral {
    pub fn as_str(self) -> &'static str {
        match self {
            Deferral::NotSent => "not_sent",
            Deferral::NotExecuted => "not_executed",
            Deferral::Unconfirmed => "unconfirmed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChargeOutcome {
    Approved {
        charge_id: String,
        evidence: Evidence,
    },
    Declined {
        code: String,
        charge_id: Option<String>,
        evidence: Evidence,
    },
    /// The request may or may not have been executed.
    Unknown { evidence: Evidence },
    /// Certainly not executed: send again with the same key after
    /// `retry_after` (the gateway's `Retry-After`) or a backoff.
    Deferred {
        why: Deferral,
        retry_after: Option<Duration>,
        evidence: Evidence,
    },
    /// The gateway refused the request for a reason that is not about the
    /// payment and that sending again cannot cure (Stripe's
    /// `idempotency_error`: the key is in use with other parameters).
    /// Finance decides; nothing more is sent.
    Refused { evidence: Evidence },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupOutcome {
    Approved {
        charge_id: String,
        evidence: Evidence,
    },
    Declined {
        code: String,
        charge_id: Option<String>,
        evidence: Evidence,
    },
    /// The gateway answered that it has nothing (no charge, or no refund) with this key.
    NotFound { evidence: Evidence },
    /// No usable answer (timeout, 5xx, reset): still unknown.
    Failed { evidence: Evidence },
    /// The lookup certainly did not reach the gateway, or the gateway
    /// refused to answer for now (429, 503 with `Retry-After`): it does not
    /// count as a check; look again after `retry_after` or a backoff.
    Deferred {
        why: Deferral,
        retry_after: Option<Duration>,
        evidence: Evidence,
    },
}

impl ChargeOutcome {
    pub fn evidence(&self) -> &Evidence {
        match self {
            ChargeOutcome::Approved { evidence, .. }
            | ChargeOutcome::Declined { evidence, .. }
            | ChargeOutcome::Unknown { evidence }
            | ChargeOutcome::Deferred { evidence, .. }
            | ChargeOutcome::Refused { evidence } => evidence,
        }
    }
}

impl LookupOutcome {
    /// A definite answer (approved or declined) as the charge's outcome.
    pub fn definite(&self) -> Option<ChargeOutcome> {
        match self {
            LookupOutcome::Approved {
                charge_id,
                evidence,
            } => Some(ChargeOutcome::Approved {
                charge_id: charge_id.clone(),
                evidence: evidence.clone(),
            }),
            LookupOutcome::Declined {
                code,
                charge_id,
                evidence,
            } => Some(ChargeOutcome::Declined {
                code: code.clone(),
                charge_id: charge_id.clone(),
                evidence: evidence.clone(),
            }),
            _ => None,
        }
    }

    pub fn evidence(&self) -> &Evidence {
        match self {
            LookupOutcome::Approved { evidence, .. }
            | LookupOutcome::Declined { evidence, .. }
            | LookupOutcome::NotFound { evidence }
            | LookupOutcome::Failed { evidence }
            | LookupOutcome::Deferred { evidence, .. } => evidence,
        }
    }
}

/// A payment gateway adapter: charges and refunds, each with its own key,
/// their lookups by key, and the listing reconciliation compares with ours.
/// Webhook verification lives in `crate::webhook`.
pub trait Gateway: Send + Sync {
    /// A two-step gateway creates, with the attempt's key, the object a
    /// charge confirms, without moving money. The default (one step) has
    /// nothing to create.
    fn prepare<'a>(&'a self, _call: &'a ChargeCall) -> BoxFuture<'a, Prepared> {
        futures::future::ready(Prepared::Ready).boxed()
    }
    /// Whether [`Gateway::prepare`] makes a call of its own (a send is then
    /// two calls under the rate limit).
    fn two_step(&self) -> bool {
        false
    }
    fn charge<'a>(&'a self, call: &'a ChargeCall) -> BoxFuture<'a, ChargeOutcome>;
    fn lookup<'a>(&'a self, call: &'a LookupCall) -> BoxFuture<'a, LookupOutcome>;
    /// The circuit breaker's probe: any call that shows whether the gateway
    /// answers. The default looks up a key nobody uses.
    fn probe(&self) -> BoxFuture<'_, LookupOutcome> {
        async move {
            let call = LookupCall::by_key(IdempotencyKey::generate());
            self.lookup(&call).await
        }
        .boxed()
    }
    /// Refunds (part of) an approved charge with the refund's own key.
    /// `Approved.charge_id` is the gateway's refund id; `Declined.code` says
    /// why the gateway refused (e.g. `amount_exceeds_charge`).
    fn refund<'a>(&'a self, call: &'a RefundCall) -> BoxFuture<'a, ChargeOutcome>;
    /// Looks a refund up by its key (and, where the gateway needs it, its
    /// charge: `call.charge_id`).
    fn lookup_refund<'a>(&'a self, call: &'a LookupCall) -> BoxFuture<'a, LookupOutcome>;
    /// Every charge or refund the gateway executed with `from <= at < to`,
    /// approved or declined, in the gateway's order (all pages). A failed
    /// page fails the whole listing: never a partial or empty answer.
    fn list<'a>(
        &'a self,
        kind: Listed,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Vec<GatewayRecord>, ListError>>;
    /// What the gateway settled in `[from, to)`: its balance transactions
    /// of charges (gross, fee, net) and its automatic payouts with their
    /// lines ([`settlement`]). All or nothing, as [`Gateway::list`].
    fn settlement<'a>(
        &'a self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Settlement, SettleError>>;
}
