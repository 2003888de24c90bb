//! Domain values parsed once at the boundary: amounts, currencies, order ids,
//! idempotency keys and payment-method tokens.
//!
//! Invariant: once a value of these types exists it is valid. Money is an
//! integer count of minor units (`i64 > 0`), never a float; a currency is a
//! known ISO 4217 code; a payment method is an opaque token, never card data.
//! Every parse error names the field it came from, so a caller can tell the
//! user exactly what to fix.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A rejected input value, naming the field that carried it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct InputError {
    pub field: &'static str,
    pub reason: String,
}

impl InputError {
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// A positive amount of money in the currency's minor units (cents for USD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Amount(i64);

impl Amount {
    pub fn parse(minor: i64) -> Result<Self, InputError> {
        if minor <= 0 {
            return Err(InputError::new(
                "amount_minor",
                format!("must be a positive whole number of minor units, got {minor}"),
            ));
        }
        Ok(Self(minor))
    }

    pub fn minor(self) -> i64 {
        self.0
    }
}

/// ISO 4217 codes with their minor-unit exponent. The migration seeds the
/// same list into `cobro.currencies`; a test keeps the two equal.
pub const CURRENCIES: &[(&str, u8)] = &[
    ("AED", 2),
    ("ARS", 2),
    ("AUD", 2),
    ("BHD", 3),
    ("BOB", 2),
    ("BRL", 2),
    ("CAD", 2),
    ("CHF", 2),
    ("CLP", 0),
    ("CNY", 2),
    ("COP", 2),
    ("CRC", 2),
    ("CZK", 2),
    ("DKK", 2),
    ("DOP", 2),
    ("EUR", 2),
    ("GBP", 2),
    ("GTQ", 2),
    ("HKD", 2),
    ("HNL", 2),
    ("HUF", 2),
    ("IDR", 2),
    ("ILS", 2),
    ("INR", 2),
    ("ISK", 0),
    ("JOD", 3),
    ("JPY", 0),
    ("KRW", 0),
    ("KWD", 3),
    ("MXN", 2),
    ("MYR", 2),
    ("NIO", 2),
    ("NOK", 2),
    ("NZD", 2),
    ("OMR", 3),
    ("PAB", 2),
    ("PEN", 2),
    ("PHP", 2),
    ("PLN", 2),
    ("PYG", 0),
    ("RON", 2),
    ("SAR", 2),
    ("SEK", 2),
    ("SGD", 2),
    ("THB", 2),
    ("TND", 3),
    ("TRY", 2),
    ("TWD", 2),
    ("UAH", 2),
    ("USD", 2),
    ("UYU", 2),
    ("VND", 0),
    ("ZAR", 2),
];

/// A known ISO 4217 currency code (upper case, three letters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct Currency(&'static str);

impl Currency {
    pub fn parse(code: &str) -> Result<Self, InputError> {
        CURRENCIES
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(c, _)| Self(c))
            .ok_or_else(|| {
                InputError::new(
                    "currency",
                    format!(
                        "unknown ISO 4217 currency code {code:?} (use upper case, e.g. \"USD\")"
                    ),
                )
            })
    }

    pub fn code(self) -> &'static str {
        self.0
    }

    /// Digits after the decimal point: 2 for USD, 0 for JPY, 3 for KWD.
    pub fn minor_unit(self) -> u8 {
        CURRENCIES
            .iter()
            .find(|(c, _)| *c == self.0)
            .map(|(_, e)| *e)
            .unwrap_or(2)
    }
}

/// `amount_minor` as a decimal in `currency`'s minor-unit scale: 1999 USD →
/// "19.99", 1999 JPY → "1999", 1999 KWD → "1.999". Integer arithmetic only;
/// an unknown code is shown with 2 decimals.
pub fn decimal(amount_minor: i64, currency: &str) -> String {
    let exp = Currency::parse(currency).map_or(2, Currency::minor_unit);
    let sign = if amount_minor < 0 { "-" } else { "" };
    let abs = amount_minor.unsigned_abs();
    if exp == 0 {
        return format!("{sign}{abs}");
    }
    let scale = 10u64.pow(u32::from(exp));
    format!(
        "{sign}{}.{:0width$}",
        abs / scale,
        abs % scale,
        width = usize::from(exp)
    )
}

impl From<Currency> for String {
    fn from(c: Currency) -> String {
        c.0.to_owned()
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// The app's order identifier: 1-200 printable characters, no surrounding blanks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OrderId(String);

impl OrderId {
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        let field = "order_id";
        if raw.trim().is_empty() {
            return Err(InputError::new(field, "must not be empty"));
        }
        if raw.trim() != raw {
            return Err(InputError::new(field, "must not start or end with blanks"));
        }
        if raw.chars().count() > 200 {
            return Err(InputError::new(field, "must be at most 200 characters"));
        }
        if raw.chars().any(char::is_control) {
            return Err(InputError::new(
                field,
                "must not contain control characters",
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The key that identifies one payment intent at the gateway. Every technical
/// retry of the same attempt re-sends the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(Uuid);

impl IdempotencyKey {
    pub fn generate() -> Self {
        Self(Uuid::new_v4())
    }

    pub fn parse(raw: &str) -> Result<Self, InputError> {
        let uuid = Uuid::try_parse(raw.trim()).map_err(|_| {
            InputError::new(
                "idempotency_key",
                format!("must be a UUID such as 8f14e45f-ceea-467f-a0e6-1c2f0d5e6a01, got {raw:?}"),
            )
        })?;
        if uuid.is_nil() {
            return Err(InputError::new(
                "idempotency_key",
                "must not be the nil UUID",
            ));
        }
        Ok(Self(uuid))
    }

    pub fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }

    pub fn uuid(self) -> Uuid {
        self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An opaque payment-method token issued by the gateway (e.g. `pm_…`).
/// Anything that looks like a card number is refused: cobro never stores
/// card data. `Debug` does not print the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PaymentMethod(String);

impl PaymentMethod {
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        let field = "payment_method";
        if raw.is_empty() || raw.len() > 255 {
            return Err(InputError::new(field, "must be 1-255 characters"));
        }
        if !raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
        {
            return Err(InputError::new(
                field,
                "must be an opaque token of letters, digits, '_', '-', '.', ':'",
            ));
        }
        // Same rule as the CHECK constraint in the migration: a token with a
        // dozen digits or more may be a card number (PAN), so it is refused.
        if raw.chars().filter(char::is_ascii_digit).count() >= 12 {
            return Err(InputError::new(
                field,
                "looks like a card number; send the gateway's payment-method token instead",
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn token(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PaymentMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PaymentMethod(..)")
    }
}

/// A validated request to charge an order once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeRequest {
    pub order_id: OrderId,
    pub amount: Amount,
    pub currency: Currency,
    pub key: IdempotencyKey,
    pub payment_method: Option<PaymentMethod>,
}

impl ChargeRequest {
    /// Parses raw input; the key is generated when the caller has none.
    pub fn parse(
        order_id: &str,
        amount_minor: i64,
        currency: &str,
        key: Option<&str>,
        payment_method: Option<&str>,
    ) -> Result<Self, InputError> {
        Ok(Self {
            order_id: OrderId::parse(order_id)?,
            amount: Amount::parse(amount_minor)?,
            currency: Currency::parse(currency)?,
            key: match key {
                Some(k) => IdempotencyKey::parse(k)?,
                None => IdempotencyKey::generate(),
            },
            payment_method: payment_method.map(PaymentMethod::parse).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_input_names_its_field() {
        let key = "8f14e45f-ceea-467f-a0e6-1c2f0d5e6a01";
        type Case<'a> = (
            &'a str,
            i64,
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            &'a str,
        );
        let cases: &[Case] = &[
            ("o-1", 0, "USD", Some(key), None, "amount_minor"),
            ("o-1", -5, "USD", Some(key), None, "amount_minor"),
            ("o-1", 100, "XXX", Some(key), None, "currency"),
            ("o-1", 100, "usd", Some(key), None, "currency"),
            ("", 100, "USD", Some(key), None, "order_id"),
            ("  ", 100, "USD", Some(key), None, "order_id"),
            (
                "o-1",
                100,
                "USD",
                Some("not-a-uuid"),
                None,
                "idempotency_key",
            ),
            (
                "o-1",
                100,
                "USD",
                Some("00000000-0000-0000-0000-000000000000"),
                None,
                "idempotency_key",
            ),
            (
                "o-1",
                100,
                "USD",
                Some(key),
                Some("4242424242424242"),
                "payment_method",
            ),
            (
                "o-1",
                100,
                "USD",
                Some(key),
                Some("pm card"),
                "payment_method",
            ),
        ];
        for (order, amount, cur, k, pm, field) in cases {
            let err = ChargeRequest::parse(order, *amount, cur, *k, *pm).unwrap_err();
            assert_eq!(
                err.field, *field,
                "input {order:?} {amount} {cur} {k:?} {pm:?}"
            );
        }
    }

    #[test]
    fn good_input_parses_and_generates_a_key_when_missing() {
        let a = ChargeRequest::parse("o-1", 1999, "USD", None, Some("pm_card_visa")).unwrap();
        let b = ChargeRequest::parse("o-1", 1999, "USD", None, None).unwrap();
        assert_eq!(a.amount.minor(), 1999);
        assert_ne!(a.key, b.key, "each intent gets its own key");
        assert_eq!(Currency::parse("JPY").unwrap().minor_unit(), 0);
        assert_eq!(decimal(1999, "USD"), "19.99");
        assert_eq!(decimal(5, "USD"), "0.05");
        assert_eq!(decimal(1999, "JPY"), "1999");
        assert_eq!(decimal(1999, "KWD"), "1.999");
        assert_eq!(decimal(-250, "EUR"), "-2.50");
        assert_eq!(decimal(i64::MIN, "USD"), "-92233720368547758.08");
    }

    #[test]
    fn payment_method_debug_hides_the_token() {
        let pm = PaymentMethod::parse("pm_secret_token").unwrap();
        assert!(!format!("{pm:?}").contains("secret"));
    }
}
