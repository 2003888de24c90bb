//! The incident switch's row and its append-only history.
//!
//! Invariant: one row (`id` is constant); every change writes the row and
//! its `pause_events` line in one transaction.

use chrono::{DateTime, TimeZone, Utc};
use serde::Serialize;
use sqlx::Row;

use super::{Db, Store, StoreError};

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
        match &self.db {
            Db::Pg(p) => {
                let mut tx = p.begin().await?;
                sqlx::query(
                    "INSERT INTO cobro.pause_switch (id, paused, changed_by, reason)
                     VALUES (true, $1, $2, $3)
                     ON CONFLICT (id) DO UPDATE
                        SET paused = $1, changed_by = $2, reason = $3, changed_at = now()",
                )
                .bind(paused)
                .bind(&actor)
                .bind(&reason)
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "INSERT INTO cobro.pause_events (paused, actor, reason) VALUES ($1, $2, $3)",
                )
                .bind(paused)
                .bind(&actor)
                .bind(&reason)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
            }
            Db::Lite(p) => {
                let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
                let now = Utc::now().timestamp_millis();
                sqlx::query(
                    "INSERT INTO pause_switch (id, paused, changed_at, changed_by, reason)
                     VALUES (1, ?1, ?2, ?3, ?4)
                     ON CONFLICT (id) DO UPDATE
                        SET paused = ?1, changed_at = ?2, changed_by = ?3, reason = ?4",
                )
                .bind(paused)
                .bind(now)
                .bind(&actor)
                .bind(&reason)
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "INSERT INTO pause_events (paused, actor, reason, at) VALUES (?1, ?2, ?3, ?4)",
                )
                .bind(paused)
                .bind(&actor)
                .bind(&reason)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
            }
        }
        Ok(self.pause_state().await?.unwrap_or(PauseState {
            paused,
            changed_at: Utc::now(),
            changed_by: actor,
            reason,
        }))
    }

    /// The switch, if it was ever set.
    pub async fn pause_state(&self) -> Result<Option<PauseState>, StoreError> {
        Ok(match &self.db {
            Db::Pg(p) => {
                sqlx::query("SELECT paused, changed_at, changed_by, reason FROM cobro.pause_switch")
                    .fetch_optional(p)
                    .await?
                    .map(|r| -> Result<PauseState, sqlx::Error> {
                        Ok(PauseState {
                            paused: r.try_get("paused")?,
                            changed_at: r.try_get("changed_at")?,
                            changed_by: r.try_get("changed_by")?,
                            reason: r.try_get("reason")?,
                        })
                    })
                    .transpose()?
            }
            Db::Lite(p) => {
                sqlx::query("SELECT paused, changed_at, changed_by, reason FROM pause_switch")
                    .fetch_optional(p)
                    .await?
                    .map(|r| -> Result<PauseState, sqlx::Error> {
                        Ok(PauseState {
                            paused: r.try_get("paused")?,
                            changed_at: Utc
                                .timestamp_millis_opt(r.try_get("changed_at")?)
                                .single()
                                .unwrap_or_default(),
                            changed_by: r.try_get("changed_by")?,
                            reason: r.try_get("reason")?,
                        })
                    })
                    .transpose()?
            }
        })
    }

    /// Whether sending is paused now.
    pub async fn sending_paused(&self) -> Result<bool, StoreError> {
        Ok(self.pause_state().await?.is_some_and(|s| s.paused))
    }
}
