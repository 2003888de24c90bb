//! Reading attempts and moving them: the compare-and-set write, the sweeper's
//! re-wake, and the history queries.
//!
//! Invariant: [`Store::apply`] is the only statement that changes an
//! attempt's state, lease or schedule. It checks the event against the pure
//! state machine first, then updates `WHERE id AND version AND state`, and in
//! the same transaction writes the transition-log row, the check row and the
//! wake-up job.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Attempt, Check, Store, StoreError, Transition};
use crate::gateway::Evidence;
use crate::state::{Event, State, transition};

/// Who holds the attempt after the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease<'a> {
    /// Take (or keep) the lease for `ttl`; `next_action_at` becomes its
    /// expiry, so the sweeper recovers the attempt if the holder vanishes.
    Take { owner: &'a str, ttl: Duration },
    /// No holder.
    Release,
}

/// A completed lookup, recorded with the write that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRecord {
    pub scheduled_at: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
}

/// One compare-and-set write to an attempt.
#[derive(Debug, Clone)]
pub struct Change<'a> {
    /// `None` for writes that keep the state (taking a check lease, a failed
    /// check): those write no transition-log row.
    pub event: Option<Event>,
    pub cause: &'a str,
    pub actor: &'a str,
    pub evidence: Option<&'a Evidence>,
    pub charge_id: Option<&'a str>,
    pub decline_code: Option<&'a str>,
    /// Act again after this delay (from the database's now); a wake-up job
    /// is pushed for that time. Ignored when the lease is taken.
    pub act_in: Option<Duration>,
    pub lease: Lease<'a>,
    pub add_check: Option<CheckRecord>,
    pub add_send: bool,
}

impl<'a> Change<'a> {
    pub fn new(event: Option<Event>, cause: &'a str, actor: &'a str) -> Self {
        Self {
            event,
            cause,
            actor,
            evidence: None,
            charge_id: None,
            decline_code: None,
            act_in: None,
            lease: Lease::Release,
            add_check: None,
            add_send: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The write won; this is the attempt as it is now.
    Moved(Box<Attempt>),
    /// Someone else changed the attempt first; nothing was written.
    Lost,
}

#[derive(sqlx::FromRow)]
struct WithNow {
    #[sqlx(flatten)]
    attempt: Attempt,
    db_now: DateTime<Utc>,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Store {
    /// The attempt and the database's clock, read together.
    pub async fn load(&self, id: Uuid) -> Result<(Attempt, DateTime<Utc>), StoreError> {
        let row: Option<WithNow> = sqlx::query_as(
            "SELECT a.*, now() AS db_now FROM cobro.payment_attempts a WHERE a.id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| (r.attempt, r.db_now))
            .ok_or(StoreError::NotFound(id))
    }

    /// The compare-and-set write. See the module docs.
    pub async fn apply(&self, seen: &Attempt, change: &Change<'_>) -> Result<Applied, StoreError> {
        let to = match change.event {
            Some(event) => transition(seen.state, event)?.to,
            None => seen.state,
        };
        let (lease_owner, lease_secs) = match change.lease {
            Lease::Take { owner, ttl } => (Some(owner), Some(secs(ttl))),
            Lease::Release => (None, None),
        };
        let act_in = if lease_secs.is_some() {
            lease_secs
        } else {
            change.act_in.map(secs)
        };
        let evidence = change.evidence.map(sqlx::types::Json);
        let mut tx = self.pool.begin().await?;
        let moved: Option<Attempt> = sqlx::query_as(
            "UPDATE cobro.payment_attempts SET
                state = $3,
                version = version + 1,
                updated_at = now(),
                gateway_charge_id = COALESCE($4, gateway_charge_id),
                decline_code = COALESCE($5, decline_code),
                next_action_at = CASE WHEN $6::float8 IS NULL THEN NULL
                                      ELSE now() + make_interval(secs => $6::float8) END,
                lease_owner = $7,
                lease_expires_at = CASE WHEN $8::float8 IS NULL THEN NULL
                                        ELSE now() + make_interval(secs => $8::float8) END,
                check_count = check_count + $9,
                send_count = send_count + $10,
                last_evidence = COALESCE($11, last_evidence)
             WHERE id = $1 AND version = $2 AND state = $12
             RETURNING *",
        )
        .bind(seen.id)
        .bind(seen.version)
        .bind(to.as_str())
        .bind(change.charge_id)
        .bind(change.decline_code)
        .bind(act_in)
        .bind(lease_owner)
        .bind(lease_secs)
        .bind(i32::from(change.add_check.is_some()))
        .bind(i32::from(change.add_send))
        .bind(evidence)
        .bind(seen.state.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(now) = moved else {
            return Ok(Applied::Lost);
        };
        if to != seen.state {
            let ev = change.evidence;
            sqlx::query(
                "INSERT INTO cobro.attempt_transitions
                    (attempt_id, from_state, to_state, cause, actor,
                     http_status, error_kind, lookup_result, evidence)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(seen.id)
            .bind(seen.state.as_str())
            .bind(to.as_str())
            .bind(change.cause)
            .bind(change.actor)
            .bind(ev.and_then(|e| e.http_status).map(i32::from))
            .bind(ev.map(|e| e.error_kind.as_str()))
            .bind(ev.and_then(|e| e.lookup_result.as_deref()))
            .bind(evidence)
            .execute(&mut *tx)
            .await?;
        }
        if let Some(check) = &change.add_check {
            let ev = change.evidence;
            sqlx::query(
                "INSERT INTO cobro.attempt_checks
                    (attempt_id, check_number, scheduled_at, started_at, lookup_result,
                     http_status, error_kind, actor)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(seen.id)
            .bind(now.check_count)
            .bind(check.scheduled_at)
            .bind(check.started_at)
            .bind(
                ev.and_then(|e| e.lookup_result.as_deref())
                    .unwrap_or("failed"),
            )
            .bind(ev.and_then(|e| e.http_status).map(i32::from))
            .bind(ev.map(|e| e.error_kind.as_str()))
            .bind(change.actor)
            .execute(&mut *tx)
            .await?;
        }
        if lease_owner.is_none()
            && let Some(at) = now.next_action_at
        {
            sqlx::query("SELECT cobro.wake($1, $2)")
                .bind(seen.id)
                .bind(at)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Applied::Moved(Box::new(now)))
    }

    /// Re-creates wake-ups for attempts whose time has passed: `EN_PROCESO`
    /// whose lease expired, and `PENDIENTE`/`DESCONOCIDO` due more than
    /// `grace` ago (their own scheduled job should have come by then). An
    /// attempt is re-woken at most once per `every`. Returns how many.
    pub async fn sweep(
        &self,
        grace: Duration,
        every: Duration,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "WITH due AS (
                SELECT id FROM cobro.payment_attempts
                 WHERE ((state = 'EN_PROCESO' AND next_action_at <= now())
                     OR (state IN ('PENDIENTE', 'DESCONOCIDO')
                         AND next_action_at <= now() - make_interval(secs => $1::float8)))
                   AND (woken_at IS NULL OR woken_at <= now() - make_interval(secs => $2::float8))
                 ORDER BY next_action_at
                 LIMIT $3
                 FOR UPDATE SKIP LOCKED
             ), marked AS (
                UPDATE cobro.payment_attempts a SET woken_at = now()
                  FROM due WHERE a.id = due.id
                RETURNING a.id
             )
             SELECT count(cobro.wake(id, now())) FROM marked",
        )
        .bind(secs(grace))
        .bind(secs(every))
        .bind(limit)
        .fetch_one(&self.pool)
        .await?;
        Ok(n as u64)
    }

    pub async fn attempts_for_order(&self, order_id: &str) -> Result<Vec<Attempt>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT * FROM cobro.payment_attempts WHERE order_id = $1 ORDER BY created_at, id",
        )
        .bind(order_id)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn transitions(&self, attempt_id: Uuid) -> Result<Vec<Transition>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT * FROM cobro.attempt_transitions WHERE attempt_id = $1 ORDER BY id",
        )
        .bind(attempt_id)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn checks(&self, attempt_id: Uuid) -> Result<Vec<Check>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT attempt_id, check_number, scheduled_at, started_at, finished_at,
                    lookup_result, http_status, error_kind, actor
               FROM cobro.attempt_checks WHERE attempt_id = $1 ORDER BY id",
        )
        .bind(attempt_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Counts of attempts per state (for status output and tests).
    pub async fn count_by_state(&self) -> Result<Vec<(State, i64)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state, count(*) FROM cobro.payment_attempts GROUP BY state ORDER BY state",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(s, n)| {
                s.parse::<State>()
                    .map(|st| (st, n))
                    .map_err(|e| StoreError::Db(sqlx::Error::Decode(e.into())))
            })
            .collect()
    }
}
