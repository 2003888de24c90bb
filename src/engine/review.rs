//! The review janitor's handler: an attempt in `EN_REVISION` whose next
//! check is due is looked up again, and settled when the gateway answers
//! definitely. When it is due and how a listing is read are decided in
//! [`crate::janitor`].
//!
//! Invariant: the janitor never sends and never makes a key. It takes the
//! lease without changing the state (so finance cannot decide over the
//! answer it is fetching), asks the gateway with no transaction open, and
//! records through the compare-and-set [`Store::apply`]: `Approved` or
//! `Declined` through the state machine, anything else a new due time in
//! `EN_REVISION` on the slow schedule, measured from when it entered review.

use tracing::{debug, info};

use super::Engine;
use crate::gateway::{Listed, LookupOutcome};
use crate::janitor::{decline_requested, entered_review, listing_outcome, listing_window};
use crate::state::{Event, State};
use crate::store::{Applied, Attempt, Change, CheckRecord, Lease, StoreError, Transition};

impl Engine {
    /// What the gateway's listing says of `held`'s key, over the window its
    /// sends could have run in (`log` is its transition log). The answer
    /// that stays valid past the key's lifetime: a lookup by key would say
    /// "not found" whatever happened, the listing shows what it executed.
    pub(super) async fn listed(&self, held: &Attempt, log: &[Transition]) -> LookupOutcome {
        let kind = if held.is_refund() {
            Listed::Refunds
        } else {
            Listed::Charges
        };
        let window = listing_window(log, held.created_at, self.cfg.not_found.max_processing);
        let listed = self.gateway.list(kind, window.0, window.1).await;
        listing_outcome(kind, listed, held.idempotency_key, window)
    }

    /// The write that hands an attempt to finance (`ChecksExhausted`,
    /// `KeyExpired`), with the janitor's first check scheduled.
    pub(super) fn to_review<'a>(&'a self, event: Event, cause: &'a str) -> Change<'a> {
        let mut c = Change::new(Some(event), cause, &self.actor);
        c.act_in = Some(self.cfg.review.first());
        c
    }

    /// Whether the last send of `held` (its last move into `EN_PROCESO`)
    /// began longer ago than the gateway may take to show what it executed,
    /// by the database's clock of the lease just taken: a "not found" then
    /// means the gateway never executed it.
    fn sent_long_ago(&self, held: &Attempt, log: &[Transition]) -> bool {
        let sent = State::EnProceso.as_str();
        log.iter()
            .rev()
            .find(|t| t.to_state == sent)
            .and_then(|t| (held.updated_at - t.at).to_std().ok())
            .is_some_and(|since| since >= self.cfg.not_found.max_processing)
    }

    /// `EN_REVISION` and due: look it up again (by key within the key's
    /// lifetime, in the gateway's listing past it) and settle it, or
    /// schedule the next check.
    pub(super) async fn review(&self, seen: &Attempt) -> Result<(), StoreError> {
        let scheduled_at = seen.next_action_at.unwrap_or(seen.updated_at);
        self.slot().await;
        let mut take = Change::new(None, "review_check", &self.actor);
        take.lease = Lease::Take {
            owner: &self.cfg.worker_name,
            ttl: self.cfg.lease_ttl,
        };
        let Applied::Moved(held) = self.store.apply(seen, &take).await? else {
            return Ok(());
        };
        // Rare (minutes to a day apart): one read of the log is fine.
        let log = self.store.transitions(held.id).await?;
        let key_age = (held.updated_at - held.created_at)
            .to_std()
            .unwrap_or_default();
        // Finance asked to decline it and its payment object is recorded:
        // asked by that object (valid at any age), cancelled first if it
        // could still succeed.
        let asked = decline_requested(&log);
        let make_final = held.gateway_ref.is_some() && asked;
        // Finance asked to decline a charge with no payment object (a
        // one-step gateway) or a refund, that was sent: recorded only on
        // the gateway's word, a decline or no record of it long after the
        // send (until its execution ends, a send is on no dashboard; and
        // declining a refund frees its amount to be refunded again).
        let sent_decline = asked && (held.is_refund() || held.gateway_ref.is_none());
        let by_key = key_age < self.cfg.key_lifetime || make_final;
        let outcome = if by_key {
            match self
                .lookup_or_park(&held, "review_parked_gateway_unreachable", make_final)
                .await?
            {
                Some(outcome) => outcome,
                None => return Ok(()),
            }
        } else {
            self.listed(&held, &log).await
        };
        let via = if by_key { "lookup" } else { "listing" };
        let record = CheckRecord {
            scheduled_at,
            started_at: held.updated_at,
        };
        let evidence = outcome.evidence();
        let mut change = match &outcome {
            LookupOutcome::Approved { charge_id, .. } => {
                let cause = if by_key {
                    "review_lookup_approved"
                } else {
                    "review_listing_approved"
                };
                let mut c = Change::new(Some(Event::Approved), cause, &self.actor);
                c.charge_id = Some(charge_id);
                c
            }
            LookupOutcome::Declined {
                code, charge_id, ..
            } => {
                let cause = if make_final || sent_decline {
                    "finance_decline_confirmed"
                } else if by_key {
                    "review_lookup_declined"
                } else {
                    "review_listing_declined"
                };
                let mut c = Change::new(Some(Event::Declined), cause, &self.actor);
                c.decline_code = Some(code);
                c.charge_id = charge_id.as_deref();
                c.act_in = self.retry_after(&held, code);
                c
            }
            LookupOutcome::NotFound { .. } if sent_decline && self.sent_long_ago(&held, &log) => {
                let mut c = Change::new(
                    Some(Event::Declined),
                    "finance_decline_confirmed",
                    &self.actor,
                );
                c.decline_code = Some("not_found_at_gateway");
                c
            }
            LookupOutcome::NotFound { .. }
            | LookupOutcome::Failed { .. }
            | LookupOutcome::Deferred { .. } => {
                let cause = match &outcome {
                    LookupOutcome::NotFound { .. } => "review_not_found",
                    LookupOutcome::Failed { .. } => "review_lookup_failed",
                    _ => "review_lookup_deferred",
                };
                // From when it entered review, on the database's clock; a
                // missing entry row (never expected) counts from now.
                let now = self.store.now().await?;
                let entered = entered_review(&log).unwrap_or(held.updated_at);
                let next = self.cfg.review.next_after(entered, now);
                let mut c = Change::new(None, cause, &self.actor);
                c.act_in = Some((next - now).to_std().unwrap_or_default());
                info!(%next, via, cause, "still in review; next automatic check");
                c
            }
        };
        change.evidence = Some(evidence);
        // A lookup that never reached the gateway is not a check.
        if !matches!(outcome, LookupOutcome::Deferred { .. }) {
            change.add_check = Some(record);
        }
        match self.store.apply(&held, &change).await? {
            Applied::Moved(now) => {
                if now.state != held.state {
                    info!(state = %now.state, via, "the janitor settled an attempt in review");
                }
            }
            Applied::Lost => debug!("the attempt moved meanwhile; its next wake-up decides"),
        }
        Ok(())
    }
}
