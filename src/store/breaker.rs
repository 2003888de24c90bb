//! The gateway circuit breaker's shared state, the attempts it parks, and
//! the rate limit toward the gateway, for both backends.
//!
//! Invariant: the breaker row changes only through [`Store::breaker_update`],
//! which locks it and applies a pure function of (row, database clock)
//! from [`crate::breaker`]; every opening and closing is also appended to
//! `gateway_breaker_events` in the same transaction. A parked attempt keeps
//! its state and check count; only the paced re-wake (one worker per turn,
//! a compare-and-set on the breaker row) un-parks attempts in bulk, each
//! with its version bumped so an older view of it loses its next write.
//!
//! The row's write and the event's append are written once here, generic
//! over the backend; `pg/breaker.rs` and `lite/breaker.rs` hold their SQL
//! and the steps that differ (locking, the pace's clock, the re-wake).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Encode, Type};

use super::values::Sql;
use super::{Db, Store, StoreError, lite, pg};

/// One gateway's breaker, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct BreakerRow {
    pub gateway: String,
    /// `closed` (calls go) or `open` (calls stop; one probe at a time).
    pub state: String,
    /// Failed calls, from any worker, since the gateway last answered.
    pub failures: i32,
    pub failing_since: Option<DateTime<Utc>>,
    /// The last failure's kind and detail (never a secret).
    pub last_failure: Option<String>,
    pub last_failure_at: Option<DateTime<Utc>>,
    pub last_answer_at: Option<DateTime<Utc>>,
    pub opened_at: Option<DateTime<Utc>>,
    pub closed_at: Option<DateTime<Utc>>,
    pub next_probe_at: Option<DateTime<Utc>>,
    pub probes: i32,
    pub next_rewake_at: Option<DateTime<Utc>>,
}

impl BreakerRow {
    /// A breaker that has seen nothing yet.
    pub fn new(gateway: &str) -> Self {
        Self {
            gateway: gateway.to_owned(),
            state: "closed".into(),
            failures: 0,
            failing_since: None,
            last_failure: None,
            last_failure_at: None,
            last_answer_at: None,
            opened_at: None,
            closed_at: None,
            next_probe_at: None,
            probes: 0,
            next_rewake_at: None,
        }
    }

    pub fn is_open(&self) -> bool {
        self.state == "open"
    }
}

/// An opening or closing, for the append-only event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerEvent {
    /// The state it moved to.
    pub state: &'static str,
    pub cause: String,
    pub detail: Option<String>,
}

/// The breaker and its parked attempts, as `cobro status`, `/metrics` and
/// the finance page show them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GatewayHealth {
    pub breakers: Vec<BreakerRow>,
    /// Attempts waiting for the gateway (parked), and the oldest's time.
    pub parked: i64,
    pub oldest_parked: Option<DateTime<Utc>>,
}

impl GatewayHealth {
    /// The breaker that has been open longest, if any.
    pub fn open_since(&self) -> Option<(&str, DateTime<Utc>)> {
        self.breakers
            .iter()
            .filter(|b| b.is_open())
            .filter_map(|b| b.opened_at.map(|at| (b.gateway.as_str(), at)))
            .min_by_key(|(_, at)| *at)
    }
}

impl Store {
    /// The breaker row of `gateway`, if it was ever written.
    pub async fn breaker(&self, gateway: &str) -> Result<Option<BreakerRow>, StoreError> {
        on_db!(self, breaker::get(gateway))
    }

    /// Locks the breaker row of `gateway` (created closed if missing) and
    /// writes what `f` makes of it, with the database's clock; an event `f`
    /// returns is appended to the log by `actor` in the same transaction.
    pub async fn breaker_update<F>(
        &self,
        gateway: &str,
        actor: &str,
        f: F,
    ) -> Result<BreakerRow, StoreError>
    where
        F: FnOnce(&BreakerRow, DateTime<Utc>) -> (BreakerRow, Option<BreakerEvent>) + Send,
    {
        let mut tx = self.begin_write().await?;
        let row = tx.breaker_locked(gateway).await?;
        let now = tx.now().await?;
        let (new, event) = f(&row, now);
        if new != row {
            tx.breaker_write(gateway, &new).await?;
        }
        if let Some(ev) = event {
            tx.breaker_event(gateway, &ev, actor, now).await?;
        }
        tx.commit().await?;
        Ok(new)
    }

    /// Takes the open breaker's next probe: `true` for exactly one caller
    /// per `next_probe_at`, which then moves `every` ahead.
    pub async fn claim_probe(&self, gateway: &str, every: Duration) -> Result<bool, StoreError> {
        on_db!(self, breaker::claim_probe(gateway, every))
    }

    /// While `gateway`'s breaker is closed (or was never written), takes
    /// the re-wake turn (one worker per `turn`) and un-parks up to `batch`
    /// attempts, oldest parked first, due spread evenly over the turn, each
    /// with a wake-up job. Returns how many; 0 when another worker holds
    /// the turn or nothing is parked.
    pub async fn rewake_parked(
        &self,
        gateway: &str,
        batch: u32,
        turn: Duration,
    ) -> Result<u64, StoreError> {
        on_db!(self, breaker::rewake(gateway, batch, turn))
    }

    /// Every breaker and the parked attempts.
    pub async fn gateway_health(&self) -> Result<GatewayHealth, StoreError> {
        on_db!(self, breaker::health())
    }

    /// The breaker's openings and closings, oldest first.
    pub async fn breaker_events(
        &self,
        gateway: &str,
    ) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError> {
        on_db!(self, breaker::events(gateway))
    }

    /// Reserves the next request slot toward `gateway` under a limit of one
    /// request per `interval` with bursts of `burst` (GCRA), shared by every
    /// process on the database. Returns how long to wait before sending.
    pub async fn pace_slot(
        &self,
        gateway: &str,
        interval: Duration,
        burst: u32,
    ) -> Result<Duration, StoreError> {
        let wait = match &self.db {
            Db::Pg(p) => pg::breaker::pace(p, gateway, interval, burst).await?,
            Db::Lite(p) => lite::breaker::pace(p, gateway, interval, burst).await?,
        };
        Ok(Duration::from_secs_f64(wait.max(0.0)))
    }
}

/// Writes the gateway's row as `new`: `sql` binds the gateway, then the
/// row's fields in their order, each time as the backend stores it.
pub(crate) async fn write<DB>(
    tx: &mut DB::Connection,
    sql: &'static str,
    gateway: &str,
    new: &BreakerRow,
) -> Result<(), StoreError>
where
    DB: Sql,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
{
    sqlx::query(sql)
        .bind(gateway)
        .bind(new.state.as_str())
        .bind(new.failures)
        .bind(DB::maybe_at(new.failing_since))
        .bind(new.last_failure.as_deref())
        .bind(DB::maybe_at(new.last_failure_at))
        .bind(DB::maybe_at(new.last_answer_at))
        .bind(DB::maybe_at(new.opened_at))
        .bind(DB::maybe_at(new.closed_at))
        .bind(DB::maybe_at(new.next_probe_at))
        .bind(new.probes)
        .bind(DB::maybe_at(new.next_rewake_at))
        .execute(DB::on(tx))
        .await?;
    Ok(())
}

/// Appends `ev` to the breaker's log: `sql` binds the gateway, state,
/// cause, actor, detail and time.
pub(crate) async fn log_event<DB>(
    tx: &mut DB::Connection,
    sql: &'static str,
    gateway: &str,
    ev: &BreakerEvent,
    actor: &str,
    at: DateTime<Utc>,
) -> Result<(), StoreError>
where
    DB: Sql,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(sql)
        .bind(gateway)
        .bind(ev.state)
        .bind(ev.cause.as_str())
        .bind(actor)
        .bind(ev.detail.as_deref())
        .bind(DB::at(at))
        .execute(DB::on(tx))
        .await?;
    Ok(())
}
