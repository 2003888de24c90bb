//! Time for reconciliation: the half-open window a run covers, how a person
//! writes its ends, and which window the daily job is due to run.
//!
//! Invariant: pure (the caller passes `now`); a [`Window`] always has
//! `from < to` and is half-open, `[from, to)`, on both sides of the
//! comparison (the gateway's execution time, our attempts' creation time).

use chrono::{DateTime, NaiveDate, NaiveTime, TimeDelta, Utc};
use serde::Serialize;

use crate::domain::InputError;

/// `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Window {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Window {
    pub fn new(from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Self, InputError> {
        if to <= from {
            return Err(InputError::new(
                "to",
                format!("must be after from ({from} .. {to} is empty)"),
            ));
        }
        Ok(Self { from, to })
    }

    /// The UTC day `date`, midnight to midnight.
    pub fn day(date: NaiveDate) -> Self {
        let from = date.and_time(NaiveTime::MIN).and_utc();
        Self {
            from,
            to: from + TimeDelta::days(1),
        }
    }

    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.from <= t && t < self.to
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fmt = "%Y-%m-%dT%H:%M:%S%.fZ";
        write!(f, "[{}, {})", self.from.format(fmt), self.to.format(fmt))
    }
}

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
