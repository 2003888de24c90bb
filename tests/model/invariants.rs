//! The invariants the model checks: after every step (1, 2, 3, 5) and at the
//! end of a case, after draining (4). Each reads only what a snapshot holds:
//! our attempts and their transition logs, the gateway's ledger, the cases.
//!
//! Invariant: a check fails only on a fact in the snapshot that contradicts
//! the statement in `tests/model.rs`'s header; it never depends on which
//! steps ran.

use std::collections::{HashMap, HashSet};
use std::fmt;

use cobro::state::{Event, State, transition};
use cobro::store::{Attempt, Transition};

use super::world::Snapshot;

/// A broken invariant: its number (as in `tests/model.rs`) and the facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: u8,
    pub detail: String,
}

impl Violation {
    fn new(invariant: u8, detail: String) -> Self {
        Self { invariant, detail }
    }

    pub fn name(&self) -> &'static str {
        name(self.invariant)
    }
}

pub fn name(invariant: u8) -> &'static str {
    match invariant {
        1 => "no order is charged twice at the gateway",
        2 => "nothing but the gateway turns a refund down",
        3 => "every transition log is a valid chain of the state machine",
        4 => "after draining, our totals equal the gateway's or a case or review explains it",
        5 => "a cancel that means \"do not charge\" is final",
        6 => "no send after an unknown outcome once the key is past the gateway's lifetime",
        _ => "unknown invariant",
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invariant {} ({}): {}",
            self.invariant,
            self.name(),
            self.detail
        )
    }
}

/// What the checks remember between steps: for each order cancelled with
/// a reason that means "do not charge", how many charges the gateway had
/// executed when the model first saw that cancel.
#[derive(Debug, Default)]
pub struct Marks {
    do_not_charge: HashMap<String, (u64, String)>,
    /// For each attempt, how many rows its log had when it was last seen
    /// with a key younger than the gateway's lifetime.
    young_rows: HashMap<uuid::Uuid, usize>,
}

/// The cancels after which an order must never be charged.
const DO_NOT_CHARGE: [&str; 3] = [
    "cancelled_paid_by_other_means",
    "cancelled_fraud_suspected",
    "cancelled_duplicate_order",
];

/// The causes of a move to `RECHAZADO` that carry the gateway's decline
/// (its answer, a lookup, a webhook, the review janitor's look, finance
/// relaying what the gateway's dashboard shows).
const GATEWAY_DECLINES: [&str; 6] = [
    "gateway_declined",
    "lookup_declined",
    "webhook_declined",
    "review_lookup_declined",
    "review_listing_declined",
    "finance_declined",
];

/// Invariants 1, 2, 3, 5 and 6, in that order; the first broken one.
pub fn after_step(s: &Snapshot, marks: &mut Marks) -> Result<(), Violation> {
    one_charge_per_order(s)?;
    only_the_gateway_declines_refunds(s)?;
    valid_logs(s)?;
    do_not_charge_is_final(s, marks)?;
    no_resend_on_a_forgotten_key(s, marks)
}

fn short(id: impl fmt::Display) -> String {
    id.to_string().chars().take(8).collect()
}

fn who(a: &Attempt) -> String {
    format!(
        "{} {} {} of {}",
        if a.is_refund() { "refund" } else { "charge" },
        short(a.id),
        a.state,
        a.order_id
    )
}

/// 1: per order, at most one approved charge at the gateway that is not
/// refunded in full.
fn one_charge_per_order(s: &Snapshot) -> Result<(), Violation> {
    let mut kept: HashMap<&str, Vec<String>> = HashMap::new();
    for e in s.ledger.entries.iter().filter(|e| e.is_approved()) {
        let refunded: i64 = s
            .ledger
            .refunds_for_charge(&e.charge_id)
            .filter(|r| r.is_approved())
            .map(|r| r.amount_minor)
            .sum();
        if refunded < e.amount_minor {
            let ours = s
                .attempts
                .iter()
                .find(|(a, _)| a.idempotency_key.to_string() == e.idempotency_key)
                .map_or("a key we do not know".into(), |(a, _)| who(a));
            kept.entry(e.order_id.as_str()).or_default().push(format!(
                "{} {} {} (refunded {refunded}) under key {} = {ours}",
                e.charge_id,
                e.amount_minor,
                e.currency,
                short(&e.idempotency_key)
            ));
        }
    }
    let mut orders: Vec<_> = kept.into_iter().filter(|(_, v)| v.len() > 1).collect();
    orders.sort();
    match orders.first() {
        None => Ok(()),
        Some((order, charges)) => Err(Violation::new(
            1,
            format!(
                "{order} has {} approved charges at the gateway, none refunded in full: {}",
                charges.len(),
                charges.join("; ")
            ),
        )),
    }
}

/// 2: a refund is `RECHAZADO` only by a decline the gateway gave, which its
/// ledger shows (finance may relay it); or by finance's decline confirmed
/// by the review janitor while the gateway made no refund under its key;
/// or by finance's decline of a refund never sent, that the gateway never
/// saw.
fn only_the_gateway_declines_refunds(s: &Snapshot) -> Result<(), Violation> {
    for (a, log) in &s.attempts {
        if !a.is_refund() || a.state != State::Rechazado {
            continue;
        }
        let Some(entered) = log
            .iter()
            .rev()
            .find(|t| t.to_state == "RECHAZADO" && t.from_state.as_deref() != Some("RECHAZADO"))
        else {
            return Err(Violation::new(
                2,
                format!("{} has no move to RECHAZADO in its log", who(a)),
            ));
        };
        let key = a.idempotency_key.to_string();
        let mut there = s.ledger.refunds.iter().filter(|r| r.idempotency_key == key);
        let made_there = there.clone().any(|r| r.is_approved());
        let fine = match entered.cause.as_str() {
            // Finance's decline of a sent refund, recorded by the review
            // janitor on the gateway's word: its decline, or no record of
            // the refund long after the send. A refund the gateway made
            // after that (late, past the processing time it promised) is
            // cobro's to take note of: the refund is marked made.
            "finance_decline_confirmed" => {
                !made_there
                    || (there.clone().all(|r| !r.is_approved() || r.at > entered.at)
                        && marked(log, entered, MADE))
            }
            // Finance's decline of a refund never sent: nothing to ask.
            "finance_declined" if a.send_count == 0 => there.next().is_none(),
            cause => GATEWAY_DECLINES.contains(&cause) && there.any(|r| !r.is_approved()),
        };
        if !fine {
            return Err(Violation::new(
                2,
                format!(
                    "{} ({} {}) was turned down by {:?} (actor {}) although the gateway {}",
                    who(a),
                    a.amount_minor,
                    a.currency,
                    entered.cause,
                    entered.actor,
                    match s.ledger.refunds.iter().find(|r| r.idempotency_key == key) {
                        Some(r) => format!("has it as {} ({})", r.status, r.refund_id),
                        None => "never saw it".into(),
                    }
                ),
            ));
        }
    }
    Ok(())
}

/// The causes of the log rows that mark a settled refund the gateway
/// settled the other way: made after we held it `RECHAZADO`, failed after
/// we held it `APROBADO`.
const MADE: &str = "refund_made_after_decline";
const FAILED: &str = "refund_failed_after_success";

/// Whether `log` has a row `cause` after `since`.
fn marked(log: &[Transition], since: &Transition, cause: &str) -> bool {
    log.iter().any(|t| t.id > since.id && t.cause == cause)
}

/// Whether refund `a` (with its log) counts as refunded here: `APROBADO`
/// and not marked failed since, or `RECHAZADO` and marked made (the mark's
/// meaning: its amount counts as refunded).
fn counts_as_refunded(a: &Attempt, log: &[Transition]) -> bool {
    let mark = |cause| log.iter().any(|t| t.cause == cause);
    match a.state {
        State::Aprobado => !mark(FAILED),
        State::Rechazado => mark(MADE),
        _ => false,
    }
}

/// Whether some event of the state machine moves `from` to `to`.
fn allowed(from: State, to: State) -> bool {
    Event::ALL
        .into_iter()
        .any(|e| transition(from, e).is_ok_and(|n| n.to == to))
}

fn row(t: &Transition) -> String {
    format!(
        "#{} {} -> {} ({}, by {})",
        t.id,
        t.from_state.as_deref().unwrap_or("NULL"),
        t.to_state,
        t.cause,
        t.actor
    )
}

/// 3: the log starts NULL -> PENDIENTE, each row starts where the previous
/// ended, each row is a move of the state machine (or keeps the state), and
/// the last row ends in the attempt's state.
fn valid_logs(s: &Snapshot) -> Result<(), Violation> {
    for (a, log) in &s.attempts {
        let broken = |why: String| Err(Violation::new(3, format!("{}: {why}", who(a))));
        let Some(first) = log.first() else {
            return broken("no transition log at all".into());
        };
        if first.from_state.is_some() || first.to_state != "PENDIENTE" {
            return broken(format!("the log starts with {}", row(first)));
        }
        for pair in log.windows(2) {
            let (prev, t) = (&pair[0], &pair[1]);
            if t.from_state.as_deref() != Some(prev.to_state.as_str()) {
                return broken(format!("{} follows {}", row(t), row(prev)));
            }
            let moved = match (prev.to_state.parse::<State>(), t.to_state.parse::<State>()) {
                (Ok(from), Ok(to)) => from == to || allowed(from, to),
                _ => false,
            };
            if !moved {
                return broken(format!("{} is no move of the state machine", row(t)));
            }
        }
        let last = log.last().unwrap_or(first);
        if last.to_state != a.state.as_str() {
            return broken(format!(
                "its state is {} but its log ends with {}",
                a.state,
                row(last)
            ));
        }
    }
    Ok(())
}

/// 5: once an order is cancelled as paid by other means, fraud or a
/// duplicate, the gateway charges it under no key it had not seen before.
fn do_not_charge_is_final(s: &Snapshot, marks: &mut Marks) -> Result<(), Violation> {
    for (a, log) in &s.attempts {
        if let Some(t) = log
            .iter()
            .find(|t| DO_NOT_CHARGE.contains(&t.cause.as_str()))
        {
            marks
                .do_not_charge
                .entry(a.order_id.clone())
                .or_insert_with(|| {
                    (
                        s.ledger.entries.len() as u64,
                        format!("{} of {} by {}", t.cause, who(a), t.actor),
                    )
                });
        }
    }
    let mut orders: Vec<_> = marks.do_not_charge.iter().collect();
    orders.sort();
    for (order, (mark, cancel)) in orders {
        let before: HashSet<&str> = s
            .ledger
            .entries
            .iter()
            .filter(|e| e.seq <= *mark)
            .map(|e| e.idempotency_key.as_str())
            .collect();
        if let Some(e) = s.ledger.entries.iter().find(|e| {
            e.order_id == *order
                && e.seq > *mark
                && e.is_approved()
                && !before.contains(e.idempotency_key.as_str())
        }) {
            let ours = s
                .attempts
                .iter()
                .find(|(a, _)| a.idempotency_key.to_string() == e.idempotency_key)
                .map_or("a key we do not know".into(), |(a, _)| who(a));
            return Err(Violation::new(
                5,
                format!(
                    "{order} was cancelled ({cancel}), yet the gateway charged it afterwards: {} {} under key {} = {ours}",
                    e.charge_id,
                    e.amount_minor,
                    short(&e.idempotency_key)
                ),
            ));
        }
    }
    Ok(())
}

/// 6: once an attempt's key is older than the gateway keeps keys, it is
/// not sent again after an unknown outcome (a move into `EN_PROCESO` with
/// `DESCONOCIDO` earlier in its log) unless its gateway object is recorded:
/// a send the gateway executed after all would be made again, not
/// replayed. Rows written while the key was young are not judged.
fn no_resend_on_a_forgotten_key(s: &Snapshot, marks: &mut Marks) -> Result<(), Violation> {
    for (a, log) in &s.attempts {
        let age = (s.now - a.created_at).to_std().unwrap_or_default();
        if age < s.key_lifetime {
            marks.young_rows.insert(a.id, log.len());
            continue;
        }
        if a.gateway_ref.is_some() {
            continue;
        }
        let judged = marks.young_rows.get(&a.id).copied().unwrap_or(0);
        for (i, t) in log.iter().enumerate().skip(judged) {
            let sent = t.to_state == State::EnProceso.as_str()
                && t.from_state.as_deref() != Some(State::EnProceso.as_str());
            if sent
                && log[..i]
                    .iter()
                    .any(|r| r.to_state == State::Desconocido.as_str())
            {
                return Err(Violation::new(
                    6,
                    format!(
                        "{} was sent again ({}) after an unknown outcome with a key {} h old, past the gateway's {} h",
                        who(a),
                        row(t),
                        age.as_secs() / 3600,
                        s.key_lifetime.as_secs() / 3600
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// 4, at the end of a case after draining: per order, our APROBADO charges
/// minus our APROBADO refunds equal the gateway's approved charges minus
/// its approved refunds, to the cent. Where they differ, every charge on
/// which the two sides disagree (what it nets to after its refunds) is
/// explained: it or one of its refunds waits in `EN_REVISION` (finance's
/// queue), or an open case names it (its attempt, or the gateway's id of
/// it or of one of its refunds).
pub fn reconciled(s: &Snapshot) -> Result<(), Violation> {
    let mut orders: Vec<&str> = s
        .attempts
        .iter()
        .map(|(a, _)| a.order_id.as_str())
        .chain(s.ledger.entries.iter().map(|e| e.order_id.as_str()))
        .collect();
    orders.sort();
    orders.dedup();
    for order in orders {
        let ours_of = |refund: bool| -> i64 {
            s.attempts
                .iter()
                .filter(|(a, log)| {
                    a.order_id == order
                        && a.is_refund() == refund
                        && match refund {
                            true => counts_as_refunded(a, log),
                            false => a.state == State::Aprobado,
                        }
                })
                .map(|(a, _)| a.amount_minor)
                .sum()
        };
        let ours = ours_of(false) - ours_of(true);
        let charged: i64 = s
            .ledger
            .entries_for_order(order)
            .filter(|e| e.is_approved())
            .map(|e| e.amount_minor)
            .sum();
        let refunded: i64 = s
            .ledger
            .refunds
            .iter()
            .filter(|r| r.order_id == order && r.is_approved())
            .map(|r| r.amount_minor)
            .sum();
        let theirs = charged - refunded;
        if ours == theirs {
            continue;
        }
        let all = disagreements(s, order);
        let unexplained: Vec<&Disagreement> = all.iter().filter(|d| !explained(s, d)).collect();
        if !all.is_empty() && unexplained.is_empty() {
            continue;
        }
        let why = match unexplained.is_empty() {
            true => "no charge nets differently on the two sides: the totals do not add up".into(),
            false => unexplained
                .iter()
                .map(|d| d.what.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        };
        return Err(Violation::new(
            4,
            format!(
                "{order}: ours {ours} (charges {} - refunds {}) vs the gateway's {theirs} (charges {charged} - refunds {refunded}), and no open case or review explains it: {why}",
                ours_of(false),
                ours_of(true)
            ),
        ));
    }
    Ok(())
}

/// A charge that nets to different amounts on the two sides.
struct Disagreement {
    /// Our charge attempt and its refunds (none for a charge under a key
    /// we do not know).
    attempts: Vec<uuid::Uuid>,
    /// The gateway's ids of the charge and of its refunds.
    gateway_ids: Vec<String>,
    what: String,
}

/// The charges of `order` that net (captured minus refunded) to different
/// amounts here and at the gateway.
fn disagreements(s: &Snapshot, order: &str) -> Vec<Disagreement> {
    let gateway_net = |charge_id: &str, amount: i64| -> (i64, Vec<String>) {
        let refunds: Vec<_> = s
            .ledger
            .refunds_for_charge(charge_id)
            .filter(|r| r.is_approved())
            .collect();
        let net = amount - refunds.iter().map(|r| r.amount_minor).sum::<i64>();
        let mut ids = vec![charge_id.to_owned()];
        ids.extend(refunds.iter().map(|r| r.refund_id.clone()));
        (net, ids)
    };
    let mut out = Vec::new();
    let mut ours = HashSet::new();
    for (a, _) in s
        .attempts
        .iter()
        .filter(|(a, _)| a.order_id == order && !a.is_refund())
    {
        let key = a.idempotency_key.to_string();
        ours.insert(key.clone());
        let with_logs: Vec<&(Attempt, Vec<Transition>)> = s
            .attempts
            .iter()
            .filter(|(r, _)| r.refund_of == Some(a.id))
            .collect();
        let refunds: Vec<&Attempt> = with_logs.iter().map(|(r, _)| r).collect();
        let our_net = match a.state {
            State::Aprobado => {
                a.amount_minor
                    - with_logs
                        .iter()
                        .filter(|(r, log)| counts_as_refunded(r, log))
                        .map(|(r, _)| r.amount_minor)
                        .sum::<i64>()
            }
            _ => 0,
        };
        let (mut their_net, mut ids) = (0, Vec::new());
        for e in s.ledger.entries_for_key(&key).filter(|e| e.is_approved()) {
            let (net, more) = gateway_net(&e.charge_id, e.amount_minor);
            their_net += net;
            ids.extend(more);
        }
        ids.extend(refunds.iter().filter_map(|r| r.gateway_charge_id.clone()));
        if our_net != their_net {
            let mut attempts = vec![a.id];
            attempts.extend(refunds.iter().map(|r| r.id));
            out.push(Disagreement {
                attempts,
                gateway_ids: ids.clone(),
                what: format!(
                    "{} under key {} nets {our_net} here and {their_net} at the gateway ({})",
                    who(a),
                    short(&key),
                    match ids.is_empty() {
                        true => "nothing approved there".to_owned(),
                        false => ids.join(", "),
                    }
                ),
            });
        }
    }
    for e in s
        .ledger
        .entries_for_order(order)
        .filter(|e| e.is_approved() && !ours.contains(&e.idempotency_key))
    {
        let (net, ids) = gateway_net(&e.charge_id, e.amount_minor);
        if net != 0 {
            out.push(Disagreement {
                attempts: Vec::new(),
                gateway_ids: ids,
                what: format!(
                    "the gateway charged {} ({net} left) under a key we do not know",
                    e.charge_id
                ),
            });
        }
    }
    out
}

fn explained(s: &Snapshot, d: &Disagreement) -> bool {
    let in_review = s
        .attempts
        .iter()
        .any(|(a, _)| d.attempts.contains(&a.id) && a.state == State::EnRevision);
    in_review
        || s.cases.iter().filter(|c| c.resolved_at.is_none()).any(|c| {
            c.attempt_id.is_some_and(|id| d.attempts.contains(&id))
                || c.gateway_ref.as_deref().is_some_and(|r| {
                    r.split(',')
                        .any(|x| d.gateway_ids.iter().any(|g| g == x.trim()))
                })
        })
}
