//! The card networks' caps on SQLite: the steps of PostgreSQL's
//! `cobro.check_card_caps`, `cobro.retry_cap_override` and
//! `cobro.check_retry_caps`, from Rust, with `cobro.card_brand` (only the
//! card's own network's caps; an unknown brand gets every cap). Callers
//! hold the write lock (`BEGIN IMMEDIATE`), which serialises the count and
//! the insert.

use sqlx::{Sqlite, SqlitePool, Transaction};
use uuid::Uuid;

use crate::store::caps::CardCaps;
use crate::store::retry::RetryError;

/// How finance goes past a cap, in every refusal.
const HOW: &str = "finance may override it with a reason (finance API: POST /finance/api/attempts/<id>/retry with {\"override_reason\": \"...\"}; CLI: cobro retry --override-reason)";

/// Refused (`CardCap`) when `method` already had a cap's number of
/// business retries in its window.
pub(crate) async fn check(
    tx: &mut Transaction<'_, Sqlite>,
    method: Option<&str>,
    order: &str,
    caps: CardCaps,
) -> Result<(), RetryError> {
    let Some(method) = method else {
        return Ok(());
    };
    let [mut visa, mut mc_day, mut mc_month] = caps.sql();
    if visa.is_none() && mc_day.is_none() && mc_month.is_none() {
        return Ok(());
    }
    // Only the card's own network's caps; an unknown brand gets them all.
    let mut all = "";
    match card_brand(tx, method).await?.as_deref() {
        Some("visa") => (mc_day, mc_month) = (None, None),
        Some("mastercard") => visa = None,
        _ => all = " (the card's brand is unknown: every network's caps apply)",
    }
    let (day, month): (i64, i64) = sqlx::query_as(concat!(
        "SELECT coalesce(sum(created_at > ",
        now_ms!(),
        " - 86400000), 0), count(*) FROM payment_attempts
          WHERE payment_method = ?1 AND kind = 'business_retry' AND created_at > ",
        now_ms!(),
        " - 30 * 86400000"
    ))
    .bind(method)
    .fetch_one(&mut **tx)
    .await?;
    let over = |cap: Option<i32>, n: i64| cap.is_some_and(|c| n >= i64::from(c));
    let refuse = |n: i64, window: &str, whose: &str, setting: &str, cap: Option<i32>| {
        Err(RetryError::CardCap(format!(
            "the payment method of order {order} has had {n} business retries in the last {window}, {whose} limit ({setting}={}){all}: no further retry; {HOW}",
            cap.unwrap_or_default()
        )))
    };
    if over(mc_day, day) {
        return refuse(
            day,
            "24 hours",
            "Mastercard's",
            "COBRO_RETRY_MC_CAP_24H",
            mc_day,
        );
    }
    if over(visa, month) {
        return refuse(month, "30 days", "Visa's", "COBRO_RETRY_CARD_CAP", visa);
    }
    if over(mc_month, month) {
        return refuse(
            month,
            "30 days",
            "Mastercard's",
            "COBRO_RETRY_MC_CAP_30D",
            mc_month,
        );
    }
    Ok(())
}

/// The brand the newest transition that reported one says, among the
/// attempts charged to `method` (PostgreSQL's `cobro.card_brand`).
async fn card_brand(
    tx: &mut Transaction<'_, Sqlite>,
    method: &str,
) -> Result<Option<String>, RetryError> {
    let brand: Option<(Option<String>,)> = sqlx::query_as(
        "SELECT lower(json_extract(t.evidence, '$.card_brand'))
           FROM payment_attempts a JOIN attempt_transitions t ON t.attempt_id = a.id
          WHERE a.payment_method = ?1
            AND json_extract(t.evidence, '$.card_brand') IS NOT NULL
          ORDER BY t.id DESC LIMIT 1",
    )
    .bind(method)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(brand.and_then(|(b,)| b))
}

/// The reason finance recorded with its newest request to retry
/// `attempt_id` (`retry_requested` with error_kind `cap_override`).
pub(crate) async fn override_reason(
    tx: &mut Transaction<'_, Sqlite>,
    attempt_id: &str,
) -> Result<Option<String>, RetryError> {
    let newest: Option<(Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT error_kind, json_extract(evidence, '$.detail') FROM attempt_transitions
          WHERE attempt_id = ?1 AND cause = 'retry_requested' ORDER BY id DESC LIMIT 1",
    )
    .bind(attempt_id)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(match newest {
        Some((Some(kind), Some(reason))) if kind == "cap_override" && !reason.trim().is_empty() => {
            Some(reason)
        }
        _ => None,
    })
}

/// The caps for the retry of the declined attempt `attempt_id` (it charges
/// the order's newest payment-method update, else the attempt's token).
pub(crate) async fn check_retry(
    pool: &SqlitePool,
    attempt_id: Uuid,
    caps: CardCaps,
) -> Result<(), RetryError> {
    let id = attempt_id.hyphenated().to_string();
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let Some((order, method)): Option<(String, Option<String>)> = sqlx::query_as(
        "SELECT a.order_id, coalesce(
                    (SELECT u.payment_method FROM payment_method_updates u
                      WHERE u.order_id = a.order_id ORDER BY u.id DESC LIMIT 1),
                    a.payment_method)
           FROM payment_attempts a WHERE a.id = ?1",
    )
    .bind(&id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Err(RetryError::no_attempt(attempt_id));
    };
    check(&mut tx, method.as_deref(), &order, caps).await
}
