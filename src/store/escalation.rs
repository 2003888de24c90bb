//! The escalation queue's reads: what finance must look at. Attempts in
//! `EN_REVISION`, and attempts in `DESCONOCIDO` older than the staleness
//! threshold, oldest first, with their age on the database's clock.
//!
//! Invariant: read-only. Resolutions go through [`crate::finance`], which
//! writes only through the compare-and-set [`Store::apply`].

use std::time::Duration;

use serde::Serialize;

use super::{Attempt, Db, Store, StoreError, lite, pg};

/// One attempt that needs a person.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Escalated {
    #[serde(flatten)]
    pub attempt: Attempt,
    /// Seconds since the attempt was created (database clock).
    pub age_secs: i64,
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
        match &self.db {
            Db::Pg(p) => pg::escalation::totals(p).await,
            Db::Lite(p) => lite::escalation::totals(p).await,
        }
    }

    /// Every attempt in `EN_REVISION` and every `DESCONOCIDO` one created at
    /// least `stale_after` ago, oldest first, at most `limit`.
    pub async fn escalated_attempts(
        &self,
        stale_after: Duration,
        limit: i64,
    ) -> Result<Vec<Escalated>, StoreError> {
        match &self.db {
            Db::Pg(p) => pg::escalation::escalated(p, stale_after, limit).await,
            Db::Lite(p) => lite::escalation::escalated(p, stale_after, limit).await,
        }
    }
}
