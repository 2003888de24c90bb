//! The main sweep on SQLite, and the steps every sweep shares (the review
//! sweep's statement is in `review.rs`, run from `store::review`).

use std::time::Duration;

use chrono::Utc;
use sqlx::sqlite::SqliteRow;
use sqlx::{FromRow, SqlitePool};
use uuid::Uuid;

use super::{push_wake, uuid};
use crate::state::State;
use crate::store::StoreError;

pub(in crate::store) async fn sweep(
    pool: &SqlitePool,
    grace: Duration,
    every: Duration,
    limit: i64,
) -> Result<u64, StoreError> {
    let sql = concat!(
        "UPDATE payment_attempts SET woken_at = ",
        now_ms!(),
        " WHERE id IN (
            SELECT id FROM payment_attempts
             WHERE ((lease_owner IS NOT NULL AND next_action_at <= ",
        now_ms!(),
        ")
                 OR (lease_owner IS NULL AND state IN ('PENDIENTE', 'DESCONOCIDO', 'RECHAZADO')
                     AND next_action_at <= ",
        now_ms!(),
        " - ?1)
                 OR (lease_owner IS NULL AND state IN ('PENDIENTE', 'DESCONOCIDO')
                     AND next_action_at IS NULL AND updated_at <= ",
        now_ms!(),
        " - ?1))
               AND state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'RECHAZADO')
               AND (state <> 'RECHAZADO' OR next_action_at IS NOT NULL)
               AND parked_since IS NULL
               AND (woken_at IS NULL OR woken_at <= ",
        now_ms!(),
        " - ?2)
               -- late behind a backlog, not lost: its own wake-up is queued and due
               -- (the expression of index jobs_pending_wake_target, named: left
               -- to itself SQLite searched idx_jobs_status_run_at instead and
               -- read every pending job per attempt, 51 s a sweep behind a
               -- 14,000-charge backlog)
               AND NOT EXISTS (SELECT 1 FROM Jobs j INDEXED BY jobs_pending_wake_target
                                WHERE CASE WHEN json_valid(CAST(j.job AS TEXT))
                                           THEN json_extract(CAST(j.job AS TEXT), '$.attempt_id') END
                                      -- `+` drops the column's TEXT affinity, which
                                      -- would keep SQLite off the index
                                      = +payment_attempts.id
                                  AND j.status = 'Pending' AND j.run_at <= unixepoch())
",
        due_last!(),
        ")
         RETURNING id, state"
    );
    // Priority 0 for a charge not sent yet, 1 for the rest (as PostgreSQL's).
    run(
        pool,
        sql,
        grace,
        every,
        limit,
        |(id, state): &(String, String)| {
            Ok((uuid(id)?, i32::from(state != State::Pendiente.as_str())))
        },
    )
    .await
}

/// Runs a sweep's `UPDATE … RETURNING` in one write transaction: it binds
/// the grace and the re-wake interval in milliseconds, then the limit; each
/// row it returns gets a wake-up, due now, of the attempt and priority
/// `wake` reads from it. Returns how many attempts it woke.
pub(crate) async fn run<R>(
    pool: &SqlitePool,
    sql: &'static str,
    grace: Duration,
    every: Duration,
    limit: i64,
    wake: impl Fn(&R) -> Result<(Uuid, i32), StoreError>,
) -> Result<u64, StoreError>
where
    R: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
{
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let woken: Vec<R> = sqlx::query_as(sql)
        .bind(i64::try_from(grace.as_millis()).unwrap_or(i64::MAX))
        .bind(i64::try_from(every.as_millis()).unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
    for row in &woken {
        let (id, priority) = wake(row)?;
        push_wake(&mut tx, id, Utc::now(), priority).await?;
    }
    tx.commit().await?;
    Ok(woken.len() as u64)
}
