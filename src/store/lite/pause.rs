//! SQLite SQL for the incident switch (see `store::pause`); times are
//! milliseconds since the epoch, the row's id is 1.

use sqlx::{SqliteConnection, SqlitePool};

use super::ms;
use crate::store::StoreError;
use crate::store::pause::PauseState;

/// Sets the switch and appends the change to its history.
pub(crate) async fn set(
    tx: &mut SqliteConnection,
    paused: bool,
    actor: &str,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query(concat!(
        "INSERT INTO pause_switch (id, paused, changed_at, changed_by, reason)
         VALUES (1, ?1, ",
        now_ms!(),
        ", ?2, ?3)
         ON CONFLICT (id) DO UPDATE
            SET paused = excluded.paused, changed_at = excluded.changed_at,
                changed_by = excluded.changed_by, reason = excluded.reason"
    ))
    .bind(paused)
    .bind(actor)
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    sqlx::query(concat!(
        "INSERT INTO pause_events (paused, actor, reason, at) VALUES (?1, ?2, ?3, ",
        now_ms!(),
        ")"
    ))
    .bind(paused)
    .bind(actor)
    .bind(reason)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

pub(crate) async fn state(pool: &SqlitePool) -> Result<Option<PauseState>, StoreError> {
    let row: Option<(bool, i64, String, Option<String>)> =
        sqlx::query_as("SELECT paused, changed_at, changed_by, reason FROM pause_switch")
            .fetch_optional(pool)
            .await?;
    Ok(
        row.map(|(paused, changed_at, changed_by, reason)| PauseState {
            paused,
            changed_at: ms(changed_at),
            changed_by,
            reason,
        }),
    )
}
