//! What `/metrics` reads from the database at scrape time: the numbers that
//! are global truths (the same whichever process is scraped), as opposed to
//! the per-process event counters in [`crate::metrics`].
//!
//! Invariant: every number here is computed from the rows themselves, never
//! from a counter kept beside them, so it cannot drift; in particular orders
//! with two or more approved charges are counted by grouping, so the gauge
//! would show a double charge even if the unique index guarding it were gone.

use serde::Serialize;

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
    /// Orders the gateway charged twice, not yet refunded, found by the
    /// latest successful reconciliation run (intraday or daily); 0 before
    /// any run.
    pub gateway_double_charges: i64,
    /// Customer notices whose last delivery try failed, not acknowledged.
    pub notices_failed: i64,
}

/// One backend's answer before the states are parsed.
pub(crate) struct RawGauges {
    pub attempts: Vec<(String, String, i64)>,
    pub double_approved_orders: i64,
    pub open_recon_cases: i64,
    pub oldest_desconocido_secs: Option<f64>,
}

impl Store {
    /// Reads the gauges `/metrics` shows. Each is one cheap query: the
    /// attempts group-by (one pass over `payment_attempts`), the rest
    /// through partial indexes (`one_approved_per_order`,
    /// `recon_cases_open`, the transition log by attempt).
    pub async fn gauges(&self) -> Result<Gauges, StoreError> {
        let raw = match &self.db {
            Db::Pg(p) => pg::metrics::gauges(p).await?,
            Db::Lite(p) => lite::metrics::gauges(p).await?,
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
        Ok(Gauges {
            attempts,
            double_approved_orders: raw.double_approved_orders,
            open_recon_cases: raw.open_recon_cases,
            oldest_desconocido_secs: raw.oldest_desconocido_secs.unwrap_or(0.0).max(0.0),
            health: self.gateway_health().await?,
            sending_paused: self.sending_paused().await?,
            on_call: match &self.db {
                Db::Pg(p) => pg::metrics::on_call(p).await?,
                Db::Lite(p) => lite::metrics::on_call(p).await?,
            },
        })
    }
}
