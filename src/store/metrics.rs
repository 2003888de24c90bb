//! What `/metrics` reads from the database at scrape time: the numbers that
//! are global truths (the same whichever process is scraped), as opposed to
//! the per-process event counters in [`crate::metrics`].
//!
//! Invariant: every number here is computed from the rows themselves, never
//! from a counter kept beside them, so it cannot drift; in particular orders
//! with two or more approved charges are counted by grouping, so the gauge
//! would show a double charge even if the unique index guarding it were gone.
//! Business retries are tallied by the decline that caused them (the decline
//! code of the order's previous attempt) and how they ended; which class a
//! code belongs to is decided above the store, by the notices' mapping.
//!
//! The reads are written once here, generic over the backend; each backend
//! holds only their SQL (`pg/metrics.rs`, `lite/metrics.rs`).

use serde::Serialize;
use sqlx::{FromRow, Pool};

use super::values::Sql;
use super::{Db, Store, StoreError, lite, pg};
use crate::state::State;

/// The database's gauges, read together at scrape time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Gauges {
    /// Attempts per (kind, state); kinds and states with no attempt are absent.
    pub attempts: Vec<(String, State, i64)>,
    /// Orders with two or more `APROBADO` charges (refunds excluded). Must be 0.
    pub double_approved_orders: i64,
    /// Reconciliation cases nobody has resolved yet.
    pub open_recon_cases: i64,
    /// How long the attempt that has been `DESCONOCIDO` the longest has been
    /// so (since its latest move into `DESCONOCIDO`); 0 when there is none.
    pub oldest_desconocido_secs: f64,
    /// The gateway breakers and the parked attempts.
    pub health: super::GatewayHealth,
    /// The incident switch: sending new charges is paused.
    pub sending_paused: bool,
    /// What a payments on-call watches.
    pub on_call: OnCall,
    /// Business retries per (decline code that caused them, outcome).
    pub business_retries: Vec<RetryTally>,
}

/// How many business retries followed a decline with `decline_code` (the
/// previous attempt's; `None` when it had none) and ended in `outcome`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetryTally {
    pub decline_code: Option<String>,
    pub outcome: RetryOutcome,
    pub count: i64,
}

/// How a business retry has ended so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOutcome {
    /// `APROBADO`: the retry got the money.
    Recovered,
    /// `RECHAZADO`: declined again.
    Declined,
    /// Any other state: not settled yet (or with finance).
    Pending,
}

impl RetryOutcome {
    /// Every outcome, in the order they are shown.
    pub const ALL: [RetryOutcome; 3] = [Self::Recovered, Self::Declined, Self::Pending];

    /// The outcome of a retry in state `s`.
    pub fn of(s: State) -> RetryOutcome {
        match s {
            State::Aprobado => Self::Recovered,
            State::Rechazado => Self::Declined,
            State::Pendiente | State::EnProceso | State::Desconocido | State::EnRevision => {
                Self::Pending
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Recovered => "recovered",
            Self::Declined => "declined",
            Self::Pending => "pending",
        }
    }
}

/// The on-call gauges: how late the queue runs, when reconciliation last
/// succeeded, what waits for finance and for the app.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OnCall {
    /// How far past its due time the most overdue attempt nobody holds is
    /// (`PENDIENTE`, `DESCONOCIDO`, or `RECHAZADO` with a retry due; parked
    /// ones have no due time); 0 when none is overdue.
    pub due_lag_secs: f64,
    /// When the latest reconciliation run that succeeded finished (Unix
    /// seconds); `None` when none has.
    pub last_reconciliation_ok: Option<f64>,
    /// Open reconciliation and dispute cases, per kind.
    pub open_cases_by_kind: Vec<(String, i64)>,
    /// Customer notices not yet acknowledged by the app.
    pub notices_pending: i64,
    /// Orders the gateway charged twice, not yet refunded: the higher of the
    /// latest successful daily close and the latest successful intraday
    /// run; 0 before any run.
    pub gateway_double_charges: i64,
    /// Customer notices whose last delivery try failed, not acknowledged.
    pub notices_failed: i64,
}

/// The backend's answer before the states are parsed.
struct RawGauges {
    attempts: Vec<(String, String, i64)>,
    double_approved_orders: i64,
    open_recon_cases: i64,
    oldest_desconocido_secs: Option<f64>,
    /// Business retries per (previous attempt's decline code, retry state).
    business_retries: Vec<(Option<String>, String, i64)>,
}

/// One backend's SQL for [`Gauges`].
pub(crate) struct GaugesSql {
    /// (kind, state, count) per kind and state.
    pub attempts: &'static str,
    /// (double-approved orders, open cases, oldest `DESCONOCIDO` in seconds).
    pub summary: &'static str,
    /// (previous attempt's decline code, retry state, count).
    pub business_retries: &'static str,
}

/// One backend's SQL for [`OnCall`].
pub(crate) struct OnCallSql {
    /// (due lag, last reconciliation ok, notices pending, notices failed).
    pub summary: &'static str,
    /// (kind, count) of the open cases.
    pub open_cases_by_kind: &'static str,
    /// The gateway's double charges of the latest runs, the higher.
    pub gateway_double_charges: &'static str,
}

async fn raw_gauges<DB>(pool: &Pool<DB>, sql: &GaugesSql) -> Result<RawGauges, StoreError>
where
    DB: Sql,
    (String, String, i64): for<'r> FromRow<'r, DB::Row>,
    (i64, i64, Option<f64>): for<'r> FromRow<'r, DB::Row>,
    (Option<String>, String, i64): for<'r> FromRow<'r, DB::Row>,
{
    let mut conn = pool.acquire().await?;
    let attempts = sqlx::query_as(sql.attempts)
        .fetch_all(DB::on(&mut conn))
        .await?;
    let (double_approved_orders, open_recon_cases, oldest_desconocido_secs) =
        sqlx::query_as(sql.summary)
            .fetch_one(DB::on(&mut conn))
            .await?;
    let business_retries = sqlx::query_as(sql.business_retries)
        .fetch_all(DB::on(&mut conn))
        .await?;
    Ok(RawGauges {
        attempts,
        double_approved_orders,
        open_recon_cases,
        oldest_desconocido_secs,
        business_retries,
    })
}

async fn on_call<DB>(pool: &Pool<DB>, sql: &OnCallSql) -> Result<OnCall, StoreError>
where
    DB: Sql,
    (Option<f64>, Option<f64>, i64, i64): for<'r> FromRow<'r, DB::Row>,
    (String, i64): for<'r> FromRow<'r, DB::Row>,
    (Option<i64>,): for<'r> FromRow<'r, DB::Row>,
{
    let mut conn = pool.acquire().await?;
    let (due_lag_secs, last_reconciliation_ok, notices_pending, notices_failed): (
        Option<f64>,
        Option<f64>,
        i64,
        i64,
    ) = sqlx::query_as(sql.summary)
        .fetch_one(DB::on(&mut conn))
        .await?;
    let open_cases_by_kind = sqlx::query_as(sql.open_cases_by_kind)
        .fetch_all(DB::on(&mut conn))
        .await?;
    let gateway_double_charges: Option<i64> = sqlx::query_scalar(sql.gateway_double_charges)
        .fetch_one(DB::on(&mut conn))
        .await?;
    Ok(OnCall {
        due_lag_secs: due_lag_secs.unwrap_or(0.0).max(0.0),
        last_reconciliation_ok,
        open_cases_by_kind,
        notices_pending,
        gateway_double_charges: gateway_double_charges.unwrap_or(0),
        notices_failed,
    })
}

impl Store {
    /// Reads the gauges `/metrics` shows. Each is one cheap query: the
    /// attempts group-by (one pass over `payment_attempts`), the rest
    /// through partial indexes (`one_approved_per_order`,
    /// `recon_cases_open`, the transition log by attempt), and the business
    /// retries joined to the attempt before each by the order index.
    pub async fn gauges(&self) -> Result<Gauges, StoreError> {
        let raw = match &self.db {
            Db::Pg(p) => raw_gauges(p, &pg::metrics::GAUGES).await?,
            Db::Lite(p) => raw_gauges(p, &lite::metrics::GAUGES).await?,
        };
        let attempts = raw
            .attempts
            .into_iter()
            .map(|(kind, state, n)| {
                state
                    .parse::<State>()
                    .map(|s| (kind, s, n))
                    .map_err(|e| StoreError::Corrupt(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let mut business_retries: Vec<RetryTally> = Vec::new();
        for (decline_code, state, n) in raw.business_retries {
            let state = state
                .parse::<State>()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let outcome = RetryOutcome::of(state);
            match business_retries
                .iter_mut()
                .find(|t| t.decline_code == decline_code && t.outcome == outcome)
            {
                Some(t) => t.count += n,
                None => business_retries.push(RetryTally {
                    decline_code,
                    outcome,
                    count: n,
                }),
            }
        }
        Ok(Gauges {
            attempts,
            double_approved_orders: raw.double_approved_orders,
            open_recon_cases: raw.open_recon_cases,
            oldest_desconocido_secs: raw.oldest_desconocido_secs.unwrap_or(0.0).max(0.0),
            health: self.gateway_health().await?,
            sending_paused: self.sending_paused().await?,
            on_call: match &self.db {
                Db::Pg(p) => on_call(p, &pg::metrics::ON_CALL).await?,
                Db::Lite(p) => on_call(p, &lite::metrics::ON_CALL).await?,
            },
            business_retries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_is_recovered_declined_or_pending_by_its_state() {
        let table = [
            (State::Aprobado, RetryOutcome::Recovered),
            (State::Rechazado, RetryOutcome::Declined),
            (State::Pendiente, RetryOutcome::Pending),
            (State::EnProceso, RetryOutcome::Pending),
            (State::Desconocido, RetryOutcome::Pending),
            (State::EnRevision, RetryOutcome::Pending),
        ];
        assert_eq!(table.len(), State::ALL.len());
        for (state, outcome) in table {
            assert_eq!(RetryOutcome::of(state), outcome, "{state:?}");
        }
    }
}
