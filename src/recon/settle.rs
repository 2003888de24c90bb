//! The settlement check (seed 03's third daily search: "pagos marcados
//! aprobados en tu sistema sin liquidación"): every APROBADO charge of a
//! day against the gateway's balance transactions and payouts.
//!
//! - settled (a balance transaction of the charge, `available`): its gross,
//!   fee and net are stored for finance; a fee other than the contract's
//!   (`COBRO_SETTLEMENT_FEE`) opens `fee_mismatch`, a gross or currency
//!   other than ours opens `amount_mismatch` (and nothing is stored);
//! - not settled `COBRO_SETTLEMENT_DELAY` after the attempt was created:
//!   `unsettled`; younger: left for a later run;
//! - a payout whose amount is not the net of its lines: `payout_mismatch`.
//!
//! Invariant: as the charge reconciliation: the comparison is pure
//! ([`compare`]), every gateway call comes before any write, a failed or
//! throttled listing (429) opens nothing and stores nothing (the run is
//! deferred), and cases carry stable dedupe keys (`unsettled:<attempt>`,
//! `fee_mismatch:<txn>`, `payout_mismatch:<payout>`), so a re-run opens
//! nothing new. The daily run of the worker checks the day whose charges
//! are now `COBRO_SETTLEMENT_DELAY` old, under its own run claim (the
//! window `[day, day end + delay)`, which no charge reconciliation uses).

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use clap::Args;
use serde::Serialize;
use serde_json::json;
use tracing::{info, warn};
use uuid::Uuid;

use super::{CaseKind, Finding, Window};
use crate::domain::decimal;
use crate::domain::settlement::{BalanceLine, FeeRule, PayoutLine, SettledCharge};
use crate::gateway::{Gateway, SettleError, Settlement};
use crate::state::State;
use crate::store::{Attempt, CaseStatus, ReconScope, Store, StoreError};

/// The settlement settings (flags or environment).
#[derive(Debug, Clone, Args)]
pub struct SettlementArgs {
    /// How long after an APROBADO charge was created its settlement may
    /// take before an `unsettled` case opens (Stripe pays out on a rolling
    /// 2-7 day schedule, up to 14 days in some countries).
    #[arg(long, env = "COBRO_SETTLEMENT_DELAY", default_value = "7d", value_parser = parse_delay)]
    pub settlement_delay: Duration,
    /// The fee the contract sets per charge, `<percent>%+<fixed minor
    /// units>` (`2.9%+30`), or `off` (fees are recorded, not checked).
    #[arg(long, env = "COBRO_SETTLEMENT_FEE", default_value = "off", value_parser = parse_fee)]
    pub settlement_fee: FeeRule,
}

/// `COBRO_SETTLEMENT_DELAY`: 1 s to 60 days.
pub fn parse_delay(raw: &str) -> Result<Duration, String> {
    let d = crate::backoff::parse_duration_arg(raw.trim())?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(60 * 86_400) {
        return Err(format!("{raw:?} must be between 1s and 60d"));
    }
    Ok(d)
}

fn parse_fee(raw: &str) -> Result<FeeRule, String> {
    FeeRule::parse(raw).map_err(|e| e.reason)
}

#[derive(Debug, thiserror::Error)]
pub enum SettleRunError {
    #[error("{0}; nothing was opened or stored")]
    Gateway(#[from] SettleError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SettleRunError {
    /// The gateway asked us to slow down: the run is deferred, not failed.
    pub fn is_deferred(&self) -> bool {
        matches!(self, SettleRunError::Gateway(SettleError::Throttled { .. }))
    }
}

/// What the pure comparison decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettleComparison {
    pub settled: Vec<SettledCharge>,
    pub findings: Vec<Finding>,
    /// APROBADO charges not settled yet and younger than the delay.
    pub waiting: Vec<Uuid>,
}

/// Compares our APROBADO charges created in `window` with the gateway's
/// lines and payouts, at `now`.
pub fn compare(
    window: &Window,
    now: DateTime<Utc>,
    delay: Duration,
    fee: FeeRule,
    settlement: &Settlement,
    ours: &[Attempt],
) -> SettleComparison {
    let by_source: HashMap<&str, &BalanceLine> = settlement
        .lines
        .iter()
        .filter(|l| l.is_settled())
        .map(|l| (l.source.as_str(), l))
        .collect();
    let delay = TimeDelta::from_std(delay).unwrap_or(TimeDelta::MAX);
    let mut out = SettleComparison::default();
    let charges = ours
        .iter()
        .filter(|a| !a.is_refund() && a.state == State::Aprobado && window.contains(a.created_at));
    for a in charges {
        let line = a
            .gateway_charge_id
            .as_deref()
            .and_then(|id| by_source.get(id).copied());
        match line {
            Some(l) if l.gross_minor != a.amount_minor || l.currency != a.currency => {
                out.findings.push(gross_mismatch(a, l));
            }
            Some(l) => {
                if let Some(expected) = fee.expected(l.gross_minor)
                    && expected != l.fee_minor
                {
                    out.findings.push(fee_mismatch(a, l, expected, fee));
                }
                out.settled.push(SettledCharge {
                    attempt_id: a.id,
                    order_id: a.order_id.clone(),
                    gateway_charge_id: l.source.clone(),
                    balance_txn: l.id.clone(),
                    gross_minor: l.gross_minor,
                    fee_minor: l.fee_minor,
                    net_minor: l.net_minor,
                    currency: l.currency.clone(),
                    payout: l.payout.clone(),
                    settled_at: l.created,
                });
            }
            None if now - a.created_at >= delay => out.findings.push(unsettled(a, now, delay)),
            None => out.waiting.push(a.id),
        }
    }
    for p in &settlement.payouts {
        if p.amount_minor != p.lines_net_minor {
            out.findings.push(payout_mismatch(p));
        }
    }
    out.findings
        .sort_by(|x, y| (x.kind, &x.dedupe_key).cmp(&(y.kind, &y.dedupe_key)));
    out
}

fn money(minor: i64, currency: &str) -> String {
    format!("{} {currency}", decimal(minor, currency))
}

fn unsettled(a: &Attempt, now: DateTime<Utc>, delay: TimeDelta) -> Finding {
    Finding {
        kind: CaseKind::Unsettled,
        dedupe_key: format!("unsettled:{}", a.id),
        order_id: Some(a.order_id.clone()),
        attempt_id: Some(a.id),
        gateway_ref: a.gateway_charge_id.clone(),
        details: json!({
            "reason": format!(
                "APROBADO here ({}), no settled balance transaction at the gateway {} h after it was created",
                money(a.amount_minor, &a.currency),
                delay.num_hours()
            ),
            "attempt_created_at": a.created_at,
            "checked_at": now,
        }),
    }
}

fn fee_mismatch(a: &Attempt, l: &BalanceLine, expected: i64, rule: FeeRule) -> Finding {
    Finding {
        kind: CaseKind::FeeMismatch,
        dedupe_key: format!("fee_mismatch:{}", l.id),
        order_id: Some(a.order_id.clone()),
        attempt_id: Some(a.id),
        gateway_ref: Some(format!("{},{}", l.source, l.id)),
        details: json!({
            "reason": format!(
                "the gateway charged a fee of {} on {}; the contract ({rule}) says {}",
                money(l.fee_minor, &l.currency),
                money(l.gross_minor, &l.currency),
                money(expected, &l.currency)
            ),
            "line": l,
            "expected_fee_minor": expected,
        }),
    }
}

fn gross_mismatch(a: &Attempt, l: &BalanceLine) -> Finding {
    Finding {
        kind: CaseKind::AmountMismatch,
        dedupe_key: format!("amount_mismatch:settlement:{}", l.id),
        order_id: Some(a.order_id.clone()),
        attempt_id: Some(a.id),
        gateway_ref: Some(format!("{},{}", l.source, l.id)),
        details: json!({
            "reason": format!(
                "the gateway settled {} for a charge of {} here",
                money(l.gross_minor, &l.currency),
                money(a.amount_minor, &a.currency)
            ),
            "line": l,
        }),
    }
}

fn payout_mismatch(p: &PayoutLine) -> Finding {
    Finding {
        kind: CaseKind::PayoutMismatch,
        dedupe_key: format!("payout_mismatch:{}", p.id),
        order_id: None,
        attempt_id: None,
        gateway_ref: Some(p.id.clone()),
        details: json!({
            "reason": format!(
                "payout {} pays {}; the {} lines it carried net {}",
                p.id,
                money(p.amount_minor, &p.currency),
                p.lines.len(),
                money(p.lines_net_minor, &p.currency)
            ),
            "payout": p,
        }),
    }
}

/// What a settlement run found and did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SettleReport {
    pub check: &'static str,
    pub window: Window,
    /// Balance transactions of charges and payouts the gateway listed.
    pub lines: usize,
    pub payouts: usize,
    /// Settled charges recorded by this run (new rows).
    pub recorded: usize,
    pub settled: usize,
    pub waiting: usize,
    pub opened: usize,
    pub already_open: usize,
    pub already_resolved: usize,
    pub cases: Vec<super::CaseLine>,
}

impl SettleReport {
    pub fn render(&self) -> String {
        let mut out = format!(
            "settlement of {}\n  gateway: {} charge lines, {} payouts listed\n  settled: {} ({} newly recorded), waiting: {}\n  cases:   {} opened (new), {} already open, {} already resolved\n",
            self.window,
            self.lines,
            self.payouts,
            self.settled,
            self.recorded,
            self.waiting,
            self.opened,
            self.already_open,
            self.already_resolved
        );
        for c in &self.cases {
            out.push_str(&c.shown(false));
        }
        out
    }
}

/// Checks the settlement of our APROBADO charges created in `window`,
/// reading the gateway's lines and payouts of `[window.from, list_to)`.
pub async fn settle(
    store: &Store,
    gateway: &dyn Gateway,
    window: &Window,
    list_to: DateTime<Utc>,
    args: &SettlementArgs,
) -> Result<SettleReport, SettleRunError> {
    let listed = gateway
        .settlement(window.from, list_to.max(window.to))
        .await?;
    let ours = store.recon_attempts(window, &ReconScope::default()).await?;
    let now = store.now().await?;
    let cmp = compare(
        window,
        now,
        args.settlement_delay,
        args.settlement_fee,
        &listed,
        &ours,
    );
    let recorded = store.record_settlements(&cmp.settled).await?;
    let written = store.record_cases(window, &cmp.findings).await?;
    let count = |s: CaseStatus| written.iter().filter(|w| w.status == s).count();
    let report = SettleReport {
        check: "settlement",
        window: *window,
        lines: listed.lines.len(),
        payouts: listed.payouts.len(),
        recorded,
        settled: cmp.settled.len(),
        waiting: cmp.waiting.len(),
        opened: count(CaseStatus::New),
        already_open: count(CaseStatus::AlreadyOpen),
        already_resolved: count(CaseStatus::AlreadyResolved),
        cases: cmp
            .findings
            .iter()
            .zip(&written)
            .map(|(f, w)| super::CaseLine::of(f, w))
            .collect(),
    };
    info!(window = %window, opened = report.opened, settled = report.settled, "settlement check done");
    Ok(report)
}

/// The day whose charges are `delay` old at `now`, and the run's claim
/// window `[day, day end + delay)`.
pub fn due(now: DateTime<Utc>, delay: Duration) -> (Window, Window) {
    let delay = TimeDelta::from_std(delay).unwrap_or(TimeDelta::days(60));
    let day = Window::day((now - delay).date_naive() - TimeDelta::days(1));
    let claim = Window {
        from: day.from,
        to: day.to + delay,
    };
    (day, claim)
}

/// The worker's daily settlement run: claims the due day (one worker of
/// many) and checks it; a deferred or failed run is tried again after
/// `retry_after`.
pub async fn run_due(
    store: &Store,
    gateway: &dyn Gateway,
    args: &SettlementArgs,
    worker: &str,
    retry_after: Duration,
) -> Result<bool, StoreError> {
    let (day, claim_window) = due(store.now().await?, args.settlement_delay);
    let Some(claim) = store
        .claim_recon_run(&claim_window, worker, retry_after, super::STALE_AFTER)
        .await?
    else {
        return Ok(false);
    };
    let (ok, report) = match settle(store, gateway, &day, claim_window.to, args).await {
        Ok(r) => (true, serde_json::to_value(&r).unwrap_or_default()),
        Err(e) => {
            warn!(window = %day, error = %e, deferred = e.is_deferred(), "settlement check not done; tried again later");
            let what = if e.is_deferred() {
                "deferred"
            } else {
                "failed"
            };
            (
                false,
                json!({ "check": "settlement", "outcome": what, "error": e.to_string() }),
            )
        }
    };
    if !store.finish_recon_run(&claim, ok, &report).await? {
        warn!(window = %day, "the settlement claim was taken over before the run finished");
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_due_day_is_delay_old_and_its_claim_window_is_no_day_window() {
        let now = Utc.with_ymd_and_hms(2026, 12, 10, 3, 0, 0).unwrap();
        let (day, claim) = due(now, Duration::from_secs(7 * 86_400));
        assert_eq!(
            day.from,
            Utc.with_ymd_and_hms(2026, 12, 2, 0, 0, 0).unwrap()
        );
        assert_eq!(
            claim.to,
            Utc.with_ymd_and_hms(2026, 12, 10, 0, 0, 0).unwrap()
        );
        assert!(claim.to <= now);
        assert_ne!(claim, day);
    }

    #[test]
    fn delays_outside_one_second_to_sixty_days_are_refused() {
        assert!(parse_delay("0s").is_err());
        assert!(parse_delay("61d").is_err());
        assert_eq!(parse_delay("2d"), Ok(Duration::from_secs(2 * 86_400)));
    }
}
