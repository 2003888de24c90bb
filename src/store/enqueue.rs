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
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

pub(crate) fn key_reused(
    key: IdempotencyKey,
    order: &str,
    amount: i64,
    currency: &str,
) -> EnqueueError {
    EnqueueError::KeyReused(format!(
        "idempotency_key {key} was already used for a different charge (order {order}, {amount} {currency})"
    ))
}

pub(crate) fn live_attempt(order: &str) -> EnqueueError {
    EnqueueError::LiveAttempt(format!("order {order} already has a live attempt"))
}

pub(crate) fn already_approved(order: &str) -> EnqueueError {
    EnqueueError::AlreadyApproved(format!("order {order} already has an approved charge"))
}
