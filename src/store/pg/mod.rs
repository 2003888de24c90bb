//! PostgreSQL: the production store and the distributed engine. Workers on
//! many machines coordinate through it (row versions, `SKIP LOCKED`, partial
//! unique indexes, LISTEN/NOTIFY via apalis-postgres).
//!
//! Invariant: only SQL lives here; what to write comes from
//! [`super::change::plan`]. Times are the database's `now()`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use uuid::Uuid;

use super::change::{Applied, Change, Plan};
use super::enqueue::{EnqueueError, Enqueued};
use super::refund::{RefundError, Refunded};
use super::{Attempt, Check, StoreError, Transition, apply};
use crate::domain::{ChargeRequest, IdempotencyKey};

/// The sweeps' last conditions (the main sweep's and the review sweep's):
/// not quarantined (a poison wake-up waits for finance, `store::poison`),
/// oldest due first, at most `$3`, locked without waiting for a worker's lock.
macro_rules! due_last {
    () => {
        "               AND NOT EXISTS (SELECT 1 FROM cobro.wake_failures w
                                 JOIN cobro.recon_cases c ON c.id = w.case_id
                                WHERE w.attempt_id = payment_attempts.id AND c.resolved_at IS NULL)
             ORDER BY next_action_at
             LIMIT $3
             FOR UPDATE SKIP LOCKED"
    };
}

pub(crate) mod breaker;
pub(crate) mod cas;
pub(crate) mod counts;
pub(crate) mod duplicate;
pub(crate) mod escalation;
pub(crate) mod listing;
pub(crate) mod metrics;
pub(crate) mod notices;
pub(crate) mod pause;
pub(crate) mod poison;
pub(crate) mod recon;
pub(crate) mod retention;
pub(crate) mod review;
pub(crate) mod settlement;
pub(crate) mod webhooks;

pub(super) async fn connect(url: &str, max: u32) -> Result<PgPool, StoreError> {
    // No idle timeout or max lifetime: with either set, sqlx 0.9.0 runs a
    // maintenance task that spins a CPU forever when the pool is closed
    // during its pass (seen in CI: `num_idle` wraps below zero). Broken
    // connections are still replaced: sqlx pings a connection before
    // handing it out.
    // JIT off: PostgreSQL compiles a statement whose estimated cost passes
    // its thresholds, and over a large history the sweep's estimate does
    // (it expects a million index entries and reads ten thousand): at 10 M
    // attempts the compilation took 0.6-1.1 s of a 50 ms statement
    // (BENCHMARKS.md, Scale). cobro's statements are short; none gains.
    // READ COMMITTED whatever the database's default: the rules'
    // triggers read what other transactions committed after taking their
    // lock, and refuse to run under another level (CB013).
    let options = url.parse::<sqlx::postgres::PgConnectOptions>()?.options([
        ("jit", "off"),
        ("default_transaction_isolation", "read committed"),
    ]);
    // One direct connection first: a server that cannot be used is
    // reported at once, with where and why, not as the pool's timeout.
    super::schema::probe_pg(&options).await?;
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options)
        .await?)
}

pub(super) async fn migrate(
    pool: &PgPool,
) -> Result<Vec<super::schema::AppliedMigration>, StoreError> {
    // Concurrent runs take turns (on a connection of their own, outside
    // the pool), so that each reports only what it applied itself.
    let mut turn = PgConnection::connect_with(&pool.connect_options()).await?;
    sqlx::query("SELECT pg_advisory_lock(hashtext('cobro migrate'))")
        .execute(&mut turn)
        .await?;
    let applied = migrate_in_turn(pool).await;
    let _ = turn.close().await;
    applied
}

async fn migrate_in_turn(
    pool: &PgPool,
) -> Result<Vec<super::schema::AppliedMigration>, StoreError> {
    apalis_postgres::PostgresStorage::setup(pool)
        .await
        .map_err(|e| StoreError::Apalis(e.to_string()))?;
    let before = super::schema::pg_applied(pool).await?.unwrap_or_default();
    let migrator = super::schema::pg_migrator();
    migrator.run(pool).await?;
    Ok(super::schema::newly_applied(&before, &migrator))
}

#[derive(sqlx::FromRow)]
struct EnqueueRow {
    attempt_id: Uuid,
    idempotency_key: Uuid,
    state: String,
    created: bool,
}

/// Inserts the attempt and pushes its wake-up job on `conn`, which may be
/// inside the caller's transaction, by calling `cobro.enqueue_charge`. On
/// error the caller's transaction is aborted (PostgreSQL semantics) and must
/// be rolled back; nothing is written.
pub async fn enqueue_charge(
    conn: &mut PgConnection,
    req: &ChargeRequest,
) -> Result<Enqueued, EnqueueError> {
    enqueue_charge_as(conn, req, "app").await
}

/// [`enqueue_charge`], with `actor` in the first transition-log row.
pub async fn enqueue_charge_as(
    conn: &mut PgConnection,
    req: &ChargeRequest,
    actor: &str,
) -> Result<Enqueued, EnqueueError> {
    let row: EnqueueRow =
        sqlx::query_as("SELECT * FROM cobro.enqueue_charge($1, $2, $3, $4, $5, $6, $7)")
            .bind(req.order_id.as_str())
            .bind(req.amount.minor())
            .bind(req.currency.code())
            .bind(req.key.uuid())
            .bind(req.payment_method.as_ref().map(|p| p.token()))
            .bind(actor)
            .bind(req.customer.as_ref().map(|c| c.id()))
            .fetch_one(conn)
            .await
            .map_err(classify)?;
    Ok(Enqueued {
        attempt_id: row.attempt_id,
        idempotency_key: IdempotencyKey::from_uuid(row.idempotency_key),
        state: row
            .state
            .parse()
            .map_err(|e: crate::state::UnknownState| sqlx::Error::Decode(e.into()))?,
        created: row.created,
    })
}

fn classify(e: sqlx::Error) -> EnqueueError {
    match EnqueueError::from_rule(&e) {
        Some(refused) => refused,
        None if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("CB409") => {
            EnqueueError::KeyReused(
                e.as_database_error()
                    .map(|d| d.message().to_owned())
                    .unwrap_or_default(),
            )
        }
        None => EnqueueError::Db(e),
    }
}

#[derive(sqlx::FromRow)]
struct WithNow {
    #[sqlx(flatten)]
    attempt: Attempt,
    db_now: DateTime<Utc>,
}

pub(super) async fn load(
    pool: &PgPool,
    id: Uuid,
) -> Result<Option<(Attempt, DateTime<Utc>)>, StoreError> {
    let row: Option<WithNow> =
        sqlx::query_as("SELECT a.*, now() AS db_now FROM cobro.payment_attempts a WHERE a.id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|r| (r.attempt, r.db_now)))
}

/// PostgreSQL's clock (`now()`: the same value the statements of one
/// transaction see).
pub(super) async fn now(pool: &PgPool) -> Result<DateTime<Utc>, StoreError> {
    Ok(sqlx::query_scalar("SELECT now()").fetch_one(pool).await?)
}

/// The transaction's clock (`now()` is its start).
pub(super) async fn now_tx(tx: &mut PgConnection) -> Result<DateTime<Utc>, StoreError> {
    Ok(sqlx::query_scalar("SELECT now()").fetch_one(tx).await?)
}

pub(super) async fn apply(
    pool: &PgPool,
    group: Option<&cas::GroupCommit>,
    seen: &Attempt,
    change: &Change<'_>,
    plan: &Plan<'_>,
) -> Result<Applied, StoreError> {
    if row_and_log_only(change, plan) {
        // The change and its log row are one statement, and one statement
        // is one transaction: they commit together, without the BEGIN and
        // COMMIT round trips (the happy path's answer, and most writes).
        // With group commit, one statement for the writes of every handler
        // finishing meanwhile.
        let row = cas::Cas::new(seen, change, plan);
        let moved = match group {
            Some(g) => g.apply(row).await?,
            None => cas::move_one(pool, &row).await?,
        };
        return Ok(moved.map_or(Applied::Lost, |a| Applied::Moved(Box::new(a))));
    }
    let mut tx = pool.begin().await?;
    let applied = apply_tx(&mut tx, seen, change, plan).await?;
    tx.commit().await?;
    Ok(applied)
}

/// Several compare-and-sets in a transaction of the caller's (the fetch's
/// claims), for distinct attempts: those that write only their row and log
/// together in one statement, the others one by one. Any database error
/// is returned and aborts the caller's transaction.
pub(super) async fn apply_all_tx(
    tx: &mut PgConnection,
    items: &[(&Attempt, &Change<'_>, &Plan<'_>)],
) -> Result<Vec<Applied>, StoreError> {
    let alone =
        |(_, change, plan): &&(&Attempt, &Change<'_>, &Plan<'_>)| row_and_log_only(change, plan);
    let rows: Vec<cas::Cas> = items
        .iter()
        .filter(alone)
        .map(|(seen, change, plan)| cas::Cas::new(seen, change, plan))
        .collect();
    let mut moved = if rows.is_empty() {
        Vec::new()
    } else {
        cas::move_and_log(&mut *tx, &rows).await?
    }
    .into_iter();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        // `moved` is in the order of the items it was written for.
        let applied = if alone(&item) {
            moved
                .next()
                .flatten()
                .map_or(Applied::Lost, |a| Applied::Moved(Box::new(a)))
        } else {
            apply_tx(tx, item.0, item.1, item.2).await?
        };
        out.push(applied);
    }
    Ok(out)
}

/// The compare-and-set and, when the plan logs, its transition-log row, in
/// one statement: the log row is written only if the row moved. `None`
/// when it did not ([`Applied::Lost`]).
async fn move_and_log(
    db: &mut PgConnection,
    seen: &Attempt,
    change: &Change<'_>,
    plan: &Plan<'_>,
) -> Result<Option<Attempt>, StoreError> {
    cas::move_one(db, &cas::Cas::new(seen, change, plan)).await
}

/// Whether [`apply_tx`] writes nothing beyond [`move_and_log`]: no notice,
/// no check record, no wake-up (kept beside it, so the two agree).
fn row_and_log_only(change: &Change<'_>, plan: &Plan<'_>) -> bool {
    plan.notice.is_none() && change.add_check.is_none() && !plan.wake
}

/// The compare-and-set write inside a transaction of the caller's; nothing
/// is written when it returns [`Applied::Lost`].
pub(super) async fn apply_tx(
    tx: &mut PgConnection,
    seen: &Attempt,
    change: &Change<'_>,
    plan: &Plan<'_>,
) -> Result<Applied, StoreError> {
    let Some(now) = move_and_log(&mut *tx, seen, change, plan).await? else {
        return Ok(Applied::Lost);
    };
    if let Some(kind) = plan.notice {
        apply::notice::<Postgres>(&mut *tx, NOTICE, &now, kind).await?;
    }
    if let Some(check) = &change.add_check {
        apply::check::<Postgres>(&mut *tx, CHECK, &now, check, change).await?;
    }
    if plan.wake
        && let Some(at) = now.next_action_at
    {
        sqlx::query("SELECT cobro.wake($1, $2, $3)")
            .bind(seen.id)
            .bind(at)
            .bind(plan.wake_priority)
            .execute(&mut *tx)
            .await?;
    }
    Ok(Applied::Moved(Box::new(now)))
}

/// The customer notice a move writes (see `store::apply::notice`).
const NOTICE: &str =
    "INSERT INTO cobro.notices (order_id, attempt_id, kind, decline_code, next_retry_at)
             VALUES ($1, $2, $3, $4, $5)";

/// The check record a move writes (see `store::apply::check`).
const CHECK: &str = "INSERT INTO cobro.attempt_checks
                (attempt_id, check_number, scheduled_at, started_at, lookup_result,
                 http_status, error_kind, actor)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

pub(super) async fn wake(pool: &PgPool, id: Uuid) -> Result<(), StoreError> {
    sqlx::query("SELECT cobro.wake($1)")
        .bind(id)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn sweep(
    pool: &PgPool,
    grace: Duration,
    every: Duration,
    limit: i64,
) -> Result<u64, StoreError> {
    let sql = concat!(
        "WITH due AS (
            SELECT id FROM cobro.payment_attempts
             WHERE ((lease_owner IS NOT NULL AND next_action_at <= now())
                 OR (lease_owner IS NULL AND state IN ('PENDIENTE', 'DESCONOCIDO', 'RECHAZADO')
                     AND next_action_at <= now() - make_interval(secs => $1::float8))
                 -- a live attempt must always have a due time; none is a bug to recover from
                 OR (lease_owner IS NULL AND state IN ('PENDIENTE', 'DESCONOCIDO')
                     AND next_action_at IS NULL
                     AND updated_at <= now() - make_interval(secs => $1::float8)))
               AND state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'RECHAZADO')
               AND (state <> 'RECHAZADO' OR next_action_at IS NOT NULL)
               -- parked: waiting for the gateway; the breaker's re-wake brings it back
               AND parked_since IS NULL
               AND (woken_at IS NULL OR woken_at <= now() - make_interval(secs => $2::float8))
               -- late behind a backlog, not lost: its own wake-up is queued and due
               -- (index jobs_pending_wake_target)
               AND NOT EXISTS (SELECT 1 FROM apalis.jobs j
                                WHERE cobro.wake_target(j.job) = payment_attempts.id
                                  AND j.status = 'Pending' AND j.run_at <= now())
",
        due_last!(),
        "
         ), marked AS (
            UPDATE cobro.payment_attempts a SET woken_at = now()
              FROM due WHERE a.id = due.id
            RETURNING a.id, a.state
         )
         SELECT count(cobro.wake(id, now(), CASE WHEN state = 'PENDIENTE' THEN 0 ELSE 1 END))
           FROM marked",
    );
    run_sweep(pool, sql, grace, every, limit).await
}

/// Runs a sweep's statement (this one's, or the review sweep's): it binds
/// the grace and the re-wake interval in seconds, then the limit, and
/// counts the attempts it woke.
pub(crate) async fn run_sweep(
    pool: &PgPool,
    sql: &'static str,
    grace: Duration,
    every: Duration,
    limit: i64,
) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(sql)
        .bind(grace.as_secs_f64())
        .bind(every.as_secs_f64())
        .bind(limit)
        .fetch_one(pool)
        .await?;
    Ok(n as u64)
}

pub(super) async fn attempts_for_order(
    pool: &PgPool,
    order_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT * FROM cobro.payment_attempts WHERE order_id = $1 ORDER BY created_at, id",
    )
    .bind(order_id)
    .fetch_all(pool)
    .await?)
}

/// The order's attempts, oldest first, with the order locked for every
/// writer: the rows first, then the order's lock (the order every door
/// takes them in: the SQL functions lock the rows, the charge_gate trigger
/// the order), then the rows again, so an attempt inserted before the lock
/// was taken is seen.
pub(super) async fn order_locked(
    tx: &mut PgConnection,
    order_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    let select = "SELECT * FROM cobro.payment_attempts WHERE order_id = $1
                  ORDER BY created_at, id FOR UPDATE";
    sqlx::query(select).bind(order_id).execute(&mut *tx).await?;
    sqlx::query("SELECT cobro.lock_order($1)")
        .bind(order_id)
        .execute(&mut *tx)
        .await?;
    Ok(sqlx::query_as(select)
        .bind(order_id)
        .fetch_all(&mut *tx)
        .await?)
}

pub(super) async fn transitions(pool: &PgPool, id: Uuid) -> Result<Vec<Transition>, StoreError> {
    Ok(
        sqlx::query_as("SELECT * FROM cobro.attempt_transitions WHERE attempt_id = $1 ORDER BY id")
            .bind(id)
            .fetch_all(pool)
            .await?,
    )
}

pub(super) async fn checks(pool: &PgPool, id: Uuid) -> Result<Vec<Check>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT attempt_id, check_number, scheduled_at, started_at, finished_at,
                lookup_result, http_status, error_kind, actor
           FROM cobro.attempt_checks WHERE attempt_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn business_retry(
    pool: &PgPool,
    attempt_id: Uuid,
    max_attempts: i32,
    actor: &str,
    expected_version: Option<i64>,
    caps: super::CardCaps,
) -> Result<super::retry::Retried, super::retry::RetryError> {
    use super::retry::{Retried, RetryError};
    let [visa, mc_day, mc_month] = caps.sql();
    let row: Result<(Uuid, Uuid, i32, Option<String>), sqlx::Error> =
        // The key is NULL: the function derives it (cobro.retry_key).
        sqlx::query_as("SELECT * FROM cobro.business_retry($1, NULL, $2, $3, $4, $5, $6, $7)")
            .bind(attempt_id)
            .bind(max_attempts)
            .bind(actor)
            .bind(expected_version)
            .bind(visa)
            .bind(mc_day)
            .bind(mc_month)
            .fetch_one(pool)
            .await;
    match row {
        Ok((attempt_id, idempotency_key, attempt_number, cap_override)) => Ok(Retried {
            attempt_id,
            idempotency_key,
            attempt_number,
            cap_override,
        }),
        Err(e) => {
            if let Some(refused) = RetryError::from_rule(&e) {
                return Err(refused);
            }
            let Some(db) = e.as_database_error() else {
                return Err(RetryError::Db(e));
            };
            let msg = db.message().to_owned();
            Err(match db.code().as_deref() {
                Some("CB404") => RetryError::NotFound(msg),
                Some("CB003") => RetryError::NotDeclined(msg),
                Some("CB002") => RetryError::AlreadyApproved(msg),
                Some("CB001") => RetryError::AlreadyRetrying(msg),
                Some("CB005") => RetryError::MaxAttempts(msg),
                Some("CB006") => RetryError::AlreadyHandled(msg),
                Some("CB007") => RetryError::CardCap(msg),
                _ => RetryError::Db(e),
            })
        }
    }
}

#[derive(sqlx::FromRow)]
struct RefundRow {
    refund_id: Uuid,
    idempotency_key: Uuid,
    state: String,
    created: bool,
}

pub(super) async fn request_refund(
    pool: &PgPool,
    attempt_id: Uuid,
    amount_minor: i64,
    key: Uuid,
    actor: &str,
) -> Result<Refunded, RefundError> {
    let row: RefundRow = sqlx::query_as("SELECT * FROM cobro.request_refund($1, $2, $3, $4)")
        .bind(attempt_id)
        .bind(amount_minor)
        .bind(key)
        .bind(actor)
        .fetch_one(pool)
        .await
        .map_err(RefundError::from_db)?;
    Ok(Refunded {
        refund_id: row.refund_id,
        idempotency_key: row.idempotency_key,
        state: row
            .state
            .parse()
            .map_err(|e: crate::state::UnknownState| sqlx::Error::Decode(e.into()))?,
        created: row.created,
    })
}

pub(super) async fn refunds_of(
    pool: &PgPool,
    attempt_id: Uuid,
) -> Result<Vec<Attempt>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT * FROM cobro.payment_attempts WHERE refund_of = $1 ORDER BY created_at, id",
    )
    .bind(attempt_id)
    .fetch_all(pool)
    .await?)
}
