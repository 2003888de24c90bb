//! The card networks' caps on business retries of one card, as settings
//! the store's rule takes ([`CardCaps`]), and finance's reason for passing
//! them ([`OverrideReason`]), parsed once at the boundary.
//!
//! Invariant: an [`OverrideReason`] that exists is non-empty, at most
//! [`MAX_OVERRIDE_REASON`] characters and free of control characters; a
//! refusal names the field `override_reason`. A cap of 0 is no cap.

/// The caps a business retry must respect; `None` (or 0) is no cap. Each
/// applies to its own network's cards only, by the brand the gateway last
/// reported for the card ([`card_brand`]); for a card whose brand is
/// unknown (never reported, or another network) every cap applies, the
/// strictest choice (a wrong guess then only retries less, never more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CardCaps {
    /// Visa: retries of one card in 30 days (`COBRO_RETRY_CARD_CAP`).
    pub visa_30d: Option<u32>,
    /// Mastercard: retries of one card in 24 hours (`COBRO_RETRY_MC_CAP_24H`).
    pub mastercard_24h: Option<u32>,
    /// Mastercard: retries of one card in 30 days (`COBRO_RETRY_MC_CAP_30D`).
    pub mastercard_30d: Option<u32>,
}

impl CardCaps {
    /// No cap at all.
    pub const NONE: CardCaps = CardCaps {
        visa_30d: None,
        mastercard_24h: None,
        mastercard_30d: None,
    };

    /// Only Visa's 30-day cap.
    pub fn visa(cap: Option<u32>) -> Self {
        CardCaps {
            visa_30d: cap,
            ..Self::NONE
        }
    }

    /// The caps as the database's integers (0 and `None` mean no cap).
    pub(crate) fn sql(&self) -> [Option<i32>; 3] {
        let int = |c: Option<u32>| {
            c.filter(|c| *c > 0)
                .map(|c| i32::try_from(c).unwrap_or(i32::MAX))
        };
        [
            int(self.visa_30d),
            int(self.mastercard_24h),
            int(self.mastercard_30d),
        ]
    }
}

/// The card networks cobro recognises in a gateway's answer, lowercase.
pub const CARD_BRANDS: [&str; 8] = [
    "visa",
    "mastercard",
    "amex",
    "discover",
    "diners",
    "jcb",
    "unionpay",
    "cartes_bancaires",
];

/// A card's brand as a gateway reported it (Stripe's `card.brand`, the
/// simulator's `card_brand`), allow-listed: one of [`CARD_BRANDS`], matched
/// exactly (after trimming, case-insensitive); anything else, a stranger's
/// text, is `None` (an unknown brand).
pub fn card_brand(raw: &str) -> Option<&'static str> {
    let raw = raw.trim();
    if raw.len() > 32 {
        return None;
    }
    CARD_BRANDS
        .into_iter()
        .find(|b| b.eq_ignore_ascii_case(raw))
}

/// [`card_brand`] out of a JSON value: a string that names a known brand,
/// else `None` (never a failed parse of the answer around it).
pub fn card_brand_in(v: Option<&serde_json::Value>) -> Option<String> {
    v.and_then(serde_json::Value::as_str)
        .and_then(card_brand)
        .map(str::to_owned)
}

/// Why finance retries a card past its networks' caps: required, kept in
/// the append-only log and shown on the attempt.
#[derive(Clone, PartialEq, Eq)]
pub struct OverrideReason(String);

/// The longest override reason kept.
pub const MAX_OVERRIDE_REASON: usize = 500;

/// A refused override reason, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("override_reason: {0}")]
pub struct BadOverrideReason(pub &'static str);

impl OverrideReason {
    /// The field's name at every door.
    pub const FIELD: &'static str = "override_reason";

    pub fn parse(raw: &str) -> Result<Self, BadOverrideReason> {
        let text = raw.trim();
        if text.is_empty() {
            return Err(BadOverrideReason(
                "an override of the card networks' caps needs a reason; it is empty",
            ));
        }
        if text.chars().count() > MAX_OVERRIDE_REASON {
            return Err(BadOverrideReason("longer than 500 characters"));
        }
        if text.chars().any(char::is_control) {
            return Err(BadOverrideReason(
                "contains a control character (NUL, newline, ...)",
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for OverrideReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OverrideReason").field(&self.0).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_reason_is_required_bounded_and_printable() {
        for (raw, ok) in [
            ("customer called: new funds", true),
            ("  padded  ", true),
            ("", false),
            ("   ", false),
            ("a\0b", false),
            ("two\nlines", false),
            (&"x".repeat(500), true),
            (&"x".repeat(501), false),
        ] {
            let parsed = OverrideReason::parse(raw);
            assert_eq!(parsed.is_ok(), ok, "{raw:?}");
            if let Err(e) = parsed {
                assert!(e.to_string().starts_with("override_reason: "), "{e}");
            }
        }
        assert_eq!(
            OverrideReason::parse("  padded ").unwrap().as_str(),
            "padded"
        );
    }

    #[test]
    fn a_brand_is_allow_listed() {
        for (raw, want) in [
            ("visa", Some("visa")),
            ("Mastercard", Some("mastercard")),
            (" amex ", Some("amex")),
            ("", None),
            ("maestro", None),
            ("visa\0", None),
            ("visa; DROP TABLE", None),
            (&"visa".repeat(20), None),
        ] {
            assert_eq!(card_brand(raw), want, "{raw:?}");
        }
        let json = serde_json::json!({"a": "mastercard", "b": 7, "c": "<b>"});
        assert_eq!(card_brand_in(json.get("a")).as_deref(), Some("mastercard"));
        assert_eq!(card_brand_in(json.get("b")), None);
        assert_eq!(card_brand_in(json.get("c")), None);
        assert_eq!(card_brand_in(json.get("missing")), None);
    }

    #[test]
    fn zero_means_no_cap() {
        let caps = CardCaps {
            visa_30d: Some(0),
            mastercard_24h: Some(10),
            mastercard_30d: None,
        };
        assert_eq!(caps.sql(), [None, Some(10), None]);
    }
}
