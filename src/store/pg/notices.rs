//! PostgreSQL SQL for customer notices (see `store::notices`).

use sqlx::PgPool;

use crate::store::{Notice, StoreError};

/// Every notice (or the unacknowledged), oldest first.
pub(crate) async fn list(pool: &PgPool, unacked_only: bool) -> Result<Vec<Notice>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, order_id, attempt_id, kind, decline_code, next_retry_at, created_at, acked_at, acked_by,
                delivery_attempts, next_delivery_at, last_status, last_error, delivered_at, failed_at
           FROM cobro.notices WHERE NOT $1 OR acked_at IS NULL ORDER BY id",
    )
    .bind(unacked_only)
    .fetch_all(pool)
    .await?)
}

/// Acknowledges a notice once; false when it was already.
pub(crate) async fn ack(pool: &PgPool, id: i64, by: &str) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE cobro.notices SET acked_at = now(), acked_by = $2 WHERE id = $1 AND acked_at IS NULL",
    )
    .bind(id)
    .bind(by)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}
