//! The review sweep on SQLite (index `payment_attempts_review_due`).

use std::time::Duration;

use chrono::Utc;
use sqlx::SqlitePool;

use super::{push_wake, uuid};
use crate::store::StoreError;

pub(crate) async fn sweep(
    pool: &SqlitePool,
    grace: Duration,
    every: Duration,
    limit: i64,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let woken: Vec<(String,)> = sqlx::query_as(concat!(
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
    ))
    .bind(i64::try_from(grace.as_millis()).unwrap_or(i64::MAX))
    .bind(i64::try_from(every.as_millis()).unwrap_or(i64::MAX))
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    for (id,) in &woken {
        push_wake(&mut tx, uuid(id)?, Utc::now(), 0).await?;
    }
    tx.commit().await?;
    Ok(woken.len() as u64)
}
