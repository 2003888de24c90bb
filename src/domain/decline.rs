//! A decline code's category, in plain words: what customer notices say
//! and what the business-retry metrics group by, defined once here so
//! neither layer reaches into the other.
//!
//! The categories (`docs/src/guides/notices.md`, "Delivered to the app"):
//!
//! | category | decline codes | a new card helps |
//! |---|---|---|
//! | `insufficient_funds` | `insufficient_funds` | no |
//! | `card_expired` | `expired_card` | yes |
//! | `card_lost_stolen_or_fraud` | `lost_card`, `stolen_card`, `fraudulent`, `pickup_card`, `merchant_blacklist` | yes |
//! | `do_not_try_again` | any code with the `/do_not_try_again` advice, `do_not_try_again` | yes |
//! | `card_invalid` | `invalid_account`, `incorrect_number`, `invalid_number`, `card_not_supported`, `currency_not_supported`, `invalid_expiry_month`, `invalid_expiry_year` | yes |
//! | `authentication_required` | `authentication_required` | no (the customer must approve the payment) |
//! | `issuer_unavailable` | `try_again_later`, `processing_error`, `issuer_unavailable`, `reenter_transaction` | no |
//! | `generic_declined` | every other code (`card_declined`, `do_not_honor`, …) | no |
//!

use serde::Serialize;

/// A decline code's category, with plain words for the customer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    InsufficientFunds,
    CardExpired,
    CardLostStolenOrFraud,
    DoNotTryAgain,
    CardInvalid,
    AuthenticationRequired,
    IssuerUnavailable,
    GenericDeclined,
}

impl Category {
    /// Every category, in the order of the table above.
    pub const ALL: [Category; 8] = [
        Category::InsufficientFunds,
        Category::CardExpired,
        Category::CardLostStolenOrFraud,
        Category::DoNotTryAgain,
        Category::CardInvalid,
        Category::AuthenticationRequired,
        Category::IssuerUnavailable,
        Category::GenericDeclined,
    ];

    /// The category of a stored decline code (`<code>` or
    /// `<code>/do_not_try_again`).
    pub fn of(code: &str) -> Category {
        let (base, advice) = code.split_once('/').unwrap_or((code, ""));
        if advice == "do_not_try_again" || base == "do_not_try_again" {
            return Category::DoNotTryAgain;
        }
        match base {
            "insufficient_funds" => Category::InsufficientFunds,
            "expired_card" => Category::CardExpired,
            "lost_card" | "stolen_card" | "fraudulent" | "pickup_card" | "merchant_blacklist" => {
                Category::CardLostStolenOrFraud
            }
            "invalid_account"
            | "incorrect_number"
            | "invalid_number"
            | "card_not_supported"
            | "currency_not_supported"
            | "invalid_expiry_month"
            | "invalid_expiry_year" => Category::CardInvalid,
            "authentication_required" => Category::AuthenticationRequired,
            "try_again_later"
            | "processing_error"
            | "issuer_unavailable"
            | "reenter_transaction" => Category::IssuerUnavailable,
            _ => Category::GenericDeclined,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Category::InsufficientFunds => "insufficient_funds",
            Category::CardExpired => "card_expired",
            Category::CardLostStolenOrFraud => "card_lost_stolen_or_fraud",
            Category::DoNotTryAgain => "do_not_try_again",
            Category::CardInvalid => "card_invalid",
            Category::AuthenticationRequired => "authentication_required",
            Category::IssuerUnavailable => "issuer_unavailable",
            Category::GenericDeclined => "generic_declined",
        }
    }

    /// The decline in plain words.
    pub fn words(self) -> &'static str {
        match self {
            Category::InsufficientFunds => "the card did not have enough funds",
            Category::CardExpired => "the card has expired",
            Category::CardLostStolenOrFraud => {
                "the card was reported lost or stolen, or the bank suspects fraud"
            }
            Category::DoNotTryAgain => "the bank asked us not to try this card again",
            Category::CardInvalid => "the card details are not valid for this payment",
            Category::AuthenticationRequired => {
                "the bank requires the customer to approve the payment"
            }
            Category::IssuerUnavailable => {
                "the card's bank could not process the payment right now"
            }
            Category::GenericDeclined => "the bank declined the payment without giving a reason",
        }
    }

    /// Whether a new payment method would help.
    pub fn new_card_helps(self) -> bool {
        match self {
            Category::CardExpired
            | Category::CardLostStolenOrFraud
            | Category::DoNotTryAgain
            | Category::CardInvalid => true,
            Category::InsufficientFunds
            | Category::AuthenticationRequired
            | Category::IssuerUnavailable
            | Category::GenericDeclined => false,
        }
    }
}
