//! The card networks' caps on business retries of one card, and finance's
//! explicit override of them.
//!
//! Invariant: one rule at every door. PostgreSQL keeps it in
//! `cobro.check_card_caps` (called by `cobro.business_retry` and, before a
//! person's request is accepted, by `cobro.check_retry_caps`); SQLite runs
//! the same steps from Rust ([`super::lite::caps`]). The caps are skipped
//! only when finance's newest request to retry the declined attempt
//! recorded an [`OverrideReason`] in the append-only log; the new attempt's
//! log row then carries that reason.

use uuid::Uuid;

use super::{Db, RetryError, Store};

/// The caps a business retry must respect; `None` (or 0) is no cap.
/// cobro does not record a card's brand, so every cap applies to every
/// card: for an unknown brand the strictest caps that apply are all of
/// them (a wrong guess then only retries less, never more).
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

impl Store {
    /// Refused (`RetryError::CardCap`, naming the cap and how to override
    /// it) when the retry of the declined attempt `attempt_id` would pass
    /// one of `caps`; the database's own rule, asked before a person's
    /// request is accepted.
    pub async fn check_retry_caps(
        &self,
        attempt_id: Uuid,
        caps: CardCaps,
    ) -> Result<(), RetryError> {
        let [visa, mc_day, mc_month] = caps.sql();
        match &self.db {
            Db::Pg(p) => {
                let done = sqlx::query("SELECT cobro.check_retry_caps($1, $2, $3, $4)")
                    .bind(attempt_id)
                    .bind(visa)
                    .bind(mc_day)
                    .bind(mc_month)
                    .execute(p)
                    .await;
                let Err(e) = done else { return Ok(()) };
                let Some(db) = e.as_database_error() else {
                    return Err(RetryError::Db(e));
                };
                let msg = db.message().to_owned();
                Err(match db.code().as_deref() {
                    Some("CB007") => RetryError::CardCap(msg),
                    Some("CB404") => RetryError::NotFound(msg),
                    _ => RetryError::Db(e),
                })
            }
            Db::Lite(p) => super::lite::caps::check_retry(p, attempt_id, caps).await,
        }
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
    fn zero_means_no_cap() {
        let caps = CardCaps {
            visa_30d: Some(0),
            mastercard_24h: Some(10),
            mastercard_30d: None,
        };
        assert_eq!(caps.sql(), [None, Some(10), None]);
    }
}
