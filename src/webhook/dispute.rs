//! Stripe's `charge.dispute.created`: the customer disputed a charge with
//! their bank. It opens a case for finance (kind `dispute`), matched to our
//! attempt by the PaymentIntent the dispute names: the one recorded on the
//! attempt (one indexed read, whatever the attempt's day or state), or, for
//! the older shape that names only the charge, the day's attempts.
//!
//! Invariant: the case is opened before the event is stored, and opening it
//! is idempotent (its dedupe key is the dispute's id): a failure answers
//! 5xx with nothing stored, so Stripe's redelivery opens it then.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::event::STRIPE_DISPUTE_CREATED;
use crate::domain::text::{self, Kind};
use crate::recon::{CaseKind, Finding, Window};
use crate::store::{IncomingEvent, ReconScope, Store, StoreError};

/// Opens the case a dispute event calls for; nothing for other events.
pub async fn open_case(store: &Store, ev: &IncomingEvent) -> Result<(), StoreError> {
    if ev.event_type != STRIPE_DISPUTE_CREATED {
        return Ok(());
    }
    let body: Value = serde_json::from_str(&ev.payload).unwrap_or_default();
    let object = &body["data"]["object"];
    let code = |v: &Value| v.as_str().map(|s| text::stored(s, Kind::Code));
    // Ids are kept as they are or read as missing ([`crate::domain::text`]).
    let id = |v: &Value| v.as_str().and_then(|s| text::id(s).ok()).map(str::to_owned);
    let Some(dispute) = id(&object["id"]) else {
        return Ok(());
    };
    // Stripe names the PaymentIntent; an older shape only the charge.
    let pi = id(&object["payment_intent"]).or_else(|| id(&object["charge"]));
    let created = body["created"]
        .as_i64()
        .or(object["created"].as_i64())
        .and_then(|s| DateTime::<Utc>::from_timestamp(s, 0))
        .unwrap_or_else(Utc::now);
    let window = Window::day(created.date_naive());
    let ours = match &pi {
        Some(pi) => match store.attempt_by_gateway_ref(pi).await? {
            Some(recorded) => Some(recorded),
            None => {
                let scope = ReconScope {
                    keys: Vec::new(),
                    gateway_ids: vec![pi.clone()],
                    orders: Vec::new(),
                };
                store
                    .recon_attempts(&window, &scope)
                    .await?
                    .into_iter()
                    .find(|a| a.gateway_charge_id.as_deref() == Some(pi))
            }
        },
        None => None,
    };
    let finding = Finding {
        kind: CaseKind::Dispute,
        dedupe_key: format!("dispute:{dispute}"),
        order_id: ours.as_ref().map(|a| a.order_id.clone()),
        attempt_id: ours.as_ref().map(|a| a.id),
        gateway_ref: Some(match &pi {
            Some(pi) => format!("{dispute},{pi}"),
            None => dispute.clone(),
        }),
        details: json!({
            "event": ev.event_id,
            "dispute": dispute,
            "payment_intent": pi,
            "amount_minor": object["amount"].as_i64(),
            "currency": code(&object["currency"]),
            "reason": code(&object["reason"]),
            "status": code(&object["status"]),
            "matched_attempt": ours.as_ref().map(|a| a.id),
        }),
    };
    store.record_cases(&window, &[finding]).await?;
    Ok(())
}
