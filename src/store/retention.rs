//! Retention in the store: what may be deleted, and how. Webhook event ids
//! (`webhook_events`) and rejected-delivery records (`rejected_webhooks`)
//! are purged once older than the retention period; see [`crate::retention`]
//! for the period and the loop that runs this.
//!
//! Finished wake-up jobs (apalis' `jobs` table, `Done`, `Killed`, or
//! `Failed` with no attempt left) are purged after `COBRO_JOB_RETENTION`:
//! a wake-up only says "look at attempt X"; what happened is in the
//! attempt and its log.
//!
//! Invariant: only those tables are ever purged. Attempts, the
//! transition log, checks, notices, refunds and reconciliation cases are the
//! money trail and are never deleted (the transition and check logs refuse
//! DELETE anyway). Deletes run in bounded batches, each its own short
//! transaction, oldest first, so a large backlog never holds a long lock.

use std::time::Duration;

use serde::Serialize;

use super::{Db, Store, StoreError, lite, pg};

/// Rows deleted per statement by [`Store::purge_webhooks`].
pub const PURGE_BATCH: u32 = 1000;

/// What one purge deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Purged {
    /// Stored webhook events (their ids: a redelivery after this is
    /// recorded again, and the state machine refuses its news as stale).
    pub events: u64,
    /// Rejected-delivery records.
    pub rejected: u64,
}

impl Store {
    /// Deletes webhook events and rejected-webhook records received more
    /// than `older_than` ago (by the database's clock), in batches of
    /// [`PURGE_BATCH`]. The caller chooses the period; `cobro-worker`
    /// refuses one shorter than the gateway's retry window.
    pub async fn purge_webhooks(&self, older_than: Duration) -> Result<Purged, StoreError> {
        self.purge_webhooks_in_batches(older_than, PURGE_BATCH)
            .await
    }

    /// [`Store::purge_webhooks`] with another batch size (at least 1).
    pub async fn purge_webhooks_in_batches(
        &self,
        older_than: Duration,
        batch: u32,
    ) -> Result<Purged, StoreError> {
        let batch = i64::from(batch.max(1));
        let mut total = Purged::default();
        loop {
            let step = match &self.db {
                Db::Pg(p) => pg::retention::purge_batch(p, older_than, batch).await?,
                Db::Lite(p) => lite::retention::purge_batch(p, older_than, batch).await?,
            };
            total.events += step.events;
            total.rejected += step.rejected;
            let limit = batch as u64;
            if step.events < limit && step.rejected < limit {
                return Ok(total);
            }
        }
    }
}

impl Store {
    /// Deletes finished wake-up jobs whose end (or, without one, due time)
    /// is more than `older_than` ago, in batches of [`PURGE_BATCH`]; a job
    /// still pending, queued or running is never touched. Returns how many.
    pub async fn purge_finished_jobs(&self, older_than: Duration) -> Result<u64, StoreError> {
        let secs = older_than.as_secs_f64();
        let batch = i64::from(PURGE_BATCH);
        let mut total = 0u64;
        loop {
            let n = match &self.db {
                Db::Pg(p) => sqlx::query(
                    "DELETE FROM apalis.jobs WHERE id IN (
                        SELECT id FROM apalis.jobs
                         WHERE (status IN ('Done', 'Killed')
                                OR (status = 'Failed' AND attempts >= max_attempts))
                           AND COALESCE(done_at, run_at) < now() - make_interval(secs => $1)
                         LIMIT $2)",
                )
                .bind(secs)
                .bind(batch)
                .execute(p)
                .await?
                .rows_affected(),
                Db::Lite(p) => sqlx::query(
                    "DELETE FROM Jobs WHERE rowid IN (
                        SELECT rowid FROM Jobs
                         WHERE (status IN ('Done', 'Killed')
                                OR (status = 'Failed' AND attempts >= max_attempts))
                           AND COALESCE(done_at, run_at) < CAST(strftime('%s', 'now') AS INTEGER) - ?1
                         LIMIT ?2)",
                )
                .bind(secs as i64)
                .bind(batch)
                .execute(p)
                .await?
                .rows_affected(),
            };
            total += n;
            if n < batch as u64 {
                return Ok(total);
            }
        }
    }
}
