//! The operator's search on PostgreSQL: one statement, planned with the
//! actual values every time (an unnamed statement), so the unset filters
//! fold away and the planner picks the index of the filters given.
//!
//! EXPLAIN ANALYZE on 500,000 attempts (PostgreSQL 15): no filter, a date
//! window, a common state or a deep cursor: a backward scan of
//! `payment_attempts_created` reading the page's rows (0.1-0.5 ms); an
//! order: `payment_attempts_order`; a key: its UNIQUE index; a live state
//! (`PENDIENTE`, `EN_PROCESO`): the partial `payment_attempts_due`;
//! `EN_REVISION`/`DESCONOCIDO`: the partial `payment_attempts_escalation`.
//! No new index was needed. The slow case is a combination that matches
//! nothing (a state and a kind never seen together): the created-at walk
//! reads every row (64 ms at 500,000, warm); an index on `(state, created_at, id)`
//! did not change the plan (the planner expects the two to match), so none
//! was added. The plans: `docs/operator-search-plans.md`.

use sqlx::PgPool;

use crate::store::listing::{AttemptFilter, Bounds};
use crate::store::{Attempt, StoreError};

pub(crate) async fn page(
    pool: &PgPool,
    f: &AttemptFilter,
    b: &Bounds,
    limit: i64,
) -> Result<Vec<Attempt>, StoreError> {
    let (kind, refunds) = f.kind.map(|k| k.columns()).unwrap_or_default();
    Ok(sqlx::query_as(
        "SELECT * FROM cobro.payment_attempts
          WHERE ($1::text IS NULL OR order_id = $1)
            AND ($2::uuid IS NULL OR idempotency_key = $2)
            AND ($3::text IS NULL OR state = $3)
            AND ($4::text IS NULL OR kind = $4)
            AND ($5::bool IS NULL OR (kind = 'refund') = $5)
            AND created_at >= $6 AND created_at < $7
            AND (created_at, id) < ($8, $9)
          ORDER BY created_at DESC, id DESC
          LIMIT $10",
    )
    .persistent(false)
    .bind(f.order_id.as_deref())
    .bind(f.idempotency_key)
    .bind(f.state.map(|s| s.as_str()))
    .bind(kind)
    .bind(refunds)
    .bind(b.from)
    .bind(b.to)
    .bind(b.before.created_at)
    .bind(b.before.id)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}
