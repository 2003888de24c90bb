//! Settlement, as the gateway's balance shows it: one balance transaction
//! per charge (gross, fee, net), the payouts that send the net to the bank,
//! and the fee the merchant's contract says a charge should cost.
//!
//! Invariant: money in integer minor units; a [`BalanceLine`] read from a
//! gateway has `net = gross - fee` (a line that does not is refused by the
//! reader, it is not "settled"); the expected fee is integer arithmetic,
//! rounded half up, never a float. These types sit at the bottom so the
//! gateway, the store and reconciliation share them without importing each
//! other.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::InputError;

/// One balance transaction of type `charge` (Stripe's
/// `balance_transaction`): what a charge put into the merchant's balance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BalanceLine {
    /// The gateway's id (`txn_…`).
    pub id: String,
    /// The charge it settles, as the gateway names it (`ch_…`), or the
    /// payment object our attempts record when the gateway tells it
    /// (Stripe: the charge's PaymentIntent).
    pub source: String,
    pub gross_minor: i64,
    pub fee_minor: i64,
    pub net_minor: i64,
    /// Upper case.
    pub currency: String,
    /// `available` (settled into the balance) or `pending`.
    pub status: String,
    pub created: DateTime<Utc>,
    /// The payout that carried it to the bank, when the gateway says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payout: Option<String>,
}

impl BalanceLine {
    /// Whether the funds reached the balance (Stripe's `available`).
    pub fn is_settled(&self) -> bool {
        self.status == "available"
    }
}

/// One payout (Stripe's `payout`) and the net of the lines it carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutLine {
    pub id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub status: String,
    pub created: DateTime<Utc>,
    /// The balance transactions the gateway lists for this payout.
    pub lines: Vec<String>,
    /// The sum of their net.
    pub lines_net_minor: i64,
}

/// The fee the merchant's contract sets per charge: `bps` hundredths of a
/// percent of the gross plus `fixed_minor` minor units
/// (`COBRO_SETTLEMENT_FEE`, e.g. `2.9%+30`), or `Off`: no expectation, the
/// gateway's fee is only recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FeeRule {
    Off,
    Contract { bps: u32, fixed_minor: i64 },
}

impl FeeRule {
    /// `off`, or `<percent>%+<fixed minor units>` (`2.9%+30`, `1.4%`, `+25`).
    /// The percent has at most two decimals (basis points).
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        let field = "COBRO_SETTLEMENT_FEE";
        let raw = raw.trim();
        if raw.eq_ignore_ascii_case("off") {
            return Ok(FeeRule::Off);
        }
        let bad = || {
            InputError::new(
                field,
                format!(
                    "{raw:?} is not a fee like 2.9%+30 (percent, then fixed minor units) or off"
                ),
            )
        };
        if raw.is_empty() {
            return Err(bad());
        }
        let (pct, fixed) = match raw.split_once('+') {
            Some((p, f)) => (p.trim(), f.trim()),
            None => (raw, ""),
        };
        if pct.is_empty() && fixed.is_empty() {
            return Err(bad());
        }
        let bps = if pct.is_empty() {
            0
        } else {
            let num = pct.strip_suffix('%').ok_or_else(bad)?.trim();
            let (int, frac) = num.split_once('.').unwrap_or((num, ""));
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if !digits(int) || frac.len() > 2 || (!frac.is_empty() && !digits(frac)) {
                return Err(bad());
            }
            let int: u32 = int.parse().map_err(|_| bad())?;
            let frac: u32 = format!("{frac:0<2}").parse().map_err(|_| bad())?;
            let bps = int.checked_mul(100).and_then(|v| v.checked_add(frac));
            match bps {
                Some(b) if b <= 10_000 => b,
                _ => return Err(InputError::new(field, "the percent must be 0-100")),
            }
        };
        let fixed_minor = if fixed.is_empty() {
            0
        } else {
            fixed
                .parse::<i64>()
                .ok()
                .filter(|f| (0..=1_000_000_000).contains(f))
                .ok_or_else(bad)?
        };
        Ok(FeeRule::Contract { bps, fixed_minor })
    }

    /// The fee a charge of `gross_minor` should cost; `None` when `Off`.
    pub fn expected(self, gross_minor: i64) -> Option<i64> {
        match self {
            FeeRule::Off => None,
            FeeRule::Contract { bps, fixed_minor } => {
                let part = (i128::from(gross_minor) * i128::from(bps) + 5_000) / 10_000;
                Some(
                    i64::try_from(part)
                        .unwrap_or(i64::MAX)
                        .saturating_add(fixed_minor),
                )
            }
        }
    }
}

impl std::fmt::Display for FeeRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FeeRule::Off => f.write_str("off"),
            FeeRule::Contract { bps, fixed_minor } => {
                write!(f, "{}.{:02}%+{}", bps / 100, bps % 100, fixed_minor)
            }
        }
    }
}

/// One settled charge as stored for finance (`settlements` table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettledCharge {
    pub attempt_id: uuid::Uuid,
    pub order_id: String,
    pub gateway_charge_id: String,
    pub balance_txn: String,
    pub gross_minor: i64,
    pub fee_minor: i64,
    pub net_minor: i64,
    pub currency: String,
    pub payout: Option<String>,
    pub settled_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fee_rules_parse_and_round_half_up() {
        let table = [
            ("2.9%+30", 1000, Some(59)),
            ("2.9%+30", 1017, Some(59)), // 29.493 -> 29
            ("2.9%+30", 1018, Some(60)), // 29.522 -> 30
            ("1.5%", 100, Some(2)),      // 1.5 -> 2
            ("+25", 5000, Some(25)),
            ("0%", 5000, Some(0)),
            ("off", 5000, None),
        ];
        for (raw, gross, want) in table {
            assert_eq!(
                FeeRule::parse(raw).unwrap().expected(gross),
                want,
                "{raw} {gross}"
            );
        }
        for bad in ["", "+", "2.9", "2.999%", "x%+1", "101%", "2%+-1", "2%+1.5"] {
            let e = FeeRule::parse(bad).unwrap_err();
            assert_eq!(e.field, "COBRO_SETTLEMENT_FEE", "{bad}");
        }
        assert_eq!(FeeRule::parse("2.9%+30").unwrap().to_string(), "2.90%+30");
    }
}
