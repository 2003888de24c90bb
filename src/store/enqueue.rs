//! Enqueue inside the caller's own transaction: the attempt row, its first
//! transition-log row and its wake-up job commit (or roll back) with the
//! app's order.
//!
//! Invariant: the one implementation is the SQL function
//! `cobro.enqueue_charge` (migrations/…_enqueue.sql); Rust calls it, so an
//! app in any language gets exactly the same checks and effects.

use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::{ChargeRequest, IdempotencyKey, InputError};
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
    #[error("{0}")]
    KeyReused(String),
    #[error("{0}")]
    LiveAttempt(String),
    #[error("{0}")]
    AlreadyApproved(String),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

#[derive(sqlx::FromRow)]
struct Row {
    attempt_id: Uuid,
    idempotency_key: Uuid,
    state: String,
    created: bool,
}

/// Inserts the attempt and pushes its wake-up job on `conn`, which may be
/// inside the caller's transaction. On error the caller's transaction is
/// aborted (PostgreSQL semantics) and must be rolled back; nothing is written.
pub async fn enqueue_charge(
    conn: &mut PgConnection,
    req: &ChargeRequest,
) -> Result<Enqueued, EnqueueError> {
    let row: Row = sqlx::query_as("SELECT * FROM cobro.enqueue_charge($1, $2, $3, $4, $5)")
        .bind(req.order_id.as_str())
        .bind(req.amount.minor())
        .bind(req.currency.code())
        .bind(req.key.uuid())
        .bind(req.payment_method.as_ref().map(|p| p.token()))
        .fetch_one(conn)
        .await
        .map_err(classify)?;
    Ok(Enqueued {
        attempt_id: row.attempt_id,
        idempotency_key: IdempotencyKey::from_uuid(row.idempotency_key),
        state: row
            .state
            .parse()
            .map_err(|e: crate::state::UnknownState| sqlx::Error::Decode(e.into()))?,
        created: row.created,
    })
}

fn classify(e: sqlx::Error) -> EnqueueError {
    let Some(db) = e.as_database_error() else {
        return EnqueueError::Db(e);
    };
    let msg = db.message().to_owned();
    match db.code().as_deref() {
        Some("22023") => invalid_from_message(&msg),
        Some("CB409") => EnqueueError::KeyReused(msg),
        Some("CB001") => EnqueueError::LiveAttempt(msg),
        Some("CB002") => EnqueueError::AlreadyApproved(msg),
        _ => EnqueueError::Db(e),
    }
}

/// `invalid <field>: <reason>` from the SQL function, back into an [`InputError`].
fn invalid_from_message(msg: &str) -> EnqueueError {
    const FIELDS: [&str; 5] = [
        "order_id",
        "amount_minor",
        "currency",
        "idempotency_key",
        "payment_method",
    ];
    let rest = msg.strip_prefix("invalid ").unwrap_or(msg);
    let field = FIELDS
        .into_iter()
        .find(|f| rest.starts_with(&format!("{f}:")))
        .unwrap_or("input");
    let reason = rest.split_once(": ").map_or(rest, |(_, r)| r).to_owned();
    EnqueueError::Invalid(InputError::new(field, reason))
}
