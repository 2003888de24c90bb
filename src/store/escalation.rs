//! The escalation queue's reads: what finance must look at. Attempts in
//! `EN_REVISION`, and attempts in `DESCONOCIDO` older than the staleness
//! threshold, oldest first, with their age on the database's clock. The
//! filters and the keyset pagination (`(created_at, id)` after a cursor)
//! run in SQL on the queue's partial index; the count is a SQL `COUNT`.
//!
//! Invariant: read-only. Resolutions go through [`crate::finance`], which
//! writes only through the compare-and-set [`Store::apply`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{Attempt, Store, StoreError};
use crate::state::State;

/// One attempt that needs a person.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Escalated {
    #[serde(flatten)]
    pub attempt: Attempt,
    /// Seconds since the attempt was created (database clock).
    pub age_secs: i64,
    /// When it is next looked up automatically: the janitor's next check of
    /// an attempt in review, the next check of one in doubt; `None` when
    /// nothing is scheduled (an unsendable row that was never sent).
    pub next_check_at: Option<DateTime<Utc>>,
}

impl Escalated {
    pub(crate) fn new(attempt: Attempt, age_secs: i64) -> Self {
        Self {
            next_check_at: attempt.next_action_at,
            attempt,
            age_secs,
        }
    }
}

/// Which part of the queue to read; every field already validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueQuery {
    /// A `DESCONOCIDO` attempt is in the queue once this old.
    pub stale_after: Duration,
    /// `EN_REVISION` or `DESCONOCIDO` only.
    pub state: Option<State>,
    /// An ISO 4217 code, upper case.
    pub currency: Option<String>,
    /// `Some(true)`: refunds only; `Some(false)`: charges only.
    pub refunds: Option<bool>,
    /// Only attempts at least this old.
    pub min_age: Duration,
}

/// Where a page of the queue starts: right after this attempt in the
/// queue's order (oldest first, then by id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueCursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

impl QueueCursor {
    /// The cursor before every attempt.
    pub fn start() -> Self {
        Self {
            created_at: DateTime::UNIX_EPOCH,
            id: Uuid::nil(),
        }
    }

    /// The cursor right after `a`.
    pub fn after(a: &Attempt) -> Self {
        Self {
            created_at: a.created_at,
            id: a.id,
        }
    }
}

impl Escalated {
    /// Why it is in the queue: `en_revision` or `stale_desconocido`.
    pub fn reason(&self) -> &'static str {
        match self.attempt.state {
            crate::state::State::EnRevision => "en_revision",
            _ => "stale_desconocido",
        }
    }
}

/// Attempts and their amounts per (state, kind, currency).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub state: String,
    /// `charge` or `refund`.
    pub kind: String,
    pub currency: String,
    pub count: i64,
    /// The exact sum: never a cast that can overflow (PostgreSQL sums a
    /// bigint as numeric, read as text; SQLite sums high and low parts).
    pub amount_minor: i128,
}

impl Store {
    /// Counts and amounts of every attempt per (state, kind, currency),
    /// ordered by those three.
    pub async fn totals_by_state(&self) -> Result<Vec<Totals>, StoreError> {
        on_db!(self, escalation::totals())
    }

    /// One page of the queue: the attempts `q` selects that come after
    /// `after`, oldest first, at most `limit`.
    pub async fn escalated_page(
        &self,
        q: &QueueQuery,
        after: QueueCursor,
        limit: i64,
    ) -> Result<Vec<Escalated>, StoreError> {
        on_db!(self, escalation::page(q, after, limit))
    }

    /// How many attempts `q` selects (all of them, not a page).
    pub async fn escalated_count(&self, q: &QueueQuery) -> Result<i64, StoreError> {
        on_db!(self, escalation::count(q))
    }
}
