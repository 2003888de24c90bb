//! Domain values parsed once at the boundary: amounts, currencies, order ids,
//! idempotency keys and opaque gateway tokens (payment methods, customers).
//!
//! Invariant: once a value of these types exists it is valid. Money is an
//! integer count of minor units (`0 < amount <= AMOUNT_CEILING`), never a
//! float; a currency is a known ISO 4217 code; a payment method or a
//! customer is an opaque token, never card data. Every parse error names
//! the field it came from, so a caller can tell the user exactly what to
//! fix.
//!
//! One definition of valid input: PostgreSQL's `cobro.enqueue_charge`
//! accepts and refuses exactly what these parsers do, field by field and
//! with the same reasons (tests/same_rules.rs feeds both the same strings,
//! and every Unicode code point). SQLite has no stored functions: its
//! enqueue takes a [`ChargeRequest`] parsed here.
//!
//! Amounts and currencies are in `money.rs`; order ids, keys and tokens here;
//! what is taken from a gateway's or a webhook's text, in [`text`]. Values
//! several layers share sit here too, so no layer climbs to reach them: a
//! wake-up's payload (`wake.rs`), a decline's category (`decline.rs`) and
//! reconciliation's windows, findings and case kinds (`case.rs`); the card
//! networks' retry caps and finance's override reason in [`card_caps`].

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

pub mod card_caps;
mod case;
mod decline;
mod money;
pub mod settlement;
pub mod text;
mod wake;

pub use case::{CaseKind, Finding, Window};
pub use decline::Category;
pub use wake::Wake;

pub use card_caps::{BadOverrideReason, CardCaps, OverrideReason};
pub use money::{
    AMOUNT_CEILING, Amount, CURRENCIES, Currency, DEFAULT_MAX_AMOUNT, MAX_AMOUNT_VAR, MaxAmount,
    decimal, parse_max_amount_arg,
};
/// Characters an order id may not contain anywhere: Unicode's control
/// (Cc: C0, DEL, C1), format (Cf: soft hyphen, zero-width characters,
/// direction marks and overrides, U+FEFF, ...), line-separator (Zl) and
/// paragraph-separator (Zp) categories, as inclusive ranges. The same list
/// is the bracket expression of `cobro.order_id_problem` in
/// migrations/postgres/…_same_rules.sql; a test feeds every code point to
/// both.
const INVISIBLE: &[(char, char)] = &[
    ('\u{0000}', '\u{001F}'),
    ('\u{007F}', '\u{009F}'),
    ('\u{00AD}', '\u{00AD}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{2028}', '\u{202E}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFF9}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0001}', '\u{E0001}'),
    ('\u{E0020}', '\u{E007F}'),
];

/// Unicode's White_Space characters (what `char::is_whitespace` says), as
/// inclusive ranges: an order id may not start or end with one. The same
/// list is in `cobro.order_id_problem`.
const WHITESPACE: &[(char, char)] = &[
    ('\u{0009}', '\u{000D}'),
    ('\u{0020}', '\u{0020}'),
    ('\u{0085}', '\u{0085}'),
    ('\u{00A0}', '\u{00A0}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{2000}', '\u{200A}'),
    ('\u{2028}', '\u{2029}'),
    ('\u{202F}', '\u{202F}'),
    ('\u{205F}', '\u{205F}'),
    ('\u{3000}', '\u{3000}'),
];

fn in_ranges(c: char, ranges: &[(char, char)]) -> bool {
    ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c))
}

/// `U+00A0`: how a refusal names an invisible character.
fn code_point(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

/// The longest order id, in characters (Unicode code points).
pub const ORDER_ID_MAX_CHARS: usize = 200;

/// The app's order identifier: 1-200 characters (Unicode code points); no
/// control or invisible format character anywhere (Unicode categories Cc,
/// Cf, Zl, Zp: tabs, newlines, C1 controls, U+200B, U+FEFF, direction
/// marks, ...); no whitespace of any Unicode kind (U+0020, U+00A0, U+2003,
/// U+3000, ...) at the start or the end. Spaces inside, letters of any
/// script, emoji and combining marks are fine. PostgreSQL's
/// `cobro.enqueue_charge` applies exactly this rule, with the same reasons.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OrderId(String);

impl OrderId {
    /// Checks, in this order (the first failure is the reason given):
    /// empty, longer than 200 characters, an invisible character anywhere,
    /// whitespace first, whitespace last.
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        let refuse = |reason: String| Err(InputError::new("order_id", reason));
        if raw.is_empty() {
            return refuse("must not be empty".into());
        }
        let chars = raw.chars().count();
        if chars > ORDER_ID_MAX_CHARS {
            return refuse(format!(
                "must be at most {ORDER_ID_MAX_CHARS} characters, got {chars}"
            ));
        }
        if let Some(c) = raw.chars().find(|c| in_ranges(*c, INVISIBLE)) {
            return refuse(format!(
                "must not contain control or invisible format characters, found {}",
                code_point(c)
            ));
        }
        if let Some(c) = raw.chars().next().filter(|c| in_ranges(*c, WHITESPACE)) {
            return refuse(format!(
                "must not start with whitespace, found {}",
                code_point(c)
            ));
        }
        if let Some(c) = raw.chars().last().filter(|c| in_ranges(*c, WHITESPACE)) {
            return refuse(format!(
                "must not end with whitespace, found {}",
                code_point(c)
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

    /// A UUID written the way PostgreSQL's `uuid` type reads it (so the
    /// SQL function and this parser accept the same text): 32 hexadecimal
    /// digits, either case, usually as 8-4-4-4-12 with hyphens (a hyphen
    /// may follow any group of four digits but the last), optionally in
    /// braces; nothing else, not even surrounding spaces. Not the nil UUID.
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        let uuid = uuid_as_postgres_reads_it(raw).ok_or_else(|| {
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

    /// The key cobro makes for an order's business retry number
    /// `attempt_number`: derived, never random, so that a retry created
    /// again (a database failover that lost its row after it was sent)
    /// carries the same key and the gateway deduplicates it. A name-based
    /// UUID, version 8 over SHA-256 (RFC 9562, appendix B.2): the first 16
    /// bytes of SHA-256(namespace || "cobro.business_retry:" || order ||
    /// ":" || number). `namespace` is the deployment's
    /// (`settings.key_namespace`); PostgreSQL's `cobro.retry_key` computes
    /// the same (tests/charge_gate.rs compares them).
    pub fn for_retry(namespace: Uuid, order_id: &str, attempt_number: i32) -> Self {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(namespace.as_bytes());
        h.update(format!("cobro.business_retry:{order_id}:{attempt_number}").as_bytes());
        let digest = h.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        Self(Uuid::new_v8(bytes))
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

/// PostgreSQL's `uuid` input (`string_to_uuid` in its `uuid.c`), step for
/// step: an optional `{`, 16 pairs of hex digits with an optional `-` after
/// every second pair but the last, the matching `}`, then the end.
fn uuid_as_postgres_reads_it(raw: &str) -> Option<Uuid> {
    let text = raw.as_bytes();
    let braces = text.first() == Some(&b'{');
    let mut at = usize::from(braces);
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        let hex = |at: usize| text.get(at).and_then(|b| char::from(*b).to_digit(16));
        *byte = u8::try_from((hex(at)? << 4) | hex(at + 1)?).ok()?;
        at += 2;
        if text.get(at) == Some(&b'-') && i % 2 == 1 && i < 15 {
            at += 1;
        }
    }
    if braces {
        (text.get(at) == Some(&b'}')).then_some(())?;
        at += 1;
    }
    (at == text.len()).then(|| Uuid::from_bytes(bytes))
}

/// The rule every opaque gateway token meets (a payment method, a
/// customer): 1-255 characters, each an ASCII letter, digit, `_`, `-`, `.`
/// or `:`, with fewer than 12 digits in all. A dozen digits or more may be
/// a card number, so it is refused: cobro never stores card data. `what`
/// names the token a caller should send instead.
fn opaque_token(field: &'static str, raw: &str, what: &str) -> Result<String, InputError> {
    if !(1..=255).contains(&raw.chars().count()) {
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
    // Same rule as the CHECK constraints in the migrations: a token with a
    // dozen digits or more may be a card number (PAN), so it is refused.
    if raw.chars().filter(char::is_ascii_digit).count() >= 12 {
        return Err(InputError::new(
            field,
            format!("looks like a card number; send the gateway's {what} instead"),
        ));
    }
    Ok(raw.to_owned())
}

/// An opaque payment-method token issued by the gateway (e.g. `pm_…`):
/// the rule of every opaque token (1-255 characters of A-Z a-z 0-9 `_` `-`
/// `.` `:`, fewer than 12 digits). PostgreSQL's `cobro.enqueue_charge`
/// applies the same rule, with the same reasons. `Debug` does not print
/// the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PaymentMethod(String);

impl PaymentMethod {
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        opaque_token("payment_method", raw, "payment-method token").map(Self)
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

/// The gateway's customer a saved payment method belongs to (Stripe: a
/// Customer, `cus_…`): an opaque token under the same rule as
/// [`PaymentMethod`], refused naming the field `customer`. A charge of a
/// saved card sends it (Stripe refuses a PaymentIntent for a payment
/// method attached to a Customer unless `customer` is given). PostgreSQL's
/// `cobro.enqueue_charge` applies the same rule, with the same reasons.
/// `Debug` does not print it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Customer(String);

impl Customer {
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        opaque_token("customer", raw, "customer id").map(Self)
    }

    pub fn id(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Customer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Customer(..)")
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
    /// The gateway's customer the payment method belongs to, if it is saved
    /// to one ([`ChargeRequest::with_customer`]).
    pub customer: Option<Customer>,
}

impl ChargeRequest {
    /// Parses raw input; the key is generated when the caller has none.
    /// The amount may be up to [`AMOUNT_CEILING`]; apply your own maximum
    /// with [`ChargeRequest::parse_within`].
    pub fn parse(
        order_id: &str,
        amount_minor: i64,
        currency: &str,
        key: Option<&str>,
        payment_method: Option<&str>,
    ) -> Result<Self, InputError> {
        Self::parse_within(
            order_id,
            amount_minor,
            currency,
            key,
            payment_method,
            MaxAmount::CEILING,
        )
    }

    /// [`ChargeRequest::parse`] with the amount at most `max`, e.g.
    /// `MaxAmount::new(5_000_000, "our checkout's limit")?`.
    pub fn parse_within(
        order_id: &str,
        amount_minor: i64,
        currency: &str,
        key: Option<&str>,
        payment_method: Option<&str>,
        max: MaxAmount,
    ) -> Result<Self, InputError> {
        Ok(Self {
            order_id: OrderId::parse(order_id)?,
            amount: Amount::parse_within(amount_minor, max)?,
            currency: Currency::parse(currency)?,
            key: match key {
                Some(k) => IdempotencyKey::parse(k)?,
                None => IdempotencyKey::generate(),
            },
            payment_method: payment_method.map(PaymentMethod::parse).transpose()?,
            customer: None,
        })
    }

    /// The request charging a payment method saved to the gateway's
    /// customer `customer` (checked last, after every field of
    /// [`ChargeRequest::parse`], as `cobro.enqueue_charge` checks it);
    /// `None` leaves it without one.
    pub fn with_customer(self, customer: Option<&str>) -> Result<Self, InputError> {
        Ok(Self {
            customer: customer.map(Customer::parse).transpose()?,
            ..self
        })
    }
}

#[cfg(test)]
mod tests;
