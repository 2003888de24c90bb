//! Poison wake-ups on SQLite (see `store::poison`), under `BEGIN IMMEDIATE`.

use chrono::{DateTime, Utc};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::ms;
use crate::store::StoreError;
use crate::store::poison::{Seen, WakeFailure, details, next};

pub(crate) async fn record(
    pool: &SqlitePool,
    attempt_id: Uuid,
    error: &str,
    after: u32,
) -> Result<WakeFailure, StoreError> {
    let id = attempt_id.hyphenated().to_string();
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let now: i64 = sqlx::query_scalar(concat!("SELECT ", now_ms!()))
        .fetch_one(&mut *tx)
        .await?;
    let now: DateTime<Utc> = ms(now);
    let row = sqlx::query(
        "SELECT w.failures, w.first_failed_at, w.last_failed_at, w.case_id,
                c.resolved_at IS NULL AND c.id IS NOT NULL AS open
           FROM wake_failures w LEFT JOIN recon_cases c ON c.id = w.case_id
          WHERE w.attempt_id = ?1",
    )
    .bind(&id)
    .fetch_optional(&mut *tx)
    .await?;
    let (seen, old_case) = match &row {
        Some(r) => {
            let case: Option<i64> = r.try_get("case_id")?;
            let open: bool = r.try_get("open")?;
            let seen = Seen {
                failures: r.try_get("failures")?,
                first_failed_at: ms(r.try_get("first_failed_at")?),
                last_failed_at: ms(r.try_get("last_failed_at")?),
                quarantined: case.is_some() && open,
                released: case.is_some() && !open,
            };
            (Some(seen), case)
        }
        None => (None, None),
    };
    let n = next(seen, now, after);
    let mut case_id = if n.keep_case { old_case } else { None };
    let mut opened = None;
    if n.quarantine {
        let state: String = sqlx::query_scalar("SELECT state FROM payment_attempts WHERE id = ?1")
            .bind(&id)
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or_default();
        let first = n.first_failed_at.timestamp_millis();
        let case: i64 = sqlx::query_scalar(
            "INSERT INTO recon_cases
                (kind, dedupe_key, order_id, attempt_id, details, window_from, window_to, opened_at)
             SELECT 'poison_wakeup', 'poison_wakeup:' || a.id || ':' || ?2, a.order_id, a.id,
                    ?3, ?2, max(?4, ?2 + 1), ?4
               FROM payment_attempts a WHERE a.id = ?1
             RETURNING id",
        )
        .bind(&id)
        .bind(first)
        .bind(details(error, &n, &state).to_string())
        .bind(now.timestamp_millis())
        .fetch_one(&mut *tx)
        .await?;
        case_id = Some(case);
        opened = Some(case);
    }
    sqlx::query(
        "INSERT INTO wake_failures
            (attempt_id, failures, first_failed_at, last_failed_at, last_error, case_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (attempt_id) DO UPDATE SET
            failures = excluded.failures, first_failed_at = excluded.first_failed_at,
            last_failed_at = excluded.last_failed_at, last_error = excluded.last_error,
            case_id = excluded.case_id",
    )
    .bind(&id)
    .bind(n.failures)
    .bind(n.first_failed_at.timestamp_millis())
    .bind(now.timestamp_millis())
    .bind(error)
    .bind(case_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(WakeFailure {
        failures: n.failures,
        quarantined: opened,
    })
}
