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

use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Args;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::backoff::parse_duration_arg as duration;
use crate::gateway::{ChargeOutcome, Evidence, Gateway, LookupOutcome};
use crate::store::{BreakerEvent, BreakerRow, Store, StoreError};

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

/// What one gateway call says about the gateway as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// A definite answer (approved, declined, not found): it is up.
    Answered,
    /// No answer: not reachable, timed out, reset, 5xx, unavailable, our
    /// key refused, or a redirect (never followed: every call would be
    /// redirected the same way). Carries the kind and detail for the
    /// breaker's record.
    Failed(String),
    /// Neither: it answered but refused for now (429) or said something
    /// we could not read; says nothing about an outage.
    Neutral,
}

impl Health {
    fn from_failure(e: &Evidence) -> Self {
        match e.error_kind.as_str() {
            "connect" | "timeout" | "connection_closed" | "http_5xx" | "unavailable"
            | "auth_failed" | "redirected" => {
                let mut what = e.error_kind.clone();
                if let Some(d) = &e.detail {
                    what.push_str(": ");
                    what.extend(d.chars().take(200));
                }
                Health::Failed(what)
            }
            _ => Health::Neutral,
        }
    }

    pub fn of_charge(o: &ChargeOutcome) -> Self {
        match o {
            ChargeOutcome::Approved { .. } | ChargeOutcome::Declined { .. } => Health::Answered,
            ChargeOutcome::Refused { .. } => Health::Neutral,
            ChargeOutcome::Unknown { evidence } | ChargeOutcome::Deferred { evidence, .. } => {
                Self::from_failure(evidence)
            }
        }
    }

    pub fn of_lookup(o: &LookupOutcome) -> Self {
        match o {
            LookupOutcome::Approved { .. }
            | LookupOutcome::Declined { .. }
            | LookupOutcome::NotFound { .. } => Health::Answered,
            LookupOutcome::Failed { evidence } | LookupOutcome::Deferred { evidence, .. } => {
                Self::from_failure(evidence)
            }
        }
    }
}

/// The breaker row after one more failed call at `now`: it opens on the
/// `threshold`-th failure in a row (0 = never). `answered_since`: the
/// recording process saw an answer after its last look at the row (an
/// answer it did not write, to keep the happy path free of writes), so the
/// failures recorded before are not "in a row" any more.
pub fn after_failure(
    row: &BreakerRow,
    now: DateTime<Utc>,
    threshold: u32,
    probe_every: Duration,
    what: &str,
    answered_since: bool,
) -> (BreakerRow, Option<BreakerEvent>) {
    let mut r = row.clone();
    if answered_since && !r.is_open() {
        r.failures = 0;
        r.failing_since = None;
    }
    r.failures = r.failures.saturating_add(1);
    r.failing_since.get_or_insert(now);
    r.last_failure = Some(what.to_owned());
    r.last_failure_at = Some(now);
    let opens = !r.is_open() && threshold > 0 && r.failures as u32 >= threshold;
    if !opens {
        return (r, None);
    }
    r.state = "open".into();
    r.opened_at = Some(now);
    r.closed_at = None;
    r.next_probe_at = Some(now + chrono::Duration::from_std(probe_every).unwrap_or_default());
    r.probes = 0;
    let since = r.failing_since.unwrap_or(now);
    let event = BreakerEvent {
        state: "open",
        cause: "calls_failed".into(),
        detail: Some(format!(
            "{} calls failed in a row since {}; last: {what}",
            r.failures,
            since.format("%Y-%m-%d %H:%M:%S UTC")
        )),
    };
    (r, Some(event))
}

/// The breaker row after the gateway answered at `now`: failures forgotten,
/// and closed if it was open (the paced re-wake may start).
pub fn after_answer(row: &BreakerRow, now: DateTime<Utc>) -> (BreakerRow, Option<BreakerEvent>) {
    let mut r = row.clone();
    r.failures = 0;
    r.failing_since = None;
    r.last_answer_at = Some(now);
    if !r.is_open() {
        return (r, None);
    }
    let down = r
        .opened_at
        .map(|at| (now - at).num_seconds())
        .unwrap_or_default();
    r.state = "closed".into();
    r.closed_at = Some(now);
    r.next_probe_at = None;
    r.next_rewake_at = None;
    let event = BreakerEvent {
        state: "closed",
        cause: "gateway_answered".into(),
        detail: Some(format!("open for {down} s, {} probes", r.probes)),
    };
    (r, Some(event))
}

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

/// The rate limit toward the gateway, shared by every process on the
/// database: each call first reserves a slot (one row per gateway, GCRA)
/// and waits for it. Off when no limit is set.
#[derive(Debug)]
pub struct Pace {
    store: Store,
    gateway: String,
    limit: Option<(Duration, u32)>,
}

impl Pace {
    pub fn new(store: Store, gateway: &str, args: &BreakerArgs) -> Self {
        Self {
            store,
            gateway: gateway.to_owned(),
            limit: args.pace(),
        }
    }

    /// No limit.
    pub fn off(store: Store) -> Self {
        Self {
            store,
            gateway: String::new(),
            limit: None,
        }
    }

    /// Whether calls are limited at all (with no limit, [`Pace::slot`]
    /// never waits).
    pub fn limits(&self) -> bool {
        self.limit.is_some()
    }

    /// Waits for this process's next slot toward the gateway. A database
    /// error waits one slot instead: the limit is kept roughly, never
    /// turned off by an error.
    pub async fn slot(&self) {
        let Some((interval, burst)) = self.limit else {
            return;
        };
        let wait = match self.store.pace_slot(&self.gateway, interval, burst).await {
            Ok(wait) => wait,
            Err(e) => {
                warn!(error = %e, "could not reserve a gateway slot; waiting one slot");
                interval
            }
        };
        if !wait.is_zero() {
            crate::metrics::paced(wait);
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::gateway::Deferral;

    fn at(s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, s)
            .single()
            .unwrap()
    }

    fn failed(kind: &str) -> Evidence {
        Evidence {
            call: "charge".into(),
            error_kind: kind.into(),
            ..Evidence::default()
        }
    }

    #[test]
    fn it_opens_on_the_threshold_th_failure_in_a_row_and_closes_on_an_answer() {
        let every = Duration::from_secs(5);
        let mut row = BreakerRow::new("gw");
        for n in 1..3 {
            let (next, event) = after_failure(&row, at(n), 3, every, "connect", false);
            assert!(!next.is_open() && event.is_none(), "{next:?}");
            row = next;
        }
        assert_eq!(row.failing_since, Some(at(1)));
        let (open, event) = after_failure(&row, at(3), 3, every, "timeout", false);
        assert!(open.is_open());
        assert_eq!(open.opened_at, Some(at(3)));
        assert_eq!(open.next_probe_at, Some(at(8)));
        let event = event.unwrap();
        assert_eq!(event.state, "open");
        assert!(event.detail.unwrap().contains("3 calls failed in a row"));
        // More failures while open: counted, no second opening.
        let (still, again) = after_failure(&open, at(4), 3, every, "timeout", true);
        assert!(still.is_open() && again.is_none());
        assert_eq!(still.opened_at, Some(at(3)));
        let (closed, event) = after_answer(&still, at(9));
        assert!(!closed.is_open());
        assert_eq!((closed.failures, closed.failing_since), (0, None));
        assert_eq!(closed.closed_at, Some(at(9)));
        assert_eq!(closed.next_probe_at, None);
        assert_eq!(event.unwrap().state, "closed");
    }

    #[test]
    fn an_answer_between_failures_starts_the_count_again_and_zero_never_opens() {
        let every = Duration::from_secs(5);
        let row = BreakerRow::new("gw");
        let (one, _) = after_failure(&row, at(1), 2, every, "connect", false);
        let (reset, event) = after_answer(&one, at(2));
        assert!(event.is_none(), "closed already: no event");
        let (again, _) = after_failure(&reset, at(3), 2, every, "connect", false);
        assert!(!again.is_open());
        assert_eq!(again.failures, 1);
        // An answer the recording process saw but did not write breaks
        // the run too.
        let (two, _) = after_failure(&one, at(4), 2, every, "connect", true);
        assert!(!two.is_open());
        assert_eq!((two.failures, two.failing_since), (1, Some(at(4))));
        let mut off = BreakerRow::new("gw");
        for n in 0..50 {
            off = after_failure(&off, at(n % 60), 0, every, "connect", false).0;
        }
        assert!(!off.is_open());
    }

    #[test]
    fn only_a_missing_answer_counts_as_a_failure() {
        let deferred = |kind: &str, why| ChargeOutcome::Deferred {
            why,
            retry_after: None,
            evidence: failed(kind),
        };
        for kind in [
            "connect",
            "timeout",
            "connection_closed",
            "http_5xx",
            "unavailable",
            "redirected",
        ] {
            let unknown = ChargeOutcome::Unknown {
                evidence: failed(kind),
            };
            assert!(
                matches!(Health::of_charge(&unknown), Health::Failed(_)),
                "{kind}"
            );
            let lookup = LookupOutcome::Failed {
                evidence: failed(kind),
            };
            assert!(
                matches!(Health::of_lookup(&lookup), Health::Failed(_)),
                "{kind}"
            );
        }
        assert!(matches!(
            Health::of_charge(&deferred("connect", Deferral::NotSent)),
            Health::Failed(_)
        ));
        assert_eq!(
            Health::of_charge(&deferred("throttled", Deferral::NotExecuted)),
            Health::Neutral
        );
        // Every call would be redirected the same way: the breaker opens.
        assert!(matches!(
            Health::of_charge(&deferred("redirected", Deferral::NotExecuted)),
            Health::Failed(_)
        ));
        for kind in ["http_4xx", "bad_body"] {
            let odd = ChargeOutcome::Unknown {
                evidence: failed(kind),
            };
            assert_eq!(Health::of_charge(&odd), Health::Neutral, "{kind}");
        }
        let found = LookupOutcome::NotFound {
            evidence: failed("not_found"),
        };
        assert_eq!(Health::of_lookup(&found), Health::Answered);
    }

    #[test]
    fn the_pace_is_off_by_default_and_bursts_a_tenth_of_a_second() {
        assert_eq!(BreakerArgs::default().pace(), None);
        let args = BreakerArgs {
            gateway_rps: 100,
            ..BreakerArgs::default()
        };
        assert_eq!(args.pace(), Some((Duration::from_millis(10), 10)));
        let slow = BreakerArgs {
            gateway_rps: 4,
            ..BreakerArgs::default()
        };
        assert_eq!(slow.pace(), Some((Duration::from_millis(250), 1)));
        let zero = BreakerArgs {
            breaker_rewake_per_s: 0,
            ..BreakerArgs::default()
        };
        assert!(zero.validate().is_err());
    }
}
