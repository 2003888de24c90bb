//! Business retries: after a decline, whether and when the order gets a NEW
//! attempt with a NEW key.
//!
//! Invariant: pure functions of (decline code, attempt number, policy, rng):
//! a final decline is never retried, an order never gets more than
//! `max_attempts` attempts, and the delay comes from a jittered schedule
//! (the same [`CheckSchedule`] type as the unknown-outcome checks). Whether a
//! retry may actually be created is the database's call (no approved and no
//! live attempt for the order), not this module's.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::Rng;

use crate::backoff::{CheckSchedule, ScheduleError};
use crate::domain::CardCaps;
use crate::gateway::advice::{Advice, parse_stored};

/// Decline codes worth retrying days later, by default (money may arrive,
/// the issuer may come back). Everything else is final.
pub const DEFAULT_RETRYABLE: &str =
    "insufficient_funds,try_again_later,processing_error,issuer_unavailable,do_not_honor";

/// The business-retry settings, shared by `cobro-worker` and `cobro serve`
/// (a decline may arrive by the synchronous answer or by webhook).
#[derive(Debug, Clone, clap::Args)]
pub struct RetryArgs {
    /// Decline codes retried later with a new attempt; all others are final.
    #[arg(long, env = "COBRO_RETRYABLE_DECLINES", default_value = DEFAULT_RETRYABLE)]
    pub retryable_declines: String,
    /// Delays before the 2nd, 3rd, ... attempt (the last one repeats).
    #[arg(long, env = "COBRO_RETRY_SCHEDULE", default_value = "1d,3d,7d")]
    pub retry_schedule: String,
    /// Jitter of each retry delay, as a fraction of it.
    #[arg(long, env = "COBRO_RETRY_JITTER", default_value_t = 0.2)]
    pub retry_jitter: f64,
    /// Attempts per order, the first one included.
    #[arg(long, env = "COBRO_MAX_ATTEMPTS", default_value_t = 4)]
    pub max_attempts: u32,
    #[command(flatten)]
    pub caps: CardCapArgs,
    /// A card its network updated (account updater webhook) gets its
    /// scheduled business retry this soon, never earlier than the card
    /// network's advice allows, never later than scheduled.
    #[arg(long, env = "COBRO_CARD_UPDATED_RETRY_DELAY", default_value = "15m",
          value_parser = crate::backoff::parse_duration_arg)]
    pub card_updated_retry_delay: Duration,
}

/// How soon a retry of an updated card runs, unless configured.
pub const DEFAULT_CARD_UPDATED_RETRY_DELAY: Duration = Duration::from_secs(15 * 60);

/// The card networks' caps on business retries of one payment method,
/// across orders (the worker's retries and finance's manual ones). Each
/// network's caps apply to its own cards, by the brand the gateway
/// reported; a card of unknown brand gets every cap.
#[derive(Debug, Clone, clap::Args)]
pub struct CardCapArgs {
    /// Business retries of one payment method in a rolling 30 days, across
    /// orders (Visa allows 15); the next is refused. 0 = no cap.
    #[arg(long, env = "COBRO_RETRY_CARD_CAP", default_value_t = DEFAULT_CARD_CAP)]
    pub retry_card_cap: u32,
    /// Business retries of one payment method in a rolling 24 hours
    /// (Mastercard allows 10). 0 = no cap.
    #[arg(long, env = "COBRO_RETRY_MC_CAP_24H", default_value_t = DEFAULT_MC_CAP_24H)]
    pub retry_mc_cap_24h: u32,
    /// Business retries of one payment method in a rolling 30 days
    /// (Mastercard allows 35). 0 = no cap.
    #[arg(long, env = "COBRO_RETRY_MC_CAP_30D", default_value_t = DEFAULT_MC_CAP_30D)]
    pub retry_mc_cap_30d: u32,
}

impl Default for CardCapArgs {
    fn default() -> Self {
        Self {
            retry_card_cap: DEFAULT_CARD_CAP,
            retry_mc_cap_24h: DEFAULT_MC_CAP_24H,
            retry_mc_cap_30d: DEFAULT_MC_CAP_30D,
        }
    }
}

impl CardCapArgs {
    /// The caps as the store's rule takes them (0 = no cap).
    pub fn caps(&self) -> CardCaps {
        let cap = |c: u32| (c > 0).then_some(c);
        CardCaps {
            visa_30d: cap(self.retry_card_cap),
            mastercard_24h: cap(self.retry_mc_cap_24h),
            mastercard_30d: cap(self.retry_mc_cap_30d),
        }
    }
}

/// Visa's limit: at most 15 retries of one card in 30 days.
pub const DEFAULT_CARD_CAP: u32 = 15;
/// Mastercard's limits: at most 10 retries of one card in 24 hours and 35
/// in 30 days (Mastercard's excessive-retry rule, as processors document
/// it: see `docs/src/guides/business-retries.md`).
pub const DEFAULT_MC_CAP_24H: u32 = 10;
pub const DEFAULT_MC_CAP_30D: u32 = 35;

impl RetryArgs {
    pub fn policy(&self) -> Result<RetryPolicy, ScheduleError> {
        RetryPolicy::parse(
            &self.retryable_declines,
            &self.retry_schedule,
            self.retry_jitter,
            self.max_attempts,
        )
        .map(|p| {
            p.with_card_caps(self.caps.caps())
                .with_card_updated_delay(self.card_updated_retry_delay)
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    retryable: BTreeSet<String>,
    schedule: CheckSchedule,
    max_attempts: u32,
    card_caps: CardCaps,
    card_updated_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::parse(DEFAULT_RETRYABLE, "1d,3d,7d", 0.2, 4).expect("the default policy is valid")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryPlan {
    /// Create a new attempt after this delay.
    RetryIn(Duration),
    /// The decline code says retrying cannot help.
    Final,
    /// The order has had its `max_attempts`.
    Exhausted,
}

impl RetryPolicy {
    /// `codes`: comma-separated retryable decline codes; `schedule`: e.g.
    /// `"1d,3d,7d"`; `jitter`: fraction of each delay (0.2 = ±20 %).
    pub fn parse(
        codes: &str,
        schedule: &str,
        jitter: f64,
        max_attempts: u32,
    ) -> Result<Self, ScheduleError> {
        Ok(Self {
            retryable: codes
                .split(',')
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect(),
            schedule: CheckSchedule::parse(schedule, jitter)?,
            max_attempts: max_attempts.max(1),
            card_caps: CardCapArgs::default().caps(),
            card_updated_delay: DEFAULT_CARD_UPDATED_RETRY_DELAY,
        })
    }

    /// The card networks' caps on retries of one payment method.
    pub fn with_card_caps(mut self, caps: CardCaps) -> Self {
        self.card_caps = caps;
        self
    }

    /// How soon a scheduled retry of a card its network updated runs.
    pub fn with_card_updated_delay(mut self, delay: Duration) -> Self {
        self.card_updated_delay = delay;
        self
    }

    pub fn card_updated_delay(&self) -> Duration {
        self.card_updated_delay
    }

    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The card networks' caps (each `None` when there is none).
    pub fn card_caps(&self) -> CardCaps {
        self.card_caps
    }

    /// Whether a stored decline code may be retried: its gateway code is in
    /// the allow-list and no network advice forbids it
    /// ([`crate::gateway::advice`]).
    pub fn is_retryable(&self, code: &str) -> bool {
        let (base, advice) = parse_stored(code);
        advice != Advice::DoNotRetry && self.retryable.contains(base)
    }

    /// What follows a decline with `code` on attempt number `attempt`
    /// (1-based). A network's "retry after" pushes the delay out to at
    /// least that long.
    pub fn after_decline(&self, code: &str, attempt: u32, rng: &mut impl Rng) -> RetryPlan {
        if !self.is_retryable(code) {
            return RetryPlan::Final;
        }
        if attempt >= self.max_attempts {
            return RetryPlan::Exhausted;
        }
        // Attempt 1 waits the first delay, attempt 2 the second, ...; past
        // the schedule's end the last delay repeats.
        let index = (attempt - 1).min(self.schedule.max_checks() - 1);
        match (self.schedule.delay(index, rng), parse_stored(code).1) {
            (Some(d), Advice::RetryAfter(at_least)) => RetryPlan::RetryIn(d.max(at_least)),
            (Some(d), _) => RetryPlan::RetryIn(d),
            (None, _) => RetryPlan::Exhausted,
        }
    }

    /// When a declined attempt's order gets its next attempt, if ever:
    /// [`after_decline`](Self::after_decline) for a stored attempt number,
    /// with the process' random jitter.
    pub fn retry_in(&self, code: &str, attempt_number: i32) -> Option<Duration> {
        let attempt = u32::try_from(attempt_number.max(1)).unwrap_or(1);
        match self.after_decline(code, attempt, &mut rand::rng()) {
            RetryPlan::RetryIn(d) => Some(d),
            RetryPlan::Final | RetryPlan::Exhausted => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const DAY: f64 = 86_400.0;

    #[test]
    fn the_decision_table() {
        let p = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(9);
        let cases: [(&str, u32, Option<f64>, RetryPlan); 13] = [
            ("insufficient_funds", 1, Some(DAY), RetryPlan::Final),
            // The network's advice: never, or not before (the jittered
            // delay is pushed out to at least that long).
            (
                "insufficient_funds/do_not_try_again",
                1,
                None,
                RetryPlan::Final,
            ),
            (
                "do_not_honor/retry_after_192h",
                1,
                Some(8.0 * DAY),
                RetryPlan::Final,
            ),
            (
                "insufficient_funds/retry_after_1h",
                1,
                Some(DAY),
                RetryPlan::Final,
            ),
            ("card_declined/retry_after_24h", 1, None, RetryPlan::Final),
            ("insufficient_funds", 2, Some(3.0 * DAY), RetryPlan::Final),
            ("insufficient_funds", 3, Some(7.0 * DAY), RetryPlan::Final),
            ("insufficient_funds", 4, None, RetryPlan::Exhausted),
            ("try_again_later", 1, Some(DAY), RetryPlan::Final),
            ("card_declined", 1, None, RetryPlan::Final),
            ("stolen_card", 1, None, RetryPlan::Final),
            ("invalid_account", 2, None, RetryPlan::Final),
            ("", 1, None, RetryPlan::Final),
        ];
        for (code, attempt, nominal, otherwise) in cases {
            let got = p.after_decline(code, attempt, &mut rng);
            match (nominal, &got) {
                (Some(n), RetryPlan::RetryIn(d)) => {
                    let d = d.as_secs_f64();
                    // A network's "retry after" is a floor, not jittered.
                    let low = if code.contains("/retry_after_") && n > DAY {
                        n
                    } else {
                        n * 0.8
                    };
                    assert!(
                        (low..=n * 1.2).contains(&d),
                        "{code} #{attempt}: {d}s not within ±20% of {n}s"
                    );
                }
                (None, plan) => assert_eq!(plan, &otherwise, "{code} #{attempt}"),
                (Some(_), plan) => panic!("{code} #{attempt}: expected a retry, got {plan:?}"),
            }
        }
    }

    #[test]
    fn configuration_changes_the_answers_and_seeds_repeat() {
        let p = RetryPolicy::parse("card_declined", "10s", 0.5, 2).unwrap();
        let mut a = StdRng::seed_from_u64(1);
        let mut b = StdRng::seed_from_u64(1);
        assert_eq!(
            p.after_decline("card_declined", 1, &mut a),
            p.after_decline("card_declined", 1, &mut b)
        );
        assert_eq!(
            p.after_decline("insufficient_funds", 1, &mut a),
            RetryPlan::Final
        );
        assert_eq!(
            p.after_decline("card_declined", 2, &mut a),
            RetryPlan::Exhausted
        );
        assert!(RetryPolicy::parse("x", "nope", 0.1, 3).is_err());
    }
}
