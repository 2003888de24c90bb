//! Money at the boundary: an amount in minor units within the ceiling and
//! the configured maximum, a known ISO 4217 currency, and the decimal form
//! a person reads.
//!
//! Invariant: an [`Amount`] is a positive integer count of minor units, at
//! most [`AMOUNT_CEILING`] (and at most a [`MaxAmount`] where one applies);
//! never a float.

use std::fmt;

use serde::Serialize;

use super::InputError;

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
