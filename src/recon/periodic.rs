//! Reconciliation in the worker process: a loop that asks the database for
//! the claim of each due window and runs it:
//! - the daily close: the previous UTC day once `COBRO_RECONCILE_AT` has
//!   passed, by the database's clock, asked about once a minute;
//! - the intraday run: every `COBRO_RECONCILE_INTRADAY` (10 minutes), the
//!   current UTC day up to the latest slot boundary, so a double charge
//!   opens its case within one interval instead of the next day.
//!
//! Invariant: with any number of workers one runs each window (the claim is
//! a row per window; intraday slots are counted from the epoch, so every
//! worker names the same window); a failed run (gateway unreachable) is
//! tried again after `COBRO_RECONCILE_RETRY`, a run whose holder vanished
//! after [`STALE_AFTER`]. Correctness never rests on the claim: cases are
//! idempotent and settling is a compare-and-set, so two runs over one day
//! (intraday and the daily close, a stale holder, a person's
//! `cobro reconcile`) open nothing twice.

use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveTime;
use clap::Args;
use serde_json::json;
use tokio::sync::watch;
use tracing::{info, warn};

use super::schedule::{Intraday, intraday_window};
use super::settle::SettlementArgs;
use super::{ReconcileAt, Window, due_window, reconcile};
use crate::backoff::parse_duration_arg as duration;
use crate::gateway::Gateway;
use crate::store::{Store, StoreError};

/// How often the loop asks whether a window is due.
const TICK: Duration = Duration::from_secs(60);
/// A run claimed this long ago and never finished is taken over (its holder
/// died or was cut off mid-run).
pub const STALE_AFTER: Duration = Duration::from_secs(3600);

/// The worker's reconciliation settings (flags or environment).
#[derive(Debug, Clone, Args)]
pub struct ReconcileArgs {
    /// UTC time of day (HH:MM) after which the previous UTC day is
    /// reconciled, or `off`.
    #[arg(long, env = "COBRO_RECONCILE_AT", default_value = "02:30", value_parser = ReconcileAt::parse)]
    pub reconcile_at: ReconcileAt,
    /// How long after a failed run (e.g. the gateway did not answer) the
    /// window is tried again.
    #[arg(long, env = "COBRO_RECONCILE_RETRY", default_value = "15m", value_parser = duration)]
    pub reconcile_retry: Duration,
    /// How often the current UTC day so far is reconciled (same-day
    /// detection of double charges), or `off`.
    #[arg(long, env = "COBRO_RECONCILE_INTRADAY", default_value = "10m", value_parser = Intraday::parse)]
    pub reconcile_intraday: Intraday,
    /// `daily`: with the daily close, check the settlement of the day whose
    /// charges are now `COBRO_SETTLEMENT_DELAY` old (`off`: never).
    #[arg(long, env = "COBRO_SETTLEMENT_CHECK", default_value = "daily", value_parser = parse_check, action = clap::ArgAction::Set)]
    pub settlement_check: bool,
    #[command(flatten)]
    pub settlement: SettlementArgs,
}

fn parse_check(raw: &str) -> Result<bool, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "daily" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{raw:?} is neither daily nor off")),
    }
}

impl ReconcileArgs {
    /// No reconciliation, daily or intraday (tests, the demo).
    pub fn off() -> Self {
        Self {
            reconcile_at: ReconcileAt::Off,
            reconcile_retry: Duration::from_secs(900),
            reconcile_intraday: Intraday::Off,
            settlement_check: false,
            settlement: SettlementArgs {
                settlement_delay: Duration::from_secs(7 * 86_400),
                settlement_fee: crate::domain::settlement::FeeRule::Off,
            },
        }
    }
}

/// Runs until `stop` changes; returns at once when both schedules are off.
pub async fn reconcile_loop(
    store: Store,
    gateway: Arc<dyn Gateway>,
    args: ReconcileArgs,
    worker: String,
    mut stop: watch::Receiver<bool>,
) {
    let daily = match args.reconcile_at {
        ReconcileAt::Daily(at) => Some(at),
        ReconcileAt::Off => None,
    };
    let intraday = match args.reconcile_intraday {
        Intraday::Every(every) => Some(every),
        Intraday::Off => None,
    };
    if daily.is_none() && intraday.is_none() {
        return;
    }
    info!(daily = ?daily, intraday = ?intraday, "reconciliation scheduled (UTC)");
    let tick = intraday.map_or(TICK, |every| every.min(TICK));
    // The slot current at start-up is left to whoever ran it; the next
    // one covers the whole day so far anyway.
    let mut last_slot = match intraday {
        Some(every) => store
            .now()
            .await
            .ok()
            .and_then(|now| intraday_window(now, every)),
        None => None,
    };
    loop {
        let run = async {
            if let Some(at) = daily {
                let window = due_now(&store, at).await?;
                run_once(
                    &store,
                    gateway.as_ref(),
                    &window,
                    &worker,
                    args.reconcile_retry,
                )
                .await?;
                if args.settlement_check {
                    super::settle::run_due(
                        &store,
                        gateway.as_ref(),
                        &args.settlement,
                        &worker,
                        args.reconcile_retry,
                    )
                    .await?;
                }
            }
            if let Some(every) = intraday {
                let window = intraday_window(store.now().await?, every);
                if window.is_some() && window != last_slot {
                    last_slot = window;
                    if let Some(window) = window {
                        let retry = args.reconcile_retry.min(every);
                        run_once(&store, gateway.as_ref(), &window, &worker, retry).await?;
                    }
                }
            }
            Ok::<_, StoreError>(())
        };
        tokio::select! {
            done = run => {
                if let Err(e) = done {
                    warn!(error = %e, "reading the database clock or claiming the window failed; trying again next tick");
                }
            }
            _ = stop.changed() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The window due now for a daily run at `at`, by the database's clock:
/// the one the claim, the cases and every attempt's times use, so workers
/// whose own clocks disagree still pick the same window.
pub async fn due_now(store: &Store, at: NaiveTime) -> Result<Window, StoreError> {
    Ok(due_window(store.now().await?, at))
}

/// Claims `window` for `worker` and runs it; `Ok(false)` when there was
/// nothing to claim (done, running elsewhere, or failed too recently).
/// A run cut off by shutdown stays claimed until [`STALE_AFTER`].
pub async fn run_once(
    store: &Store,
    gateway: &dyn Gateway,
    window: &Window,
    worker: &str,
    retry_after: Duration,
) -> Result<bool, StoreError> {
    let Some(claim) = store
        .claim_recon_run(window, worker, retry_after, STALE_AFTER)
        .await?
    else {
        return Ok(false);
    };
    info!(%window, tries = claim.tries, "reconciliation claimed");
    let (ok, report) = match reconcile(store, gateway, window).await {
        Ok(report) => (true, serde_json::to_value(&report).unwrap_or_default()),
        Err(e) => {
            warn!(%window, error = %e, "reconciliation failed; tried again later");
            (false, json!({ "error": e.to_string() }))
        }
    };
    if !store.finish_recon_run(&claim, ok, &report).await? {
        warn!(%window, "the claim was taken over before the run finished");
    }
    Ok(true)
}
