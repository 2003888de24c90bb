//! The queue as CSV for a spreadsheet: one row per item, a header row,
//! amounts as decimals in the currency's scale, ISO 8601 UTC timestamps.
//!
//! Invariant: RFC 4180 quoting (fields with a comma, quote or line break are
//! quoted, quotes doubled), CRLF line ends, and no cell starts with `=`,
//! `+`, `-` or `@` unquoted-and-unescaped: such text (an order id is the
//! app's free text) gets a leading `'` so a spreadsheet never runs it as a
//! formula. Rows come a page at a time ([`csv_rows`]) so an export can be
//! streamed.

use crate::domain::decimal;
use crate::domain::settlement::SettledCharge;
use crate::store::Escalated;

use super::last_evidence;

const HEADER: [&str; 16] = [
    "attempt_id",
    "order_id",
    "kind",
    "state",
    "reason",
    "amount",
    "currency",
    "amount_minor",
    "created_at",
    "age_secs",
    "checks",
    "sends",
    "last_http_status",
    "last_error_kind",
    "last_lookup_result",
    "version",
];

/// The header row, with its CRLF.
pub fn csv_header() -> String {
    let mut out = String::new();
    push_row(&mut out, HEADER.iter().map(|h| (*h).to_owned()));
    out
}

/// The whole CSV of `items`: the header, then a row each.
pub fn to_csv(items: &[Escalated]) -> String {
    csv_header() + &csv_rows(items)
}

/// The rows of `items`, without the header: a piece of a streamed export.
pub fn csv_rows(items: &[Escalated]) -> String {
    let mut out = String::new();
    for e in items {
        let a = &e.attempt;
        let (status, kind, lookup) = last_evidence(a);
        push_row(
            &mut out,
            [
                a.id.to_string(),
                a.order_id.clone(),
                if a.is_refund() { "refund" } else { "charge" }.to_owned(),
                a.state.to_string(),
                e.reason().to_owned(),
                decimal(a.amount_minor, &a.currency),
                a.currency.clone(),
                a.amount_minor.to_string(),
                a.created_at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                e.age_secs.to_string(),
                a.check_count.to_string(),
                a.send_count.to_string(),
                status.map(|s| s.to_string()).unwrap_or_default(),
                kind.unwrap_or_default(),
                lookup.unwrap_or_default(),
                a.version.to_string(),
            ],
        );
    }
    out
}

const SETTLED_HEADER: [&str; 13] = [
    "attempt_id",
    "order_id",
    "gateway_charge_id",
    "balance_txn",
    "currency",
    "gross",
    "fee",
    "net",
    "gross_minor",
    "fee_minor",
    "net_minor",
    "payout",
    "settled_at",
];

/// Settled charges as CSV (header first): gross, the gateway's fee and net,
/// as decimals and in minor units.
pub fn settlements_csv(rows: &[SettledCharge]) -> String {
    let mut out = String::new();
    push_row(&mut out, SETTLED_HEADER.iter().map(|h| (*h).to_owned()));
    for r in rows {
        push_row(
            &mut out,
            [
                r.attempt_id.to_string(),
                r.order_id.clone(),
                r.gateway_charge_id.clone(),
                r.balance_txn.clone(),
                r.currency.clone(),
                decimal(r.gross_minor, &r.currency),
                decimal(r.fee_minor, &r.currency),
                decimal(r.net_minor, &r.currency),
                r.gross_minor.to_string(),
                r.fee_minor.to_string(),
                r.net_minor.to_string(),
                r.payout.clone().unwrap_or_default(),
                r.settled_at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            ],
        );
    }
    out
}

fn push_row(out: &mut String, cells: impl IntoIterator<Item = String>) {
    let mut first = true;
    for cell in cells {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&cell_text(&cell));
    }
    out.push_str("\r\n");
}

fn cell_text(raw: &str) -> String {
    let text = if raw.starts_with(['=', '+', '@', '\t', '\r']) || is_formula_minus(raw) {
        format!("'{raw}")
    } else {
        raw.to_owned()
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// A leading `-` starts a formula unless the cell is a plain number.
fn is_formula_minus(raw: &str) -> bool {
    raw.starts_with('-') && raw[1..].parse::<f64>().is_err()
}

#[cfg(test)]
mod tests {
    use super::cell_text;

    #[test]
    fn cells_are_quoted_and_never_formulas() {
        assert_eq!(cell_text("plain"), "plain");
        assert_eq!(cell_text("a,b"), "\"a,b\"");
        assert_eq!(cell_text("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(cell_text("two\nlines"), "\"two\nlines\"");
        assert_eq!(cell_text("=SUM(A1)"), "'=SUM(A1)");
        assert_eq!(cell_text("@cmd"), "'@cmd");
        assert_eq!(cell_text("-2.50"), "-2.50");
        assert_eq!(cell_text("-cmd"), "'-cmd");
    }
}
