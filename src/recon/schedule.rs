//! Time for reconciliation: the half-open window a run covers, how a person
//! writes its ends, and which window the daily job and the intraday run are
//! due to run.
//!
//! Invariant: pure (the caller passes `now`); a [`Window`] always has
//! `from < to` and is half-open, `[from, to)`, on both sides of the
//! comparison (the gateway's execution time, our attempts' creation time).

use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveTime, TimeDelta, Utc};

use crate::domain::InputError;
pub use crate::domain::Window;

/// A window's end as a person writes it: RFC 3339 (`2026-11-30T00:00:00Z`,
/// any offset) or a date (`2026-11-30`, midnight UTC).
pub fn parse_when(raw: &str) -> Result<DateTime<Utc>, InputError> {
    let raw = raw.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        return Ok(t.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .map(|d| d.and_time(NaiveTime::MIN).and_utc())
        .map_err(|_| {
            InputError::new(
                "window",
                format!(
                    "{raw:?} is neither RFC 3339 (2026-11-30T00:00:00Z) nor a date (2026-11-30)"
                ),
            )
        })
}

/// When the daily job runs: `off`, or a UTC time of day (`HH:MM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileAt {
    Off,
    Daily(NaiveTime),
}

impl ReconcileAt {
    /// `off` or `HH:MM` (UTC, 24 h).
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        if raw.eq_ignore_ascii_case("off") {
            return Ok(ReconcileAt::Off);
        }
        NaiveTime::parse_from_str(raw, "%H:%M")
            .map(ReconcileAt::Daily)
            .map_err(|_| format!("{raw:?} is not a UTC time of day like 02:30 (or off)"))
    }
}

/// The latest window whose run time has passed at `now`: the previous UTC
/// day once today's `at` has passed, else the day before it (a worker that
/// starts at 01:00 still catches up yesterday's run if nobody did it).
pub fn due_window(now: DateTime<Utc>, at: NaiveTime) -> Window {
    let today = now.date_naive();
    let end = if now.time() >= at {
        today
    } else {
        today - TimeDelta::days(1)
    };
    Window::day(end - TimeDelta::days(1))
}

/// How often the intraday run covers the current UTC day so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intraday {
    Off,
    Every(Duration),
}

impl Intraday {
    /// `off`, or a duration of at least one second (`10m`, `2s`).
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        if raw.eq_ignore_ascii_case("off") {
            return Ok(Intraday::Off);
        }
        let every = crate::backoff::parse_duration_arg(raw)?;
        if every < Duration::from_secs(1) || every > Duration::from_secs(86_400) {
            return Err(format!("{raw:?} must be between 1s and 24h (or off)"));
        }
        Ok(Intraday::Every(every))
    }
}

/// The intraday window due at `now` for runs every `every`: from the start
/// of the UTC day to the latest slot boundary (slots are counted from the
/// Unix epoch, so every worker computes the same boundaries). `None` right
/// at midnight, when the day so far is empty (the daily close covers the
/// day before).
pub fn intraday_window(now: DateTime<Utc>, every: Duration) -> Option<Window> {
    let step = every.as_millis().max(1) as i64;
    let slot_end = now.timestamp_millis().div_euclid(step) * step;
    let to = DateTime::<Utc>::from_timestamp_millis(slot_end)?;
    let from = to.date_naive().and_time(NaiveTime::MIN).and_utc();
    Window::new(from, to).ok()
}
