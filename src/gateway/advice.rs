//! Card-network advice on a decline, read as what a business retry may do,
//! and how it is kept in the stored decline code.
//!
//! The networks' rules (documented in `docs/src/guides/business-retries.md`,
//! "Card-network retry rules"):
//! - **Mastercard merchant advice codes** (`network_advice_code`): 03 "do
//!   not try again" and 21 "payment cancelled" forbid any retry; 24-30 say
//!   "retry after" 1 h, 24 h, 2, 4, 6, 8, 10 days.
//! - **Visa decline categories**, from the issuer's response code
//!   (`network_decline_code`): category 1, "the issuer will never approve"
//!   (04, 07, 12, 14, 15, 41, 43, 46, 57, R0, R1, R3), may never be
//!   retried; categories 2 (cannot approve now) and 3 (data quality) may, at
//!   most 15 times in 30 days (`COBRO_RETRY_CARD_CAP`); 4 is the rest. The
//!   category-1 codes mean the same under ISO 8583 on every network (pick
//!   up, lost, stolen, closed, invalid account…), so they are never retried
//!   whatever the brand: that only ever retries less.
//! - **The gateway's own advice** (Stripe's `advice_code`):
//!   `do_not_try_again` forbids a retry.
//!
//! Invariant: pure; the advice travels as a suffix of the stored decline
//! code (`<code>/do_not_try_again`, `<code>/retry_after_<n>h`), so it is in
//! the row, the transition log and every notice, and the retry policy reads
//! it back with [`parse_stored`]. A suffix can only forbid or delay a
//! retry, never allow one the allow-list does not.

use std::time::Duration;

/// The network codes a gateway gave with a decline (all optional).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetworkCodes<'a> {
    /// The gateway's own advice (Stripe's `advice_code`).
    pub advice_code: Option<&'a str>,
    /// Mastercard's merchant advice code.
    pub network_advice_code: Option<&'a str>,
    /// The issuer's raw response code (Visa's decline categories).
    pub network_decline_code: Option<&'a str>,
}

/// What the advice allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// Nothing beyond the decline code itself.
    None,
    /// Never retry this card for this payment.
    DoNotRetry,
    /// Not before this long after the decline.
    RetryAfter(Duration),
}

const HOUR: u64 = 3600;

/// Visa category 1: the issuer will never approve.
const VISA_CATEGORY_1: [&str; 12] = [
    "04", "07", "12", "14", "15", "41", "43", "46", "57", "R0", "R1", "R3",
];
/// Visa category 2: the issuer cannot approve at this time.
const VISA_CATEGORY_2: [&str; 18] = [
    "03", "19", "39", "51", "52", "53", "59", "61", "62", "65", "75", "78", "86", "91", "93", "96",
    "N3", "N4",
];
/// Visa category 3: data quality (expired, wrong CVV/PIN, wrong data).
const VISA_CATEGORY_3: [&str; 7] = ["54", "55", "6P", "70", "82", "1A", "N7"];

/// Visa's decline category (1-4) of an issuer response code; `None` when
/// there is no code or it is an approval ("00").
pub fn visa_category(code: &str) -> Option<u8> {
    let code = code.trim().to_ascii_uppercase();
    match code.as_str() {
        "" | "00" => None,
        c if VISA_CATEGORY_1.contains(&c) => Some(1),
        c if VISA_CATEGORY_2.contains(&c) => Some(2),
        c if VISA_CATEGORY_3.contains(&c) => Some(3),
        _ => Some(4),
    }
}

/// Mastercard's "retry after" merchant advice codes.
fn mastercard_retry_after(mac: &str) -> Option<Duration> {
    let hours = match mac {
        "24" => 1,
        "25" => 24,
        "26" => 48,
        "27" => 96,
        "28" => 144,
        "29" => 192,
        "30" => 240,
        _ => return None,
    };
    Some(Duration::from_secs(hours * HOUR))
}

/// The advice the codes give, the strictest first: any "do not retry"
/// wins over a "retry after".
pub fn advise(codes: &NetworkCodes<'_>) -> Advice {
    let mac = codes.network_advice_code.map(str::trim);
    let never = codes.advice_code == Some("do_not_try_again")
        || matches!(mac, Some("03" | "21"))
        || codes
            .network_decline_code
            .and_then(visa_category)
            .is_some_and(|c| c == 1);
    if never {
        return Advice::DoNotRetry;
    }
    match mac.and_then(mastercard_retry_after) {
        Some(d) => Advice::RetryAfter(d),
        None => Advice::None,
    }
}

/// The decline code as stored: `code` with the advice as a suffix.
pub fn stored(code: &str, advice: Advice) -> String {
    let code: String = code.chars().take(100).collect();
    match advice {
        Advice::None => code,
        Advice::DoNotRetry => format!("{code}/do_not_try_again"),
        Advice::RetryAfter(d) => format!("{code}/retry_after_{}h", d.as_secs().div_ceil(HOUR)),
    }
}

/// A stored decline code read back: the gateway's code and the advice.
/// An unknown suffix is kept as part of the code (so no allow-list entry
/// matches it: it is not retried).
pub fn parse_stored(stored: &str) -> (&str, Advice) {
    let Some((base, suffix)) = stored.rsplit_once('/') else {
        return (stored, Advice::None);
    };
    if suffix == "do_not_try_again" {
        return (base, Advice::DoNotRetry);
    }
    let hours = suffix
        .strip_prefix("retry_after_")
        .and_then(|h| h.strip_suffix('h'))
        .and_then(|h| h.parse::<u64>().ok());
    match hours {
        Some(h) => (base, Advice::RetryAfter(Duration::from_secs(h * HOUR))),
        None => (stored, Advice::None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes<'a>(
        advice: Option<&'a str>,
        mac: Option<&'a str>,
        network: Option<&'a str>,
    ) -> NetworkCodes<'a> {
        NetworkCodes {
            advice_code: advice,
            network_advice_code: mac,
            network_decline_code: network,
        }
    }

    #[test]
    fn the_networks_advice_table() {
        let h = |n: u64| Advice::RetryAfter(Duration::from_secs(n * HOUR));
        let table = [
            (codes(None, None, None), Advice::None),
            (
                codes(Some("do_not_try_again"), None, None),
                Advice::DoNotRetry,
            ),
            (codes(Some("try_again_later"), None, None), Advice::None),
            (codes(None, Some("03"), None), Advice::DoNotRetry),
            (codes(None, Some("21"), None), Advice::DoNotRetry),
            (codes(None, Some("01"), None), Advice::None),
            (codes(None, Some("24"), None), h(1)),
            (codes(None, Some("25"), None), h(24)),
            (codes(None, Some("26"), None), h(48)),
            (codes(None, Some("29"), None), h(192)),
            (codes(None, Some("30"), None), h(240)),
            // Visa category 1 is never retried; 2 and 3 follow the policy.
            (codes(None, None, Some("41")), Advice::DoNotRetry),
            (codes(None, None, Some("r1")), Advice::DoNotRetry),
            (codes(None, None, Some("51")), Advice::None),
            (codes(None, None, Some("54")), Advice::None),
            // "Do not retry" wins over "retry after".
            (codes(None, Some("25"), Some("43")), Advice::DoNotRetry),
        ];
        for (c, want) in table {
            assert_eq!(advise(&c), want, "{c:?}");
        }
        assert_eq!(visa_category("51"), Some(2));
        assert_eq!(visa_category("54"), Some(3));
        assert_eq!(visa_category("05"), Some(4));
        assert_eq!(visa_category("00"), None);
    }

    #[test]
    fn the_advice_survives_the_stored_code() {
        for advice in [
            Advice::None,
            Advice::DoNotRetry,
            Advice::RetryAfter(Duration::from_secs(48 * HOUR)),
        ] {
            let s = stored("do_not_honor", advice);
            assert_eq!(parse_stored(&s), ("do_not_honor", advice), "{s}");
        }
        assert_eq!(
            stored(
                "do_not_honor",
                Advice::RetryAfter(Duration::from_secs(HOUR))
            ),
            "do_not_honor/retry_after_1h"
        );
        // An unknown suffix stays part of the code.
        assert_eq!(parse_stored("x/y"), ("x/y", Advice::None));
    }
}
