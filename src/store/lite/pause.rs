//! SQLite SQL for the incident switch (see `store::pause`); times are
//! milliseconds since the epoch, the row's id is 1.

use chrono::{DateTime, Utc};

use super::ms;

/// Sets the switch (`store::pause::set` runs it, then `LOG`).
pub(crate) const SET: &str = concat!(
    "INSERT INTO pause_switch (id, paused, changed_at, changed_by, reason)
         VALUES (1, ?1, ",
    now_ms!(),
    ", ?2, ?3)
         ON CONFLICT (id) DO UPDATE
            SET paused = excluded.paused, changed_at = excluded.changed_at,
                changed_by = excluded.changed_by, reason = excluded.reason"
);
/// Appends the change to the switch's history.
pub(crate) const LOG: &str = concat!(
    "INSERT INTO pause_events (paused, actor, reason, at) VALUES (?1, ?2, ?3, ",
    now_ms!(),
    ")"
);

/// Reads the switch; its time is milliseconds (`AT`).
pub(crate) const STATE: &str = "SELECT paused, changed_at, changed_by, reason FROM pause_switch";
pub(crate) const AT: fn(i64) -> DateTime<Utc> = ms;
