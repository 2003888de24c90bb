//! Refunds in the store: what requesting one returns and how it fails, for
//! both backends. On PostgreSQL the one implementation is the SQL function
//! `cobro.request_refund` (migrations/postgres/…_refunds.sql); SQLite runs
//! the same steps from Rust under `BEGIN IMMEDIATE`. On both, the insert
//! trigger `refunds_within_capture` is the guard: a refund of anything but
//! an APROBADO charge, or one that would take the non-failed refunds past
//! the captured amount, is refused by the database whoever writes it.

use serde::Serialize;
use uuid::Uuid;

use super::{Attempt, Db, Store, StoreError, lite, pg};
use crate::domain::InputError;
use crate::state::State;

/// A refund asked for: its id, its key and its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Refunded {
    pub refund_id: Uuid,
    pub idempotency_key: Uuid,
    pub state: State,
    /// `false` when this key already asked for this refund: the existing
    /// refund is returned and nothing new is written.
    pub created: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    #[error(transparent)]
    Invalid(#[from] InputError),
    #[error("{0}")]
    NotFound(String),
    /// Only an APROBADO charge is refunded (not a pending, doubtful or
    /// declined one, and not a refund).
    #[error("{0}")]
    NotRefundable(String),
    /// The refunds that have not failed would exceed the captured amount.
    #[error("{0}")]
    ExceedsCapture(String),
    /// The key was already used for another refund or a charge.
    #[error("{0}")]
    KeyReused(String),
    #[error("{}", super::described(.0))]
    /// Not a `#[source]`: the message already words the driver's error,
    /// and a chain printed with `{:#}` would say it twice.
    Db(sqlx::Error),
}

impl RefundError {
    /// Maps the codes both backends raise (PostgreSQL SQLSTATEs; the same
    /// codes lead SQLite's trigger messages).
    pub(crate) fn from_db(e: sqlx::Error) -> Self {
        let Some(db) = e.as_database_error() else {
            return RefundError::Db(e);
        };
        let msg = db.message().to_owned();
        let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
        let lead = msg.split(':').next().unwrap_or_default();
        let text = || {
            msg.split_once(": ")
                .filter(|(l, _)| l.starts_with("CB"))
                .map_or(msg.clone(), |(_, r)| r.to_owned())
        };
        match (code.as_str(), lead) {
            ("CB404", _) | (_, "CB404") => RefundError::NotFound(text()),
            ("CB007", _) | (_, "CB007") => RefundError::NotRefundable(text()),
            ("CB008", _) | (_, "CB008") => RefundError::ExceedsCapture(text()),
            ("CB409", _) => RefundError::KeyReused(msg),
            ("22023", _) | (_, "invalid currency" | "invalid amount_minor") => {
                let rest = msg.strip_prefix("invalid ").unwrap_or(&msg);
                let (field, reason) = rest.split_once(": ").unwrap_or(("input", rest));
                RefundError::Invalid(InputError::new(field_name(field), reason.to_owned()))
            }
            _ => RefundError::Db(e),
        }
    }
}

fn field_name(f: &str) -> &'static str {
    match f {
        "amount_minor" => "amount_minor",
        "idempotency_key" => "idempotency_key",
        "currency" => "currency",
        _ => "input",
    }
}

impl From<sqlx::Error> for RefundError {
    fn from(e: sqlx::Error) -> Self {
        RefundError::Db(e)
    }
}

/// A store step's failure inside a refund's transaction: the driver's
/// error as it is, anything else (a corrupt row) worded as the driver's.
impl From<StoreError> for RefundError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Db(e) => RefundError::Db(e),
            other => RefundError::Db(sqlx::Error::Protocol(other.to_string())),
        }
    }
}

impl Store {
    /// Asks for a refund of `amount` of the APROBADO charge `attempt_id`
    /// with the refund's own `key` (a retry with the same key and amount
    /// returns the same refund). The database refuses a refund of anything
    /// else, or one that would take the refunds that have not failed past
    /// the captured amount, even under concurrent requests.
    pub async fn request_refund(
        &self,
        attempt_id: Uuid,
        amount: crate::domain::Amount,
        key: crate::domain::IdempotencyKey,
        actor: &str,
    ) -> Result<Refunded, RefundError> {
        let (amount, key) = (amount.minor(), key.uuid());
        match &self.db {
            Db::Pg(p) => pg::request_refund(p, attempt_id, amount, key, actor).await,
            Db::Lite(p) => lite::refund::request_refund(p, attempt_id, amount, key, actor).await,
        }
    }

    /// The refunds of a charge attempt, oldest first.
    pub async fn refunds_of(&self, attempt_id: Uuid) -> Result<Vec<Attempt>, StoreError> {
        on_db!(self, refunds_of(attempt_id))
    }
}
