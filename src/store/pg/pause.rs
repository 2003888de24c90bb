//! PostgreSQL SQL for the incident switch (see `store::pause`).

use sqlx::PgPool;

use crate::store::StoreError;
use crate::store::pause::{self, PauseState};

/// Sets the switch (`store::pause::set` runs it, then `LOG`).
pub(crate) const SET: &str = "INSERT INTO cobro.pause_switch (id, paused, changed_by, reason)
         VALUES (true, $1, $2, $3)
         ON CONFLICT (id) DO UPDATE
            SET paused = $1, changed_by = $2, reason = $3, changed_at = now()";
/// Appends the change to the switch's history.
pub(crate) const LOG: &str =
    "INSERT INTO cobro.pause_events (paused, actor, reason) VALUES ($1, $2, $3)";

pub(crate) async fn state(pool: &PgPool) -> Result<Option<PauseState>, StoreError> {
    pause::state(
        pool,
        "SELECT paused, changed_at, changed_by, reason FROM cobro.pause_switch",
        |at| at,
    )
    .await
}
