//! The review sweep on SQLite (index `payment_attempts_review_due`).

use std::time::Duration;

use sqlx::SqlitePool;

use super::uuid;
use crate::store::StoreError;

pub(crate) async fn sweep(
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
             WHERE state = 'EN_REVISION'
               AND next_action_at <= ",
        now_ms!(),
        "
               AND (lease_owner IS NOT NULL OR next_action_at <= ",
        now_ms!(),
        " - ?1)
               AND (woken_at IS NULL OR woken_at <= ",
        now_ms!(),
        " - ?2)
",
        due_last!(),
        ")
         RETURNING id"
    );
    super::sweeps::run(pool, sql, grace, every, limit, |(id,): &(String,)| {
        Ok((uuid(id)?, 0))
    })
    .await
}
