//! News from the gateway that contradicts an attempt we hold as settled:
//! approved when we hold it `RECHAZADO`, declined when we hold it
//! `APROBADO`. The state machine refuses such news (a settled attempt does
//! not move), so it would vanish as a no-op; instead it opens a case for
//! finance and, for an approval after a decline, cancels the business
//! retry scheduled on the attempt, so the order is not charged again under
//! a new key.
//!
//! Invariant: the case and the cancellation are written in one transaction
//! (the webhook's own, when the news came by webhook); the case uses the
//! same dedupe key reconciliation would, so one discrepancy is one case.

use chrono::{DateTime, Utc};
use serde_json::json;
use tracing::warn;

use super::change::{Change, plan};
use super::tx::Tx;
use super::{Attempt, CaseStatus, Store, StoreError};
use crate::domain::{CaseKind, Finding, Window};
use crate::state::State;

/// A case to open, and whether to cancel the attempt's scheduled retry.
#[derive(Debug, Clone)]
pub struct Contradiction {
    pub finding: Finding,
    /// From the attempt's creation to the news, for the case's columns.
    pub window: Window,
    /// The attempt is `RECHAZADO` with a business retry scheduled: cancel it.
    pub cancel_retry: bool,
    /// The attempt is a refund the gateway settled the other way: mark it
    /// (its state does not move: settled states stay settled; finance sees
    /// the case).
    pub refund_mark: Option<RefundMark>,
}

/// What the gateway did to a refund after cobro settled it the other way;
/// the mark is set once, with a transition-log row, and never undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundMark {
    /// Failed after we held it `APROBADO` (`refund_failed_at`): its amount
    /// is free to be refunded again.
    FailedAfterSuccess,
    /// Made after we held it `RECHAZADO` (`refund_made_at`): its amount
    /// counts as refunded again, so it is not refunded twice.
    MadeAfterDecline,
}

impl RefundMark {
    /// The column the mark sets.
    pub(crate) fn column(self) -> &'static str {
        match self {
            RefundMark::FailedAfterSuccess => "refund_failed_at",
            RefundMark::MadeAfterDecline => "refund_made_at",
        }
    }

    /// The state the refund is held in, and stays in.
    pub(crate) fn state(self) -> State {
        match self {
            RefundMark::FailedAfterSuccess => State::Aprobado,
            RefundMark::MadeAfterDecline => State::Rechazado,
        }
    }

    /// The cause of its transition-log row.
    pub(crate) fn cause(self) -> &'static str {
        match self {
            RefundMark::FailedAfterSuccess => "refund_failed_after_success",
            RefundMark::MadeAfterDecline => "refund_made_after_decline",
        }
    }
}

impl Contradiction {
    /// The gateway approved `charge_id` (a charge, or a refund) under the
    /// key of `seen`, said by `source` (e.g. `webhook evt_1`), at `now`.
    /// `None` unless we hold `seen` as declined, or as approved as another
    /// object.
    pub fn approved(
        seen: &Attempt,
        charge_id: &str,
        source: &str,
        now: DateTime<Utc>,
    ) -> Option<Self> {
        if seen.state == State::Aprobado {
            return Self::approved_as_another(seen, charge_id, source, now);
        }
        if seen.state != State::Rechazado {
            return None;
        }
        if seen.is_refund() {
            return Some(Self::refunded(seen, charge_id, source, now));
        }
        let cancel_retry = seen.next_action_at.is_some();
        let reason = format!(
            "the gateway says charge {charge_id} under our key was approved ({source}); we hold the attempt as RECHAZADO{}",
            if cancel_retry {
                "; its scheduled business retry was cancelled"
            } else {
                ""
            }
        );
        let case = Self::case(
            seen,
            CaseKind::UnmatchedCharge,
            charge_id,
            reason,
            source,
            now,
        );
        Some(Self {
            cancel_retry,
            ..case
        })
    }

    /// The case about `seen` of `kind`, keyed `<kind>:<object>` and naming
    /// the gateway's `object`, with `reason`, said by `source` at `now`; no
    /// retry cancelled and no mark (a caller that needs them, or that names
    /// another gateway object, sets them).
    fn case(
        seen: &Attempt,
        kind: CaseKind,
        object: &str,
        reason: String,
        source: &str,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            finding: Finding {
                kind,
                dedupe_key: format!("{}:{object}", kind.as_str()),
                order_id: Some(seen.order_id.clone()),
                attempt_id: Some(seen.id),
                gateway_ref: Some(object.to_owned()),
                details: json!({
                    "reason": reason,
                    "ours": summary(seen),
                    "source": source,
                }),
            },
            window: window(seen, now),
            cancel_retry: false,
            refund_mark: None,
        }
    }

    /// The gateway approved `id` under the key of `seen`, which we hold
    /// `APROBADO` as another object: two approvals under one key (the
    /// customer charged, or refunded, twice) or news about something else.
    /// The same case reconciliation opens for it. `None` when it is ours.
    fn approved_as_another(
        seen: &Attempt,
        id: &str,
        source: &str,
        now: DateTime<Utc>,
    ) -> Option<Self> {
        let ours = seen.gateway_charge_id.as_deref()?;
        if ours == id {
            return None;
        }
        let (kind, what) = match seen.is_refund() {
            true => (CaseKind::UnmatchedRefund, "refund"),
            false => (CaseKind::UnmatchedCharge, "charge"),
        };
        let reason = format!(
            "the gateway says {what} {id} under our key was approved ({source}); we hold the attempt as APROBADO with {ours}: the same key approved twice, or news of something else; compare both at the gateway"
        );
        Some(Self::case(seen, kind, id, reason, source, now))
    }

    /// The gateway made refund `refund_id` under the key of `seen`, a refund
    /// we hold as declined: the money left, though our books say it did
    /// not, and the amount we hold as free may be refunded again. Finance
    /// sees the case before anyone refunds this charge again.
    fn refunded(seen: &Attempt, refund_id: &str, source: &str, now: DateTime<Utc>) -> Self {
        let reason = match seen.refund_of_gateway.as_deref() {
            None => format!(
                "the gateway says refund {refund_id} under our key succeeded ({source}); we hold the refund as RECHAZADO: it is marked made and its amount counts as refunded, so the charge is not refunded twice; settle it with the gateway, then close the case"
            ),
            Some(duplicate) => format!(
                "the gateway says refund {refund_id} under our key succeeded ({source}); we hold this refund of duplicate charge {duplicate} as RECHAZADO: it is marked made, unless another refund of {duplicate} already counts, in which case the duplicate was refunded twice at the gateway; settle it with the gateway, then close the case"
            ),
        };
        let case = Self::case(
            seen,
            CaseKind::UnmatchedRefund,
            refund_id,
            reason,
            source,
            now,
        );
        Self {
            refund_mark: Some(RefundMark::MadeAfterDecline),
            ..case
        }
    }

    /// News whose object is not the attempt its key names (`off` says how:
    /// another kind, amount or currency), said by `source` about the
    /// gateway's `object`: nothing moves; a case opens for finance.
    pub fn mismatched(
        seen: &Attempt,
        object: Option<&str>,
        off: &str,
        source: &str,
        now: DateTime<Utc>,
    ) -> Self {
        let named = object.map_or_else(|| seen.id.to_string(), str::to_owned);
        let reason = format!(
            "the gateway's news ({source}) under our key does not match the attempt: {off}; nothing was recorded from it"
        );
        let mut case = Self::case(seen, CaseKind::AmountMismatch, &named, reason, source, now);
        case.finding.gateway_ref = object.map(str::to_owned);
        case
    }

    /// The gateway declined (`code`) the charge, or failed the refund, we
    /// hold as `APROBADO`.
    pub fn declined(seen: &Attempt, code: &str, source: &str, now: DateTime<Utc>) -> Option<Self> {
        if seen.state != State::Aprobado {
            return None;
        }
        let reason = match seen.is_refund() {
            false => format!(
                "the gateway says the charge under our key was declined ({code}, {source}); we hold it as APROBADO"
            ),
            true => format!(
                "the gateway says the refund under our key failed ({code}, {source}) after we held it as APROBADO: the money stayed with the merchant and the amount can be refunded again"
            ),
        };
        let ours = seen.id.to_string();
        let mut case = Self::case(seen, CaseKind::MissingAtGateway, &ours, reason, source, now);
        case.finding.gateway_ref = seen.gateway_charge_id.clone();
        case.refund_mark = seen.is_refund().then_some(RefundMark::FailedAfterSuccess);
        Some(case)
    }
}

fn summary(a: &Attempt) -> serde_json::Value {
    json!({
        "attempt_id": a.id,
        "state": a.state,
        "amount_minor": a.amount_minor,
        "currency": a.currency,
        "idempotency_key": a.idempotency_key,
        "decline_code": a.decline_code,
        "gateway_charge_id": a.gateway_charge_id,
        "next_retry_at": a.next_action_at,
    })
}

/// From the attempt's creation to the news (never empty).
fn window(seen: &Attempt, now: DateTime<Utc>) -> Window {
    Window {
        from: seen.created_at,
        to: now.max(seen.created_at + chrono::Duration::milliseconds(1)),
    }
}

impl Store {
    /// Opens the case of `c` (once) and, if asked, cancels the attempt's
    /// scheduled business retry (a compare-and-set on the version seen; if
    /// the attempt moved meanwhile the case is still opened).
    pub async fn contradicted(
        &self,
        seen: &Attempt,
        c: &Contradiction,
        actor: &str,
    ) -> Result<Marked, StoreError> {
        let mut tx = self.begin_write().await?;
        let marked = contradicted_in(&mut tx, seen, c, actor).await?;
        tx.commit().await?;
        Ok(marked)
    }
}

/// The case of a contradiction and, if asked, the cancellation of the
/// attempt's scheduled business retry and the mark on a failed refund,
/// inside the caller's transaction (a webhook's, or its own).
pub(crate) async fn contradicted_in(
    tx: &mut Tx,
    seen: &Attempt,
    c: &Contradiction,
    actor: &str,
) -> Result<Marked, StoreError> {
    let case = tx.open_case(&c.window, &c.finding).await?;
    if c.cancel_retry {
        let change = Change::new(None, "retry_cancelled_contradicted", actor);
        let plan = plan(seen, &change).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        tx.apply(seen, &change, &plan).await?;
    }
    let Some(mark) = c.refund_mark else {
        return Ok(Marked::Nothing);
    };
    // A mark changes what is left to refund: it goes with its case. When
    // finance has already resolved that case, finance settled it with the
    // gateway, and the books are not changed behind its back.
    if case.status == CaseStatus::AlreadyResolved {
        warn!(attempt = %seen.id, case = case.id, mark = mark.cause(),
              "not marked: finance already resolved its case");
        return Ok(Marked::CaseResolved(case.id));
    }
    // Fenced like every write: on the version seen, a settled refund
    // not marked yet. Lost: it moved meanwhile, or is marked already.
    Ok(
        match tx
            .mark_refund(seen, mark, actor, &c.finding.details)
            .await?
        {
            true => Marked::Marked,
            false => Marked::Nothing,
        },
    )
}

/// What a contradiction did to its refund's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// Set now, with its log row.
    Marked,
    /// No mark asked for, or the refund moved or was marked before.
    Nothing,
    /// Not set: finance had already resolved the case (its id).
    CaseResolved(i64),
}
