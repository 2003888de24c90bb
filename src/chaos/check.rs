//! The soak's verdict, from the gateway's ledger and our tables: the four
//! numbers of Jepsen's total-queue checker applied to charges (charged twice,
//! lost, stuck, amounts) plus the log's consistency, "never re-sent after a
//! lookup said approved", and how late checks started.
//!
//! Invariant: pure: the same inputs give the same report; every violation is
//! counted and named, none is only logged.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::sim::Ledger;
use crate::state::{Event, State, transition};

/// What the soak reads back from our tables, per attempt.
#[derive(Debug, Clone)]
pub struct AttemptFacts {
    pub id: Uuid,
    pub order_id: String,
    pub key: Uuid,
    pub state: State,
    pub amount_minor: i64,
    pub gateway_charge_id: Option<String>,
    /// (from, to, cause, at), in log order.
    pub log: Vec<(Option<String>, String, String, DateTime<Utc>)>,
    /// (lookup result, started at) of every check.
    pub checks: Vec<(String, DateTime<Utc>)>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Report {
    pub orders_enqueued: usize,
    pub attempts: usize,
    pub approved_here: usize,
    pub in_review: usize,
    /// Orders with two or more approved charges at the gateway (must be 0).
    pub orders_charged_twice: usize,
    /// Orders enqueued with no attempt in our tables (must be 0).
    pub orders_lost: usize,
    /// Attempts in PENDIENTE, EN_PROCESO or DESCONOCIDO at the end (must be 0).
    pub attempts_stuck: usize,
    /// Gateway approvals whose attempt is neither APROBADO (with that charge)
    /// nor EN_REVISION, and APROBADO attempts with no such approval (must be 0).
    pub amount_mismatches: usize,
    /// Sums of amounts, in i128 so that they can never overflow.
    pub approved_total_here: i128,
    pub approved_total_gateway: i128,
    /// Gateway approvals of attempts left EN_REVISION (finance's to settle).
    pub approved_total_in_review: i128,
    /// Attempts whose log is not a valid chain ending in their state (must be 0).
    pub log_inconsistent: usize,
    /// Sends after a lookup had said approved (must be 0).
    pub resent_after_approved: usize,
    pub checks: usize,
    pub check_lateness_p50_ms: i64,
    pub check_lateness_p99_ms: i64,
    pub violations: Vec<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Whether some event moves `from` to `to` (or `to` is a first state).
fn valid_edge(from: Option<&str>, to: &str) -> bool {
    let Ok(to) = to.parse::<State>() else {
        return false;
    };
    let Some(from) = from else {
        return to == State::Pendiente;
    };
    let Ok(from) = from.parse::<State>() else {
        return false;
    };
    Event::ALL
        .iter()
        .any(|e| transition(from, *e).is_ok_and(|n| n.to == to))
}

fn log_is_consistent(a: &AttemptFacts) -> bool {
    let mut prev: Option<&str> = None;
    for (i, (from, to, _, _)) in a.log.iter().enumerate() {
        if from.as_deref() != prev || (i > 0 && from.is_none()) {
            return false;
        }
        if !valid_edge(from.as_deref(), to) {
            return false;
        }
        prev = Some(to);
    }
    prev == Some(a.state.as_str())
}

fn resent_after_approval(a: &AttemptFacts) -> bool {
    let Some(approved_at) = a
        .checks
        .iter()
        .filter(|(result, _)| result == "approved")
        .map(|(_, at)| *at)
        .min()
    else {
        return false;
    };
    a.log.iter().any(|(_, to, cause, at)| {
        to == "EN_PROCESO" && cause == "lookup_not_found" && *at > approved_at
    })
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Judges the run. `lateness_ms`: every check's start minus its due time.
pub fn judge(
    orders: &[String],
    attempts: &[AttemptFacts],
    ledger: &Ledger,
    mut lateness_ms: Vec<i64>,
) -> Report {
    let mut r = Report {
        orders_enqueued: orders.len(),
        attempts: attempts.len(),
        ..Report::default()
    };
    let mut approved_per_order: HashMap<&str, usize> = HashMap::new();
    for e in ledger.entries.iter().filter(|e| e.status == "approved") {
        *approved_per_order.entry(e.order_id.as_str()).or_default() += 1;
        r.approved_total_gateway += i128::from(e.amount_minor);
    }
    r.orders_charged_twice = approved_per_order.values().filter(|n| **n >= 2).count();

    let present: HashSet<&str> = attempts.iter().map(|a| a.order_id.as_str()).collect();
    r.orders_lost = orders
        .iter()
        .filter(|o| !present.contains(o.as_str()))
        .count();

    let by_key: HashMap<String, &AttemptFacts> =
        attempts.iter().map(|a| (a.key.to_string(), a)).collect();
    let approved_at_gateway: HashMap<&str, &crate::sim::LedgerEntry> = ledger
        .entries
        .iter()
        .filter(|e| e.status == "approved")
        .map(|e| (e.idempotency_key.as_str(), e))
        .collect();
    for e in approved_at_gateway.values() {
        match by_key.get(&e.idempotency_key) {
            Some(a)
                if a.state == State::Aprobado
                    && a.gateway_charge_id.as_deref() == Some(e.charge_id.as_str())
                    && a.amount_minor == e.amount_minor => {}
            Some(a) if a.state == State::EnRevision => {
                r.approved_total_in_review += i128::from(e.amount_minor)
            }
            _ => r.amount_mismatches += 1,
        }
    }
    for a in attempts {
        match a.state {
            State::Aprobado => {
                r.approved_here += 1;
                r.approved_total_here += i128::from(a.amount_minor);
                if !approved_at_gateway.contains_key(a.key.to_string().as_str()) {
                    r.amount_mismatches += 1;
                }
            }
            State::EnRevision => r.in_review += 1,
            State::Pendiente | State::EnProceso | State::Desconocido => r.attempts_stuck += 1,
            State::Rechazado => {}
        }
        r.log_inconsistent += usize::from(!log_is_consistent(a));
        r.resent_after_approved += usize::from(resent_after_approval(a));
    }
    lateness_ms.sort_unstable();
    r.checks = lateness_ms.len();
    r.check_lateness_p50_ms = percentile(&lateness_ms, 0.50);
    r.check_lateness_p99_ms = percentile(&lateness_ms, 0.99);

    let must_be_zero = [
        (
            "orders charged twice at the gateway",
            r.orders_charged_twice,
        ),
        ("orders lost", r.orders_lost),
        ("attempts stuck outside EN_REVISION", r.attempts_stuck),
        ("approvals not matched one to one", r.amount_mismatches),
        ("attempts with an inconsistent log", r.log_inconsistent),
        (
            "re-sends after a lookup said approved",
            r.resent_after_approved,
        ),
    ];
    for (what, n) in must_be_zero {
        if n > 0 {
            r.violations.push(format!("{n} {what}"));
        }
    }
    if r.approved_total_here + r.approved_total_in_review != r.approved_total_gateway {
        r.violations.push(format!(
            "amounts: {} APROBADO here + {} in review != {} approved at the gateway",
            r.approved_total_here, r.approved_total_in_review, r.approved_total_gateway
        ));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::LedgerEntry;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn entry(key: Uuid, order: &str, status: &str, charge: &str) -> LedgerEntry {
        LedgerEntry {
            seq: 1,
            idempotency_key: key.to_string(),
            order_id: order.into(),
            amount_minor: 100,
            currency: "USD".into(),
            charge_id: charge.into(),
            status: status.into(),
            decline_code: None,
            network_advice_code: None,
            at: at(0),
            payment_method: None,
        }
    }

    fn approved(order: &str, key: Uuid) -> AttemptFacts {
        let row = |from: Option<&str>, to: &str, cause: &str, s| {
            (
                from.map(str::to_owned),
                to.to_owned(),
                cause.to_owned(),
                at(s),
            )
        };
        AttemptFacts {
            id: Uuid::new_v4(),
            order_id: order.into(),
            key,
            state: State::Aprobado,
            amount_minor: 100,
            gateway_charge_id: Some("ch_1".into()),
            log: vec![
                row(None, "PENDIENTE", "enqueued", 0),
                row(Some("PENDIENTE"), "EN_PROCESO", "claim", 1),
                row(Some("EN_PROCESO"), "DESCONOCIDO", "gateway_unknown", 2),
                row(Some("DESCONOCIDO"), "APROBADO", "lookup_approved", 3),
            ],
            checks: vec![("approved".into(), at(3))],
        }
    }

    #[test]
    fn a_clean_run_passes_and_every_kind_of_violation_is_caught() {
        let key = Uuid::new_v4();
        let orders = vec!["o1".to_owned(), "o2".to_owned()];
        let mut ledger = Ledger::default();
        ledger.entries.push(entry(key, "o1", "approved", "ch_1"));
        let a = approved("o1", key);
        let report = judge(
            &orders[..1],
            std::slice::from_ref(&a),
            &ledger,
            vec![10, 20, 900],
        );
        assert!(report.passed(), "{report:?}");
        assert_eq!(
            (report.check_lateness_p50_ms, report.check_lateness_p99_ms),
            (20, 900)
        );

        // Lost order, double charge, stuck, broken log, resend after approval.
        let mut double = ledger.clone();
        double
            .entries
            .push(entry(Uuid::new_v4(), "o1", "approved", "ch_2"));
        let mut stuck = a.clone();
        stuck.state = State::Desconocido;
        let mut resent = a.clone();
        resent.log.insert(
            3,
            (
                Some("DESCONOCIDO".into()),
                "EN_PROCESO".into(),
                "lookup_not_found".into(),
                at(4),
            ),
        );
        let report = judge(&orders, &[stuck, resent], &double, vec![]);
        assert_eq!(report.orders_lost, 1);
        assert_eq!(report.orders_charged_twice, 1);
        assert_eq!(report.attempts_stuck, 1);
        assert!(report.log_inconsistent >= 1);
        assert_eq!(report.resent_after_approved, 1);
        assert!(!report.passed());
    }

    #[test]
    fn edges_follow_the_state_machine() {
        assert!(valid_edge(None, "PENDIENTE"));
        assert!(!valid_edge(None, "APROBADO"));
        assert!(valid_edge(Some("DESCONOCIDO"), "EN_PROCESO"));
        assert!(!valid_edge(Some("APROBADO"), "RECHAZADO"));
        assert!(valid_edge(Some("EN_REVISION"), "DESCONOCIDO"));
        assert!(valid_edge(Some("EN_REVISION"), "EN_REVISION"));
        assert!(!valid_edge(Some("DESCONOCIDO"), "DESCONOCIDO"));
    }
}
