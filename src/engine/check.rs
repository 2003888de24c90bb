//! `DESCONOCIDO`: the check. The worker takes the lease, asks the gateway
//! for the charge by its key, and acts on the answer: approved or declined
//! settles the attempt, "not found" after the grace re-sends with the same
//! key, a failed lookup schedules the next check (2-4-8-16-32 s, jittered)
//! until the checks run out and finance gets it; a throttled lookup is
//! deferred, never counted as a check.

use tracing::info;

use super::{Engine, Written};
use crate::gateway::LookupOutcome;
use crate::policy::{LookupPlan, after_lookup};
use crate::state::Event;
use crate::store::{Applied, Attempt, Change, CheckRecord, Lease, StoreError};

impl Engine {
    /// `DESCONOCIDO`: take the lease, look the charge up by key, act on it.
    pub(super) async fn check(&self, seen: &Attempt) -> Result<Written, StoreError> {
        let scheduled_at = seen.next_action_at.unwrap_or(seen.updated_at);
        self.slot().await;
        let mut take = Change::new(None, "check", &self.actor);
        take.lease = Lease::Take {
            owner: &self.cfg.worker_name,
            ttl: self.cfg.lease_ttl,
        };
        let Applied::Moved(held) = self.store.apply(seen, &take).await? else {
            return Ok(None);
        };
        let record = CheckRecord {
            scheduled_at,
            started_at: held.updated_at,
        };
        let Some(outcome) = self
            .lookup_or_park(&held, "lookup_parked_gateway_unreachable", false)
            .await?
        else {
            return Ok(None);
        };
        let checks_done = held.check_count as u32 + 1;
        let key_age = (held.updated_at - held.created_at)
            .to_std()
            .unwrap_or_default();
        let since_send = self.since_last_send(&held, &outcome).await?;
        let plan = after_lookup(
            &outcome,
            checks_done,
            key_age,
            self.cfg.key_lifetime,
            &self.cfg.schedule,
            since_send,
            self.cfg.not_found,
        );
        info!(check = checks_done, ?plan, "looked up");
        let evidence = outcome.evidence();
        if let (LookupPlan::Defer, LookupOutcome::Deferred { retry_after, .. }) = (plan, &outcome) {
            // Not a check: the count stays, the lookup is simply later.
            let mut later = Change::new(None, "lookup_deferred", &self.actor);
            later.act_in = Some(self.defer_in(*retry_after));
            later.evidence = Some(evidence);
            return Ok(self.store.apply(&held, &later).await?.written());
        }
        let mut change = match (plan, &outcome) {
            // Not found, but sending is paused: the check counts, and the
            // attempt waits, parked, to be looked up again on resume.
            (LookupPlan::Apply(Event::Resend), _) if self.held_back(&held) => {
                let mut c = Change::new(None, "lookup_not_found_sending_paused", &self.actor);
                c.park = true;
                c
            }
            (LookupPlan::Apply(Event::Resend), _) => {
                return self
                    .send(
                        &held,
                        Event::Resend,
                        "lookup_not_found",
                        Some((record, evidence)),
                    )
                    .await;
            }
            (LookupPlan::Apply(event), LookupOutcome::Approved { charge_id, .. }) => {
                let mut c = Change::new(Some(event), "lookup_approved", &self.actor);
                c.charge_id = Some(charge_id);
                c
            }
            (
                LookupPlan::Apply(event),
                LookupOutcome::Declined {
                    code, charge_id, ..
                },
            ) => {
                let mut c = Change::new(Some(event), "lookup_declined", &self.actor);
                c.decline_code = Some(code);
                c.charge_id = charge_id.as_deref();
                c.act_in = self.retry_after(&held, code);
                c
            }
            (LookupPlan::Apply(event @ Event::KeyExpired), _) => {
                self.to_review(event, "key_expired_not_found")
            }
            // Nothing the janitor could find, so no review check is
            // scheduled; finance decides.
            (LookupPlan::NeverSent, _) => Change::new(
                Some(Event::ChecksExhausted),
                "lookup_not_found_never_sent",
                &self.actor,
            ),
            (LookupPlan::Apply(event), _) => self.to_review(event, "checks_exhausted"),
            (LookupPlan::CheckAgain | LookupPlan::Defer, _) => {
                let mut c = Change::new(None, "lookup_failed", &self.actor);
                c.act_in = self.next_check_in(checks_done as i32);
                c
            }
            (LookupPlan::CheckAfter(at_least), _) => {
                let mut c = Change::new(None, "lookup_not_found_too_soon", &self.actor);
                c.act_in = self
                    .next_check_in(checks_done as i32)
                    .map(|d| d.max(at_least));
                c
            }
        };
        change.evidence = Some(evidence);
        change.add_check = Some(record);
        Ok(self.store.apply(&held, &change).await?.written())
    }
}
