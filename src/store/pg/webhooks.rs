//! PostgreSQL SQL for gateway webhooks (see `store::webhooks`).

use sqlx::{PgConnection, PgPool, Postgres};

use uuid::Uuid;

use crate::store::webhooks::{self, IncomingEvent, Rejected};
use crate::store::{Attempt, StoreError};

/// Stores a new event as `ignored`; false when its id is stored already.
pub(crate) async fn insert_event(
    tx: &mut PgConnection,
    ev: &IncomingEvent,
) -> Result<bool, StoreError> {
    // The raw body as text: jsonb would refuse a valid `\u0000` escape.
    let inserted: Option<String> = sqlx::query_scalar(
        "INSERT INTO cobro.webhook_events (event_id, event_type, idempotency_key, outcome, payload)
         VALUES ($1, $2, $3, 'ignored', $4)
         ON CONFLICT (event_id) DO NOTHING
         RETURNING event_id",
    )
    .bind(&ev.event_id)
    .bind(&ev.event_type)
    .bind(ev.key)
    .bind(&ev.payload)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(inserted.is_some())
}

pub(crate) async fn set_outcome(
    tx: &mut PgConnection,
    event_id: &str,
    outcome: &str,
    detail: Option<String>,
    attempt: Option<Uuid>,
) -> Result<(), StoreError> {
    let sql = "UPDATE cobro.webhook_events SET outcome = $2, detail = $3, attempt_id = $4
          WHERE event_id = $1";
    webhooks::set_outcome::<Postgres, _>(tx, sql, event_id, outcome, detail, attempt).await
}

/// The attempt with this key, its row locked (`FOR UPDATE`).
pub(crate) async fn attempt_by_key(
    tx: &mut PgConnection,
    key: Uuid,
) -> Result<Option<Attempt>, StoreError> {
    Ok(
        sqlx::query_as(
            "SELECT * FROM cobro.payment_attempts WHERE idempotency_key = $1 FOR UPDATE",
        )
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?,
    )
}

/// The scheduled retries that charge `payment_method`, their rows locked.
pub(crate) async fn retries_charging(
    tx: &mut PgConnection,
    payment_method: &str,
) -> Result<Vec<Attempt>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT a.* FROM cobro.payment_attempts a
          WHERE a.state = 'RECHAZADO' AND a.kind <> 'refund' AND a.next_action_at IS NOT NULL
            AND coalesce((SELECT u.payment_method FROM cobro.payment_method_updates u
                           WHERE u.order_id = a.order_id ORDER BY u.id DESC LIMIT 1),
                         a.payment_method) = $1
          ORDER BY a.id FOR UPDATE OF a",
    )
    .bind(payment_method)
    .fetch_all(&mut *tx)
    .await?)
}

/// Per backend: the headers are jsonb and the body size an int here (SQLite: text, i64).
pub(crate) async fn record_rejected(pool: &PgPool, r: &Rejected<'_>) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO cobro.rejected_webhooks (reason, detail, headers, body_size, minute)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (reason, minute) DO NOTHING",
    )
    .bind(r.reason)
    .bind(r.detail)
    .bind(sqlx::types::Json(r.headers))
    .bind(i32::try_from(r.body_size).unwrap_or(i32::MAX))
    .bind(r.minute)
    .execute(pool)
    .await?;
    Ok(())
}

/// (accepted events, rejected deliveries) stored so far.
pub(crate) const COUNTS: &str = "SELECT (SELECT count(*) FROM cobro.webhook_events),
                (SELECT count(*) FROM cobro.rejected_webhooks)";

/// The rejected deliveries' reasons, oldest first.
pub(crate) const REJECTED_REASONS: &str = "SELECT reason FROM cobro.rejected_webhooks ORDER BY id";

/// The attempt whose recorded gateway object (a PaymentIntent) is `gateway_ref`.
pub(crate) async fn by_gateway_ref(
    pool: &PgPool,
    gateway_ref: &str,
) -> Result<Option<Attempt>, StoreError> {
    Ok(
        sqlx::query_as("SELECT * FROM cobro.payment_attempts WHERE gateway_ref = $1")
            .bind(gateway_ref)
            .fetch_optional(pool)
            .await?,
    )
}
