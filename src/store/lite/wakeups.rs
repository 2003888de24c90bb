//! The SQLite half of cobro's wake-up backend ([`crate::wakeq::LiteDb`]):
//! apalis-sqlite's `Jobs` and `Workers` tables, fetched, locked, loaded and
//! acknowledged in one `BEGIN IMMEDIATE` transaction. Times in these two
//! tables are apalis' whole seconds (`unixepoch()`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::{Row, SqliteConnection, SqlitePool};
use uuid::Uuid;

use super::{apply_tx, attempt, ms};
use crate::store::change::{self, Applied};
use crate::store::{Attempt, ClaimPlan, StoreError};

/// One wake-up taken: its job id, the attempt its payload names, and that
/// attempt with the database's clock, when it exists.
pub(crate) struct Taken {
    pub job_id: String,
    pub attempt_id: Option<Uuid>,
    pub seen: Option<(Attempt, DateTime<Utc>)>,
    /// `seen` is the row as the fetch's claim wrote it, in a transaction
    /// that took SQLite's write lock at this instant.
    pub claimed: Option<Instant>,
}

/// Acknowledgements as apalis' statuses, as one JSON array of
/// `[job id, status]` pairs for `json_each`.
fn acks_json(acks: &[(String, &str)]) -> String {
    serde_json::to_string(acks).unwrap_or_else(|_| "[]".into())
}

/// Marks this worker's own `Running` jobs with their outcome. The unary
/// `+` keeps the planner on the primary key: apalis' `lock_by` index holds
/// every job this worker has running. A `Failed` one is due again a second
/// later, not in the same fetch that acknowledges it (as on PostgreSQL,
/// where the fetch's snapshot does not see its own acknowledgement).
const ACK: &str = "UPDATE Jobs SET status = a.value ->> 1, attempts = attempts + 1,
                          done_at = unixepoch(),
                          run_at = CASE WHEN a.value ->> 1 = 'Failed'
                                        THEN max(run_at, unixepoch() + 1) ELSE run_at END
                     FROM json_each(?1) a
                    WHERE Jobs.id = a.value ->> 0 AND +Jobs.lock_by = ?2
                      AND Jobs.status = 'Running'";

pub(crate) async fn register(
    pool: &SqlitePool,
    worker: &str,
    queue: &str,
    dead_for: Duration,
) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    // A new backend has nothing in flight: whatever is still taken under
    // this name was left by an earlier process of the same name, which the
    // orphan recovery would never see once the name is alive again.
    sqlx::query(
        "UPDATE Jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL,
                attempts = attempts + 1
          WHERE lock_by = ?1 AND status IN ('Running', 'Queued')",
    )
    .bind(worker)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO Workers (id, worker_type, storage_name, layers, last_seen, started_at)
         VALUES (?1, ?2, 'cobro', '', unixepoch(), unixepoch())
         ON CONFLICT (id) DO UPDATE SET worker_type = excluded.worker_type,
                                        last_seen = excluded.last_seen",
    )
    .bind(worker)
    .bind(queue)
    .execute(&mut *tx)
    .await?;
    reenqueue_orphaned(&mut tx, queue, dead_for).await?;
    tx.commit().await
}

pub(crate) async fn beat(
    pool: &SqlitePool,
    worker: &str,
    queue: &str,
    dead_for: Duration,
) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query("UPDATE Workers SET last_seen = unixepoch() WHERE id = ?1")
        .bind(worker)
        .execute(&mut *tx)
        .await?;
    reenqueue_orphaned(&mut tx, queue, dead_for).await?;
    tx.commit().await
}

async fn reenqueue_orphaned(
    conn: &mut sqlx::SqliteConnection,
    queue: &str,
    dead_for: Duration,
) -> Result<(), sqlx::Error> {
    let dead_for = dead_for.as_secs().max(1) as i64;
    apalis_sqlite::queries::reenqueue_orphaned(
        conn,
        dead_for,
        queue,
        &apalis_core::backend::WorkerFilter::None,
    )
    .await
    .map(|_| ())
}

/// Acknowledges `acks`, then takes up to `batch` due wake-ups of `queue`
/// (apalis-sqlite's selection: `Pending`, or `Failed` with attempts left;
/// highest priority, then oldest, first) for `worker`, reads their
/// attempts, and claims up to `claims.1` of them as `claims.0` plans; one
/// transaction.
pub(crate) async fn take(
    pool: &SqlitePool,
    worker: &str,
    queue: &str,
    batch: usize,
    acks: &[(String, &str)],
    claims: Option<(&dyn ClaimPlan, usize)>,
) -> Result<Vec<Taken>, sqlx::Error> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let began = Instant::now();
    if !acks.is_empty() {
        sqlx::query(ACK)
            .bind(acks_json(acks))
            .bind(worker)
            .execute(&mut *tx)
            .await?;
    }
    let mut jobs = sqlx::query(
        "UPDATE Jobs SET status = 'Running', lock_by = ?1, lock_at = unixepoch()
          WHERE ROWID IN (
                SELECT ROWID FROM (
                    SELECT ROWID, priority, run_at, id FROM (
                        SELECT ROWID, priority, run_at, id FROM Jobs
                         WHERE job_type = ?2 AND status = 'Pending' AND lock_by IS NULL
                           AND run_at <= unixepoch()
                         ORDER BY priority DESC, run_at ASC, id ASC LIMIT ?3)
                    UNION ALL
                    SELECT ROWID, priority, run_at, id FROM (
                        SELECT ROWID, priority, run_at, id FROM Jobs
                         WHERE job_type = ?2 AND status = 'Failed' AND attempts < max_attempts
                           AND run_at <= unixepoch()
                         ORDER BY priority DESC, run_at ASC, id ASC LIMIT ?3))
                 ORDER BY priority DESC, run_at ASC, id ASC LIMIT ?3)
          RETURNING id, CAST(job AS BLOB) AS job, priority, run_at",
    )
    .bind(worker)
    .bind(queue)
    .bind(batch as i64)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| {
        Ok((
            r.try_get::<i64, _>("priority")?,
            r.try_get::<i64, _>("run_at")?,
            r.try_get::<String, _>("id")?,
            crate::domain::Wake::target(&r.try_get::<Vec<u8>, _>("job")?),
        ))
    })
    .collect::<Result<Vec<_>, sqlx::Error>>()?;
    jobs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));

    let targets: Vec<String> = jobs
        .iter()
        .filter_map(|j| j.3.map(|id| id.hyphenated().to_string()))
        .collect();
    let mut seen = HashMap::new();
    if !targets.is_empty() {
        let rows = sqlx::query(concat!(
            "SELECT *, ",
            now_ms!(),
            " AS db_now FROM payment_attempts
              WHERE id IN (SELECT value FROM json_each(?1))"
        ))
        .bind(serde_json::to_string(&targets).unwrap_or_else(|_| "[]".into()))
        .fetch_all(&mut *tx)
        .await?;
        for r in &rows {
            // A row that does not decode fails only its own wake-up: the
            // handler loads it, fails, and the poison count takes over.
            match attempt(r) {
                Ok(a) => {
                    seen.insert(a.id, (a, ms(r.try_get("db_now")?)));
                }
                Err(e) => {
                    let id: String = r.try_get("id").unwrap_or_default();
                    tracing::warn!(attempt = %id, error = %e, "a fetched attempt did not decode; its handler loads it");
                }
            }
        }
    }
    let mut taken: Vec<Taken> = jobs
        .into_iter()
        .map(|(_, _, job_id, attempt_id)| Taken {
            job_id,
            attempt_id,
            seen: attempt_id.and_then(|id| seen.remove(&id)),
            claimed: None,
        })
        .collect();
    if let Some((plan, up_to)) = claims {
        claim(&mut tx, &mut taken, plan, up_to, began).await?;
    }
    tx.commit().await?;
    Ok(taken)
}

/// Claims, in the fetch's transaction, the first `up_to` taken attempts
/// `plan` would claim. A claim that loses its compare-and-set leaves the
/// handler to load the row; one the state machine refuses (no SQL ran)
/// leaves the handler to decide; any other error fails the transaction.
async fn claim(
    tx: &mut SqliteConnection,
    taken: &mut [Taken],
    plan: &dyn ClaimPlan,
    up_to: usize,
    began: Instant,
) -> Result<(), sqlx::Error> {
    let mut left = up_to;
    for t in taken.iter_mut() {
        if left == 0 {
            break;
        }
        let Some((row, now)) = &t.seen else { continue };
        let Some(change) = plan.claim_for(row, *now) else {
            continue;
        };
        let planned = match change::plan(row, &change) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(attempt = %row.id, error = %e, "claiming in the fetch refused; the handler decides");
                continue;
            }
        };
        match apply_tx(tx, row, &change, &planned).await {
            Ok(Applied::Moved(held)) => {
                let at = held.updated_at;
                t.seen = Some((*held, at));
                t.claimed = Some(began);
                left -= 1;
            }
            Ok(Applied::Lost) => t.seen = None,
            Err(StoreError::Db(e)) => return Err(e),
            Err(e) => return Err(sqlx::Error::Protocol(e.to_string())),
        }
    }
    Ok(())
}

/// On shutdown: `acks`, `unclaimed` (taken, never handed out) back to
/// `Pending`, and the claims never sent (`unsent`) given back with
/// `unsent.0`'s change; one transaction.
pub(crate) async fn release(
    pool: &SqlitePool,
    worker: &str,
    acks: &[(String, &str)],
    unclaimed: &[String],
    unsent: Option<(&dyn ClaimPlan, &[Box<Attempt>])>,
) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query(ACK)
        .bind(acks_json(acks))
        .bind(worker)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE Jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL
          WHERE id IN (SELECT value FROM json_each(?1)) AND +lock_by = ?2
            AND status = 'Running'",
    )
    .bind(serde_json::to_string(unclaimed).unwrap_or_else(|_| "[]".into()))
    .bind(worker)
    .execute(&mut *tx)
    .await?;
    if let Some((plan, rows)) = unsent {
        let change = plan.unclaim();
        for row in rows {
            let applied = match change::plan(row, &change) {
                Ok(p) => apply_tx(&mut tx, row, &change, &p).await,
                Err(e) => Err(e.into()),
            };
            match applied {
                Ok(_) => {}
                Err(StoreError::Db(e)) => return Err(e),
                Err(e) => {
                    tracing::warn!(attempt = %row.id, error = %e, "a claim never sent could not be given back; its lease will expire");
                }
            }
        }
    }
    tx.commit().await
}
