//! The operator's search over every attempt (charges and refunds, in any
//! state): exact order id or idempotency key, state, kind, a created-at
//! window; newest first, paginated in SQL by the `(created_at, id)` keyset.
//!
//! What decides the access path is shared ([`Access`]); the backends hold
//! only the SQL. Each path runs on an index that already exists (EXPLAIN on
//! 500,000 rows, see `pg/listing.rs` and `lite/listing.rs`): the order
//! (`payment_attempts_order`), the key (its UNIQUE index), otherwise the
//! created-at index walked backwards from the cursor, with state and kind
//! as filters (PostgreSQL also picks its partial indexes for the rare live
//! states).
//!
//! Invariant: read-only.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Attempt, QueueCursor, Store, StoreError};
use crate::state::State;

/// What kind of attempt, as stored in `payment_attempts.kind`, plus
/// `Charge` (either charge kind: not a refund).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptKind {
    /// An order's first charge attempt.
    Initial,
    /// A later charge attempt for the same order, with a new key (automatic
    /// after a retryable decline, or finance's manual retry).
    BusinessRetry,
    /// A refund of an approved charge.
    Refund,
    /// `Initial` or `BusinessRetry`.
    Charge,
}

impl AttemptKind {
    pub const NAMES: &'static str = "initial, business_retry, refund or charge";

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "initial" => Self::Initial,
            "business_retry" => Self::BusinessRetry,
            "refund" => Self::Refund,
            "charge" => Self::Charge,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initial => "initial",
            Self::BusinessRetry => "business_retry",
            Self::Refund => "refund",
            Self::Charge => "charge",
        }
    }

    /// (the stored kind to match exactly, refunds only / charges only).
    pub(crate) fn columns(self) -> (Option<&'static str>, Option<bool>) {
        match self {
            Self::Charge => (None, Some(false)),
            exact => (Some(exact.as_str()), None),
        }
    }
}

/// Which attempts to list; every field already validated. `None`: any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptFilter {
    /// Exact.
    pub order_id: Option<String>,
    /// Exact.
    pub idempotency_key: Option<Uuid>,
    pub state: Option<State>,
    pub kind: Option<AttemptKind>,
    /// Created at or after.
    pub created_from: Option<DateTime<Utc>>,
    /// Created before.
    pub created_to: Option<DateTime<Utc>>,
}

/// How a page is found: decided once for both backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// One key: at most one row (its UNIQUE index).
    Key,
    /// One order's attempts (`payment_attempts_order`).
    Order,
    /// The created-at index, newest first from the cursor.
    Recent,
}

/// The bounds every statement binds: no `NULL` means "unbounded" on the
/// created-at walk, so the index range is always usable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Rows strictly before this `(created_at, id)` in the listing's order.
    pub before: QueueCursor,
}

impl AttemptFilter {
    pub(crate) fn access(&self) -> Access {
        match (&self.idempotency_key, &self.order_id) {
            (Some(_), _) => Access::Key,
            (None, Some(_)) => Access::Order,
            (None, None) => Access::Recent,
        }
    }

    pub(crate) fn bounds(&self, after: Option<QueueCursor>) -> Bounds {
        // 9999-12-31T23:59:59Z: later than any row, within both backends' range.
        let end = DateTime::from_timestamp(253_402_300_799, 0).unwrap_or(DateTime::UNIX_EPOCH);
        Bounds {
            from: self.created_from.unwrap_or(DateTime::UNIX_EPOCH),
            to: self.created_to.unwrap_or(end),
            before: after.unwrap_or(QueueCursor {
                created_at: end,
                id: Uuid::max(),
            }),
        }
    }
}

impl Store {
    /// A page of the attempts `filter` selects, newest first (by
    /// `created_at`, then id), those after `after` (the last row of the
    /// previous page), at most `limit`.
    pub async fn list_attempts(
        &self,
        filter: &AttemptFilter,
        after: Option<QueueCursor>,
        limit: i64,
    ) -> Result<Vec<Attempt>, StoreError> {
        let bounds = filter.bounds(after);
        on_db!(self, listing::page(filter, &bounds, limit))
    }
}
