//! `RECHAZADO` with a business retry due: the declined attempt is looked up
//! once (a decline the gateway contradicts is not retried), then a new
//! attempt with a new key is asked of the database, which alone decides
//! whether the order may be charged again (nothing approved, nothing live,
//! under the maximum and the card networks' caps). A refusal is recorded
//! with its reason, and the customer told when no retry will follow.

use tracing::{info, warn};

use super::{Engine, lookup_call};
use crate::breaker::Health;
use crate::gateway::LookupOutcome;
use crate::store::{Attempt, Change, Contradiction, NoticeKind, RetryError, StoreError};

impl Engine {
    /// `RECHAZADO` with a retry due: a new attempt with a new key, if the
    /// database agrees (nothing approved, nothing live, under the maximum).
    pub(super) async fn business_retry(&self, seen: &Attempt) -> Result<(), StoreError> {
        // Before a new key charges the order again, ask the gateway once
        // about the declined attempt: a decline we recorded may be
        // contradicted by what the gateway actually did. Asked in a way
        // valid now: by key within the key's lifetime, by the recorded
        // gateway object (a PaymentIntent id) past it, else in the
        // gateway's listing. A "not found" for an expired key clears
        // nothing.
        self.slot().await;
        let key_age = (chrono::Utc::now() - seen.created_at)
            .to_std()
            .unwrap_or_default();
        let outcome = if key_age < self.cfg.key_lifetime || seen.gateway_ref.is_some() {
            let call = lookup_call(&self.store, seen).await?;
            self.gateway.lookup(&call).await
        } else {
            let log = self.store.transitions(seen.id).await?;
            self.listed(seen, &log).await
        };
        crate::metrics::lookup_answered(&outcome);
        let down = self.observe(Health::of_lookup(&outcome)).await;
        match &outcome {
            LookupOutcome::Approved { charge_id, .. } => {
                let source = "the lookup before its business retry";
                if let Some(c) =
                    Contradiction::approved(seen, charge_id, source, chrono::Utc::now())
                {
                    warn!(%charge_id, "the gateway approved a charge we hold as declined: case opened, no retry");
                    self.store.contradicted(seen, &c, &self.actor).await?;
                }
                return Ok(());
            }
            LookupOutcome::Failed { .. } | LookupOutcome::Deferred { .. } => {
                // No answer: never charge again on a guess; ask again later.
                let retry_after = match &outcome {
                    LookupOutcome::Deferred { retry_after, .. } => *retry_after,
                    _ => None,
                };
                let mut later = Change::new(None, "retry_postponed_no_lookup", &self.actor);
                later.act_in = Some(self.defer_in(retry_after));
                later.evidence = Some(outcome.evidence());
                later.park = down;
                self.store.apply(seen, &later).await?;
                return Ok(());
            }
            LookupOutcome::Declined { .. } | LookupOutcome::NotFound { .. } => {}
        }
        let refused = match self
            .store
            .business_retry_capped(
                seen.id,
                self.cfg.retry.max_attempts(),
                self.cfg.retry.card_caps(),
                &self.actor,
                Some(seen.version),
            )
            .await
        {
            Ok(new) => {
                match &new.cap_override {
                    Some(reason) => warn!(
                        retry = %new.attempt_id, number = new.attempt_number, cap_override = %reason,
                        "business retry created past the card networks' caps: finance overrode them"
                    ),
                    None => {
                        info!(retry = %new.attempt_id, number = new.attempt_number, "business retry created")
                    }
                }
                return Ok(());
            }
            Err(RetryError::Db(e)) => return Err(StoreError::Db(e)),
            Err(RetryError::AlreadyHandled(_)) => return Ok(()), // another worker did it
            Err(refused) => refused,
        };
        // Already retried, approved meanwhile, or out of attempts: this
        // attempt's retry is over either way; clear its schedule. Out of
        // attempts, the customer is told the payment failed.
        info!(reason = %refused, "business retry not created");
        let why = crate::gateway::Evidence {
            call: "business_retry".into(),
            error_kind: match refused {
                RetryError::MaxAttempts(_) => "max_attempts",
                RetryError::CardCap(_) => "card_cap",
                RetryError::Held(hold, _) => hold.as_str(),
                _ => "not_retried",
            }
            .into(),
            detail: Some(refused.to_string()),
            ..Default::default()
        };
        let mut clear = Change::new(None, "retry_refused", &self.actor);
        clear.evidence = Some(&why);
        if matches!(refused, RetryError::MaxAttempts(_) | RetryError::CardCap(_)) {
            clear.notice = Some(NoticeKind::PaymentFailed);
        }
        self.store.apply(seen, &clear).await?;
        Ok(())
    }
}
