//! PostgreSQL SQL for reconciliation (see `store::recon`).

use std::time::Duration;

use sqlx::{PgPool, Postgres};

use crate::domain::{Finding, Window};
use crate::store::contradiction::RefundMark;
use crate::store::recon::{self, CaseCursor, CaseWrite, ReconCase, ReconRun, ReconScope, RunClaim};
use crate::store::{Attempt, StoreError};

pub(crate) async fn attempts(
    pool: &PgPool,
    window: &Window,
    scope: &ReconScope,
) -> Result<Vec<Attempt>, StoreError> {
    Ok(sqlx::query_as(
        // One index per branch (a single OR of the four was a sequential
        // scan of every attempt at 10 M: BENCHMARKS.md, Scale).
        "SELECT * FROM cobro.payment_attempts
          WHERE id IN (
                SELECT id FROM cobro.payment_attempts WHERE created_at >= $1 AND created_at < $2
                UNION SELECT id FROM cobro.payment_attempts WHERE idempotency_key = ANY($3)
                UNION SELECT id FROM cobro.payment_attempts WHERE gateway_charge_id = ANY($4)
                UNION SELECT id FROM cobro.payment_attempts WHERE order_id = ANY($5))
          ORDER BY created_at, id",
    )
    .bind(window.from)
    .bind(window.to)
    .bind(&scope.keys)
    .bind(&scope.gateway_ids)
    .bind(&scope.orders)
    .fetch_all(pool)
    .await?)
}

/// Opens the case of `f` unless its dedupe key exists, inside the caller's
/// transaction.
pub(crate) async fn case_tx(
    tx: &mut sqlx::PgConnection,
    window: &Window,
    f: &Finding,
) -> Result<CaseWrite, StoreError> {
    let new: Option<i64> = sqlx::query_scalar(
        "INSERT INTO cobro.recon_cases
            (kind, dedupe_key, order_id, attempt_id, gateway_ref, details, window_from, window_to)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (dedupe_key) DO NOTHING
         RETURNING id",
    )
    .bind(f.kind.as_str())
    .bind(&f.dedupe_key)
    .bind(&f.order_id)
    .bind(f.attempt_id)
    .bind(&f.gateway_ref)
    .bind(sqlx::types::Json(&f.details))
    .bind(window.from)
    .bind(window.to)
    .fetch_optional(&mut *tx)
    .await?;
    let existing =
        "SELECT id, resolved_at IS NOT NULL FROM cobro.recon_cases WHERE dedupe_key = $1";
    recon::case_written::<Postgres>(tx, existing, f, new).await
}

pub(crate) async fn cases(pool: &PgPool, open_only: bool) -> Result<Vec<ReconCase>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT * FROM cobro.recon_cases
          WHERE NOT $1 OR resolved_at IS NULL
          ORDER BY opened_at, id",
    )
    .bind(open_only)
    .fetch_all(pool)
    .await?)
}

pub(crate) async fn open_page(
    pool: &PgPool,
    after: Option<CaseCursor>,
    limit: i64,
) -> Result<Vec<ReconCase>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT * FROM cobro.recon_cases
          WHERE resolved_at IS NULL
            AND ($1::timestamptz IS NULL OR (opened_at, id) > ($1, $2))
          ORDER BY opened_at, id
          LIMIT $3",
    )
    .bind(after.map(|c| c.opened_at))
    .bind(after.map_or(0, |c| c.id))
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

pub(crate) async fn case(pool: &PgPool, id: i64) -> Result<Option<ReconCase>, StoreError> {
    Ok(
        sqlx::query_as("SELECT * FROM cobro.recon_cases WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?,
    )
}

/// The resolved case, or `None` when it is not open (missing or resolved).
pub(crate) async fn resolve(
    pool: &PgPool,
    id: i64,
    by: &str,
    note: &str,
) -> Result<Option<ReconCase>, StoreError> {
    Ok(sqlx::query_as(
        "UPDATE cobro.recon_cases
            SET resolved_at = now(), resolved_by = $2, resolution_note = $3
          WHERE id = $1 AND resolved_at IS NULL
          RETURNING *",
    )
    .bind(id)
    .bind(by)
    .bind(note)
    .fetch_optional(pool)
    .await?)
}

pub(crate) async fn claim(
    pool: &PgPool,
    window: &Window,
    by: &str,
    retry_after: Duration,
    stale_after: Duration,
) -> Result<Option<RunClaim>, StoreError> {
    let row: Option<(i64, i32)> = sqlx::query_as(
        "INSERT INTO cobro.recon_runs AS r (window_from, window_to, claimed_by)
         VALUES ($1, $2, $3)
         ON CONFLICT (window_from, window_to) DO UPDATE
            SET claimed_by = EXCLUDED.claimed_by, claimed_at = now(), tries = r.tries + 1,
                finished_at = NULL, outcome = NULL, report = NULL
          WHERE (r.outcome = 'failed'
                 AND r.finished_at <= now() - make_interval(secs => $4::float8))
             OR (r.finished_at IS NULL
                 AND r.claimed_at <= now() - make_interval(secs => $5::float8))
         RETURNING id, tries",
    )
    .bind(window.from)
    .bind(window.to)
    .bind(by)
    .bind(retry_after.as_secs_f64())
    .bind(stale_after.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(id, tries)| RunClaim { id, tries }))
}

pub(crate) async fn finish(
    pool: &PgPool,
    claim: &RunClaim,
    outcome: &str,
    report: &serde_json::Value,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE cobro.recon_runs SET finished_at = now(), outcome = $3, report = $4
          WHERE id = $1 AND tries = $2 AND finished_at IS NULL",
    )
    .bind(claim.id)
    .bind(claim.tries)
    .bind(outcome)
    .bind(sqlx::types::Json(report))
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(crate) async fn runs(pool: &PgPool) -> Result<Vec<ReconRun>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, window_from, window_to, claimed_by, claimed_at, tries, finished_at, outcome, report
           FROM cobro.recon_runs ORDER BY window_from, id",
    )
    .fetch_all(pool)
    .await?)
}

/// A mark never makes a second refund of one duplicate count (what
/// `one_refund_per_duplicate` would refuse, failing the whole write): the
/// duplicate was then refunded twice at the gateway, which its case says.
/// `a` is the refund being marked.
const NO_SECOND_FOR_A_DUPLICATE: &str = "NOT EXISTS (
    SELECT 1 FROM cobro.payment_attempts o
     WHERE o.refund_of_gateway = a.refund_of_gateway AND o.id <> a.id
       AND ((o.state <> 'RECHAZADO' AND o.refund_failed_at IS NULL)
            OR o.refund_made_at IS NOT NULL))";

/// Marks a settled refund with what the gateway did to it since, on the
/// version seen, and logs it; false when it moved meanwhile, or when it
/// would be the second refund of a duplicate to count.
pub(crate) async fn mark_refund(
    tx: &mut sqlx::PgConnection,
    seen: &Attempt,
    mark: RefundMark,
    actor: &str,
    details: &serde_json::Value,
) -> Result<bool, StoreError> {
    let (column, state) = (mark.column(), mark.state().as_str());
    let marked = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE cobro.payment_attempts a
            SET {column} = now(), version = version + 1, updated_at = now()
          WHERE id = $1 AND version = $2 AND state = '{state}' AND kind = 'refund'
            AND {column} IS NULL AND {NO_SECOND_FOR_A_DUPLICATE}"
    )))
    .bind(seen.id)
    .bind(seen.version)
    .execute(&mut *tx)
    .await?;
    if marked.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO cobro.attempt_transitions
            (attempt_id, from_state, to_state, cause, actor, evidence, version)
         VALUES ($1, $5, $5, $6, $2, $3, $4)",
    )
    .bind(seen.id)
    .bind(actor)
    .bind(details)
    .bind(seen.version + 1)
    .bind(state)
    .bind(mark.cause())
    .execute(&mut *tx)
    .await?;
    Ok(true)
}
