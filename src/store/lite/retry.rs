//! Business retries on SQLite: the steps of PostgreSQL's
//! `cobro.business_retry`, from Rust, under `BEGIN IMMEDIATE` (which locks
//! the database for writing). The partial unique index refuses a second
//! live attempt. The new attempt charges the order's newest payment-method
//! update when the app gave one (see `store::payment_method`), and the
//! declined attempt's customer. The card networks' caps are
//! [`super::caps`]'s, skipped only by finance's recorded override.

use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::{ms, push_wake};
use crate::domain::IdempotencyKey;
use crate::store::caps::CardCaps;
use crate::store::retry::{Retried, RetryError};

pub(crate) async fn business_retry(
    pool: &SqlitePool,
    attempt_id: Uuid,
    max_attempts: i32,
    actor: &str,
    expected_version: Option<i64>,
    caps: CardCaps,
) -> Result<Retried, RetryError> {
    let id = attempt_id.hyphenated().to_string();
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let Some(old) = sqlx::query(
        "SELECT order_id, state, version, next_action_at, payment_method, amount_minor, currency
           FROM payment_attempts WHERE id = ?1",
    )
    .bind(&id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Err(RetryError::no_attempt(attempt_id));
    };
    let (order, state): (String, String) = (old.try_get("order_id")?, old.try_get("state")?);
    let (version, due): (i64, Option<i64>) =
        (old.try_get("version")?, old.try_get("next_action_at")?);
    if expected_version.is_some_and(|v| v != version || due.is_none()) {
        return Err(RetryError::AlreadyHandled(format!(
            "the scheduled retry of attempt {attempt_id} was already handled"
        )));
    }
    if state != "RECHAZADO" {
        return Err(RetryError::NotDeclined(format!(
            "attempt {attempt_id} is {state}, not RECHAZADO: only a declined attempt is retried"
        )));
    }
    let (approved, n): (i64, i64) = sqlx::query_as(
        "SELECT coalesce(sum(state = 'APROBADO'), 0), coalesce(max(attempt_number), 0)
           FROM payment_attempts WHERE order_id = ?1",
    )
    .bind(&order)
    .fetch_one(&mut *tx)
    .await?;
    if approved > 0 {
        return Err(RetryError::AlreadyApproved(format!(
            "order {order} already has an approved charge"
        )));
    }
    if n >= i64::from(max_attempts) {
        return Err(RetryError::MaxAttempts(format!(
            "order {order} has had {n} attempts, the maximum"
        )));
    }
    // The order's newest payment-method update, if the app gave one
    // (store::payment_method), else the declined attempt's token.
    let update: Option<(i64, String)> = sqlx::query_as(
        "SELECT id, payment_method FROM payment_method_updates WHERE order_id = ?1
          ORDER BY id DESC LIMIT 1",
    )
    .bind(&order)
    .fetch_optional(&mut *tx)
    .await?;
    let method: Option<String> = match &update {
        Some((_, token)) => Some(token.clone()),
        None => old.try_get("payment_method")?,
    };
    // The card networks' caps on retries of one card, across orders,
    // unless finance recorded an override; the write lock (BEGIN
    // IMMEDIATE) serialises the count and the insert.
    let cap_override = super::caps::override_reason(&mut tx, &id).await?;
    if cap_override.is_none() {
        super::caps::check(&mut tx, method.as_deref(), &order, caps).await?;
    }
    let namespace: String = sqlx::query_scalar("SELECT key_namespace FROM settings")
        .fetch_one(&mut *tx)
        .await?;
    let namespace = super::uuid(&namespace).map_err(|e| sqlx::Error::Decode(e.into()))?;
    let number = i32::try_from(n + 1).unwrap_or(i32::MAX);
    let key = IdempotencyKey::for_retry(namespace, &order, number).uuid();
    let new_id = Uuid::new_v4();
    let inserted = sqlx::query(concat!(
        "INSERT INTO payment_attempts
            (id, order_id, amount_minor, currency, payment_method, customer, idempotency_key,
             state, kind, attempt_number, next_action_at, created_at, updated_at)
         SELECT ?1, order_id, amount_minor, currency, ?5, customer, ?2, 'PENDIENTE',
                'business_retry', ?3, ",
        now_ms!(),
        ", ",
        now_ms!(),
        ", ",
        now_ms!(),
        " FROM payment_attempts WHERE id = ?4
         RETURNING next_action_at"
    ))
    .bind(new_id.hyphenated().to_string())
    .bind(key.hyphenated().to_string())
    .bind(n + 1)
    .bind(&id)
    .bind(&method)
    .fetch_one(&mut *tx)
    .await;
    let due: i64 = match inserted {
        Ok(row) => row.try_get(0)?,
        Err(e) if super::unique_violation(&e).is_some() => {
            return Err(RetryError::AlreadyRetrying(format!(
                "order {order} is already being retried (another attempt is live)"
            )));
        }
        Err(e) => {
            let (amount, currency): (i64, String) =
                (old.try_get("amount_minor")?, old.try_get("currency")?);
            let worded =
                crate::store::gate::worded_lite(&mut tx, &e, &order, amount, &currency).await;
            return Err(worded
                .and_then(|(c, m)| RetryError::from_refusal(c, m))
                .unwrap_or(RetryError::Db(e)));
        }
    };
    sqlx::query(concat!(
        "UPDATE payment_attempts SET next_action_at = NULL, version = version + 1, updated_at = ",
        now_ms!(),
        " WHERE id = ?1"
    ))
    .bind(&id)
    .execute(&mut *tx)
    .await?;
    sqlx::query(concat!(
        "INSERT INTO attempt_transitions (attempt_id, from_state, to_state, cause, actor, evidence, at)
         VALUES (?1, NULL, 'PENDIENTE', 'business_retry', ?2,
                 json_patch(json_object('retry_of', ?3),
                            json_patch(CASE WHEN ?4 IS NULL THEN '{}'
                                            ELSE json_object('payment_method_update', ?4) END,
                                       CASE WHEN ?5 IS NULL THEN '{}'
                                            ELSE json_object('cap_override', ?5, 'detail',
                                                 'card-network caps overridden by finance: ' || ?5)
                                       END)), ",
        now_ms!(),
        ")"
    ))
    .bind(new_id.hyphenated().to_string())
    .bind(actor)
    .bind(&id)
    .bind(update.as_ref().map(|(n, _)| *n))
    .bind(&cap_override)
    .execute(&mut *tx)
    .await?;
    push_wake(&mut tx, new_id, ms(due), 0)
        .await
        .map_err(RetryError::from)?;
    tx.commit().await?;
    Ok(Retried {
        attempt_id: new_id,
        idempotency_key: key,
        attempt_number: (n + 1) as i32,
        cap_override,
    })
}
