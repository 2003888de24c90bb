//! The breaker's pure decisions and its shared row, table by table.

use chrono::{DateTime, TimeZone, Utc};

use super::*;
use crate::gateway::{ChargeOutcome, Deferral, Evidence, LookupOutcome};

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
