//! PostgreSQL SQL for the incident switch (see `store::pause`).

use chrono::{DateTime, Utc};

/// Sets the switch (`store::pause::set` runs it, then `LOG`).
pub(crate) const SET: &str = "INSERT INTO cobro.pause_switch (id, paused, changed_by, reason)
         VALUES (true, $1, $2, $3)
         ON CONFLICT (id) DO UPDATE
            SET paused = $1, changed_by = $2, reason = $3, changed_at = now()";
/// Appends the change to the switch's history.
pub(crate) const LOG: &str =
    "INSERT INTO cobro.pause_events (paused, actor, reason) VALUES ($1, $2, $3)";

/// Reads the switch; its time is read as it is (`AT`).
pub(crate) const STATE: &str =
    "SELECT paused, changed_at, changed_by, reason FROM cobro.pause_switch";
pub(crate) const AT: fn(DateTime<Utc>) -> DateTime<Utc> = |at| at;
