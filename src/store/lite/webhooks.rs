//! SQLite SQL for gateway webhooks (see `store::webhooks`). The whole
//! transaction runs under `BEGIN IMMEDIATE`, which locks the database for
//! writing: the attempt cannot change between the read and the write.

use sqlx::{Row, SqlitePool};

use super::{apply_tx, attempt};
use crate::store::StoreError;
use crate::store::webhooks::{
    Decision, IncomingEvent, Rejected, WebhookResult, after_apply, contradiction, decide, evidence,
};

pub(crate) async fn record(
    pool: &SqlitePool,
    ev: &IncomingEvent,
    retry: Option<&crate::retry::RetryPolicy>,
) -> Result<WebhookResult, StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let key = ev.key.map(|k| k.hyphenated().to_string());
    let inserted = sqlx::query(concat!(
        "INSERT INTO webhook_events (event_id, event_type, idempotency_key, outcome, payload, received_at)
         VALUES (?1, ?2, ?3, 'ignored', ?4, ",
        now_ms!(),
        ") ON CONFLICT (event_id) DO NOTHING"
    ))
    .bind(&ev.event_id)
    .bind(&ev.event_type)
    .bind(&key)
    .bind(&ev.payload)
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        tx.commit().await?;
        return Ok(WebhookResult::Duplicate);
    }
    let seen = match &key {
        Some(key) => sqlx::query("SELECT * FROM payment_attempts WHERE idempotency_key = ?1")
            .bind(key)
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| attempt(&r))
            .transpose()?,
        None => None,
    };
    let actor = format!("webhook:{}", ev.event_id);
    let ev_evidence = evidence(ev);
    let (result, detail) = match decide(seen.as_ref(), ev, &actor, &ev_evidence, retry) {
        // News the state machine refuses may contradict what we hold as
        // settled: that opens a case (and cancels a scheduled retry) here,
        // in the webhook's transaction, instead of vanishing.
        Decision::Done(result @ WebhookResult::Noop { .. }, detail) => {
            match seen.as_ref().and_then(|a| Some((a, contradiction(a, ev)?))) {
                Some((a, c)) => {
                    super::recon::contradicted_tx(&mut tx, a, &c, &actor).await?;
                    let said = detail.unwrap_or_default();
                    (result, Some(format!("{said}; contradicts it: case opened")))
                }
                None => (result, detail),
            }
        }
        Decision::Done(result, detail) => (result, detail),
        Decision::Apply(seen, write) => {
            let (change, plan) = *write;
            after_apply(seen, apply_tx(&mut tx, seen, &change, &plan).await?)
        }
    };
    sqlx::query(
        "UPDATE webhook_events SET outcome = ?2, detail = ?3, attempt_id = ?4 WHERE event_id = ?1",
    )
    .bind(&ev.event_id)
    .bind(result.outcome_column())
    .bind(detail)
    .bind(seen.as_ref().map(|a| a.id.hyphenated().to_string()))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(result)
}

pub(crate) async fn record_rejected(pool: &SqlitePool, r: &Rejected<'_>) -> Result<(), StoreError> {
    sqlx::query(concat!(
        "INSERT INTO rejected_webhooks (reason, detail, headers, body_size, minute, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ",
        now_ms!(),
        ") ON CONFLICT (reason, minute) DO NOTHING"
    ))
    .bind(r.reason)
    .bind(r.detail)
    .bind(r.headers.to_string())
    .bind(i64::try_from(r.body_size).unwrap_or(i64::MAX))
    .bind(r.minute)
    .execute(pool)
    .await?;
    Ok(())
}

pub(crate) async fn counts(pool: &SqlitePool) -> Result<(i64, i64), StoreError> {
    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM webhook_events), (SELECT count(*) FROM rejected_webhooks)",
    )
    .fetch_one(pool)
    .await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

pub(crate) async fn rejected_reasons(pool: &SqlitePool) -> Result<Vec<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT reason FROM rejected_webhooks ORDER BY id")
            .fetch_all(pool)
            .await?,
    )
}

/// The attempt whose recorded gateway object (a PaymentIntent) is `gateway_ref`.
pub(crate) async fn by_gateway_ref(
    pool: &SqlitePool,
    gateway_ref: &str,
) -> Result<Option<crate::store::Attempt>, StoreError> {
    let row = sqlx::query("SELECT * FROM payment_attempts WHERE gateway_ref = ?1")
        .bind(gateway_ref)
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(attempt).transpose()
}
