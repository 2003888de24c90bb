//! Cases every run replays before its random ones, on both backends:
//! chains of steps that reach a rare move of cobro's only by a long run of
//! luck (each one is a shrunk case that broke an invariant when that move's
//! rule was taken out). The random cases cover the doors at large; these
//! make sure the rarest holds are driven every time.

use super::steps::{Code, Key, Net, Step};

/// Each case's name (what it drives) and its steps.
pub fn cases() -> Vec<(&'static str, Vec<Step>)> {
    vec![
        (
            // With the send gate dropped, the retry was sent and the order
            // charged twice (invariant 1).
            "a business retry held by a late approval (order_held)",
            vec![
                Step::EnqueueHttp {
                    order: 0,
                    key: Key::New,
                },
                Step::Wake {
                    order: 0,
                    net: Net::Decline(Code::InsufficientFunds),
                },
                Step::TimePasses,
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
        ),
        (
            // With `key_guards_resend` taken out, the resend was made on a
            // key the gateway had forgotten (invariant 6).
            "a resend put off past the key's lifetime (key_expired_before_resend)",
            vec![
                Step::EnqueueHttp {
                    order: 0,
                    key: Key::New,
                },
                Step::Wake {
                    order: 0,
                    net: Net::Error503,
                },
                Step::TimePasses,
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
        ),
    ]
}
