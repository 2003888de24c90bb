//! PostgreSQL SQL for the gateway breaker, parked attempts and the pace
//! (see `store::breaker`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use crate::store::StoreError;
use crate::store::breaker::{BreakerRow, GatewayHealth};

pub(crate) async fn get(pool: &PgPool, gateway: &str) -> Result<Option<BreakerRow>, StoreError> {
    Ok(
        sqlx::query_as("SELECT * FROM cobro.gateway_breakers WHERE gateway = $1")
            .bind(gateway)
            .fetch_optional(pool)
            .await?,
    )
}

/// The gateway's row, created if missing, locked (`FOR UPDATE`) until the
/// transaction ends.
pub(crate) async fn locked(tx: &mut PgConnection, gateway: &str) -> Result<BreakerRow, StoreError> {
    sqlx::query("INSERT INTO cobro.gateway_breakers (gateway) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(gateway)
        .execute(&mut *tx)
        .await?;
    Ok(
        sqlx::query_as("SELECT * FROM cobro.gateway_breakers WHERE gateway = $1 FOR UPDATE")
            .bind(gateway)
            .fetch_one(&mut *tx)
            .await?,
    )
}

pub(crate) const WRITE: &str = "UPDATE cobro.gateway_breakers SET
            state = $2, failures = $3, failing_since = $4, last_failure = $5,
            last_failure_at = $6, last_answer_at = $7, opened_at = $8, closed_at = $9,
            next_probe_at = $10, probes = $11, next_rewake_at = $12
          WHERE gateway = $1";

pub(crate) const LOG_EVENT: &str =
    "INSERT INTO cobro.gateway_breaker_events (gateway, state, cause, actor, detail, at)
         VALUES ($1, $2, $3, $4, $5, $6)";

pub(crate) async fn claim_probe(
    pool: &PgPool,
    gateway: &str,
    every: Duration,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE cobro.gateway_breakers
            SET next_probe_at = now() + make_interval(secs => $2::float8), probes = probes + 1
          WHERE gateway = $1 AND state = 'open' AND next_probe_at <= now()",
    )
    .bind(gateway)
    .bind(every.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn rewake(
    pool: &PgPool,
    gateway: &str,
    batch: u32,
    turn: Duration,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    // The turn: read-only (no write, no WAL flush) while nothing is parked.
    let took = sqlx::query(
        "UPDATE cobro.gateway_breakers
            SET next_rewake_at = now() + make_interval(secs => $2::float8)
          WHERE gateway = $1 AND state = 'closed'
            AND (next_rewake_at IS NULL OR next_rewake_at <= now())
            AND EXISTS (SELECT 1 FROM cobro.payment_attempts WHERE parked_since IS NOT NULL)",
    )
    .bind(gateway)
    .bind(turn.as_secs_f64())
    .execute(&mut *tx)
    .await?;
    if took.rows_affected() == 0 {
        return Ok(0);
    }
    let spacing = turn.as_secs_f64() / f64::from(batch.max(1));
    let n: i64 = sqlx::query_scalar(
        "WITH locked AS (
            SELECT id, parked_since FROM cobro.payment_attempts
             WHERE parked_since IS NOT NULL
             ORDER BY parked_since, id
             LIMIT $1
             FOR UPDATE SKIP LOCKED
         ), picked AS (
            SELECT id, row_number() OVER (ORDER BY parked_since, id) - 1 AS i FROM locked
         ), moved AS (
            UPDATE cobro.payment_attempts a
               SET parked_since = NULL, version = a.version + 1, updated_at = now(),
                   next_action_at = now() + make_interval(secs => picked.i * $2::float8)
              FROM picked WHERE a.id = picked.id
            RETURNING a.id, a.state, a.next_action_at
         )
         SELECT count(cobro.wake(id, next_action_at, CASE WHEN state = 'PENDIENTE' THEN 0 ELSE 1 END))
           FROM moved",
    )
    .bind(i64::from(batch))
    .bind(spacing)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(n as u64)
}

pub(crate) async fn health(pool: &PgPool) -> Result<GatewayHealth, StoreError> {
    let breakers = sqlx::query_as("SELECT * FROM cobro.gateway_breakers ORDER BY gateway")
        .fetch_all(pool)
        .await?;
    let (parked, oldest_parked): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
        "SELECT count(*), min(parked_since) FROM cobro.payment_attempts
          WHERE parked_since IS NOT NULL",
    )
    .fetch_one(pool)
    .await?;
    Ok(GatewayHealth {
        breakers,
        parked,
        oldest_parked,
    })
}

pub(crate) async fn events(
    pool: &PgPool,
    gateway: &str,
) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT state, cause, at FROM cobro.gateway_breaker_events
          WHERE gateway = $1 ORDER BY id",
    )
    .bind(gateway)
    .fetch_all(pool)
    .await?)
}

pub(crate) async fn pace(
    pool: &PgPool,
    gateway: &str,
    interval: Duration,
    burst: u32,
) -> Result<f64, StoreError> {
    let t = interval.as_secs_f64();
    Ok(sqlx::query_scalar(
        "INSERT INTO cobro.gateway_pace AS p (gateway, next_at)
         VALUES ($1, now() + make_interval(secs => $2::float8))
         ON CONFLICT (gateway) DO UPDATE
            SET next_at = greatest(p.next_at, now()) + make_interval(secs => $2::float8)
         RETURNING extract(epoch FROM (next_at - now()))::float8 - $3::float8",
    )
    .bind(gateway)
    .bind(t)
    .bind(t * f64::from(burst.max(1)))
    .fetch_one(pool)
    .await?)
}
