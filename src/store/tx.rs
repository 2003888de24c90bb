//! One write transaction on either backend, for the flows that are the same
//! on both: a webhook's (store the event once, find its attempt, decide,
//! apply), a contradiction's (open the case, cancel the retry, mark the
//! refund), a reconciliation's batch of cases, a batch of settled charges,
//! the breaker's update, a failed wake-up counted, a duplicate's refund,
//! a cancel. The flow is written once, over [`Tx`]; each
//! backend holds only the SQL of each step, in `pg/*.rs` and `lite/*.rs`.
//!
//! Why the backends still differ under it, in one line each:
//! - Locking: PostgreSQL locks the rows a step reads (`FOR UPDATE`); SQLite
//!   has no row locks, so its transaction starts with `BEGIN IMMEDIATE`,
//!   which takes the database's write lock before the first read.
//! - Values: PostgreSQL stores uuid and timestamptz; SQLite stores text
//!   and milliseconds since the epoch, so each backend maps its own rows.
//!
//! Invariant: every step runs inside the one transaction [`Store::begin_write`]
//! opened; nothing is visible to another process until [`Tx::commit`], and
//! dropping a `Tx` without committing rolls it all back.

use chrono::{DateTime, Utc};
use sqlx::{Postgres, Sqlite, Transaction};
use uuid::Uuid;

use super::breaker::{BreakerEvent, BreakerRow};
use super::change::{Applied, Change, Plan};
use super::contradiction::RefundMark;
use super::duplicate::{CaseView, NewRefund};
use super::poison::{Failed, Seen};
use super::refund::RefundError;
use super::webhooks::IncomingEvent;
use super::{Attempt, CaseWrite, Db, Store, StoreError, lite, pg};
use crate::domain::{Finding, Window};

/// An open write transaction.
pub(crate) enum Tx {
    Pg(Transaction<'static, Postgres>),
    Lite(Transaction<'static, Sqlite>),
}

/// Runs a step written once for both databases (generic over the backend,
/// in `store::$m`) with the SQL its backend holds:
/// `on_sql!(tx, poison::write[WRITE](f, case_id))` calls
/// `poison::write::<Postgres>(conn, pg::poison::WRITE, f, case_id)` or the
/// same with `Sqlite` and `lite::poison::WRITE`. The Rust is written once;
/// only the SQL text is written per backend.
macro_rules! on_sql {
    ($tx:expr, $m:ident :: $step:ident [$($sql:ident),+] ( $($arg:expr),* $(,)? )) => {
        match $tx {
            Tx::Pg(t) => super::$m::$step::<Postgres>(t, $(pg::$m::$sql,)+ $($arg),*).await,
            Tx::Lite(t) => super::$m::$step::<Sqlite>(t, $(lite::$m::$sql,)+ $($arg),*).await,
        }
    };
}

/// Runs the backend's own step: `on!(tx, webhooks::insert_event(ev))` calls
/// `pg::webhooks::insert_event(conn, ev)` or `lite::webhooks::…`.
macro_rules! on {
    ($tx:expr, $($step:ident)::+ ( $($arg:expr),* $(,)? )) => {
        match $tx {
            Tx::Pg(t) => pg::$($step)::+(t, $($arg),*).await,
            Tx::Lite(t) => lite::$($step)::+(t, $($arg),*).await,
        }
    };
}

impl Store {
    /// Opens a write transaction (see the module's note on locking).
    pub(crate) async fn begin_write(&self) -> Result<Tx, StoreError> {
        Ok(match &self.db {
            Db::Pg(p) => Tx::Pg(p.begin().await?),
            Db::Lite(p) => Tx::Lite(p.begin_with("BEGIN IMMEDIATE").await?),
        })
    }
}

impl Tx {
    pub(crate) async fn commit(self) -> Result<(), StoreError> {
        match self {
            Tx::Pg(t) => t.commit().await?,
            Tx::Lite(t) => t.commit().await?,
        }
        Ok(())
    }

    /// The database's clock.
    pub(crate) async fn now(&mut self) -> Result<DateTime<Utc>, StoreError> {
        on!(self, now_tx())
    }

    /// Moves `seen` as `plan` says, fenced on its version, and logs it.
    pub(crate) async fn apply(
        &mut self,
        seen: &Attempt,
        change: &Change<'_>,
        plan: &Plan<'_>,
    ) -> Result<Applied, StoreError> {
        on!(self, apply_tx(seen, change, plan))
    }

    /// Opens the case of `f` unless its dedupe key exists.
    pub(crate) async fn open_case(
        &mut self,
        window: &Window,
        f: &Finding,
    ) -> Result<CaseWrite, StoreError> {
        on!(self, recon::case_tx(window, f))
    }

    /// Marks a settled refund with what the gateway did to it since (on the
    /// version seen) and logs it; false when the refund moved meanwhile.
    pub(crate) async fn mark_refund(
        &mut self,
        seen: &Attempt,
        mark: RefundMark,
        actor: &str,
        details: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        on!(self, recon::mark_refund(seen, mark, actor, details))
    }

    /// Stores a new event as `ignored`; false when its id is stored already.
    pub(crate) async fn insert_event(&mut self, ev: &IncomingEvent) -> Result<bool, StoreError> {
        on!(self, webhooks::insert_event(ev))
    }

    /// The stored event's outcome, detail and attempt.
    pub(crate) async fn set_event_outcome(
        &mut self,
        event_id: &str,
        outcome: &str,
        detail: Option<String>,
        attempt: Option<Uuid>,
    ) -> Result<(), StoreError> {
        on!(
            self,
            webhooks::set_outcome(event_id, outcome, detail, attempt)
        )
    }

    /// The attempt with this idempotency key, locked until the end.
    pub(crate) async fn attempt_by_key(
        &mut self,
        key: Uuid,
    ) -> Result<Option<Attempt>, StoreError> {
        on!(self, webhooks::attempt_by_key(key))
    }

    /// The scheduled business retries that will charge `payment_method`
    /// (the order's newest payment-method update, else the attempt's own),
    /// locked until the end.
    pub(crate) async fn retries_charging(
        &mut self,
        payment_method: &str,
    ) -> Result<Vec<Attempt>, StoreError> {
        on!(self, webhooks::retries_charging(payment_method))
    }

    /// The gateway's breaker row, created if missing, locked until the end.
    pub(crate) async fn breaker_locked(&mut self, gateway: &str) -> Result<BreakerRow, StoreError> {
        on!(self, breaker::locked(gateway))
    }

    pub(crate) async fn breaker_write(
        &mut self,
        gateway: &str,
        new: &BreakerRow,
    ) -> Result<(), StoreError> {
        on_sql!(self, breaker::write[WRITE](gateway, new))
    }

    /// Appends `ev` to the breaker's log.
    pub(crate) async fn breaker_event(
        &mut self,
        gateway: &str,
        ev: &BreakerEvent,
        actor: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        on_sql!(self, breaker::log_event[LOG_EVENT](gateway, ev, actor, at))
    }

    /// Records one settled charge; true when it is new.
    pub(crate) async fn record_settlement(
        &mut self,
        r: &crate::domain::settlement::SettledCharge,
    ) -> Result<bool, StoreError> {
        on!(self, settlement::insert(r))
    }

    /// Sets the incident switch and appends the change to its history.
    pub(crate) async fn set_pause(
        &mut self,
        paused: bool,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        on_sql!(self, pause::set[SET, LOG](paused, actor, reason))
    }

    /// What is known of the attempt's failed wake-ups (locked), and its case.
    pub(crate) async fn poison_seen(
        &mut self,
        attempt_id: Uuid,
    ) -> Result<Option<(Seen, Option<i64>)>, StoreError> {
        on!(self, poison::seen(attempt_id))
    }

    /// Opens the attempt's `poison_wakeup` case; its id.
    pub(crate) async fn poison_case(&mut self, f: &Failed<'_>) -> Result<i64, StoreError> {
        on!(self, poison::open_case(f))
    }

    /// The attempt's failure count, last error and case.
    pub(crate) async fn poison_write(
        &mut self,
        f: &Failed<'_>,
        case_id: Option<i64>,
    ) -> Result<(), StoreError> {
        on_sql!(self, poison::write[WRITE](f, case_id))
    }

    /// A reconciliation case as the duplicate's refund reads it, locked.
    pub(crate) async fn case_view(&mut self, case_id: i64) -> Result<Option<CaseView>, StoreError> {
        on!(self, duplicate::case_view(case_id))
    }

    /// The refund of gateway charge `charge_id` already asked for, unless
    /// declined.
    pub(crate) async fn refund_of_gateway(
        &mut self,
        charge_id: &str,
    ) -> Result<Option<Attempt>, StoreError> {
        on!(self, duplicate::refund_of_gateway(charge_id))
    }

    /// The order's APROBADO charges, locked.
    pub(crate) async fn approved_charges(
        &mut self,
        order_id: &str,
    ) -> Result<Vec<Attempt>, StoreError> {
        on!(self, duplicate::approved_charges(order_id))
    }

    /// A duplicate's refund, its log row and its wake-up.
    pub(crate) async fn insert_duplicate_refund(
        &mut self,
        r: &NewRefund<'_>,
    ) -> Result<(), RefundError> {
        on!(self, duplicate::insert(r))
    }

    /// The order's attempts, oldest first, the order locked against every
    /// other writer until the end.
    pub(crate) async fn order_locked(
        &mut self,
        order_id: &str,
    ) -> Result<Vec<Attempt>, StoreError> {
        on!(self, order_locked(order_id))
    }
}
