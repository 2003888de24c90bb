//! The worker's decisions, as pure functions: what to do with an attempt
//! found in the store, and what a lookup result means.
//!
//! Invariant: nothing here reads a clock, a database or a socket. `now` is the
//! database's clock (read together with the attempt), so workers on machines
//! with skewed clocks agree on lease expiry and due times.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::backoff::CheckSchedule;
use crate::gateway::LookupOutcome;
use crate::state::{Event, State};

/// The parts of an attempt a decision looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub state: State,
    pub next_action_at: Option<DateTime<Utc>>,
    pub lease_expires_at: Option<DateTime<Utc>>,
}

/// What a worker woken for an attempt should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `PENDIENTE`: take the lease (`EN_PROCESO`) and send.
    Send,
    /// `DESCONOCIDO` and due: take the lease and look the charge up by key.
    Check,
    /// `EN_PROCESO` whose holder vanished: the outcome is unknown.
    ExpireLease,
    /// `RECHAZADO` with a business retry due: a NEW attempt with a NEW key.
    Retry,
    /// `EN_REVISION` with the janitor's next check due: take the lease and
    /// look the attempt up again (by key, or in the gateway's listing once
    /// the key is past its lifetime). Never a send.
    Review,
    /// Not yet: the next action is due at this time.
    WaitUntil(DateTime<Utc>),
    /// Terminal, in review with nothing scheduled, or another worker holds
    /// the lease.
    Nothing,
}

pub fn decide(s: Snapshot, now: DateTime<Utc>) -> Action {
    let leased = s.lease_expires_at.is_some_and(|until| until > now);
    let due = |then: Action| match s.next_action_at {
        Some(at) if at > now => Action::WaitUntil(at),
        _ => then,
    };
    match s.state {
        State::Pendiente => due(Action::Send),
        State::EnProceso => match s.lease_expires_at {
            Some(until) if until > now => Action::WaitUntil(until),
            _ => Action::ExpireLease,
        },
        State::Desconocido if leased => Action::Nothing,
        State::Desconocido => due(Action::Check),
        State::Rechazado if s.next_action_at.is_some() => due(Action::Retry),
        State::EnRevision if leased => Action::Nothing,
        // No due time: nothing to look up (an unsendable row never sent).
        State::EnRevision if s.next_action_at.is_some() => due(Action::Review),
        State::Aprobado | State::Rechazado | State::EnRevision => Action::Nothing,
    }
}

/// What a completed lookup in `DESCONOCIDO` leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupPlan {
    /// Move the attempt with this event.
    Apply(Event),
    /// Still unknown: look again after the schedule's next delay.
    CheckAgain,
    /// "Not found", but too soon to believe it: the gateway may still be
    /// executing the request it does not show yet. Look again after the
    /// schedule's next delay, and not before this wait.
    CheckAfter(Duration),
    /// The lookup did not reach the gateway, or the gateway would not
    /// answer yet: not a check; look again after [`defer_delay`].
    Defer,
    /// "Not found" of an attempt never sent (finance looked up an attempt
    /// given to it before its first send): certain, and nothing a lookup
    /// may send. Back to finance (`ChecksExhausted`) with nothing for the
    /// review janitor to find.
    NeverSent,
}

/// When the gateway's "not found" is the truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotFoundRule {
    /// The gateway honours idempotency keys: a re-send with the same key
    /// while the first is still executing cannot charge twice (it is
    /// replayed, or refused as a key in use). Then one "not found" is enough.
    pub gateway_idempotent: bool,
    /// The longest a request may take at the gateway from our send to its
    /// record (queueing and processing). Without key support, only a "not
    /// found" taken at least this long after the send means the send never
    /// executed: the gateway may record a charge only when it completes.
    pub max_processing: Duration,
}

/// `checks_done` counts this check too. `key_age` is how long ago the key was
/// created; a key older than the gateway keeps keys is never re-sent.
/// `since_send` is how long before this lookup the last send started;
/// `None` when the attempt was never sent (finance looked up an attempt
/// given to it before its first send): then "not found" is certain, and a
/// send would be a first send decided by a lookup, so finance keeps it.
pub fn after_lookup(
    outcome: &LookupOutcome,
    checks_done: u32,
    key_age: Duration,
    key_lifetime: Duration,
    schedule: &CheckSchedule,
    since_send: Option<Duration>,
    rule: NotFoundRule,
) -> LookupPlan {
    match outcome {
        LookupOutcome::Approved { .. } => LookupPlan::Apply(Event::Approved),
        LookupOutcome::Declined { .. } => LookupPlan::Apply(Event::Declined),
        LookupOutcome::NotFound { .. } => match since_send {
            None => LookupPlan::NeverSent,
            Some(_) if key_age >= key_lifetime => LookupPlan::Apply(Event::KeyExpired),
            // Every check counts, found or not: a gateway that keeps losing
            // our requests (or lying about them) ends in finance's queue
            // too, not in an endless send-lookup loop.
            Some(_) if checks_done >= schedule.max_checks() => {
                LookupPlan::Apply(Event::ChecksExhausted)
            }
            Some(since) if !rule.gateway_idempotent && since < rule.max_processing => {
                LookupPlan::CheckAfter(rule.max_processing - since)
            }
            Some(_) => LookupPlan::Apply(Event::Resend),
        },
        LookupOutcome::Failed { .. } if checks_done >= schedule.max_checks() => {
            LookupPlan::Apply(Event::ChecksExhausted)
        }
        LookupOutcome::Failed { .. } => LookupPlan::CheckAgain,
        LookupOutcome::Deferred { .. } => LookupPlan::Defer,
    }
}

/// Whether an attempt waiting in `PENDIENTE` may be sent now with its own
/// key. One whose outcome was once unknown (`checks_done > 0`: a lookup
/// found nothing, it was sent again, and that send was refused or
/// throttled) leans on the key: a send the gateway did execute after all
/// (a lookup can miss one) is replayed, not made again, only while the
/// gateway keeps the key. Past the key's lifetime only a recorded gateway
/// object (a PaymentIntent, which succeeds once) keeps a send safe; else
/// finance gets it, and the review janitor looks for it in the gateway's
/// listing. Sends that never had an unknown outcome made nothing at the
/// gateway: the key's age does not matter to them.
pub fn key_guards_resend(
    checks_done: u32,
    key_age: Duration,
    key_lifetime: Duration,
    object_recorded: bool,
) -> bool {
    checks_done == 0 || object_recorded || key_age < key_lifetime
}

/// The longest `Retry-After` honoured as given; a longer one (or a date far
/// ahead) is cut to this, so a wrong header cannot park an attempt for days.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// How long to wait before sending (or looking up) again a request the
/// gateway certainly did not execute: its `Retry-After` if it gave one (at
/// most [`MAX_RETRY_AFTER`]), else `backoff` scaled by `jitter_factor`
/// (drawn by the caller within ±50 %, so deferred attempts do not come back
/// all at once).
pub fn defer_delay(
    retry_after: Option<Duration>,
    backoff: Duration,
    jitter_factor: f64,
) -> Duration {
    match retry_after {
        Some(d) => d.min(MAX_RETRY_AFTER),
        None => backoff.mul_f64(jitter_factor.clamp(0.5, 1.5)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::Evidence;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    fn snap(state: State, next: Option<i64>, lease: Option<i64>) -> Snapshot {
        Snapshot {
            state,
            next_action_at: next.map(t),
            lease_expires_at: lease.map(t),
        }
    }

    #[test]
    fn decide_table() {
        let now = t(100);
        let cases = [
            (snap(State::Pendiente, Some(90), None), Action::Send),
            (
                snap(State::Pendiente, Some(110), None),
                Action::WaitUntil(t(110)),
            ),
            (
                snap(State::EnProceso, None, Some(130)),
                Action::WaitUntil(t(130)),
            ),
            (snap(State::EnProceso, None, Some(99)), Action::ExpireLease),
            (snap(State::EnProceso, None, None), Action::ExpireLease),
            (snap(State::Desconocido, Some(99), None), Action::Check),
            (
                snap(State::Desconocido, Some(105), None),
                Action::WaitUntil(t(105)),
            ),
            (
                snap(State::Desconocido, Some(99), Some(120)),
                Action::Nothing,
            ),
            (snap(State::Desconocido, Some(99), Some(50)), Action::Check),
            (snap(State::Aprobado, Some(0), None), Action::Nothing),
            (snap(State::Rechazado, None, None), Action::Nothing),
            (snap(State::Rechazado, Some(99), None), Action::Retry),
            (
                snap(State::Rechazado, Some(200), None),
                Action::WaitUntil(t(200)),
            ),
            (snap(State::EnRevision, Some(0), None), Action::Review),
            (
                snap(State::EnRevision, Some(300), None),
                Action::WaitUntil(t(300)),
            ),
            (
                snap(State::EnRevision, Some(99), Some(120)),
                Action::Nothing,
            ),
            (snap(State::EnRevision, Some(99), Some(50)), Action::Review),
            (snap(State::EnRevision, None, None), Action::Nothing),
        ];
        for (s, want) in cases {
            assert_eq!(decide(s, now), want, "{s:?}");
        }
    }

    #[test]
    fn lookup_table() {
        let ev = Evidence::default;
        let sched = CheckSchedule::default();
        let hour = Duration::from_secs(3600);
        let day = Duration::from_secs(86_400);
        let approved = LookupOutcome::Approved {
            charge_id: "ch_1".into(),
            evidence: ev(),
        };
        let declined = LookupOutcome::Declined {
            code: "card_declined".into(),
            charge_id: None,
            evidence: ev(),
        };
        let missing = LookupOutcome::NotFound { evidence: ev() };
        let failed = LookupOutcome::Failed { evidence: ev() };
        let deferred = LookupOutcome::Deferred {
            why: crate::gateway::Deferral::NotSent,
            retry_after: None,
            evidence: ev(),
        };
        for checks_done in [1, 5, 9] {
            assert_eq!(
                after_lookup(
                    &deferred,
                    checks_done,
                    Duration::ZERO,
                    day,
                    &sched,
                    Some(hour),
                    KEYS
                ),
                LookupPlan::Defer,
                "a lookup that never reached the gateway is not a check, at any count"
            );
        }
        let cases = [
            (&approved, 1, hour, LookupPlan::Apply(Event::Approved)),
            (&approved, 5, 2 * day, LookupPlan::Apply(Event::Approved)),
            (&declined, 1, hour, LookupPlan::Apply(Event::Declined)),
            (&missing, 1, hour, LookupPlan::Apply(Event::Resend)),
            (&missing, 1, day, LookupPlan::Apply(Event::KeyExpired)),
            (&missing, 4, hour, LookupPlan::Apply(Event::Resend)),
            (&missing, 5, hour, LookupPlan::Apply(Event::ChecksExhausted)),
            (&failed, 1, hour, LookupPlan::CheckAgain),
            (&failed, 4, hour, LookupPlan::CheckAgain),
            (&failed, 5, hour, LookupPlan::Apply(Event::ChecksExhausted)),
        ];
        for (outcome, checks, age, want) in cases {
            assert_eq!(
                after_lookup(outcome, checks, age, day, &sched, Some(hour), KEYS),
                want,
                "{outcome:?} after {checks} checks, key age {age:?}"
            );
        }
        // Never sent (given to finance before its first send, then looked
        // up at its "check now"): not found goes back to finance, at any
        // count, never to a send; what was found still settles it.
        for checks in [1, 4] {
            assert_eq!(
                after_lookup(&missing, checks, hour, day, &sched, None, KEYS),
                LookupPlan::NeverSent,
                "never sent, not found after {checks} checks"
            );
        }
        assert_eq!(
            after_lookup(&approved, 1, hour, day, &sched, None, KEYS),
            LookupPlan::Apply(Event::Approved)
        );
    }

    /// A gateway that honours keys.
    const KEYS: NotFoundRule = NotFoundRule {
        gateway_idempotent: true,
        max_processing: Duration::from_secs(60),
    };

    #[test]
    fn without_key_support_not_found_is_believed_only_after_the_processing_time() {
        let missing = LookupOutcome::NotFound {
            evidence: Evidence::default(),
        };
        let sched = CheckSchedule::default();
        let (hour, day) = (Duration::from_secs(3600), Duration::from_secs(86_400));
        let memoryless = NotFoundRule {
            gateway_idempotent: false,
            max_processing: Duration::from_secs(30),
        };
        let s = Duration::from_secs;
        let cases = [
            // Too soon: the send may still be executing, invisible.
            (1, s(2), memoryless, LookupPlan::CheckAfter(s(28))),
            (3, s(29), memoryless, LookupPlan::CheckAfter(s(1))),
            // Late enough: the send never executed; re-send, same key.
            (2, s(30), memoryless, LookupPlan::Apply(Event::Resend)),
            (4, s(62), memoryless, LookupPlan::Apply(Event::Resend)),
            // The checks run out first: finance.
            (
                5,
                s(10),
                memoryless,
                LookupPlan::Apply(Event::ChecksExhausted),
            ),
            // Keys honoured: a re-send cannot execute twice.
            (1, s(2), KEYS, LookupPlan::Apply(Event::Resend)),
        ];
        for (checks, since_send, rule, want) in cases {
            assert_eq!(
                after_lookup(&missing, checks, hour, day, &sched, Some(since_send), rule),
                want,
                "check {checks}, {since_send:?} after the send, {rule:?}"
            );
        }
    }

    #[test]
    fn a_resend_leans_on_a_live_key_or_a_recorded_object() {
        let (hour, day) = (Duration::from_secs(3600), Duration::from_secs(2 * 86_400));
        let lifetime = Duration::from_secs(86_400);
        let cases = [
            // Never unknown: refused or throttled sends made nothing.
            (0, day, false, true),
            // Once unknown, sent again: only while the key is kept...
            (1, hour, false, true),
            (3, day, false, false),
            (1, lifetime, false, false),
            // ... or on the recorded object, which succeeds once.
            (2, day, true, true),
        ];
        for (checks, age, object, want) in cases {
            assert_eq!(
                key_guards_resend(checks, age, lifetime, object),
                want,
                "{checks} checks, key {age:?} old, object {object}"
            );
        }
    }

    #[test]
    fn a_deferral_waits_the_gateways_retry_after_or_a_jittered_backoff() {
        let s = Duration::from_secs;
        let cases = [
            (Some(s(7)), s(5), 1.3, s(7)),
            (Some(s(86_400)), s(5), 1.0, MAX_RETRY_AFTER),
            (Some(Duration::ZERO), s(5), 1.0, Duration::ZERO),
            (None, s(4), 0.5, s(2)),
            (None, s(4), 1.5, s(6)),
            (None, s(4), 9.0, s(6)),
        ];
        for (retry_after, backoff, factor, want) in cases {
            assert_eq!(
                defer_delay(retry_after, backoff, factor),
                want,
                "{retry_after:?} {factor}"
            );
        }
    }
}
