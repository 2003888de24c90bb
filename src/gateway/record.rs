//! What the gateway lists for reconciliation: the charges and refunds it
//! executed in a time window, approved or not.
//!
//! Invariant: a listing is all or nothing. [`super::Gateway::list`] returns
//! every record of the window (all pages) or a [`ListError`]; a listing that
//! failed is never reported as an empty one ("the gateway has nothing").

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Which of the gateway's collections to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Listed {
    Charges,
    Refunds,
}

impl Listed {
    pub fn as_str(self) -> &'static str {
        match self {
            Listed::Charges => "charges",
            Listed::Refunds => "refunds",
        }
    }
}

impl fmt::Display for Listed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One executed charge or refund, as the gateway lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayRecord {
    pub kind: Listed,
    /// The gateway's id: a charge id (`ch_…`) or a refund id (`re_…`).
    pub id: String,
    /// The key it was executed under, as the gateway shows it (cobro's keys
    /// are UUIDs; a charge made outside cobro may carry anything).
    pub idempotency_key: String,
    pub order_id: String,
    /// Integer minor units.
    pub amount_minor: i64,
    pub currency: String,
    /// `approved`, `declined`, or `pending`: a refund the gateway accepted
    /// that may still fail (Stripe's `pending`). Anything else is not an
    /// approval.
    pub status: String,
    /// A refund's charge (the gateway's charge id); `None` for a charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charge_id: Option<String>,
    /// When the gateway executed it.
    pub at: DateTime<Utc>,
}

impl GatewayRecord {
    /// Approved, or pending: money the gateway has accepted to move. The
    /// reconciliation's report counts it; only a final approval
    /// ([`GatewayRecord::is_final`]) settles an attempt.
    pub fn is_approved(&self) -> bool {
        self.status == "approved" || self.is_pending()
    }

    /// Accepted, and may still fail: settles nothing yet.
    pub fn is_pending(&self) -> bool {
        self.status == "pending"
    }

    /// Approved for good: what may settle an attempt `APROBADO`.
    pub fn is_final(&self) -> bool {
        self.status == "approved"
    }

    /// The key as one of ours (a UUID), if it is one.
    pub fn key(&self) -> Option<Uuid> {
        Uuid::try_parse(self.idempotency_key.trim()).ok()
    }
}

/// Why a listing failed. Reconciliation opens nothing on any of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// No answer: connect failure, timeout, reset.
    #[error("listing {kind} failed: {error_kind} (no answer from the gateway)")]
    Transport { kind: Listed, error_kind: String },
    /// An answer other than 200.
    #[error("listing {kind} failed: the gateway answered HTTP {status}")]
    Status { kind: Listed, status: u16 },
    /// A 200 whose page cannot be read, or pages that do not move on.
    #[error("listing {kind} failed: {detail}")]
    BadPage { kind: Listed, detail: String },
}
