//! The gateway's event format, parsed only after the signature passed:
//!
//! ```json
//! {"id": "evt_…", "type": "charge.succeeded" | "charge.failed" | "…",
//!  "created": 1767225600,
//!  "data": {"charge_id": "ch_…", "idempotency_key": "<our key>", "order_id": "…",
//!           "amount_minor": 1999, "currency": "USD", "status": "approved" | "declined",
//!           "decline_code": null}}
//! ```
//!
//! Invariant: an event that parses is stored whatever its type; only
//! `charge.succeeded` and `charge.failed` move an attempt. Every text taken
//! out of an event (id, type, charge id, decline code) holds no NUL
//! character: JSON may carry one (`\u0000`), PostgreSQL's `text` cannot, so
//! [`text_safe`] writes it as the six characters `\u0000` (here only).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::{EventOutcome, IncomingEvent};

pub const CHARGE_SUCCEEDED: &str = "charge.succeeded";
pub const CHARGE_FAILED: &str = "charge.failed";

/// The JSON a gateway (or the simulator) sends.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GatewayEvent {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub created: Option<i64>,
    #[serde(default)]
    pub data: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed event: {0}")]
pub struct MalformedEvent(pub String);

/// `s` with every NUL character written as the six characters `\u0000`
/// (as JSON writes it), so PostgreSQL's `text` can hold it; anything else
/// is kept as it is.
pub fn text_safe(s: &str) -> String {
    s.replace('\0', "\\u0000")
}

/// Parses a verified body into what the store needs.
pub fn parse(body: &[u8]) -> Result<IncomingEvent, MalformedEvent> {
    let mut ev: GatewayEvent =
        serde_json::from_slice(body).map_err(|e| MalformedEvent(e.to_string()))?;
    ev.id = text_safe(&ev.id);
    ev.kind = text_safe(&ev.kind);
    if ev.id.is_empty() || ev.id.len() > 255 {
        return Err(MalformedEvent("id must be 1-255 characters".into()));
    }
    if let Some(object) = ev.data.get("object") {
        let (key, outcome) = stripe_outcome(&ev.kind, object)?;
        return Ok(IncomingEvent {
            event_id: ev.id,
            event_type: ev.kind,
            key,
            outcome,
            payload: String::from_utf8_lossy(body).into_owned(),
        });
    }
    let text = |k: &str| ev.data.get(k).and_then(|v| v.as_str()).map(text_safe);
    let key = text("idempotency_key").and_then(|k| Uuid::try_parse(&k).ok());
    let outcome = match (ev.kind.as_str(), text("charge_id")) {
        (CHARGE_SUCCEEDED, Some(charge_id)) => EventOutcome::Approved { charge_id },
        (CHARGE_SUCCEEDED, None) => {
            return Err(MalformedEvent(
                "charge.succeeded without data.charge_id".into(),
            ));
        }
        (CHARGE_FAILED, charge_id) => EventOutcome::Declined {
            // With the network's advice, as the synchronous answer has it.
            code: {
                use crate::gateway::advice::{NetworkCodes, advise, stored};
                let (mac, network) = (text("network_advice_code"), text("network_decline_code"));
                let advice = advise(&NetworkCodes {
                    advice_code: None,
                    network_advice_code: mac.as_deref(),
                    network_decline_code: network.as_deref(),
                });
                stored(
                    &text("decline_code").unwrap_or_else(|| "declined".into()),
                    advice,
                )
            },
            charge_id,
        },
        _ => EventOutcome::NotActionable,
    };
    Ok(IncomingEvent {
        event_id: ev.id,
        event_type: ev.kind,
        key,
        outcome,
        payload: String::from_utf8_lossy(body).into_owned(),
    })
}

/// Stripe's event shape (`data.object` is the PaymentIntent or Refund):
/// matched to the attempt by the key cobro put in the object's metadata.
/// `payment_intent.succeeded` approves, `payment_intent.payment_failed`
/// declines with Stripe's code (the same class as a synchronous decline),
/// `refund.created` / `refund.updated` settle a refund by its own key;
/// anything else (`charge.refunded`, `charge.dispute.created`, …) is stored
/// and acknowledged.
fn stripe_outcome(
    kind: &str,
    object: &serde_json::Value,
) -> Result<(Option<Uuid>, EventOutcome), MalformedEvent> {
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(text_safe);
    let id = text(object.get("id"));
    let key = object
        .get("metadata")
        .and_then(|m| m.get(crate::gateway::stripe::META_KEY))
        .and_then(|k| k.as_str())
        .and_then(|k| Uuid::try_parse(k).ok());
    let need_id = || {
        id.clone()
            .ok_or_else(|| MalformedEvent(format!("{kind} without data.object.id")))
    };
    let status = object.get("status").and_then(|s| s.as_str());
    let outcome = match kind {
        STRIPE_PI_SUCCEEDED => EventOutcome::Approved {
            charge_id: need_id()?,
        },
        STRIPE_PI_FAILED => EventOutcome::Declined {
            code: text_safe(&crate::gateway::stripe::decline_code_of(object)),
            charge_id: Some(need_id()?),
        },
        // Only `succeeded` settles a refund; `pending` may still fail.
        STRIPE_REFUND_CREATED | STRIPE_REFUND_UPDATED => match status {
            Some("succeeded") => EventOutcome::Approved {
                charge_id: need_id()?,
            },
            Some("failed" | "canceled") => EventOutcome::Declined {
                code: text(object.get("failure_reason")).unwrap_or_else(|| "refund_failed".into()),
                charge_id: Some(need_id()?),
            },
            _ => EventOutcome::NotActionable,
        },
        _ => EventOutcome::NotActionable,
    };
    Ok((key, outcome))
}

pub const STRIPE_PI_SUCCEEDED: &str = "payment_intent.succeeded";
pub const STRIPE_PI_FAILED: &str = "payment_intent.payment_failed";
pub const STRIPE_REFUND_CREATED: &str = "refund.created";
pub const STRIPE_REFUND_UPDATED: &str = "refund.updated";
pub const STRIPE_DISPUTE_CREATED: &str = "charge.dispute.created";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripe_events_parse_by_the_key_in_the_metadata() {
        let key = "3e7d1c9a-2b4f-4a6e-8c0d-9f1e2a3b4c5d";
        let ok = format!(
            r#"{{"id":"evt_1","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_1","object":"payment_intent","status":"succeeded","metadata":{{"cobro_key":"{key}"}}}}}}}}"#
        );
        let e = parse(ok.as_bytes()).unwrap();
        assert_eq!(
            e.outcome,
            EventOutcome::Approved {
                charge_id: "pi_1".into()
            }
        );
        assert_eq!(e.key.unwrap().to_string(), key);
        let failed = format!(
            r#"{{"id":"evt_2","type":"payment_intent.payment_failed","data":{{"object":{{"id":"pi_2","status":"requires_payment_method","last_payment_error":{{"code":"card_declined","decline_code":"stolen_card"}},"metadata":{{"cobro_key":"{key}"}}}}}}}}"#
        );
        assert_eq!(
            parse(failed.as_bytes()).unwrap().outcome,
            EventOutcome::Declined {
                code: "stolen_card".into(),
                charge_id: Some("pi_2".into())
            }
        );
        let refund = r#"{"id":"evt_3","type":"refund.updated","data":{"object":{"id":"re_1","status":"failed","failure_reason":"expired_or_canceled_card"}}}"#;
        assert_eq!(
            parse(refund.as_bytes()).unwrap().outcome,
            EventOutcome::Declined {
                code: "expired_or_canceled_card".into(),
                charge_id: Some("re_1".into())
            }
        );
        let dispute = r#"{"id":"evt_4","type":"charge.dispute.created","data":{"object":{"id":"dp_1","payment_intent":"pi_1"}}}"#;
        assert_eq!(
            parse(dispute.as_bytes()).unwrap().outcome,
            EventOutcome::NotActionable
        );
        let no_id = r#"{"id":"evt_5","type":"payment_intent.succeeded","data":{"object":{"status":"succeeded"}}}"#;
        assert!(parse(no_id.as_bytes()).is_err());
    }

    #[test]
    fn events_parse_into_outcomes() {
        let key = "3e7d1c9a-2b4f-4a6e-8c0d-9f1e2a3b4c5d";
        let ok = format!(
            r#"{{"id":"evt_1","type":"charge.succeeded","data":{{"charge_id":"ch_1","idempotency_key":"{key}"}}}}"#
        );
        let e = parse(ok.as_bytes()).unwrap();
        assert_eq!(
            e.outcome,
            EventOutcome::Approved {
                charge_id: "ch_1".into()
            }
        );
        assert_eq!(e.key.unwrap().to_string(), key);

        let failed =
            r#"{"id":"evt_2","type":"charge.failed","data":{"decline_code":"insufficient_funds"}}"#;
        assert_eq!(
            parse(failed.as_bytes()).unwrap().outcome,
            EventOutcome::Declined {
                code: "insufficient_funds".into(),
                charge_id: None
            }
        );
        let other = r#"{"id":"evt_3","type":"customer.updated","data":{}}"#;
        assert_eq!(
            parse(other.as_bytes()).unwrap().outcome,
            EventOutcome::NotActionable
        );

        // A NUL (valid JSON) is written as `\u0000` in every text taken out.
        let nul = format!(
            r#"{{"id":"evt_\u0000","type":"charge.failed\u0000","data":{{"charge_id":"ch_\u0000","idempotency_key":"{key}","decline_code":"card\u0000declined","metadata":{{"note":"a\u0000b"}}}}}}"#
        );
        let e = parse(nul.as_bytes()).unwrap();
        assert_eq!(e.event_id, r"evt_\u0000");
        assert_eq!(e.event_type, r"charge.failed\u0000");
        assert_eq!(
            e.outcome,
            EventOutcome::NotActionable,
            "the type is not charge.failed"
        );
        assert_eq!(e.payload, nul, "the raw body is kept as it came");
        let nul = nul.replace(r"charge.failed\u0000", "charge.failed");
        assert_eq!(
            parse(nul.as_bytes()).unwrap().outcome,
            EventOutcome::Declined {
                code: r"card\u0000declined".into(),
                charge_id: Some(r"ch_\u0000".into())
            }
        );
        let long_once_escaped = format!(r#"{{"id":"{}\u0000","type":"x"}}"#, "e".repeat(250));
        assert!(parse(long_once_escaped.as_bytes()).is_err());

        for bad in [
            "not json",
            r#"{"type":"charge.succeeded"}"#,
            r#"{"id":"","type":"x"}"#,
            r#"{"id":"evt_4","type":"charge.succeeded","data":{}}"#,
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
