//! Fault injection for the gateway simulator: the `Faults` knobs (settable at start-up and
//! at run time) and the seeded `Dice` that decide every probabilistic fault.
//!
//! Invariant: every random decision the simulator makes comes from the single
//! `StdRng::seed_from_u64(seed)` owned by `Dice`, in request order, and a probability of zero
//! (or less) never fires and never consumes a draw, so a fault-free run never perturbs the
//! sequence. The knobs that are not probabilities (rate limit, refusal windows, execution
//! time, record-on-complete) draw nothing, so with them off the sequence is the one of a
//! simulator without them.

use std::time::Duration;

use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::{Deserialize, Serialize};

/// How long "held" requests wait when `Faults::hold_ms` is 0.
pub const DEFAULT_HOLD_MS: u64 = 30_000;

/// Decline code used when `Faults::decline_codes` is empty.
pub const DEFAULT_DECLINE_CODE: &str = "card_declined";

/// The fault-injection knobs. Probabilities are in `[0, 1]`; zero means "never".
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Faults {
    /// Charge (or refund) executed, then the TCP connection is dropped with no response.
    pub p_response_lost: f64,
    /// Charge (or refund) executed, reply held for `hold_ms` (the client times out first).
    pub p_timeout_after_charge: f64,
    /// Never executed; request held for `hold_ms`, then the connection is dropped.
    pub p_request_lost: f64,
    /// 503 before executing a charge or refund (nothing executed).
    pub p_5xx: f64,
    /// Lookups (of charges and refunds) answer 503.
    pub p_lookup_fail: f64,
    /// A charge is executed as a decline instead of an approval (refunds never are).
    pub p_decline: f64,
    /// Decline code, picked uniformly with the seeded rng; empty means `card_declined`.
    pub decline_codes: Vec<String>,
    /// The card network's advice given with every decline, as Mastercard's
    /// merchant advice code (`"03"` do not try again, `"24"`-`"30"` retry
    /// after 1 h-10 days); none when unset. Recorded with the charge, so a
    /// lookup answers the same.
    pub decline_network_advice: Option<String>,
    /// Added before handling every charge, refund and lookup request.
    pub latency_ms: u64,
    /// How long "held" requests wait (0 means `DEFAULT_HOLD_MS`).
    pub hold_ms: u64,
    /// Every charge, refund and lookup answers 503.
    pub outage: bool,
    /// Requests per second allowed across the payment API (charges, refunds, their lookups
    /// and listings; not `/control/*`, `/ledger`, `/health`), as a token bucket; above it
    /// 429 `{"error":"rate_limited"}` with `Retry-After`, before anything is executed or
    /// recorded. 0 means no limit.
    pub rate_limit_per_s: f64,
    /// How many requests the bucket lets through at once after a quiet spell (0 means the
    /// rate rounded up, at least 1).
    pub rate_limit_burst: u32,
    /// 503 `{"error":"unavailable"}` with `Retry-After: retry_after_s` before executing a
    /// charge or refund (nothing executed). Drawn right after `p_5xx`, whose 503 has no
    /// `Retry-After`.
    pub p_503_retry_after: f64,
    /// The `Retry-After` of `p_503_retry_after`'s answers, in whole seconds (0 means 1).
    pub retry_after_s: u64,
    /// Processing time of every charge or refund that executes (not replays), in ms: its
    /// reply (or dropped connection) comes this much later.
    pub execution_ms: u64,
    /// Record-on-complete: a charge or refund whose processing takes time (`execution_ms`,
    /// or a reply held by `p_timeout_after_charge`) is executed and recorded only at the end
    /// of it; until then a lookup answers 404 `not_found`, a resend with the same key
    /// executes again without idempotency and answers 409 `idempotency_key_in_use` with it.
    /// Off (the default): recorded on arrival, visible at once.
    pub record_on_complete: bool,
    /// Refusal windows (nothing listening on the port: clients get "connection refused"):
    /// the first starts this many ms after these faults took effect (start-up, or the
    /// `PUT /control/faults` that changed the refusal schedule; with 0 that PUT's own reply
    /// may be cut: `POST /control/refuse` opens a window at once and answers).
    pub refuse_at_ms: u64,
    /// How long each refusal window lasts, in ms; 0 means no scheduled windows.
    pub refuse_for_ms: u64,
    /// A new window starts this many ms after the previous one started (more than
    /// `refuse_for_ms`); 0 means a single window.
    pub refuse_every_ms: u64,
    /// Settlement (`GET /v1/balance_transactions`): the fee of every charge, in hundredths
    /// of a percent of its gross (290 = 2.9 %), rounded half up...
    pub settle_fee_bps: u32,
    /// ...plus this many minor units.
    pub settle_fee_fixed_minor: i64,
    /// Every `unsettled_every`-th approved charge (by sequence number) is never settled: no
    /// balance transaction. 0 means none.
    pub unsettled_every: u64,
    /// Every `fee_off_every`-th approved charge is settled with `fee_off_minor` more fee
    /// than the rule above. 0 means none.
    pub fee_off_every: u64,
    pub fee_off_minor: i64,
    /// Each payout (`POST /control/payout`) pays this much more (or less) than the net of
    /// the lines it carries.
    pub payout_off_minor: i64,
}

/// When the simulator refuses connections, as offsets from when the faults took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RefusalSchedule {
    pub(crate) at: Duration,
    pub(crate) length: Duration,
    /// `None`: a single window.
    pub(crate) every: Option<Duration>,
}

/// One scheduled refusal window: the `index`-th, from `start` to `end` (offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) index: u64,
    pub(crate) start: Duration,
    pub(crate) end: Duration,
}

impl RefusalSchedule {
    fn window(&self, index: u64) -> Window {
        let every = self.every.unwrap_or_default();
        let start = self.at + every.saturating_mul(u32::try_from(index).unwrap_or(u32::MAX));
        Window {
            index,
            start,
            end: start + self.length,
        }
    }

    /// The first window, after the `done`-th if given, that has not ended at `elapsed`:
    /// the current one when `elapsed` falls in a window. `None` when no window is left.
    pub(crate) fn next(&self, elapsed: Duration, done: Option<u64>) -> Option<Window> {
        let first_open = match self.every {
            Some(every) if elapsed > self.at => {
                let k = ((elapsed - self.at).as_nanos() / every.as_nanos()) as u64;
                if self.window(k).end > elapsed {
                    k
                } else {
                    k + 1
                }
            }
            _ => 0,
        };
        let index = first_open.max(done.map_or(0, |d| d + 1));
        let window = self.window(index);
        (self.every.is_some() || index == 0)
            .then_some(window)
            .filter(|w| w.end > elapsed)
    }
}

/// A rejected `Faults` value: which field and why.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidFaults {
    pub field: &'static str,
    pub message: String,
}

impl Faults {
    /// The delay applied to held requests.
    pub fn hold(&self) -> Duration {
        let ms = if self.hold_ms == 0 {
            DEFAULT_HOLD_MS
        } else {
            self.hold_ms
        };
        Duration::from_millis(ms)
    }

    /// The latency added before handling a charge, refund or lookup, if any.
    pub fn latency(&self) -> Option<Duration> {
        (self.latency_ms > 0).then(|| Duration::from_millis(self.latency_ms))
    }

    /// The processing time of an executed charge or refund.
    pub fn execution(&self) -> Duration {
        Duration::from_millis(self.execution_ms)
    }

    /// The `Retry-After` of an injected 503, in whole seconds (at least 1).
    pub fn retry_after(&self) -> u64 {
        self.retry_after_s.max(1)
    }

    /// The token bucket's `(rate per second, size)`, or `None` without a rate limit.
    pub fn rate_limit(&self) -> Option<(f64, f64)> {
        (self.rate_limit_per_s > 0.0).then(|| {
            let burst = match self.rate_limit_burst {
                0 => self.rate_limit_per_s.ceil().max(1.0),
                n => f64::from(n),
            };
            (self.rate_limit_per_s, burst)
        })
    }

    /// The scheduled refusal windows, if any.
    pub(crate) fn refusal_schedule(&self) -> Option<RefusalSchedule> {
        (self.refuse_for_ms > 0).then(|| RefusalSchedule {
            at: Duration::from_millis(self.refuse_at_ms),
            length: Duration::from_millis(self.refuse_for_ms),
            every: (self.refuse_every_ms > 0).then(|| Duration::from_millis(self.refuse_every_ms)),
        })
    }

    /// Checks that every probability is a finite number in `[0, 1]`, that decline codes
    /// are non-empty strings, that the rate limit is a finite number >= 0 and that
    /// repeated refusal windows leave time to listen in between.
    pub fn validate(&self) -> Result<(), InvalidFaults> {
        let probabilities = [
            ("p_response_lost", self.p_response_lost),
            ("p_timeout_after_charge", self.p_timeout_after_charge),
            ("p_request_lost", self.p_request_lost),
            ("p_5xx", self.p_5xx),
            ("p_lookup_fail", self.p_lookup_fail),
            ("p_decline", self.p_decline),
            ("p_503_retry_after", self.p_503_retry_after),
        ];
        for (field, p) in probabilities {
            check_probability(p).map_err(|message| InvalidFaults { field, message })?;
        }
        if let Some(mac) = &self.decline_network_advice
            && (mac.len() != 2 || !mac.chars().all(|c| c.is_ascii_alphanumeric()))
        {
            return Err(InvalidFaults {
                field: "decline_network_advice",
                message: format!(
                    "a merchant advice code is two characters like \"03\", got {mac:?}"
                ),
            });
        }
        if self.settle_fee_bps > 10_000 {
            return Err(InvalidFaults {
                field: "settle_fee_bps",
                message: "settle_fee_bps must be 0-10000 (0-100 %)".to_owned(),
            });
        }
        if self.settle_fee_fixed_minor < 0 {
            return Err(InvalidFaults {
                field: "settle_fee_fixed_minor",
                message: "settle_fee_fixed_minor must be >= 0".to_owned(),
            });
        }
        if self.decline_codes.iter().any(|c| c.trim().is_empty()) {
            return Err(InvalidFaults {
                field: "decline_codes",
                message: "decline codes must be non-empty strings".to_owned(),
            });
        }
        check_rate(self.rate_limit_per_s).map_err(|message| InvalidFaults {
            field: "rate_limit_per_s",
            message,
        })?;
        if self.refuse_every_ms > 0 && self.refuse_every_ms <= self.refuse_for_ms {
            return Err(InvalidFaults {
                field: "refuse_every_ms",
                message: format!(
                    "refusal windows must start more than refuse_for_ms ({}) apart, got {}",
                    self.refuse_for_ms, self.refuse_every_ms
                ),
            });
        }
        Ok(())
    }
}

/// Checks that `rate` is a finite number of requests per second >= 0 (0: no limit).
pub fn check_rate(rate: f64) -> Result<(), String> {
    if rate.is_finite() && rate >= 0.0 {
        Ok(())
    } else {
        Err(format!("rate must be a finite number >= 0, got {rate}"))
    }
}

/// Checks that `p` is a finite probability in `[0, 1]`.
pub fn check_probability(p: f64) -> Result<(), String> {
    if p.is_finite() && (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(format!("probability must be within [0, 1], got {p}"))
    }
}

/// The simulator's only source of randomness.
#[derive(Debug)]
pub(crate) struct Dice {
    rng: StdRng,
}

impl Dice {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Dice for one charge request of one order: a pure function of the seed,
    /// the order id and how many requests that order made before (FNV-1a,
    /// stable across runs and platforms).
    pub(crate) fn for_order(seed: u64, order_id: &str, n: u64) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in seed
            .to_le_bytes()
            .iter()
            .chain(order_id.as_bytes())
            .chain(&n.to_le_bytes())
        {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Self::new(h)
    }

    /// Decides a fault with probability `p`. Does not touch the rng when `p <= 0`.
    pub(crate) fn fire(&mut self, p: f64) -> bool {
        if p <= 0.0 || p.is_nan() {
            return false;
        }
        self.rng.random::<f64>() < p
    }

    /// Picks a decline code uniformly from `codes` (no draw when there is no choice to make).
    pub(crate) fn decline_code(&mut self, codes: &[String]) -> String {
        match codes {
            [] => DEFAULT_DECLINE_CODE.to_owned(),
            [only] => only.clone(),
            many => many[self.rng.random_range(0..many.len())].clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_probability_never_fires_nor_consumes() {
        let mut a = Dice::new(7);
        let mut b = Dice::new(7);
        for _ in 0..100 {
            assert!(!a.fire(0.0));
        }
        let seq_a: Vec<bool> = (0..50).map(|_| a.fire(0.5)).collect();
        let seq_b: Vec<bool> = (0..50).map(|_| b.fire(0.5)).collect();
        assert_eq!(seq_a, seq_b);
        assert!((0..50).all(|_| a.fire(1.0)));
    }

    #[test]
    fn decline_codes_default_and_pick() {
        let mut d = Dice::new(1);
        assert_eq!(d.decline_code(&[]), DEFAULT_DECLINE_CODE);
        let codes = vec!["a".to_owned(), "b".to_owned()];
        let picked: Vec<String> = (0..64).map(|_| d.decline_code(&codes)).collect();
        assert!(picked.iter().any(|c| c == "a") && picked.iter().any(|c| c == "b"));
    }

    #[test]
    fn validation_and_hold_default() {
        let mut f = Faults::default();
        assert!(f.validate().is_ok());
        assert_eq!(f.hold(), Duration::from_millis(DEFAULT_HOLD_MS));
        assert_eq!(f.latency(), None);
        f.p_5xx = 1.5;
        assert_eq!(f.validate().map_err(|e| e.field), Err("p_5xx"));
        f.p_5xx = f64::NAN;
        assert!(f.validate().is_err());
        f.p_5xx = 0.0;
        f.decline_codes = vec![" ".to_owned()];
        assert_eq!(f.validate().map_err(|e| e.field), Err("decline_codes"));
    }

    #[test]
    fn new_knobs_validate_and_default() {
        let f = Faults::default();
        assert_eq!((f.rate_limit(), f.retry_after()), (None, 1));
        assert_eq!(f.refusal_schedule(), None);
        let f = Faults {
            rate_limit_per_s: 2.5,
            ..Faults::default()
        };
        assert_eq!(f.rate_limit(), Some((2.5, 3.0)));
        let f = Faults {
            rate_limit_per_s: 0.5,
            ..Faults::default()
        };
        assert_eq!(f.rate_limit(), Some((0.5, 1.0)));
        let f = Faults {
            rate_limit_per_s: 10.0,
            rate_limit_burst: 4,
            retry_after_s: 7,
            ..Faults::default()
        };
        assert_eq!((f.rate_limit(), f.retry_after()), (Some((10.0, 4.0)), 7));
        let bad = [
            (
                Faults {
                    rate_limit_per_s: -1.0,
                    ..Faults::default()
                },
                "rate_limit_per_s",
            ),
            (
                Faults {
                    rate_limit_per_s: f64::INFINITY,
                    ..Faults::default()
                },
                "rate_limit_per_s",
            ),
            (
                Faults {
                    p_503_retry_after: 1.1,
                    ..Faults::default()
                },
                "p_503_retry_after",
            ),
            (
                Faults {
                    refuse_for_ms: 1000,
                    refuse_every_ms: 1000,
                    ..Faults::default()
                },
                "refuse_every_ms",
            ),
        ];
        for (f, field) in bad {
            assert_eq!(f.validate().map_err(|e| e.field), Err(field));
        }
    }

    #[test]
    fn refusal_windows_in_order() {
        let ms = Duration::from_millis;
        let w = |index, start, end| {
            Some(Window {
                index,
                start: ms(start),
                end: ms(end),
            })
        };
        let once = RefusalSchedule {
            at: ms(100),
            length: ms(50),
            every: None,
        };
        let repeated = RefusalSchedule {
            every: Some(ms(200)),
            ..once
        };
        // (schedule, elapsed ms, last window started, expected)
        let cases = [
            (once, 0, None, w(0, 100, 150)),
            (once, 120, None, w(0, 100, 150)),
            (once, 120, Some(0), None),
            (once, 150, None, None),
            (repeated, 0, None, w(0, 100, 150)),
            (repeated, 149, None, w(0, 100, 150)),
            (repeated, 149, Some(0), w(1, 300, 350)),
            (repeated, 150, None, w(1, 300, 350)),
            (repeated, 320, None, w(1, 300, 350)),
            (repeated, 320, Some(1), w(2, 500, 550)),
            (repeated, 1_000_000, None, w(5000, 1_000_100, 1_000_150)),
        ];
        for (schedule, elapsed, done, expected) in cases {
            assert_eq!(
                schedule.next(ms(elapsed), done),
                expected,
                "{schedule:?} at {elapsed} after {done:?}"
            );
        }
        let f = Faults {
            refuse_at_ms: 100,
            refuse_for_ms: 50,
            refuse_every_ms: 200,
            ..Faults::default()
        };
        assert_eq!(f.refusal_schedule(), Some(repeated));
    }

    #[test]
    fn faults_deserialize_with_defaults() {
        let f: Result<Faults, _> = serde_json::from_str(r#"{"p_decline":0.25,"hold_ms":10}"#);
        let f = f.map_err(|e| e.to_string());
        assert_eq!(
            f,
            Ok(Faults {
                p_decline: 0.25,
                hold_ms: 10,
                ..Faults::default()
            })
        );
    }
}
