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

pub use cli::{ReconcileCommand, run_command};
pub use compare::{Comparison, Resolution, Verdict, compare, confirm_missing, judge};
pub use periodic::{ReconcileArgs, STALE_AFTER, due_now, reconcile_loop, run_once};
pub use run::{CaseLine, ReconError, Report, ResolvedLine, reconcile};
pub use schedule::{Intraday, ReconcileAt, Window, due_window, intraday_window, parse_when};

/// Who auto-resolutions are attributed to in the transition log.
pub const ACTOR: &str = "reconciler";
/// The cause an auto-resolution writes in the transition log.
pub const CAUSE: &str = "reconciliation_approved";

pub use crate::domain::{CaseKind, Finding};
