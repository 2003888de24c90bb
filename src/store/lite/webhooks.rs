//! SQLite SQL for gateway webhooks (see `store::webhooks`). The whole
//! transaction runs under `BEGIN IMMEDIATE`, which locks the database for
//! writing: the attempt cannot change between the read and the write.

use sqlx::{Row, SqliteConnection, SqlitePool};

use super::{apply_tx, attempt};
use crate::store::card_updated;
use crate::store::webhooks::{
    Decision, EventOutcome, IncomingEvent, Rejected, WebhookResult, after_apply, contradiction,
    decide, evidence,
};
use crate::store::{Applied, StoreError};

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
    if let EventOutcome::CardUpdated { payment_method } = &ev.outcome {
        let (result, detail) = card_updated(&mut tx, ev, payment_method, retry).await?;
        sqlx::query("UPDATE webhook_events SET outcome = ?2, detail = ?3 WHERE event_id = ?1")
            .bind(&ev.event_id)
            .bind(result.outcome_column())
            .bind(detail)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        return Ok(result);
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

/// The scheduled retries that charge `payment_method` (the write lock is
/// held), each pulled forward when that moves it earlier ([`card_updated`]).
async fn card_updated(
    tx: &mut SqliteConnection,
    ev: &IncomingEvent,
    payment_method: &str,
    retry: Option<&crate::retry::RetryPolicy>,
) -> Result<(WebhookResult, Option<String>), StoreError> {
    let Some(policy) = retry else {
        return Ok(card_updated::result(Vec::new()));
    };
    let due = sqlx::query(
        "SELECT a.* FROM payment_attempts a
          WHERE a.state = 'RECHAZADO' AND a.kind <> 'refund' AND a.next_action_at IS NOT NULL
            AND coalesce((SELECT u.payment_method FROM payment_method_updates u
                           WHERE u.order_id = a.order_id ORDER BY u.id DESC LIMIT 1),
                         a.payment_method) = ?1
          ORDER BY a.id",
    )
    .bind(payment_method)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(attempt)
    .collect::<Result<Vec<_>, _>>()?;
    let actor = format!("webhook:{}", ev.event_id);
    let now: i64 = sqlx::query_scalar(concat!("SELECT ", now_ms!()))
        .fetch_one(&mut *tx)
        .await?;
    let now = super::ms(now);
    let mut moved = Vec::new();
    for seen in &due {
        let Some(act_in) = card_updated::pulled_forward(seen, now, policy.card_updated_delay())
        else {
            continue;
        };
        let why = card_updated::evidence(ev, seen, act_in);
        let Ok((change, plan)) = card_updated::change(seen, act_in, &actor, &why) else {
            continue;
        };
        if let Applied::Moved(_) = apply_tx(&mut *tx, seen, &change, &plan).await? {
            moved.push(seen.id);
        }
    }
    Ok(card_updated::result(moved))
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
