//! The gateway circuit breaker shared by every worker on the database, and
//! the rate limit (pace) toward the gateway across all worker processes.
//!
//! When calls to the gateway fail as a whole (connection refused, timeouts,
//! 5xx, a refused key, a redirect: [`Health::Failed`]) `failures` times in a row, from any worker,
//! with no answer in between, the breaker opens: workers stop sending and
//! looking up, and park the attempts they are woken for (state and check
//! count unchanged; see [`crate::store::Change::park`]). While open, one
//! worker at a time probes with a single lookup of a key nobody uses, every
//! `probe_every`; the first answer (from a probe or from a call that was
//! already in flight) closes it, and the parked attempts are re-woken at
//! `rewake_per_s`, oldest first, by one worker per second.
//!
//! Invariant: the breaker only ever delays calls. It never decides an
//! attempt's outcome and never re-sends anything: a parked attempt comes
//! back to the same decision it was parked at. Its state lives in the
//! database (one row per gateway), so every worker agrees within one
//! `poll`; the decisions over that row are the pure functions
//! [`after_failure`] and [`after_answer`].
//!
//! # Layout
//! - here: the settings and [`Breaker`], one process's handle on the shared row.
//! - `decide.rs`: [`Health`] of a call and the row's pure moves.
//! - `pace.rs`: [`Pace`], the shared rate limit toward the gateway.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use clap::Args;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::backoff::parse_duration_arg as duration;
use crate::gateway::Gateway;
use crate::store::{BreakerRow, Store, StoreError};

/// The breaker's and the pace's settings (worker flags).
#[derive(Debug, Clone, Args)]
pub struct BreakerArgs {
    /// Failed gateway calls in a row (any worker's, no answer in between)
    /// that open the breaker; 0 turns it off.
    #[arg(long, env = "COBRO_BREAKER_FAILURES", default_value_t = 10)]
    pub breaker_failures: u32,
    /// While open, how often one worker probes the gateway with a lookup.
    #[arg(long, env = "COBRO_BREAKER_PROBE_EVERY", default_value = "5s", value_parser = duration)]
    pub breaker_probe_every: Duration,
    /// Parked attempts re-woken per second once the gateway answers again.
    #[arg(long, env = "COBRO_BREAKER_REWAKE_PER_S", default_value_t = 20)]
    pub breaker_rewake_per_s: u32,
    /// How often a worker reads the shared breaker state.
    #[arg(long, env = "COBRO_BREAKER_POLL", default_value = "1s", value_parser = duration)]
    pub breaker_poll: Duration,
    /// Requests per second toward the gateway, across every worker process
    /// on the database (Stripe's default live limit is 100); 0 = no limit.
    #[arg(long, env = "COBRO_GATEWAY_RPS", default_value_t = 0)]
    pub gateway_rps: u32,
    /// Requests the pace lets through at once before spacing them out;
    /// 0 = a tenth of a second's worth (at least 1).
    #[arg(long, env = "COBRO_GATEWAY_BURST", default_value_t = 0)]
    pub gateway_burst: u32,
}

impl Default for BreakerArgs {
    fn default() -> Self {
        Self {
            breaker_failures: 10,
            breaker_probe_every: Duration::from_secs(5),
            breaker_rewake_per_s: 20,
            breaker_poll: Duration::from_secs(1),
            gateway_rps: 0,
            gateway_burst: 0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BreakerConfigError {
    #[error("COBRO_BREAKER_REWAKE_PER_S must be at least 1")]
    Rewake,
    #[error("COBRO_BREAKER_PROBE_EVERY and COBRO_BREAKER_POLL must be longer than zero")]
    Zero,
}

impl BreakerArgs {
    pub fn validate(&self) -> Result<(), BreakerConfigError> {
        if self.breaker_rewake_per_s == 0 {
            return Err(BreakerConfigError::Rewake);
        }
        if self.breaker_probe_every.is_zero() || self.breaker_poll.is_zero() {
            return Err(BreakerConfigError::Zero);
        }
        Ok(())
    }

    /// The pace's slot length and burst, when a limit is set.
    pub fn pace(&self) -> Option<(Duration, u32)> {
        (self.gateway_rps > 0).then(|| {
            let burst = match self.gateway_burst {
                0 => (self.gateway_rps / 10).max(1),
                b => b,
            };
            (
                Duration::from_secs_f64(1.0 / f64::from(self.gateway_rps)),
                burst,
            )
        })
    }
}

mod decide;
mod pace;
#[cfg(test)]
mod tests;

pub use decide::{Health, after_answer, after_failure};
pub use pace::Pace;

/// This process's view of the shared breaker.
#[derive(Debug, Clone, Copy, Default)]
struct View {
    open: bool,
    failures: i32,
}

impl View {
    fn of(row: &BreakerRow) -> Self {
        Self {
            open: row.is_open(),
            failures: row.failures,
        }
    }
}

/// One process's handle on the breaker of its gateway.
pub struct Breaker {
    store: Store,
    gateway: String,
    threshold: u32,
    probe_every: Duration,
    rewake_per_s: u32,
    poll: Duration,
    actor: String,
    view: RwLock<View>,
    /// This process saw an answer it did not write (no failure recorded
    /// in its view then); the next failure it records starts a new run.
    answered: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Breaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breaker")
            .field("gateway", &self.gateway)
            .field("threshold", &self.threshold)
            .field("view", &self.view)
            .finish_non_exhaustive()
    }
}

impl Breaker {
    /// `gateway` names the gateway (its URL without credentials);
    /// `worker` is recorded as the actor of the openings and closings.
    pub fn new(store: Store, gateway: &str, args: &BreakerArgs, worker: &str) -> Self {
        Self {
            store,
            gateway: gateway.to_owned(),
            threshold: args.breaker_failures,
            probe_every: args.breaker_probe_every,
            rewake_per_s: args.breaker_rewake_per_s,
            poll: args.breaker_poll,
            actor: format!("worker:{worker}"),
            view: RwLock::new(View::default()),
            answered: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn gateway(&self) -> &str {
        &self.gateway
    }

    /// Whether calls should stop now (as of this process's last look).
    pub fn is_open(&self) -> bool {
        self.threshold > 0 && self.read().open
    }

    fn read(&self) -> View {
        *self.view.read().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, row: &BreakerRow) {
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = View::of(row);
    }

    /// At start-up: creates the gateway's row if it is missing (so the
    /// paced re-wake always has a turn to take) and reads it.
    pub async fn register(&self) -> Result<(), StoreError> {
        let row = self
            .store
            .breaker_update(&self.gateway, &self.actor, |row, _| (row.clone(), None))
            .await?;
        self.set(&row);
        Ok(())
    }

    /// Reads the shared state into this process's view.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let row = self
            .store
            .breaker(&self.gateway)
            .await?
            .unwrap_or_else(|| BreakerRow::new(&self.gateway));
        self.set(&row);
        Ok(())
    }

    /// Records what a call said. Returns whether the breaker is open now.
    /// An answer costs a write only when failures were recorded before.
    pub async fn observe(&self, health: &Health) -> bool {
        if self.threshold == 0 {
            return false;
        }
        let view = self.read();
        let (threshold, probe_every) = (self.threshold, self.probe_every);
        let written = match health {
            Health::Neutral => return view.open,
            Health::Answered if view.failures == 0 && !view.open => {
                self.answered
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                return false;
            }
            Health::Answered => {
                self.store
                    .breaker_update(&self.gateway, &self.actor, after_answer)
                    .await
            }
            Health::Failed(what) => {
                let answered = self
                    .answered
                    .swap(false, std::sync::atomic::Ordering::Relaxed);
                self.store
                    .breaker_update(&self.gateway, &self.actor, |row, now| {
                        after_failure(row, now, threshold, probe_every, what, answered)
                    })
                    .await
            }
        };
        match written {
            Ok(row) => {
                if row.is_open() != view.open {
                    match row.is_open() {
                        true => warn!(gateway = %self.gateway, failures = row.failures,
                                      last = ?row.last_failure, "gateway unreachable: breaker open, parking attempts"),
                        false => {
                            info!(gateway = %self.gateway, "gateway answers again: breaker closed")
                        }
                    }
                }
                self.set(&row);
                row.is_open()
            }
            Err(e) => {
                warn!(error = %e, "could not record the gateway's health; keeping the last view");
                view.open
            }
        }
    }

    /// The breaker's background work in one worker process, until `stop`:
    /// refresh the view every `poll`; while open, take the probe when it is
    /// due (one worker of all) and look up a key nobody uses; while closed,
    /// take the re-wake turn and un-park the next `rewake_per_s` attempts.
    pub async fn run(
        self: Arc<Self>,
        gateway: Arc<dyn Gateway>,
        pace: Arc<Pace>,
        pause: Arc<crate::pause::Pause>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(self.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            if let Err(e) = pause.refresh().await {
                warn!(error = %e, "could not read the incident switch; keeping the last view");
            }
            if let Err(e) = self.turn(gateway.as_ref(), &pace, pause.is_paused()).await {
                warn!(error = %e, "breaker pass failed; trying again next tick");
            }
        }
    }

    /// `paused`: the incident switch is on; what it parked stays parked.
    async fn turn(
        &self,
        gateway: &dyn Gateway,
        pace: &Pace,
        paused: bool,
    ) -> Result<(), StoreError> {
        self.refresh().await?;
        if self.is_open() {
            if self
                .store
                .claim_probe(&self.gateway, self.probe_every)
                .await?
            {
                pace.slot().await;
                let outcome = gateway.probe().await;
                crate::metrics::breaker_probe(&outcome);
                let open = self.observe(&Health::of_lookup(&outcome)).await;
                info!(gateway = %self.gateway, answered = !open, "breaker probe");
            }
            return Ok(());
        }
        if paused {
            return Ok(());
        }
        let woken = self
            .store
            .rewake_parked(&self.gateway, self.rewake_per_s, Duration::from_secs(1))
            .await?;
        if woken > 0 {
            crate::metrics::rewoken(woken);
            info!(woken, "re-woke parked attempts");
        }
        Ok(())
    }
}
