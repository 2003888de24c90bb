//! Whether business retries pay: the retries by the class of the decline
//! that caused them and how they ended, and the share of settled ones that
//! got the money.
//!
//! Invariant: pure (no I/O); the class of a decline code is the customer
//! notices' [`Category`], never a second table, so the on-call and the
//! customer read the same words for the same code. A class with no settled
//! retry has no ratio (nothing is divided by zero).

use std::fmt::Write as _;

use super::text::header;
use crate::domain::Category;
use crate::store::{RetryOutcome, RetryTally};

/// Retries per class, counted per outcome in [`RetryOutcome::ALL`] order;
/// every class is present, 0 included.
pub(super) fn by_class(tallies: &[RetryTally]) -> Vec<(Category, [i64; 3])> {
    let mut rows: Vec<(Category, [i64; 3])> = Category::ALL.iter().map(|c| (*c, [0; 3])).collect();
    for t in tallies {
        // A previous attempt with no code is a decline without a reason.
        let class = Category::of(t.decline_code.as_deref().unwrap_or(""));
        let i = RetryOutcome::ALL
            .iter()
            .position(|o| *o == t.outcome)
            .expect("ALL has every outcome");
        if let Some((_, counts)) = rows.iter_mut().find(|(c, _)| *c == class) {
            counts[i] += t.count;
        }
    }
    rows
}

/// recovered / (recovered + declined); `None` when none is settled.
pub(super) fn ratio(counts: &[i64; 3]) -> Option<f64> {
    let [recovered, declined, _pending] = *counts;
    let settled = recovered + declined;
    (settled > 0).then(|| recovered as f64 / settled as f64)
}

pub(super) fn render(out: &mut String, tallies: &[RetryTally]) {
    let rows = by_class(tallies);
    header(
        out,
        "cobro_business_retries",
        "Business retries by the class of the decline that caused them (the previous attempt's) and outcome: recovered (APROBADO), declined (RECHAZADO), pending (anything else).",
    );
    for (class, counts) in &rows {
        for (outcome, n) in RetryOutcome::ALL.iter().zip(counts) {
            let _ = writeln!(
                out,
                "cobro_business_retries{{class=\"{}\",outcome=\"{}\"}} {n}",
                class.as_str(),
                outcome.as_str()
            );
        }
    }
    header(
        out,
        "cobro_business_retry_recovery_ratio",
        "Of the settled business retries after a decline of this class, the share approved: recovered / (recovered + declined). Absent for a class with none settled.",
    );
    for (class, counts) in &rows {
        if let Some(r) = ratio(counts) {
            let _ = writeln!(
                out,
                "cobro_business_retry_recovery_ratio{{class=\"{}\"}} {r}",
                class.as_str()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(code: Option<&str>, outcome: RetryOutcome, count: i64) -> RetryTally {
        RetryTally {
            decline_code: code.map(str::to_owned),
            outcome,
            count,
        }
    }

    #[test]
    fn codes_fold_into_their_class_and_the_ratio_skips_unsettled_classes() {
        use RetryOutcome::*;
        let tallies = [
            tally(Some("insufficient_funds"), Recovered, 3),
            tally(Some("insufficient_funds"), Declined, 1),
            tally(Some("insufficient_funds"), Pending, 2),
            // Two codes of one class add up.
            tally(Some("try_again_later"), Recovered, 1),
            tally(Some("issuer_unavailable"), Declined, 2),
            // The advice suffix decides the class, as in the notices.
            tally(Some("insufficient_funds/do_not_try_again"), Declined, 1),
            // Only pending: counted, but no ratio.
            tally(Some("expired_card"), Pending, 4),
            tally(None, Recovered, 1),
            tally(Some("do_not_honor"), Declined, 1),
        ];
        let mut out = String::new();
        render(&mut out, &tallies);
        let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        for line in [
            "cobro_business_retries{class=\"insufficient_funds\",outcome=\"recovered\"} 3",
            "cobro_business_retries{class=\"insufficient_funds\",outcome=\"declined\"} 1",
            "cobro_business_retries{class=\"insufficient_funds\",outcome=\"pending\"} 2",
            "cobro_business_retries{class=\"issuer_unavailable\",outcome=\"recovered\"} 1",
            "cobro_business_retries{class=\"issuer_unavailable\",outcome=\"declined\"} 2",
            "cobro_business_retries{class=\"do_not_try_again\",outcome=\"declined\"} 1",
            "cobro_business_retries{class=\"card_expired\",outcome=\"pending\"} 4",
            "cobro_business_retries{class=\"generic_declined\",outcome=\"recovered\"} 1",
            "cobro_business_retries{class=\"generic_declined\",outcome=\"declined\"} 1",
            "cobro_business_retries{class=\"card_invalid\",outcome=\"recovered\"} 0",
            "cobro_business_retry_recovery_ratio{class=\"insufficient_funds\"} 0.75",
            "cobro_business_retry_recovery_ratio{class=\"generic_declined\"} 0.5",
            "cobro_business_retry_recovery_ratio{class=\"do_not_try_again\"} 0",
        ] {
            assert!(lines.contains(&line), "{line} in\n{out}");
        }
        let third = format!(
            "cobro_business_retry_recovery_ratio{{class=\"issuer_unavailable\"}} {}",
            1.0 / 3.0
        );
        assert!(lines.contains(&third.as_str()), "{third} in\n{out}");
        // Every (class, outcome) pair is shown; a ratio only where settled.
        let count = |prefix: &str| lines.iter().filter(|l| l.starts_with(prefix)).count();
        assert_eq!(count("cobro_business_retries{"), Category::ALL.len() * 3);
        assert_eq!(count("cobro_business_retry_recovery_ratio{"), 4);
        assert!(
            !out.contains("class=\"card_expired\"} "),
            "pending only: no ratio"
        );
        assert!(out.contains("# TYPE cobro_business_retries gauge"));
        assert!(out.contains("# TYPE cobro_business_retry_recovery_ratio gauge"));
    }

    #[test]
    fn with_no_retry_every_count_is_zero_and_no_ratio_is_shown() {
        let mut out = String::new();
        render(&mut out, &[]);
        assert!(!out.contains("cobro_business_retry_recovery_ratio{"));
        assert!(
            out.contains(
                "cobro_business_retries{class=\"generic_declined\",outcome=\"pending\"} 0"
            )
        );
    }
}
