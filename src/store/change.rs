//! What a compare-and-set write to an attempt asks for, and the plan both
//! backends execute for it.
//!
//! Invariant: the decision part of a write (the target state from the pure
//! state machine, the lease, when to act next, whether a log row and a
//! wake-up are due) is computed once, here, by [`plan`]; the PostgreSQL and
//! SQLite modules only translate the plan into their SQL.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Attempt;
use crate::gateway::Evidence;
use crate::state::{Event, InvalidTransition, State, transition};

/// Who holds the attempt after the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease<'a> {
    /// Take (or keep) the lease for `ttl`; `next_action_at` becomes its
    /// expiry, so the sweeper recovers the attempt if the holder vanishes.
    Take { owner: &'a str, ttl: Duration },
    /// No holder.
    Release,
}

/// A completed lookup, recorded with the write that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRecord {
    pub scheduled_at: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
}

/// One compare-and-set write to an attempt.
#[derive(Debug, Clone)]
pub struct Change<'a> {
    /// `None` for writes that are no event (taking a check lease, a failed
    /// check): those keep the state and write no transition-log row.
    pub event: Option<Event>,
    pub cause: &'a str,
    pub actor: &'a str,
    pub evidence: Option<&'a Evidence>,
    pub charge_id: Option<&'a str>,
    pub decline_code: Option<&'a str>,
    /// Act again after this delay (from the database's now); a wake-up job
    /// is pushed for that time. Ignored when the lease is taken.
    pub act_in: Option<Duration>,
    pub lease: Lease<'a>,
    pub add_check: Option<CheckRecord>,
    pub add_send: bool,
    /// A customer notice to write even though the state does not change
    /// (state changes decide their own notice).
    pub notice: Option<NoticeKind>,
    /// Park the attempt while the gateway is unreachable: no due time, no
    /// wake-up; the breaker's paced re-wake brings it back. Any other
    /// write un-parks it.
    pub park: bool,
    /// Record a two-step gateway's object for the attempt (Stripe's
    /// PaymentIntent id); set once, the database refuses a change.
    pub gateway_ref: Option<&'a str>,
    /// Why the app or finance cancelled the attempt (`Event::Cancel`).
    pub cancel_reason: Option<&'a str>,
}

impl<'a> Change<'a> {
    pub fn new(event: Option<Event>, cause: &'a str, actor: &'a str) -> Self {
        Self {
            event,
            cause,
            actor,
            evidence: None,
            charge_id: None,
            decline_code: None,
            act_in: None,
            lease: Lease::Release,
            add_check: None,
            add_send: false,
            notice: None,
            park: false,
            gateway_ref: None,
            cancel_reason: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The write won; this is the attempt as it is now.
    Moved(Box<Attempt>),
    /// Someone else changed the attempt first; nothing was written.
    Lost,
}

impl Applied {
    /// The attempt as written, when the write won.
    pub fn written(self) -> Option<Box<Attempt>> {
        match self {
            Applied::Moved(row) => Some(row),
            Applied::Lost => None,
        }
    }
}

/// The write, decided.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan<'a> {
    pub to: State,
    /// Write a transition-log row (the state changes).
    pub log: bool,
    pub lease_owner: Option<&'a str>,
    pub lease_secs: Option<f64>,
    /// `next_action_at = now + this`; `None` clears it.
    pub act_in_secs: Option<f64>,
    /// Push a wake-up job for the new `next_action_at`.
    pub wake: bool,
    /// Its priority: checks (1) before new charges (0).
    pub wake_priority: i32,
    pub add_check: i32,
    pub add_send: i32,
    pub evidence_json: Option<String>,
    /// The customer notice this transition causes, written with it.
    pub notice: Option<NoticeKind>,
    /// Set `parked_since` (kept if already parked); otherwise cleared.
    pub park: bool,
}

/// What the customer should hear about (the outbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// Declined; a business retry is scheduled.
    RetryScheduled,
    /// Declined for good: a final code, or out of attempts.
    PaymentFailed,
    /// A business retry succeeded.
    ApprovedAfterRetry,
}

impl NoticeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::RetryScheduled => "retry_scheduled",
            NoticeKind::PaymentFailed => "payment_failed",
            NoticeKind::ApprovedAfterRetry => "approved_after_retry",
        }
    }
}

pub(crate) fn plan<'a>(seen: &Attempt, change: &Change<'a>) -> Result<Plan<'a>, InvalidTransition> {
    let to = match change.event {
        Some(event) => transition(seen.state, event)?.to,
        None => seen.state,
    };
    let (lease_owner, lease_secs) = match change.lease {
        Lease::Take { owner, ttl } => (Some(owner), Some(ttl.as_secs_f64())),
        Lease::Release => (None, None),
    };
    // A parked attempt has no due time and no holder: the re-wake is its
    // only way back.
    let park = change.park && lease_owner.is_none();
    let act_in_secs = match park {
        true => None,
        false => lease_secs.or(change.act_in.map(|d| d.as_secs_f64())),
    };
    // Notices tell the customer about their payment; a refund's outcome is
    // the app's to announce (it asked for the refund).
    let notice = match (to != seen.state, to) {
        _ if seen.is_refund() => None,
        // The app or finance cancelled it: they tell the customer.
        _ if change.event == Some(Event::Cancel) => None,
        (true, State::Rechazado) if act_in_secs.is_some() => Some(NoticeKind::RetryScheduled),
        (true, State::Rechazado) => Some(NoticeKind::PaymentFailed),
        (true, State::Aprobado) if seen.attempt_number > 1 => Some(NoticeKind::ApprovedAfterRetry),
        (false, _) => change.notice,
        _ => None,
    };
    Ok(Plan {
        to,
        // Every event is on the record, the one that keeps the state too
        // (`ReviewNow`: EN_REVISION -> EN_REVISION).
        log: to != seen.state || change.event.is_some(),
        lease_owner,
        lease_secs,
        act_in_secs,
        wake: lease_owner.is_none() && act_in_secs.is_some(),
        wake_priority: i32::from(to == State::Desconocido),
        add_check: i32::from(change.add_check.is_some()),
        add_send: i32::from(change.add_send),
        evidence_json: change.evidence.and_then(|e| serde_json::to_string(e).ok()),
        notice,
        park,
    })
}
