//! A card its network updated (Stripe's account updater:
//! `payment_method.automatically_updated`, `payment_method.updated`; the
//! simulator's `payment_method.updated`): a scheduled business retry that
//! charges that payment method is pulled forward to
//! `max(now + COBRO_CARD_UPDATED_RETRY_DELAY, the earliest time the card
//! network's advice allows)`, never later than it was scheduled.
//!
//! Invariant: the decisions and the flow ([`pull_forward`]) are shared by
//! both backends, which hold only the SQL that finds the retries, in the
//! webhook's transaction, rows locked (`store::tx`); only the retry's time changes, through the state machine's
//! `RetryNow` on a `RECHAZADO` attempt, logged as `card_updated` with the
//! event as evidence. Nothing else about the attempt changes.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::change::{Applied, Change, Plan, plan};
use super::tx::Tx;
use super::webhooks::{IncomingEvent, WebhookResult};
use super::{Attempt, StoreError};
use crate::gateway::Evidence;
use crate::gateway::advice::{Advice, parse_stored};
use crate::retry::RetryPolicy;
use crate::state::{Event, InvalidTransition, State};

/// How soon after the decline the network's advice lets `seen` be retried
/// (`None`: never). The decline is at most as old as the attempt's last
/// change, so this errs late, never early.
fn not_before(seen: &Attempt) -> Option<DateTime<Utc>> {
    match seen.decline_code.as_deref().map(|c| parse_stored(c).1) {
        Some(Advice::DoNotRetry) => None,
        Some(Advice::RetryAfter(d)) => {
            Some(seen.updated_at + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX))
        }
        Some(Advice::None) | None => Some(DateTime::<Utc>::MIN_UTC),
    }
}

/// The new delay of `seen`'s scheduled retry, when pulling it forward
/// moves it earlier: `None` for anything but a declined charge with a
/// retry scheduled, one the advice forbids, or one already due sooner.
fn pulled_forward(seen: &Attempt, now: DateTime<Utc>, delay: Duration) -> Option<Duration> {
    let due = seen.next_action_at?;
    if seen.state != State::Rechazado || seen.is_refund() {
        return None;
    }
    let soonest = now + chrono::Duration::from_std(delay).ok()?;
    let at = soonest.max(not_before(seen)?);
    (at < due).then(|| (at - now).to_std().unwrap_or_default())
}

/// The evidence the move leaves in the transition log.
fn evidence(ev: &IncomingEvent, seen: &Attempt, act_in: Duration) -> Evidence {
    Evidence {
        call: "webhook".into(),
        error_kind: "card_updated".into(),
        lookup_result: Some("card_updated".into()),
        detail: Some(format!(
            "{} {}: the card was updated; retry moved from {} to {}s from now",
            ev.event_type,
            ev.event_id,
            seen.next_action_at
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_default(),
            act_in.as_secs()
        )),
        ..Default::default()
    }
}

/// The write: the retry due in `act_in`, nothing else.
fn change<'a>(
    seen: &Attempt,
    act_in: Duration,
    actor: &'a str,
    evidence: &'a Evidence,
) -> Result<(Change<'a>, Plan<'a>), InvalidTransition> {
    let mut c = Change::new(Some(Event::RetryNow), "card_updated", actor);
    c.act_in = Some(act_in);
    c.evidence = Some(evidence);
    let p = plan(seen, &c)?;
    Ok((c, p))
}

/// Pulls forward, inside the webhook's transaction, each scheduled retry
/// that charges `payment_method` (rows locked) when that moves it earlier;
/// the retries it moved.
pub(crate) async fn pull_forward(
    tx: &mut Tx,
    ev: &IncomingEvent,
    payment_method: &str,
    policy: &RetryPolicy,
    actor: &str,
) -> Result<Vec<Uuid>, StoreError> {
    let due = tx.retries_charging(payment_method).await?;
    let now = tx.now().await?;
    let mut moved = Vec::new();
    for seen in &due {
        let Some(act_in) = pulled_forward(seen, now, policy.card_updated_delay()) else {
            continue;
        };
        let why = evidence(ev, seen, act_in);
        let Ok((change, plan)) = change(seen, act_in, actor, &why) else {
            continue;
        };
        if let Applied::Moved(_) = tx.apply(seen, &change, &plan).await? {
            moved.push(seen.id);
        }
    }
    Ok(moved)
}

/// What the event did: the retries it moved, or nothing.
pub(crate) fn result(moved: Vec<Uuid>) -> (WebhookResult, Option<String>) {
    if moved.is_empty() {
        return (
            WebhookResult::Ignored,
            Some("no scheduled retry of that payment method to pull forward".into()),
        );
    }
    let detail = format!("{} scheduled retries pulled forward", moved.len());
    (
        WebhookResult::Rescheduled { attempt_ids: moved },
        Some(detail),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declined(code: &str, declined_ago_h: i64, due_in_h: i64, now: DateTime<Utc>) -> Attempt {
        Attempt {
            id: Uuid::new_v4(),
            order_id: "o".into(),
            amount_minor: 2_000,
            currency: "USD".into(),
            payment_method: Some("pm_x".into()),
            customer: None,
            idempotency_key: Uuid::new_v4(),
            state: State::Rechazado,
            kind: "initial".into(),
            refund_of: None,
            attempt_number: 1,
            gateway_charge_id: None,
            decline_code: Some(code.into()),
            check_count: 0,
            send_count: 1,
            next_action_at: Some(now + chrono::Duration::hours(due_in_h)),
            lease_owner: None,
            lease_expires_at: None,
            version: 3,
            last_evidence: None,
            created_at: now - chrono::Duration::hours(declined_ago_h),
            updated_at: now - chrono::Duration::hours(declined_ago_h),
            parked_since: None,
            gateway_ref: None,
            cancel_reason: None,
            refund_of_gateway: None,
        }
    }

    #[test]
    fn a_retry_moves_earlier_only_as_far_as_the_advice_allows() {
        let now = Utc::now();
        let delay = Duration::from_secs(600);
        let h = |n: u64| Duration::from_secs(n * 3600);
        // (code, declined hours ago, due in hours) -> new delay
        let table: [(&str, i64, i64, Option<Duration>); 6] = [
            ("insufficient_funds", 1, 72, Some(delay)),
            // Due sooner than the delay: left alone, never later.
            ("insufficient_funds", 1, 0, None),
            // Mastercard MAC 25: not before 24 h after the decline.
            ("insufficient_funds/retry_after_24h", 1, 72, Some(h(23))),
            ("insufficient_funds/retry_after_24h", 30, 72, Some(delay)),
            // The advice's time is already the schedule: nothing earlier.
            ("insufficient_funds/retry_after_24h", 1, 23, None),
            ("insufficient_funds/do_not_try_again", 1, 72, None),
        ];
        for (code, ago, due, want) in table {
            let got = pulled_forward(&declined(code, ago, due, now), now, delay);
            let close = match (got, want) {
                (Some(g), Some(w)) => g.abs_diff(w) < Duration::from_secs(2),
                (g, w) => g == w,
            };
            assert!(
                close,
                "{code} {ago}h ago, due in {due}h: {got:?}, want {want:?}"
            );
        }
        let mut approved = declined("insufficient_funds", 1, 72, now);
        approved.state = State::Aprobado;
        assert_eq!(pulled_forward(&approved, now, delay), None);
    }
}
