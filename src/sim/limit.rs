//! Load shedding: the token bucket behind `Faults::rate_limit_per_s` (429 above the rate,
//! across charges, refunds, their lookups and listings) and the answers that carry a
//! `Retry-After` header (that 429, and the 503 of `Faults::p_503_retry_after`).
//!
//! Invariant: a throttled request is answered before it is parsed, executed, recorded or
//! drawn for: the bucket is arithmetic on the time it is given and never touches the seeded
//! dice, so a rate limit changes which requests get through, never the faults of those that
//! do. `Retry-After` is always a whole number of seconds, at least 1.

use std::time::{Duration, Instant};

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header::RETRY_AFTER},
    response::{IntoResponse, Response},
};
use serde_json::json;

use super::server::{Inner, error};

/// A token bucket; it starts full.
#[derive(Debug, Default)]
pub(crate) struct Bucket {
    tokens: f64,
    /// When `tokens` was last brought up to date; `None` until first used (full).
    at: Option<Instant>,
}

impl Bucket {
    /// Takes one token at `now` from a bucket of `size` tokens refilled at `rate` per
    /// second. `Err` is how long until a token is there.
    pub(crate) fn take(&mut self, now: Instant, rate: f64, size: f64) -> Result<(), Duration> {
        let tokens = match self.at {
            None => size,
            Some(at) => {
                let refill = now.saturating_duration_since(at).as_secs_f64() * rate;
                (self.tokens + refill).min(size)
            }
        };
        self.at = Some(now);
        if tokens >= 1.0 {
            self.tokens = tokens - 1.0;
            Ok(())
        } else {
            self.tokens = tokens;
            Err(Duration::from_secs_f64((1.0 - tokens) / rate))
        }
    }
}

/// Whole seconds to announce in `Retry-After` for a wait: rounded up, at least 1.
fn whole_seconds(wait: Duration) -> u64 {
    (wait.as_secs_f64().ceil() as u64).max(1)
}

/// The rate limit for one request of the payment API arriving at `now`: `Some(seconds)` to
/// answer 429 with that `Retry-After` (counted in `stats.throttled`), `None` to let it in.
pub(crate) fn throttle(s: &mut Inner, now: Instant) -> Option<u64> {
    let (rate, size) = s.faults.rate_limit()?;
    let wait = s.bucket.take(now, rate, size).err()?;
    s.books.stats_mut().throttled += 1;
    Some(whole_seconds(wait))
}

/// 429 `{"error":"rate_limited"}` with `Retry-After`.
pub(crate) fn too_many_requests(retry_after_s: u64) -> Response {
    with_retry_after(
        error(StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
        retry_after_s,
    )
}

/// 503 `{"error":"unavailable"}` with `Retry-After`.
pub(crate) fn unavailable_for(retry_after_s: u64) -> Response {
    with_retry_after(
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "error": "unavailable" })),
        )
            .into_response(),
        retry_after_s,
    )
}

fn with_retry_after(mut response: Response, seconds: u64) -> Response {
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_lets_a_burst_through_then_the_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut b = Bucket::default();
        // (time since t0 in ms, expected: Ok or the wait in ms)
        let steps: [(u64, Result<(), u64>); 7] = [
            (0, Ok(())),
            (0, Ok(())),
            (0, Err(500)),
            (250, Err(250)),
            (500, Ok(())),
            (750, Err(250)),
            (10_000, Ok(())),
        ];
        for (at, expected) in steps {
            let got = b
                .take(t0 + ms(at), 2.0, 2.0)
                .map_err(|w| w.as_millis() as u64);
            assert_eq!(got, expected, "at {at} ms");
        }
        // Long quiet: back to a full bucket (2), not more.
        let later = t0 + ms(60_000);
        assert!(b.take(later, 2.0, 2.0).is_ok());
        assert!(b.take(later, 2.0, 2.0).is_ok());
        assert!(b.take(later, 2.0, 2.0).is_err());
    }

    #[test]
    fn retry_after_is_whole_seconds_at_least_one() {
        let cases = [(0, 1), (1, 1), (999, 1), (1000, 1), (1001, 2), (2500, 3)];
        for (ms, s) in cases {
            assert_eq!(whole_seconds(Duration::from_millis(ms)), s, "{ms} ms");
        }
    }
}
