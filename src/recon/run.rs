//! One reconciliation run of a window: list the gateway's charges and
//! refunds → load ours → compare → confirm the missing by lookup → settle
//! the unambiguous → record the cases → report.
//!
//! Invariant: every gateway call comes before any write, so a failed listing
//! or lookup leaves the database untouched (the run reports the failure);
//! the settling writes are compare-and-sets through the state machine, and
//! a lost race is judged again on the attempt as it now is.

use std::collections::BTreeSet;

use serde::Serialize;
use tracing::{info, warn};
use uuid::Uuid;

use super::compare::{Comparison, Resolution, Verdict, compare, confirm_missing, judge};
use super::{ACTOR, CAUSE, CaseKind, Finding, Window};
use crate::gateway::{Evidence, Gateway, GatewayRecord, ListError, Listed, LookupOutcome};
use crate::state::{Event, State};
use crate::store::{
    Applied, Attempt, CaseStatus, Change, Contradiction, Marked, ReconScope, Store, StoreError,
};

/// How many times a settling write that lost a race is judged again.
const RESOLVE_TRIES: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum ReconError {
    #[error("{0}; nothing was opened or settled")]
    Listing(#[from] ListError),
    #[error("{0}; nothing was opened or settled")]
    Lookup(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a run found and did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub window: Window,
    pub gateway_charges: usize,
    pub gateway_refunds: usize,
    /// Our attempts (charges and refunds) the comparison looked at.
    pub ours: usize,
    /// Cases opened by this run.
    pub opened: usize,
    /// Findings whose case an earlier run opened and nobody resolved yet.
    pub already_open: usize,
    /// Findings whose case was opened and resolved before: not re-opened.
    pub already_resolved: usize,
    pub cases: Vec<CaseLine>,
    /// Attempts settled as `APROBADO` from the gateway's record.
    pub resolved: Vec<ResolvedLine>,
    /// Approved at the gateway while a worker holds our attempt.
    pub in_flight: Vec<Uuid>,
    /// Orders the gateway charged twice or more whose extra charges are not
    /// all refunded yet (the `cobro_gateway_double_charges` gauge: the
    /// seed's "any non-zero value opens a review").
    pub gateway_double_charges: usize,
    /// Refunds the gateway settled the other way, marked as such by this
    /// run (made after we held them declined: their amount counts as
    /// refunded; failed after we held them approved: their amount is free
    /// again). One already marked, or whose case finance had resolved, is
    /// not.
    pub refunds_marked: Vec<Uuid>,
}

/// A finding and its case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseLine {
    pub case_id: i64,
    pub status: CaseStatus,
    pub kind: CaseKind,
    pub dedupe_key: String,
    pub order_id: Option<String>,
    pub attempt_id: Option<Uuid>,
    pub gateway_ref: Option<String>,
}

impl CaseLine {
    /// A finding's line, with the case it was written to.
    pub(crate) fn of(f: &Finding, w: &crate::store::CaseWrite) -> Self {
        CaseLine {
            case_id: w.id,
            status: w.status,
            kind: f.kind,
            dedupe_key: f.dedupe_key.clone(),
            order_id: f.order_id.clone(),
            attempt_id: f.attempt_id,
            gateway_ref: f.gateway_ref.clone(),
        }
    }

    /// The case's line in a report: its number, kind, (with `status`, whether
    /// it is new), order and gateway reference.
    pub(crate) fn shown(&self, status: bool) -> String {
        let status = if status {
            format!(" {:<16}", status_word(self.status))
        } else {
            String::new()
        };
        format!(
            "    case {:>5}  {:<18}{status} order {}  {}\n",
            self.case_id,
            self.kind.as_str(),
            self.order_id.as_deref().unwrap_or("-"),
            self.gateway_ref.as_deref().unwrap_or("-")
        )
    }
}

/// An attempt settled by this run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedLine {
    pub attempt_id: Uuid,
    pub from: State,
    pub gateway_id: String,
}

/// Reconciles `window`: see the module docs.
pub async fn reconcile(
    store: &Store,
    gateway: &dyn Gateway,
    window: &Window,
) -> Result<Report, ReconError> {
    let charges = gateway
        .list(Listed::Charges, window.from, window.to)
        .await?;
    let refunds = gateway
        .list(Listed::Refunds, window.from, window.to)
        .await?;
    let ours = store
        .recon_attempts(window, &scope(&charges, &refunds))
        .await?;
    let Comparison {
        mut findings,
        resolutions,
        to_confirm,
        mut in_flight,
        made_after_decline,
    } = compare(window, &charges, &refunds, &ours);
    let now = chrono::Utc::now();
    let source = format!("reconciliation of {window}");
    let mut marks: Vec<(Attempt, Contradiction)> = made_after_decline
        .iter()
        .filter_map(|(a, id)| Some((a.clone(), Contradiction::approved(a, id, &source, now)?)))
        .collect();
    let (missing, failed) = confirm(store, gateway, &to_confirm).await?;
    findings.extend(missing);
    marks.extend(failed.into_iter().filter_map(|(a, code)| {
        let c = Contradiction::declined(&a, &code, &source, now)?;
        Some((a, c))
    }));
    let mut resolved = Vec::new();
    for r in &resolutions {
        match settle(store, r).await? {
            Settled::Resolved(line) => resolved.push(line),
            Settled::InFlight(id) => in_flight.push(id),
            Settled::Case(f) => findings.push(*f),
            Settled::Nothing => {}
        }
    }
    // A refund's case says what its mark does to the books.
    for (_, c) in &marks {
        if let Some(f) = findings
            .iter_mut()
            .find(|f| f.dedupe_key == c.finding.dedupe_key)
        {
            f.details["reason"] = c.finding.details["reason"].clone();
        }
    }
    let written = store.record_cases(window, &findings).await?;
    let refunds_marked = mark_refunds(store, &marks).await;
    let report = report(window, &charges, &refunds, ours.len(), &findings, &written);
    let report = Report {
        resolved,
        in_flight,
        refunds_marked,
        ..report
    };
    info!(
        window = %window, opened = report.opened, already_open = report.already_open,
        resolved = report.resolved.len(), "reconciliation done"
    );
    Ok(report)
}

/// Marks each refund the gateway settled the other way, as the webhook
/// door marks it, with its case (the one just recorded: the same dedupe
/// key); the ones marked now. A refund already marked, or whose case
/// finance has resolved, is left as it is; one the database refuses to
/// mark is logged and left to the next run (its case is recorded).
async fn mark_refunds(store: &Store, marks: &[(Attempt, Contradiction)]) -> Vec<Uuid> {
    let mut marked = Vec::new();
    for (a, c) in marks {
        if marked.contains(&a.id) {
            continue;
        }
        match store.contradicted(a, c, ACTOR).await {
            Ok(Marked::Marked) => marked.push(a.id),
            Ok(Marked::Nothing | Marked::CaseResolved(_)) => {}
            Err(e) => warn!(attempt = %a.id, case = %c.finding.dedupe_key, error = %e,
                            "refund not marked; the next run tries again"),
        }
    }
    marked
}

/// Which attempts the records name.
fn scope(charges: &[GatewayRecord], refunds: &[GatewayRecord]) -> ReconScope {
    let all: Vec<&GatewayRecord> = charges.iter().chain(refunds).collect();
    ReconScope {
        keys: sorted_unique(all.iter().filter_map(|g| g.key())),
        gateway_ids: sorted_unique(all.iter().map(|g| g.id.clone())),
        orders: sorted_unique(all.iter().map(|g| g.order_id.clone())),
    }
}

fn sorted_unique<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    items.collect::<BTreeSet<_>>().into_iter().collect()
}

/// Looks each APROBADO attempt the listing did not show up by key: the
/// cases of those missing, and the refunds among them the gateway says
/// failed (with its code).
async fn confirm(
    store: &Store,
    gateway: &dyn Gateway,
    attempts: &[Attempt],
) -> Result<(Vec<Finding>, Vec<(Attempt, String)>), ReconError> {
    let (mut found, mut failed) = (Vec::new(), Vec::new());
    for a in attempts {
        let call = crate::engine::lookup_call(store, a).await?;
        let outcome = if a.is_refund() {
            gateway.lookup_refund(&call).await
        } else {
            gateway.lookup(&call).await
        };
        found.extend(confirm_missing(a, &outcome).map_err(ReconError::Lookup)?);
        if let (true, LookupOutcome::Declined { code, .. }) = (a.is_refund(), &outcome) {
            failed.push((a.clone(), code.clone()));
        }
    }
    Ok((found, failed))
}

enum Settled {
    Resolved(ResolvedLine),
    InFlight(Uuid),
    Case(Box<Finding>),
    /// Someone else settled it the same way.
    Nothing,
}

/// Moves the attempt to `APROBADO` with the record's id; on a lost race,
/// judges the attempt again as it now is.
async fn settle(store: &Store, r: &Resolution) -> Result<Settled, StoreError> {
    let evidence = evidence(&r.record);
    let mut seen = r.attempt.clone();
    for _ in 0..RESOLVE_TRIES {
        let mut change = Change::new(Some(Event::Approved), CAUSE, ACTOR);
        change.charge_id = Some(&r.record.id);
        change.evidence = Some(&evidence);
        match store.apply(&seen, &change).await? {
            Applied::Moved(_) => {
                info!(attempt = %seen.id, from = %seen.state, id = %r.record.id, "settled by reconciliation");
                return Ok(Settled::Resolved(ResolvedLine {
                    attempt_id: seen.id,
                    from: seen.state,
                    gateway_id: r.record.id.clone(),
                }));
            }
            Applied::Lost => seen = store.load(seen.id).await?.0,
        }
        match judge(&r.record, Some(&seen), 1) {
            Verdict::Resolve => continue,
            Verdict::Matched => return Ok(Settled::Nothing),
            Verdict::InFlight => return Ok(Settled::InFlight(seen.id)),
            Verdict::Case(f) => return Ok(Settled::Case(Box::new(f))),
        }
    }
    warn!(attempt = %seen.id, "attempt kept changing while being settled; the next run looks again");
    Ok(Settled::InFlight(seen.id))
}

/// What the transition log keeps of the record that settled an attempt.
fn evidence(g: &GatewayRecord) -> Evidence {
    Evidence {
        call: "reconciliation".into(),
        http_status: None,
        error_kind: "ok".into(),
        lookup_result: Some("approved".into()),
        elapsed_ms: 0,
        detail: Some(format!(
            "listed by the gateway as approved: {} {} {} under our key, executed {}",
            g.id,
            crate::domain::decimal(g.amount_minor, &g.currency),
            g.currency,
            g.at
        )),
        card_brand: None,
    }
}

fn report(
    window: &Window,
    charges: &[GatewayRecord],
    refunds: &[GatewayRecord],
    ours: usize,
    findings: &[Finding],
    written: &[crate::store::CaseWrite],
) -> Report {
    let count = |s: CaseStatus| written.iter().filter(|w| w.status == s).count();
    let cases = findings
        .iter()
        .zip(written)
        .map(|(f, w)| CaseLine::of(f, w))
        .collect();
    Report {
        window: *window,
        gateway_charges: charges.len(),
        gateway_refunds: refunds.len(),
        ours,
        opened: count(CaseStatus::New),
        already_open: count(CaseStatus::AlreadyOpen),
        already_resolved: count(CaseStatus::AlreadyResolved),
        cases,
        resolved: Vec::new(),
        in_flight: Vec::new(),
        refunds_marked: Vec::new(),
        gateway_double_charges: findings
            .iter()
            .filter(|f| f.kind == CaseKind::DoubleCharge)
            .filter(|f| f.details["unrefunded"].as_u64().unwrap_or(2) >= 2)
            .count(),
    }
}

impl Report {
    /// The report for a person.
    pub fn render(&self) -> String {
        let mut out = format!(
            "reconciliation of {}\n  gateway: {} charges, {} refunds listed\n  ours:    {} attempts compared\n  cases:   {} opened (new), {} already open, {} already resolved\n",
            self.window,
            self.gateway_charges,
            self.gateway_refunds,
            self.ours,
            self.opened,
            self.already_open,
            self.already_resolved
        );
        for c in &self.cases {
            out.push_str(&c.shown(true));
        }
        out.push_str(&format!(
            "  orders charged twice at the gateway, not yet refunded: {}\n",
            self.gateway_double_charges
        ));
        out.push_str(&format!("  auto-resolved: {}\n", self.resolved.len()));
        for r in &self.resolved {
            out.push_str(&format!(
                "    attempt {}  {} -> APROBADO ({})\n",
                r.attempt_id, r.from, r.gateway_id
            ));
        }
        out.push_str(&format!(
            "  in flight (left to their workers): {}\n",
            self.in_flight.len()
        ));
        if !self.refunds_marked.is_empty() {
            out.push_str(&format!(
                "  refunds the gateway settled the other way, marked (see their cases): {}\n",
                self.refunds_marked.len()
            ));
            for id in &self.refunds_marked {
                out.push_str(&format!("    attempt {id}\n"));
            }
        }
        out
    }
}

fn status_word(s: CaseStatus) -> &'static str {
    match s {
        CaseStatus::New => "new",
        CaseStatus::AlreadyOpen => "already open",
        CaseStatus::AlreadyResolved => "already resolved",
    }
}
