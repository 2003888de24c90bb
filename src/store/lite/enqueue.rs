//! Enqueue on SQLite, inside the caller's transaction: the same steps and
//! errors as PostgreSQL's `cobro.enqueue_charge` (SQLite has no stored
//! procedures, so they run from Rust here).

use sqlx::{Row, SqliteConnection};
use uuid::Uuid;

use super::{ms, push_wake, uuid};
use crate::domain::ChargeRequest;
use crate::state::State;
use crate::store::StoreError;
use crate::store::enqueue::{EnqueueError, Enqueued, key_reused, live_attempt};

/// Enqueues inside the caller's transaction (begin it with
/// `BEGIN IMMEDIATE` so the checks and the insert see one state of the
/// file): the same steps and errors as PostgreSQL's `cobro.enqueue_charge`.
pub async fn enqueue_charge(
    conn: &mut SqliteConnection,
    req: &ChargeRequest,
) -> Result<Enqueued, EnqueueError> {
    enqueue_charge_as(conn, req, "app").await
}

/// [`enqueue_charge`], with `actor` in the first transition-log row.
pub async fn enqueue_charge_as(
    conn: &mut SqliteConnection,
    req: &ChargeRequest,
    actor: &str,
) -> Result<Enqueued, EnqueueError> {
    let order = req.order_id.as_str();
    let key = req.key.uuid().hyphenated().to_string();
    let pm = req.payment_method.as_ref().map(|p| p.token());
    let customer = req.customer.as_ref().map(|c| c.id());
    let existing = sqlx::query(
        "SELECT id, order_id, amount_minor, currency, payment_method, customer, state
           FROM payment_attempts WHERE idempotency_key = ?1",
    )
    .bind(&key)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = existing {
        let (o, a, c, p): (String, i64, String, Option<String>) = (
            row.try_get("order_id")?,
            row.try_get("amount_minor")?,
            row.try_get("currency")?,
            row.try_get("payment_method")?,
        );
        let same_customer = row.try_get::<Option<String>, _>("customer")?.as_deref() == customer;
        if o == order
            && a == req.amount.minor()
            && c == req.currency.code()
            && p.as_deref() == pm
            && same_customer
        {
            let id: String = row.try_get("id")?;
            let state: String = row.try_get("state")?;
            return Ok(Enqueued {
                attempt_id: uuid(&id).map_err(|e| sqlx::Error::Decode(e.into()))?,
                idempotency_key: req.key,
                state: state
                    .parse()
                    .map_err(|e: crate::state::UnknownState| sqlx::Error::Decode(e.into()))?,
                created: false,
            });
        }
        return Err(key_reused(req.key, &o, a, &c));
    }
    // The order's rule (approved, live, open case, cancelled) and the
    // maximum amount are the charge_gate trigger's, as on PostgreSQL.
    let id = Uuid::new_v4();
    let inserted = sqlx::query(concat!(
        "INSERT INTO payment_attempts
            (id, order_id, amount_minor, currency, payment_method, idempotency_key, state,
             next_action_at, created_at, updated_at, customer)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'PENDIENTE', ",
        now_ms!(),
        ", ",
        now_ms!(),
        ", ",
        now_ms!(),
        ", ?7) RETURNING next_action_at"
    ))
    .bind(id.hyphenated().to_string())
    .bind(order)
    .bind(req.amount.minor())
    .bind(req.currency.code())
    .bind(pm)
    .bind(&key)
    .bind(customer)
    .fetch_one(&mut *conn)
    .await;
    let due: i64 = match inserted {
        Ok(row) => row.try_get(0)?,
        Err(e) if let Some(msg) = super::unique_violation(&e) => {
            return Err(if msg.contains("idempotency_key") {
                key_reused(req.key, order, req.amount.minor(), req.currency.code())
            } else {
                live_attempt(order)
            });
        }
        Err(e) => {
            let worded = crate::store::gate::worded_lite(
                conn,
                &e,
                order,
                req.amount.minor(),
                req.currency.code(),
            )
            .await;
            return Err(worded
                .and_then(|(c, m)| EnqueueError::from_refusal(c, m))
                .unwrap_or(EnqueueError::Db(e)));
        }
    };
    sqlx::query(concat!(
        "INSERT INTO attempt_transitions (attempt_id, from_state, to_state, cause, actor, at)
         VALUES (?1, NULL, 'PENDIENTE', 'enqueued', ?2, ",
        now_ms!(),
        ")"
    ))
    .bind(id.hyphenated().to_string())
    .bind(actor)
    .execute(&mut *conn)
    .await?;
    push_wake(conn, id, ms(due), 0).await.map_err(|e| match e {
        StoreError::Db(e) => EnqueueError::Db(e),
        other => EnqueueError::Db(sqlx::Error::Protocol(other.to_string())),
    })?;
    Ok(Enqueued {
        attempt_id: id,
        idempotency_key: req.key,
        state: State::Pendiente,
        created: true,
    })
}
