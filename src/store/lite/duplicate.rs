//! SQLite SQL for refunding a gateway-side duplicate (see
//! `store::duplicate`); the transaction holds the write lock.

use sqlx::{Row, SqliteConnection};

use super::{attempt_by, attempts_by, ms, push_wake};
use crate::store::duplicate::{CaseView, NewRefund};
use crate::store::refund::RefundError;
use crate::store::{Attempt, StoreError};

pub(crate) async fn case_view(
    tx: &mut SqliteConnection,
    case_id: i64,
) -> Result<Option<CaseView>, StoreError> {
    let Some(row) = sqlx::query(
        "SELECT kind, order_id, resolved_at IS NOT NULL AS resolved, details
           FROM recon_cases WHERE id = ?1",
    )
    .bind(case_id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    let details: String = row.try_get("details")?;
    Ok(Some(CaseView {
        kind: row.try_get("kind")?,
        order_id: row.try_get("order_id")?,
        resolved: row.try_get("resolved")?,
        details: serde_json::from_str(&details)
            .map_err(|e| StoreError::Corrupt(format!("case {case_id} details: {e}")))?,
    }))
}

pub(crate) async fn refund_of_gateway(
    tx: &mut SqliteConnection,
    charge_id: &str,
) -> Result<Option<Attempt>, StoreError> {
    let sql = "SELECT * FROM payment_attempts
          WHERE refund_of_gateway = ?1
            AND ((state <> 'RECHAZADO' AND refund_failed_at IS NULL) OR refund_made_at IS NOT NULL)";
    attempt_by(&mut *tx, sql, charge_id).await
}

pub(crate) async fn approved_charges(
    tx: &mut SqliteConnection,
    order_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    let sql = "SELECT * FROM payment_attempts
          WHERE order_id = ?1 AND kind <> 'refund' AND state = 'APROBADO'";
    attempts_by(&mut *tx, sql, order_id).await
}

/// The refund's row (the refund triggers check it), its first
/// transition-log row and its wake-up.
pub(crate) async fn insert(
    tx: &mut SqliteConnection,
    r: &NewRefund<'_>,
) -> Result<(), RefundError> {
    let due: i64 = sqlx::query(concat!(
        "INSERT INTO payment_attempts
            (id, order_id, amount_minor, currency, idempotency_key, state, kind, refund_of,
             refund_of_gateway, next_action_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'PENDIENTE', 'refund', ?6, ?7, ",
        now_ms!(),
        ", ",
        now_ms!(),
        ", ",
        now_ms!(),
        ") RETURNING next_action_at"
    ))
    .bind(r.id.hyphenated().to_string())
    .bind(&r.dup.order_id)
    .bind(r.dup.amount_minor)
    .bind(&r.dup.currency)
    .bind(r.key.hyphenated().to_string())
    .bind(r.anchor.hyphenated().to_string())
    .bind(r.charge_id)
    .fetch_one(&mut *tx)
    .await
    .map_err(RefundError::from_db)?
    .try_get(0)?;
    sqlx::query(concat!(
        "INSERT INTO attempt_transitions (attempt_id, from_state, to_state, cause, actor, evidence, at)
         VALUES (?1, NULL, 'PENDIENTE', ?2, ?3, ?4, ",
        now_ms!(),
        ")"
    ))
    .bind(r.id.hyphenated().to_string())
    .bind(crate::store::duplicate::CAUSE)
    .bind(&r.actor)
    .bind(r.evidence.to_string())
    .execute(&mut *tx)
    .await?;
    push_wake(&mut *tx, r.id, ms(due), 0).await?;
    Ok(())
}
