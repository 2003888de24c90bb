//! Business retries in the store: a NEW attempt with a NEW key for a
//! declined order, guarded by the database (see
//! migrations/postgres/…_business_retry.sql; SQLite runs the same steps from
//! Rust under `BEGIN IMMEDIATE`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{Applied, Change, Store};
use super::{CardCaps, Db, lite, pg};
use crate::domain::IdempotencyKey;
use crate::state::State;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Retried {
    pub attempt_id: Uuid,
    pub idempotency_key: Uuid,
    pub attempt_number: i32,
    /// Finance's reason for passing the card networks' caps, when it gave
    /// one (the new attempt's log row carries it too).
    pub cap_override: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    #[error("{0}")]
    NotFound(String),
    /// Only a RECHAZADO attempt is retried (never DESCONOCIDO or EN_REVISION).
    #[error("{0}")]
    NotDeclined(String),
    #[error("{0}")]
    AlreadyApproved(String),
    /// Another attempt of the order is live: a racing retry won, or the
    /// order is in doubt. Handled as "already being retried".
    #[error("{0}")]
    AlreadyRetrying(String),
    #[error("{0}")]
    MaxAttempts(String),
    /// The payment method has had a card network's number of business
    /// retries in its window (`COBRO_RETRY_CARD_CAP`,
    /// `COBRO_RETRY_MC_CAP_24H`, `COBRO_RETRY_MC_CAP_30D`); the message
    /// names the cap and how finance overrides it.
    #[error("{0}")]
    CardCap(String),
    /// The card network (or the gateway) advised never to try this card
    /// again for this payment (`<code>/do_not_try_again`): not even by hand.
    #[error("{0}")]
    NetworkAdvice(String),
    /// The database's rule holds the order: an open case says the gateway
    /// may have charged it, or a cancel means "do not charge it".
    #[error("{1}")]
    Held(super::Hold, String),
    /// The new attempt's input is refused by the database's bounds (an
    /// amount above the deployment's maximum).
    #[error("{0}")]
    Invalid(String),
    /// The scheduled retry was already handled by another worker (the
    /// declined attempt moved since it was read).
    #[error("{0}")]
    AlreadyHandled(String),
    #[error("{}", super::described(.0))]
    /// Not a `#[source]`: the message already words the driver's error,
    /// and a chain printed with `{:#}` would say it twice.
    Db(sqlx::Error),
}

impl RetryError {
    /// The attempt to retry does not exist (one wording for every door).
    pub(crate) fn no_attempt(id: Uuid) -> Self {
        RetryError::NotFound(format!("no attempt with id {id}"))
    }
}

/// A store failure on a retry's road: the database's error as it is,
/// anything else (a row that does not decode) as a protocol error.
impl From<super::StoreError> for RetryError {
    fn from(e: super::StoreError) -> Self {
        match e {
            super::StoreError::Db(e) => RetryError::Db(e),
            other => RetryError::Db(sqlx::Error::Protocol(other.to_string())),
        }
    }
}

impl RetryError {
    /// Which part of the database's charge rule refused, if one did.
    pub fn hold(&self) -> Option<super::Hold> {
        match self {
            RetryError::AlreadyApproved(_) => Some(super::Hold::Approved),
            RetryError::AlreadyRetrying(_) => Some(super::Hold::LiveAttempt),
            RetryError::Held(h, _) => Some(*h),
            _ => None,
        }
    }

    /// A refusal by the database's charge rule on the new attempt's insert.
    pub(crate) fn from_rule(e: &sqlx::Error) -> Option<Self> {
        let (code, msg) = super::gate::refusal(e)?;
        Self::from_refusal(code, msg)
    }

    /// A refusal (its code and message) as the error a caller branches on.
    pub(crate) fn from_refusal(code: String, msg: String) -> Option<Self> {
        if code == "22023" {
            return Some(RetryError::Invalid(msg));
        }
        Some(match super::gate::Hold::from_code(&code)? {
            super::Hold::LiveAttempt => RetryError::AlreadyRetrying(msg),
            super::Hold::Approved => RetryError::AlreadyApproved(msg),
            other => RetryError::Held(other, msg),
        })
    }
}

/// A business retry asked for by a person (finance, `cobro retry`): the
/// declined attempt's retry made due now. A worker then looks the declined
/// attempt up at the gateway (as before every business retry) and creates
/// the new attempt, with the key below, if the database's rule still
/// allows it then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RetryRequested {
    /// The declined attempt whose retry is due, and its order.
    pub retry_of: Uuid,
    pub order_id: String,
    /// The number and key the new attempt will carry.
    pub attempt_number: i32,
    pub idempotency_key: Uuid,
    pub due_at: Option<DateTime<Utc>>,
    /// The reason finance gave to pass the card networks' caps, if any.
    pub cap_override: Option<String>,
}

impl Store {
    /// The network's "do not try again" on `a`'s decline, as a refusal.
    pub(crate) fn network_advice(a: &super::Attempt) -> Result<(), RetryError> {
        match a.decline_code.as_deref() {
            Some(code)
                if crate::gateway::advice::parse_stored(code).1
                    == crate::gateway::advice::Advice::DoNotRetry =>
            {
                Err(RetryError::NetworkAdvice(format!(
                    "attempt {} was declined as {code}: the card network or the gateway \
                     advised never to try this card again for this payment; ask the customer for \
                     another payment method and start a new charge",
                    a.id
                )))
            }
            _ => Ok(()),
        }
    }

    /// A person asks for a business retry of the declined attempt
    /// `attempt_id`, as `actor`: refused now if the database's charge rule
    /// holds the order, the network advised against it, or the card is at
    /// one of `caps` and no `cap_override` reason is given; otherwise its
    /// retry is due now and woken (a logged change of the declined
    /// attempt, whose evidence carries the override's reason), and a worker
    /// checks the gateway before it creates the new attempt. Automatic and
    /// manual retries take the same road; the database's rule skips the
    /// caps only for a retry whose newest request recorded an override.
    pub async fn request_retry(
        &self,
        attempt_id: Uuid,
        actor: &str,
        caps: super::CardCaps,
        cap_override: Option<&super::OverrideReason>,
    ) -> Result<RetryRequested, RetryError> {
        let seen = match self.load(attempt_id).await {
            Ok((a, _)) => a,
            Err(super::StoreError::NotFound(_)) => {
                return Err(RetryError::no_attempt(attempt_id));
            }
            Err(e) => return Err(e.into()),
        };
        if seen.state != State::Rechazado || seen.is_refund() {
            return Err(RetryError::NotDeclined(format!(
                "attempt {attempt_id} is {}{}, not a declined charge: only a declined attempt is retried",
                if seen.is_refund() { "a refund in " } else { "" },
                seen.state
            )));
        }
        Self::network_advice(&seen)?;
        self.charge_hold(&seen).await?;
        if cap_override.is_none() {
            self.check_retry_caps(attempt_id, caps).await?;
        }
        let why = cap_override.map(|r| crate::gateway::Evidence {
            call: "retry_requested".into(),
            error_kind: "cap_override".into(),
            detail: Some(r.as_str().to_owned()),
            ..Default::default()
        });
        let mut due = Change::new(
            Some(crate::state::Event::RetryNow),
            "retry_requested",
            actor,
        );
        due.act_in = Some(std::time::Duration::ZERO);
        due.evidence = why.as_ref();
        let now = match self.apply(&seen, &due).await {
            Ok(Applied::Moved(now)) => now,
            Ok(Applied::Lost) => {
                return Err(RetryError::AlreadyHandled(format!(
                    "attempt {attempt_id} changed meanwhile: look at it again"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        let wake = self.wake(attempt_id).await;
        if let Err(e) = wake {
            // The sweeper wakes it anyway: the retry is due in the row.
            tracing::warn!(error = %e, attempt = %attempt_id, "waking a requested retry failed");
        }
        let number = self
            .attempts_for_order(&seen.order_id)
            .await?
            .iter()
            .map(|a| a.attempt_number)
            .max()
            .unwrap_or(seen.attempt_number)
            + 1;
        let ns = self.settings().await?.key_namespace;
        Ok(RetryRequested {
            retry_of: attempt_id,
            order_id: seen.order_id.clone(),
            attempt_number: number,
            idempotency_key: IdempotencyKey::for_retry(ns, &seen.order_id, number).uuid(),
            due_at: now.next_action_at,
            cap_override: cap_override.map(|r| r.as_str().to_owned()),
        })
    }
}

impl From<sqlx::Error> for RetryError {
    fn from(e: sqlx::Error) -> Self {
        RetryError::Db(e)
    }
}

impl Store {
    /// A business retry: a NEW attempt with a NEW key for the order of the
    /// declined attempt `attempt_id`, only if the database's charge rule
    /// lets the order be charged (`Hold`) and it has had fewer than
    /// `max_attempts` attempts. The key is derived from the deployment's
    /// namespace, the order and the attempt number
    /// ([`IdempotencyKey::for_retry`](crate::domain::IdempotencyKey::for_retry)),
    /// so a retry created twice carries one key.
    /// `expected_version`: the scheduler's view of the declined attempt (its
    /// retry must still be pending at that version); `None` for finance.
    pub async fn business_retry(
        &self,
        attempt_id: Uuid,
        max_attempts: u32,
        actor: &str,
        expected_version: Option<i64>,
    ) -> Result<Retried, RetryError> {
        self.business_retry_capped(
            attempt_id,
            max_attempts,
            CardCaps::NONE,
            actor,
            expected_version,
        )
        .await
    }

    /// [`Store::business_retry`], refused (`RetryError::CardCap`) when the
    /// payment method already had one of `caps`' number of business
    /// retries in its window, across orders (the card networks' rules),
    /// unless finance recorded an override with its reason
    /// ([`Store::request_retry`]).
    pub async fn business_retry_capped(
        &self,
        attempt_id: Uuid,
        max_attempts: u32,
        caps: CardCaps,
        actor: &str,
        expected_version: Option<i64>,
    ) -> Result<Retried, RetryError> {
        // The network's "do not try again" binds a retry finance asked for
        // too. (A declined attempt's code never changes; an unknown id is
        // left for the database to report.)
        if let Ok((a, _)) = self.load(attempt_id).await {
            Self::network_advice(&a)?;
        }
        let max = i32::try_from(max_attempts).unwrap_or(i32::MAX);
        match &self.db {
            Db::Pg(p) => {
                pg::business_retry(p, attempt_id, max, actor, expected_version, caps).await
            }
            Db::Lite(p) => {
                lite::retry::business_retry(p, attempt_id, max, actor, expected_version, caps).await
            }
        }
    }
}
