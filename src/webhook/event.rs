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
//! The simulator's `payment_method.updated` carries `data.payment_method`;
//! it (and Stripe's `payment_method.automatically_updated` /
//! `payment_method.updated`, the PaymentMethod in `data.object`) pulls a
//! scheduled retry of that card forward (`store::card_updated`).
//!
//! Invariant: an event that parses is stored whatever its type; only
//! `charge.succeeded` and `charge.failed` move an attempt's state. Every text taken
//! out of an event goes through [`crate::domain::text`]: JSON may carry a
//! NUL (`\u0000`) that PostgreSQL's `text` cannot hold, and any length. Ids
//! (the event's, the charge's, the PaymentIntent's) are kept as they are or
//! read as missing, never altered: an event whose own id cannot be stored
//! as it is is malformed, and so is one that needs its object's id
//! (`charge.succeeded`, every Stripe event that moves an attempt) and
//! carries one that cannot; `charge.failed` keeps its decline without it.
//! Types and codes are escaped and bounded. The raw body is kept as it
//! came (valid JSON holds no raw NUL: only the escape, six characters).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::text::{self, Kind};
use crate::store::{EventOutcome, IncomingEvent, Said};

pub const CHARGE_SUCCEEDED: &str = "charge.succeeded";
pub const CHARGE_FAILED: &str = "charge.failed";
/// The simulator's account-updater event: `data.payment_method` is the
/// token whose card the network replaced.
pub const CARD_UPDATED: &str = "payment_method.updated";

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

/// A code or type taken from an event: escaped and bounded.
fn code(v: Option<&serde_json::Value>) -> Option<String> {
    v.and_then(|v| v.as_str())
        .map(|s| text::stored(s, Kind::Code))
}

/// An id taken from an event (`name` for the error): `Ok(None)` when there
/// is none, `Err` when it cannot be stored as it is.
pub(crate) fn id_of(
    v: Option<&serde_json::Value>,
    name: &str,
) -> Result<Option<String>, MalformedEvent> {
    match v.and_then(|v| v.as_str()) {
        None => Ok(None),
        Some(raw) => text::id(raw)
            .map(|id| Some(id.to_owned()))
            .map_err(|why| MalformedEvent(text::unusable(name, raw, &why))),
    }
}

/// Parses a verified body into what the store needs.
pub fn parse(body: &[u8]) -> Result<IncomingEvent, MalformedEvent> {
    let mut ev: GatewayEvent =
        serde_json::from_slice(body).map_err(|e| MalformedEvent(e.to_string()))?;
    text::id(&ev.id).map_err(|why| MalformedEvent(text::unusable("id", &ev.id, &why)))?;
    ev.kind = text::stored(&ev.kind, Kind::Code);
    if let Some(object) = ev.data.get("object") {
        let (key, outcome) = stripe_outcome(&ev.kind, object)?;
        let said = Said {
            refund: Some(ev.kind.starts_with("refund.")),
            amount_minor: object.get("amount").and_then(|v| v.as_i64()),
            currency: code(object.get("currency")),
        };
        return Ok(IncomingEvent {
            event_id: ev.id,
            event_type: ev.kind,
            key,
            outcome,
            said,
            payload: String::from_utf8_lossy(body).into_owned(),
        });
    }
    if ev.kind == CARD_UPDATED {
        let payment_method = id_of(ev.data.get("payment_method"), "data.payment_method")?
            .ok_or_else(|| MalformedEvent(format!("{CARD_UPDATED} without data.payment_method")))?;
        return Ok(IncomingEvent {
            event_id: ev.id,
            event_type: ev.kind,
            key: None,
            outcome: EventOutcome::CardUpdated { payment_method },
            said: Said::default(),
            payload: String::from_utf8_lossy(body).into_owned(),
        });
    }
    let text = |k: &str| code(ev.data.get(k));
    let key = ev
        .data
        .get("idempotency_key")
        .and_then(|v| v.as_str())
        .and_then(|k| Uuid::try_parse(k).ok());
    let charge_id = id_of(ev.data.get("charge_id"), "data.charge_id");
    let outcome = match (ev.kind.as_str(), charge_id) {
        (CHARGE_SUCCEEDED, Ok(Some(charge_id))) => EventOutcome::Approved { charge_id },
        (CHARGE_SUCCEEDED, Ok(None)) => {
            return Err(MalformedEvent(
                "charge.succeeded without data.charge_id".into(),
            ));
        }
        (CHARGE_SUCCEEDED, Err(unusable)) => return Err(unusable),
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
            // A decline is one without the id, as with none.
            charge_id: charge_id.ok().flatten(),
        },
        _ => EventOutcome::NotActionable,
    };
    // The simulator announces refunds as `charge.*` too: it says no kind.
    let said = Said {
        refund: None,
        amount_minor: ev.data.get("amount_minor").and_then(|v| v.as_i64()),
        currency: text("currency"),
    };
    Ok(IncomingEvent {
        event_id: ev.id,
        event_type: ev.kind,
        key,
        outcome,
        said,
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
    // Needed only by the events that move an attempt.
    let id = id_of(object.get("id"), "data.object.id");
    let key = object
        .get("metadata")
        .and_then(|m| m.get(crate::gateway::stripe::META_KEY))
        .and_then(|k| k.as_str())
        .and_then(|k| Uuid::try_parse(k).ok());
    let need_id = || match &id {
        Ok(Some(id)) => Ok(id.clone()),
        Ok(None) => Err(MalformedEvent(format!("{kind} without data.object.id"))),
        Err(unusable) => Err(unusable.clone()),
    };
    let status = object.get("status").and_then(|s| s.as_str());
    let outcome = match kind {
        STRIPE_PI_SUCCEEDED => EventOutcome::Approved {
            charge_id: need_id()?,
        },
        STRIPE_PI_FAILED => EventOutcome::Declined {
            code: crate::gateway::stripe::decline_code_of(object),
            charge_id: Some(need_id()?),
        },
        // The account updater replaced the card behind this PaymentMethod.
        STRIPE_PM_AUTO_UPDATED | STRIPE_PM_UPDATED => EventOutcome::CardUpdated {
            payment_method: need_id()?,
        },
        // Only `succeeded` settles a refund; `pending` may still fail.
        STRIPE_REFUND_CREATED | STRIPE_REFUND_UPDATED => match status {
            Some("succeeded") => EventOutcome::Approved {
                charge_id: need_id()?,
            },
            Some("failed" | "canceled") => EventOutcome::Declined {
                code: code(object.get("failure_reason")).unwrap_or_else(|| "refund_failed".into()),
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
pub const STRIPE_PM_AUTO_UPDATED: &str = "payment_method.automatically_updated";
pub const STRIPE_PM_UPDATED: &str = "payment_method.updated";

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
        // What each says of its object, checked against the attempt.
        let said = format!(
            r#"{{"id":"evt_6","type":"refund.updated","data":{{"object":{{"id":"re_2","status":"succeeded","amount":1500,"currency":"usd","metadata":{{"cobro_key":"{key}"}}}}}}}}"#
        );
        assert_eq!(
            parse(said.as_bytes()).unwrap().said,
            Said {
                refund: Some(true),
                amount_minor: Some(1500),
                currency: Some("usd".into())
            }
        );
        assert_eq!(parse(ok.as_bytes()).unwrap().said.refund, Some(false));
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

        // A NUL (valid JSON) in a type or a code is written as `\u0000`;
        // the raw body is kept as it came.
        let nul = format!(
            r#"{{"id":"evt_n","type":"charge.failed\u0000","data":{{"charge_id":"ch_\u0000","idempotency_key":"{key}","decline_code":"card\u0000declined","metadata":{{"note":"a\u0000b"}}}}}}"#
        );
        let e = parse(nul.as_bytes()).unwrap();
        assert_eq!(e.event_type, r"charge.failed\u0000");
        assert_eq!(
            e.outcome,
            EventOutcome::NotActionable,
            "the type is not charge.failed"
        );
        assert_eq!(e.payload, nul, "the raw body is kept as it came");
        // A decline keeps its decline; a charge id that cannot be stored as
        // it is reads as none, never altered.
        let failed = nul.replace(r"charge.failed\u0000", "charge.failed");
        assert_eq!(
            parse(failed.as_bytes()).unwrap().outcome,
            EventOutcome::Declined {
                code: r"card\u0000declined".into(),
                charge_id: None
            }
        );
        // An approval needs its id: malformed, as without one.
        let succeeded = nul.replace(r"charge.failed\u0000", "charge.succeeded");
        let err = parse(succeeded.as_bytes()).unwrap_err().to_string();
        assert!(
            err.contains("data.charge_id holds the control character U+0000"),
            "{err}"
        );
        // So does the event's own id (it deduplicates redeliveries).
        let evt_nul = nul.replace("evt_n", r"evt_\u0000");
        let err = parse(evt_nul.as_bytes()).unwrap_err().to_string();
        assert!(
            err.contains("id holds the control character U+0000"),
            "{err}"
        );
        let stripe_nul = format!(
            r#"{{"id":"evt_s","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_\u0000","status":"succeeded","metadata":{{"cobro_key":"{key}"}}}}}}}}"#
        );
        assert!(parse(stripe_nul.as_bytes()).is_err());
        // An event that moves nothing does not need its object's id.
        let ignored = stripe_nul.replace("payment_intent.succeeded", "customer.updated");
        assert_eq!(
            parse(ignored.as_bytes()).unwrap().outcome,
            EventOutcome::NotActionable
        );
        // Ids are bounded in bytes, codes are cut with a mark.
        let id_at_bound = format!(r#"{{"id":"{}","type":"x"}}"#, "e".repeat(255));
        assert!(parse(id_at_bound.as_bytes()).is_ok());
        let id_over = format!(r#"{{"id":"{}","type":"x"}}"#, "é".repeat(128));
        assert!(parse(id_over.as_bytes()).is_err());
        let long_code = format!(
            r#"{{"id":"evt_l","type":"charge.failed","data":{{"decline_code":"{}"}}}}"#,
            r"x\u0000".repeat(20_000)
        );
        let EventOutcome::Declined { code, .. } = parse(long_code.as_bytes()).unwrap().outcome
        else {
            panic!("a decline");
        };
        assert!(
            code.len() <= 64 && !code.contains('\0') && code.ends_with('…'),
            "{code}"
        );

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
