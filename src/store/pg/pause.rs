//! PostgreSQL SQL for the incident switch (see `store::pause`).

use sqlx::{PgConnection, PgPool};

use crate::store::StoreError;
use crate::store::pause::PauseState;

/// Sets the switch and appends the change to its history.
pub(crate) async fn set(
    tx: &mut PgConnection,
    paused: bool,
    actor: &str,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO cobro.pause_switch (id, paused, changed_by, reason)
         VALUES (true, $1, $2, $3)
         ON CONFLICT (id) DO UPDATE
            SET paused = $1, changed_by = $2, reason = $3, changed_at = now()",
    )
    .bind(paused)
    .bind(actor)
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO cobro.pause_events (paused, actor, reason) VALUES ($1, $2, $3)")
        .bind(paused)
        .bind(actor)
        .bind(reason)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

pub(crate) async fn state(pool: &PgPool) -> Result<Option<PauseState>, StoreError> {
    let row: Option<(bool, chrono::DateTime<chrono::Utc>, String, Option<String>)> =
        sqlx::query_as("SELECT paused, changed_at, changed_by, reason FROM cobro.pause_switch")
            .fetch_optional(pool)
            .await?;
    Ok(
        row.map(|(paused, changed_at, changed_by, reason)| PauseState {
            paused,
            changed_at,
            changed_by,
            reason,
        }),
    )
}
