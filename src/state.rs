//! The attempt state machine: one pure function over `(state, event)`.
//!
//! Invariant: every state change in cobro is the result of [`transition`];
//! no database, no clock, no randomness here. The exhaustive `match` (no
//! `_ =>`) makes adding a state or an event a compile error until every pair
//! has been decided. `docs/state_machine.md` draws the same table.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The states of one charge attempt, in the user's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum State {
    /// Stored with its key, not yet sent.
    #[serde(rename = "PENDIENTE")]
    Pendiente,
    /// A worker holds the lease and is talking to the gateway.
    #[serde(rename = "EN_PROCESO")]
    EnProceso,
    /// We do not know whether the gateway charged: look it up before anything else.
    #[serde(rename = "DESCONOCIDO")]
    Desconocido,
    /// Charged, exactly once.
    #[serde(rename = "APROBADO")]
    Aprobado,
    /// The gateway declined this attempt, or the app or finance cancelled
    /// it before it was sent (`Event::Cancel`, with its reason).
    #[serde(rename = "RECHAZADO")]
    Rechazado,
    /// Finance must decide (the escalation queue).
    #[serde(rename = "EN_REVISION")]
    EnRevision,
}

impl State {
    pub const ALL: [State; 6] = [
        State::Pendiente,
        State::EnProceso,
        State::Desconocido,
        State::Aprobado,
        State::Rechazado,
        State::EnRevision,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Pendiente => "PENDIENTE",
            State::EnProceso => "EN_PROCESO",
            State::Desconocido => "DESCONOCIDO",
            State::Aprobado => "APROBADO",
            State::Rechazado => "RECHAZADO",
            State::EnRevision => "EN_REVISION",
        }
    }

    /// Terminal for the charge path: no worker moves it again.
    pub fn is_terminal(self) -> bool {
        match self {
            State::Aprobado | State::Rechazado => true,
            State::Pendiente | State::EnProceso | State::Desconocido | State::EnRevision => false,
        }
    }

    /// Counts against "one live attempt per order" (the partial unique index).
    pub fn is_live(self) -> bool {
        !self.is_terminal()
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for State {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

impl TryFrom<String> for State {
    type Error = UnknownState;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown attempt state {0:?}")]
pub struct UnknownState(pub String);

/// Something that happened to an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// A worker took the lease to send for the first time.
    Claim,
    /// A lookup found nothing at the gateway: send again with the SAME key.
    Resend,
    /// The gateway charged (synchronous answer, lookup, webhook or finance).
    Approved,
    /// The gateway definitely declined (synchronous answer, lookup, webhook or finance).
    Declined,
    /// Timeout, connection reset, EOF or 5xx while sending: outcome unknown.
    Unknown,
    /// The send certainly was not executed: its bytes never left (connection
    /// refused, DNS, TLS handshake) or the gateway said so (429, 503 with
    /// `Retry-After`). Back to waiting, to be sent with the same key later;
    /// nothing to look up.
    Deferred,
    /// The worker holding the lease vanished; its outcome is unknown.
    LeaseExpired,
    /// The last scheduled check failed too: hand it to finance.
    ChecksExhausted,
    /// Not found at the gateway but the key is older than the gateway keeps
    /// keys: re-sending could charge twice, so hand it to finance. Also a
    /// `PENDIENTE` attempt whose outcome was once unknown, due to be sent
    /// again after its key expired ([`crate::policy::key_guards_resend`]).
    KeyExpired,
    /// Finance asks for a fresh lookup of an attempt in review ("check
    /// again now"). The lookup that follows counts past the schedule, so an
    /// answer still missing puts it back in review, never re-sends blindly.
    Recheck,
    /// The stored row cannot be turned into a gateway call (edited by hand,
    /// or written by an older version with looser rules), or the gateway
    /// refused the call itself for a reason no retry cures (Stripe's
    /// `idempotency_error`): nothing more is sent, finance decides.
    Unsendable,
    /// Finance asks the review janitor to look an attempt in review up now
    /// (bulk "check again now"): it stays in review, its next automatic
    /// check is now. On the record as a transition-log row.
    ReviewNow,
    /// The app or finance stops what has not been sent: a `PENDIENTE`
    /// attempt nobody has claimed becomes `RECHAZADO` (cancelled, with its
    /// reason), and a `RECHAZADO` attempt's scheduled business retry is
    /// dropped. Nothing that may have reached the gateway is ever cancelled.
    Cancel,
    /// A person (finance, `cobro retry`) asks for a business retry of a
    /// declined attempt now: its retry becomes due, and the worker looks
    /// the attempt up at the gateway before it creates the new attempt,
    /// as for a scheduled retry. The attempt itself stays `RECHAZADO`.
    RetryNow,
    /// A two-step gateway (Stripe) created the payment object for this
    /// attempt's key without moving money (a PaymentIntent, unconfirmed):
    /// its id is recorded, once, before anything confirms it. The lease
    /// holder keeps the lease and confirms next.
    Prepared,
}

impl Event {
    /// Every event (for tables and checks that must consider them all).
    pub const ALL: [Event; 15] = [
        Event::Claim,
        Event::Resend,
        Event::Approved,
        Event::Declined,
        Event::Unknown,
        Event::Deferred,
        Event::LeaseExpired,
        Event::ChecksExhausted,
        Event::KeyExpired,
        Event::Recheck,
        Event::Unsendable,
        Event::ReviewNow,
        Event::Prepared,
        Event::Cancel,
        Event::RetryNow,
    ];
}

/// What must happen after a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Call the gateway's charge with the attempt's key.
    SendToGateway,
    /// Send with the attempt's key again after a backoff (or the gateway's
    /// `Retry-After`).
    SendLater,
    /// Look the charge up when it is next due: by key after the next delay
    /// of the check schedule (`DESCONOCIDO`); by the review janitor, now
    /// (`ReviewNow`).
    CheckLater,
    /// Wait for a person in finance (or a late webhook/lookup).
    AwaitFinance,
    /// Nothing more for the charge path.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    pub to: State,
    pub then: Then,
}

/// An event that does not apply to the current state. For outcomes arriving
/// on a terminal state (a duplicate or late webhook) this is a recorded no-op,
/// never an error answered to the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{event:?} does not apply to an attempt in {from}")]
pub struct InvalidTransition {
    pub from: State,
    pub event: Event,
}

const fn to(to: State, then: Then) -> Result<Next, InvalidTransition> {
    Ok(Next { to, then })
}

/// The whole state machine.
pub fn transition(from: State, event: Event) -> Result<Next, InvalidTransition> {
    use Event as E;
    use State as S;
    let invalid = Err(InvalidTransition { from, event });
    match (from, event) {
        (S::Pendiente, E::Claim) => to(S::EnProceso, Then::SendToGateway),
        (S::Desconocido, E::Resend) => to(S::EnProceso, Then::SendToGateway),

        (S::Pendiente | S::EnProceso | S::Desconocido | S::EnRevision, E::Approved) => {
            to(S::Aprobado, Then::Done)
        }
        (S::Pendiente | S::EnProceso | S::Desconocido | S::EnRevision, E::Declined) => {
            to(S::Rechazado, Then::Done)
        }

        (S::EnProceso, E::Unknown | E::LeaseExpired) => to(S::Desconocido, Then::CheckLater),
        (S::EnProceso, E::Deferred) => to(S::Pendiente, Then::SendLater),
        (S::Desconocido, E::ChecksExhausted | E::KeyExpired) => {
            to(S::EnRevision, Then::AwaitFinance)
        }
        (S::Pendiente, E::KeyExpired) => to(S::EnRevision, Then::AwaitFinance),
        (S::Pendiente | S::EnProceso | S::Desconocido, E::Unsendable) => {
            to(S::EnRevision, Then::AwaitFinance)
        }
        (S::EnRevision, E::Recheck) => to(S::Desconocido, Then::CheckLater),
        (S::EnRevision, E::ReviewNow) => to(S::EnRevision, Then::CheckLater),
        (S::EnProceso, E::Prepared) => to(S::EnProceso, Then::SendToGateway),
        (S::Pendiente | S::Rechazado, E::Cancel) => to(S::Rechazado, Then::Done),
        (S::Rechazado, E::RetryNow) => to(S::Rechazado, Then::Done),
        (
            S::Pendiente | S::EnProceso | S::Desconocido | S::Aprobado | S::EnRevision,
            E::RetryNow,
        ) => invalid,
        (S::EnProceso | S::Desconocido | S::EnRevision | S::Aprobado, E::Cancel) => invalid,

        (S::Pendiente, E::Resend | E::Unknown | E::LeaseExpired)
        | (S::Pendiente, E::ChecksExhausted)
        | (S::EnProceso, E::Claim | E::Resend | E::ChecksExhausted | E::KeyExpired)
        | (S::Desconocido, E::Claim | E::Unknown | E::LeaseExpired)
        | (S::EnRevision, E::Claim | E::Resend | E::Unknown | E::LeaseExpired)
        | (S::EnRevision, E::ChecksExhausted | E::KeyExpired) => invalid,
        (S::Pendiente | S::EnProceso | S::Desconocido, E::Recheck | E::ReviewNow) => invalid,
        (S::Pendiente | S::Desconocido | S::EnRevision, E::Deferred) => invalid,
        (S::EnRevision, E::Unsendable) => invalid,
        (S::Pendiente | S::Desconocido | S::EnRevision, E::Prepared) => invalid,

        (S::Aprobado | S::Rechazado, E::Approved | E::Declined)
        | (S::Aprobado | S::Rechazado, E::Claim | E::Resend | E::Unknown | E::LeaseExpired)
        | (S::Aprobado | S::Rechazado, E::ChecksExhausted | E::KeyExpired | E::Recheck)
        | (S::Aprobado | S::Rechazado, E::Deferred | E::Unsendable | E::ReviewNow)
        | (S::Aprobado | S::Rechazado, E::Prepared) => invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event as E;
    use State as S;

    const EVENTS: [Event; 15] = Event::ALL;

    /// Every (state, event) pair, written out. `None` = invalid.
    fn expected(from: State, event: Event) -> Option<(State, Then)> {
        let table: &[(State, Event, State, Then)] = &[
            (S::Pendiente, E::Claim, S::EnProceso, Then::SendToGateway),
            (S::Pendiente, E::Approved, S::Aprobado, Then::Done),
            (S::Pendiente, E::Declined, S::Rechazado, Then::Done),
            (S::EnProceso, E::Approved, S::Aprobado, Then::Done),
            (S::EnProceso, E::Declined, S::Rechazado, Then::Done),
            (S::EnProceso, E::Unknown, S::Desconocido, Then::CheckLater),
            (S::EnProceso, E::Deferred, S::Pendiente, Then::SendLater),
            (
                S::EnProceso,
                E::LeaseExpired,
                S::Desconocido,
                Then::CheckLater,
            ),
            (S::Desconocido, E::Resend, S::EnProceso, Then::SendToGateway),
            (S::Desconocido, E::Approved, S::Aprobado, Then::Done),
            (S::Desconocido, E::Declined, S::Rechazado, Then::Done),
            (
                S::Desconocido,
                E::ChecksExhausted,
                S::EnRevision,
                Then::AwaitFinance,
            ),
            (
                S::Desconocido,
                E::KeyExpired,
                S::EnRevision,
                Then::AwaitFinance,
            ),
            (
                S::Pendiente,
                E::Unsendable,
                S::EnRevision,
                Then::AwaitFinance,
            ),
            (
                S::Pendiente,
                E::KeyExpired,
                S::EnRevision,
                Then::AwaitFinance,
            ),
            (
                S::Desconocido,
                E::Unsendable,
                S::EnRevision,
                Then::AwaitFinance,
            ),
            (
                S::EnProceso,
                E::Unsendable,
                S::EnRevision,
                Then::AwaitFinance,
            ),
            (S::EnRevision, E::Approved, S::Aprobado, Then::Done),
            (S::EnRevision, E::Declined, S::Rechazado, Then::Done),
            (S::EnRevision, E::Recheck, S::Desconocido, Then::CheckLater),
            (S::EnRevision, E::ReviewNow, S::EnRevision, Then::CheckLater),
            (S::EnProceso, E::Prepared, S::EnProceso, Then::SendToGateway),
            (S::Pendiente, E::Cancel, S::Rechazado, Then::Done),
            (S::Rechazado, E::Cancel, S::Rechazado, Then::Done),
            (S::Rechazado, E::RetryNow, S::Rechazado, Then::Done),
        ];
        table
            .iter()
            .find(|(f, e, _, _)| *f == from && *e == event)
            .map(|(_, _, t, then)| (*t, *then))
    }

    #[test]
    fn every_state_event_pair_matches_the_table() {
        let mut valid = 0;
        for from in State::ALL {
            for event in EVENTS {
                let got = transition(from, event).ok().map(|n| (n.to, n.then));
                assert_eq!(got, expected(from, event), "{from} + {event:?}");
                valid += usize::from(got.is_some());
            }
        }
        assert_eq!(valid, 25, "the table above lists 25 valid transitions");
    }

    #[test]
    fn terminal_states_accept_nothing_but_stopping_or_asking_for_a_retry() {
        for from in [S::Aprobado, S::Rechazado] {
            assert!(from.is_terminal());
            for event in EVENTS {
                let got = transition(from, event).ok().map(|n| n.to);
                match (from, event) {
                    (S::Rechazado, E::Cancel | E::RetryNow) => {
                        assert_eq!(got, Some(S::Rechazado))
                    }
                    _ => assert!(got.is_none(), "{from} + {event:?}"),
                }
            }
        }
    }

    #[test]
    fn only_what_was_never_sent_can_be_cancelled() {
        for from in [S::EnProceso, S::Desconocido, S::EnRevision, S::Aprobado] {
            assert!(transition(from, E::Cancel).is_err(), "{from}");
        }
        assert_eq!(
            transition(S::Pendiente, E::Cancel).unwrap().to,
            S::Rechazado
        );
    }

    #[test]
    fn a_timeout_is_never_a_decline() {
        let next = transition(S::EnProceso, E::Unknown).unwrap();
        assert_eq!(next.to, S::Desconocido);
        assert_ne!(next.to, S::Rechazado);
    }

    #[test]
    fn only_a_send_that_certainly_did_not_run_goes_back_to_waiting() {
        let next = transition(S::EnProceso, E::Deferred).unwrap();
        assert_eq!((next.to, next.then), (S::Pendiente, Then::SendLater));
        // Never from DESCONOCIDO: what may have run is looked up first.
        assert!(transition(S::Desconocido, E::Deferred).is_err());
    }

    #[test]
    fn names_round_trip() {
        for s in State::ALL {
            assert_eq!(s.as_str().parse::<State>().unwrap(), s);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
        assert!("pending".parse::<State>().is_err());
    }
}
