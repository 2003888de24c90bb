//! Stop and cancel: everything of an order that has not been sent, at once,
//! with a reason, by the app or by finance. A `PENDIENTE` attempt becomes
//! `RECHAZADO` (cancelled), and a `RECHAZADO` attempt's scheduled business
//! retry is dropped, both through `Event::Cancel` with who and why in the
//! transition log.
//!
//! Invariant: all or nothing, in one transaction that holds the order's
//! attempts (PostgreSQL `FOR UPDATE`, SQLite `BEGIN IMMEDIATE`). If any
//! attempt may have reached the gateway (`EN_PROCESO`, `DESCONOCIDO`,
//! `EN_REVISION`), nothing is cancelled: it can only be settled. A worker
//! that claims an attempt first wins; the cancel then refuses, never races.

use serde::Serialize;
use uuid::Uuid;

use super::change::{Applied, Change, plan};
use super::{Attempt, Store, StoreError};
use crate::state::{Event, State};

/// Why an order's charging is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// The customer paid another way (a bank transfer, cash).
    PaidByOtherMeans,
    CustomerRequest,
    FraudSuspected,
    DuplicateOrder,
    Other,
}

impl CancelReason {
    pub const ALL: [CancelReason; 5] = [
        CancelReason::PaidByOtherMeans,
        CancelReason::CustomerRequest,
        CancelReason::FraudSuspected,
        CancelReason::DuplicateOrder,
        CancelReason::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::PaidByOtherMeans => "paid_by_other_means",
            CancelReason::CustomerRequest => "customer_request",
            CancelReason::FraudSuspected => "fraud_suspected",
            CancelReason::DuplicateOrder => "duplicate_order",
            CancelReason::Other => "other",
        }
    }

    /// Whether this reason means "do not charge this order": after such a
    /// cancel the database refuses every new charge attempt of the order
    /// (`Hold::Cancelled`; `cobro.cancel_holds_order` in the migrations
    /// says the same, tests/charge_gate.rs compares them). A customer's
    /// request and "other" do not: the customer may still pay the order.
    pub fn holds_order(self) -> bool {
        match self {
            CancelReason::PaidByOtherMeans
            | CancelReason::FraudSuspected
            | CancelReason::DuplicateOrder => true,
            CancelReason::CustomerRequest | CancelReason::Other => false,
        }
    }

    /// `Err` names the accepted values.
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s.trim())
            .ok_or_else(|| {
                let all: Vec<&str> = Self::ALL.iter().map(|r| r.as_str()).collect();
                format!("must be one of {}", all.join(", "))
            })
    }
}

/// What a cancel did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Cancelled {
    pub order_id: String,
    /// `PENDIENTE` attempts now `RECHAZADO`.
    pub attempts_cancelled: Vec<Uuid>,
    /// `RECHAZADO` attempts whose scheduled business retry was dropped.
    pub retries_stopped: Vec<Uuid>,
}

#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    #[error("order {0:?} has no attempts")]
    NotFound(String),
    /// Something may have reached the gateway: it can only be settled.
    #[error(
        "attempt {attempt} is {}: it may have reached the gateway, so it can only be settled, not cancelled; nothing was cancelled",
        in_flight(*state)
    )]
    InFlight { attempt: Uuid, state: State },
    #[error("order {0:?} has nothing left to cancel: no unsent attempt and no scheduled retry")]
    NothingToCancel(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An attempt in flight's state, in words: a `PENDIENTE` one is waiting to
/// be sent again after an unknown outcome.
fn in_flight(state: State) -> String {
    match state {
        State::Pendiente => {
            "PENDIENTE to be sent again, with the same key, after an unknown outcome".into()
        }
        other => other.to_string(),
    }
}

/// Whether `a` (a charge) may have reached the gateway: being sent, in
/// doubt, in review, or waiting to be sent again after an unknown outcome
/// (a lookup found nothing, and the resend was put off).
fn may_have_reached_the_gateway(a: &Attempt) -> bool {
    match a.state {
        State::EnProceso | State::Desconocido | State::EnRevision => true,
        State::Pendiente => a.check_count > 0,
        State::Aprobado | State::Rechazado => false,
    }
}

impl From<sqlx::Error> for CancelError {
    fn from(e: sqlx::Error) -> Self {
        CancelError::Store(StoreError::Db(e))
    }
}

/// What cancelling `attempts` (all of one order) means, decided before
/// anything is written: the charge attempts to move, or why not. Refunds
/// are the customer's money: a cancel never touches one, and a refund in
/// flight does not stop the cancel. A reason that holds the order
/// ([`CancelReason::holds_order`]) with nothing left to stop is still
/// recorded, on the order's latest declined attempt, so that no later door
/// charges it.
fn decide(
    order: &str,
    attempts: &[Attempt],
    reason: CancelReason,
) -> Result<Vec<Attempt>, CancelError> {
    let attempts: Vec<&Attempt> = attempts.iter().filter(|a| !a.is_refund()).collect();
    if attempts.is_empty() {
        return Err(CancelError::NotFound(order.to_owned()));
    }
    if let Some(a) = attempts.iter().find(|a| may_have_reached_the_gateway(a)) {
        return Err(CancelError::InFlight {
            attempt: a.id,
            state: a.state,
        });
    }
    let todo: Vec<Attempt> = attempts
        .iter()
        .filter(|a| match a.state {
            State::Pendiente => true,
            // A retry due, or one parked (breaker open, sending paused).
            State::Rechazado => a.next_action_at.is_some() || a.parked_since.is_some(),
            _ => false,
        })
        .map(|a| (*a).clone())
        .collect();
    if !todo.is_empty() {
        return Ok(todo);
    }
    // Nothing in flight, but a reason that holds the order is recorded
    // even so, on its latest declined attempt: over none, or over a reason
    // that did not hold (a cancel for the customer, then fraud suspected).
    let approved = attempts.iter().any(|a| a.state == State::Aprobado);
    let holds = |a: &&Attempt| {
        a.cancel_reason
            .as_deref()
            .and_then(|r| CancelReason::parse(r).ok())
            .is_some_and(CancelReason::holds_order)
    };
    let held = attempts.iter().any(holds);
    let hold_on = attempts
        .iter()
        .filter(|a| a.state == State::Rechazado)
        .max_by_key(|a| (a.attempt_number, a.created_at));
    match hold_on {
        Some(a) if reason.holds_order() && !approved && !held => Ok(vec![(*a).clone()]),
        _ => Err(CancelError::NothingToCancel(order.to_owned())),
    }
}

impl Store {
    /// Cancels everything of `order_id` not yet sent, with `reason`, as
    /// `actor`; see the module docs.
    pub async fn cancel_order(
        &self,
        order_id: &str,
        reason: CancelReason,
        actor: &str,
    ) -> Result<Cancelled, CancelError> {
        let cause = format!("cancelled_{}", reason.as_str());
        // Every attempt the cancel touches carries its reason: the
        // database's charge rule reads it (`CancelReason::holds_order`).
        let change = |_: &Attempt| {
            let mut c = Change::new(Some(Event::Cancel), &cause, actor);
            c.cancel_reason = Some(reason.as_str());
            c
        };
        let mut done = Cancelled {
            order_id: order_id.to_owned(),
            attempts_cancelled: Vec::new(),
            retries_stopped: Vec::new(),
        };
        let mut record = |a: &Attempt| match a.state {
            State::Pendiente => done.attempts_cancelled.push(a.id),
            _ => done.retries_stopped.push(a.id),
        };
        let mut tx = self.begin_write().await?;
        let attempts = tx.order_locked(order_id).await?;
        for a in decide(order_id, &attempts, reason)? {
            let c = change(&a);
            let p = plan(&a, &c).map_err(StoreError::from)?;
            if tx.apply(&a, &c, &p).await? == Applied::Lost {
                return Err(StoreError::Corrupt(format!(
                    "attempt {} moved while the order was locked",
                    a.id
                ))
                .into());
            }
            record(&a);
        }
        tx.commit().await?;
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_parse_and_name_the_accepted_values() {
        for r in CancelReason::ALL {
            assert_eq!(CancelReason::parse(r.as_str()), Ok(r));
        }
        let err = CancelReason::parse("because").unwrap_err();
        assert!(err.contains("paid_by_other_means"), "{err}");
    }
}
