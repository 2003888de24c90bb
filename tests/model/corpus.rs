//! Cases every run replays before its random ones, on both backends:
//! chains of steps that reach a rare move of cobro's only by a long run of
//! luck (each one is a shrunk case that broke an invariant when that move's
//! rule was taken out). The random cases cover the doors at large; these
//! make sure the rarest holds are driven every time.

use super::steps::{Code, Key, Net, Step};

/// Order 0 enqueued over HTTP, woken with the gateway behaving as `net`,
/// then time passes: where both cases begin.
fn enqueued_then(net: Net) -> Vec<Step> {
    vec![
        Step::EnqueueHttp {
            order: 0,
            key: Key::New,
        },
        Step::Wake { order: 0, net },
        Step::TimePasses,
    ]
}

/// Each case's name (what it drives) and its steps.
pub fn cases() -> Vec<(&'static str, Vec<Step>)> {
    vec![
        (
            // With the send gate dropped, the retry was sent and the order
            // charged twice (invariant 1).
            "a business retry held by a late approval (order_held)",
            [
                enqueued_then(Net::Decline(Code::InsufficientFunds)),
                vec![
                    Step::Wake {
                        order: 0,
                        net: Net::Clean,
                    },
                    Step::LateApproval { order: 0 },
                    Step::TimePasses,
                    Step::Wake {
                        order: 0,
                        net: Net::Clean,
                    },
                ],
            ]
            .concat(),
        ),
        (
            // With `key_guards_resend` taken out, the resend was made on a
            // key the gateway had forgotten (invariant 6).
            "a resend put off past the key's lifetime (key_expired_before_resend)",
            [
                enqueued_then(Net::Error503),
                vec![
                    Step::Wake {
                        order: 0,
                        net: Net::Throttled,
                    },
                    Step::DayPasses,
                    Step::Wake {
                        order: 0,
                        net: Net::Clean,
                    },
                ],
            ]
            .concat(),
        ),
    ]
}
