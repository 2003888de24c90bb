//! The one row of limits every door reads (`cobro.settings`; `settings`
//! on SQLite): the maximum amount the database's `charge_gate` trigger
//! enforces on every attempt, and the deployment's key namespace that
//! business-retry keys are derived from. `cobro migrate` creates the row
//! with its defaults; `cobro migrate --max-amount-minor N` sets the
//! maximum (nothing else writes it).
//!
//! Invariant: the namespace never changes once created (a trigger refuses
//! it): a retry created again after a failover must derive the same key.

use serde::Serialize;
use uuid::Uuid;

use super::{Db, Store, StoreError};
use crate::domain::MaxAmount;

/// What the settings row holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settings {
    pub max_amount_minor: i64,
    pub key_namespace: Uuid,
}

impl Store {
    /// The settings row.
    pub async fn settings(&self) -> Result<Settings, StoreError> {
        let (max, ns): (i64, String) = match &self.db {
            Db::Pg(p) => {
                let (max, ns): (i64, Uuid) =
                    sqlx::query_as("SELECT max_amount_minor, key_namespace FROM cobro.settings")
                        .fetch_one(p)
                        .await?;
                (max, ns.to_string())
            }
            Db::Lite(p) => {
                sqlx::query_as("SELECT max_amount_minor, key_namespace FROM settings")
                    .fetch_one(p)
                    .await?
            }
        };
        let key_namespace = Uuid::try_parse(&ns)
            .map_err(|e| StoreError::Corrupt(format!("settings.key_namespace {ns:?}: {e}")))?;
        Ok(Settings {
            max_amount_minor: max,
            key_namespace,
        })
    }

    /// Sets the maximum `amount_minor` every door accepts, from the next
    /// statement on (attempts already stored are not touched).
    pub async fn set_max_amount(&self, max: MaxAmount) -> Result<(), StoreError> {
        match &self.db {
            Db::Pg(p) => {
                sqlx::query("UPDATE cobro.settings SET max_amount_minor = $1, updated_at = now()")
                    .bind(max.minor())
                    .execute(p)
                    .await?;
            }
            Db::Lite(p) => {
                sqlx::query(
                    "UPDATE settings SET max_amount_minor = ?1,
                        updated_at = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
                )
                .bind(max.minor())
                .execute(p)
                .await?;
            }
        }
        Ok(())
    }
}
