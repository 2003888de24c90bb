//! Business retries in the store: a NEW attempt with a NEW key for a
//! declined order, guarded by the database (see
//! migrations/postgres/…_business_retry.sql; SQLite runs the same steps from
//! Rust under `BEGIN IMMEDIATE`).

use serde::Serialize;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Retried {
    pub attempt_id: Uuid,
    pub idempotency_key: Uuid,
    pub attempt_number: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    #[error("{0}")]
    NotFound(String),
    /// Only a RECHAZADO attempt is retried (never DESCONOCIDO or EN_REVISION).
    #[error("{0}")]
    NotDeclined(String),
    #[error("{0}")]
    AlreadyApproved(String),
    /// Another attempt of the order is live: a racing retry won, or the
    /// order is in doubt. Handled as "already being retried".
    #[error("{0}")]
    AlreadyRetrying(String),
    #[error("{0}")]
    MaxAttempts(String),
    /// The payment method has had its card network's number of business
    /// retries in 30 days (`COBRO_RETRY_CARD_CAP`).
    #[error("{0}")]
    CardCap(String),
    /// The card network (or the gateway) advised never to try this card
    /// again for this payment (`<code>/do_not_try_again`): not even by hand.
    #[error("{0}")]
    NetworkAdvice(String),
    /// The database's rule holds the order: an open case says the gateway
    /// may have charged it, or a cancel means "do not charge it".
    #[error("{1}")]
    Held(super::Hold, String),
    /// The scheduled retry was already handled by another worker (the
    /// declined attempt moved since it was read).
    #[error("{0}")]
    AlreadyHandled(String),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

impl RetryError {
    /// Which part of the database's charge rule refused, if one did.
    pub fn hold(&self) -> Option<super::Hold> {
        match self {
            RetryError::AlreadyApproved(_) => Some(super::Hold::Approved),
            RetryError::AlreadyRetrying(_) => Some(super::Hold::LiveAttempt),
            RetryError::Held(h, _) => Some(*h),
            _ => None,
        }
    }

    /// A refusal by the database's charge rule on the new attempt's insert.
    pub(crate) fn from_rule(e: &sqlx::Error) -> Option<Self> {
        let (hold, msg) = super::gate::hold(e)?;
        Some(match hold {
            super::Hold::LiveAttempt => RetryError::AlreadyRetrying(msg),
            super::Hold::Approved => RetryError::AlreadyApproved(msg),
            other => RetryError::Held(other, msg),
        })
    }
}
