//! Poison wake-ups: an attempt whose handling fails again and again with an
//! error that is not the gateway's (a bug, a row the code cannot handle, a
//! write the database refuses) is quarantined to finance instead of being
//! re-woken for ever with nothing but log lines.
//!
//! Invariant: counting and quarantining never touch the attempt (its state,
//! version and log are the state machine's); quarantine is a `poison_wakeup`
//! case plus a row in `wake_failures`, and the sweepers skip an attempt
//! while that case is open. Closing the case lifts the quarantine; the next
//! failure after that starts a fresh count. Failures more than
//! [`FAILURE_WINDOW`] apart start a fresh count too (a rare transient error
//! never adds up to a quarantine).
//!
//! The write of the count is written once here, generic over the backend;
//! reading the count (a row lock on PostgreSQL) and opening the case (the
//! window's times) stay in `pg/poison.rs` and `lite/poison.rs`.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{Encode, Type};
use uuid::Uuid;

use super::values::Sql;
use super::{Store, StoreError};

/// Failures further apart than this do not add up.
pub const FAILURE_WINDOW: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// The most of an error message kept (the rest is cut).
const ERROR_CHARS: usize = 2000;

/// What the store knew of the attempt's failures before this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    pub failures: i32,
    pub first_failed_at: DateTime<Utc>,
    pub last_failed_at: DateTime<Utc>,
    /// Quarantined, its case still open.
    pub quarantined: bool,
    /// Quarantined once, its case since closed.
    pub released: bool,
}

/// What to write for this failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next {
    pub failures: i32,
    pub first_failed_at: DateTime<Utc>,
    /// Open the quarantine case now.
    pub quarantine: bool,
    /// Keep the open case (already quarantined).
    pub keep_case: bool,
}

/// The pure decision: a fresh count after a release or a long gap, else
/// one more; the case opens when the count reaches `after`.
pub(crate) fn next(seen: Option<Seen>, now: DateTime<Utc>, after: u32) -> Next {
    let (failures, first) = match seen {
        Some(s) if s.quarantined => (s.failures + 1, s.first_failed_at),
        Some(s) if !s.released && now - s.last_failed_at <= FAILURE_WINDOW => {
            (s.failures + 1, s.first_failed_at)
        }
        _ => (1, now),
    };
    let quarantined = seen.is_some_and(|s| s.quarantined);
    Next {
        failures,
        first_failed_at: first,
        quarantine: !quarantined && failures >= after.max(1) as i32,
        keep_case: quarantined,
    }
}

/// One failed wake-up being counted: the attempt, its error (cut), what to
/// write, and the database's time.
pub(crate) struct Failed<'a> {
    pub attempt_id: Uuid,
    pub error: &'a str,
    pub next: Next,
    pub now: DateTime<Utc>,
}

/// A failure counted, and the case if this one quarantined the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeFailure {
    pub failures: i32,
    /// The `poison_wakeup` case opened by this failure.
    pub quarantined: Option<i64>,
}

fn cut(error: &str) -> String {
    error.chars().take(ERROR_CHARS).collect()
}

impl Store {
    /// Counts one failed wake-up of `attempt_id` with `error`; at `after`
    /// failures it opens a `poison_wakeup` case and the sweepers stop
    /// waking the attempt until a person closes the case. See the module
    /// docs.
    pub async fn record_wake_failure(
        &self,
        attempt_id: Uuid,
        error: &str,
        after: u32,
    ) -> Result<WakeFailure, StoreError> {
        let error = cut(error);
        let mut tx = self.begin_write().await?;
        let now = tx.now().await?;
        let (seen, old_case) = tx.poison_seen(attempt_id).await?.unzip();
        let n = next(seen, now, after);
        let failed = Failed {
            attempt_id,
            error: &error,
            next: n,
            now,
        };
        let mut case_id = if n.keep_case {
            old_case.flatten()
        } else {
            None
        };
        let mut opened = None;
        if n.quarantine {
            let id = tx.poison_case(&failed).await?;
            case_id = Some(id);
            opened = Some(id);
        }
        tx.poison_write(&failed, case_id).await?;
        tx.commit().await?;
        Ok(WakeFailure {
            failures: n.failures,
            quarantined: opened,
        })
    }
}

/// The case's details.
pub(crate) fn details(error: &str, n: &Next, state: &str) -> serde_json::Value {
    json!({
        "reason": format!(
            "handling this attempt failed {} times with an error that is not the gateway's; \
             it is no longer woken until this case is closed",
            n.failures
        ),
        "error": error,
        "failures": n.failures,
        "state": state,
    })
}

impl StoreError {
    /// Whether the error goes away by itself (the database unreachable or
    /// busy, a lost connection, a deadlock or serialization failure, a
    /// restart): such failures are not counted towards a quarantine, so an
    /// outage or a burst of lock contention quarantines nothing.
    pub fn is_transient(&self) -> bool {
        let StoreError::Db(e) = self else {
            return false;
        };
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                transient_code(&code)
            }
            _ => false,
        }
    }
}

/// PostgreSQL SQLSTATEs (connection exceptions, serialization failure,
/// deadlock, shutdown, too many connections) and SQLite result codes
/// (`SQLITE_BUSY` and `SQLITE_LOCKED`, with their extended codes) that
/// mean "try again".
fn transient_code(code: &str) -> bool {
    if code.starts_with("08") || matches!(code, "40001" | "40P01" | "53300" | "53400") {
        return true;
    }
    if code.starts_with("57P") {
        return true;
    }
    code.parse::<i32>().is_ok_and(|n| matches!(n & 0xff, 5 | 6))
}

/// The attempt's failure count, last error and case: `sql` binds the
/// attempt, the count, the first and last failure, the error and the case.
pub(crate) async fn write<DB>(
    tx: &mut DB::Connection,
    sql: &'static str,
    f: &Failed<'_>,
    case_id: Option<i64>,
) -> Result<(), StoreError>
where
    DB: Sql,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    Option<i64>: for<'q> Encode<'q, DB> + Type<DB>,
{
    sqlx::query(sql)
        .bind(DB::id(f.attempt_id))
        .bind(f.next.failures)
        .bind(DB::at(f.next.first_failed_at))
        .bind(DB::at(f.now))
        .bind(f.error)
        .bind(case_id)
        .execute(DB::on(tx))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_764_547_200 + secs, 0).unwrap()
    }

    fn seen(failures: i32, last: i64, quarantined: bool, released: bool) -> Option<Seen> {
        Some(Seen {
            failures,
            first_failed_at: at(0),
            last_failed_at: at(last),
            quarantined,
            released,
        })
    }

    #[test]
    fn the_fifth_failure_in_a_row_quarantines_once() {
        let n = next(None, at(0), 5);
        assert_eq!((n.failures, n.quarantine), (1, false));
        let n = next(seen(3, 10, false, false), at(20), 5);
        assert_eq!(
            (n.failures, n.quarantine, n.first_failed_at),
            (4, false, at(0))
        );
        let n = next(seen(4, 10, false, false), at(20), 5);
        assert_eq!((n.failures, n.quarantine), (5, true));
        // Already quarantined: counted, no second case.
        let n = next(seen(5, 10, true, false), at(20), 5);
        assert_eq!((n.failures, n.quarantine, n.keep_case), (6, false, true));
    }

    #[test]
    fn busy_and_lost_connections_are_transient_a_refused_write_is_not() {
        for code in [
            "08006", "40001", "40P01", "57P01", "53300", "5", "517", "6", "262",
        ] {
            assert!(transient_code(code), "{code}");
        }
        for code in ["P0001", "23505", "CB007", "19", "1811", ""] {
            assert!(!transient_code(code), "{code}");
        }
        assert!(StoreError::Db(sqlx::Error::PoolTimedOut).is_transient());
        assert!(!StoreError::Corrupt("x".into()).is_transient());
    }

    #[test]
    fn a_long_gap_or_a_closed_case_starts_a_fresh_count() {
        let n = next(seen(4, 10, false, false), at(10 + 3601), 5);
        assert_eq!(
            (n.failures, n.quarantine, n.first_failed_at),
            (1, false, at(3611))
        );
        let n = next(seen(9, 10, false, true), at(20), 5);
        assert_eq!((n.failures, n.quarantine, n.keep_case), (1, false, false));
        // A threshold of 1 quarantines at the first failure.
        assert!(next(None, at(0), 1).quarantine);
    }
}
