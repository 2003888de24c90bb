//! The escalation queue's scan on SQLite (index `payment_attempts_escalation`).

use sqlx::{Row, SqlitePool};

use super::attempt;
use crate::store::StoreError;
use crate::store::escalation::{Escalated, QueueCursor, QueueQuery, Totals};

/// The queue's selection; `?1`-`?5` as bound by [`bind_query`].
macro_rules! queue_where {
    () => {
        concat!(
            "FROM payment_attempts
              WHERE state IN ('DESCONOCIDO', 'EN_REVISION')
                AND (state = 'EN_REVISION' OR created_at <= ",
            now_ms!(),
            " - ?1)
                AND (?2 IS NULL OR state = ?2)
                AND (?3 IS NULL OR currency = ?3)
                AND (?4 IS NULL OR (kind = 'refund') = ?4)
                AND created_at <= ",
            now_ms!(),
            " - ?5"
        )
    };
}

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn bind_query<'q>(
    q: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    query: &'q QueueQuery,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    q.bind(millis(query.stale_after))
        .bind(query.state.map(|s| s.as_str()))
        .bind(query.currency.as_deref())
        .bind(query.refunds)
        .bind(millis(query.min_age))
}

pub(crate) async fn page(
    pool: &SqlitePool,
    query: &QueueQuery,
    after: QueueCursor,
    limit: i64,
) -> Result<Vec<Escalated>, StoreError> {
    let rows = bind_query(
        sqlx::query(concat!(
            "SELECT *, (",
            now_ms!(),
            " - created_at) / 1000 AS age_secs ",
            queue_where!(),
            " AND (created_at, id) > (?6, ?7)
             ORDER BY created_at, id
             LIMIT ?8"
        )),
        query,
    )
    .bind(after.created_at.timestamp_millis())
    .bind(after.id.hyphenated().to_string())
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| Ok(Escalated::new(attempt(r)?, r.try_get("age_secs")?)))
        .collect()
}

pub(crate) async fn count(pool: &SqlitePool, query: &QueueQuery) -> Result<i64, StoreError> {
    let row = bind_query(
        sqlx::query(concat!("SELECT count(*) AS n ", queue_where!())),
        query,
    )
    .fetch_one(pool)
    .await?;
    Ok(row.try_get("n")?)
}

pub(crate) async fn totals(pool: &SqlitePool) -> Result<Vec<Totals>, StoreError> {
    // SQLite's sum() of integers raises "integer overflow" past i64: each
    // amount is split into high and low parts (below 10^9 each), summed
    // apart, and put back together exactly in i128.
    let rows: Vec<(String, String, String, i64, i64, i64)> = sqlx::query_as(
        "SELECT CASE WHEN cancel_reason IS NULL THEN state ELSE state || ' (cancelled)' END AS state,
                CASE WHEN kind = 'refund' THEN 'refund' ELSE 'charge' END AS kind,
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
