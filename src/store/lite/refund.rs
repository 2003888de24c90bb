//! Refund requests on SQLite: the steps of PostgreSQL's
//! `cobro.request_refund`, from Rust, under `BEGIN IMMEDIATE` (one writer at
//! a time). The insert trigger `refunds_within_capture` is the guard; the
//! checks before it only make the errors precise.

use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use super::{ms, push_wake};
use crate::domain::{Amount, InputError};
use crate::state::State;
use crate::store::refund::{RefundError, Refunded};

pub(crate) async fn request_refund(
    pool: &SqlitePool,
    attempt_id: Uuid,
    amount_minor: i64,
    key: Uuid,
    actor: &str,
) -> Result<Refunded, RefundError> {
    // The SQL function's input checks: positive, at most the ceiling.
    let amount_minor = Amount::parse(amount_minor)?.minor();
    if key.is_nil() {
        return Err(InputError::new("idempotency_key", "must not be the nil UUID").into());
    }
    let charge_id = attempt_id.hyphenated().to_string();
    let key_text = key.hyphenated().to_string();
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let Some(charge) =
        sqlx::query("SELECT order_id, currency, kind, state FROM payment_attempts WHERE id = ?1")
            .bind(&charge_id)
            .fetch_optional(&mut *tx)
            .await?
    else {
        return Err(RefundError::NotFound(format!(
            "no attempt with id {attempt_id}"
        )));
    };
    if let Some(old) = sqlx::query(
        "SELECT id, state, refund_of, amount_minor FROM payment_attempts WHERE idempotency_key = ?1",
    )
    .bind(&key_text)
    .fetch_optional(&mut *tx)
    .await?
    {
        let same = old.try_get::<Option<String>, _>("refund_of")?.as_deref()
            == Some(charge_id.as_str())
            && old.try_get::<i64, _>("amount_minor")? == amount_minor;
        if !same {
            return Err(RefundError::KeyReused(format!(
                "idempotency_key {key} was already used for something else"
            )));
        }
        let state: String = old.try_get("state")?;
        return Ok(Refunded {
            refund_id: super::uuid(old.try_get("id")?).map_err(corrupt)?,
            idempotency_key: key,
            state: state.parse().map_err(corrupt)?,
            created: false,
        });
    }
    let (kind, state): (String, String) = (charge.try_get("kind")?, charge.try_get("state")?);
    if kind == "refund" || state != State::Aprobado.as_str() {
        let what = if kind == "refund" { "refund" } else { "charge" };
        return Err(RefundError::NotRefundable(format!(
            "attempt {attempt_id} is a {what} in state {state}: only an APROBADO charge can be refunded"
        )));
    }
    let refund_id = Uuid::new_v4();
    let (order, currency): (String, String) =
        (charge.try_get("order_id")?, charge.try_get("currency")?);
    let inserted = sqlx::query(concat!(
        "INSERT INTO payment_attempts
            (id, order_id, amount_minor, currency, idempotency_key, state, kind, refund_of,
             next_action_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'PENDIENTE', 'refund', ?6, ",
        now_ms!(),
        ", ",
        now_ms!(),
        ", ",
        now_ms!(),
        ") RETURNING next_action_at"
    ))
    .bind(refund_id.hyphenated().to_string())
    .bind(&order)
    .bind(amount_minor)
    .bind(&currency)
    .bind(&key_text)
    .bind(&charge_id)
    .fetch_one(&mut *tx)
    .await;
    let due: i64 = match inserted {
        Ok(row) => row.try_get(0)?,
        Err(e) => {
            // The maximum amount's refusal, worded with the maximum.
            return Err(
                match crate::store::gate::worded_lite(&mut tx, &e, &order, amount_minor, &currency)
                    .await
                {
                    Some((code, msg)) if code == "22023" => {
                        RefundError::Invalid(crate::store::gate::invalid_from_message(&msg))
                    }
                    _ => RefundError::from_db(e),
                },
            );
        }
    };
    sqlx::query(concat!(
        "INSERT INTO attempt_transitions (attempt_id, from_state, to_state, cause, actor, evidence, at)
         VALUES (?1, NULL, 'PENDIENTE', 'refund_requested', ?2, json_object('refund_of', ?3), ",
        now_ms!(),
        ")"
    ))
    .bind(refund_id.hyphenated().to_string())
    .bind(actor)
    .bind(&charge_id)
    .execute(&mut *tx)
    .await?;
    push_wake(&mut tx, refund_id, ms(due), 0)
        .await
        .map_err(corrupt)?;
    tx.commit().await?;
    Ok(Refunded {
        refund_id,
        idempotency_key: key,
        state: State::Pendiente,
        created: true,
    })
}

fn corrupt(e: impl std::fmt::Display) -> RefundError {
    RefundError::Db(sqlx::Error::Protocol(e.to_string()))
}
