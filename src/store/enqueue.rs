//! What enqueueing returns and how it fails, for both backends.
//!
//! On PostgreSQL the one implementation is the SQL function
//! `cobro.enqueue_charge` (migrations/postgres/…_enqueue.sql), which any
//! language can call inside its own transaction; Rust calls it too. SQLite
//! has no stored procedures, so `lite::enqueue_charge` runs the same steps
//! from Rust inside the caller's transaction, with the same errors.

use serde::Serialize;
use uuid::Uuid;

use crate::domain::{IdempotencyKey, InputError};
use crate::state::State;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enqueued {
    pub attempt_id: Uuid,
    pub idempotency_key: IdempotencyKey,
    pub state: State,
    /// `false` when the key was already enqueued with the same parameters and
    /// the existing attempt is returned.
    pub created: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    #[error(transparent)]
    Invalid(#[from] InputError),
    /// The key was already used for a different order, amount or currency.
    #[error("{0}")]
    KeyReused(String),
    /// The order already has a live attempt.
    #[error("{0}")]
    LiveAttempt(String),
    /// The order already has an approved charge.
    #[error("{0}")]
    AlreadyApproved(String),
    /// The database's rule holds the order for another reason: an open
    /// case, or a cancel that means "do not charge it" (`store::Hold`).
    #[error("{1}")]
    Held(super::Hold, String),
    #[error("{}", super::described(.0))]
    /// Not a `#[source]`: the message already words the driver's error,
    /// and a chain printed with `{:#}` would say it twice.
    Db(sqlx::Error),
}

impl EnqueueError {
    /// Which part of the database's charge rule refused, if one did.
    pub fn hold(&self) -> Option<super::Hold> {
        match self {
            EnqueueError::LiveAttempt(_) => Some(super::Hold::LiveAttempt),
            EnqueueError::AlreadyApproved(_) => Some(super::Hold::Approved),
            EnqueueError::Held(h, _) => Some(*h),
            EnqueueError::Invalid(_) | EnqueueError::KeyReused(_) | EnqueueError::Db(_) => None,
        }
    }

    /// A refusal by the database's charge rule (or its bounds on input),
    /// else `None`.
    pub(crate) fn from_rule(e: &sqlx::Error) -> Option<Self> {
        let (code, msg) = super::gate::refusal(e)?;
        Self::from_refusal(code, msg)
    }

    /// A refusal (its code and message) as the error a caller branches on.
    pub(crate) fn from_refusal(code: String, msg: String) -> Option<Self> {
        if code == "22023" {
            return Some(EnqueueError::Invalid(super::gate::invalid_from_message(
                &msg,
            )));
        }
        Some(match super::gate::Hold::from_code(&code)? {
            super::Hold::LiveAttempt => EnqueueError::LiveAttempt(msg),
            super::Hold::Approved => EnqueueError::AlreadyApproved(msg),
            other => EnqueueError::Held(other, msg),
        })
    }
}

pub(crate) fn key_reused(
    key: IdempotencyKey,
    order: &str,
    amount: i64,
    currency: &str,
) -> EnqueueError {
    EnqueueError::KeyReused(format!(
        "idempotency_key {key} was already used for a different charge (order {order}, {} {currency})",
        crate::domain::decimal(amount, currency)
    ))
}

pub(crate) fn live_attempt(order: &str) -> EnqueueError {
    EnqueueError::LiveAttempt(format!("order {order} already has a live attempt"))
}

impl From<sqlx::Error> for EnqueueError {
    fn from(e: sqlx::Error) -> Self {
        EnqueueError::Db(e)
    }
}
