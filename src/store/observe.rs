//! What the store reports as it writes, to whoever counts it.
//!
//! The store writes a transition-log row inside the transaction of each
//! change; the layer that counts events (`crate::metrics`) registers one
//! function here at start-up and the store calls it for every row it
//! writes. The store never imports the layer above it: it only reports.
//!
//! Invariant: reporting never fails and never blocks a write; with nothing
//! registered (a tool, a test without metrics) a report goes nowhere.

use std::sync::OnceLock;

use crate::state::State;

/// Called for each transition-log row written: from, to, and the cause.
pub type TransitionReport = fn(State, State, &str);

static ON_TRANSITION: OnceLock<TransitionReport> = OnceLock::new();

/// Registers who hears about transitions (once per process; a second call
/// keeps the first).
pub fn on_transition(report: TransitionReport) {
    let _ = ON_TRANSITION.set(report);
}

/// A transition-log row was written (in the transaction of the change).
pub(crate) fn transition_written(from: State, to: State, cause: &str) {
    if let Some(report) = ON_TRANSITION.get() {
        report(from, to, cause);
    }
}
