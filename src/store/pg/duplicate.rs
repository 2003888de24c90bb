//! PostgreSQL SQL for refunding a gateway-side duplicate (see
//! `store::duplicate`).

use serde_json::Value;
use sqlx::PgConnection;

use crate::store::duplicate::{CaseView, NewRefund};
use crate::store::refund::RefundError;
use crate::store::{Attempt, StoreError};

/// The case, its row locked.
pub(crate) async fn case_view(
    tx: &mut PgConnection,
    case_id: i64,
) -> Result<Option<CaseView>, StoreError> {
    let row: Option<(String, Option<String>, bool, Value)> = sqlx::query_as(
        "SELECT kind, order_id, resolved_at IS NOT NULL, details
           FROM cobro.recon_cases WHERE id = $1 FOR UPDATE",
    )
    .bind(case_id)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|(kind, order_id, resolved, details)| CaseView {
        kind,
        order_id,
        resolved,
        details,
    }))
}

/// The refund of gateway charge `charge_id` already asked for, unless
/// declined or failed after it succeeded, but made after it was declined
/// (the rows `one_refund_per_duplicate` counts).
pub(crate) async fn refund_of_gateway(
    tx: &mut PgConnection,
    charge_id: &str,
) -> Result<Option<Attempt>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT * FROM cobro.payment_attempts
          WHERE refund_of_gateway = $1
            AND ((state <> 'RECHAZADO' AND refund_failed_at IS NULL) OR refund_made_at IS NOT NULL)",
    )
    .bind(charge_id)
    .fetch_optional(&mut *tx)
    .await?)
}

/// The order's APROBADO charges, their rows locked.
pub(crate) async fn approved_charges(
    tx: &mut PgConnection,
    order_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT * FROM cobro.payment_attempts
          WHERE order_id = $1 AND kind <> 'refund' AND state = 'APROBADO' FOR UPDATE",
    )
    .bind(order_id)
    .fetch_all(&mut *tx)
    .await?)
}

/// The refund's row (the database's refund guard checks it), its first
/// transition-log row and its wake-up.
pub(crate) async fn insert(tx: &mut PgConnection, r: &NewRefund<'_>) -> Result<(), RefundError> {
    sqlx::query(
        "INSERT INTO cobro.payment_attempts
            (id, order_id, amount_minor, currency, idempotency_key, state, kind, refund_of,
             refund_of_gateway, next_action_at)
         VALUES ($1, $2, $3, $4, $5, 'PENDIENTE', 'refund', $6, $7, now())",
    )
    .bind(r.id)
    .bind(&r.dup.order_id)
    .bind(r.dup.amount_minor)
    .bind(&r.dup.currency)
    .bind(r.key)
    .bind(r.anchor)
    .bind(r.charge_id)
    .execute(&mut *tx)
    .await
    .map_err(RefundError::from_db)?;
    sqlx::query(
        "INSERT INTO cobro.attempt_transitions (attempt_id, from_state, to_state, cause, actor, evidence)
         VALUES ($1, NULL, 'PENDIENTE', $2, $3, $4)",
    )
    .bind(r.id)
    .bind(crate::store::duplicate::CAUSE)
    .bind(&r.actor)
    .bind(&r.evidence)
    .execute(&mut *tx)
    .await?;
    sqlx::query("SELECT cobro.wake($1, now())")
        .bind(r.id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}
