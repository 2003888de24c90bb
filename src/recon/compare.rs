//! The comparison, pure: the gateway's records of a window and our attempts
//! in; the cases to open, the attempts to settle and the ones to confirm by
//! lookup out.
//!
//! Invariant: no I/O and no clock. Every approved gateway record gets one
//! [`Verdict`]; an attempt settled here gets no case in the same run; the
//! charges of a double charge get one `double_charge` case between them, not
//! an `unmatched_charge` each. Only an unambiguous record settles an attempt:
//! approved under the attempt's own key, the only approval under that key,
//! same order, amount and currency, and the attempt `DESCONOCIDO` or
//! `EN_REVISION`.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Value, json};
use uuid::Uuid;

use super::{CaseKind, Finding, Window};
use crate::domain::decimal;
use crate::gateway::{GatewayRecord, Listed, LookupOutcome};
use crate::state::State;
use crate::store::Attempt;

/// What the comparison decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Comparison {
    /// Cases to open (each once, by its dedupe key).
    pub findings: Vec<Finding>,
    /// Attempts the gateway's record settles: `Event::Approved` with its id.
    pub resolutions: Vec<Resolution>,
    /// APROBADO attempts of the window the listing does not show: look each
    /// up by key before calling it missing (it may have been executed just
    /// outside the window).
    pub to_confirm: Vec<Attempt>,
    /// Approved at the gateway while our attempt is `EN_PROCESO`: the worker
    /// holding it records the answer (or its lookup will).
    pub in_flight: Vec<Uuid>,
    /// Refunds we hold `RECHAZADO` that the gateway made under their own
    /// key (same order, amount and currency), with the gateway's id: besides
    /// their case, each is marked made, so its amount counts as refunded.
    pub made_after_decline: Vec<(Attempt, String)>,
}

/// An attempt to move to `APROBADO` with the gateway's id.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    /// The attempt as loaded (the compare-and-set's expected version).
    pub attempt: Attempt,
    pub record: GatewayRecord,
}

/// What one approved gateway record means for the attempt it matches.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Ours is APROBADO with the same id, amount and currency.
    Matched,
    /// Unambiguous: settle ours as approved.
    Resolve,
    /// Ours is `EN_PROCESO`: leave it to its worker.
    InFlight,
    Case(Finding),
}

/// Compares one window. `ours` holds our attempts created in the window
/// plus any the records name (by key, gateway id or order).
pub fn compare(
    window: &Window,
    charges: &[GatewayRecord],
    refunds: &[GatewayRecord],
    ours: &[Attempt],
) -> Comparison {
    let index = Ours::new(ours);
    let (doubles, doubled) = double_charges(charges, refunds, &index);
    let mut out = Comparison {
        findings: doubles,
        ..Comparison::default()
    };
    for records in [charges, refunds] {
        let approvals = approvals_per_key(records);
        for g in records.iter().filter(|g| g.is_approved()) {
            let a = index.find(g);
            let under_key = g.key().and_then(|k| approvals.get(&k)).copied();
            match judge(g, a, under_key.unwrap_or(0)) {
                Verdict::Matched => {}
                Verdict::Resolve => out.resolutions.extend(a.map(|a| Resolution {
                    attempt: a.clone(),
                    record: g.clone(),
                })),
                Verdict::InFlight => out.in_flight.extend(a.map(|a| a.id)),
                Verdict::Case(f)
                    if f.kind == CaseKind::UnmatchedCharge && doubled.contains(&g.id) => {}
                Verdict::Case(f) => {
                    if let Some(a) = a.filter(|a| made_after_decline(g, a)) {
                        out.made_after_decline.push((a.clone(), g.id.clone()));
                    }
                    out.findings.push(with_order_context(f, g, &index))
                }
            }
        }
    }
    let present: HashSet<(bool, &str)> = charges
        .iter()
        .chain(refunds)
        .filter(|g| g.is_approved())
        .map(|g| (g.kind == Listed::Refunds, g.id.as_str()))
        .collect();
    out.to_confirm = ours
        .iter()
        .filter(|a| a.state == State::Aprobado && window.contains(a.created_at))
        .filter(|a| {
            let id = a.gateway_charge_id.as_deref().unwrap_or_default();
            !present.contains(&(a.is_refund(), id))
        })
        .cloned()
        .collect();
    out.findings
        .sort_by(|x, y| (x.kind, &x.dedupe_key).cmp(&(y.kind, &y.dedupe_key)));
    out
}

/// The verdict on one approved record `g`, given the attempt of ours it
/// matches (by key, else by gateway id) and how many approved records of
/// the listing carry its key.
pub fn judge(g: &GatewayRecord, ours: Option<&Attempt>, approvals_under_key: usize) -> Verdict {
    let Some(a) = ours else {
        return Verdict::Case(unmatched(g, None, "no attempt of ours has this key or id"));
    };
    if a.order_id != g.order_id {
        let why = "our attempt with this key is for another order";
        return Verdict::Case(unmatched(g, Some(a), why));
    }
    if a.amount_minor != g.amount_minor || a.currency != g.currency {
        return Verdict::Case(amount_mismatch(g, a));
    }
    let ours_key = g.key() == Some(a.idempotency_key);
    match a.state {
        State::Aprobado if a.gateway_charge_id.as_deref() == Some(g.id.as_str()) => {
            Verdict::Matched
        }
        State::Aprobado => Verdict::Case(unmatched(
            g,
            Some(a),
            "our attempt is APROBADO with another gateway id",
        )),
        // Pending (a refund that may still fail) settles nothing yet.
        State::Desconocido | State::EnRevision if g.is_pending() => Verdict::InFlight,
        State::Desconocido | State::EnRevision if ours_key && approvals_under_key == 1 => {
            Verdict::Resolve
        }
        State::Desconocido | State::EnRevision => Verdict::Case(unmatched(
            g,
            Some(a),
            "approved more than once under our key, or under another key: not unambiguous",
        )),
        State::EnProceso => Verdict::InFlight,
        State::Pendiente | State::Rechazado => Verdict::Case(unmatched(
            g,
            Some(a),
            "approved at the gateway, not APROBADO here",
        )),
    }
}

/// Whether approved record `g` is a refund made under the key of `a`, a
/// refund we hold as declined, for the same order, amount and currency
/// (not pending: a pending refund may still fail).
fn made_after_decline(g: &GatewayRecord, a: &Attempt) -> bool {
    g.kind == Listed::Refunds
        && !g.is_pending()
        && a.is_refund()
        && a.state == State::Rechazado
        && g.key() == Some(a.idempotency_key)
        && (g.order_id.as_str(), g.amount_minor, g.currency.as_str())
            == (a.order_id.as_str(), a.amount_minor, a.currency.as_str())
}

/// Whether an APROBADO attempt the listing did not show is missing, given
/// its lookup by key. `Err` when the lookup gave no answer: the run fails
/// rather than open a case on no evidence.
pub fn confirm_missing(a: &Attempt, lookup: &LookupOutcome) -> Result<Option<Finding>, String> {
    let ours = a.gateway_charge_id.as_deref();
    let (why, said) = match lookup {
        LookupOutcome::Approved { charge_id, .. } if ours == Some(charge_id.as_str()) => {
            return Ok(None);
        }
        LookupOutcome::Approved { charge_id, .. } => (
            "under our key the gateway approved another id",
            json!({ "result": "approved", "id": charge_id }),
        ),
        LookupOutcome::Declined {
            code, charge_id, ..
        } => (
            "declined at the gateway",
            json!({ "result": "declined", "code": code, "id": charge_id }),
        ),
        LookupOutcome::NotFound { .. } => (
            "the gateway has nothing under our key",
            json!({ "result": "not_found" }),
        ),
        LookupOutcome::Failed { evidence } | LookupOutcome::Deferred { evidence, .. } => {
            return Err(format!(
                "looking up attempt {} by key gave no answer ({}, HTTP {:?})",
                a.id, evidence.error_kind, evidence.http_status
            ));
        }
    };
    Ok(Some(Finding {
        kind: CaseKind::MissingAtGateway,
        dedupe_key: format!("missing_at_gateway:{}", a.id),
        order_id: Some(a.order_id.clone()),
        attempt_id: Some(a.id),
        gateway_ref: a.gateway_charge_id.clone(),
        details: json!({
            "reason": format!("APROBADO here, not in the gateway's listing; {why}"),
            "ours": summary(a),
            "gateway_lookup": said,
        }),
    }))
}

/// Our attempts, indexed the ways a gateway record can name them.
struct Ours<'a> {
    by_key: HashMap<Uuid, &'a Attempt>,
    by_gateway_id: HashMap<(bool, &'a str), &'a Attempt>,
    by_order: HashMap<(bool, String), Vec<&'a Attempt>>,
}

impl<'a> Ours<'a> {
    fn new(attempts: &'a [Attempt]) -> Self {
        let mut ours = Ours {
            by_key: HashMap::new(),
            by_gateway_id: HashMap::new(),
            by_order: HashMap::new(),
        };
        for a in attempts {
            ours.by_key.insert(a.idempotency_key, a);
            if let Some(id) = a.gateway_charge_id.as_deref() {
                ours.by_gateway_id.insert((a.is_refund(), id), a);
            }
            let order = (a.is_refund(), a.order_id.clone());
            ours.by_order.entry(order).or_default().push(a);
        }
        ours
    }

    /// Ours for `g`: by key (a refund's key names a refund, a charge's a
    /// charge: the gateway keeps the two apart), else by the gateway's id.
    fn find(&self, g: &GatewayRecord) -> Option<&'a Attempt> {
        let refund = g.kind == Listed::Refunds;
        g.key()
            .and_then(|k| self.by_key.get(&k).copied())
            .filter(|a| a.is_refund() == refund)
            .or_else(|| self.by_gateway_id.get(&(refund, g.id.as_str())).copied())
    }

    fn of_order(&self, refund: bool, order: &str) -> &[&'a Attempt] {
        self.by_order
            .get(&(refund, order.to_owned()))
            .map_or(&[], Vec::as_slice)
    }
}

/// Approved records per key (a memoryless gateway may approve one key twice).
fn approvals_per_key(records: &[GatewayRecord]) -> HashMap<Uuid, usize> {
    let mut n = HashMap::new();
    for key in records
        .iter()
        .filter(|g| g.is_approved())
        .filter_map(GatewayRecord::key)
    {
        *n.entry(key).or_insert(0) += 1;
    }
    n
}

/// One `double_charge` finding per order with two or more approved charges
/// in the listing, and the ids of those charges. Its details count the
/// charges the listed approved refunds have not fully returned
/// (`unrefunded`): below two, the customer is no longer out of pocket.
fn double_charges<'g>(
    charges: &'g [GatewayRecord],
    refunds: &[GatewayRecord],
    ours: &Ours<'_>,
) -> (Vec<Finding>, HashSet<&'g String>) {
    let mut by_order: BTreeMap<&str, Vec<&GatewayRecord>> = BTreeMap::new();
    for g in charges.iter().filter(|g| g.is_approved()) {
        by_order.entry(g.order_id.as_str()).or_default().push(g);
    }
    let mut refunded: HashMap<&str, i64> = HashMap::new();
    for r in refunds.iter().filter(|r| r.is_approved()) {
        if let Some(charge) = r.charge_id.as_deref() {
            *refunded.entry(charge).or_insert(0) += r.amount_minor;
        }
    }
    let mut findings = Vec::new();
    let mut doubled = HashSet::new();
    for (order, group) in by_order.into_iter().filter(|(_, g)| g.len() >= 2) {
        let mut ids: Vec<&String> = group.iter().map(|g| &g.id).collect();
        ids.sort();
        let joined = ids.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",");
        doubled.extend(ids);
        let attempts = ours.of_order(false, order);
        let approved = attempts.iter().find(|a| a.state == State::Aprobado);
        let unrefunded = group
            .iter()
            .filter(|g| refunded.get(g.id.as_str()).copied().unwrap_or(0) < g.amount_minor)
            .count();
        findings.push(Finding {
            kind: CaseKind::DoubleCharge,
            dedupe_key: format!("double_charge:{order}:{joined}"),
            order_id: Some(order.to_owned()),
            attempt_id: approved.map(|a| a.id),
            gateway_ref: Some(joined),
            details: json!({
                "reason": format!("{} approved charges at the gateway for one order", group.len()),
                "unrefunded": unrefunded,
                "gateway": group,
                "ours": attempts.iter().map(|a| summary(a)).collect::<Vec<_>>(),
            }),
        });
    }
    (findings, doubled)
}

fn unmatched(g: &GatewayRecord, ours: Option<&Attempt>, why: &str) -> Finding {
    let (kind, prefix) = match g.kind {
        Listed::Charges => (CaseKind::UnmatchedCharge, "unmatched_charge"),
        Listed::Refunds => (CaseKind::UnmatchedRefund, "unmatched_refund"),
    };
    Finding {
        kind,
        dedupe_key: format!("{prefix}:{}", g.id),
        order_id: Some(g.order_id.clone()),
        attempt_id: ours.map(|a| a.id),
        gateway_ref: Some(g.id.clone()),
        details: json!({
            "reason": why,
            "gateway": g,
            "ours": ours.map(summary),
        }),
    }
}

fn amount_mismatch(g: &GatewayRecord, a: &Attempt) -> Finding {
    Finding {
        kind: CaseKind::AmountMismatch,
        dedupe_key: format!("amount_mismatch:{}", g.id),
        order_id: Some(g.order_id.clone()),
        attempt_id: Some(a.id),
        gateway_ref: Some(g.id.clone()),
        details: json!({
            "reason": format!(
                "the gateway approved {} {}; our attempt is for {} {}",
                decimal(g.amount_minor, &g.currency),
                g.currency,
                decimal(a.amount_minor, &a.currency),
                a.currency
            ),
            "gateway": g,
            "ours": summary(a),
        }),
    }
}

/// An unmatched record with no attempt of ours: add what we have for its
/// order (e.g. an APROBADO charge from another day: a double charge across
/// windows shows here).
fn with_order_context(mut f: Finding, g: &GatewayRecord, ours: &Ours<'_>) -> Finding {
    if f.attempt_id.is_none()
        && let Some(details) = f.details.as_object_mut()
    {
        let refund = g.kind == Listed::Refunds;
        let of_order: Vec<Value> = ours
            .of_order(refund, &g.order_id)
            .iter()
            .map(|a| summary(a))
            .collect();
        details.insert("order_attempts".into(), Value::Array(of_order));
    }
    f
}

/// What a case shows of an attempt.
fn summary(a: &Attempt) -> Value {
    json!({
        "id": a.id,
        "kind": a.kind,
        "state": a.state,
        "order_id": a.order_id,
        "amount_minor": a.amount_minor,
        "currency": a.currency,
        "idempotency_key": a.idempotency_key,
        "gateway_charge_id": a.gateway_charge_id,
        "refund_of": a.refund_of,
        "created_at": a.created_at,
    })
}
