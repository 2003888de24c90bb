//! The demo's table, in the shape of the seed's "ESCENARIO C".
//!
//! Invariant: amounts are printed from integer minor units with integer
//! arithmetic (no float ever touches money); only the percentage is a float.

use super::{Report, Scenario, World};

/// `2569790` minor units of a 2-decimal currency -> `"$25,697.90"`.
pub fn money(minor: impl Into<i128>) -> String {
    let minor: i128 = minor.into();
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    let (units, cents) = (abs / 100, abs % 100);
    let digits = units.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{sign}${grouped}.{cents:02}")
}

fn count(n: impl ToString) -> String {
    n.to_string()
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    match (&r.scenario, &r.lesson) {
        (Some(Scenario::A | Scenario::NewKey), Some(lesson)) => out.push_str(&format!(
            "{} · one buyer, run on cobro's engine beside the seed's figures\n{}\n\
             naive client: its first answers lost as the seed says | cobro: every answer to a charge lost, lookups answered | database: {}\n\n",
            title(r.scenario),
            lesson.setup,
            r.database
        )),
        (Some(Scenario::C), Some(lesson)) => out.push_str(&format!(
            "ESCENARIO C · fleet of {} orders with lost responses, beside the seed's figures\nN={} | p(response lost)={} | seed={} | database: {}\nseed: {}\n\n",
            r.orders, r.orders, r.loss, r.seed, r.database, lesson.setup
        )),
        _ => out.push_str(&format!(
            "ESCENARIO C · fleet of {} orders with lost responses\nN={} | p(response lost)={} | seed={} | database: {}\n\n",
            r.orders, r.orders, r.loss, r.seed, r.database
        )),
    }
    let w = &r.worlds;
    let header = |f: &dyn Fn(&World) -> String| w.iter().map(f).collect::<Vec<_>>();
    let mut rows: Vec<(&str, Vec<String>)> = vec![
        ("", header(&|x| x.name.clone())),
        ("client", header(&|x| x.client.clone())),
        ("gateway", header(&|x| x.gateway.clone())),
        ("intent total", header(&|x| money(x.intent_total_minor))),
        (
            "attempts sent to the gateway",
            header(&|x| count(x.attempts_sent)),
        ),
        (
            "charges in the gateway ledger",
            header(&|x| count(x.ledger_charges)),
        ),
        (
            "orders charged 2+ times",
            header(&|x| count(x.orders_charged_twice)),
        ),
        (
            "orders not charged",
            header(&|x| count(x.orders_not_charged)),
        ),
        ("total charged", header(&|x| money(x.total_charged_minor))),
        (
            "overcharge",
            header(&|x| format!("{} ({:.1}%)", money(x.overcharge_minor), x.overcharge_pct)),
        ),
        (
            "left for finance (EN_REVISION)",
            header(&|x| count(x.en_revision)),
        ),
        (
            "wall time",
            header(&|x| format!("{:.2} s", x.wall_ms as f64 / 1000.0)),
        ),
    ];
    if let Some(lesson) = &r.lesson {
        for c in &lesson.columns {
            let cells = [
                c.name.to_owned(),
                c.client.to_owned(),
                c.gateway.to_owned(),
                money(lesson.intent_total_minor),
                count(c.attempts_sent),
                count(c.ledger_charges),
                count(c.orders_charged_twice),
                "-".into(),
                money(c.total_charged_minor),
                format!("{} ({:.1}%)", money(c.overcharge_minor), c.overcharge_pct),
                "-".into(),
                "-".into(),
            ];
            for ((_, row), cell) in rows.iter_mut().zip(cells) {
                row.push(cell);
            }
        }
    }
    let width = if r.lesson.is_some() { 24 } else { 22 };
    for (label, cells) in rows {
        out.push_str(&format!("  {label:<32}"));
        for c in cells {
            out.push_str(&format!("{c:>width$}"));
        }
        out.push('\n');
    }
    out
}

fn title(s: Option<Scenario>) -> &'static str {
    match s {
        Some(Scenario::A) => "ESCENARIO A",
        Some(Scenario::NewKey) => "NEW KEY ON EVERY RETRY (lesson 3)",
        _ => "ESCENARIO C",
    }
}

#[cfg(test)]
mod tests {
    use super::money;

    #[test]
    fn money_groups_thousands_and_keeps_cents() {
        let cases = [
            (0, "$0.00"),
            (5, "$0.05"),
            (100, "$1.00"),
            (25_697_900, "$256,979.00"),
            (4_813_950, "$48,139.50"),
            (-1_234_567, "-$12,345.67"),
        ];
        for (minor, want) in cases {
            assert_eq!(money(minor), want);
        }
    }
}
