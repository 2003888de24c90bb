//! PostgreSQL SQL for poison wake-ups (see `store::poison`).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::store::StoreError;
use crate::store::poison::{Failed, Seen, details};

/// What is known of the attempt's failures, its row locked, and the case
/// it points to.
pub(crate) async fn seen(
    tx: &mut PgConnection,
    attempt_id: Uuid,
) -> Result<Option<(Seen, Option<i64>)>, StoreError> {
    type Row = (i32, DateTime<Utc>, DateTime<Utc>, Option<i64>, Option<bool>);
    let row: Option<Row> = sqlx::query_as(
        "SELECT w.failures, w.first_failed_at, w.last_failed_at, w.case_id, c.resolved_at IS NULL
           FROM cobro.wake_failures w LEFT JOIN cobro.recon_cases c ON c.id = w.case_id
          WHERE w.attempt_id = $1 FOR UPDATE OF w",
    )
    .bind(attempt_id)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|(failures, first, last, case, open)| {
        let seen = Seen {
            failures,
            first_failed_at: first,
            last_failed_at: last,
            quarantined: case.is_some() && open == Some(true),
            released: case.is_some() && open != Some(true),
        };
        (seen, case)
    }))
}

/// Opens the attempt's `poison_wakeup` case; its id.
pub(crate) async fn open_case(tx: &mut PgConnection, f: &Failed<'_>) -> Result<i64, StoreError> {
    let state: String =
        sqlx::query_scalar("SELECT state FROM cobro.payment_attempts WHERE id = $1")
            .bind(f.attempt_id)
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or_default();
    Ok(sqlx::query_scalar(
        "INSERT INTO cobro.recon_cases
            (kind, dedupe_key, order_id, attempt_id, details, window_from, window_to)
         SELECT 'poison_wakeup', 'poison_wakeup:' || a.id || ':' || $2, a.order_id, a.id,
                $3, $4, $5
           FROM cobro.payment_attempts a WHERE a.id = $1
         RETURNING id",
    )
    .bind(f.attempt_id)
    .bind(f.next.first_failed_at.timestamp_millis().to_string())
    .bind(details(f.error, &f.next, &state))
    .bind(f.next.first_failed_at)
    .bind(
        f.now
            .max(f.next.first_failed_at + chrono::TimeDelta::milliseconds(1)),
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// The attempt's failure count, last error and case.
pub(crate) const WRITE: &str = "INSERT INTO cobro.wake_failures
            (attempt_id, failures, first_failed_at, last_failed_at, last_error, case_id)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (attempt_id) DO UPDATE SET
            failures = EXCLUDED.failures, first_failed_at = EXCLUDED.first_failed_at,
            last_failed_at = EXCLUDED.last_failed_at, last_error = EXCLUDED.last_error,
            case_id = EXCLUDED.case_id";
