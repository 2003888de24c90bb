//! The soak's orders: enqueued half through the SQL function and half
//! through the library (retried with the same key across a restart), and
//! read back with their logs and checks for the verdict.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sqlx::{PgPool, Row};
use tracing::warn;
use uuid::Uuid;

use super::check;
use crate::domain::{ChargeRequest, IdempotencyKey};
use crate::state::State;
use crate::store::Store;

/// Half through the SQL function (as an app in another language would, in
/// its own transaction), half through the library. A database error (the
/// restart) is retried with the SAME key: the enqueue is idempotent.
pub(super) async fn enqueue_all(
    url: String,
    orders: Vec<String>,
    amounts: Vec<i64>,
    gap: Duration,
) -> Result<usize> {
    let started = Instant::now();
    let mut retried = 0;
    let store = loop {
        match Store::connect(&url, 2).await {
            Ok(store) => break store,
            Err(e) if retried < 60 => {
                retried += 1;
                warn!(error = %e, "connecting to enqueue failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    for (i, (order, amount)) in orders.iter().zip(amounts).enumerate() {
        // Paced from the start, so a slow enqueue catches up.
        let due = gap * u32::try_from(i).unwrap_or(u32::MAX);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let key = IdempotencyKey::generate();
        loop {
            let done = if i % 2 == 0 {
                let pool = store.pg_pool().context("PostgreSQL only")?;
                sqlx::query("SELECT * FROM cobro.enqueue_charge($1, $2, 'USD', $3, 'pm_chaos')")
                    .bind(order)
                    .bind(amount)
                    .bind(key.uuid())
                    .execute(pool)
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from)
            } else {
                let req = ChargeRequest::parse(
                    order,
                    amount,
                    "USD",
                    Some(&key.to_string()),
                    Some("pm_chaos"),
                )?;
                store
                    .enqueue(&req)
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from)
            };
            match done {
                Ok(()) => break,
                Err(e) => {
                    retried += 1;
                    warn!(%order, error = %e, "enqueue failed; retrying with the same key");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
    store.close().await;
    Ok(retried)
}

pub(super) async fn live(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM cobro.payment_attempts
          WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO')
             OR (state = 'RECHAZADO' AND next_action_at IS NOT NULL)",
    )
    .fetch_one(pool)
    .await?)
}

pub(super) async fn read_back(
    pool: &PgPool,
    store: &Store,
) -> Result<(Vec<check::AttemptFacts>, Vec<i64>)> {
    let rows = sqlx::query(
        "SELECT id, order_id, idempotency_key, state, amount_minor, gateway_charge_id
           FROM cobro.payment_attempts ORDER BY created_at, id",
    )
    .fetch_all(pool)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let id: Uuid = r.try_get("id")?;
        let state: String = r.try_get("state")?;
        let log = store
            .transitions(id)
            .await?
            .into_iter()
            .map(|t| (t.from_state, t.to_state, t.cause, t.at))
            .collect();
        let checks = store
            .checks(id)
            .await?
            .into_iter()
            .map(|c| (c.lookup_result, c.started_at))
            .collect();
        out.push(check::AttemptFacts {
            id,
            order_id: r.try_get("order_id")?,
            key: r.try_get("idempotency_key")?,
            state: state.parse::<State>()?,
            amount_minor: r.try_get("amount_minor")?,
            gateway_charge_id: r.try_get("gateway_charge_id")?,
            log,
            checks,
        });
    }
    let lateness: Vec<i64> = sqlx::query_scalar(
        "SELECT (extract(epoch FROM started_at - scheduled_at) * 1000)::bigint FROM cobro.attempt_checks",
    )
    .fetch_all(pool)
    .await?;
    Ok((out, lateness))
}
