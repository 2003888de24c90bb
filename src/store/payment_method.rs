//! A new payment-method token from the app for the next business retry of a
//! declined order (the customer updated their card after a notice).
//!
//! The rule (the same on both backends; PostgreSQL's is the SQL function
//! `cobro.update_payment_method` an app may call in its own transaction):
//! accepted only while the order's latest charge attempt is `RECHAZADO`,
//! not cancelled, with a business retry pending (scheduled, or parked until
//! the gateway answers), and nothing of the order is approved. The next
//! business retry of the order charges the newest token; later ones keep it.
//!
//! Invariant: the update and a retry of the same order take turns (the
//! order's attempts locked `FOR UPDATE`; SQLite `BEGIN IMMEDIATE`), so a
//! retry either sees the token or the update sees the retry and is refused.
//! Every update is an append-only row with who gave it; no attempt row is
//! changed, and only a token passes (never card data: [`PaymentMethod`]).

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{Attempt, Db, Store, StoreError};
use crate::domain::PaymentMethod;
use crate::state::State;

/// What an accepted update says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct MethodUpdated {
    pub update_id: i64,
    pub order_id: String,
    /// The declined attempt whose pending retry will charge the new token.
    pub after_attempt_id: Uuid,
    /// When that retry is due; `None` while it is parked (gateway down,
    /// sending paused).
    pub next_retry_at: Option<DateTime<Utc>>,
}

#[derive(Debug, thiserror::Error)]
pub enum MethodUpdateError {
    #[error("order {0:?} has no attempts")]
    NotFound(String),
    #[error("{0}")]
    AlreadyApproved(String),
    /// The latest attempt is not declined with a retry pending.
    #[error("{0}")]
    NoRetryPending(String),
    #[error("invalid payment_method: {0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for MethodUpdateError {
    fn from(e: sqlx::Error) -> Self {
        MethodUpdateError::Store(StoreError::Db(e))
    }
}

/// The rule, over the order's charge attempts (oldest first): the declined
/// attempt whose retry the token is for, or why not.
pub(crate) fn decide<'a>(
    order: &str,
    attempts: &'a [Attempt],
) -> Result<&'a Attempt, MethodUpdateError> {
    let charges = || attempts.iter().filter(|a| !a.is_refund());
    let Some(last) = charges().max_by_key(|a| (a.attempt_number, a.created_at)) else {
        return Err(MethodUpdateError::NotFound(order.to_owned()));
    };
    if charges().any(|a| a.state == State::Aprobado) {
        return Err(MethodUpdateError::AlreadyApproved(format!(
            "order {order} already has an approved charge: no retry will charge it"
        )));
    }
    let pending = last.next_action_at.is_some() || last.parked_since.is_some();
    if last.state != State::Rechazado || last.cancel_reason.is_some() || !pending {
        let state = match last.cancel_reason {
            Some(_) => "cancelled",
            None => last.state.as_str(),
        };
        return Err(MethodUpdateError::NoRetryPending(format!(
            "order {order}: its latest attempt {} is {state} with no business retry pending; a new payment method is accepted only for the next scheduled retry of a declined order",
            last.id
        )));
    }
    Ok(last)
}

impl Store {
    /// Gives the order's next business retry a new payment-method `token`,
    /// recorded as given `by` (e.g. `api:<key name>`); see the module docs.
    pub async fn update_payment_method(
        &self,
        order_id: &str,
        token: &PaymentMethod,
        by: &str,
    ) -> Result<MethodUpdated, MethodUpdateError> {
        match &self.db {
            Db::Pg(p) => {
                let row: Result<(i64, Uuid, Option<DateTime<Utc>>), sqlx::Error> =
                    sqlx::query_as("SELECT * FROM cobro.update_payment_method($1, $2, $3)")
                        .bind(order_id)
                        .bind(token.token())
                        .bind(by)
                        .fetch_one(p)
                        .await;
                let (update_id, after_attempt_id, next_retry_at) = match row {
                    Ok(r) => r,
                    Err(e) => return Err(pg_error(e)),
                };
                Ok(MethodUpdated {
                    update_id,
                    order_id: order_id.to_owned(),
                    after_attempt_id,
                    next_retry_at,
                })
            }
            Db::Lite(p) => super::lite::payment_method::update(p, order_id, token, by).await,
        }
    }
}

fn pg_error(e: sqlx::Error) -> MethodUpdateError {
    let Some(db) = e.as_database_error() else {
        return e.into();
    };
    let msg = db.message().to_owned();
    match db.code().as_deref() {
        Some("CB404") => MethodUpdateError::NotFound(msg),
        Some("CB002") => MethodUpdateError::AlreadyApproved(msg),
        Some("CB010") => MethodUpdateError::NoRetryPending(msg),
        Some("22023") => MethodUpdateError::Invalid(
            msg.trim_start_matches("invalid payment_method: ")
                .to_owned(),
        ),
        _ => e.into(),
    }
}
