//! SQLite SQL for settled charges (see `store::settlement`). Ids are text,
//! times milliseconds since the epoch.

use chrono::{DateTime, Utc};
use sqlx::{SqliteConnection, SqlitePool};

use super::uuid;
use crate::domain::settlement::SettledCharge;
use crate::store::StoreError;
use crate::store::settlement::SettlementTotal;

/// Records one settled charge; true when it is new (a row already there
/// keeps its figures; only a missing payout is filled in). SQLite has no
/// `xmax`: whether the row existed is read first, under the write lock.
pub(crate) async fn insert(
    tx: &mut SqliteConnection,
    r: &SettledCharge,
) -> Result<bool, StoreError> {
    let id = r.attempt_id.hyphenated().to_string();
    let existed: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM settlements WHERE attempt_id = ?1)")
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
    sqlx::query(concat!(
        "INSERT INTO settlements (attempt_id, balance_txn, gross_minor,
                fee_minor, net_minor, currency, payout, settled_at, recorded_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ",
        now_ms!(),
        ")
         ON CONFLICT (attempt_id) DO UPDATE
            SET payout = COALESCE(settlements.payout, excluded.payout)"
    ))
    .bind(&id)
    .bind(&r.balance_txn)
    .bind(r.gross_minor)
    .bind(r.fee_minor)
    .bind(r.net_minor)
    .bind(&r.currency)
    .bind(&r.payout)
    .bind(r.settled_at.timestamp_millis())
    .execute(&mut *tx)
    .await?;
    Ok(!existed)
}

type Row = (
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

pub(crate) async fn between(
    pool: &SqlitePool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<SettledCharge>, StoreError> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT s.attempt_id, a.order_id, a.gateway_charge_id, s.balance_txn,
                s.gross_minor, s.fee_minor, s.net_minor, s.currency, s.payout, s.settled_at
           FROM settlements s
           JOIN payment_attempts a ON a.id = s.attempt_id
          WHERE s.settled_at >= ?1 AND s.settled_at < ?2
          ORDER BY s.settled_at, s.attempt_id",
    )
    .bind(from.timestamp_millis())
    .bind(to.timestamp_millis())
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(SettledCharge {
                attempt_id: uuid(&r.0)?,
                order_id: r.1,
                gateway_charge_id: r.2.unwrap_or_default(),
                balance_txn: r.3,
                gross_minor: r.4,
                fee_minor: r.5,
                net_minor: r.6,
                currency: r.7,
                payout: r.8,
                settled_at: DateTime::from_timestamp_millis(r.9).ok_or_else(|| {
                    StoreError::Corrupt(format!("settled_at {} out of range", r.9))
                })?,
            })
        })
        .collect()
}

pub(crate) async fn totals(pool: &SqlitePool) -> Result<Vec<SettlementTotal>, StoreError> {
    let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT currency, count(*), sum(gross_minor), sum(fee_minor), sum(net_minor)
           FROM settlements GROUP BY currency ORDER BY currency",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(SettlementTotal::from).collect())
}
