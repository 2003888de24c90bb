//! Unit tests of proxy mode's pure parts: the fault plan and its draws, and the settings
//! refused.

use super::*;

#[test]
fn plans_in_the_simulators_draw_order() {
    use AfterUpstream::{Hold, Lose, Relay};
    let all = |p: f64| Faults {
        p_request_lost: p,
        p_5xx: p,
        p_503_retry_after: p,
        p_response_lost: p,
        p_timeout_after_charge: p,
        p_lookup_fail: p,
        ..Faults::default()
    };
    // (class, faults, expected plan)
    let cases = [
        (Class::Executing, Faults::default(), Plan::Forward(Relay)),
        (Class::Read, Faults::default(), Plan::Forward(Relay)),
        (Class::Executing, all(1.0), Plan::LoseRequest),
        (Class::Read, all(1.0), Plan::LookupFailed),
        (
            Class::Executing,
            Faults {
                outage: true,
                ..all(1.0)
            },
            Plan::Outage,
        ),
        (
            Class::Executing,
            Faults {
                p_request_lost: 0.0,
                ..all(1.0)
            },
            Plan::Unavailable,
        ),
        (
            Class::Executing,
            Faults {
                p_503_retry_after: 1.0,
                retry_after_s: 4,
                ..Faults::default()
            },
            Plan::UnavailableFor(4),
        ),
        (
            Class::Executing,
            Faults {
                p_response_lost: 1.0,
                p_timeout_after_charge: 1.0,
                ..Faults::default()
            },
            Plan::Forward(Lose),
        ),
        (
            Class::Executing,
            Faults {
                p_timeout_after_charge: 1.0,
                p_lookup_fail: 1.0,
                ..Faults::default()
            },
            Plan::Forward(Hold),
        ),
    ];
    for (class, faults, expected) in cases {
        assert_eq!(
            decide(class, &faults, &mut Dice::new(1)),
            expected,
            "{class:?} {faults:?}"
        );
    }
}

#[test]
fn knobs_at_zero_draw_nothing_and_the_seed_decides() {
    let mut dice = Dice::new(9);
    for class in [Class::Executing, Class::Read] {
        decide(class, &Faults::default(), &mut dice);
    }
    let mut fresh = Dice::new(9);
    assert_eq!(dice.fire(0.5), fresh.fire(0.5));
    // One draw per executing request when only p_response_lost is set.
    let lossy = Faults {
        p_response_lost: 0.5,
        ..Faults::default()
    };
    let mut dice = Dice::new(9);
    let mut same = Dice::new(9);
    for _ in 0..64 {
        let lost =
            decide(Class::Executing, &lossy, &mut dice) == Plan::Forward(AfterUpstream::Lose);
        assert_eq!(lost, same.fire(0.5));
    }
}

#[test]
fn settings_the_upstream_decides_are_refused() {
    assert_eq!(check_config(&SimConfig::default()), Ok(()));
    assert_eq!(check_faults(&Faults::default()), Ok(()));
    let cfg = SimConfig {
        idempotent: false,
        faults: Faults {
            p_decline: 0.1,
            execution_ms: 5,
            ..Faults::default()
        },
        ..SimConfig::default()
    };
    let refused = check_config(&cfg);
    assert_eq!(
        refused,
        Err(
            "--upstream: --p-decline, --execution-ms, --no-idempotency do not apply in proxy \
             mode (the upstream decides); unset them"
                .to_owned()
        )
    );
    let faults = Faults {
        record_on_complete: true,
        ..Faults::default()
    };
    assert_eq!(
        check_faults(&faults).map_err(|e| e.field),
        Err("record_on_complete")
    );
}
