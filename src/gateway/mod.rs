//! The gateway seen from a worker: charge and refund, each by its own key,
//! and look either up by that key, with every answer classified as definite
//! (approved, declined, not found) or unknown; and, for reconciliation, list
//! what the gateway executed in a window ([`record`]).
//!
//! Invariant: a timeout, a reset connection, an EOF or a 5xx after the request
//! may have left is *unknown*, never a decline. Only an explicit answer from
//! the gateway is definite. Every outcome carries [`Evidence`] for the
//! transition log.

mod http;
#[cfg(test)]
mod list_tests;
mod record;
#[cfg(test)]
mod tests;

pub use http::{GatewayConfigError, HttpGateway, HttpGatewayConfig, parse_base_url, shown_url};
pub use record::{GatewayRecord, ListError, Listed};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::domain::{Amount, Currency, IdempotencyKey, OrderId, PaymentMethod};

/// What the gateway (or the network) said, kept with each state change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// `charge`, `lookup`, `refund` or `refund_lookup`.
    pub call: String,
    /// The HTTP status, when a response arrived at all.
    pub http_status: Option<u16>,
    /// `ok`, `declined`, `not_found`, `timeout`, `connect`, `connection_closed`,
    /// `http_5xx`, `http_4xx`, `bad_body`.
    pub error_kind: String,
    /// The lookup's answer: `approved`, `declined`, `not_found`, `failed`.
    pub lookup_result: Option<String>,
    pub elapsed_ms: u64,
    /// A short human-readable detail (never a secret, never card data).
    pub detail: Option<String>,
}

/// One charge request, always with the attempt's own key.
#[derive(Debug, Clone)]
pub struct ChargeCall {
    pub key: IdempotencyKey,
    pub order_id: OrderId,
    pub amount: Amount,
    pub currency: Currency,
    pub payment_method: Option<PaymentMethod>,
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
}

impl ChargeOutcome {
    pub fn evidence(&self) -> &Evidence {
        match self {
            ChargeOutcome::Approved { evidence, .. }
            | ChargeOutcome::Declined { evidence, .. }
            | ChargeOutcome::Unknown { evidence } => evidence,
        }
    }
}

impl LookupOutcome {
    pub fn evidence(&self) -> &Evidence {
        match self {
            LookupOutcome::Approved { evidence, .. }
            | LookupOutcome::Declined { evidence, .. }
            | LookupOutcome::NotFound { evidence }
            | LookupOutcome::Failed { evidence } => evidence,
        }
    }
}

/// A payment gateway adapter: charges and refunds, each with its own key,
/// their lookups by key, and the listing reconciliation compares with ours.
/// Webhook verification lives in `crate::webhook`.
pub trait Gateway: Send + Sync {
    fn charge<'a>(&'a self, call: &'a ChargeCall) -> BoxFuture<'a, ChargeOutcome>;
    fn lookup(&self, key: IdempotencyKey) -> BoxFuture<'_, LookupOutcome>;
    /// Refunds (part of) an approved charge with the refund's own key.
    /// `Approved.charge_id` is the gateway's refund id; `Declined.code` says
    /// why the gateway refused (e.g. `amount_exceeds_charge`).
    fn refund<'a>(&'a self, call: &'a RefundCall) -> BoxFuture<'a, ChargeOutcome>;
    /// Looks a refund up by its key.
    fn lookup_refund(&self, key: IdempotencyKey) -> BoxFuture<'_, LookupOutcome>;
    /// Every charge or refund the gateway executed with `from <= at < to`,
    /// approved or declined, in the gateway's order (all pages). A failed
    /// page fails the whole listing: never a partial or empty answer.
    fn list<'a>(
        &'a self,
        kind: Listed,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Vec<GatewayRecord>, ListError>>;
}
