//! SQLite's part of the wake-up backend. SQLite has no notifications
//! between processes, so wake-ups are found by the poll interval (and by a
//! full batch); the SQL is in `store::lite::wakeups`.

use futures::FutureExt;
use futures::future::BoxFuture;
use sqlx::SqlitePool;

use tracing::warn;

use super::{Claims, Fetch, Notices, Outcome, Unsent, WakeConfig, WakeDb, Wakeup};
use crate::store::lite_wakeups as sql;

#[derive(Clone)]
pub struct LiteDb(pub SqlitePool);

fn statuses(acks: &[(String, Outcome)]) -> Vec<(String, &'static str)> {
    acks.iter()
        .map(|(id, o)| (id.clone(), o.status()))
        .collect()
}

impl WakeDb for LiteDb {
    fn register(
        &self,
        worker: String,
        cfg: &WakeConfig,
    ) -> BoxFuture<'static, Result<Option<Notices>, sqlx::Error>> {
        let (pool, queue, dead_for) = (self.0.clone(), cfg.queue, cfg.orphaned_after);
        async move {
            sql::register(&pool, &worker, queue, dead_for).await?;
            Ok(None)
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
        let (pool, queue, batch) = (self.0.clone(), cfg.queue, cfg.batch);
        async move {
            let acks = statuses(&acks);
            let wakeups = |taken: Vec<sql::Taken>| -> Vec<Wakeup> {
                taken
                    .into_iter()
                    .map(|t| Wakeup {
                        attempt_id: t.attempt_id,
                        job_id: t.job_id,
                        seen: t.seen.map(|(a, now)| (Box::new(a), now)),
                        claimed: t.claimed,
                    })
                    .collect()
            };
            if let Some((plan, up_to)) = &claims {
                let claims = Some((plan.as_ref(), *up_to));
                match sql::take(&pool, &worker, queue, batch, &acks, claims).await {
                    Ok(taken) => return Ok(wakeups(taken)),
                    // Rolled back, nothing taken: fetch as if there were
                    // nothing to claim (one attempt whose claim fails fails
                    // only its own wake-up, in its handler).
                    Err(e) => {
                        warn!(queue, error = %e, "claiming in the fetch failed; fetching without claims");
                    }
                }
            }
            Ok(wakeups(
                sql::take(&pool, &worker, queue, batch, &acks, None).await?,
            ))
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
        let pool = self.0.clone();
        async move {
            let unsent = unsent
                .as_ref()
                .map(|(plan, rows)| (plan.as_ref(), rows.as_slice()));
            sql::release(&pool, &worker, &statuses(&acks), &unclaimed, unsent).await
        }
        .boxed()
    }

    fn beat(
        &self,
        worker: String,
        cfg: &WakeConfig,
    ) -> BoxFuture<'static, Result<(), sqlx::Error>> {
        let (pool, queue, dead_for) = (self.0.clone(), cfg.queue, cfg.orphaned_after);
        async move { sql::beat(&pool, &worker, queue, dead_for).await }.boxed()
    }
}
