//! Fault injection for the gateway simulator: the `Faults` knobs (settable at start-up and
//! at run time) and the seeded `Dice` that decide every probabilistic fault.
//!
//! Invariant: every random decision the simulator makes comes from the single
//! `StdRng::seed_from_u64(seed)` owned by `Dice`, in request order, and a probability of zero
//! (or less) never fires and never consumes a draw, so a fault-free run never perturbs the
//! sequence.

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
    /// Added before handling every charge, refund and lookup request.
    pub latency_ms: u64,
    /// How long "held" requests wait (0 means `DEFAULT_HOLD_MS`).
    pub hold_ms: u64,
    /// Every charge, refund and lookup answers 503.
    pub outage: bool,
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

    /// Checks that every probability is a finite number in `[0, 1]` and that decline codes
    /// are non-empty strings.
    pub fn validate(&self) -> Result<(), InvalidFaults> {
        let probabilities = [
            ("p_response_lost", self.p_response_lost),
            ("p_timeout_after_charge", self.p_timeout_after_charge),
            ("p_request_lost", self.p_request_lost),
            ("p_5xx", self.p_5xx),
            ("p_lookup_fail", self.p_lookup_fail),
            ("p_decline", self.p_decline),
        ];
        for (field, p) in probabilities {
            check_probability(p).map_err(|message| InvalidFaults { field, message })?;
        }
        if self.decline_codes.iter().any(|c| c.trim().is_empty()) {
            return Err(InvalidFaults {
                field: "decline_codes",
                message: "decline codes must be non-empty strings".to_owned(),
            });
        }
        Ok(())
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
