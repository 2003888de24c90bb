//! PostgreSQL's part of the wake-up backend: LISTEN/NOTIFY on apalis'
//! insert trigger, and each fetch one transaction.
//!
//! One listening connection per process, shared by its queues: PostgreSQL
//! runs one (empty) transaction in a listening backend for each
//! notification it delivers there, so a listener per queue cost every
//! charge a transaction in each of them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Deserialize;
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{FromRow, Row};
use tokio::sync::OnceCell;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::oneshot;
use tracing::warn;

use super::{Claims, Fetch, Notices, Outcome, Unsent, WakeConfig, WakeDb, Wakeup};
use crate::store::{Applied, Attempt, ClaimPlan, Store, StoreError};

/// The channel apalis' insert trigger notifies (`apalis.notify_new_jobs`:
/// only for jobs due at their insert).
const CHANNEL: &str = "apalis::job::insert";

#[derive(Clone)]
pub struct PgDb {
    pool: PgPool,
    /// The process's listener, started by the first queue that registers;
    /// it stops when the last clone of this is dropped.
    hub: Arc<OnceCell<Hub>>,
}

struct Hub {
    /// What the listener heard: a job of this type was inserted, or
    /// `None`: anything may have been missed (the connection was
    /// interrupted, or the payload named no type).
    heard: broadcast::Sender<Option<String>>,
    /// Dropped with the hub: the listener's task ends.
    _stop: oneshot::Sender<()>,
}

impl PgDb {
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            hub: Arc::new(OnceCell::new()),
        }
    }

    /// This process's notifications for `queue`, from the shared listener
    /// (started here if it is not running yet).
    async fn notices(&self, queue: &'static str) -> Result<Notices, sqlx::Error> {
        let hub = self.hub.get_or_try_init(|| listen(&self.pool)).await?;
        let heard = hub.heard.subscribe();
        let notices = futures::stream::unfold(heard, move |mut heard| async move {
            let ours = match heard.recv().await {
                Ok(Some(job_type)) => job_type == queue,
                // Interrupted, or so many that some were dropped here: look.
                Ok(None) | Err(RecvError::Lagged(_)) => true,
                Err(RecvError::Closed) => return None,
            };
            Some((Ok(ours), heard))
        });
        Ok(Box::pin(notices))
    }
}

/// Starts the process's listener: its own connection, outside the pool (a
/// listener keeps the connection it takes, which would shrink
/// COBRO_DB_CONNECTIONS), relaying each notification's job type until the
/// [`PgDb`] that started it is gone.
async fn listen(pool: &PgPool) -> Result<Hub, sqlx::Error> {
    let own = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with((*pool.connect_options()).clone());
    let mut listener = PgListener::connect_with(&own).await?;
    listener.listen(CHANNEL).await?;
    let (heard, _) = broadcast::channel(1024);
    let (stop, mut stopped) = oneshot::channel();
    let relay = heard.clone();
    tokio::spawn(async move {
        let mut pause = Duration::from_millis(100);
        loop {
            let got = tokio::select! {
                _ = &mut stopped => return,
                got = listener.recv() => got,
            };
            match got {
                Ok(n) => {
                    pause = Duration::from_millis(100);
                    let _ = relay.send(job_type(n.payload()));
                }
                // A lost connection is re-made (and re-LISTENed) inside
                // recv; an error here is one it could not re-make. Anything
                // inserted meanwhile is found by a fetch now, or by the
                // poll interval.
                Err(e) => {
                    warn!(error = %e, retry_in = ?pause, "wake-up notifications interrupted");
                    let _ = relay.send(None);
                    tokio::select! {
                        _ = &mut stopped => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        }
    });
    Ok(Hub { heard, _stop: stop })
}

fn split(acks: &[(String, Outcome)]) -> (Vec<String>, Vec<&'static str>) {
    acks.iter().map(|(id, o)| (id.clone(), o.status())).unzip()
}

impl WakeDb for PgDb {
    fn register(
        &self,
        worker: String,
        cfg: &WakeConfig,
    ) -> BoxFuture<'static, Result<Option<Notices>, sqlx::Error>> {
        let (db, queue, dead_for) = (self.clone(), cfg.queue, cfg.orphaned_after);
        async move {
            let pool = &db.pool;
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
            Ok(Some(db.notices(queue).await?))
        }
        .boxed()
    }

    fn fetch(
        &self,
        worker: String,
        cfg: &WakeConfig,
        acks: Vec<(String, Outcome)>,
        claims: Option<Claims>,
    ) -> Fetch {
        let (pool, queue, batch) = (self.pool.clone(), cfg.queue, cfg.batch as i64);
        async move {
            let (ids, statuses) = split(&acks);
            let fetch = || {
                sqlx::query(FETCH)
                    .bind(&worker)
                    .bind(queue)
                    .bind(batch)
                    .bind(&ids)
                    .bind(&statuses)
            };
            if let Some((plan, up_to)) = claims {
                let claiming = async {
                    let mut tx = pool.begin().await?;
                    // PostgreSQL's now(), the claim's time, is the BEGIN's.
                    let began = Instant::now();
                    let rows = fetch().fetch_all(&mut *tx).await?;
                    let mut got = rows.iter().map(wakeup).collect::<Result<Vec<_>, _>>()?;
                    claim(&mut tx, &mut got, plan.as_ref(), up_to, began).await?;
                    tx.commit().await?;
                    Ok::<_, sqlx::Error>(got)
                };
                match claiming.await {
                    Ok(got) => return Ok(got),
                    // Rolled back, nothing taken: fetch as if there were
                    // nothing to claim, so one attempt whose claim fails
                    // (a trigger, a bad row) fails only its own wake-up,
                    // in its handler, not every fetch of the queue.
                    Err(e) => {
                        warn!(queue, error = %e, "claiming in the fetch failed; fetching without claims");
                    }
                }
            }
            // Nothing to claim: the statement is the transaction.
            let rows = fetch().fetch_all(&pool).await?;
            rows.iter().map(wakeup).collect()
        }
        .boxed()
    }

    fn release(
        &self,
        worker: String,
        acks: Vec<(String, Outcome)>,
        unclaimed: Vec<String>,
        unsent: Option<Unsent>,
    ) -> BoxFuture<'static, Result<(), sqlx::Error>> {
        let pool = self.pool.clone();
        async move {
            let (ids, statuses) = split(&acks);
            let mut tx = pool.begin().await?;
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
            .execute(&mut *tx)
            .await?;
            if let Some((plan, rows)) = unsent {
                let change = plan.unclaim();
                for row in rows {
                    match Store::apply_in_pg(&mut tx, &row, &change).await {
                        Ok(_) => {}
                        Err(StoreError::Db(e)) => return Err(e),
                        Err(e) => warn!(attempt = %row.id, error = %e, "a claim never sent could not be given back; its lease will expire"),
                    }
                }
            }
            tx.commit().await
        }
        .boxed()
    }

    fn beat(
        &self,
        worker: String,
        cfg: &WakeConfig,
    ) -> BoxFuture<'static, Result<(), sqlx::Error>> {
        let (pool, queue, dead_for) = (self.pool.clone(), cfg.queue, cfg.orphaned_after);
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
        attempt_id: crate::domain::Wake::target(&payload),
        seen,
        claimed: None,
    })
}

/// Claims, in the fetch's transaction (begun at `began`), the first
/// `up_to` fetched attempts `plan` would claim. A claim that loses its
/// compare-and-set leaves the handler to load the row; one the state
/// machine refuses (no SQL ran) leaves the handler to decide; any other
/// error fails the transaction.
async fn claim(
    tx: &mut sqlx::PgConnection,
    got: &mut [Wakeup],
    plan: &dyn ClaimPlan,
    up_to: usize,
    began: Instant,
) -> Result<(), sqlx::Error> {
    // The wake-ups to claim: the first `up_to` the engine would claim, one
    // per attempt (a second wake-up of an attempt claimed here finds it
    // taken: its handler loads the row).
    let mut picked: Vec<usize> = Vec::new();
    let mut changes = Vec::new();
    for (i, w) in got.iter().enumerate() {
        if picked.len() == up_to {
            break;
        }
        let Some((row, now)) = &w.seen else { continue };
        if picked.iter().any(|&j| same_attempt(&got[j], row.id)) {
            continue;
        }
        if let Some(change) = plan.claim_for(row, *now) {
            picked.push(i);
            changes.push(change);
        }
    }
    if picked.is_empty() {
        return Ok(());
    }
    let items: Vec<_> = picked
        .iter()
        .zip(&changes)
        .filter_map(|(&i, c)| got[i].seen.as_ref().map(|(row, _)| (&**row, c)))
        .collect();
    let applied = match Store::apply_all_in_pg(tx, &items).await {
        Ok(applied) => applied,
        Err(StoreError::Db(e)) => return Err(e),
        Err(e) => return Err(sqlx::Error::Protocol(e.to_string())),
    };
    for (&i, applied) in picked.iter().zip(applied) {
        let w = &mut got[i];
        match applied {
            Ok(Applied::Moved(held)) => {
                let at = held.updated_at;
                w.seen = Some((held, at));
                w.claimed = Some(began);
            }
            Ok(Applied::Lost) => w.seen = None,
            Err(StoreError::Invalid(e)) => {
                let id = w.attempt_id.map(|a| a.to_string()).unwrap_or_default();
                warn!(attempt = %id, error = %e, "claiming in the fetch refused; the handler decides");
            }
            Err(StoreError::Db(e)) => return Err(e),
            Err(e) => return Err(sqlx::Error::Protocol(e.to_string())),
        }
    }
    // Other wake-ups of an attempt just claimed: what they fetched is stale.
    let claimed: std::collections::HashSet<uuid::Uuid> = got
        .iter()
        .filter(|w| w.claimed.is_some())
        .filter_map(|w| w.attempt_id)
        .collect();
    for w in got.iter_mut() {
        if w.claimed.is_none() && w.attempt_id.is_some_and(|a| claimed.contains(&a)) {
            w.seen = None;
        }
    }
    Ok(())
}

fn same_attempt(w: &Wakeup, id: uuid::Uuid) -> bool {
    w.seen.as_ref().is_some_and(|(row, _)| row.id == id)
}

/// The job type an insert notification names (`None` if it names none:
/// every queue looks).
fn job_type(payload: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Insert<'a> {
        job_type: &'a str,
    }
    serde_json::from_str::<Insert>(payload)
        .ok()
        .map(|i| i.job_type.to_owned())
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
    fn a_notification_names_its_job_type() {
        assert_eq!(
            job_type(r#"{"job_type":"cobro.charge","id":"01J","run_at":"x"}"#).as_deref(),
            Some("cobro.charge")
        );
        assert_eq!(
            job_type(r#"{"job_type":"cobro.refund","id":"01J"}"#).as_deref(),
            Some("cobro.refund")
        );
        assert_eq!(job_type("not json"), None);
    }
}
