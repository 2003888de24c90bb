//! Sending: the claim (`EN_PROCESO`, the lease), a two-step gateway's
//! create and its record (`Prepared`), the call, and the answer recorded
//! through the compare-and-set; a stored row that cannot be sent goes to
//! finance instead.
//!
//! Invariant: only the lease holder sends, always with the attempt's own
//! key; a two-step gateway's object is recorded before anything confirms
//! it, and an attempt that has one confirms that one, never a new one.

use tracing::{debug, error, info, warn};

use std::time::Duration;

use super::{Engine, Written, snapshot};
use crate::breaker::Health;
use crate::domain::{
    Amount, Currency, Customer, IdempotencyKey, InputError, OrderId, PaymentMethod,
};
use crate::gateway::{ChargeCall, ChargeOutcome, Deferral, Prepared, RefundCall};
use crate::policy::{Action, decide};
use crate::state::Event;
use crate::store::{
    Applied, Attempt, Change, CheckRecord, ClaimPlan, Hold, Lease, Store, StoreError, send_held,
};

impl Engine {
    /// What to send for `a`: its charge, or its refund of the charge it
    /// refers to. `Err` when the stored row fails validation.
    async fn call_for(&self, a: &Attempt) -> Result<Result<Call, InputError>, StoreError> {
        let Some(charge) = a.refund_of else {
            return Ok(charge_call(a).map(Call::Charge));
        };
        let (charge, _) = self.store.load(charge).await?;
        Ok(refund_call(a, &charge).map(Call::Refund))
    }

    /// Takes the lease (`EN_PROCESO`) with `event`, then sends with the
    /// attempt's own key and records the answer.
    pub(super) async fn send(
        &self,
        seen: &Attempt,
        event: Event,
        cause: &str,
        check: Option<(CheckRecord, &crate::gateway::Evidence)>,
    ) -> Result<Written, StoreError> {
        let call = match self.call_for(seen).await? {
            Ok(call) => call,
            Err(e) => return self.unsendable(seen, &e, check).await.map(|()| None),
        };
        let mut claim = self.claim(event, cause);
        self.slot().await;
        // A two-step gateway's create is a call of its own.
        if self.gateway.two_step() && seen.gateway_ref.is_none() && matches!(call, Call::Charge(_))
        {
            self.slot().await;
        }
        if let Some((record, evidence)) = check {
            claim.add_check = Some(record);
            claim.evidence = Some(evidence);
        }
        let claimed = match self.store.apply(seen, &claim).await {
            Ok(Applied::Moved(claimed)) => claimed,
            Ok(_) => {
                debug!("another worker claimed it first");
                return Ok(None);
            }
            Err(e) => match send_held(&e) {
                Some((hold, refusal)) => {
                    let check = claim.add_check.take();
                    return self.held(seen, hold, &refusal, check).await.map(|()| None);
                }
                None => return Err(e),
            },
        };
        self.deliver(claimed, call, event).await
    }

    /// The database's charge rule refused the claim (a first send, or a
    /// resend after a lookup found nothing): a case opened on the order, or
    /// it was cancelled with a reason that means "do not charge it", after
    /// this attempt was created. Nothing is sent; finance gets it
    /// (`EN_REVISION`) with the refusal, and decides it with the case.
    /// `check`: the lookup that led to the resend, recorded with the move.
    async fn held(
        &self,
        seen: &Attempt,
        hold: Hold,
        refusal: &str,
        check: Option<CheckRecord>,
    ) -> Result<(), StoreError> {
        warn!(
            hold = hold.as_str(),
            refusal, "the charge rule holds the order; not sending, finance reviews it"
        );
        let evidence = crate::gateway::Evidence {
            call: "charge".into(),
            error_kind: "order_held".into(),
            detail: Some(refusal.to_owned()),
            ..Default::default()
        };
        self.to_finance(seen, "order_held", &evidence, check).await
    }

    /// Whether `seen`, due in `PENDIENTE`, may be sent at `now` with its
    /// own key ([`crate::policy::key_guards_resend`]).
    pub(super) fn key_guards(&self, seen: &Attempt, now: chrono::DateTime<chrono::Utc>) -> bool {
        let key_age = (now - seen.created_at).to_std().unwrap_or_default();
        crate::policy::key_guards_resend(
            seen.check_count.max(0) as u32,
            key_age,
            self.cfg.key_lifetime,
            seen.gateway_ref.is_some(),
        )
    }

    /// `seen` waits in `PENDIENTE` to be sent again after an unknown
    /// outcome, but its key has outlived the gateway's memory of it: a send
    /// the gateway executed after all would not be replayed but made again.
    /// Nothing is sent; finance gets it (`KeyExpired`), and the review
    /// janitor looks for it in the gateway's listing meanwhile.
    pub(super) async fn key_outlived(&self, seen: &Attempt) -> Result<(), StoreError> {
        warn!(
            sends = seen.send_count,
            "key past the gateway's lifetime before a resend; not sending, finance reviews it"
        );
        let evidence = crate::gateway::Evidence {
            call: if seen.is_refund() { "refund" } else { "charge" }.into(),
            error_kind: "key_expired_before_resend".into(),
            detail: Some(format!(
                "sent {} time(s), once with an unknown outcome, and due to be sent again, \
                 but its key was created {} and the gateway keeps keys {}: a send the \
                 gateway executed after all would be made again, not replayed. Nothing \
                 was sent. The review janitor looks for it in the gateway's listing; \
                 failing that, find it in the gateway's dashboard and decide it with \
                 `cobro escalations resolve --as approve` or `--as decline`",
                seen.send_count,
                seen.created_at.format("%Y-%m-%d %H:%M UTC"),
                shown_lifetime(self.cfg.key_lifetime),
            )),
            ..Default::default()
        };
        let mut change = self.to_review(Event::KeyExpired, "key_expired_before_resend");
        change.evidence = Some(&evidence);
        if self.store.apply(seen, &change).await? == Applied::Lost {
            debug!("the attempt moved meanwhile; its next wake-up decides again");
        }
        Ok(())
    }

    /// The claim of `send`: `EN_PROCESO` with `event`, the lease for this
    /// worker, one more send.
    pub(super) fn claim<'a>(&'a self, event: Event, cause: &'a str) -> Change<'a> {
        let mut claim = Change::new(Some(event), cause, &self.actor);
        claim.lease = Lease::Take {
            owner: &self.cfg.worker_name,
            ttl: self.cfg.lease_ttl,
        };
        claim.add_send = true;
        claim
    }

    /// Sends `held`, claimed by the wake-up fetch's transaction
    /// ([`crate::store::ClaimPlan`]), and records the answer.
    pub(super) async fn send_claimed(&self, held: Box<Attempt>) -> Result<Written, StoreError> {
        match self.call_for(&held).await? {
            Ok(call) => self.deliver(held, call, Event::Claim).await,
            // Not reached: the claim was planned only for a row that builds
            // its call; should it not, finance gets it, as before a claim.
            Err(e) => self.unsendable(&held, &e, None).await.map(|()| None),
        }
    }

    /// Gives back `held`, claimed in the fetch and certainly not sent: back
    /// to `PENDIENTE` (`Event::Deferred`), parked (`park`) or due at once.
    pub(super) async fn give_back(
        &self,
        held: &Attempt,
        cause: &str,
        park: bool,
    ) -> Result<Written, StoreError> {
        let mut change = Change::new(Some(Event::Deferred), cause, &self.actor);
        if park {
            change.park = true;
        } else {
            change.act_in = Some(Duration::ZERO);
        }
        let written = self.store.apply(held, &change).await?.written();
        if park && written.is_some() {
            crate::metrics::parked();
        }
        Ok(written)
    }

    /// Sends what `claimed` (whose lease this worker holds, just taken with
    /// `event`) carries, with its own key, and records the answer.
    async fn deliver(
        &self,
        claimed: Box<Attempt>,
        call: Call,
        event: Event,
    ) -> Result<Written, StoreError> {
        if event == Event::Resend {
            crate::metrics::resent();
        }
        let (claimed, outcome) = match call {
            Call::Charge(c) => match self.prepare(claimed, c).await? {
                Some((held, c)) => {
                    let outcome = self.gateway.charge(&c).await;
                    (held, outcome)
                }
                None => return Ok(None),
            },
            Call::Refund(r) => {
                let outcome = self.gateway.refund(&r).await;
                (claimed, outcome)
            }
        };
        crate::metrics::send_answered(&outcome);
        info!(send = claimed.send_count, outcome = ?outcome_name(&outcome), "gateway answered");
        let down = self.observe(Health::of_charge(&outcome)).await;
        self.record_answer(&claimed, &outcome, down).await
    }

    /// Records what a send (or a two-step gateway's create) answered, on
    /// the attempt whose lease this worker holds; `down`: the breaker just
    /// opened.
    async fn record_answer(
        &self,
        claimed: &Attempt,
        outcome: &ChargeOutcome,
        down: bool,
    ) -> Result<Written, StoreError> {
        let mut change = match outcome {
            ChargeOutcome::Approved { charge_id, .. } => {
                let mut c = Change::new(Some(Event::Approved), "gateway_approved", &self.actor);
                c.charge_id = Some(charge_id);
                c
            }
            ChargeOutcome::Declined {
                code, charge_id, ..
            } => {
                let mut c = Change::new(Some(Event::Declined), "gateway_declined", &self.actor);
                c.decline_code = Some(code);
                c.charge_id = charge_id.as_deref();
                c.act_in = self.retry_after(claimed, code);
                c
            }
            ChargeOutcome::Unknown { .. } => {
                let mut c = Change::new(Some(Event::Unknown), "gateway_unknown", &self.actor);
                c.act_in = self.next_check_in(claimed.check_count);
                c
            }
            // Certainly not executed: wait, then send again with the same
            // key. Nothing to look up, no check spent.
            ChargeOutcome::Deferred {
                why, retry_after, ..
            } => {
                let cause = match why {
                    Deferral::NotSent => "gateway_not_sent",
                    Deferral::NotExecuted => "gateway_not_executed",
                    Deferral::Unconfirmed => "gateway_create_unanswered",
                };
                let mut c = Change::new(Some(Event::Deferred), cause, &self.actor);
                c.act_in = Some(self.defer_in(*retry_after));
                // The gateway is down as a whole: wait for its answer, not
                // for a backoff that would only fail again.
                c.park = down;
                c
            }
            // Not about the payment, and no retry cures it: finance; the
            // janitor keeps looking, as for anything that was sent.
            ChargeOutcome::Refused { .. } => {
                error!(evidence = ?outcome.evidence(), "the gateway refused the request itself; finance reviews it");
                let mut c = Change::new(Some(Event::Unsendable), "gateway_refused", &self.actor);
                c.act_in = Some(self.cfg.review.first());
                c
            }
        };
        change.evidence = Some(outcome.evidence());
        let written = self.store.apply(claimed, &change).await?.written();
        if written.is_none() {
            warn!("lease lost before the answer was recorded; a lookup will settle it");
        }
        Ok(written)
    }

    /// Before a charge goes, a two-step gateway's object (Stripe's
    /// PaymentIntent) must exist and be on the record: created unconfirmed
    /// with the attempt's key, its id written once (`Event::Prepared`),
    /// and only then confirmed. An attempt that already has one confirms
    /// that one, never a new one. `None` when nothing is to be sent now:
    /// the create failed (recorded like a send's answer) or the lease was
    /// lost before the id was recorded.
    async fn prepare(
        &self,
        claimed: Box<Attempt>,
        mut call: ChargeCall,
    ) -> Result<Option<(Box<Attempt>, ChargeCall)>, StoreError> {
        if let Some(existing) = &claimed.gateway_ref {
            call.gateway_ref = Some(existing.clone());
            return Ok(Some((claimed, call)));
        }
        match self.gateway.prepare(&call).await {
            Prepared::Ready => Ok(Some((claimed, call))),
            Prepared::Created {
                gateway_ref,
                evidence,
            } => {
                let mut record =
                    Change::new(Some(Event::Prepared), "payment_intent_created", &self.actor);
                record.lease = Lease::Take {
                    owner: &self.cfg.worker_name,
                    ttl: self.cfg.lease_ttl,
                };
                record.gateway_ref = Some(&gateway_ref);
                record.evidence = Some(&evidence);
                self.observe(Health::Answered).await;
                let Applied::Moved(held) = self.store.apply(&claimed, &record).await? else {
                    warn!(%gateway_ref, "lease lost before the PaymentIntent was recorded; not confirming it");
                    return Ok(None);
                };
                call.gateway_ref = held.gateway_ref.clone();
                Ok(Some((held, call)))
            }
            Prepared::Failed(outcome) => {
                crate::metrics::send_answered(&outcome);
                let down = self.observe(Health::of_charge(&outcome)).await;
                self.record_answer(&claimed, &outcome, down).await?;
                Ok(None)
            }
        }
    }

    /// The stored row fails validation (edited by hand, or written by an
    /// older version with looser rules): nothing is sent; it goes to
    /// finance (`EN_REVISION`) with the field and the reason, and the lookup
    /// that led here, if any, is recorded with it.
    async fn unsendable(
        &self,
        seen: &Attempt,
        invalid: &InputError,
        check: Option<(CheckRecord, &crate::gateway::Evidence)>,
    ) -> Result<(), StoreError> {
        error!(%invalid, "stored attempt fails validation; not sending it, finance reviews it");
        let (record, lookup) = check.unzip();
        let evidence = unsendable_evidence(seen, invalid, lookup);
        self.to_finance(seen, "unsendable", &evidence, record).await
    }

    /// Gives `seen` to finance (`EN_REVISION`) unsent, with `cause`, its
    /// `evidence` and the lookup that led here, if any.
    async fn to_finance(
        &self,
        seen: &Attempt,
        cause: &str,
        evidence: &crate::gateway::Evidence,
        check: Option<CheckRecord>,
    ) -> Result<(), StoreError> {
        let mut change = Change::new(Some(Event::Unsendable), cause, &self.actor);
        // Sent before: the gateway may hold a charge, so the janitor keeps
        // looking. Never sent: there is nothing to find; finance decides.
        if seen.send_count > 0 {
            change.act_in = Some(self.cfg.review.first());
        }
        change.evidence = Some(evidence);
        change.add_check = check;
        if self.store.apply(seen, &change).await? == Applied::Lost {
            debug!("the attempt moved meanwhile; its next wake-up decides again");
        }
        Ok(())
    }
}

/// The fetch's claim ([`crate::wakeq::Wakes::claiming`]): the same claim
/// [`Engine::process_seen`] would write first, planned on the same pure
/// decision, for a charge that would be sent at once with nothing to wait
/// for: no rate limit, the breaker closed, sending not paused, a row that
/// builds its call. Anything else is left to the handler.
impl ClaimPlan for Engine {
    fn claim_for<'a>(
        &'a self,
        seen: &Attempt,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<Change<'a>> {
        let at_once = !seen.is_refund()
            && self.pace.as_ref().is_none_or(|p| !p.limits())
            && !self.gateway_down()
            && !self.held_back(seen)
            && decide(snapshot(seen), now) == Action::Send
            && self.key_guards(seen, now);
        (at_once && sendable(seen)).then(|| self.claim(Event::Claim, "claim"))
    }

    fn unclaim(&self) -> Change<'_> {
        let mut change = Change::new(
            Some(Event::Deferred),
            "claim_released_shutdown",
            &self.actor,
        );
        change.act_in = Some(Duration::ZERO);
        change
    }
}

/// A key lifetime as people say it: "24 h", or seconds when not whole hours.
fn shown_lifetime(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s => format!("{s} s"),
    }
}

fn outcome_name(o: &ChargeOutcome) -> &'static str {
    match o {
        ChargeOutcome::Approved { .. } => "approved",
        ChargeOutcome::Declined { .. } => "declined",
        ChargeOutcome::Unknown { .. } => "unknown",
        ChargeOutcome::Deferred { why, .. } => why.as_str(),
        ChargeOutcome::Refused { .. } => "refused",
    }
}

/// What a send carries to the gateway.
enum Call {
    Charge(ChargeCall),
    Refund(RefundCall),
}

/// What the transition log keeps for an attempt that cannot be sent: the
/// call that was not made, `invalid_stored_row`, and the refusal (`invalid
/// <field>: <reason>`); after a lookup, its status and answer too.
fn unsendable_evidence(
    a: &Attempt,
    invalid: &InputError,
    lookup: Option<&crate::gateway::Evidence>,
) -> crate::gateway::Evidence {
    crate::gateway::Evidence {
        call: if a.is_refund() { "refund" } else { "charge" }.into(),
        http_status: lookup.and_then(|l| l.http_status),
        error_kind: "invalid_stored_row".into(),
        lookup_result: lookup.and_then(|l| l.lookup_result.clone()),
        detail: Some(invalid.to_string()),
        ..Default::default()
    }
}

/// The refund call for `refund` of the approved `charge`: against the
/// charge's own gateway id, or, for the refund of a gateway-side duplicate,
/// against the duplicate's (the charge is then only its anchor).
fn refund_call(refund: &Attempt, charge: &Attempt) -> Result<RefundCall, InputError> {
    let charge_id = charge
        .gateway_charge_id
        .clone()
        .filter(|_| charge.state == crate::state::State::Aprobado)
        .ok_or_else(|| InputError::new("refund_of", "the refunded charge is not APROBADO"))?;
    let charge_id = refund.refund_of_gateway.clone().unwrap_or(charge_id);
    Ok(RefundCall {
        key: IdempotencyKey::from_uuid(refund.idempotency_key),
        charge_id,
        order_id: OrderId::parse(&refund.order_id)?,
        amount: Amount::parse(refund.amount_minor)?,
        currency: Currency::parse(&refund.currency)?,
    })
}

/// A charge whose stored row builds its call.
pub(super) fn sendable(a: &Attempt) -> bool {
    charge_call(a).is_ok()
}

/// Rebuilds the gateway call from the stored row. The row was validated on
/// the way in (the same rules on both backends); if it still fails to
/// parse, it was edited by hand or written by an older version: nothing is
/// sent and it goes to finance (`Event::Unsendable`).
fn charge_call(a: &Attempt) -> Result<ChargeCall, InputError> {
    Ok(ChargeCall {
        key: IdempotencyKey::from_uuid(a.idempotency_key),
        attempt_id: Some(a.id),
        order_id: OrderId::parse(&a.order_id)?,
        amount: Amount::parse(a.amount_minor)?,
        currency: Currency::parse(&a.currency)?,
        payment_method: a
            .payment_method
            .as_deref()
            .map(PaymentMethod::parse)
            .transpose()?,
        customer: a.customer.as_deref().map(Customer::parse).transpose()?,
        gateway_ref: a.gateway_ref.clone(),
        merchant_initiated: a.attempt_number > 1,
    })
}

/// When the last send of `a` that may have created a gateway object began
/// (its last claim to `EN_PROCESO`), for a charge with no object recorded:
/// a lookup through an index that lags (Stripe's search) believes a "not
/// found" only once this is old enough. `None` when there is nothing to
/// find that way (an object recorded, a refund, never sent).
pub(super) async fn last_sent(
    store: &Store,
    a: &Attempt,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
    if a.gateway_ref.is_some() || a.is_refund() || a.send_count == 0 {
        return Ok(None);
    }
    Ok(store
        .transitions(a.id)
        .await?
        .iter()
        .rev()
        .find(|t| t.to_state == crate::state::State::EnProceso.as_str())
        .map(|t| t.at))
}
