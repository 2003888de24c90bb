//! SQLite SQL for gateway webhooks (see `store::webhooks`). The whole
//! transaction runs under `BEGIN IMMEDIATE` (`store::tx`), which locks the
//! database for writing: the attempt cannot change between the read and
//! the write.

use sqlx::{Sqlite, SqliteConnection, SqlitePool};

use uuid::Uuid;

use super::{attempt_by, attempts_by};
use crate::store::webhooks::{self, IncomingEvent, Rejected};
use crate::store::{Attempt, StoreError};

/// Stores a new event as `ignored`; false when its id is stored already.
pub(crate) async fn insert_event(
    tx: &mut SqliteConnection,
    ev: &IncomingEvent,
) -> Result<bool, StoreError> {
    let inserted = sqlx::query(concat!(
        "INSERT INTO webhook_events (event_id, event_type, idempotency_key, outcome, payload, received_at)
         VALUES (?1, ?2, ?3, 'ignored', ?4, ",
        now_ms!(),
        ") ON CONFLICT (event_id) DO NOTHING"
    ))
    .bind(&ev.event_id)
    .bind(&ev.event_type)
    .bind(ev.key.map(|k| k.hyphenated().to_string()))
    .bind(&ev.payload)
    .execute(&mut *tx)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

pub(crate) async fn set_outcome(
    tx: &mut SqliteConnection,
    event_id: &str,
    outcome: &str,
    detail: Option<String>,
    attempt: Option<Uuid>,
) -> Result<(), StoreError> {
    let sql =
        "UPDATE webhook_events SET outcome = ?2, detail = ?3, attempt_id = ?4 WHERE event_id = ?1";
    let attempt = attempt.map(|id| id.hyphenated().to_string());
    webhooks::set_outcome::<Sqlite, _>(tx, sql, event_id, outcome, detail, attempt).await
}

/// The attempt with this key (the transaction holds the write lock).
pub(crate) async fn attempt_by_key(
    tx: &mut SqliteConnection,
    key: Uuid,
) -> Result<Option<Attempt>, StoreError> {
    let sql = "SELECT * FROM payment_attempts WHERE idempotency_key = ?1";
    attempt_by(&mut *tx, sql, &key.hyphenated().to_string()).await
}

/// The scheduled retries that charge `payment_method` (the write lock is
/// held).
pub(crate) async fn retries_charging(
    tx: &mut SqliteConnection,
    payment_method: &str,
) -> Result<Vec<Attempt>, StoreError> {
    let sql = "SELECT a.* FROM payment_attempts a
          WHERE a.state = 'RECHAZADO' AND a.kind <> 'refund' AND a.next_action_at IS NOT NULL
            AND coalesce((SELECT u.payment_method FROM payment_method_updates u
                           WHERE u.order_id = a.order_id ORDER BY u.id DESC LIMIT 1),
                         a.payment_method) = ?1
          ORDER BY a.id";
    attempts_by(&mut *tx, sql, payment_method).await
}

/// Per backend: the headers are text and the body size an i64 here (PostgreSQL: jsonb, int).
pub(crate) async fn record_rejected(pool: &SqlitePool, r: &Rejected<'_>) -> Result<(), StoreError> {
    sqlx::query(concat!(
        "INSERT INTO rejected_webhooks (reason, detail, headers, body_size, minute, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ",
        now_ms!(),
        ") ON CONFLICT (reason, minute) DO NOTHING"
    ))
    .bind(r.reason)
    .bind(r.detail)
    .bind(r.headers.to_string())
    .bind(i64::try_from(r.body_size).unwrap_or(i64::MAX))
    .bind(r.minute)
    .execute(pool)
    .await?;
    Ok(())
}

/// (accepted events, rejected deliveries) stored so far.
pub(crate) const COUNTS: &str =
    "SELECT (SELECT count(*) FROM webhook_events), (SELECT count(*) FROM rejected_webhooks)";

/// The rejected deliveries' reasons, oldest first.
pub(crate) const REJECTED_REASONS: &str = "SELECT reason FROM rejected_webhooks ORDER BY id";

/// The attempt whose recorded gateway object (a PaymentIntent) is `gateway_ref`.
pub(crate) async fn by_gateway_ref(
    pool: &SqlitePool,
    gateway_ref: &str,
) -> Result<Option<crate::store::Attempt>, StoreError> {
    attempt_by(
        pool,
        "SELECT * FROM payment_attempts WHERE gateway_ref = ?1",
        gateway_ref,
    )
    .await
}
