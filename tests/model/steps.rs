//! The model's steps: one thing a door of cobro (or the gateway, or time)
//! does, with plausible arguments, and the seeded generator that picks them.
//!
//! Invariant: a step names orders and attempts only by small indexes
//! (`order`, `pick`) that are resolved against what exists when it runs,
//! so any subsequence of a case is still a case (what shrinking needs). A
//! step that acts on an attempt of its order acts on the next order's when
//! its own has none that fits; one that finds nothing anywhere is a
//! recorded no-op. The generator is a pure function of its seed.

use cobro::store::CancelReason;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Orders per case: few, so that steps collide on the same orders.
pub const ORDERS: u8 = 3;

/// How long a [`Net::Late`] request takes to execute: longer than the
/// worker's timeout and the next few steps, so a lookup and a resend can
/// come before it.
pub const LATE: std::time::Duration = std::time::Duration::from_millis(1_500);

/// The idempotency key a create request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A key never used before.
    New,
    /// The `n`-th (mod how many) key already used for this order: a replay.
    Replay(u8),
}

/// How the gateway behaves during a worker's wake-up (set on the simulator
/// before it, cleared after it). Every fault has probability 1, so a step
/// does the same thing each time it is replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    Clean,
    /// Every charge is declined with this code.
    Decline(Code),
    /// Executed, then the connection is dropped with no answer.
    LoseAnswer,
    /// Executed, answer lost, and every lookup answers 503: the checks run
    /// out and the attempt goes to finance.
    LoseAnswerAndLookups,
    /// Executed, answer held past the worker's timeout.
    Timeout,
    /// The gateway still working when the worker's timeout passes: the
    /// charge (or refund) executes, and is recorded, only when its held
    /// answer ends, [`LATE`] after it arrived; until then a lookup finds
    /// nothing and a resend with its key is refused as in use.
    Late,
    /// 503 before executing (nothing charged): unknown, then looked up.
    Error503,
    /// Charges and refunds answer 503 with `Retry-After` before executing
    /// (nothing charged, certainly): sent again later with the same key;
    /// lookups answer.
    Throttled,
    /// Every call answers 503, lookups too.
    Down,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Retryable: a business retry is scheduled.
    InsufficientFunds,
    /// Final.
    CardDeclined,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InsufficientFunds => "insufficient_funds",
            Code::CardDeclined => "card_declined",
        }
    }
}

/// How much of what is left of a charge a refund asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The whole captured amount (refused if anything was refunded already).
    Full,
    /// Half of the captured amount.
    Half,
    /// One cent.
    Cent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The app: `POST /charges` with an `Idempotency-Key`.
    EnqueueHttp { order: u8, key: Key },
    /// The app, in its own transaction: `SELECT * FROM cobro.enqueue_charge(…)`
    /// on PostgreSQL; the Rust store API (`enqueue_charge_sqlite`) on SQLite.
    EnqueueSql { order: u8, key: Key },
    /// A worker: one wake-up for every attempt of the order that has work.
    Wake { order: u8, net: Net },
    /// A worker: one wake-up for every attempt of every order that has work.
    RunDue { net: Net },
    /// A worker takes the lease of the order's `PENDIENTE` charge and
    /// vanishes, after sending it to the gateway (`sent`) or before.
    Crash { order: u8, sent: bool },
    /// Time passes: every scheduled check, business retry and review is
    /// due, and a vanished worker's lease has run out.
    TimePasses,
    /// More than a day passes (as [`Step::TimePasses`]), and every key made
    /// so far is older than the gateway keeps keys.
    DayPasses,
    /// The gateway delivers (again) the webhook of the `pick`-th entry of
    /// its ledger, charges then refunds, signed: under the delivery id it
    /// used before for that entry (`replay`) or under a new one. A refund's
    /// news is `charge.succeeded` / `charge.failed` under the refund's own
    /// key, with the refund's id (what cobro's event format acts on).
    /// `crossed`: the news of that entry under the key of an attempt of
    /// another order (another amount), as a gateway's bug or a leaked
    /// signing secret would send it: it must move nothing.
    Webhook {
        pick: u8,
        replay: bool,
        crossed: bool,
    },
    /// The gateway approves, late, the charge it had declined under the key
    /// of the order's latest attempt (or of the one before a business retry
    /// not yet sent, which cobro must then hold), and says so by webhook
    /// (`charge.failed` then `charge.succeeded` for the same key).
    LateApproval { order: u8 },
    /// The gateway makes, late, a refund it showed nothing of when cobro
    /// took finance's decline of it as confirmed (past the longest
    /// processing time the gateway promises, so a broken promise): under
    /// the key of a refund of the order held `RECHAZADO` that was sent and
    /// of which the ledger shows nothing, when what is left of its charge
    /// at the gateway covers it; and says so by webhook
    /// (`charge.succeeded` under the refund's key, with the refund's id).
    LateRefund { order: u8 },
    /// A refund of the order that the gateway approved fails there after it
    /// succeeded (the card's bank returned the money), and the gateway says
    /// so by webhook (`charge.failed` under the refund's key, with its id):
    /// a refund of the order's own charge, one whose failure leaves no
    /// second charge of the order standing at the gateway.
    RefundFails { order: u8 },
    /// Finance decides an attempt of the order in `DESCONOCIDO` or
    /// `EN_REVISION` by what the gateway's dashboard (its ledger) shows, or
    /// asks for a fresh lookup (`check_now`); or, `hasty`, declines it
    /// without looking (a charge or refund that was sent must then be
    /// declined only on the gateway's word).
    Resolve {
        order: u8,
        check_now: bool,
        hasty: bool,
    },
    /// Finance: a manual business retry of the `pick`-th declined charge of the order.
    FinanceRetry { order: u8, pick: u8 },
    /// Finance closes the `pick`-th open reconciliation case, with a note.
    CloseCase { pick: u8 },
    /// The daily reconciliation runs (`cobro::recon::reconcile`) over the
    /// week up to now, against the gateway's listings: it opens cases,
    /// settles an attempt in doubt its record makes unambiguous, and marks
    /// a refund the gateway settled the other way.
    Reconcile,
    /// The app: `POST /orders/{order}/cancel` with a reason.
    Cancel { order: u8, reason: CancelReason },
    /// The app asks for a refund of the order's approved charge (`POST
    /// /refunds` when `http`, else the store's `request_refund`).
    Refund { order: u8, part: Part, http: bool },
    /// The app's raw SQL moves the `pick`-th settled attempt of the order
    /// back to `PENDIENTE` ("try it again"), bypassing every door.
    RawReopen { order: u8, pick: u8 },
}

impl Step {
    /// The step's kind, as `COBRO_MODEL_WITHOUT` names it (snake_case).
    pub fn kind(&self) -> &'static str {
        match self {
            Step::EnqueueHttp { .. } => "enqueue_http",
            Step::EnqueueSql { .. } => "enqueue_sql",
            Step::Wake { .. } => "wake",
            Step::RunDue { .. } => "run_due",
            Step::Crash { .. } => "crash",
            Step::TimePasses => "time_passes",
            Step::DayPasses => "day_passes",
            Step::Webhook { .. } => "webhook",
            Step::LateApproval { .. } => "late_approval",
            Step::LateRefund { .. } => "late_refund",
            Step::RefundFails { .. } => "refund_fails",
            Step::Resolve { .. } => "resolve",
            Step::FinanceRetry { .. } => "finance_retry",
            Step::CloseCase { .. } => "close_case",
            Step::Reconcile => "reconcile",
            Step::Cancel { .. } => "cancel",
            Step::Refund { .. } => "refund",
            Step::RawReopen { .. } => "raw_reopen",
        }
    }
}

impl Step {
    /// Plainer versions of this step, for shrinking: a new key instead of a
    /// replayed one, a healthy gateway, a first delivery, a decision
    /// instead of "check again" or a hasty one, news under its own key,
    /// the first of a list.
    pub fn simpler(&self) -> Vec<Step> {
        match *self {
            Step::EnqueueHttp {
                order,
                key: Key::Replay(_),
            } => vec![Step::EnqueueHttp {
                order,
                key: Key::New,
            }],
            Step::EnqueueSql {
                order,
                key: Key::Replay(_),
            } => vec![Step::EnqueueSql {
                order,
                key: Key::New,
            }],
            Step::Wake { order, net } if net != Net::Clean => vec![Step::Wake {
                order,
                net: Net::Clean,
            }],
            Step::RunDue { net } if net != Net::Clean => vec![Step::RunDue { net: Net::Clean }],
            Step::Webhook {
                pick,
                replay,
                crossed,
            } if replay || crossed => vec![Step::Webhook {
                pick,
                replay: false,
                crossed: false,
            }],
            Step::Resolve {
                order,
                check_now,
                hasty,
            } if check_now || hasty => vec![Step::Resolve {
                order,
                check_now: false,
                hasty: false,
            }],
            Step::FinanceRetry { order, pick } if pick > 0 => {
                vec![Step::FinanceRetry { order, pick: 0 }]
            }
            Step::CloseCase { pick } if pick > 0 => vec![Step::CloseCase { pick: 0 }],
            Step::RawReopen { order, pick } if pick > 0 => {
                vec![Step::RawReopen { order, pick: 0 }]
            }
            _ => Vec::new(),
        }
    }
}

/// Every kind of step with its weight (how often the generator picks it).
const WEIGHTS: [(&str, u32); 18] = [
    ("enqueue_http", 10),
    ("enqueue_sql", 7),
    ("wake", 18),
    ("run_due", 5),
    ("crash", 3),
    ("time_passes", 10),
    ("day_passes", 4),
    ("webhook", 9),
    ("late_approval", 4),
    ("late_refund", 2),
    ("refund_fails", 2),
    ("resolve", 4),
    ("finance_retry", 5),
    ("close_case", 2),
    ("reconcile", 2),
    ("cancel", 5),
    ("refund", 6),
    ("raw_reopen", 1),
];

/// Kinds of step a run leaves out (`COBRO_MODEL_WITHOUT`), all known.
pub fn check_kinds(without: &[String]) -> Result<(), String> {
    match without
        .iter()
        .find(|w| !WEIGHTS.iter().any(|(k, _)| k == w))
    {
        Some(unknown) => Err(format!(
            "COBRO_MODEL_WITHOUT: unknown step kind {unknown:?}; kinds: {}",
            WEIGHTS.map(|(k, _)| k).join(", ")
        )),
        None => Ok(()),
    }
}

/// The case of `seed`: `n` steps, none of the kinds in `without`.
pub fn generate(seed: u64, n: usize, without: &[String]) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let table: Vec<(&str, u32)> = WEIGHTS
        .into_iter()
        .filter(|(k, _)| !without.iter().any(|w| w == k))
        .collect();
    let total: u32 = table.iter().map(|(_, w)| w).sum();
    (0..n)
        .map(|_| {
            let mut roll = rng.random_range(0..total);
            let kind = table
                .iter()
                .find(|(_, w)| {
                    let hit = roll < *w;
                    roll = roll.saturating_sub(*w);
                    hit
                })
                .map_or("wake", |(k, _)| k);
            one(kind, &mut rng)
        })
        .collect()
}

fn one(kind: &str, rng: &mut StdRng) -> Step {
    let order = rng.random_range(0..ORDERS);
    let pick = rng.random_range(0..8u8);
    match kind {
        "enqueue_http" => Step::EnqueueHttp {
            order,
            key: key(rng),
        },
        "enqueue_sql" => Step::EnqueueSql {
            order,
            key: key(rng),
        },
        "wake" => Step::Wake {
            order,
            net: net(rng),
        },
        "run_due" => Step::RunDue { net: net(rng) },
        "crash" => Step::Crash {
            order,
            sent: rng.random_bool(0.5),
        },
        "time_passes" => Step::TimePasses,
        "day_passes" => Step::DayPasses,
        "webhook" => Step::Webhook {
            pick,
            replay: rng.random_bool(0.4),
            crossed: rng.random_bool(0.1),
        },
        "late_approval" => Step::LateApproval { order },
        "late_refund" => Step::LateRefund { order },
        "refund_fails" => Step::RefundFails { order },
        "resolve" => Step::Resolve {
            order,
            check_now: rng.random_bool(0.25),
            hasty: rng.random_bool(0.25),
        },
        "finance_retry" => Step::FinanceRetry { order, pick },
        "close_case" => Step::CloseCase { pick },
        "reconcile" => Step::Reconcile,
        "cancel" => Step::Cancel {
            order,
            reason: CancelReason::ALL[rng.random_range(0..CancelReason::ALL.len())],
        },
        "refund" => Step::Refund {
            order,
            part: [Part::Full, Part::Half, Part::Cent][rng.random_range(0..3)],
            http: rng.random_bool(0.5),
        },
        "raw_reopen" => Step::RawReopen { order, pick },
        other => unreachable!("no step kind {other}"),
    }
}

fn key(rng: &mut StdRng) -> Key {
    if rng.random_bool(0.7) {
        Key::New
    } else {
        Key::Replay(rng.random_range(0..4))
    }
}

fn net(rng: &mut StdRng) -> Net {
    match rng.random_range(0..100) {
        0..30 => Net::Clean,
        30..40 => Net::Decline(Code::InsufficientFunds),
        40..48 => Net::Decline(Code::CardDeclined),
        48..60 => Net::LoseAnswer,
        60..70 => Net::LoseAnswerAndLookups,
        70..73 => Net::Timeout,
        73..77 => Net::Late,
        77..87 => Net::Error503,
        87..97 => Net::Throttled,
        _ => Net::Down,
    }
}
