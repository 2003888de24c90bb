//! The check schedule for attempts in `DESCONOCIDO`: nominal delays 2, 4, 8,
//! 16, 32 s, each jittered.
//!
//! Invariant: [`CheckSchedule::delay`] is a pure function of the check number
//! and the random draw; the caller passes the `Rng`, so a seeded rng gives a
//! reproducible schedule. Every jittered delay lies in
//! `[nominal * (1 - jitter), nominal * (1 + jitter)]`; with the default
//! jitter of 0.5 that is ±50 % of nominal. The number of checks is the
//! number of delays: after the last one fails the attempt goes to finance.

use std::time::Duration;

use rand::Rng;

#[derive(Debug, Clone, PartialEq)]
pub struct CheckSchedule {
    delays: Vec<Duration>,
    jitter: f64,
}

impl Default for CheckSchedule {
    fn default() -> Self {
        Self::new([2, 4, 8, 16, 32].map(Duration::from_secs).to_vec(), 0.5)
            .expect("the default schedule is valid")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("the check schedule needs at least one delay")]
    Empty,
    #[error("the check schedule's jitter must be within 0.0..=0.9, got {0}")]
    Jitter(String),
    #[error("invalid check delay {0:?}: use e.g. \"2s\", \"500ms\"")]
    Delay(String),
}

impl CheckSchedule {
    pub fn new(delays: Vec<Duration>, jitter: f64) -> Result<Self, ScheduleError> {
        if delays.is_empty() {
            return Err(ScheduleError::Empty);
        }
        if !(0.0..=0.9).contains(&jitter) {
            return Err(ScheduleError::Jitter(jitter.to_string()));
        }
        Ok(Self { delays, jitter })
    }

    /// Parses `"2s,4s,8s,16s,32s"` (units: `ms` or `s`).
    pub fn parse(list: &str, jitter: f64) -> Result<Self, ScheduleError> {
        let delays = list
            .split(',')
            .map(|d| parse_duration(d.trim()).ok_or_else(|| ScheduleError::Delay(d.to_owned())))
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(delays, jitter)
    }

    /// Same nominal shape, every delay multiplied by `factor` (tests scale
    /// the schedule down this way instead of checking less).
    pub fn scaled(&self, factor: f64) -> Self {
        Self {
            delays: self.delays.iter().map(|d| d.mul_f64(factor)).collect(),
            jitter: self.jitter,
        }
    }

    /// How many checks an attempt gets before it goes to `EN_REVISION`.
    pub fn max_checks(&self) -> u32 {
        self.delays.len() as u32
    }

    pub fn nominal(&self, checks_done: u32) -> Option<Duration> {
        self.delays.get(checks_done as usize).copied()
    }

    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The wait before check number `checks_done + 1`; `None` once every
    /// check has been spent.
    pub fn delay(&self, checks_done: u32, rng: &mut impl Rng) -> Option<Duration> {
        let nominal = self.nominal(checks_done)?;
        if self.jitter == 0.0 {
            return Some(nominal);
        }
        let factor = rng.random_range((1.0 - self.jitter)..=(1.0 + self.jitter));
        Some(nominal.mul_f64(factor))
    }
}

/// [`parse_duration`] for command-line parsers: the error names the forms.
pub fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration (use e.g. 500ms, 2s, 5m, 1h, 2d)"))
}

/// `"250ms"`, `"2s"`, `"1.5s"`, `"5m"`, `"24h"`, `"3d"`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let (num, unit) = s
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| s.split_at(i))?;
    let n: f64 = num.trim().parse().ok()?;
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn default_schedule_is_2_4_8_16_32_within_half_either_way() {
        let s = CheckSchedule::default();
        assert_eq!(s.max_checks(), 5);
        let table = [(0, 2.0), (1, 4.0), (2, 8.0), (3, 16.0), (4, 32.0)];
        for seed in 0..200 {
            let mut rng = StdRng::seed_from_u64(seed);
            for (check, nominal) in table {
                let d = s.delay(check, &mut rng).unwrap().as_secs_f64();
                assert!(
                    (nominal * 0.5..=nominal * 1.5).contains(&d),
                    "seed {seed} check {check}: {d}s not within ±50% of {nominal}s"
                );
            }
            assert_eq!(s.delay(5, &mut rng), None, "a sixth check does not exist");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let s = CheckSchedule::default();
        let run = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..5)
                .map(|i| s.delay(i, &mut rng).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn jitter_actually_spreads_the_delays() {
        let s = CheckSchedule::default();
        let mut rng = StdRng::seed_from_u64(1);
        let draws: Vec<f64> = (0..100)
            .map(|_| s.delay(0, &mut rng).unwrap().as_secs_f64())
            .collect();
        let (lo, hi) = draws
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), d| (lo.min(*d), hi.max(*d)));
        assert!(lo < 1.5 && hi > 2.5, "draws span {lo}..{hi}");
    }

    #[test]
    fn zero_jitter_and_scaling() {
        let s = CheckSchedule::parse("2s,4s", 0.0).unwrap().scaled(0.1);
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(s.delay(0, &mut rng), Some(Duration::from_millis(200)));
        assert_eq!(s.delay(1, &mut rng), Some(Duration::from_millis(400)));
        assert_eq!(s.max_checks(), 2);
    }

    #[test]
    fn parse_rejects_garbage() {
        assert_eq!(
            CheckSchedule::parse("", 0.5),
            Err(ScheduleError::Delay("".into()))
        );
        assert!(CheckSchedule::parse("2s,x", 0.5).is_err());
        assert!(CheckSchedule::parse("2s", 1.5).is_err());
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("24h"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("-1s"), None);
    }
}
