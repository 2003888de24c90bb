//! PostgreSQL's part of the wake-up backend: LISTEN/NOTIFY on apalis'
//! insert trigger, and each fetch one statement.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{FromRow, Row};
use tracing::warn;

use super::{Fetch, Notices, Outcome, WakeConfig, WakeDb, Wakeup, target};
use crate::store::Attempt;

/// The channel apalis' insert trigger notifies (`apalis.notify_new_jobs`:
/// only for jobs due at their insert).
const CHANNEL: &str = "apalis::job::insert";

#[derive(Clone)]
pub struct PgDb(pub PgPool);

fn split(acks: &[(String, Outcome)]) -> (Vec<String>, Vec<&'static str>) {
    acks.iter().map(|(id, o)| (id.clone(), o.status())).unzip()
}

impl WakeDb for PgDb {
    fn register(
        &self,
        worker: String,
        cfg: &WakeConfig,
    ) -> BoxFuture<'static, Result<Option<Notices>, sqlx::Error>> {
        let (pool, queue, dead_for) = (self.0.clone(), cfg.queue, cfg.orphaned_after);
        async move {
            let mut tx = pool.begin().await?;
            // A new backend has nothing in flight: whatever is still taken
            // under this name was left by an earlier process of the same
            // name (a restarted container), which the orphan recovery below
            // would never see once the name is alive again.
            sqlx::query(
                "UPDATE apalis.jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL,
                        attempts = attempts + 1
                  WHERE lock_by = $1 AND status IN ('Running', 'Queued')",
            )
            .bind(&worker)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO apalis.workers (id, worker_type, storage_name, layers, last_seen, started_at)
                 VALUES ($1, $2, 'cobro', '', now(), now())
                 ON CONFLICT (id) DO UPDATE SET worker_type = EXCLUDED.worker_type, last_seen = now()",
            )
            .bind(&worker)
            .bind(queue)
            .execute(&mut *tx)
            .await?;
            reenqueue_orphaned(&mut tx, queue, dead_for).await?;
            tx.commit().await?;
            // Its own connection, outside the pool: a listener keeps the
            // connection it takes, which would shrink COBRO_DB_CONNECTIONS.
            let own = PgPoolOptions::new()
                .max_connections(1)
                .connect_lazy_with((*pool.connect_options()).clone());
            let mut listener = PgListener::connect_with(&own).await?;
            listener.listen(CHANNEL).await?;
            let notices: Notices = Box::pin(
                listener
                    .into_stream()
                    .map(move |n| n.map(|n| is_for(n.payload(), queue))),
            );
            Ok(Some(notices))
        }
        .boxed()
    }

    fn fetch(&self, worker: String, cfg: &WakeConfig, acks: Vec<(String, Outcome)>) -> Fetch {
        let (pool, queue, batch) = (self.0.clone(), cfg.queue, cfg.batch as i64);
        async move {
            let (ids, statuses) = split(&acks);
            let rows = sqlx::query(FETCH)
                .bind(&worker)
                .bind(queue)
                .bind(batch)
                .bind(&ids)
                .bind(&statuses)
                .fetch_all(&pool)
                .await?;
            rows.iter().map(wakeup).collect()
        }
        .boxed()
    }

    fn release(
        &self,
        worker: String,
        acks: Vec<(String, Outcome)>,
        unclaimed: Vec<String>,
    ) -> BoxFuture<'static, Result<(), sqlx::Error>> {
        let pool = self.0.clone();
        async move {
            let (ids, statuses) = split(&acks);
            sqlx::query(
                "WITH acked AS (
                    UPDATE apalis.jobs j
                       SET status = a.status, attempts = j.attempts + 1, done_at = now()
                      FROM unnest($2::text[], $3::text[]) AS a(id, status)
                     WHERE j.id = a.id AND j.lock_by = $1 AND j.status = 'Running'
                 )
                 UPDATE apalis.jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL
                  WHERE id = ANY($4) AND lock_by = $1 AND status = 'Running'",
            )
            .bind(&worker)
            .bind(&ids)
            .bind(&statuses)
            .bind(&unclaimed)
            .execute(&pool)
            .await
            .map(|_| ())
        }
        .boxed()
    }

    fn beat(
        &self,
        worker: String,
        cfg: &WakeConfig,
    ) -> BoxFuture<'static, Result<(), sqlx::Error>> {
        let (pool, queue, dead_for) = (self.0.clone(), cfg.queue, cfg.orphaned_after);
        async move {
            let mut tx = pool.begin().await?;
            sqlx::query("UPDATE apalis.workers SET last_seen = now() WHERE id = $1")
                .bind(&worker)
                .execute(&mut *tx)
                .await?;
            reenqueue_orphaned(&mut tx, queue, dead_for).await?;
            tx.commit().await
        }
        .boxed()
    }
}

/// Acknowledges the finished wake-ups, then takes up to `$3` due ones and
/// reads their attempts, in one statement (one transaction). The
/// acknowledgement only touches this worker's own `Running` jobs. Taking
/// is apalis' `get_jobs` selection (its partial index
/// `idx_apalis_jobs_fetch_partial`), marked `Running` at once.
const FETCH: &str = "
WITH acked AS (
    UPDATE apalis.jobs j
       SET status = a.status,
           attempts = j.attempts + 1,
           done_at = now()
      FROM unnest($4::text[], $5::text[]) AS a(id, status)
     WHERE j.id = a.id AND j.lock_by = $1 AND j.status = 'Running'
), picked AS (
    SELECT id FROM apalis.jobs
     WHERE (status = 'Pending' OR (status = 'Failed' AND attempts < max_attempts))
       AND run_at < now()
       AND job_type = $2
     ORDER BY priority DESC, run_at ASC
     LIMIT $3
     FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE apalis.jobs j
       SET status = 'Running', lock_by = $1, lock_at = now()
      FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.job, j.priority, j.run_at
)
SELECT t.id AS job_id, t.job AS job_payload, now() AS db_now, a.*
  FROM taken t
  LEFT JOIN cobro.payment_attempts a
    ON a.id = cobro.wake_target(t.job)
 ORDER BY t.priority DESC, t.run_at ASC";

fn wakeup(row: &PgRow) -> Result<Wakeup, sqlx::Error> {
    let job_id: String = row.try_get("job_id")?;
    let payload: Vec<u8> = row.try_get("job_payload")?;
    let found: Option<uuid::Uuid> = row.try_get("id")?;
    // A row that does not decode fails only its own wake-up: the handler
    // loads it, fails, and the poison count takes over; the batch goes on.
    let seen = match found {
        Some(id) => match Attempt::from_row(row).and_then(|a| Ok((a, row.try_get("db_now")?))) {
            Ok((a, now)) => Some((Box::new(a), now)),
            Err(e) => {
                warn!(attempt = %id, error = %e, "a fetched attempt did not decode; its handler loads it");
                None
            }
        },
        None => None,
    };
    Ok(Wakeup {
        job_id,
        attempt_id: target(&payload),
        seen,
    })
}

fn is_for(payload: &str, queue: &str) -> bool {
    #[derive(Deserialize)]
    struct Insert<'a> {
        job_type: &'a str,
    }
    serde_json::from_str::<Insert>(payload).is_ok_and(|i| i.job_type == queue)
}

async fn reenqueue_orphaned(
    tx: &mut sqlx::PgConnection,
    queue: &str,
    dead_for: std::time::Duration,
) -> Result<(), sqlx::Error> {
    apalis_postgres::queries::reenqueue_orphaned(tx, queue, dead_for.as_secs().max(1))
        .await
        .map(|_| ())
        .map_err(|e| match e {
            apalis_postgres::Error::Database(db) => db,
            other => sqlx::Error::Protocol(other.to_string()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_are_filtered_by_queue() {
        assert!(is_for(
            r#"{"job_type":"cobro.charge","id":"01J","run_at":"x"}"#,
            "cobro.charge"
        ));
        assert!(!is_for(
            r#"{"job_type":"cobro.refund","id":"01J"}"#,
            "cobro.charge"
        ));
        assert!(!is_for("not json", "cobro.charge"));
    }
}
