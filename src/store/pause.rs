//! The incident switch's row and its append-only history.
//!
//! Invariant: one row (`id` is constant); every change writes the row and
//! its `pause_events` line in one transaction. The steps are written once
//! here, generic over the backend; each backend holds only its SQL (and
//! how it stores a time): `pg/pause.rs`, `lite/pause.rs`.

use super::values::Sql;
use super::{Store, StoreError};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Encode, FromRow, Pool, Type};

/// The switch as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PauseState {
    pub paused: bool,
    pub changed_at: DateTime<Utc>,
    pub changed_by: String,
    pub reason: Option<String>,
}

impl Store {
    /// Turns sending of new charges off (`paused`) or back on, as `actor`,
    /// with a reason; the history keeps every change.
    pub async fn set_sending_paused(
        &self,
        paused: bool,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<PauseState, StoreError> {
        let actor: String = actor.chars().take(200).collect();
        let reason: Option<String> = reason.map(|r| r.chars().take(500).collect());
        let mut tx = self.begin_write().await?;
        tx.set_pause(paused, &actor, reason.as_deref()).await?;
        tx.commit().await?;
        Ok(self.pause_state().await?.unwrap_or(PauseState {
            paused,
            changed_at: Utc::now(),
            changed_by: actor,
            reason,
        }))
    }

    /// The switch, if it was ever set.
    pub async fn pause_state(&self) -> Result<Option<PauseState>, StoreError> {
        on_db_sql!(self, pause::state[STATE, AT]())
    }

    /// Whether sending is paused now.
    pub async fn sending_paused(&self) -> Result<bool, StoreError> {
        Ok(self.pause_state().await?.is_some_and(|s| s.paused))
    }
}

/// Sets the switch and appends the change to its history: the two
/// statements of a backend (`sql`), each bound to the same three values.
pub(crate) async fn set<DB>(
    tx: &mut DB::Connection,
    set: &'static str,
    log: &'static str,
    paused: bool,
    actor: &str,
    reason: Option<&str>,
) -> Result<(), StoreError>
where
    DB: Sql,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
{
    for sql in [set, log] {
        sqlx::query(sql)
            .bind(paused)
            .bind(actor)
            .bind(reason)
            .execute(DB::on(tx))
            .await?;
    }
    Ok(())
}

/// The switch, if it was ever set: `sql` reads (paused, changed_at,
/// changed_by, reason), `at` turns the backend's stored time into a time.
pub(crate) async fn state<DB, At>(
    pool: &Pool<DB>,
    sql: &'static str,
    at: fn(At) -> DateTime<Utc>,
) -> Result<Option<PauseState>, StoreError>
where
    DB: Sql,
    (bool, At, String, Option<String>): for<'r> FromRow<'r, DB::Row> + Send + Unpin,
{
    let mut conn = pool.acquire().await?;
    let row: Option<(bool, At, String, Option<String>)> = sqlx::query_as(sql)
        .fetch_optional(DB::on(&mut conn))
        .await?;
    Ok(
        row.map(|(paused, changed_at, changed_by, reason)| PauseState {
            paused,
            changed_at: at(changed_at),
            changed_by,
            reason,
        }),
    )
}
