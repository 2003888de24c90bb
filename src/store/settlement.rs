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
use uuid::Uuid;

use super::{Db, Store, StoreError};
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

type PgRow = (
    Uuid,
    String,
    Option<String>,
    String,
    i64,
    i64,
    i64,
    String,
    Option<String>,
    DateTime<Utc>,
);
type LiteRow = (
    String,
    String,
    Option<String>,
    String,
    i64,
    i64,
    i64,
    String,
    Option<String>,
    i64,
);

macro_rules! rows {
    () => {
        "SELECT s.attempt_id, a.order_id, a.gateway_charge_id, s.balance_txn,
        s.gross_minor, s.fee_minor, s.net_minor, s.currency, s.payout, s.settled_at"
    };
}

impl Store {
    /// Records settled charges; returns how many were new. A row already
    /// there keeps its figures; only a missing payout is filled in.
    pub async fn record_settlements(&self, rows: &[SettledCharge]) -> Result<usize, StoreError> {
        let mut new = 0;
        match &self.db {
            Db::Pg(p) => {
                let mut tx = p.begin().await?;
                for r in rows {
                    let inserted: bool = sqlx::query_scalar(
                        "INSERT INTO cobro.settlements (attempt_id, balance_txn, gross_minor,
                                fee_minor, net_minor, currency, payout, settled_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                         ON CONFLICT (attempt_id) DO UPDATE
                            SET payout = COALESCE(cobro.settlements.payout, EXCLUDED.payout)
                         RETURNING (xmax = 0)",
                    )
                    .bind(r.attempt_id)
                    .bind(&r.balance_txn)
                    .bind(r.gross_minor)
                    .bind(r.fee_minor)
                    .bind(r.net_minor)
                    .bind(&r.currency)
                    .bind(&r.payout)
                    .bind(r.settled_at)
                    .fetch_one(&mut *tx)
                    .await?;
                    new += usize::from(inserted);
                }
                tx.commit().await?;
            }
            Db::Lite(p) => {
                let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
                for r in rows {
                    let existed: bool = sqlx::query_scalar(
                        "SELECT EXISTS (SELECT 1 FROM settlements WHERE attempt_id = ?1)",
                    )
                    .bind(r.attempt_id.hyphenated().to_string())
                    .fetch_one(&mut *tx)
                    .await?;
                    sqlx::query(
                        "INSERT INTO settlements (attempt_id, balance_txn, gross_minor,
                                fee_minor, net_minor, currency, payout, settled_at, recorded_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,
                                 CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
                         ON CONFLICT (attempt_id) DO UPDATE
                            SET payout = COALESCE(settlements.payout, excluded.payout)",
                    )
                    .bind(r.attempt_id.hyphenated().to_string())
                    .bind(&r.balance_txn)
                    .bind(r.gross_minor)
                    .bind(r.fee_minor)
                    .bind(r.net_minor)
                    .bind(&r.currency)
                    .bind(&r.payout)
                    .bind(r.settled_at.timestamp_millis())
                    .execute(&mut *tx)
                    .await?;
                    new += usize::from(!existed);
                }
                tx.commit().await?;
            }
        }
        Ok(new)
    }

    /// Settled charges with `from <= settled_at < to`, oldest first.
    pub async fn settlements(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<SettledCharge>, StoreError> {
        match &self.db {
            Db::Pg(p) => {
                let rows: Vec<PgRow> = sqlx::query_as(concat!(
                    rows!(),
                    " FROM cobro.settlements s
                       JOIN cobro.payment_attempts a ON a.id = s.attempt_id
                      WHERE s.settled_at >= $1 AND s.settled_at < $2
                      ORDER BY s.settled_at, s.attempt_id"
                ))
                .bind(from)
                .bind(to)
                .fetch_all(p)
                .await?;
                Ok(rows.into_iter().map(pg_row).collect())
            }
            Db::Lite(p) => {
                let rows: Vec<LiteRow> = sqlx::query_as(concat!(
                    rows!(),
                    " FROM settlements s
                       JOIN payment_attempts a ON a.id = s.attempt_id
                      WHERE s.settled_at >= ?1 AND s.settled_at < ?2
                      ORDER BY s.settled_at, s.attempt_id"
                ))
                .bind(from.timestamp_millis())
                .bind(to.timestamp_millis())
                .fetch_all(p)
                .await?;
                rows.into_iter().map(lite_row).collect()
            }
        }
    }

    /// Every settled charge, summed per currency.
    pub async fn settlement_totals(&self) -> Result<Vec<SettlementTotal>, StoreError> {
        let rows: Vec<(String, i64, i64, i64, i64)> =
            match &self.db {
                Db::Pg(p) => sqlx::query_as(
                    "SELECT currency, count(*), sum(gross_minor)::bigint, sum(fee_minor)::bigint,
                            sum(net_minor)::bigint
                       FROM cobro.settlements GROUP BY currency ORDER BY currency",
                )
                .fetch_all(p)
                .await?,
                Db::Lite(p) => sqlx::query_as(
                    "SELECT currency, count(*), sum(gross_minor), sum(fee_minor), sum(net_minor)
                       FROM settlements GROUP BY currency ORDER BY currency",
                )
                .fetch_all(p)
                .await?,
            };
        Ok(rows
            .into_iter()
            .map(
                |(currency, count, gross_minor, fee_minor, net_minor)| SettlementTotal {
                    currency,
                    count,
                    gross_minor,
                    fee_minor,
                    net_minor,
                },
            )
            .collect())
    }
}

fn pg_row(r: PgRow) -> SettledCharge {
    SettledCharge {
        attempt_id: r.0,
        order_id: r.1,
        gateway_charge_id: r.2.unwrap_or_default(),
        balance_txn: r.3,
        gross_minor: r.4,
        fee_minor: r.5,
        net_minor: r.6,
        currency: r.7,
        payout: r.8,
        settled_at: r.9,
    }
}

fn lite_row(r: LiteRow) -> Result<SettledCharge, StoreError> {
    Ok(SettledCharge {
        attempt_id: Uuid::try_parse(&r.0).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        order_id: r.1,
        gateway_charge_id: r.2.unwrap_or_default(),
        balance_txn: r.3,
        gross_minor: r.4,
        fee_minor: r.5,
        net_minor: r.6,
        currency: r.7,
        payout: r.8,
        settled_at: DateTime::from_timestamp_millis(r.9)
            .ok_or_else(|| StoreError::Corrupt(format!("settled_at {} out of range", r.9)))?,
    })
}
