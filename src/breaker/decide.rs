//! The breaker's decisions, pure: what one gateway call says about the
//! gateway as a whole ([`Health`]), and how the shared row moves after a
//! failure ([`after_failure`]) or an answer ([`after_answer`]). No clock,
//! no database: the caller passes `now` and the row it read.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::gateway::{ChargeOutcome, Evidence, LookupOutcome};
use crate::store::{BreakerEvent, BreakerRow};

/// What one gateway call says about the gateway as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// A definite answer (approved, declined, not found): it is up.
    Answered,
    /// No answer: not reachable, timed out, reset, 5xx, unavailable, our
    /// key refused, or a redirect (never followed: every call would be
    /// redirected the same way). Carries the kind and detail for the
    /// breaker's record.
    Failed(String),
    /// Neither: it answered but refused for now (429) or said something
    /// we could not read; says nothing about an outage.
    Neutral,
}

impl Health {
    fn from_failure(e: &Evidence) -> Self {
        match e.error_kind.as_str() {
            "connect" | "timeout" | "connection_closed" | "http_5xx" | "unavailable"
            | "auth_failed" | "redirected" => {
                let mut what = e.error_kind.clone();
                if let Some(d) = &e.detail {
                    what.push_str(": ");
                    what.extend(d.chars().take(200));
                }
                Health::Failed(what)
            }
            _ => Health::Neutral,
        }
    }

    pub fn of_charge(o: &ChargeOutcome) -> Self {
        match o {
            ChargeOutcome::Approved { .. } | ChargeOutcome::Declined { .. } => Health::Answered,
            ChargeOutcome::Refused { .. } => Health::Neutral,
            ChargeOutcome::Unknown { evidence } | ChargeOutcome::Deferred { evidence, .. } => {
                Self::from_failure(evidence)
            }
        }
    }

    pub fn of_lookup(o: &LookupOutcome) -> Self {
        match o {
            LookupOutcome::Approved { .. }
            | LookupOutcome::Declined { .. }
            | LookupOutcome::NotFound { .. } => Health::Answered,
            LookupOutcome::Failed { evidence } | LookupOutcome::Deferred { evidence, .. } => {
                Self::from_failure(evidence)
            }
        }
    }
}

/// The breaker row after one more failed call at `now`: it opens on the
/// `threshold`-th failure in a row (0 = never). `answered_since`: the
/// recording process saw an answer after its last look at the row (an
/// answer it did not write, to keep the happy path free of writes), so the
/// failures recorded before are not "in a row" any more.
pub fn after_failure(
    row: &BreakerRow,
    now: DateTime<Utc>,
    threshold: u32,
    probe_every: Duration,
    what: &str,
    answered_since: bool,
) -> (BreakerRow, Option<BreakerEvent>) {
    let mut r = row.clone();
    if answered_since && !r.is_open() {
        r.failures = 0;
        r.failing_since = None;
    }
    r.failures = r.failures.saturating_add(1);
    r.failing_since.get_or_insert(now);
    r.last_failure = Some(what.to_owned());
    r.last_failure_at = Some(now);
    let opens = !r.is_open() && threshold > 0 && r.failures as u32 >= threshold;
    if !opens {
        return (r, None);
    }
    r.state = "open".into();
    r.opened_at = Some(now);
    r.closed_at = None;
    r.next_probe_at = Some(now + chrono::Duration::from_std(probe_every).unwrap_or_default());
    r.probes = 0;
    let since = r.failing_since.unwrap_or(now);
    let event = BreakerEvent {
        state: "open",
        cause: "calls_failed".into(),
        detail: Some(format!(
            "{} calls failed in a row since {}; last: {what}",
            r.failures,
            since.format("%Y-%m-%d %H:%M:%S UTC")
        )),
    };
    (r, Some(event))
}

/// The breaker row after the gateway answered at `now`: failures forgotten,
/// and closed if it was open (the paced re-wake may start).
pub fn after_answer(row: &BreakerRow, now: DateTime<Utc>) -> (BreakerRow, Option<BreakerEvent>) {
    let mut r = row.clone();
    r.failures = 0;
    r.failing_since = None;
    r.last_answer_at = Some(now);
    if !r.is_open() {
        return (r, None);
    }
    let down = r
        .opened_at
        .map(|at| (now - at).num_seconds())
        .unwrap_or_default();
    r.state = "closed".into();
    r.closed_at = Some(now);
    r.next_probe_at = None;
    r.next_rewake_at = None;
    let event = BreakerEvent {
        state: "closed",
        cause: "gateway_answered".into(),
        detail: Some(format!("open for {down} s, {} probes", r.probes)),
    };
    (r, Some(event))
}
