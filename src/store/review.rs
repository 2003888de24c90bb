//! The review janitor's backstop: attempts in `EN_REVISION` whose next
//! automatic check has passed get a wake-up again, as the sweeper does for
//! the charge path (its own query, so the charge path's sweep stays as it is).
//!
//! Invariant: only wake-ups are written (and `woken_at`); what happens to
//! the attempt is decided by the handler, which re-reads it.

use std::time::Duration;

use super::{Db, Store, StoreError, lite, pg};

impl Store {
    /// Re-creates wake-ups for `EN_REVISION` attempts whose check is due:
    /// with an expired lease (the janitor holding it vanished) at once, with
    /// no holder once `grace` late. At most once per `every` per attempt,
    /// at most `limit` per call. Returns how many.
    pub async fn sweep_review(
        &self,
        grace: Duration,
        every: Duration,
        limit: i64,
    ) -> Result<u64, StoreError> {
        // Each backend's statement, run by its sweeps' shared step.
        match &self.db {
            Db::Pg(p) => pg::run_sweep(p, pg::review::SWEEP, grace, every, limit).await,
            Db::Lite(p) => {
                let (sql, woken) = (lite::review::SWEEP, lite::review::woken);
                lite::sweeps::run(p, sql, grace, every, limit, woken).await
            }
        }
    }
}
