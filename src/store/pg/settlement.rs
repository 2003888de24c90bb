//! PostgreSQL SQL for settled charges (see `store::settlement`).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::domain::settlement::SettledCharge;
use crate::store::StoreError;
use crate::store::settlement::Stored;

/// Records one settled charge; true when it is new (a row already there
/// keeps its figures; only a missing payout is filled in).
pub(crate) async fn insert(tx: &mut PgConnection, r: &SettledCharge) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar(
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
    .await?)
}

/// How the rows' id and time are read: as they are.
pub(crate) const STORED: Stored<uuid::Uuid, DateTime<Utc>> = Stored { id: Ok, at: Ok };

pub(crate) const BETWEEN: &str =
    "SELECT s.attempt_id, a.order_id, a.gateway_charge_id, s.balance_txn,
                s.gross_minor, s.fee_minor, s.net_minor, s.currency, s.payout, s.settled_at
           FROM cobro.settlements s
           JOIN cobro.payment_attempts a ON a.id = s.attempt_id
          WHERE s.settled_at >= $1 AND s.settled_at < $2
          ORDER BY s.settled_at, s.attempt_id";

/// The sums are cast back to bigint (PostgreSQL's sum of bigint is numeric).
pub(crate) const TOTALS: &str = "SELECT currency, count(*), sum(gross_minor)::bigint,
                sum(fee_minor)::bigint, sum(net_minor)::bigint
           FROM cobro.settlements GROUP BY currency ORDER BY currency";
