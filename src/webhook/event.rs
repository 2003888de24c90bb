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
            code: text("decline_code").unwrap_or_else(|| "declined".into()),
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

#[cfg(test)]
mod tests {
    use super::*;

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
