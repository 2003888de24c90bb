//! Settled charges in the store, for both backends: written by the
//! settlement check ([`crate::recon::settle`]), read by finance's summary
//! and CSV.
//!
//! Invariant: the database keeps a settlement to an APROBADO charge in its
//! own amount and currency, with `net = gross - fee`, written once (a
//! re-run may only fill in a payout that was missing): the triggers of
//! migrations/*/…_settlement.sql, so no door writes around them.
//!
//! The reads are written once here, generic over the backend; each backend
//! holds their SQL and how it stores ids and times (`pg/settlement.rs`,
//! `lite/settlement.rs`). The insert stays per backend: PostgreSQL tells a
//! new row by `xmax`, SQLite reads first under its write lock.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{FromRow, Pool};
use uuid::Uuid;

use super::values::Sql;
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
        on_db_sql!(self, settlement::between[BETWEEN, STORED](from, to))
    }

    /// Every settled charge, summed per currency.
    pub async fn settlement_totals(&self) -> Result<Vec<SettlementTotal>, StoreError> {
        on_db_sql!(self, settlement::totals[TOTALS]())
    }
}

/// A settled charge as both backends select it: attempt, order, gateway
/// charge, balance transaction, gross, fee, net, currency, payout and
/// settled_at, the id and the time in the backend's own types.
type Row<Id, At> = (
    Id,
    String,
    Option<String>,
    String,
    i64,
    i64,
    i64,
    String,
    Option<String>,
    At,
);

/// How a backend reads back a settlement's attempt id and time.
pub(crate) struct Stored<Id, At> {
    pub id: fn(Id) -> Result<Uuid, StoreError>,
    pub at: fn(At) -> Result<DateTime<Utc>, StoreError>,
}

/// Settled charges with `from <= settled_at < to`: `sql` binds the two
/// bounds and selects a [`Row`].
pub(crate) async fn between<DB>(
    pool: &Pool<DB>,
    sql: &'static str,
    stored: Stored<DB::Id, DB::At>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<SettledCharge>, StoreError>
where
    DB: Sql,
    DB::Id: Unpin,
    DB::At: Unpin,
    Row<DB::Id, DB::At>: for<'r> FromRow<'r, DB::Row>,
{
    let mut conn = pool.acquire().await?;
    let rows: Vec<Row<DB::Id, DB::At>> = sqlx::query_as(sql)
        .bind(DB::at(from))
        .bind(DB::at(to))
        .fetch_all(DB::on(&mut conn))
        .await?;
    rows.into_iter()
        .map(|r| {
            Ok(SettledCharge {
                attempt_id: (stored.id)(r.0)?,
                order_id: r.1,
                gateway_charge_id: r.2.unwrap_or_default(),
                balance_txn: r.3,
                gross_minor: r.4,
                fee_minor: r.5,
                net_minor: r.6,
                currency: r.7,
                payout: r.8,
                settled_at: (stored.at)(r.9)?,
            })
        })
        .collect()
}

/// Every settled charge, summed per currency: `sql` selects (currency,
/// count, gross, fee, net).
pub(crate) async fn totals<DB>(
    pool: &Pool<DB>,
    sql: &'static str,
) -> Result<Vec<SettlementTotal>, StoreError>
where
    DB: Sql,
    (String, i64, i64, i64, i64): for<'r> FromRow<'r, DB::Row>,
{
    let mut conn = pool.acquire().await?;
    let rows: Vec<(String, i64, i64, i64, i64)> =
        sqlx::query_as(sql).fetch_all(DB::on(&mut conn)).await?;
    Ok(rows.into_iter().map(SettlementTotal::from).collect())
}
