//! The counts `cobro status` and the demo read: attempts per state, open
//! wake-up jobs, transition-log rows, open reconciliation cases. Written
//! once, generic over the backend; each backend holds only their SQL
//! (`pg/counts.rs`, `lite/counts.rs`).

use sqlx::{Encode, FromRow, Pool, Type};

use super::StoreError;
use super::values::Sql;

/// One `count(*)`: `sql` selects it.
pub(crate) async fn count<DB>(pool: &Pool<DB>, sql: &'static str) -> Result<i64, StoreError>
where
    DB: Sql,
    (i64,): for<'r> FromRow<'r, DB::Row>,
{
    let mut conn = pool.acquire().await?;
    Ok(sqlx::query_scalar(sql).fetch_one(DB::on(&mut conn)).await?)
}

/// Attempts per state, of the orders whose id starts with `prefix` (the
/// query's one parameter), in state order.
pub(crate) async fn by_state<DB>(
    pool: &Pool<DB>,
    sql: &'static str,
    prefix: &str,
) -> Result<Vec<(String, i64)>, StoreError>
where
    DB: Sql,
    (String, i64): for<'r> FromRow<'r, DB::Row>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
{
    let mut conn = pool.acquire().await?;
    Ok(sqlx::query_as(sql)
        .bind(prefix.to_owned())
        .fetch_all(DB::on(&mut conn))
        .await?)
}

#[cfg(test)]
mod tests {
    use super::super::{CHARGE_QUEUE, lite, pg};

    #[test]
    fn the_wakeup_count_names_the_charge_queue_on_both_backends() {
        let named = format!("job_type = '{CHARGE_QUEUE}'");
        assert!(pg::counts::OPEN_WAKEUPS.contains(&named));
        assert!(lite::counts::OPEN_WAKEUPS.contains(&named));
    }
}
