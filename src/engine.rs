//! The charge handler: what a worker does when woken for an attempt.
//!
//! A thin shell around the pure parts: load (attempt + database clock) →
//! decide ([`crate::policy`]) → act (gateway call, no transaction open) →
//! record (compare-and-set through [`Store::apply`]). Invariant: the wake-up
//! job carries nothing but the attempt id and is never trusted; losing a race
//! is a normal no-op, so a duplicated wake-up or two workers on one attempt
//! cannot charge twice (the gateway only ever sees the attempt's own key, and
//! only the lease holder sends).

mod check;
mod retry;
mod review;
mod send;

use std::sync::Arc;
use std::time::Duration;

use tracing::{Instrument, debug, error, info, info_span, warn};
use uuid::Uuid;

use crate::backoff::CheckSchedule;
use crate::breaker::{Breaker, Health, Pace};
use crate::domain::IdempotencyKey;
use crate::gateway::{Gateway, LookupCall, LookupOutcome};
use crate::policy::{Action, NotFoundRule, Snapshot, decide, defer_delay};
use crate::retry::RetryPolicy;
use crate::state::Event;
use crate::store::{Applied, Attempt, Change, Store, StoreError};

pub use crate::domain::Wake;

/// How a worker treats attempts.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Unique per process (and per restart): the lease owner's name.
    pub worker_name: String,
    /// How long a worker may hold an attempt; must exceed the gateway's
    /// request timeout.
    pub lease_ttl: Duration,
    pub schedule: CheckSchedule,
    /// How long the gateway keeps idempotency keys (Stripe: 24 h). An attempt
    /// whose key is older is never re-sent.
    pub key_lifetime: Duration,
    /// Which declines get a new attempt, when, and how many.
    pub retry: RetryPolicy,
    /// How long to wait (±50 %) before sending or looking up again a request
    /// the gateway certainly did not execute and gave no `Retry-After` for.
    pub defer_backoff: Duration,
    /// When a lookup's "not found" allows a re-send with the same key.
    pub not_found: NotFoundRule,
    /// When an attempt in `EN_REVISION` is looked up again (the janitor).
    pub review: crate::janitor::ReviewSchedule,
}

pub struct Engine {
    store: Store,
    gateway: Arc<dyn Gateway>,
    cfg: EngineConfig,
    actor: String,
    /// The shared circuit breaker; none = calls always go.
    breaker: Option<Arc<Breaker>>,
    /// The shared rate limit; none = no limit.
    pace: Option<Arc<Pace>>,
    /// The incident switch; none = never paused.
    pause: Option<Arc<crate::pause::Pause>>,
    /// Failed wake-ups before quarantine.
    poison_after: u32,
}

/// `COBRO_POISON_AFTER`'s default.
pub const DEFAULT_POISON_AFTER: u32 = 5;

/// The longest a charge claimed in the wake-up fetch may wait for its
/// handler and still be sent on that claim. The claim's log row is when the
/// send starts, to within this; a lookup's "not found" is timed from it.
pub const CLAIM_FRESH: Duration = Duration::from_millis(500);

/// A wake-up should never need more steps than this (send, unknown, check,
/// resend, ...); the bound only stops a bug from spinning.
const MAX_STEPS: usize = 12;

/// The attempt as a step of [`Engine::process`] last wrote it, when the
/// next decision may be made on it without reading it back; `None` when
/// the step does not know (it lost a race, wrote nothing, or is rare
/// enough that a read costs nothing).
type Written = Option<Box<Attempt>>;

/// An attempt's row and the database's time it was read or written at.
pub type Seen = (Box<Attempt>, chrono::DateTime<chrono::Utc>);

/// A row just written, seen at the time of its write.
fn seen_at_write(written: Written) -> Option<Seen> {
    written.map(|row| {
        let at = row.updated_at;
        (row, at)
    })
}

impl Engine {
    pub fn new(store: Store, gateway: Arc<dyn Gateway>, cfg: EngineConfig) -> Self {
        let actor = format!("worker:{}", cfg.worker_name);
        Self {
            store,
            gateway,
            cfg,
            actor,
            breaker: None,
            pace: None,
            pause: None,
            poison_after: DEFAULT_POISON_AFTER,
        }
    }

    /// Failed wake-ups of one attempt before it is quarantined to finance
    /// (`COBRO_POISON_AFTER`).
    pub fn with_poison_after(mut self, after: u32) -> Self {
        self.poison_after = after.max(1);
        self
    }

    /// A wake-up of `id` failed with `error`, which is never the gateway's
    /// (a gateway's failure is an outcome the state machine records): unless
    /// the error is transient (the database busy or unreachable), counts it,
    /// and at the threshold quarantines the attempt to finance
    /// ([`Store::record_wake_failure`]).
    pub async fn wake_failed(&self, id: Uuid, error: &StoreError) {
        if error.is_transient() {
            warn!(attempt = %id, %error, "wake-up failed on a transient database error; apalis retries it");
            return;
        }
        match self
            .store
            .record_wake_failure(id, &error.to_string(), self.poison_after)
            .await
        {
            Ok(f) => match f.quarantined {
                Some(case) => {
                    crate::metrics::wakeup_failed(true);
                    error!(attempt = %id, failures = f.failures, case, %error,
                        "wake-up failed again: quarantined to finance, no longer woken until the case is closed");
                }
                None => {
                    crate::metrics::wakeup_failed(false);
                    error!(attempt = %id, failures = f.failures, %error, "wake-up failed; apalis retries it");
                }
            },
            Err(count) => {
                error!(attempt = %id, %error, counting = %count, "wake-up failed, and counting the failure failed too");
            }
        }
    }

    /// Sending new charges stops while the incident switch is on.
    pub fn with_pause(mut self, pause: Arc<crate::pause::Pause>) -> Self {
        self.pause = Some(pause);
        self
    }

    /// The incident switch holds `a` back: a charge (not a refund) while
    /// sending is paused.
    fn held_back(&self, a: &Attempt) -> bool {
        !a.is_refund() && self.pause.as_ref().is_some_and(|p| p.is_paused())
    }

    /// Calls go through the shared breaker and rate limit.
    pub fn with_guards(mut self, breaker: Arc<Breaker>, pace: Arc<Pace>) -> Self {
        self.breaker = Some(breaker);
        self.pace = Some(pace);
        self
    }

    /// The breaker is open: no call should go now.
    fn gateway_down(&self) -> bool {
        self.breaker.as_ref().is_some_and(|b| b.is_open())
    }

    /// Tells the breaker what a call said; whether it is open now.
    async fn observe(&self, health: Health) -> bool {
        match &self.breaker {
            Some(b) => b.observe(&health).await,
            None => false,
        }
    }

    /// Waits for a slot under the shared rate limit (before any lease is
    /// taken, so a wait never eats into one).
    async fn slot(&self) {
        if let Some(pace) = &self.pace {
            pace.slot().await;
        }
    }

    /// The gateway is unreachable: the attempt waits, parked, with its
    /// state and check count unchanged, until the breaker's paced re-wake.
    async fn park(
        &self,
        seen: &Attempt,
        cause: &str,
        evidence: Option<&crate::gateway::Evidence>,
    ) -> Result<(), StoreError> {
        let mut change = Change::new(None, cause, &self.actor);
        change.park = true;
        change.evidence = evidence;
        if let Applied::Moved(_) = self.store.apply(seen, &change).await? {
            crate::metrics::parked();
            debug!(cause, "gateway unreachable: parked");
        }
        Ok(())
    }

    /// Looks `held` (whose lease this worker holds) up by its key, as a
    /// charge or a refund, and tells the breaker what came back. `None`
    /// when the gateway is down as a whole: the lookup said nothing about
    /// the attempt, so it is not a check; the attempt was parked with
    /// `parked_cause`.
    async fn lookup_or_park(
        &self,
        held: &Attempt,
        parked_cause: &str,
        make_final: bool,
    ) -> Result<Option<LookupOutcome>, StoreError> {
        let mut call = lookup_call(&self.store, held).await?;
        call.make_final = make_final;
        let outcome = if held.is_refund() {
            self.gateway.lookup_refund(&call).await
        } else {
            self.gateway.lookup(&call).await
        };
        crate::metrics::lookup_answered(&outcome);
        let down = self.observe(Health::of_lookup(&outcome)).await;
        let no_answer = matches!(
            outcome,
            LookupOutcome::Failed { .. } | LookupOutcome::Deferred { .. }
        );
        if down && no_answer {
            self.park(held, parked_cause, Some(outcome.evidence()))
                .await?;
            return Ok(None);
        }
        Ok(Some(outcome))
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Handles one wake-up for `id`: acts until the attempt needs nothing
    /// more now.
    pub async fn process(&self, id: Uuid) -> Result<(), StoreError> {
        self.process_seen(id, None, None).await
    }

    /// [`Engine::process`], starting from `seen`: the attempt's row and the
    /// database's time when it was read (a wake-up fetched with its row),
    /// instead of loading it. `claimed`: the fetch claimed it for this
    /// worker ([`crate::store::ClaimPlan`]; `seen` is the row that claim wrote) in a
    /// transaction begun then, so it is sent first; unless the breaker
    /// opened or sending was paused since (it is given back unsent and
    /// parked, as a handler would park it), or it waited longer than
    /// [`CLAIM_FRESH`] for this handler (given back and claimed again, so
    /// the lease and the log's claim time are those of the send).
    pub async fn process_seen(
        &self,
        id: Uuid,
        seen: Option<Seen>,
        claimed: Option<std::time::Instant>,
    ) -> Result<(), StoreError> {
        let span = info_span!(
            "attempt",
            attempt = %id,
            order = tracing::field::Empty,
            key = tracing::field::Empty
        );
        async {
            // The row as this worker last saw or wrote it: the next
            // decision is made on it, with the database's time of that read
            // or write as "now" (never later than the real one, so nothing
            // is due early), instead of reading it back. After actions that
            // do not say what they wrote, it is loaded.
            let mut known = seen;
            if let Some(began) = claimed
                && let Some((held, _)) = known.take()
            {
                if self.gateway_down() {
                    return self
                        .give_back(&held, "claim_released_gateway_unreachable", true)
                        .await
                        .map(drop);
                }
                if self.held_back(&held) {
                    return self
                        .give_back(&held, "claim_released_sending_paused", true)
                        .await
                        .map(drop);
                }
                known = seen_at_write(if began.elapsed() > CLAIM_FRESH {
                    debug!(waited = ?began.elapsed(), "claimed in the fetch, but handled late: claiming again");
                    self.give_back(&held, "claim_released_late", false).await?
                } else {
                    self.send_claimed(held).await?
                });
            }
            for _ in 0..MAX_STEPS {
                let (attempt, now) = match known.take() {
                    Some((row, now)) => (*row, now),
                    None => self.store.load(id).await?,
                };
                let span = tracing::Span::current();
                span.record("order", attempt.order_id.as_str());
                span.record("key", tracing::field::display(attempt.idempotency_key));
                let action = decide(snapshot(&attempt), now);
                debug!(state = %attempt.state, ?action, "decided");
                match action {
                    Action::Send if !self.key_guards(&attempt, now) => {
                        return self.key_outlived(&attempt).await;
                    }
                    Action::Send | Action::Check | Action::Retry | Action::Review
                        if self.gateway_down() =>
                    {
                        return self
                            .park(&attempt, "parked_gateway_unreachable", None)
                            .await;
                    }
                    Action::Send | Action::Retry if self.held_back(&attempt) => {
                        return self.park(&attempt, "parked_sending_paused", None).await;
                    }
                    Action::Nothing => return Ok(()),
                    Action::WaitUntil(at) => {
                        let wait = (at - now).to_std().unwrap_or_default();
                        // SQLite's queue keeps whole seconds, so a wake-up
                        // may come up to a second early: wait that out.
                        if wait > Duration::from_millis(1100) {
                            return Ok(()); // its own wake-up (or the sweeper) comes then
                        }
                        tokio::time::sleep(wait).await;
                    }
                    Action::Send => {
                        known =
                            seen_at_write(self.send(&attempt, Event::Claim, "claim", None).await?);
                    }
                    Action::ExpireLease => {
                        known = seen_at_write(self.expire_lease(&attempt).await?)
                    }
                    Action::Check => known = seen_at_write(self.check(&attempt).await?),
                    Action::Retry => self.business_retry(&attempt).await?,
                    Action::Review => self.review(&attempt).await?,
                }
            }
            warn!("attempt still wants work after {MAX_STEPS} steps; leaving it to the sweeper");
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// When a declined attempt's order gets its next attempt: charges per
    /// the retry policy; a declined refund is final (the app decides).
    fn retry_after(&self, attempt: &Attempt, code: &str) -> Option<Duration> {
        if attempt.is_refund() {
            return None;
        }
        self.cfg.retry.retry_in(code, attempt.attempt_number)
    }

    /// The wait before the next check. Never `None`: past the schedule's end
    /// the last delay repeats, so a live attempt always has a due time (the
    /// lookup that follows decides whether finance takes over).
    fn next_check_in(&self, checks_done: i32) -> Option<Duration> {
        let last = self.cfg.schedule.max_checks().saturating_sub(1);
        let index = (checks_done.max(0) as u32).min(last);
        self.cfg.schedule.delay(index, &mut rand::rng())
    }

    /// How long before the lookup `held` is making the last send started
    /// (its claim, by the database's clock), `None` if it was never sent.
    /// Read only when it matters, a "not found" (from a gateway with key
    /// support only whether it was sent; the time does not matter there).
    async fn since_last_send(
        &self,
        held: &Attempt,
        outcome: &LookupOutcome,
    ) -> Result<Option<Duration>, StoreError> {
        let idempotent = self.cfg.not_found.gateway_idempotent;
        if !matches!(outcome, LookupOutcome::NotFound { .. }) || (idempotent && held.send_count > 0)
        {
            return Ok(Some(Duration::MAX));
        }
        let log = self.store.transitions(held.id).await?;
        let sent = log
            .iter()
            .rev()
            .find(|t| t.to_state == crate::state::State::EnProceso.as_str())
            .map(|t| t.at);
        // Never sent only when neither its log nor its count says it was.
        if sent.is_none() && held.send_count == 0 {
            return Ok(None);
        }
        if idempotent {
            return Ok(Some(Duration::MAX));
        }
        Ok(Some(
            sent.and_then(|at| (held.updated_at - at).to_std().ok())
                .unwrap_or_default(),
        ))
    }

    /// The wait before trying again a request that certainly did not run.
    fn defer_in(&self, retry_after: Option<Duration>) -> Duration {
        let factor = rand::Rng::random_range(&mut rand::rng(), 0.5..=1.5);
        defer_delay(retry_after, self.cfg.defer_backoff, factor)
    }

    async fn expire_lease(&self, seen: &Attempt) -> Result<Written, StoreError> {
        let mut change = Change::new(Some(Event::LeaseExpired), "lease_expired", &self.actor);
        change.act_in = self.next_check_in(seen.check_count);
        let written = self.store.apply(seen, &change).await?.written();
        if written.is_some() {
            info!(holder = ?seen.lease_owner, "lease expired: outcome unknown");
        }
        Ok(written)
    }
}

fn snapshot(a: &Attempt) -> Snapshot {
    Snapshot {
        state: a.state,
        next_action_at: a.next_action_at,
        lease_expires_at: a.lease_expires_at,
    }
}

/// What a lookup of `a` carries: its key, its recorded gateway object, and
/// for a refund the gateway's id of the charge it refunds (a duplicate's
/// own id when it refunds one).
pub async fn lookup_call(store: &Store, a: &Attempt) -> Result<LookupCall, StoreError> {
    let charge_id = match (a.refund_of, &a.refund_of_gateway) {
        (_, Some(duplicate)) => Some(duplicate.clone()),
        (Some(charge), None) => store.load(charge).await?.0.gateway_charge_id,
        (None, None) => None,
    };
    let last_sent = send::last_sent(store, a).await?;
    Ok(LookupCall {
        key: IdempotencyKey::from_uuid(a.idempotency_key),
        gateway_ref: a.gateway_ref.clone(),
        charge_id,
        since: Some(a.created_at),
        last_sent,
        make_final: false,
    })
}
