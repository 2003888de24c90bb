//! The database's rules for charge attempts, as the Rust side reads their
//! refusals: the one rule for "may this order get a new charge attempt"
//! (the `charge_gate` trigger on insert of every attempt) and settled
//! states held (`hold_settled_states` on update), both in
//! migrations/{postgres,sqlite}/…_charge_gate.sql.
//!
//! Invariant: the rules live in the database, so every door (the SQL
//! functions, this store, HTTP, the CLI, finance, a raw `INSERT`) meets the
//! same ones; Rust only names the refusal. PostgreSQL raises them with
//! their code as SQLSTATE; SQLite's trigger messages lead with it
//! (`CB011: ...`).

use serde::Serialize;

use crate::domain::InputError;

/// Why the database refused a new charge attempt for an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    /// CB002: the order has an approved charge.
    Approved,
    /// CB001: the order has an attempt live or in doubt (`PENDIENTE`,
    /// `EN_PROCESO`, `DESCONOCIDO`, `EN_REVISION`).
    LiveAttempt,
    /// CB011: an open case says the gateway may have charged the order;
    /// lifted when finance resolves the case.
    OpenCase,
    /// CB012: the order was cancelled with a reason that means "do not
    /// charge it" (`CancelReason::holds_order`).
    Cancelled,
}

impl Hold {
    /// The code the database raises.
    pub fn code(self) -> &'static str {
        match self {
            Hold::Approved => "CB002",
            Hold::LiveAttempt => "CB001",
            Hold::OpenCase => "CB011",
            Hold::Cancelled => "CB012",
        }
    }

    /// The name an API answer carries (`"reason"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Hold::Approved => "approved",
            Hold::LiveAttempt => "live_attempt",
            Hold::OpenCase => "open_case",
            Hold::Cancelled => "cancelled",
        }
    }

    pub(crate) fn from_code(code: &str) -> Option<Self> {
        [
            Hold::Approved,
            Hold::LiveAttempt,
            Hold::OpenCase,
            Hold::Cancelled,
        ]
        .into_iter()
        .find(|h| h.code() == code)
    }
}

/// The charge rule's refusal of a charge's first send (the claim,
/// `PENDIENTE` -> `EN_PROCESO`): the hold (an open case, a cancel that
/// means "do not charge it") and the database's message.
pub fn send_held(e: &super::StoreError) -> Option<(Hold, String)> {
    let super::StoreError::Db(e) = e else {
        return None;
    };
    let (code, msg) = refusal(e)?;
    Hold::from_code(&code)
        .filter(|h| matches!(h, Hold::OpenCase | Hold::Cancelled))
        .map(|h| (h, msg))
}

/// A refusal by one of the database's rules: its code (`CB0..`, or the
/// SQLSTATE `22023` for bad input such as an amount over the maximum) and
/// the message without SQLite's leading code.
pub(crate) fn refusal(e: &sqlx::Error) -> Option<(String, String)> {
    let db = e.as_database_error()?;
    let msg = db.message();
    if let Some(code) = db
        .code()
        .filter(|c| c.starts_with("CB") || c.as_ref() == "22023")
    {
        return Some((code.into_owned(), msg.to_owned()));
    }
    // SQLite: a trigger's RAISE leads its message with the code ("CB011:
    // order ...") or says "invalid amount_minor: ...". PostgreSQL's own
    // errors (some also begin "invalid ": a corrupt page, a bad encoding)
    // carry their SQLSTATE and are no rule of cobro's.
    db.try_downcast_ref::<sqlx::sqlite::SqliteError>()?;
    if let Some((lead, rest)) = msg.split_once(": ")
        && lead.len() == 5
        && lead.starts_with("CB")
    {
        return Some((lead.to_owned(), rest.to_owned()));
    }
    msg.starts_with("invalid ")
        .then(|| ("22023".to_owned(), msg.to_owned()))
}

impl super::StoreError {
    /// The database rule that refused the write, when one did: its code
    /// and words ([`refusal`]). The transaction rolled back, so nothing
    /// was written, and a retry meets the same rule.
    pub fn rule_refusal(&self) -> Option<(String, String)> {
        match self {
            super::StoreError::Db(e) => refusal(e),
            _ => None,
        }
    }
}

/// A refusal from SQLite worded as PostgreSQL's (the order, the attempt,
/// the case, the reason, the maximum in major units). SQLite's trigger
/// messages are constant strings (a schema whose `RAISE` takes an
/// expression is unreadable to SQLite before 3.47, the `sqlite3` of many
/// systems), so the facts are read here, on the connection that was
/// refused (the same write transaction: they cannot have changed). A fact
/// not found leaves the trigger's own message.
pub(crate) async fn worded_lite(
    conn: &mut sqlx::SqliteConnection,
    e: &sqlx::Error,
    order: &str,
    amount_minor: i64,
    currency: &str,
) -> Option<(String, String)> {
    let (code, msg) = refusal(e)?;
    let one = |sql: &'static str| sqlx::query_as::<_, (String, String)>(sql).bind(order);
    let detail = match code.as_str() {
        "CB002" => one("SELECT id, state FROM payment_attempts
                         WHERE order_id = ?1 AND kind <> 'refund' AND state = 'APROBADO' LIMIT 1")
            .fetch_optional(&mut *conn)
            .await
            .ok()
            .flatten()
            .map(|(id, _)| {
                format!("order {order} already has an approved charge (attempt {id}): no new charge attempt")
            }),
        "CB001" => one("SELECT id, state FROM payment_attempts
                         WHERE order_id = ?1 AND kind <> 'refund'
                           AND state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO', 'EN_REVISION')
                         LIMIT 1")
            .fetch_optional(&mut *conn)
            .await
            .ok()
            .flatten()
            .map(|(id, state)| {
                format!("order {order} already has a live attempt ({id} is {state}): no new charge attempt until it settles")
            }),
        "CB011" => one("SELECT CAST(id AS TEXT), kind FROM recon_cases
                         WHERE order_id = ?1 AND resolved_at IS NULL
                           AND kind NOT IN (SELECT kind FROM harmless_case_kinds)
                         ORDER BY id LIMIT 1")
            .fetch_optional(&mut *conn)
            .await
            .ok()
            .flatten()
            .map(|(id, kind)| {
                format!(
                    "order {order} has an open {kind} case (#{id}): the gateway may have charged it, \
                     so no new charge attempt until finance resolves the case (cobro escalations \
                     resolve-case --case {id} --by <you> --note <what was done>)"
                )
            }),
        "CB012" => one("SELECT id, cancel_reason FROM payment_attempts
                         WHERE order_id = ?1 AND kind <> 'refund'
                           AND cancel_reason IN (SELECT reason FROM order_holding_cancel_reasons)
                         LIMIT 1")
            .fetch_optional(&mut *conn)
            .await
            .ok()
            .flatten()
            .map(|(_, reason)| {
                format!("order {order} was cancelled ({reason}): it must not be charged; charge a new order instead")
            }),
        "22023" if msg.starts_with("invalid amount_minor:") => {
            sqlx::query_scalar::<_, i64>("SELECT max_amount_minor FROM settings")
                .fetch_one(&mut *conn)
                .await
                .ok()
                .map(|max| {
                    format!(
                        "invalid amount_minor: must be at most {max} minor units ({} {currency}), \
                         the maximum in settings (set by `cobro migrate --max-amount-minor` or \
                         COBRO_MAX_AMOUNT_MINOR), got {amount_minor}",
                        crate::domain::decimal(max, currency)
                    )
                })
        }
        _ => None,
    };
    Some((code, detail.unwrap_or(msg)))
}

/// `invalid <field>: <reason>` from a SQL function or trigger, back into
/// an [`InputError`] naming the field.
pub(crate) fn invalid_from_message(msg: &str) -> InputError {
    const FIELDS: [&str; 6] = [
        "order_id",
        "amount_minor",
        "currency",
        "idempotency_key",
        "payment_method",
        "customer",
    ];
    let rest = msg.strip_prefix("invalid ").unwrap_or(msg);
    let field = FIELDS
        .into_iter()
        .find(|f| rest.starts_with(&format!("{f}:")))
        .unwrap_or("input");
    let reason = rest.split_once(": ").map_or(rest, |(_, r)| r).to_owned();
    InputError::new(field, reason)
}

impl super::Store {
    /// Whether the charge rule would let `seen`'s order get a new charge
    /// attempt now, asked of the rule itself: a new attempt like a
    /// business retry of `seen` is inserted and rolled back, so the answer
    /// is the trigger's own (no second copy of the rule). `Err` carries
    /// the refusal, as a retry would get it.
    pub(crate) async fn charge_hold(&self, seen: &super::Attempt) -> Result<(), super::RetryError> {
        let id = uuid::Uuid::new_v4();
        let key = uuid::Uuid::new_v4();
        let inserted = match &self.db {
            super::Db::Pg(p) => {
                let mut tx = p.begin().await?;
                let r = sqlx::query(
                    "INSERT INTO cobro.payment_attempts
                        (id, order_id, amount_minor, currency, payment_method, idempotency_key,
                         state, kind, attempt_number)
                     VALUES ($1, $2, $3, $4, $5, $6, 'PENDIENTE', 'business_retry', 1)",
                )
                .bind(id)
                .bind(&seen.order_id)
                .bind(seen.amount_minor)
                .bind(&seen.currency)
                .bind(&seen.payment_method)
                .bind(key)
                .execute(&mut *tx)
                .await
                .map(|_| ());
                tx.rollback().await?;
                r.map_err(|e| {
                    let refused = refusal(&e);
                    (e, refused)
                })
            }
            super::Db::Lite(p) => {
                let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
                let r = sqlx::query(
                    "INSERT INTO payment_attempts
                        (id, order_id, amount_minor, currency, payment_method, idempotency_key,
                         state, kind, attempt_number, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'PENDIENTE', 'business_retry', 1, 0, 0)",
                )
                .bind(id.hyphenated().to_string())
                .bind(&seen.order_id)
                .bind(seen.amount_minor)
                .bind(&seen.currency)
                .bind(&seen.payment_method)
                .bind(key.hyphenated().to_string())
                .execute(&mut *tx)
                .await
                .map(|_| ());
                // Worded before the rollback, from the rows it saw.
                let worded = match &r {
                    Err(e) => {
                        worded_lite(
                            &mut tx,
                            e,
                            &seen.order_id,
                            seen.amount_minor,
                            &seen.currency,
                        )
                        .await
                    }
                    Ok(()) => None,
                };
                tx.rollback().await?;
                r.map_err(|e| (e, worded))
            }
        };
        inserted.map_err(|(e, worded)| {
            worded
                .and_then(|(c, m)| super::RetryError::from_refusal(c, m))
                .unwrap_or(super::RetryError::Db(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hold_round_trips_its_code() {
        for h in [
            Hold::Approved,
            Hold::LiveAttempt,
            Hold::OpenCase,
            Hold::Cancelled,
        ] {
            assert_eq!(Hold::from_code(h.code()), Some(h));
        }
        assert_eq!(Hold::from_code("CB020"), None);
    }
}
