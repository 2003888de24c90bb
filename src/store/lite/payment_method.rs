//! A new payment-method token on SQLite: `cobro.update_payment_method`'s
//! steps from Rust under `BEGIN IMMEDIATE` (see `store::payment_method`).

use sqlx::SqlitePool;

use super::attempts_by;
use crate::domain::PaymentMethod;
use crate::store::payment_method::{MethodUpdateError, MethodUpdated, decide};

pub(crate) async fn update(
    pool: &SqlitePool,
    order_id: &str,
    token: &PaymentMethod,
    by: &str,
) -> Result<MethodUpdated, MethodUpdateError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let sql =
        "SELECT * FROM payment_attempts WHERE order_id = ?1 ORDER BY attempt_number, created_at";
    let attempts = attempts_by(&mut *tx, sql, order_id).await?;
    let last = decide(order_id, &attempts)?;
    let update_id: i64 = sqlx::query_scalar(concat!(
        "INSERT INTO payment_method_updates (order_id, after_attempt_id, payment_method, actor, created_at)
         VALUES (?1, ?2, ?3, ?4, ",
        now_ms!(),
        ") RETURNING id"
    ))
    .bind(order_id)
    .bind(last.id.hyphenated().to_string())
    .bind(token.token())
    .bind(by)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(MethodUpdated {
        update_id,
        order_id: order_id.to_owned(),
        after_attempt_id: last.id,
        next_retry_at: last.next_action_at,
    })
}
