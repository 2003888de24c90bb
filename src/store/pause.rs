//! The incident switch's row and its append-only history.
//!
//! Invariant: one row (`id` is constant); every change writes the row and
//! its `pause_events` line in one transaction (the SQL: `pg/pause.rs`,
//! `lite/pause.rs`).

use super::{Store, StoreError};
use chrono::{DateTime, Utc};
use serde::Serialize;

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
        on_db!(self, pause::state())
    }

    /// Whether sending is paused now.
    pub async fn sending_paused(&self) -> Result<bool, StoreError> {
        Ok(self.pause_state().await?.is_some_and(|s| s.paused))
    }
}
