//! cobro's own apalis backend for PostgreSQL wake-ups: the same
//! `apalis.jobs` rows that `cobro.wake` and `cobro.enqueue_charge` write,
//! fetched and acknowledged with fewer transactions than apalis-postgres.
//!
//! apalis-postgres fetches on every poll of the worker (after each finished
//! job, each notification, each heartbeat: about four empty fetches per
//! charge when charges arrive one at a time), then locks each job and
//! acknowledges it in transactions of their own, through an event channel
//! drained only between fetched batches. Here:
//!
//! - **One fetch per reason.** A fetch runs when a NOTIFY for this queue
//!   arrived (any number of them, drained together), when the poll
//!   interval passed (for wake-ups scheduled later), or when the last fetch
//!   filled its batch (more may be waiting); never because a job finished.
//! - **Fetch, lock and load in one statement.** Due jobs are taken
//!   (`FOR UPDATE SKIP LOCKED`, marked `Running` for this worker, as
//!   apalis' orphan recovery expects) and their attempts read in the same
//!   statement, so the handler decides on that row instead of loading it.
//! - **Acknowledgements ride on the next fetch.** A finished job is marked
//!   `Done` (or `Failed`, retried like apalis does) by the next fetch's
//!   statement, or on shutdown; a job whose acknowledgement is lost in a
//!   crash is re-enqueued as an orphan and wakes a no-op.
//! - **Heartbeat on its own task.** Liveness and orphan recovery
//!   (`apalis.workers`, apalis' own re-enqueue query) run every poll
//!   interval whatever the worker is doing, so a saturated worker is never
//!   taken for dead.
//!
//! Invariant: nothing here decides about money. A wake-up says only "look
//! at this attempt"; the row it carries is a snapshot at least as new as
//! the wake-up itself, and every write the handler makes is a
//! compare-and-set on the attempt's version.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use apalis::prelude::{Backend, Identity, Task, TaskBuilder, WorkerContext};
use apalis_core::backend::BackendConfig;
use apalis_core::backend::finalize::Ephemeral;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use serde::Deserialize;
use sqlx::postgres::{PgListener, PgPool, PgRow};
use sqlx::{FromRow, Row};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::store::Attempt;

/// The channel apalis' insert trigger notifies (`apalis.notify_new_jobs`:
/// only for jobs due at their insert).
const CHANNEL: &str = "apalis::job::insert";

/// One wake-up as the handler gets it: its job, its attempt, and the
/// attempt's row read with it (`None` when the payload named no attempt
/// that exists; the handler then loads, and reports what it finds).
#[derive(Debug, Clone)]
pub struct Wakeup {
    pub job_id: String,
    pub attempt_id: Option<Uuid>,
    pub seen: Option<(Box<Attempt>, DateTime<Utc>)>,
}

/// How a handled wake-up ends, for its acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Handled: `Done`.
    Done,
    /// The handler failed: `Failed`, fetched again while attempts remain.
    Failed,
    /// The payload names no attempt: `Killed`, never fetched again.
    Killed,
}

impl Outcome {
    fn status(self) -> &'static str {
        match self {
            Outcome::Done => "Done",
            Outcome::Failed => "Failed",
            Outcome::Killed => "Killed",
        }
    }
}

/// Finished wake-ups waiting for the next fetch to acknowledge them.
/// Shared between the backend and its handlers (`Data<Acks>`).
#[derive(Debug, Clone, Default)]
pub struct Acks(Arc<Mutex<Vec<(String, Outcome)>>>);

impl Acks {
    pub fn push(&self, job_id: String, outcome: Outcome) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((job_id, outcome));
    }

    fn take(&self) -> Vec<(String, Outcome)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Puts back acknowledgements whose write failed.
    fn restore(&self, mut acks: Vec<(String, Outcome)>) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        acks.append(&mut held);
        *held = acks;
    }
}

/// What the backend needs to know.
#[derive(Debug, Clone)]
pub struct WakeConfig {
    pub queue: &'static str,
    pub batch: usize,
    /// Fetch at least this often (wake-ups due later than their insert are
    /// found only this way), and beat the heartbeat this often.
    pub poll: Duration,
    /// Another worker re-enqueues this one's jobs after this much silence.
    pub orphaned_after: Duration,
}

type Fetch = BoxFuture<'static, Result<Vec<Wakeup>, sqlx::Error>>;
type Notices =
    Pin<Box<dyn Stream<Item = Result<sqlx::postgres::PgNotification, sqlx::Error>> + Send>>;

enum State {
    /// Not registered yet.
    Start,
    Registering(BoxFuture<'static, Result<(PgListener, String), sqlx::Error>>),
    /// Waiting for a reason to fetch.
    Idle,
    Fetching(Fetch),
    Buffered(VecDeque<Wakeup>),
}

/// The backend (one per queue per worker process; see the module docs).
pub struct PgWakes {
    pool: PgPool,
    cfg: WakeConfig,
    acks: Acks,
    state: State,
    worker: String,
    notices: Option<Notices>,
    tick: Pin<Box<tokio::time::Sleep>>,
    /// A reason to fetch has come.
    armed: bool,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
    /// Shutdown's last write.
    closing: Option<BoxFuture<'static, Result<(), sqlx::Error>>>,
}

impl PgWakes {
    pub fn new(pool: PgPool, cfg: WakeConfig, acks: Acks) -> Self {
        let tick = Box::pin(tokio::time::sleep(cfg.poll));
        Self {
            pool,
            cfg,
            acks,
            state: State::Start,
            worker: String::new(),
            notices: None,
            tick,
            armed: true,
            heartbeat: None,
            closing: None,
        }
    }

    /// On shutdown: the pending acknowledgements, and the jobs fetched but
    /// never handed out put back to `Pending`, in one statement.
    fn release(&self, unclaimed: Vec<String>) -> BoxFuture<'static, Result<(), sqlx::Error>> {
        let acks = self.acks.take();
        let (pool, worker) = (self.pool.clone(), self.worker.clone());
        async move {
            if unclaimed.is_empty() && acks.is_empty() {
                return Ok(());
            }
            let (ids, statuses): (Vec<String>, Vec<&str>) =
                acks.iter().map(|(id, o)| (id.clone(), o.status())).unzip();
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

    fn register(
        &self,
        worker: String,
    ) -> BoxFuture<'static, Result<(PgListener, String), sqlx::Error>> {
        let (pool, queue, dead_for) = (self.pool.clone(), self.cfg.queue, self.cfg.orphaned_after);
        async move {
            let mut tx = pool.begin().await?;
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
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(CHANNEL).await?;
            Ok((listener, worker))
        }
        .boxed()
    }

    fn fetch(&self) -> Fetch {
        let acks = self.acks.take();
        let (pool, queue, worker, batch) = (
            self.pool.clone(),
            self.cfg.queue,
            self.worker.clone(),
            self.cfg.batch as i64,
        );
        let acks_back = self.acks.clone();
        async move {
            let (ids, statuses): (Vec<String>, Vec<&str>) =
                acks.iter().map(|(id, o)| (id.clone(), o.status())).unzip();
            let rows = sqlx::query(FETCH)
                .bind(&worker)
                .bind(queue)
                .bind(batch)
                .bind(&ids)
                .bind(&statuses)
                .fetch_all(&pool)
                .await;
            match rows {
                Ok(rows) => rows.iter().map(wakeup).collect(),
                Err(e) => {
                    acks_back.restore(acks);
                    Err(e)
                }
            }
        }
        .boxed()
    }

    /// Drains every notification that has arrived; whether one is for
    /// this queue. Registers the waker for the next one.
    fn notified(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(notices) = self.notices.as_mut() else {
            return false;
        };
        let mut ours = false;
        loop {
            match notices.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(n))) => ours |= is_for(n.payload(), self.cfg.queue),
                // A lost connection: sqlx reconnects; anything inserted
                // meanwhile is found by the poll interval's fetch.
                Poll::Ready(Some(Err(e))) => {
                    warn!(queue = self.cfg.queue, error = %e, "wake-up notifications interrupted");
                    ours = true;
                }
                Poll::Ready(None) => {
                    warn!(
                        queue = self.cfg.queue,
                        "wake-up notifications ended; polling only"
                    );
                    self.notices = None;
                    return ours;
                }
                Poll::Pending => return ours,
            }
        }
    }

    /// The poll interval passed: re-arms the timer.
    fn ticked(&mut self, cx: &mut Context<'_>) -> bool {
        if self.tick.as_mut().poll(cx).is_ready() {
            let next = tokio::time::Instant::now() + self.cfg.poll;
            self.tick.as_mut().reset(next);
            // Poll once so the new deadline's waker is registered.
            let _ = self.tick.as_mut().poll(cx);
            return true;
        }
        false
    }
}

impl Drop for PgWakes {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
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

#[derive(Deserialize)]
struct Payload {
    attempt_id: Uuid,
}

fn wakeup(row: &PgRow) -> Result<Wakeup, sqlx::Error> {
    let job_id: String = row.try_get("job_id")?;
    let payload: Vec<u8> = row.try_get("job_payload")?;
    let attempt_id = serde_json::from_slice::<Payload>(&payload)
        .ok()
        .map(|p| p.attempt_id);
    let found: Option<Uuid> = row.try_get("id")?;
    let seen = match found {
        Some(_) => Some((Box::new(Attempt::from_row(row)?), row.try_get("db_now")?)),
        None => None,
    };
    Ok(Wakeup {
        job_id,
        attempt_id,
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
    dead_for: Duration,
) -> Result<(), sqlx::Error> {
    apalis_postgres::queries::reenqueue_orphaned(tx, queue, dead_for.as_secs().max(1))
        .await
        .map(|_| ())
        .map_err(|e| match e {
            apalis_postgres::Error::Database(db) => db,
            other => sqlx::Error::Protocol(other.to_string()),
        })
}

/// Liveness every `poll`, and the re-enqueue of dead workers' jobs.
async fn heartbeat_loop(
    pool: PgPool,
    worker: String,
    queue: &'static str,
    poll: Duration,
    dead_for: Duration,
) {
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let beat = async {
            let mut tx = pool.begin().await?;
            sqlx::query("UPDATE apalis.workers SET last_seen = now() WHERE id = $1")
                .bind(&worker)
                .execute(&mut *tx)
                .await?;
            reenqueue_orphaned(&mut tx, queue, dead_for).await?;
            tx.commit().await
        };
        if let Err(e) = beat.await {
            warn!(queue, error = %e, "heartbeat failed; trying again next interval");
        }
    }
}

impl Backend for PgWakes {
    type Task = Task<Wakeup>;
    type Error = sqlx::Error;

    fn poll_ready(
        &mut self,
        cx: &mut Context<'_>,
        worker: &WorkerContext,
    ) -> Poll<Result<(), Self::Error>> {
        loop {
            match &mut self.state {
                State::Start => {
                    let fut = self.register(worker.name().to_owned());
                    self.state = State::Registering(fut);
                }
                State::Registering(fut) => match fut.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => {
                        self.state = State::Start;
                        return Poll::Ready(Err(e));
                    }
                    Poll::Ready(Ok((listener, name))) => {
                        self.notices = Some(Box::pin(listener.into_stream()));
                        self.heartbeat = Some(tokio::spawn(heartbeat_loop(
                            self.pool.clone(),
                            name.clone(),
                            self.cfg.queue,
                            self.cfg.poll,
                            self.cfg.orphaned_after,
                        )));
                        self.worker = name;
                        self.state = State::Idle;
                        debug!(queue = self.cfg.queue, worker = %self.worker, "wake-up queue registered");
                        return Poll::Ready(Ok(()));
                    }
                },
                _ => return Poll::Ready(Ok(())),
            }
        }
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        _: &WorkerContext,
    ) -> Poll<Option<Result<Self::Task, Self::Error>>> {
        loop {
            match &mut self.state {
                State::Start | State::Registering(_) => return Poll::Pending,
                State::Buffered(buffer) => match buffer.pop_front() {
                    Some(w) => return Poll::Ready(Some(Ok(TaskBuilder::new(w).build()))),
                    None => self.state = State::Idle,
                },
                State::Fetching(fut) => match fut.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(got)) => {
                        // A full batch: more may be due.
                        self.armed |= got.len() >= self.cfg.batch;
                        self.state = State::Buffered(got.into());
                    }
                    Poll::Ready(Err(e)) => {
                        // Not fatal: the next interval fetches again (the
                        // database may be restarting).
                        warn!(queue = self.cfg.queue, error = %e, "fetching wake-ups failed; trying again next interval");
                        self.state = State::Idle;
                        self.armed = false;
                    }
                },
                State::Idle => {
                    let notified = self.notified(cx);
                    let ticked = self.ticked(cx);
                    if !(self.armed || notified || ticked) {
                        return Poll::Pending;
                    }
                    self.armed = false;
                    self.state = State::Fetching(self.fetch());
                }
            }
        }
    }

    fn poll_close(
        &mut self,
        cx: &mut Context<'_>,
        _: &WorkerContext,
    ) -> Poll<Result<(), Self::Error>> {
        if self.closing.is_none() {
            // Fetched but never handed out: back to Pending for anyone.
            let unclaimed: Vec<String> = match &mut self.state {
                State::Fetching(fut) => match fut.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(got)) => got.into_iter().map(|w| w.job_id).collect(),
                    Poll::Ready(Err(_)) => Vec::new(),
                },
                State::Buffered(buffer) => buffer.drain(..).map(|w| w.job_id).collect(),
                _ => Vec::new(),
            };
            self.state = State::Idle;
            self.closing = Some(self.release(unclaimed));
        }
        let done = self.closing.as_mut().map(|f| f.poll_unpin(cx));
        match done {
            Some(Poll::Ready(r)) => {
                self.closing = None;
                Poll::Ready(r)
            }
            _ => Poll::Pending,
        }
    }
}

impl BackendConfig for PgWakes {
    type Args = Wakeup;
    type Id = apalis::prelude::RandomId;
    type Kind = Ephemeral;
    type Config = WakeConfig;
    type Layer = Identity;

    fn config(&self) -> &Self::Config {
        &self.cfg
    }

    fn middleware(&mut self, _: &mut WorkerContext) -> Self::Layer {
        Identity::new()
    }
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

    #[test]
    fn acks_put_back_keep_their_order_before_newer_ones() {
        let acks = Acks::default();
        acks.push("a".into(), Outcome::Done);
        let taken = acks.take();
        acks.push("b".into(), Outcome::Failed);
        acks.restore(taken);
        let all: Vec<_> = acks.take().into_iter().map(|(id, _)| id).collect();
        assert_eq!(all, ["a", "b"]);
    }
}
