//! SQLite SQL for settled charges (see `store::settlement`). Ids are text,
//! times milliseconds since the epoch.

use chrono::DateTime;
use sqlx::SqliteConnection;

use super::uuid;
use crate::domain::settlement::SettledCharge;
use crate::store::StoreError;
use crate::store::settlement::Stored;

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

/// How the rows' id (text) and time (milliseconds) are read.
pub(crate) const STORED: Stored<String, i64> = Stored {
    id: |id| uuid(&id),
    at: |at| {
        DateTime::from_timestamp_millis(at)
            .ok_or_else(|| StoreError::Corrupt(format!("settled_at {at} out of range")))
    },
};

pub(crate) const BETWEEN: &str =
    "SELECT s.attempt_id, a.order_id, a.gateway_charge_id, s.balance_txn,
                s.gross_minor, s.fee_minor, s.net_minor, s.currency, s.payout, s.settled_at
           FROM settlements s
           JOIN payment_attempts a ON a.id = s.attempt_id
          WHERE s.settled_at >= ?1 AND s.settled_at < ?2
          ORDER BY s.settled_at, s.attempt_id";

pub(crate) const TOTALS: &str =
    "SELECT currency, count(*), sum(gross_minor), sum(fee_minor), sum(net_minor)
           FROM settlements GROUP BY currency ORDER BY currency";
