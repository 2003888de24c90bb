//! Pieces of the `cobro` command line that are more than a call: the
//! status printout and the escalations subcommand.

pub mod escalations;

use anyhow::Result;

use cobro::store::{Attempt, Store};

pub async fn print_status(store: &Store, attempts: &[Attempt], json: bool) -> Result<()> {
    let mut out = Vec::new();
    for a in attempts {
        let history = store.transitions(a.id).await?;
        let checks = store.checks(a.id).await?;
        if json {
            out.push(serde_json::json!({ "attempt": a, "transitions": history, "checks": checks }));
            continue;
        }
        let what = match a.refund_of {
            Some(charge) => format!("refund of {charge}"),
            None => "attempt".to_owned(),
        };
        println!(
            "{what} {}  order {}  {} {} minor units  key {}",
            a.id, a.order_id, a.currency, a.amount_minor, a.idempotency_key
        );
        println!(
            "  state {}  sends {}  checks {}  charge {}  decline {}",
            a.state,
            a.send_count,
            a.check_count,
            a.gateway_charge_id.as_deref().unwrap_or("-"),
            a.decline_code.as_deref().unwrap_or("-")
        );
        for t in &history {
            println!(
                "  {}  {:>11} -> {:<11}  {:<22} {:<28} {}",
                t.at.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                t.from_state.as_deref().unwrap_or("(new)"),
                t.to_state,
                t.cause,
                t.actor,
                t.error_kind.as_deref().unwrap_or("")
            );
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}
