//! SQLite SQL for reconciliation (see `store::recon`). Lists of keys, ids
//! and orders are bound as one JSON array each and read with `json_each`.

use std::time::Duration;

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, Sqlite, SqlitePool};

use super::{attempt, json, ms, uuid};
use crate::domain::{Finding, Window};
use crate::store::contradiction::RefundMark;
use crate::store::recon::{self, CaseCursor, CaseWrite, ReconCase, ReconRun, ReconScope, RunClaim};
use crate::store::{Attempt, StoreError};

fn json_list<T: serde::Serialize>(items: &[T]) -> Result<String, StoreError> {
    serde_json::to_string(items).map_err(|e| StoreError::Corrupt(e.to_string()))
}

pub(crate) async fn attempts(
    pool: &SqlitePool,
    window: &Window,
    scope: &ReconScope,
) -> Result<Vec<Attempt>, StoreError> {
    let keys: Vec<String> = scope
        .keys
        .iter()
        .map(|k| k.hyphenated().to_string())
        .collect();
    let rows = sqlx::query(
        "SELECT * FROM payment_attempts
          WHERE (created_at >= ?1 AND created_at < ?2)
             OR idempotency_key IN (SELECT value FROM json_each(?3))
             OR gateway_charge_id IN (SELECT value FROM json_each(?4))
             OR order_id IN (SELECT value FROM json_each(?5))
          ORDER BY created_at, id",
    )
    .bind(window.from.timestamp_millis())
    .bind(window.to.timestamp_millis())
    .bind(json_list(&keys)?)
    .bind(json_list(&scope.gateway_ids)?)
    .bind(json_list(&scope.orders)?)
    .fetch_all(pool)
    .await?;
    rows.iter().map(attempt).collect()
}

/// Opens the case of `f` unless its dedupe key exists, inside the caller's
/// transaction.
pub(crate) async fn case_tx(
    tx: &mut sqlx::SqliteConnection,
    window: &Window,
    f: &Finding,
) -> Result<CaseWrite, StoreError> {
    let details =
        serde_json::to_string(&f.details).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let new: Option<i64> = sqlx::query_scalar(concat!(
        "INSERT INTO recon_cases
            (kind, dedupe_key, order_id, attempt_id, gateway_ref, details,
             window_from, window_to, opened_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ",
        now_ms!(),
        ")
         ON CONFLICT (dedupe_key) DO NOTHING
         RETURNING id"
    ))
    .bind(f.kind.as_str())
    .bind(&f.dedupe_key)
    .bind(&f.order_id)
    .bind(f.attempt_id.map(|id| id.hyphenated().to_string()))
    .bind(&f.gateway_ref)
    .bind(details)
    .bind(window.from.timestamp_millis())
    .bind(window.to.timestamp_millis())
    .fetch_optional(&mut *tx)
    .await?;
    let existing = "SELECT id, resolved_at IS NOT NULL FROM recon_cases WHERE dedupe_key = ?1";
    recon::case_written::<Sqlite>(tx, existing, f, new).await
}

fn case_row(r: &SqliteRow) -> Result<ReconCase, StoreError> {
    Ok(ReconCase {
        id: r.try_get("id")?,
        kind: r.try_get("kind")?,
        dedupe_key: r.try_get("dedupe_key")?,
        order_id: r.try_get("order_id")?,
        attempt_id: r
            .try_get::<Option<String>, _>("attempt_id")?
            .map(|s| uuid(&s))
            .transpose()?,
        gateway_ref: r.try_get("gateway_ref")?,
        details: json(r.try_get("details")?).unwrap_or_default(),
        window_from: ms(r.try_get("window_from")?),
        window_to: ms(r.try_get("window_to")?),
        opened_at: ms(r.try_get("opened_at")?),
        resolved_at: r.try_get::<Option<i64>, _>("resolved_at")?.map(ms),
        resolved_by: r.try_get("resolved_by")?,
        resolution_note: r.try_get("resolution_note")?,
    })
}

pub(crate) async fn cases(
    pool: &SqlitePool,
    open_only: bool,
) -> Result<Vec<ReconCase>, StoreError> {
    let rows = sqlx::query(
        "SELECT * FROM recon_cases WHERE NOT ?1 OR resolved_at IS NULL ORDER BY opened_at, id",
    )
    .bind(open_only)
    .fetch_all(pool)
    .await?;
    rows.iter().map(case_row).collect()
}

pub(crate) async fn open_page(
    pool: &SqlitePool,
    after: Option<CaseCursor>,
    limit: i64,
) -> Result<Vec<ReconCase>, StoreError> {
    let rows = sqlx::query(
        "SELECT * FROM recon_cases
          WHERE resolved_at IS NULL
            AND (?1 IS NULL OR opened_at > ?1 OR (opened_at = ?1 AND id > ?2))
          ORDER BY opened_at, id
          LIMIT ?3",
    )
    .bind(after.map(|c| c.opened_at.timestamp_millis()))
    .bind(after.map_or(0, |c| c.id))
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter().map(case_row).collect()
}

pub(crate) async fn case(pool: &SqlitePool, id: i64) -> Result<Option<ReconCase>, StoreError> {
    let row = sqlx::query("SELECT * FROM recon_cases WHERE id = ?1")
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(case_row).transpose()
}

/// The resolved case, or `None` when it is not open (missing or resolved).
pub(crate) async fn resolve(
    pool: &SqlitePool,
    id: i64,
    by: &str,
    note: &str,
) -> Result<Option<ReconCase>, StoreError> {
    let row = sqlx::query(concat!(
        "UPDATE recon_cases SET resolved_at = ",
        now_ms!(),
        ", resolved_by = ?2, resolution_note = ?3
          WHERE id = ?1 AND resolved_at IS NULL
          RETURNING *"
    ))
    .bind(id)
    .bind(by)
    .bind(note)
    .fetch_optional(pool)
    .await?;
    row.as_ref().map(case_row).transpose()
}

pub(crate) async fn claim(
    pool: &SqlitePool,
    window: &Window,
    by: &str,
    retry_after: Duration,
    stale_after: Duration,
) -> Result<Option<RunClaim>, StoreError> {
    let row: Option<(i64, i32)> = sqlx::query_as(concat!(
        "INSERT INTO recon_runs (window_from, window_to, claimed_by, claimed_at, tries)
         VALUES (?1, ?2, ?3, ",
        now_ms!(),
        ", 1)
         ON CONFLICT (window_from, window_to) DO UPDATE
            SET claimed_by = excluded.claimed_by, claimed_at = excluded.claimed_at,
                tries = recon_runs.tries + 1, finished_at = NULL, outcome = NULL, report = NULL
          WHERE (recon_runs.outcome = 'failed'
                 AND recon_runs.finished_at <= excluded.claimed_at - ?4)
             OR (recon_runs.finished_at IS NULL
                 AND recon_runs.claimed_at <= excluded.claimed_at - ?5)
         RETURNING id, tries"
    ))
    .bind(window.from.timestamp_millis())
    .bind(window.to.timestamp_millis())
    .bind(by)
    .bind(retry_after.as_millis() as i64)
    .bind(stale_after.as_millis() as i64)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(id, tries)| RunClaim { id, tries }))
}

pub(crate) async fn finish(
    pool: &SqlitePool,
    claim: &RunClaim,
    outcome: &str,
    report: &serde_json::Value,
) -> Result<bool, StoreError> {
    let report = serde_json::to_string(report).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let done = sqlx::query(concat!(
        "UPDATE recon_runs SET finished_at = ",
        now_ms!(),
        ", outcome = ?3, report = ?4
          WHERE id = ?1 AND tries = ?2 AND finished_at IS NULL"
    ))
    .bind(claim.id)
    .bind(claim.tries)
    .bind(outcome)
    .bind(report)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn runs(pool: &SqlitePool) -> Result<Vec<ReconRun>, StoreError> {
    let rows = sqlx::query("SELECT * FROM recon_runs ORDER BY window_from, id")
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|r| {
            Ok(ReconRun {
                id: r.try_get("id")?,
                window_from: ms(r.try_get("window_from")?),
                window_to: ms(r.try_get("window_to")?),
                claimed_by: r.try_get("claimed_by")?,
                claimed_at: ms(r.try_get("claimed_at")?),
                tries: r.try_get("tries")?,
                finished_at: r.try_get::<Option<i64>, _>("finished_at")?.map(ms),
                outcome: r.try_get("outcome")?,
                report: json(r.try_get("report")?),
            })
        })
        .collect()
}

/// Marks a settled refund with what the gateway did to it since, on the
/// version seen, and logs it; false when it moved meanwhile, or when it
/// would be the second refund of a duplicate to count. The log row
/// first, under the same fence (`refund_mark_logged` must find it; SQLite
/// has no deferred triggers), so a lost mark leaves no row either.
pub(crate) async fn mark_refund(
    tx: &mut sqlx::SqliteConnection,
    seen: &Attempt,
    mark: RefundMark,
    actor: &str,
    details: &serde_json::Value,
) -> Result<bool, StoreError> {
    let id = seen.id.hyphenated().to_string();
    let (column, state, now) = (mark.column(), mark.state().as_str(), now_ms!());
    // As on PostgreSQL: never a second refund of one duplicate counting.
    let fence = format!(
        "id = ?1 AND version = ?2 AND state = '{state}' AND kind = 'refund' AND {column} IS NULL
         AND NOT EXISTS (SELECT 1 FROM payment_attempts o
                          WHERE o.refund_of_gateway = payment_attempts.refund_of_gateway
                            AND o.id <> payment_attempts.id
                            AND ((o.state <> 'RECHAZADO' AND o.refund_failed_at IS NULL)
                                 OR o.refund_made_at IS NOT NULL))"
    );
    let logged = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO attempt_transitions
            (attempt_id, from_state, to_state, cause, actor, evidence, version, at)
         SELECT ?1, state, state, ?3, ?4, ?5, ?2 + 1, {now}
           FROM payment_attempts WHERE {fence}"
    )))
    .bind(&id)
    .bind(seen.version)
    .bind(mark.cause())
    .bind(actor)
    .bind(details.to_string())
    .execute(&mut *tx)
    .await?;
    if logged.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE payment_attempts SET {column} = {now}, version = version + 1, updated_at = {now}
          WHERE {fence}"
    )))
    .bind(&id)
    .bind(seen.version)
    .execute(&mut *tx)
    .await?;
    Ok(true)
}
