//! PostgreSQL SQL for gateway webhooks (see `store::webhooks`).

use sqlx::{PgConnection, PgPool};

use super::apply_tx;
use crate::store::Applied;
use crate::store::card_updated;
use crate::store::webhooks::{
    Decision, EventOutcome, IncomingEvent, Rejected, WebhookResult, after_apply, contradiction,
    decide, evidence,
};
use crate::store::{Attempt, StoreError};

pub(crate) async fn record(
    pool: &PgPool,
    ev: &IncomingEvent,
    retry: Option<&crate::retry::RetryPolicy>,
) -> Result<WebhookResult, StoreError> {
    let mut tx = pool.begin().await?;
    // The raw body as text: jsonb would refuse a valid `\u0000` escape.
    let inserted: Option<String> = sqlx::query_scalar(
        "INSERT INTO cobro.webhook_events (event_id, event_type, idempotency_key, outcome, payload)
         VALUES ($1, $2, $3, 'ignored', $4)
         ON CONFLICT (event_id) DO NOTHING
         RETURNING event_id",
    )
    .bind(&ev.event_id)
    .bind(&ev.event_type)
    .bind(ev.key)
    .bind(&ev.payload)
    .fetch_optional(&mut *tx)
    .await?;
    if inserted.is_none() {
        tx.commit().await?;
        return Ok(WebhookResult::Duplicate);
    }
    if let EventOutcome::CardUpdated { payment_method } = &ev.outcome {
        let (result, detail) = card_updated(&mut tx, ev, payment_method, retry).await?;
        sqlx::query(
            "UPDATE cobro.webhook_events SET outcome = $2, detail = $3 WHERE event_id = $1",
        )
        .bind(&ev.event_id)
        .bind(result.outcome_column())
        .bind(detail)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        return Ok(result);
    }
    let seen: Option<Attempt> = match ev.key {
        Some(key) => {
            sqlx::query_as(
                "SELECT * FROM cobro.payment_attempts WHERE idempotency_key = $1 FOR UPDATE",
            )
            .bind(key)
            .fetch_optional(&mut *tx)
            .await?
        }
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
        "UPDATE cobro.webhook_events SET outcome = $2, detail = $3, attempt_id = $4
          WHERE event_id = $1",
    )
    .bind(&ev.event_id)
    .bind(result.outcome_column())
    .bind(detail)
    .bind(seen.as_ref().map(|a| a.id))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(result)
}

/// The scheduled retries that charge `payment_method`, locked, each
/// pulled forward when that moves it earlier ([`card_updated`]).
async fn card_updated(
    tx: &mut PgConnection,
    ev: &IncomingEvent,
    payment_method: &str,
    retry: Option<&crate::retry::RetryPolicy>,
) -> Result<(WebhookResult, Option<String>), StoreError> {
    let Some(policy) = retry else {
        return Ok(card_updated::result(Vec::new()));
    };
    let due: Vec<Attempt> = sqlx::query_as(
        "SELECT a.* FROM cobro.payment_attempts a
          WHERE a.state = 'RECHAZADO' AND a.kind <> 'refund' AND a.next_action_at IS NOT NULL
            AND coalesce((SELECT u.payment_method FROM cobro.payment_method_updates u
                           WHERE u.order_id = a.order_id ORDER BY u.id DESC LIMIT 1),
                         a.payment_method) = $1
          ORDER BY a.id FOR UPDATE OF a",
    )
    .bind(payment_method)
    .fetch_all(&mut *tx)
    .await?;
    let actor = format!("webhook:{}", ev.event_id);
    let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&mut *tx)
        .await?;
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

pub(crate) async fn record_rejected(pool: &PgPool, r: &Rejected<'_>) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO cobro.rejected_webhooks (reason, detail, headers, body_size, minute)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (reason, minute) DO NOTHING",
    )
    .bind(r.reason)
    .bind(r.detail)
    .bind(sqlx::types::Json(r.headers))
    .bind(i32::try_from(r.body_size).unwrap_or(i32::MAX))
    .bind(r.minute)
    .execute(pool)
    .await?;
    Ok(())
}

pub(crate) async fn counts(pool: &PgPool) -> Result<(i64, i64), StoreError> {
    Ok(sqlx::query_as(
        "SELECT (SELECT count(*) FROM cobro.webhook_events),
                (SELECT count(*) FROM cobro.rejected_webhooks)",
    )
    .fetch_one(pool)
    .await?)
}

pub(crate) async fn rejected_reasons(pool: &PgPool) -> Result<Vec<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT reason FROM cobro.rejected_webhooks ORDER BY id")
            .fetch_all(pool)
            .await?,
    )
}

/// The attempt whose recorded gateway object (a PaymentIntent) is `gateway_ref`.
pub(crate) async fn by_gateway_ref(
    pool: &PgPool,
    gateway_ref: &str,
) -> Result<Option<Attempt>, StoreError> {
    Ok(
        sqlx::query_as("SELECT * FROM cobro.payment_attempts WHERE gateway_ref = $1")
            .bind(gateway_ref)
            .fetch_optional(pool)
            .await?,
    )
}
