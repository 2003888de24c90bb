//! SQLite SQL for retention (see `store::retention`). Each batch runs under
//! `BEGIN IMMEDIATE` like every other write here.

use std::time::Duration;

use sqlx::SqlitePool;

use crate::store::StoreError;
use crate::store::retention::Purged;

/// Webhook events, then rejected deliveries: `?1` milliseconds old, at
/// most `?2` of each.
const PURGE: [&str; 2] = [
    concat!(
        "DELETE FROM webhook_events WHERE event_id IN (
            SELECT event_id FROM webhook_events
             WHERE received_at < ",
        now_ms!(),
        " - ?1 ORDER BY received_at LIMIT ?2)"
    ),
    concat!(
        "DELETE FROM rejected_webhooks WHERE id IN (
            SELECT id FROM rejected_webhooks
             WHERE received_at < ",
        now_ms!(),
        " - ?1 ORDER BY received_at LIMIT ?2)"
    ),
];

/// Deletes up to `batch` of the oldest expired rows of each table.
pub(crate) async fn purge_batch(
    pool: &SqlitePool,
    older_than: Duration,
    batch: i64,
) -> Result<Purged, StoreError> {
    let ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let mut purged = [0; 2];
    for (n, sql) in purged.iter_mut().zip(PURGE) {
        *n = sqlx::query(sql)
            .bind(ms)
            .bind(batch)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    }
    tx.commit().await?;
    let [events, rejected] = purged;
    Ok(Purged { events, rejected })
}
