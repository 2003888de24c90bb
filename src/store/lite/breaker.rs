//! SQLite SQL for the gateway breaker, parked attempts and the pace (see
//! `store::breaker`). Times are integer milliseconds; every write runs in
//! `BEGIN IMMEDIATE`, so SQLite's single writer serialises them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection, SqlitePool};

use super::{ms, push_wake, uuid};
use crate::state::State;
use crate::store::StoreError;
use crate::store::breaker::{BreakerRow, GatewayHealth};

fn row(r: &SqliteRow) -> Result<BreakerRow, StoreError> {
    let at = |c: &str| -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(r.try_get::<Option<i64>, _>(c)?.map(ms))
    };
    Ok(BreakerRow {
        gateway: r.try_get("gateway")?,
        state: r.try_get("state")?,
        failures: r.try_get("failures")?,
        failing_since: at("failing_since")?,
        last_failure: r.try_get("last_failure")?,
        last_failure_at: at("last_failure_at")?,
        last_answer_at: at("last_answer_at")?,
        opened_at: at("opened_at")?,
        closed_at: at("closed_at")?,
        next_probe_at: at("next_probe_at")?,
        probes: r.try_get("probes")?,
        next_rewake_at: at("next_rewake_at")?,
    })
}

pub(crate) async fn get(
    pool: &SqlitePool,
    gateway: &str,
) -> Result<Option<BreakerRow>, StoreError> {
    sqlx::query("SELECT * FROM gateway_breakers WHERE gateway = ?1")
        .bind(gateway)
        .fetch_optional(pool)
        .await?
        .as_ref()
        .map(row)
        .transpose()
}

/// The gateway's row, created if missing (the transaction holds the
/// write lock).
pub(crate) async fn locked(
    tx: &mut SqliteConnection,
    gateway: &str,
) -> Result<BreakerRow, StoreError> {
    sqlx::query("INSERT INTO gateway_breakers (gateway) VALUES (?1) ON CONFLICT DO NOTHING")
        .bind(gateway)
        .execute(&mut *tx)
        .await?;
    let found = sqlx::query("SELECT * FROM gateway_breakers WHERE gateway = ?1")
        .bind(gateway)
        .fetch_one(&mut *tx)
        .await?;
    row(&found)
}

pub(crate) const WRITE: &str = "UPDATE gateway_breakers SET
            state = ?2, failures = ?3, failing_since = ?4, last_failure = ?5,
            last_failure_at = ?6, last_answer_at = ?7, opened_at = ?8, closed_at = ?9,
            next_probe_at = ?10, probes = ?11, next_rewake_at = ?12
          WHERE gateway = ?1";

pub(crate) const LOG_EVENT: &str =
    "INSERT INTO gateway_breaker_events (gateway, state, cause, actor, detail, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

pub(crate) async fn claim_probe(
    pool: &SqlitePool,
    gateway: &str,
    every: Duration,
) -> Result<bool, StoreError> {
    let done = sqlx::query(concat!(
        "UPDATE gateway_breakers SET next_probe_at = ",
        now_ms!(),
        " + ?2, probes = probes + 1
          WHERE gateway = ?1 AND state = 'open' AND next_probe_at <= ",
        now_ms!()
    ))
    .bind(gateway)
    .bind(every.as_millis() as i64)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn rewake(
    pool: &SqlitePool,
    gateway: &str,
    batch: u32,
    turn: Duration,
) -> Result<u64, StoreError> {
    // Read first: no write lock while nothing is parked.
    let parked: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM payment_attempts WHERE parked_since IS NOT NULL)",
    )
    .fetch_one(pool)
    .await?;
    if !parked {
        return Ok(0);
    }
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let took = sqlx::query(concat!(
        "UPDATE gateway_breakers SET next_rewake_at = ",
        now_ms!(),
        " + ?2
          WHERE gateway = ?1 AND state = 'closed'
            AND (next_rewake_at IS NULL OR next_rewake_at <= ",
        now_ms!(),
        ")"
    ))
    .bind(gateway)
    .bind(turn.as_millis() as i64)
    .execute(&mut *tx)
    .await?;
    if took.rows_affected() == 0 {
        return Ok(0);
    }
    let spacing = turn.as_millis() as i64 / i64::from(batch.max(1));
    let ids: Vec<(String, String)> = sqlx::query_as(
        "SELECT id, state FROM payment_attempts WHERE parked_since IS NOT NULL
          ORDER BY parked_since, id LIMIT ?1",
    )
    .bind(i64::from(batch))
    .fetch_all(&mut *tx)
    .await?;
    let now: i64 = sqlx::query_scalar(concat!("SELECT ", now_ms!()))
        .fetch_one(&mut *tx)
        .await?;
    for (i, (id, state)) in ids.iter().enumerate() {
        let at = now + i as i64 * spacing;
        sqlx::query(
            "UPDATE payment_attempts
                SET parked_since = NULL, version = version + 1, updated_at = ?2, next_action_at = ?3
              WHERE id = ?1",
        )
        .bind(id)
        .bind(now)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        let priority = i32::from(state != State::Pendiente.as_str());
        push_wake(&mut tx, uuid(id)?, ms(at), priority).await?;
    }
    tx.commit().await?;
    Ok(ids.len() as u64)
}

pub(crate) async fn health(pool: &SqlitePool) -> Result<GatewayHealth, StoreError> {
    let breakers = sqlx::query("SELECT * FROM gateway_breakers ORDER BY gateway")
        .fetch_all(pool)
        .await?
        .iter()
        .map(row)
        .collect::<Result<Vec<_>, _>>()?;
    let (parked, oldest): (i64, Option<i64>) = sqlx::query_as(
        "SELECT count(*), min(parked_since) FROM payment_attempts WHERE parked_since IS NOT NULL",
    )
    .fetch_one(pool)
    .await?;
    Ok(GatewayHealth {
        breakers,
        parked,
        oldest_parked: oldest.map(ms),
    })
}

pub(crate) async fn events(
    pool: &SqlitePool,
    gateway: &str,
) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT state, cause, at FROM gateway_breaker_events WHERE gateway = ?1 ORDER BY id",
    )
    .bind(gateway)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(s, c, at)| (s, c, ms(at))).collect())
}

pub(crate) async fn pace(
    pool: &SqlitePool,
    gateway: &str,
    interval: Duration,
    burst: u32,
) -> Result<f64, StoreError> {
    let t = interval.as_micros() as i64;
    // Microseconds here (a slot can be shorter than a millisecond); the
    // table holds this backend's only microsecond time.
    let wait_us: i64 = sqlx::query_scalar(concat!(
        "INSERT INTO gateway_pace (gateway, next_at) VALUES (?1, ",
        now_us!(),
        " + ?2)
         ON CONFLICT (gateway) DO UPDATE
            SET next_at = max(next_at, ",
        now_us!(),
        ") + ?2
         RETURNING next_at - ",
        now_us!(),
        " - ?3"
    ))
    .bind(gateway)
    .bind(t)
    .bind(t * i64::from(burst.max(1)))
    .fetch_one(pool)
    .await?;
    Ok(wait_us as f64 / 1e6)
}
