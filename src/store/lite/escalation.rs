//! The escalation queue's scan on SQLite (index `payment_attempts_escalation`).

use std::time::Duration;

use sqlx::{Row, SqlitePool};

use super::attempt;
use crate::store::StoreError;
use crate::store::escalation::{Escalated, Totals};

pub(crate) async fn escalated(
    pool: &SqlitePool,
    stale_after: Duration,
    limit: i64,
) -> Result<Vec<Escalated>, StoreError> {
    let rows = sqlx::query(concat!(
        "SELECT *, (",
        now_ms!(),
        " - created_at) / 1000 AS age_secs
           FROM payment_attempts
          WHERE state IN ('DESCONOCIDO', 'EN_REVISION')
            AND (state = 'EN_REVISION' OR created_at <= ",
        now_ms!(),
        " - ?1)
          ORDER BY created_at, id
          LIMIT ?2"
    ))
    .bind(i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX))
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Escalated {
                attempt: attempt(r)?,
                age_secs: r.try_get("age_secs")?,
            })
        })
        .collect()
}

pub(crate) async fn totals(pool: &SqlitePool) -> Result<Vec<Totals>, StoreError> {
    // SQLite's sum() of integers raises "integer overflow" past i64: each
    // amount is split into high and low parts (below 10^9 each), summed
    // apart, and put back together exactly in i128.
    let rows: Vec<(String, String, String, i64, i64, i64)> = sqlx::query_as(
        "SELECT state, CASE WHEN kind = 'refund' THEN 'refund' ELSE 'charge' END AS kind,
                currency, count(*) AS count,
                sum(amount_minor / 1000000000) AS high, sum(amount_minor % 1000000000) AS low
           FROM payment_attempts
          GROUP BY 1, 2, 3
          ORDER BY 1, 2, 3",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(state, kind, currency, count, high, low)| Totals {
            state,
            kind,
            currency,
            count,
            amount_minor: i128::from(high) * 1_000_000_000 + i128::from(low),
        })
        .collect())
}
