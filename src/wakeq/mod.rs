//! cobro's own apalis backend for wake-ups: the same job rows that
//! `Store::enqueue_charge` and the engine's wake-ups write (`apalis.jobs` on
//! PostgreSQL, `Jobs` on SQLite), fetched and acknowledged with fewer
//! transactions than apalis' own storages, and with no polling of
//! apalis-core's that can stall.
//!
//! apalis-postgres fetches on every poll of the worker (after each finished
//! job, each notification, each heartbeat: about four empty fetches per
//! charge when charges arrive one at a time), then locks each job and
//! acknowledges it in transactions of their own, through an event channel
//! drained only between fetched batches. apalis-sqlite does the same, and
//! its worker once sat for 180 s with 500 due wake-ups queued (BENCHMARKS.md,
//! "2 December"). Here:
//!
//! - **One fetch per reason.** A fetch runs when a notification for this
//!   queue arrived (PostgreSQL's NOTIFY, any number of them drained
//!   together), when the poll interval passed (for wake-ups scheduled later,
//!   and on SQLite, which has no notifications between processes, for all),
//!   or when the last fetch filled its batch (more may be waiting); never
//!   because a job finished. The poll timer is this backend's own and is
//!   re-armed each time it fires.
//! - **Fetch, lock, load and claim in one transaction.** Due jobs are taken
//!   (marked `Running` for this worker, as apalis' orphan recovery expects)
//!   and their attempts read in the same transaction, so the handler decides
//!   on that row instead of loading it. With [`Wakes::claiming`] (the charge
//!   queue), the charges the engine would send at once are also claimed
//!   there, up to the handlers free to send them: the engine plans each
//!   claim ([`ClaimPlan`]) and it is written through the same compare-and-set
//!   as any other, so a charge costs the enqueue, this fetch and its answer.
//! - **Acknowledgements ride on the next fetch.** A finished job is marked
//!   `Done` (or `Failed`, retried like apalis does) by the next fetch's
//!   transaction, or on shutdown; a job whose acknowledgement is lost in a
//!   crash is re-enqueued as an orphan and wakes a no-op.
//! - **Heartbeat on its own task.** Liveness and orphan recovery (the
//!   workers table, apalis' own re-enqueue query) run every poll interval
//!   whatever the worker is doing, so a saturated worker is never taken for
//!   dead.
//!
//! The database's part is [`WakeDb`]: [`pg::PgDb`] and [`lite::LiteDb`].
//!
//! Invariant: nothing here decides about money. A wake-up says only "look
//! at this attempt"; the row it carries is a snapshot at least as new as
//! the wake-up itself, and every write to it, the fetch's claim included,
//! is planned by the engine and is a compare-and-set on its version.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use apalis::prelude::{Backend, Identity, Task, TaskBuilder, WorkerContext};
use apalis_core::backend::BackendConfig;
use apalis_core::backend::finalize::Ephemeral;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::store::{Attempt, ClaimPlan};

pub mod lite;
pub mod pg;

pub use lite::LiteDb;
pub use pg::PgDb;

/// One wake-up as the handler gets it: its job, its attempt, and the
/// attempt's row read with it (`None` when the payload named no attempt
/// that exists; the handler then loads, and reports what it finds).
#[derive(Debug, Clone)]
pub struct Wakeup {
    pub job_id: String,
    pub attempt_id: Option<Uuid>,
    pub seen: Option<(Box<Attempt>, DateTime<Utc>)>,
    /// The fetch claimed the attempt for this worker (`seen` is the row its
    /// claim wrote), in a transaction begun at this instant (on SQLite:
    /// that took the write lock): the handler sends it at once.
    pub claimed: Option<Instant>,
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
    pub(crate) fn status(self) -> &'static str {
        match self {
            Outcome::Done => "Done",
            Outcome::Failed => "Failed",
            Outcome::Killed => "Killed",
        }
    }
}

/// Finished wake-ups waiting for the next fetch to acknowledge them, and
/// how many handlers have finished in all ([`Acks::finishing`]). Shared
/// between the backend and its handlers (`Data<Acks>`).
#[derive(Debug, Clone, Default)]
pub struct Acks {
    held: Arc<Mutex<Vec<(String, Outcome)>>>,
    finished: Arc<AtomicUsize>,
}

impl Acks {
    pub fn push(&self, job_id: String, outcome: Outcome) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((job_id, outcome));
    }

    /// Held by a handler while it runs: counts it finished when dropped,
    /// whether it returned or panicked.
    pub fn finishing(&self) -> Finishing {
        Finishing(self.finished.clone())
    }

    fn take(&self) -> Vec<(String, Outcome)> {
        std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Puts back acknowledgements whose write failed.
    fn restore(&self, mut acks: Vec<(String, Outcome)>) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        acks.append(&mut held);
        *held = acks;
    }

    fn finished(&self) -> usize {
        self.finished.load(Ordering::Relaxed)
    }
}

/// A handler running ([`Acks::finishing`]).
pub struct Finishing(Arc<AtomicUsize>);

impl Drop for Finishing {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
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
    /// The worker's concurrency: a fetch claims (with [`Wakes::claiming`])
    /// at most as many attempts as handlers are free to send them at once.
    pub concurrency: usize,
}

/// What the backend asks of its database. Every future is `'static`: it
/// owns clones of what it needs.
pub trait WakeDb: Clone + Send + Sync + Unpin + 'static {
    /// Registers `worker` in the workers table, re-enqueues dead workers'
    /// jobs, and opens the notification stream, if the database has one.
    fn register(
        &self,
        worker: String,
        cfg: &WakeConfig,
    ) -> BoxFuture<'static, Result<Option<Notices>, sqlx::Error>>;
    /// Acknowledges `acks` (only `worker`'s own `Running` jobs), then takes
    /// up to `cfg.batch` due wake-ups and reads their attempts, oldest first
    /// within a priority, then claims the first `claims.1` of them that
    /// `claims.0` plans a claim for; one transaction.
    fn fetch(
        &self,
        worker: String,
        cfg: &WakeConfig,
        acks: Vec<(String, Outcome)>,
        claims: Option<Claims>,
    ) -> Fetch;
    /// On shutdown: the pending acknowledgements, the jobs fetched but never
    /// handed out put back to `Pending`, and the attempts claimed but never
    /// sent given back ([`ClaimPlan::unclaim`]), in one transaction.
    fn release(
        &self,
        worker: String,
        acks: Vec<(String, Outcome)>,
        unclaimed: Vec<String>,
        unsent: Option<Unsent>,
    ) -> BoxFuture<'static, Result<(), sqlx::Error>>;
    /// Liveness, and the re-enqueue of dead workers' jobs.
    fn beat(&self, worker: String, cfg: &WakeConfig)
    -> BoxFuture<'static, Result<(), sqlx::Error>>;
}

pub type Fetch = BoxFuture<'static, Result<Vec<Wakeup>, sqlx::Error>>;

/// Who plans the fetch's claims, and at most how many.
pub type Claims = (Arc<dyn ClaimPlan>, usize);

/// Attempts claimed by a fetch and never handed out, and who gives them back.
pub type Unsent = (Arc<dyn ClaimPlan>, Vec<Box<Attempt>>);

/// Notifications: `Ok(true)` when one names this queue.
pub type Notices = Pin<Box<dyn Stream<Item = Result<bool, sqlx::Error>> + Send>>;

enum State {
    /// Not registered yet.
    Start,
    Registering(BoxFuture<'static, Result<Option<Notices>, sqlx::Error>>),
    /// Waiting for a reason to fetch.
    Idle,
    Fetching(Fetch),
    Buffered(VecDeque<Wakeup>),
}

/// The backend (one per queue per worker process; see the module docs).
pub struct Wakes<D: WakeDb> {
    db: D,
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
    /// Claims attempts in the fetch ([`Wakes::claiming`]).
    claims: Option<Arc<dyn ClaimPlan>>,
    /// Wake-ups handed to handlers so far (with [`Acks::finished`]: how
    /// many are being handled now).
    handed: usize,
}

impl<D: WakeDb> Wakes<D> {
    pub fn new(db: D, cfg: WakeConfig, acks: Acks) -> Self {
        let tick = Box::pin(tokio::time::sleep(cfg.poll));
        Self {
            db,
            cfg,
            acks,
            state: State::Start,
            worker: String::new(),
            notices: None,
            tick,
            armed: true,
            heartbeat: None,
            closing: None,
            claims: None,
            handed: 0,
        }
    }

    /// Each fetch also claims, in its own transaction, the attempts `plan`
    /// would send at once, up to the handlers free to send them: the claim
    /// no longer costs a transaction of its own.
    ///
    /// Only up to the free handlers, and claimed ones are handed out first,
    /// so a claimed attempt is sent at once and its lease runs while it is
    /// sent, not while it waits (its handler gives it back unsent if it
    /// waited anyway: [`crate::engine::Engine::process_seen`]). No claims
    /// once the worker is shutting down; one claimed but never handed out
    /// at shutdown is given back in the release. After a crash, its lease
    /// expires into `DESCONOCIDO` and the lookup by its key decides, as for
    /// any worker that died holding a lease.
    pub fn claiming(mut self, plan: Arc<dyn ClaimPlan>) -> Self {
        self.claims = Some(plan);
        self
    }

    /// A fetch, claiming only if `claim`.
    fn fetch(&self, claim: bool) -> Fetch {
        let acks = self.acks.take();
        let back = (self.acks.clone(), acks.clone());
        let busy = self.handed.saturating_sub(self.acks.finished());
        let claims = self
            .claims
            .clone()
            .filter(|_| claim)
            .map(|plan| (plan, self.cfg.concurrency.saturating_sub(busy)))
            .filter(|(_, free)| *free > 0);
        let fetch = self.db.fetch(self.worker.clone(), &self.cfg, acks, claims);
        async move {
            let got = fetch.await;
            if got.is_err() {
                back.0.restore(back.1);
            }
            got
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
                Poll::Ready(Some(Ok(for_us))) => ours |= for_us,
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

impl<D: WakeDb> Drop for Wakes<D> {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }
}

/// Liveness every `poll`, and the re-enqueue of dead workers' jobs.
async fn heartbeat_loop<D: WakeDb>(db: D, worker: String, cfg: WakeConfig) {
    let mut tick = tokio::time::interval(cfg.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(e) = db.beat(worker.clone(), &cfg).await {
            warn!(queue = cfg.queue, error = %e, "heartbeat failed; trying again next interval");
        }
    }
}

impl<D: WakeDb> Backend for Wakes<D> {
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
                    self.worker = worker.name().to_owned();
                    let fut = self.db.register(self.worker.clone(), &self.cfg);
                    self.state = State::Registering(fut);
                }
                State::Registering(fut) => match fut.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => {
                        self.state = State::Start;
                        return Poll::Ready(Err(e));
                    }
                    Poll::Ready(Ok(notices)) => {
                        self.notices = notices;
                        self.heartbeat = Some(tokio::spawn(heartbeat_loop(
                            self.db.clone(),
                            self.worker.clone(),
                            self.cfg.clone(),
                        )));
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
        worker: &WorkerContext,
    ) -> Poll<Option<Result<Self::Task, Self::Error>>> {
        loop {
            match &mut self.state {
                State::Start | State::Registering(_) => return Poll::Pending,
                State::Buffered(buffer) => match buffer.pop_front() {
                    Some(w) => {
                        self.handed += 1;
                        return Poll::Ready(Some(Ok(TaskBuilder::new(w).build())));
                    }
                    None => self.state = State::Idle,
                },
                State::Fetching(fut) => match fut.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(mut got)) => {
                        // A full batch: more may be due.
                        self.armed |= got.len() >= self.cfg.batch;
                        // Claimed ones first: their leases are running.
                        got.sort_by_key(|w| w.claimed.is_none());
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
                    self.state = State::Fetching(self.fetch(!worker.is_shutting_down()));
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
            let left: Vec<Wakeup> = match &mut self.state {
                State::Fetching(fut) => match fut.poll_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(got)) => got,
                    Poll::Ready(Err(_)) => Vec::new(),
                },
                State::Buffered(buffer) => buffer.drain(..).collect(),
                _ => Vec::new(),
            };
            self.state = State::Idle;
            let mut acks = self.acks.take();
            // Fetched but never handed out: back to Pending for anyone. A
            // claim never sent is given back, and its give-back wakes it
            // again: its job is done.
            let mut unclaimed = Vec::new();
            let mut unsent = Vec::new();
            for w in left {
                match (w.claimed, w.seen) {
                    (Some(_), Some((row, _))) => {
                        acks.push((w.job_id, Outcome::Done));
                        unsent.push(row);
                    }
                    _ => unclaimed.push(w.job_id),
                }
            }
            let unsent = self.claims.clone().map(|plan| (plan, unsent));
            let nothing = unclaimed.is_empty()
                && acks.is_empty()
                && unsent.as_ref().is_none_or(|(_, rows)| rows.is_empty());
            self.closing = Some(if nothing {
                futures::future::ready(Ok(())).boxed()
            } else {
                self.db
                    .release(self.worker.clone(), acks, unclaimed, unsent)
            });
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

impl<D: WakeDb> BackendConfig for Wakes<D> {
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
