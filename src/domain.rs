//! Domain values parsed once at the boundary: amounts, currencies, order ids,
//! idempotency keys and payment-method tokens.
//!
//! Invariant: once a value of these types exists it is valid. Money is an
//! integer count of minor units (`0 < amount <= AMOUNT_CEILING`), never a
//! float; a currency is a known ISO 4217 code; a payment method is an opaque
//! token, never card data. Every parse error names the field it came from,
//! so a caller can tell the user exactly what to fix.
//!
//! One definition of valid input: PostgreSQL's `cobro.enqueue_charge`
//! accepts and refuses exactly what these parsers do, field by field and
//! with the same reasons (tests/same_rules.rs feeds both the same strings,
//! and every Unicode code point). SQLite has no stored functions: its
//! enqueue takes a [`ChargeRequest`] parsed here.

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

/// The hard ceiling on `amount_minor`: 999,999,999,999 (10^12 - 1) minor
/// units, 9,999,999,999.99 in a 2-decimal currency. The database refuses
/// anything above it in both backends (a CHECK on PostgreSQL, triggers on
/// SQLite), so no stored amount and no realistic sum of them comes near
/// `i64::MAX`; sums are computed in `i128` all the same.
pub const AMOUNT_CEILING: i64 = 999_999_999_999;

/// The default of `COBRO_MAX_AMOUNT_MINOR`: 99,999,999 (Stripe's 8 digits,
/// 999,999.99 in a 2-decimal currency).
pub const DEFAULT_MAX_AMOUNT: i64 = 99_999_999;

/// The variable that sets the maximum amount `cobro serve`, `cobro enqueue`
/// and `cobro refund` accept.
pub const MAX_AMOUNT_VAR: &str = "COBRO_MAX_AMOUNT_MINOR";

/// A positive amount of money in the currency's minor units (cents for USD),
/// at most [`AMOUNT_CEILING`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Amount(i64);

impl Amount {
    /// A positive amount no larger than [`AMOUNT_CEILING`]. Apply a lower
    /// limit of your own with [`Amount::parse_within`].
    pub fn parse(minor: i64) -> Result<Self, InputError> {
        Self::parse_within(minor, MaxAmount::CEILING)
    }

    /// A positive amount no larger than `max`; a refusal names
    /// `amount_minor`, the maximum and what sets it.
    pub fn parse_within(minor: i64, max: MaxAmount) -> Result<Self, InputError> {
        if minor <= 0 {
            return Err(InputError::new(
                "amount_minor",
                format!("must be a positive whole number of minor units, got {minor}"),
            ));
        }
        // `max` is never above the ceiling (see `MaxAmount::new`).
        if minor > max.minor {
            return Err(max.refusal(minor));
        }
        Ok(Self(minor))
    }

    pub fn minor(self) -> i64 {
        self.0
    }
}

/// The largest `amount_minor` an entry point accepts: at most
/// [`AMOUNT_CEILING`], with what sets it (named in every refusal, e.g.
/// `COBRO_MAX_AMOUNT_MINOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxAmount {
    minor: i64,
    set_by: &'static str,
}

impl MaxAmount {
    /// The ceiling the database enforces.
    pub const CEILING: MaxAmount = MaxAmount {
        minor: AMOUNT_CEILING,
        set_by: "the ceiling the database enforces",
    };

    /// A maximum of `minor` units, 1 to [`AMOUNT_CEILING`]; `set_by` says
    /// where it comes from (a variable, "this shop's limit") in refusals.
    pub fn new(minor: i64, set_by: &'static str) -> Result<Self, InputError> {
        if !(1..=AMOUNT_CEILING).contains(&minor) {
            return Err(InputError::new(
                "max_amount_minor",
                format!(
                    "{set_by} must be 1 to {AMOUNT_CEILING} minor units \
                     (the ceiling the database enforces), got {minor}"
                ),
            ));
        }
        Ok(Self { minor, set_by })
    }

    pub fn minor(self) -> i64 {
        self.minor
    }

    /// The refusal of `minor` (shown as given: it may be a JSON number too
    /// large for an `i64`), naming `amount_minor`, the maximum and what sets it.
    pub(crate) fn refusal(self, minor: impl fmt::Display) -> InputError {
        InputError::new(
            "amount_minor",
            format!(
                "must be at most {} minor units (set by {}), got {minor}",
                self.minor, self.set_by
            ),
        )
    }
}

/// `COBRO_MAX_AMOUNT_MINOR`'s default: [`DEFAULT_MAX_AMOUNT`].
impl Default for MaxAmount {
    fn default() -> Self {
        Self {
            minor: DEFAULT_MAX_AMOUNT,
            set_by: MAX_AMOUNT_VAR,
        }
    }
}

/// Shows the number of minor units (clap prints it as the default).
impl fmt::Display for MaxAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.minor.fmt(f)
    }
}

/// `COBRO_MAX_AMOUNT_MINOR` (or `--max-amount-minor`) as given: a whole
/// number from 1 to [`AMOUNT_CEILING`]; anything else stops the process at
/// start-up with a message naming the variable.
pub fn parse_max_amount_arg(raw: &str) -> Result<MaxAmount, String> {
    let minor: i64 = raw.trim().parse().map_err(|_| {
        format!(
            "{MAX_AMOUNT_VAR} must be a whole number of minor units \
             from 1 to {AMOUNT_CEILING}, got {raw:?}"
        )
    })?;
    MaxAmount::new(minor, MAX_AMOUNT_VAR).map_err(|e| e.reason)
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

/// A known ISO 4217 currency code: exactly one of [`CURRENCIES`] (upper
/// case, nothing around it), as `cobro.currencies` holds them.
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
/// "19.99", 1999 JPY → "1999", 1999 KWD → "1.999". Integer arithmetic only,
/// exact for any `i128` (sums of amounts); an unknown code is shown with 2
/// decimals.
pub fn decimal(amount_minor: impl Into<i128>, currency: &str) -> String {
    let amount_minor: i128 = amount_minor.into();
    let exp = Currency::parse(currency).map_or(2, Currency::minor_unit);
    let sign = if amount_minor < 0 { "-" } else { "" };
    let abs = amount_minor.unsigned_abs();
    if exp == 0 {
        return format!("{sign}{abs}");
    }
    let scale = 10u128.pow(u32::from(exp));
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

/// An opaque payment-method token issued by the gateway (e.g. `pm_…`):
/// 1-255 characters, each an ASCII letter, digit, `_`, `-`, `.` or `:`,
/// with fewer than 12 digits in all. A dozen digits or more may be a card
/// number, so it is refused: cobro never stores card data. PostgreSQL's
/// `cobro.enqueue_charge` applies the same rule, with the same reasons.
/// `Debug` does not print the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PaymentMethod(String);

impl PaymentMethod {
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        let field = "payment_method";
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
    fn amounts_stop_at_the_ceiling_or_at_a_lower_maximum() {
        assert_eq!(
            Amount::parse(AMOUNT_CEILING).unwrap().minor(),
            AMOUNT_CEILING
        );
        for over in [AMOUNT_CEILING + 1, i64::MAX] {
            let e = Amount::parse(over).unwrap_err();
            assert_eq!(e.field, "amount_minor");
            assert!(e.reason.contains("at most 999999999999"), "{e}");
            let e = ChargeRequest::parse("o-1", over, "USD", None, None).unwrap_err();
            assert_eq!(e.field, "amount_minor", "{e}");
        }
        let max = MaxAmount::default();
        assert_eq!(max.minor(), DEFAULT_MAX_AMOUNT);
        let within = |amount| ChargeRequest::parse_within("o-1", amount, "USD", None, None, max);
        assert!(within(DEFAULT_MAX_AMOUNT).is_ok());
        for over in [DEFAULT_MAX_AMOUNT + 1, AMOUNT_CEILING + 1, i64::MAX] {
            let e = within(over).unwrap_err();
            assert_eq!(e.field, "amount_minor");
            assert_eq!(
                e.to_string(),
                format!(
                    "invalid amount_minor: must be at most 99999999 minor units \
                     (set by COBRO_MAX_AMOUNT_MINOR), got {over}"
                ),
                "the lower maximum is the one named"
            );
        }
        assert_eq!(within(0).unwrap_err().field, "amount_minor");
        let mine = MaxAmount::new(5_000, "this shop's limit").unwrap();
        let e = Amount::parse_within(5_001, mine).unwrap_err();
        assert!(e.reason.contains("at most 5000") && e.reason.contains("this shop's limit"));
        assert!(MaxAmount::new(0, "x").is_err());
        assert!(MaxAmount::new(AMOUNT_CEILING + 1, "x").is_err());
    }

    #[test]
    fn the_configured_maximum_is_refused_above_the_ceiling() {
        assert_eq!(parse_max_amount_arg("5000").unwrap().minor(), 5_000);
        assert_eq!(
            parse_max_amount_arg("999999999999").unwrap(),
            MaxAmount::new(AMOUNT_CEILING, MAX_AMOUNT_VAR).unwrap()
        );
        for bad in ["1000000000000", "0", "-1", "1e6", "lots"] {
            let e = parse_max_amount_arg(bad).unwrap_err();
            assert!(
                e.contains("COBRO_MAX_AMOUNT_MINOR") && e.contains("999999999999"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn decimal_is_exact_for_sums_beyond_i64() {
        let sum = i128::from(i64::MAX) * 3 + 7;
        assert_eq!(decimal(sum, "USD"), "276701161105643274.28");
        assert_eq!(decimal(sum, "JPY"), "27670116110564327428");
        assert_eq!(decimal(-sum, "KWD"), "-27670116110564327.428");
        assert_eq!(decimal(i128::MIN, "JPY"), i128::MIN.to_string());
    }

    #[test]
    fn the_character_tables_are_unicodes_categories() {
        use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory};
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            let invisible = matches!(
                c.general_category(),
                G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator
            );
            assert_eq!(in_ranges(c, INVISIBLE), invisible, "{}", code_point(c));
            assert_eq!(
                in_ranges(c, WHITESPACE),
                c.is_whitespace(),
                "{}",
                code_point(c)
            );
        }
    }

    #[test]
    fn order_ids_refuse_invisible_characters_and_whitespace_of_any_kind_at_the_ends() {
        let long = |n: usize, c: char| std::iter::repeat_n(c, n).collect::<String>();
        let ok = [
            "o-1".to_owned(),
            "order 42".into(),
            "pedido\u{00A0}7".into(),
            "注文\u{3000}番号".into(),
            "🍕-1".into(),
            "👩\u{1F3FD}".into(),
            "cafe\u{0301}".into(),
            "\u{0301}x".into(),
            "x\u{E000}".into(),
            long(200, 'a'),
            long(200, '🍕'),
        ];
        for raw in &ok {
            assert_eq!(
                OrderId::parse(raw).map(|o| o.0).as_ref(),
                Ok(raw),
                "{raw:?}"
            );
        }
        let refused: &[(String, &str)] = &[
            (String::new(), "must not be empty"),
            (long(201, 'a'), "must be at most 200 characters, got 201"),
            (long(201, 'é'), "must be at most 200 characters, got 201"),
            (
                "o-1\u{00A0}".into(),
                "must not end with whitespace, found U+00A0",
            ),
            (
                "\u{2003}o-1".into(),
                "must not start with whitespace, found U+2003",
            ),
            (
                "o-1\u{3000}".into(),
                "must not end with whitespace, found U+3000",
            ),
            (
                " o-1".into(),
                "must not start with whitespace, found U+0020",
            ),
            ("   ".into(), "must not start with whitespace, found U+0020"),
            (
                "o-1\t".into(),
                "must not contain control or invisible format characters, found U+0009",
            ),
            (
                "o\n1".into(),
                "must not contain control or invisible format characters, found U+000A",
            ),
            (
                "o-1\u{0085}".into(),
                "must not contain control or invisible format characters, found U+0085",
            ),
            (
                "o\u{009B}1".into(),
                "must not contain control or invisible format characters, found U+009B",
            ),
            (
                "\u{FEFF}o-1".into(),
                "must not contain control or invisible format characters, found U+FEFF",
            ),
            (
                "o\u{200B}1".into(),
                "must not contain control or invisible format characters, found U+200B",
            ),
            (
                "o\u{202E}1".into(),
                "must not contain control or invisible format characters, found U+202E",
            ),
            (
                "o\u{E0041}1".into(),
                "must not contain control or invisible format characters, found U+E0041",
            ),
        ];
        for (raw, reason) in refused {
            let e = OrderId::parse(raw).unwrap_err();
            assert_eq!(
                (e.field, e.reason.as_str()),
                ("order_id", *reason),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn keys_are_read_as_postgresqls_uuid_type_reads_them() {
        let id = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
        let ok = [
            id,
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "{a0eebc999c0b4ef8bb6d6bb9bd380a11}",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
            "a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11",
        ];
        for raw in ok {
            assert_eq!(IdempotencyKey::parse(raw).unwrap().to_string(), id, "{raw}");
        }
        let refused = [
            "",
            " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
            "urn:uuid:a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1-",
            "a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
            "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1１",
            "00000000-0000-0000-0000-000000000000",
        ];
        for raw in refused {
            assert_eq!(
                IdempotencyKey::parse(raw).unwrap_err().field,
                "idempotency_key",
                "{raw:?}"
            );
        }
    }

    #[test]
    fn payment_method_debug_hides_the_token() {
        let pm = PaymentMethod::parse("pm_secret_token").unwrap();
        assert!(!format!("{pm:?}").contains("secret"));
    }
}
