//! What reconciliation finds and where it looks, shared by every layer
//! that opens, stores or shows a case: the half-open [`Window`] a run
//! covers, the [`CaseKind`] of the `recon_cases.kind` column and a
//! [`Finding`], one discrepancy ready to become a case.
//!
//! Invariant: a [`Window`] always has `from < to` and is half-open,
//! `[from, to)`; a finding's `dedupe_key` is derived from the gateway's ids
//! and ours only, so a rerun opens nothing new. These are plain values; the
//! comparison that produces them is `recon`'s, the table that keeps them the
//! store's.

use chrono::{DateTime, NaiveDate, NaiveTime, TimeDelta, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::InputError;

/// `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Window {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Window {
    pub fn new(from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Self, InputError> {
        if to <= from {
            return Err(InputError::new(
                "to",
                format!("must be after from ({from} .. {to} is empty)"),
            ));
        }
        Ok(Self { from, to })
    }

    /// The UTC day `date`, midnight to midnight.
    pub fn day(date: NaiveDate) -> Self {
        let from = date.and_time(NaiveTime::MIN).and_utc();
        Self {
            from,
            to: from + TimeDelta::days(1),
        }
    }

    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.from <= t && t < self.to
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fmt = "%Y-%m-%dT%H:%M:%S%.fZ";
        write!(f, "[{}, {})", self.from.format(fmt), self.to.format(fmt))
    }
}

/// What a case is about (the `recon_cases.kind` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseKind {
    /// Two or more approved charges at the gateway for one order.
    DoubleCharge,
    /// Approved at the gateway; no attempt of ours, or ours is not APROBADO.
    UnmatchedCharge,
    /// The same for a refund.
    UnmatchedRefund,
    /// APROBADO here; the gateway has no matching approved charge or refund.
    MissingAtGateway,
    /// Both sides approved, in a different amount or currency.
    AmountMismatch,
    /// The customer disputed a charge with their bank (Stripe's
    /// `charge.dispute.created`): finance answers it with evidence.
    Dispute,
    /// An attempt whose wake-ups kept failing with an error that is not the
    /// gateway's, quarantined until the case is closed (`store::poison`).
    PoisonWakeup,
    /// APROBADO here; no settled balance transaction at the gateway after
    /// `COBRO_SETTLEMENT_DELAY` (`recon::settle`).
    Unsettled,
    /// Settled with a fee other than the contract's (`COBRO_SETTLEMENT_FEE`).
    FeeMismatch,
    /// A payout whose amount is not the net of the lines it carried.
    PayoutMismatch,
}

impl CaseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CaseKind::DoubleCharge => "double_charge",
            CaseKind::UnmatchedCharge => "unmatched_charge",
            CaseKind::UnmatchedRefund => "unmatched_refund",
            CaseKind::MissingAtGateway => "missing_at_gateway",
            CaseKind::AmountMismatch => "amount_mismatch",
            CaseKind::Dispute => "dispute",
            CaseKind::PoisonWakeup => "poison_wakeup",
            CaseKind::Unsettled => "unsettled",
            CaseKind::FeeMismatch => "fee_mismatch",
            CaseKind::PayoutMismatch => "payout_mismatch",
        }
    }
}

impl std::fmt::Display for CaseKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One discrepancy, ready to become a case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub kind: CaseKind,
    /// Stable across runs: `double_charge:<order>:<sorted charge ids>`,
    /// `unmatched_charge:<charge id>`, `unmatched_refund:<refund id>`,
    /// `missing_at_gateway:<attempt id>`, `amount_mismatch:<charge or refund id>`.
    pub dedupe_key: String,
    pub order_id: Option<String>,
    pub attempt_id: Option<Uuid>,
    /// The gateway's id(s) involved, comma-separated.
    pub gateway_ref: Option<String>,
    /// What each side says, for the person who resolves the case.
    pub details: serde_json::Value,
}
