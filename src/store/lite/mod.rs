//! SQLite: the embedded default, so the product runs on a fresh machine with
//! nothing installed. One machine; the workers of one or more processes on it
//! share the file.
//!
//! Invariant: only SQL lives here; what to write comes from
//! [`super::change::plan`]. Durability: WAL with `synchronous = FULL` on
//! every pooled connection (apalis-sqlite's `setup` turns `synchronous` OFF
//! on the connection it uses, so it runs on a throwaway connection). Times
//! are INTEGER milliseconds since the Unix epoch from SQLite's clock; ids and
//! keys are hyphenated UUID text.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, Sqlite, SqliteConnection, SqlitePool};
use uuid::Uuid;

use super::change::{Applied, Change, Plan};
use super::{Attempt, CHARGE_QUEUE, Check, REFUND_QUEUE, StoreError, Transition, apply};
use crate::domain::Wake;
use crate::state::State;

/// SQLite's clock in milliseconds (the same value within one statement).
macro_rules! now_ms {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}

/// The clock in microseconds (the pace's slots can be shorter than a
/// millisecond). `julianday` keeps about a millisecond of precision, so
/// this is that clock, scaled.
macro_rules! now_us {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)"
    };
}

/// The sweeps' last conditions (the main sweep's and the review sweep's):
/// not quarantined (a poison wake-up waits for finance, `store::poison`),
/// oldest due first, at most `?3`.
macro_rules! due_last {
    () => {
        "               AND NOT EXISTS (SELECT 1 FROM wake_failures w
                                 JOIN recon_cases c ON c.id = w.case_id
                                WHERE w.attempt_id = payment_attempts.id AND c.resolved_at IS NULL)
             ORDER BY next_action_at
             LIMIT ?3"
    };
}

pub(crate) mod breaker;
pub(crate) mod caps;
pub(crate) mod counts;
pub(crate) mod duplicate;
pub(crate) mod enqueue;
pub(crate) mod escalation;
pub(crate) mod listing;
pub(crate) mod metrics;
pub(crate) mod notices;
pub(crate) mod pause;
pub(crate) mod payment_method;
pub(crate) mod poison;
pub(crate) mod recon;
pub(crate) mod refund;
pub(crate) mod retention;
pub(crate) mod retry;
pub(crate) mod review;
pub(crate) mod settlement;
pub(crate) mod sweeps;
pub(super) use sweeps::sweep;
pub(crate) mod wakeups;
pub(crate) mod webhooks;

pub use enqueue::enqueue_charge;

fn options(url: &str) -> Result<SqliteConnectOptions, StoreError> {
    Ok(SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(30))
        // SQLite's default page cache is 2 MB per connection, and each
        // connection fills it; the file is in the OS page cache anyway.
        // At 256 KiB a worker's resident set fell from 64 to 40 MiB with no
        // loss of throughput (BENCHMARKS.md, "SQLite"). (Capping the pool at
        // 8 connections took it to 25 MiB but was slower at 20,000 charges.)
        .pragma("cache_size", "-256"))
}

/// Pool options without sqlx's maintenance task (see `store::pool_options`).
fn pool_options(max: u32) -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(30))
        .idle_timeout(None)
        .max_lifetime(None)
}

pub(super) async fn connect(url: &str, max: u32) -> Result<SqlitePool, StoreError> {
    Ok(pool_options(max).connect_with(options(url)?).await?)
}

pub(super) async fn migrate(url: &str) -> Result<Vec<super::schema::AppliedMigration>, StoreError> {
    let opts = options(url)?;
    // Held until the end of this function: concurrent migrations of one
    // file take turns.
    let _turn = migration_lock(opts.get_filename()).await?;
    // A one-connection pool that is closed afterwards: apalis' setup leaves
    // `synchronous = OFF` on its connection, which must never serve money.
    let setup = pool_options(1).connect_with(opts).await?;
    apalis_sqlite::SqliteStorage::setup(&setup)
        .await
        .map_err(|e| StoreError::Apalis(e.to_string()))?;
    let before = super::schema::sqlite_applied(&setup)
        .await?
        .unwrap_or_default();
    let migrator = super::schema::sqlite_migrator();
    migrator.run(&setup).await?;
    setup.close().await;
    Ok(super::schema::newly_applied(&before, &migrator))
}

/// An exclusive lock on `<database file>.migrate-lock`, so that processes
/// migrating the same file at once (each process of a Procfile runs
/// `cobro migrate` as it starts) take turns: the second finds everything
/// applied. sqlx takes no lock for SQLite migrations (PostgreSQL's take an
/// advisory lock), and two runs racing fail on "duplicate column" or
/// "UNIQUE constraint failed: _sqlx_migrations.version". `None` for an
/// in-memory database, which no other process can see.
async fn migration_lock(db_file: &std::path::Path) -> Result<Option<std::fs::File>, StoreError> {
    if db_file.as_os_str().is_empty() || db_file == std::path::Path::new(":memory:") {
        return Ok(None);
    }
    let mut path = db_file.as_os_str().to_owned();
    path.push(".migrate-lock");
    let path = std::path::PathBuf::from(path);
    let held = path.clone();
    let locked = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&held)?;
        file.lock()?;
        Ok::<_, std::io::Error>(file)
    })
    .await
    .map_err(|e| StoreError::MigrationLock {
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    locked
        .map(Some)
        .map_err(|source| StoreError::MigrationLock { path, source })
}

pub(crate) fn ms(t: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(t).single().unwrap_or_default()
}

/// The message of a unique index's refusal (which index: the message
/// names its columns), or `None` for any other error.
fn unique_violation(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .filter(|d| d.is_unique_violation())
        .map(|d| d.message().to_owned())
}

fn uuid(s: &str) -> Result<Uuid, StoreError> {
    Uuid::try_parse(s).map_err(|e| StoreError::Corrupt(format!("uuid {s:?}: {e}")))
}

fn json(s: Option<String>) -> Option<serde_json::Value> {
    s.and_then(|s| serde_json::from_str(&s).ok())
}

pub(crate) fn attempt(r: &sqlx::sqlite::SqliteRow) -> Result<Attempt, StoreError> {
    let state: String = r.try_get("state")?;
    Ok(Attempt {
        id: uuid(r.try_get("id")?)?,
        order_id: r.try_get("order_id")?,
        amount_minor: r.try_get("amount_minor")?,
        currency: r.try_get("currency")?,
        payment_method: r.try_get("payment_method")?,
        customer: r.try_get("customer")?,
        idempotency_key: uuid(r.try_get("idempotency_key")?)?,
        state: State::from_str(&state).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        kind: r.try_get("kind")?,
        refund_of: r
            .try_get::<Option<String>, _>("refund_of")?
            .map(|s| uuid(&s))
            .transpose()?,
        attempt_number: r.try_get("attempt_number")?,
        gateway_charge_id: r.try_get("gateway_charge_id")?,
        decline_code: r.try_get("decline_code")?,
        check_count: r.try_get("check_count")?,
        send_count: r.try_get("send_count")?,
        next_action_at: r.try_get::<Option<i64>, _>("next_action_at")?.map(ms),
        lease_owner: r.try_get("lease_owner")?,
        lease_expires_at: r.try_get::<Option<i64>, _>("lease_expires_at")?.map(ms),
        version: r.try_get("version")?,
        last_evidence: json(r.try_get("last_evidence")?),
        created_at: ms(r.try_get("created_at")?),
        updated_at: ms(r.try_get("updated_at")?),
        parked_since: r.try_get::<Option<i64>, _>("parked_since")?.map(ms),
        gateway_ref: r.try_get("gateway_ref")?,
        cancel_reason: r.try_get("cancel_reason")?,
        refund_of_gateway: r.try_get("refund_of_gateway")?,
    })
}

/// The attempts `sql` selects with `key` bound as `?1`, decoded.
pub(crate) async fn attempts_by<'c>(
    conn: impl sqlx::Executor<'c, Database = sqlx::Sqlite>,
    sql: &'static str,
    key: &str,
) -> Result<Vec<Attempt>, StoreError> {
    let rows = sqlx::query(sql).bind(key).fetch_all(conn).await?;
    rows.iter().map(attempt).collect()
}

/// The attempt `sql` selects with `key` bound as `?1`, if any, decoded.
pub(crate) async fn attempt_by<'c>(
    conn: impl sqlx::Executor<'c, Database = sqlx::Sqlite>,
    sql: &'static str,
    key: &str,
) -> Result<Option<Attempt>, StoreError> {
    let row = sqlx::query(sql).bind(key).fetch_optional(conn).await?;
    row.as_ref().map(attempt).transpose()
}

/// Pushes the apalis wake-up job for `id`, due at `at`, on its kind's queue
/// (refunds on [`REFUND_QUEUE`]). apalis-sqlite keeps whole seconds, so the
/// job may come up to a second early; the handler waits out the rest.
pub(super) async fn push_wake(
    conn: &mut SqliteConnection,
    id: Uuid,
    at: DateTime<Utc>,
    priority: i32,
) -> Result<(), StoreError> {
    let job = serde_json::to_vec(&Wake { attempt_id: id })
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    sqlx::query(
        "INSERT INTO Jobs (job, id, job_type, status, attempts, max_attempts, run_at, priority)
         VALUES (?1, ?2,
                 CASE WHEN EXISTS (SELECT 1 FROM payment_attempts
                                    WHERE id = ?6 AND kind = 'refund') THEN ?7 ELSE ?3 END,
                 'Pending', 0, 3, ?4, ?5)",
    )
    .bind(job)
    .bind(ulid::Ulid::generate().to_string())
    .bind(CHARGE_QUEUE)
    .bind(at.timestamp())
    .bind(priority)
    .bind(id.hyphenated().to_string())
    .bind(REFUND_QUEUE)
    .execute(conn)
    .await?;
    Ok(())
}

pub(super) async fn load(
    pool: &SqlitePool,
    id: Uuid,
) -> Result<Option<(Attempt, DateTime<Utc>)>, StoreError> {
    let row = sqlx::query(concat!(
        "SELECT *, ",
        now_ms!(),
        " AS db_now FROM payment_attempts WHERE id = ?1"
    ))
    .bind(id.hyphenated().to_string())
    .fetch_optional(pool)
    .await?;
    row.map(|r| Ok((attempt(&r)?, ms(r.try_get("db_now")?))))
        .transpose()
}

/// SQLite's clock.
pub(super) async fn now(pool: &SqlitePool) -> Result<DateTime<Utc>, StoreError> {
    let at: i64 = sqlx::query_scalar(concat!("SELECT ", now_ms!()))
        .fetch_one(pool)
        .await?;
    Ok(ms(at))
}

pub(super) async fn now_tx(tx: &mut SqliteConnection) -> Result<DateTime<Utc>, StoreError> {
    let at: i64 = sqlx::query_scalar(concat!("SELECT ", now_ms!()))
        .fetch_one(tx)
        .await?;
    Ok(ms(at))
}

pub(super) async fn apply(
    pool: &SqlitePool,
    seen: &Attempt,
    change: &Change<'_>,
    plan: &Plan<'_>,
) -> Result<Applied, StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let applied = apply_tx(&mut tx, seen, change, plan).await?;
    tx.commit().await?;
    Ok(applied)
}

/// The compare-and-set write inside a transaction of the caller's (begun
/// with `BEGIN IMMEDIATE`); nothing is written when it returns
/// [`Applied::Lost`].
pub(super) async fn apply_tx(
    tx: &mut SqliteConnection,
    seen: &Attempt,
    change: &Change<'_>,
    plan: &Plan<'_>,
) -> Result<Applied, StoreError> {
    let id = seen.id.hyphenated().to_string();
    // The log row first: SQLite has no deferred triggers, so the UPDATE's
    // `state_change_logged` must find it. It is written only if the
    // compare-and-set below will move the row (the same fence, under the
    // same BEGIN IMMEDIATE), so a lost write leaves no row either.
    if plan.log {
        let ev = change.evidence;
        sqlx::query(concat!(
            "INSERT INTO attempt_transitions
                (attempt_id, from_state, to_state, cause, actor,
                 http_status, error_kind, lookup_result, evidence, version, at)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 + 1, ",
            now_ms!(),
            "
               FROM payment_attempts WHERE id = ?1 AND version = ?10 AND state = ?2"
        ))
        .bind(&id)
        .bind(seen.state.as_str())
        .bind(plan.to.as_str())
        .bind(change.cause)
        .bind(change.actor)
        .bind(ev.and_then(|e| e.http_status).map(i32::from))
        .bind(ev.map(|e| e.error_kind.as_str()))
        .bind(ev.and_then(|e| e.lookup_result.as_deref()))
        .bind(plan.evidence_json.as_deref())
        .bind(seen.version)
        .execute(&mut *tx)
        .await?;
    }
    let row = sqlx::query(concat!(
        "UPDATE payment_attempts SET
            state = ?3,
            version = version + 1,
            updated_at = ",
        now_ms!(),
        ",
            gateway_charge_id = COALESCE(?4, gateway_charge_id),
            decline_code = COALESCE(?5, decline_code),
            next_action_at = CASE WHEN ?6 IS NULL THEN NULL
                                  ELSE ",
        now_ms!(),
        " + CAST(?6 * 1000.0 AS INTEGER) END,
            lease_owner = ?7,
            lease_expires_at = CASE WHEN ?8 IS NULL THEN NULL
                                    ELSE ",
        now_ms!(),
        " + CAST(?8 * 1000.0 AS INTEGER) END,
            check_count = check_count + ?9,
            send_count = send_count + ?10,
            last_evidence = COALESCE(?11, last_evidence),
            parked_since = CASE WHEN ?13 THEN COALESCE(parked_since, ",
        now_ms!(),
        ") END,
            gateway_ref = CASE WHEN ?14 IS NULL THEN gateway_ref ELSE ?14 END,
            cancel_reason = COALESCE(?15, cancel_reason)
         WHERE id = ?1 AND version = ?2 AND state = ?12
         RETURNING *"
    ))
    .bind(&id)
    .bind(seen.version)
    .bind(plan.to.as_str())
    .bind(change.charge_id)
    .bind(change.decline_code)
    .bind(plan.act_in_secs)
    .bind(plan.lease_owner)
    .bind(plan.lease_secs)
    .bind(plan.add_check)
    .bind(plan.add_send)
    .bind(plan.evidence_json.as_deref())
    .bind(seen.state.as_str())
    .bind(plan.park)
    .bind(change.gateway_ref)
    .bind(change.cancel_reason)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(Applied::Lost);
    };
    let now = attempt(&row)?;
    if plan.log && plan.to != seen.state {
        crate::store::observe::transition_written(seen.state, plan.to, change.cause);
    }
    if let Some(kind) = plan.notice {
        apply::notice::<Sqlite>(&mut *tx, NOTICE, &now, kind).await?;
    }
    if let Some(check) = &change.add_check {
        apply::check::<Sqlite>(&mut *tx, CHECK, &now, check, change).await?;
    }
    if plan.wake
        && let Some(at) = now.next_action_at
    {
        push_wake(&mut *tx, seen.id, at, plan.wake_priority).await?;
    }
    Ok(Applied::Moved(Box::new(now)))
}

/// The customer notice a move writes (see `store::apply::notice`).
const NOTICE: &str = concat!(
    "INSERT INTO notices (order_id, attempt_id, kind, decline_code, next_retry_at, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ",
    now_ms!(),
    ")"
);

/// The check record a move writes (see `store::apply::check`).
const CHECK: &str = concat!(
    "INSERT INTO attempt_checks
                (attempt_id, check_number, scheduled_at, started_at, finished_at, lookup_result,
                 http_status, error_kind, actor)
             VALUES (?1, ?2, ?3, ?4, ",
    now_ms!(),
    ", ?5, ?6, ?7, ?8)"
);

pub(super) async fn attempts_for_order(
    pool: &SqlitePool,
    order_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    attempts_by(pool, ATTEMPTS_OF_ORDER, order_id).await
}

const ATTEMPTS_OF_ORDER: &str =
    "SELECT * FROM payment_attempts WHERE order_id = ?1 ORDER BY created_at, id";

/// The order's attempts, oldest first (the transaction holds the write
/// lock, so no attempt of the order can be inserted meanwhile).
pub(super) async fn order_locked(
    tx: &mut SqliteConnection,
    order_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    attempts_by(&mut *tx, ATTEMPTS_OF_ORDER, order_id).await
}

pub(super) async fn refunds_of(pool: &SqlitePool, id: Uuid) -> Result<Vec<Attempt>, StoreError> {
    let sql = "SELECT * FROM payment_attempts WHERE refund_of = ?1 ORDER BY created_at, id";
    attempts_by(pool, sql, &id.hyphenated().to_string()).await
}

pub(super) async fn transitions(
    pool: &SqlitePool,
    id: Uuid,
) -> Result<Vec<Transition>, StoreError> {
    let rows = sqlx::query("SELECT * FROM attempt_transitions WHERE attempt_id = ?1 ORDER BY id")
        .bind(id.hyphenated().to_string())
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Transition {
                id: r.try_get("id")?,
                attempt_id: id,
                from_state: r.try_get("from_state")?,
                to_state: r.try_get("to_state")?,
                cause: r.try_get("cause")?,
                actor: r.try_get("actor")?,
                http_status: r.try_get("http_status")?,
                error_kind: r.try_get("error_kind")?,
                lookup_result: r.try_get("lookup_result")?,
                evidence: json(r.try_get("evidence")?),
                at: ms(r.try_get("at")?),
            })
        })
        .collect()
}

pub(super) async fn checks(pool: &SqlitePool, id: Uuid) -> Result<Vec<Check>, StoreError> {
    let rows = sqlx::query("SELECT * FROM attempt_checks WHERE attempt_id = ?1 ORDER BY id")
        .bind(id.hyphenated().to_string())
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Check {
                attempt_id: id,
                check_number: r.try_get("check_number")?,
                scheduled_at: ms(r.try_get("scheduled_at")?),
                started_at: ms(r.try_get("started_at")?),
                finished_at: ms(r.try_get("finished_at")?),
                lookup_result: r.try_get("lookup_result")?,
                http_status: r.try_get("http_status")?,
                error_kind: r.try_get("error_kind")?,
                actor: r.try_get("actor")?,
            })
        })
        .collect()
}
