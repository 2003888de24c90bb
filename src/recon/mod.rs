//! Daily reconciliation against the gateway: list what the gateway executed
//! in a window, compare it with our attempts, open a case once for each
//! discrepancy (the escalation queue), and settle what the gateway's record
//! makes unambiguous.
//!
//! Invariant: a case is identified by a stable `dedupe_key` derived from the
//! gateway's ids and ours only (never from the run), so re-running a window
//! opens nothing new; the decision is pure ([`compare`]), the only write to
//! an attempt is `Event::Approved` through the state machine and
//! `Store::apply`'s compare-and-set, and a failed listing or lookup opens
//! nothing (the run fails instead of reading "the gateway has nothing").
//!
//! # Layout
//! - [`schedule`]: the window type, `--from/--to` parsing, which window is due.
//! - [`compare`]: the pure comparison (findings, auto-resolutions, what to confirm).
//! - [`run`]: one run: list → load ours → compare → confirm → resolve → record.
//! - [`periodic`]: the worker's daily and intraday loop with a database claim
//!   per window.
//! - [`cli`]: `cobro reconcile --from --to [--settlement]`.
//! - [`settle`]: the settlement check (approved here → settled at the
//!   gateway, with the contract's fee; payouts add up).

mod cli;
mod compare;
mod periodic;
mod run;
mod schedule;
pub mod settle;
#[cfg(test)]
mod tests;

use serde::Serialize;
use uuid::Uuid;

pub use cli::{ReconcileCommand, run_command};
pub use compare::{Comparison, Resolution, Verdict, compare, confirm_missing, judge};
pub use periodic::{ReconcileArgs, STALE_AFTER, due_now, reconcile_loop, run_once};
pub use run::{CaseLine, ReconError, Report, ResolvedLine, reconcile};
pub use schedule::{Intraday, ReconcileAt, Window, due_window, intraday_window, parse_when};

/// Who auto-resolutions are attributed to in the transition log.
pub const ACTOR: &str = "reconciler";
/// The cause an auto-resolution writes in the transition log.
pub const CAUSE: &str = "reconciliation_approved";

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
    /// `COBRO_SETTLEMENT_DELAY` ([`settle`]).
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
