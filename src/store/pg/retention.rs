//! PostgreSQL SQL for retention (see `store::retention`).

use std::time::Duration;

use sqlx::PgPool;

use crate::store::StoreError;
use crate::store::retention::Purged;

/// Webhook events, then rejected deliveries: `$1` seconds old, at most `$2`
/// of each, skipping rows another worker is deleting.
const PURGE: [&str; 2] = [
    "DELETE FROM cobro.webhook_events WHERE event_id IN (
        SELECT event_id FROM cobro.webhook_events
         WHERE received_at < now() - make_interval(secs => $1::float8)
         ORDER BY received_at LIMIT $2
         FOR UPDATE SKIP LOCKED)",
    "DELETE FROM cobro.rejected_webhooks WHERE id IN (
        SELECT id FROM cobro.rejected_webhooks
         WHERE received_at < now() - make_interval(secs => $1::float8)
         ORDER BY received_at LIMIT $2
         FOR UPDATE SKIP LOCKED)",
];

/// Deletes up to `batch` of the oldest expired rows of each table.
pub(crate) async fn purge_batch(
    pool: &PgPool,
    older_than: Duration,
    batch: i64,
) -> Result<Purged, StoreError> {
    let secs = older_than.as_secs_f64();
    let mut purged = [0; 2];
    for (n, sql) in purged.iter_mut().zip(PURGE) {
        *n = sqlx::query(sql)
            .bind(secs)
            .bind(batch)
            .execute(pool)
            .await?
            .rows_affected();
    }
    let [events, rejected] = purged;
    Ok(Purged { events, rejected })
}
