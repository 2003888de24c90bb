//! The escalation queue's scan on PostgreSQL (index `payment_attempts_escalation`).

use std::time::Duration;

use sqlx::PgPool;

use crate::store::escalation::{Escalated, Totals};
use crate::store::{Attempt, StoreError};

#[derive(sqlx::FromRow)]
struct Row {
    #[sqlx(flatten)]
    attempt: Attempt,
    age_secs: i64,
}

pub(crate) async fn escalated(
    pool: &PgPool,
    stale_after: Duration,
    limit: i64,
) -> Result<Vec<Escalated>, StoreError> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT a.*, floor(extract(epoch FROM now() - a.created_at))::bigint AS age_secs
           FROM cobro.payment_attempts a
          WHERE a.state IN ('DESCONOCIDO', 'EN_REVISION')
            AND (a.state = 'EN_REVISION'
                 OR a.created_at <= now() - make_interval(secs => $1::float8))
          ORDER BY a.created_at, a.id
          LIMIT $2",
    )
    .bind(stale_after.as_secs_f64())
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Escalated {
            attempt: r.attempt,
            age_secs: r.age_secs,
        })
        .collect())
}

pub(crate) async fn totals(pool: &PgPool) -> Result<Vec<Totals>, StoreError> {
    // sum(bigint) is numeric: exact at any size. It comes back as text and
    // is parsed into an i128, never cast to bigint (which would overflow).
    let rows: Vec<(String, String, String, i64, String)> = sqlx::query_as(
        "SELECT state, CASE WHEN kind = 'refund' THEN 'refund' ELSE 'charge' END AS kind,
                currency, count(*) AS count, sum(amount_minor)::text AS amount_minor
           FROM cobro.payment_attempts
          GROUP BY 1, 2, 3
          ORDER BY 1, 2, 3",
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(state, kind, currency, count, sum)| {
            let amount_minor = sum.parse::<i128>().map_err(|e| {
                StoreError::Corrupt(format!(
                    "sum of amount_minor {sum:?} is not an integer: {e}"
                ))
            })?;
            Ok(Totals {
                state,
                kind,
                currency,
                count,
                amount_minor,
            })
        })
        .collect()
}
