//! Delivering the outbox on SQLite: the claim under `BEGIN IMMEDIATE`
//! (see `store::notices`).

use std::time::Duration;

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::{ms, uuid};
use crate::store::Notice;
use crate::store::StoreError;
use crate::store::notices::{Outgoing, TryRow};

pub(crate) async fn claim(
    pool: &SqlitePool,
    claim: Uuid,
    hold: Duration,
    limit: i64,
) -> Result<Vec<Outgoing>, StoreError> {
    let token = claim.hyphenated().to_string();
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query(concat!(
        "UPDATE notices SET claim_token = ?1, claim_expires_at = ",
        now_ms!(),
        " + ?2 WHERE id IN (SELECT id FROM notices
              WHERE acked_at IS NULL AND failed_at IS NULL
                AND coalesce(next_delivery_at, created_at) <= ",
        now_ms!(),
        " AND (claim_expires_at IS NULL OR claim_expires_at <= ",
        now_ms!(),
        ") ORDER BY id LIMIT ?3)"
    ))
    .bind(&token)
    .bind(i64::try_from(hold.as_millis()).unwrap_or(i64::MAX))
    .bind(limit)
    .execute(&mut *tx)
    .await?;
    let rows = sqlx::query(
        "SELECT n.*, a.amount_minor, a.currency, a.attempt_number,
                CASE WHEN json_extract(a.last_evidence, '$.call') = 'business_retry'
                     THEN json_extract(a.last_evidence, '$.error_kind') END AS refusal
           FROM notices n JOIN payment_attempts a ON a.id = n.attempt_id
          WHERE n.claim_token = ?1 ORDER BY n.id",
    )
    .bind(&token)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    rows.iter()
        .map(|r| {
            Ok(Outgoing {
                notice: notice(r)?,
                amount_minor: r.try_get("amount_minor")?,
                currency: r.try_get("currency")?,
                attempt_number: r.try_get("attempt_number")?,
                refusal: r.try_get("refusal")?,
                claim,
            })
        })
        .collect()
}

pub(crate) async fn record(
    pool: &SqlitePool,
    n: &Outgoing,
    row: &TryRow<'_>,
) -> Result<u64, StoreError> {
    let retry_ms = row.retry_in.map(|s| (s * 1000.0).round() as i64);
    let done = sqlx::query(concat!(
        "UPDATE notices SET
            delivery_attempts = delivery_attempts + 1,
            last_status = ?3, last_error = ?4,
            delivered_at = CASE WHEN ?5 THEN ",
        now_ms!(),
        " END,
            acked_at = CASE WHEN ?5 THEN coalesce(acked_at, ",
        now_ms!(),
        ") ELSE acked_at END,
            acked_by = CASE WHEN ?5 THEN coalesce(acked_by, 'delivery') ELSE acked_by END,
            next_delivery_at = ",
        now_ms!(),
        " + ?6,
            failed_at = CASE WHEN NOT ?5 AND ?6 IS NULL THEN ",
        now_ms!(),
        " END,
            claim_token = NULL, claim_expires_at = NULL
          WHERE id = ?1 AND claim_token = ?2"
    ))
    .bind(n.notice.id)
    .bind(n.claim.hyphenated().to_string())
    .bind(row.status)
    .bind(row.error)
    .bind(row.delivered)
    .bind(retry_ms)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Every notice (or the unacknowledged), oldest first.
pub(crate) async fn list(pool: &SqlitePool, unacked_only: bool) -> Result<Vec<Notice>, StoreError> {
    let rows = sqlx::query("SELECT * FROM notices WHERE NOT ?1 OR acked_at IS NULL ORDER BY id")
        .bind(unacked_only)
        .fetch_all(pool)
        .await?;
    rows.iter().map(notice).collect()
}

/// A `notices` row, decoded.
fn notice(r: &SqliteRow) -> Result<Notice, StoreError> {
    Ok(Notice {
        id: r.try_get("id")?,
        order_id: r.try_get("order_id")?,
        attempt_id: uuid(r.try_get("attempt_id")?)?,
        kind: r.try_get("kind")?,
        decline_code: r.try_get("decline_code")?,
        next_retry_at: r.try_get::<Option<i64>, _>("next_retry_at")?.map(ms),
        created_at: ms(r.try_get("created_at")?),
        acked_at: r.try_get::<Option<i64>, _>("acked_at")?.map(ms),
        acked_by: r.try_get("acked_by")?,
        delivery_attempts: r.try_get("delivery_attempts")?,
        next_delivery_at: r.try_get::<Option<i64>, _>("next_delivery_at")?.map(ms),
        last_status: r.try_get("last_status")?,
        last_error: r.try_get("last_error")?,
        delivered_at: r.try_get::<Option<i64>, _>("delivered_at")?.map(ms),
        failed_at: r.try_get::<Option<i64>, _>("failed_at")?.map(ms),
    })
}

/// Acknowledges a notice once; false when it was already.
pub(crate) async fn ack(pool: &SqlitePool, id: i64, by: &str) -> Result<bool, StoreError> {
    let done = sqlx::query(concat!(
        "UPDATE notices SET acked_at = ",
        now_ms!(),
        ", acked_by = ?2 WHERE id = ?1 AND acked_at IS NULL"
    ))
    .bind(id)
    .bind(by)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}
