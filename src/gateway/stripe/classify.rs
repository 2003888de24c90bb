//! What Stripe's answers mean for an attempt, as pure functions: the
//! PaymentIntent's status read as settled or not, a decline's codes read as
//! a business-retry class, and the raw codes kept for the evidence.
//!
//! Invariant: only `succeeded` is an approval, and only a PaymentIntent
//! whose last confirm failed (`requires_payment_method` with a
//! `last_payment_error`) or that is `canceled` is a decline. An unconfirmed
//! one (`requires_confirmation`, or `requires_payment_method` with no error)
//! was never charged: "not found", which allows confirming that same
//! PaymentIntent again. Anything else (`processing`, `requires_capture`, a
//! status we do not know) is still unknown. Every object and error is made
//! fit to store as it is parsed ([`Object::tidied`], [`StripeError::tidied`]):
//! an object whose id cannot be stored as it is reads as one without an id
//! (not an object: a malformed answer), every other text is escaped and
//! bounded ([`crate::domain::text`]).

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use crate::domain::card_caps::card_brand_in;
use crate::domain::text::{self, Kind};

/// Stripe's error object (`{"error": {…}}`), the fields cobro reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub(super) struct StripeError {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub decline_code: Option<String>,
    #[serde(default)]
    pub advice_code: Option<String>,
    #[serde(default)]
    pub network_advice_code: Option<String>,
    #[serde(default)]
    pub network_decline_code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub param: Option<String>,
    /// The card's network, from the error's `payment_method.card.brand`
    /// (allow-listed; never the card's other data).
    #[serde(default, rename = "payment_method", deserialize_with = "method_brand")]
    pub card_brand: Option<String>,
}

/// A PaymentIntent or a Refund: the fields cobro reads.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(super) struct Object {
    pub id: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub amount: Option<i64>,
    #[serde(default)]
    pub currency: Option<String>,
    #[serde(default)]
    pub created: Option<i64>,
    #[serde(default, deserialize_with = "metadata")]
    pub metadata: HashMap<String, String>,
    #[serde(default)]
    pub last_payment_error: Option<StripeError>,
    /// A refund's PaymentIntent.
    #[serde(default)]
    pub payment_intent: Option<String>,
    /// A refund's failure.
    #[serde(default)]
    pub failure_reason: Option<String>,
    #[serde(default)]
    pub cancellation_reason: Option<String>,
    /// The card's network, from the expanded `latest_charge`'s
    /// `payment_method_details.card.brand` (allow-listed).
    #[serde(default, rename = "latest_charge", deserialize_with = "charge_brand")]
    pub charge_brand: Option<String>,
}

/// `payment_method.card.brand`, allow-listed; anything else (a bare id, a
/// number, an unknown brand) is `None`, never a failed parse.
fn method_brand<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let raw: Option<Value> = Option::deserialize(d)?;
    Ok(card_brand_in(
        raw.as_ref().and_then(|v| v.pointer("/card/brand")),
    ))
}

/// A charge's `payment_method_details.card.brand`, allow-listed.
fn charge_brand<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let raw: Option<Value> = Option::deserialize(d)?;
    Ok(card_brand_in(raw.as_ref().and_then(|v| {
        v.pointer("/payment_method_details/card/brand")
    })))
}

impl Object {
    /// The card's network as this PaymentIntent tells it: its last error's
    /// payment method, else its expanded latest charge.
    pub fn card_brand(&self) -> Option<String> {
        self.last_payment_error
            .as_ref()
            .and_then(|e| e.card_brand.clone())
            .or_else(|| self.charge_brand.clone())
    }
}

/// Metadata values are strings at Stripe; anything else is dropped, never
/// a failed parse of the whole object.
fn metadata<'de, D: serde::Deserializer<'de>>(d: D) -> Result<HashMap<String, String>, D::Error> {
    let raw: Option<HashMap<String, Value>> = Option::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| match v {
            Value::String(s) => Some((k, s)),
            _ => None,
        })
        .collect())
}

/// Escapes and bounds an optional text in place.
fn tidy(slot: &mut Option<String>, kind: Kind) {
    if let Some(s) = slot {
        *s = text::stored(s, kind);
    }
}

impl StripeError {
    /// The error as cobro keeps it: every text escaped and bounded.
    pub fn tidied(mut self) -> Self {
        for slot in [
            &mut self.kind,
            &mut self.code,
            &mut self.decline_code,
            &mut self.advice_code,
            &mut self.network_advice_code,
            &mut self.network_decline_code,
        ] {
            tidy(slot, Kind::Code);
        }
        tidy(&mut self.param, Kind::Id);
        tidy(&mut self.message, Kind::Message);
        self
    }
}

/// A Stripe id cobro may put in a URL path (`/v1/payment_intents/{id}`):
/// letters, digits and `_` only, as Stripe's ids are. Anything else (a
/// `/`, `?`, `%`, `.`) could address another resource.
pub(super) fn path_safe(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Object {
    /// The object as cobro keeps it: `Err` (a note saying why) when its id
    /// cannot be stored as it is, which its caller reads as an answer
    /// without an object; a refund's `payment_intent` that cannot is
    /// dropped (read as missing); every other text escaped and bounded.
    pub fn tidied(mut self) -> Result<Self, String> {
        text::id(&self.id).map_err(|why| text::unusable("id", &self.id, &why))?;
        if !path_safe(&self.id) {
            return Err(format!(
                "id {} is not a Stripe id (letters, digits, _): it would be sent back inside a URL path",
                text::stored(&self.id, Kind::Id)
            ));
        }
        if let Some(pi) = self.payment_intent.take() {
            match text::id(&pi).ok().filter(|p| path_safe(p)).ok_or(()) {
                Ok(_) => self.payment_intent = Some(pi),
                Err(()) => tracing::warn!(
                    payment_intent = %text::stored(&pi, Kind::Id),
                    "Stripe answered an id cobro cannot store or send back; read as missing"
                ),
            }
        }
        for slot in [
            &mut self.status,
            &mut self.currency,
            &mut self.failure_reason,
            &mut self.cancellation_reason,
        ] {
            tidy(slot, Kind::Code);
        }
        for value in self.metadata.values_mut() {
            *value = text::stored(value, Kind::Message);
        }
        self.last_payment_error = self.last_payment_error.map(StripeError::tidied);
        Ok(self)
    }
}

/// The metadata keys cobro writes on what it creates.
pub const META_KEY: &str = "cobro_key";
pub(super) const META_ORDER: &str = "cobro_order";
pub(super) const META_ATTEMPT: &str = "cobro_attempt";

impl Object {
    /// The cobro key in its metadata, if any.
    pub fn key(&self) -> Option<&str> {
        self.metadata.get(META_KEY).map(String::as_str)
    }
}

/// What a PaymentIntent's status says about the charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Settled {
    Succeeded,
    /// The last confirm failed, or the PaymentIntent was canceled: no
    /// charge, and none can come from it without a new confirm.
    Failed {
        code: String,
        detail: String,
    },
    /// Never confirmed (or nothing to confirm with): nothing was charged.
    NotConfirmed,
    /// 3-D Secure or another customer step is required.
    NeedsAction,
    /// `processing`, `requires_capture`, or a status we do not know.
    Pending(String),
}

pub(super) fn settle(pi: &Object) -> Settled {
    match (pi.status.as_deref(), &pi.last_payment_error) {
        (Some("succeeded"), _) => Settled::Succeeded,
        (Some("requires_payment_method"), Some(err)) => Settled::Failed {
            code: decline_code(err),
            detail: codes(err),
        },
        (Some("canceled"), _) => Settled::Failed {
            code: "canceled".into(),
            detail: format!(
                "canceled: {}",
                pi.cancellation_reason
                    .as_deref()
                    .unwrap_or("no reason given")
            ),
        },
        (Some("requires_payment_method" | "requires_confirmation"), None) => Settled::NotConfirmed,
        (Some("requires_action"), _) => Settled::NeedsAction,
        (other, _) => Settled::Pending(other.unwrap_or("no status").to_owned()),
    }
}

/// The decline code stored on the attempt, which decides its business-retry
/// class (`COBRO_RETRYABLE_DECLINES`): Stripe's `decline_code`, else its
/// `code`; with the card network's or Stripe's advice as a suffix
/// ([`crate::gateway::advice`]): `/do_not_try_again`, which no allow-list
/// can ever retry, or `/retry_after_<n>h`.
pub(super) fn decline_code(err: &StripeError) -> String {
    use crate::gateway::advice::{NetworkCodes, advise, stored};
    let base = err
        .decline_code
        .as_deref()
        .or(err.code.as_deref())
        .filter(|c| !c.is_empty())
        .unwrap_or("card_declined");
    let advice = advise(&NetworkCodes {
        advice_code: err.advice_code.as_deref(),
        network_advice_code: err.network_advice_code.as_deref(),
        network_decline_code: err.network_decline_code.as_deref(),
    });
    stored(base, advice)
}

/// Every code Stripe gave, raw, for the transition log.
pub(super) fn codes(err: &StripeError) -> String {
    let fields = [
        ("type", &err.kind),
        ("code", &err.code),
        ("decline_code", &err.decline_code),
        ("advice_code", &err.advice_code),
        ("network_advice_code", &err.network_advice_code),
        ("network_decline_code", &err.network_decline_code),
        ("param", &err.param),
    ];
    let mut out: Vec<String> = fields
        .iter()
        .filter_map(|(name, v)| v.as_deref().map(|v| format!("{name}={v}")))
        .collect();
    if let Some(m) = &err.message {
        out.push(format!(
            "message={}",
            m.chars().take(200).collect::<String>()
        ));
    }
    out.join(" ")
}

/// Stripe's error object out of a body, if it is one: `{"error": {…}}`
/// with a `type`, which Stripe (and localstripe) always sends. An `error`
/// without one is someone else's (a proxy's, a load balancer's), never
/// read as Stripe's word.
pub(super) fn error_of(body: Option<&Value>) -> Option<StripeError> {
    serde_json::from_value::<StripeError>(body?.get("error")?.clone())
        .ok()
        .filter(|e| e.kind.is_some())
        .map(StripeError::tidied)
}

/// Stripe refuses a replayed key whose parameters differ.
pub(super) fn is_idempotency_error(err: Option<&StripeError>) -> bool {
    err.is_some_and(|e| e.kind.as_deref() == Some("idempotency_error"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stripe_shaped_id_goes_into_a_path() {
        for ok in ["pi_3Nx9abc", "re_1", "pi_cobroprobe0f"] {
            assert!(path_safe(ok), "{ok}");
        }
        for bad in [
            "",
            "pi_1/../../v1/refunds",
            "pi_1?expand=x",
            "pi_1%2F",
            "pi.1",
            "pi 1",
        ] {
            assert!(!path_safe(bad), "{bad:?}");
        }
        let obj: Object =
            serde_json::from_value(serde_json::json!({"id": "pi_1/cancel", "status": "succeeded"}))
                .unwrap();
        assert!(obj.tidied().unwrap_err().contains("not a Stripe id"));
    }

    fn pi(status: &str, error: Option<StripeError>) -> Object {
        Object {
            id: "pi_1".into(),
            status: Some(status.into()),
            amount: Some(100),
            currency: Some("eur".into()),
            created: Some(1),
            metadata: HashMap::new(),
            last_payment_error: error,
            payment_intent: None,
            failure_reason: None,
            cancellation_reason: None,
            charge_brand: None,
        }
    }

    fn err(code: &str, decline: Option<&str>) -> StripeError {
        StripeError {
            kind: Some("card_error".into()),
            code: Some(code.into()),
            decline_code: decline.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn only_succeeded_is_an_approval_and_only_a_failed_confirm_a_decline() {
        assert_eq!(settle(&pi("succeeded", None)), Settled::Succeeded);
        assert!(matches!(
            settle(&pi("requires_payment_method", Some(err("card_declined", Some("insufficient_funds"))))),
            Settled::Failed { code, .. } if code == "insufficient_funds"
        ));
        assert_eq!(
            settle(&pi("requires_payment_method", None)),
            Settled::NotConfirmed
        );
        assert_eq!(
            settle(&pi("requires_confirmation", None)),
            Settled::NotConfirmed
        );
        assert_eq!(settle(&pi("requires_action", None)), Settled::NeedsAction);
        assert_eq!(
            settle(&pi("processing", None)),
            Settled::Pending("processing".into())
        );
        assert_eq!(
            settle(&pi("requires_capture", None)),
            Settled::Pending("requires_capture".into())
        );
        assert!(
            matches!(settle(&pi("canceled", None)), Settled::Failed { code, .. } if code == "canceled")
        );
    }

    #[test]
    fn advice_not_to_retry_makes_a_code_no_allow_list_retries() {
        assert_eq!(
            decline_code(&err("card_declined", Some("insufficient_funds"))),
            "insufficient_funds"
        );
        assert_eq!(decline_code(&err("card_declined", None)), "card_declined");
        assert_eq!(decline_code(&err("expired_card", None)), "expired_card");
        let mut dnh = err("card_declined", Some("do_not_honor"));
        dnh.advice_code = Some("do_not_try_again".into());
        assert_eq!(decline_code(&dnh), "do_not_honor/do_not_try_again");
        let mut mc = err("card_declined", Some("insufficient_funds"));
        mc.network_advice_code = Some("03".into());
        assert_eq!(decline_code(&mc), "insufficient_funds/do_not_try_again");
        mc.network_advice_code = Some("02".into());
        assert_eq!(decline_code(&mc), "insufficient_funds");
        mc.network_advice_code = Some("26".into());
        assert_eq!(decline_code(&mc), "insufficient_funds/retry_after_48h");
        let mut visa = err("card_declined", Some("lost_card"));
        visa.network_decline_code = Some("41".into());
        assert_eq!(decline_code(&visa), "lost_card/do_not_try_again");
        let policy = crate::retry::RetryPolicy::default();
        assert!(policy.is_retryable("do_not_honor"));
        assert!(!policy.is_retryable(&decline_code(&dnh)));
        assert!(!policy.is_retryable(&decline_code(&err("card_declined", Some("stolen_card")))));
    }

    #[test]
    fn raw_codes_are_kept() {
        let mut e = err("card_declined", Some("do_not_honor"));
        e.network_decline_code = Some("05".into());
        e.network_advice_code = Some("03".into());
        let s = codes(&e);
        for part in [
            "type=card_error",
            "code=card_declined",
            "decline_code=do_not_honor",
            "network_decline_code=05",
            "network_advice_code=03",
        ] {
            assert!(s.contains(part), "{s} lacks {part}");
        }
    }

    #[test]
    fn the_card_brand_comes_from_the_answer_and_junk_is_none() {
        let body = serde_json::json!({"error": {
            "type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds",
            "payment_method": {"id": "pm_1", "card": {"brand": "mastercard", "last4": "4444"}}}});
        let e = error_of(Some(&body)).unwrap();
        assert_eq!(e.card_brand.as_deref(), Some("mastercard"));
        assert_eq!(
            decline_code(&e),
            "insufficient_funds",
            "the rest still parses"
        );
        for junk in [
            serde_json::json!("pm_1"),
            serde_json::json!({"card": {"brand": "mastercard\u{0}"}}),
            serde_json::json!({"card": {"brand": "<script>"}}),
            serde_json::json!({"card": {"brand": 5}}),
            serde_json::json!({"card": "visa"}),
            serde_json::json!(null),
        ] {
            let body = serde_json::json!({"error": {"type": "card_error", "payment_method": junk}});
            let e = error_of(Some(&body)).expect("a junk brand never fails the error");
            assert_eq!(e.card_brand, None, "{junk}");
            assert_eq!(e.kind.as_deref(), Some("card_error"));
        }
        let pi: Object = serde_json::from_value(serde_json::json!({
            "id": "pi_1", "status": "requires_payment_method",
            "last_payment_error": {"code": "card_declined",
                                   "payment_method": {"card": {"brand": "visa"}}}}))
        .unwrap();
        assert_eq!(pi.card_brand().as_deref(), Some("visa"));
        let charged: Object = serde_json::from_value(serde_json::json!({
            "id": "pi_2", "status": "succeeded",
            "latest_charge": {"id": "ch_1", "payment_method_details": {"card": {"brand": "amex"}}}}))
        .unwrap();
        assert_eq!(charged.card_brand().as_deref(), Some("amex"));
        let bare: Object = serde_json::from_value(
            serde_json::json!({"id": "pi_3", "status": "succeeded", "latest_charge": "ch_1"}),
        )
        .unwrap();
        assert_eq!(bare.card_brand(), None);
    }

    #[test]
    fn errors_and_metadata_parse_leniently() {
        let body: Value = serde_json::json!({"error": {"type": "idempotency_error", "message": "Keys for idempotent requests can only be used with the same parameters"}});
        let e = error_of(Some(&body));
        assert!(is_idempotency_error(e.as_ref()));
        assert!(!is_idempotency_error(
            error_of(Some(
                &serde_json::json!({"error": {"type": "invalid_request_error"}})
            ))
            .as_ref()
        ));
        let o: Object = serde_json::from_value(
            serde_json::json!({"id": "pi_2", "metadata": {"cobro_key": "k", "n": 3}}),
        )
        .unwrap();
        assert_eq!(o.key(), Some("k"));
        assert_eq!(o.metadata.len(), 1);
    }
}
