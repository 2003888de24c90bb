//! Cases every run replays before its random ones, on both backends:
//! chains of steps that reach a rare move of cobro's only by a long run of
//! luck (each one is a shrunk case that broke an invariant when that move's
//! rule was taken out). The random cases cover the doors at large; these
//! make sure the rarest holds are driven every time.

use cobro::store::CancelReason;

use super::steps::{Code, Key, Net, Part, Step};

/// Order `order` enqueued over HTTP, woken with the gateway behaving as
/// `net`, then time passes: where every case begins.
fn enqueued_then(order: u8, net: Net) -> Vec<Step> {
    vec![
        Step::EnqueueHttp {
            order,
            key: Key::New,
        },
        Step::Wake { order, net },
        Step::TimePasses,
    ]
}

/// Order 0 charged, then its full refund asked for over HTTP.
fn refund_asked() -> Vec<Step> {
    let mut steps = enqueued_then(0, Net::Clean);
    steps.push(Step::Refund {
        order: 0,
        part: Part::Full,
        http: true,
    });
    steps
}

/// Finance, hasty, declines order 0's attempt in doubt without looking.
const HASTY: Step = Step::Resolve {
    order: 0,
    check_now: false,
    hasty: true,
};

/// Finance decides order 0's attempt in doubt by the gateway's dashboard.
const DECIDES: Step = Step::Resolve {
    order: 0,
    check_now: false,
    hasty: false,
};

/// Each case's name (what it drives) and its steps.
pub fn cases() -> Vec<(&'static str, Vec<Step>)> {
    vec![
        (
            // With the send gate dropped, the retry was sent and the order
            // charged twice (invariant 1).
            "a business retry held by a late approval (order_held)",
            [
                enqueued_then(0, Net::Decline(Code::InsufficientFunds)),
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
                enqueued_then(0, Net::Error503),
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
        (
            // With finance's decline of a sent refund recorded at once, the
            // refund the gateway made was held RECHAZADO (invariant 2).
            "a hasty decline of a refund that was sent (decline_requested)",
            [
                refund_asked(),
                vec![
                    Step::Wake {
                        order: 0,
                        net: Net::LoseAnswerAndLookups,
                    },
                    HASTY,
                    Step::TimePasses,
                    Step::Wake {
                        order: 0,
                        net: Net::LoseAnswerAndLookups,
                    },
                    HASTY,
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
            // A refund lost on its way to the gateway, declined by finance
            // without looking and confirmed by the review janitor once the
            // gateway's processing time passed with no record; the gateway
            // then makes it anyway, and finance closes the case it opens.
            // Without the mark, the refund we hold declined was made
            // (invariant 2), and once the case is closed the order's totals
            // part (invariant 4).
            "a refund the gateway makes after its decline was confirmed (refund_made_after_decline)",
            [
                refund_asked(),
                vec![
                    Step::Wake {
                        order: 0,
                        net: Net::Down,
                    },
                    Step::TimePasses,
                    Step::Wake {
                        order: 0,
                        net: Net::Down,
                    },
                    HASTY,
                    Step::TimePasses,
                    Step::Wake {
                        order: 0,
                        net: Net::Clean,
                    },
                    Step::LateRefund { order: 0 },
                    Step::CloseCase { pick: 0 },
                ],
            ]
            .concat(),
        ),
        (
            // A refund the gateway approved fails there after it succeeded;
            // finance closes the case it opens. Without the mark, we still
            // count the refund as made, and once the case is closed the
            // order's totals part (invariant 4).
            "a refund that fails after it succeeded (refund_failed_after_success)",
            [
                refund_asked(),
                vec![
                    Step::Wake {
                        order: 0,
                        net: Net::Clean,
                    },
                    Step::RefundFails { order: 0 },
                    Step::CloseCase { pick: 0 },
                ],
            ]
            .concat(),
        ),
        (
            // With finance's decline of a sent charge recorded at once, the
            // charge was declined on finance's reading of a dashboard that
            // did not show it yet, and the gateway then charged it
            // (invariant 4).
            "a decline of a charge the gateway is still executing (finance_decline_requested)",
            [
                enqueued_then(0, Net::Late),
                vec![
                    DECIDES,
                    Step::Wake {
                        order: 0,
                        net: Net::Down,
                    },
                    DECIDES,
                    Step::Wake {
                        order: 0,
                        net: Net::Clean,
                    },
                ],
            ]
            .concat(),
        ),
        (
            // With a cancel allowed on an attempt PENDIENTE after a lookup
            // (the store's rule and the database's taken out), the cancel
            // settled it, a new key charged the order, and the first send
            // then executed: charged twice (invariant 1).
            "a cancel while a send executes late and its resend is put off (InFlight)",
            [
                enqueued_then(0, Net::Late),
                vec![
                    Step::Wake {
                        order: 0,
                        net: Net::Throttled,
                    },
                    Step::Cancel {
                        order: 0,
                        reason: CancelReason::CustomerRequest,
                    },
                    Step::EnqueueHttp {
                        order: 0,
                        key: Key::New,
                    },
                    Step::Wake {
                        order: 0,
                        net: Net::Clean,
                    },
                ],
            ]
            .concat(),
        ),
        (
            // Without the webhook's check of what it says against the
            // attempt its key names, order 1's charge was approved on
            // order 0's news (invariant 4).
            "news of order 0's charge under order 1's key (amount_mismatch)",
            [
                enqueued_then(0, Net::Clean),
                enqueued_then(1, Net::Error503),
                vec![Step::Webhook {
                    pick: 0,
                    replay: false,
                    crossed: true,
                }],
            ]
            .concat(),
        ),
    ]
}
