//! Settled charges in the store, for both backends: written by the
//! settlement check ([`crate::recon::settle`]), read by finance's summary
//! and CSV.
//!
//! Invariant: the database keeps a settlement to an APROBADO charge in its
//! own amount and currency, with `net = gross - fee`, written once (a
//! re-run may only fill in a payout that was missing): the triggers of
//! migrations/*/…_settlement.sql, so no door writes around them.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Store, StoreError};
use crate::domain::settlement::SettledCharge;

/// Settled charges per currency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettlementTotal {
    pub currency: String,
    pub count: i64,
    pub gross_minor: i64,
    pub fee_minor: i64,
    pub net_minor: i64,
}

impl From<(String, i64, i64, i64, i64)> for SettlementTotal {
    fn from(
        (currency, count, gross_minor, fee_minor, net_minor): (String, i64, i64, i64, i64),
    ) -> Self {
        SettlementTotal {
            currency,
            count,
            gross_minor,
            fee_minor,
            net_minor,
        }
    }
}

impl Store {
    /// Records settled charges, in one transaction; returns how many were
    /// new. A row already there keeps its figures; only a missing payout
    /// is filled in.
    pub async fn record_settlements(&self, rows: &[SettledCharge]) -> Result<usize, StoreError> {
        let mut tx = self.begin_write().await?;
        let mut new = 0;
        for r in rows {
            new += usize::from(tx.record_settlement(r).await?);
        }
        tx.commit().await?;
        Ok(new)
    }

    /// Settled charges with `from <= settled_at < to`, oldest first.
    pub async fn settlements(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<SettledCharge>, StoreError> {
        on_db!(self, settlement::between(from, to))
    }

    /// Every settled charge, summed per currency.
    pub async fn settlement_totals(&self) -> Result<Vec<SettlementTotal>, StoreError> {
        on_db!(self, settlement::totals())
    }
}
