//! SQLite SQL for poison wake-ups (see `store::poison`); the transaction
//! holds the write lock (`BEGIN IMMEDIATE`), times are milliseconds.

use sqlx::{Row, SqliteConnection};
use uuid::Uuid;

use super::ms;
use crate::store::StoreError;
use crate::store::poison::{Failed, Seen, details};

/// What is known of the attempt's failures, and the case it points to.
pub(crate) async fn seen(
    tx: &mut SqliteConnection,
    attempt_id: Uuid,
) -> Result<Option<(Seen, Option<i64>)>, StoreError> {
    let row = sqlx::query(
        "SELECT w.failures, w.first_failed_at, w.last_failed_at, w.case_id,
                c.resolved_at IS NULL AND c.id IS NOT NULL AS open
           FROM wake_failures w LEFT JOIN recon_cases c ON c.id = w.case_id
          WHERE w.attempt_id = ?1",
    )
    .bind(attempt_id.hyphenated().to_string())
    .fetch_optional(&mut *tx)
    .await?;
    let Some(r) = row else {
        return Ok(None);
    };
    let case: Option<i64> = r.try_get("case_id")?;
    let open: bool = r.try_get("open")?;
    let seen = Seen {
        failures: r.try_get("failures")?,
        first_failed_at: ms(r.try_get("first_failed_at")?),
        last_failed_at: ms(r.try_get("last_failed_at")?),
        quarantined: case.is_some() && open,
        released: case.is_some() && !open,
    };
    Ok(Some((seen, case)))
}

/// Opens the attempt's `poison_wakeup` case; its id.
pub(crate) async fn open_case(
    tx: &mut SqliteConnection,
    f: &Failed<'_>,
) -> Result<i64, StoreError> {
    let id = f.attempt_id.hyphenated().to_string();
    let state: String = sqlx::query_scalar("SELECT state FROM payment_attempts WHERE id = ?1")
        .bind(&id)
        .fetch_optional(&mut *tx)
        .await?
        .unwrap_or_default();
    Ok(sqlx::query_scalar(
        "INSERT INTO recon_cases
            (kind, dedupe_key, order_id, attempt_id, details, window_from, window_to, opened_at)
         SELECT 'poison_wakeup', 'poison_wakeup:' || a.id || ':' || ?2, a.order_id, a.id,
                ?3, ?2, max(?4, ?2 + 1), ?4
           FROM payment_attempts a WHERE a.id = ?1
         RETURNING id",
    )
    .bind(&id)
    .bind(f.next.first_failed_at.timestamp_millis())
    .bind(details(f.error, &f.next, &state).to_string())
    .bind(f.now.timestamp_millis())
    .fetch_one(&mut *tx)
    .await?)
}

/// The attempt's failure count, last error and case.
pub(crate) const WRITE: &str = "INSERT INTO wake_failures
            (attempt_id, failures, first_failed_at, last_failed_at, last_error, case_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (attempt_id) DO UPDATE SET
            failures = excluded.failures, first_failed_at = excluded.first_failed_at,
            last_failed_at = excluded.last_failed_at, last_error = excluded.last_error,
            case_id = excluded.case_id";
