//! The escalation queue's scan on PostgreSQL (index `payment_attempts_escalation`).

use sqlx::PgPool;

use crate::store::escalation::{Escalated, QueueCursor, QueueQuery, Totals};
use crate::store::{Attempt, StoreError};

#[derive(sqlx::FromRow)]
struct Row {
    #[sqlx(flatten)]
    attempt: Attempt,
    age_secs: i64,
}

/// The queue's selection; `$1`-`$5` as bound by [`bind_query`].
macro_rules! queue_where {
    () => {
        "FROM cobro.payment_attempts a
          WHERE a.state IN ('DESCONOCIDO', 'EN_REVISION')
            AND (a.state = 'EN_REVISION'
                 OR a.created_at <= now() - make_interval(secs => $1::float8))
            AND ($2::text IS NULL OR a.state = $2)
            AND ($3::text IS NULL OR a.currency = $3)
            AND ($4::bool IS NULL OR (a.kind = 'refund') = $4)
            AND a.created_at <= now() - make_interval(secs => $5::float8)"
    };
}

fn bind_query<'q, O>(
    q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    query: &'q QueueQuery,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    // Planned with the actual values every time (an unnamed statement):
    // a cached generic plan cannot see which filters are unset and, on a
    // large history, picked the full `payment_attempts_created` index and
    // read settled rows; with the values it uses the queue's partial
    // indexes (`payment_attempts_escalation`, `payment_attempts_review_due`).
    q.persistent(false)
        .bind(query.stale_after.as_secs_f64())
        .bind(query.state.map(|s| s.as_str()))
        .bind(query.currency.as_deref())
        .bind(query.refunds)
        .bind(query.min_age.as_secs_f64())
}

pub(crate) async fn page(
    pool: &PgPool,
    query: &QueueQuery,
    after: QueueCursor,
    limit: i64,
) -> Result<Vec<Escalated>, StoreError> {
    let rows: Vec<Row> = bind_query(
        sqlx::query_as(concat!(
            "SELECT a.*, floor(extract(epoch FROM now() - a.created_at))::bigint AS age_secs ",
            queue_where!(),
            " AND (a.created_at, a.id) > ($6, $7)
             ORDER BY a.created_at, a.id
             LIMIT $8"
        )),
        query,
    )
    .bind(after.created_at)
    .bind(after.id)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Escalated::new(r.attempt, r.age_secs))
        .collect())
}

pub(crate) async fn count(pool: &PgPool, query: &QueueQuery) -> Result<i64, StoreError> {
    let (n,): (i64,) = bind_query(
        sqlx::query_as(concat!("SELECT count(*) ", queue_where!())),
        query,
    )
    .fetch_one(pool)
    .await?;
    Ok(n)
}

pub(crate) async fn totals(pool: &PgPool) -> Result<Vec<Totals>, StoreError> {
    // sum(bigint) is numeric: exact at any size. It comes back as text and
    // is parsed into an i128, never cast to bigint (which would overflow).
    let rows: Vec<(String, String, String, i64, String)> = sqlx::query_as(
        "SELECT CASE WHEN cancel_reason IS NULL THEN state ELSE state || ' (cancelled)' END AS state,
                CASE WHEN kind = 'refund' THEN 'refund' ELSE 'charge' END AS kind,
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
