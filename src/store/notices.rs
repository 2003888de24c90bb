//! Delivering the outbox: a worker claims due notices, POSTs each one
//! (`crate::notify`), and records how the try went.
//!
//! Invariant: the `notices` row is the truth and delivery touches nothing
//! else (never an attempt). A claim is short and exclusive (PostgreSQL
//! `FOR UPDATE SKIP LOCKED`, SQLite `BEGIN IMMEDIATE`), fenced by a token
//! per claim: a result is recorded only by the holder of the claim, and a
//! claim whose holder vanished is free again after its expiry. A 2xx
//! marks the notice delivered and acknowledges it (`acked_by =
//! 'delivery'`); an acknowledged or failed notice is never delivered again.

use std::time::Duration;

use uuid::Uuid;

use super::Notice;
use super::{Db, Store, StoreError};

/// A claimed notice (its `delivery_attempts`: the tries recorded before
/// this one) with what its payload needs from its attempt.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Outgoing {
    #[sqlx(flatten)]
    pub notice: Notice,
    pub amount_minor: i64,
    pub currency: String,
    pub attempt_number: i32,
    /// Why the attempt's business retry was refused, when it was
    /// (`max_attempts`, `card_cap`): read from its evidence.
    pub refusal: Option<String>,
    /// This claim's fencing token.
    pub claim: Uuid,
}

/// How one try went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryOutcome<'a> {
    /// The app answered 2xx.
    Delivered { status: u16 },
    /// Not delivered; try again after `after`.
    Retry {
        status: Option<u16>,
        error: &'a str,
        after: Duration,
    },
    /// Not delivered, and that was the schedule's last try.
    Failed { status: Option<u16>, error: &'a str },
}

/// The columns a try writes, whatever the backend.
pub(crate) struct TryRow<'a> {
    pub delivered: bool,
    pub status: Option<i32>,
    pub error: Option<&'a str>,
    /// Seconds until the next try; `None` and not delivered: failed.
    pub retry_in: Option<f64>,
}

impl<'a> TryOutcome<'a> {
    pub(crate) fn row(self) -> TryRow<'a> {
        let (delivered, status, error, retry_in) = match self {
            TryOutcome::Delivered { status } => (true, Some(status), None, None),
            TryOutcome::Retry {
                status,
                error,
                after,
            } => (false, status, Some(error), Some(after.as_secs_f64())),
            TryOutcome::Failed { status, error } => (false, status, Some(error), None),
        };
        TryRow {
            delivered,
            status: status.map(i32::from),
            error,
            retry_in,
        }
    }
}

const PG_CLAIM: &str = "UPDATE cobro.notices n
    SET claim_token = $1, claim_expires_at = now() + make_interval(secs => $2)
   FROM cobro.payment_attempts a
  WHERE a.id = n.attempt_id
    AND n.id IN (SELECT id FROM cobro.notices
                  WHERE acked_at IS NULL AND failed_at IS NULL
                    AND coalesce(next_delivery_at, created_at) <= now()
                    AND (claim_expires_at IS NULL OR claim_expires_at <= now())
                  ORDER BY id LIMIT $3
                  FOR UPDATE SKIP LOCKED)
RETURNING n.id, n.order_id, n.attempt_id, n.kind, n.decline_code, n.next_retry_at,
          n.created_at, n.acked_at, n.acked_by, n.delivery_attempts, n.next_delivery_at,
          n.last_status, n.last_error, n.delivered_at, n.failed_at,
          a.amount_minor, a.currency, a.attempt_number,
          CASE WHEN a.last_evidence->>'call' = 'business_retry'
               THEN a.last_evidence->>'error_kind' END AS refusal,
          n.claim_token AS claim";

const PG_RECORD: &str = "UPDATE cobro.notices SET
    delivery_attempts = delivery_attempts + 1,
    last_status = $3, last_error = $4,
    delivered_at = CASE WHEN $5 THEN now() END,
    acked_at = CASE WHEN $5 THEN coalesce(acked_at, now()) ELSE acked_at END,
    acked_by = CASE WHEN $5 THEN coalesce(acked_by, 'delivery') ELSE acked_by END,
    next_delivery_at = now() + make_interval(secs => $6),
    failed_at = CASE WHEN NOT $5 AND $6 IS NULL THEN now() END,
    claim_token = NULL, claim_expires_at = NULL
  WHERE id = $1 AND claim_token = $2";

impl Store {
    /// Claims up to `limit` notices due for delivery for `hold` (longer
    /// than one try takes), oldest first.
    pub async fn claim_notices(
        &self,
        hold: Duration,
        limit: i64,
    ) -> Result<Vec<Outgoing>, StoreError> {
        let claim = Uuid::new_v4();
        match &self.db {
            Db::Pg(p) => Ok(sqlx::query_as(PG_CLAIM)
                .bind(claim)
                .bind(hold.as_secs_f64())
                .bind(limit)
                .fetch_all(p)
                .await?),
            Db::Lite(p) => super::lite::notices::claim(p, claim, hold, limit).await,
        }
    }

    /// Records one try of a claimed notice; `false` when the claim was
    /// lost meanwhile (nothing written).
    pub async fn record_notice_try(
        &self,
        n: &Outgoing,
        outcome: TryOutcome<'_>,
    ) -> Result<bool, StoreError> {
        let row = outcome.row();
        let done = match &self.db {
            Db::Pg(p) => sqlx::query(PG_RECORD)
                .bind(n.notice.id)
                .bind(n.claim)
                .bind(row.status)
                .bind(row.error)
                .bind(row.delivered)
                .bind(row.retry_in)
                .execute(p)
                .await?
                .rows_affected(),
            Db::Lite(p) => super::lite::notices::record(p, n, &row).await?,
        };
        Ok(done == 1)
    }
}

impl Store {
    /// The outbox: notices, oldest first (only unacknowledged ones when asked).
    pub async fn notices(&self, unacked_only: bool) -> Result<Vec<Notice>, StoreError> {
        on_db!(self, notices::list(unacked_only))
    }

    /// Acknowledges a notice; `false` when it was already acknowledged or
    /// does not exist.
    pub async fn ack_notice(&self, id: i64, by: &str) -> Result<bool, StoreError> {
        on_db!(self, notices::ack(id, by))
    }
}
