//! Pieces of the `cobro` command line that are more than a call: the
//! status printout, the attempts (operator view) and escalations subcommands,
//! the reference pages.

pub mod attempts;
pub mod escalations;
pub mod reference;
pub mod run;
pub mod watch;

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
        let what = match (a.refund_of, &a.refund_of_gateway) {
            (Some(charge), Some(dup)) => {
                format!("refund of the duplicate gateway charge {dup} (anchored on {charge})")
            }
            (Some(charge), None) => format!("refund of {charge}"),
            (None, _) => "attempt".to_owned(),
        };
        println!(
            "{what} {}  order {}  {} {} ({} minor units)  key {}",
            a.id,
            a.order_id,
            cobro::domain::decimal(a.amount_minor, &a.currency),
            a.currency,
            a.amount_minor,
            a.idempotency_key
        );
        println!(
            "  state {}  sends {}  checks {}  charge {}  decline {}",
            a.state,
            a.send_count,
            a.check_count,
            a.gateway_charge_id.as_deref().unwrap_or("-"),
            a.decline_code.as_deref().unwrap_or("-")
        );
        if let Some(customer) = &a.customer {
            println!("  customer {customer}");
        }
        if let Some(reason) = &a.cancel_reason {
            println!("  cancelled before it was sent: {reason}");
        } else if a.state == cobro::state::State::Rechazado
            && history
                .last()
                .is_some_and(|t| t.cause.starts_with("cancelled_"))
        {
            println!("  its scheduled business retry was cancelled");
        }
        if let Some(since) = a.parked_since {
            println!(
                "  parked since {} (the gateway was unreachable; it resumes when the gateway answers)",
                since.format("%Y-%m-%dT%H:%M:%SZ")
            );
        }
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

/// `cobro status` without an order or attempt: the whole system at a
/// glance (attempts per state, the gateway's breaker, parked attempts,
/// wake-ups not yet done).
pub async fn print_system_status(store: &Store, json: bool) -> Result<()> {
    let states = store.count_by_state().await?;
    let health = store.gateway_health().await?;
    let wakeups = store.open_wakeups().await?;
    let pause = store.pause_state().await?;
    if json {
        let states: serde_json::Map<String, serde_json::Value> = states
            .iter()
            .map(|(s, n)| (s.as_str().to_owned(), (*n).into()))
            .collect();
        let out = serde_json::json!({
            "attempts": states,
            "gateway": health,
            "open_wakeups": wakeups,
            "sending": pause,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("attempts by state:");
    for (state, n) in &states {
        println!("  {:<11} {n}", state.as_str());
    }
    println!("wake-ups not yet done: {wakeups}");
    match &pause {
        Some(p) if p.paused => println!(
            "sending: PAUSED since {} by {}{} (lookups continue; `cobro resume` to send again)",
            p.changed_at.format("%Y-%m-%dT%H:%M:%SZ"),
            p.changed_by,
            p.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        _ => println!("sending: on"),
    }
    if health.breakers.is_empty() {
        println!("gateway: no worker has recorded its health yet");
    }
    for b in &health.breakers {
        let at = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map_or("-".to_owned(), |t| {
                t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
            })
        };
        match b.is_open() {
            true => println!(
                "gateway {}: UNREACHABLE since {} (breaker open; {} probes; last failure {}: {})",
                b.gateway,
                at(b.opened_at),
                b.probes,
                at(b.last_failure_at),
                b.last_failure.as_deref().unwrap_or("-")
            ),
            false => println!(
                "gateway {}: reachable (breaker closed; last answer {}; {} failure(s) since)",
                b.gateway,
                at(b.last_answer_at),
                b.failures
            ),
        }
    }
    match health.oldest_parked {
        Some(oldest) => println!(
            "attempts waiting for the gateway (parked): {}, the oldest since {}",
            health.parked,
            oldest.format("%Y-%m-%dT%H:%M:%SZ")
        ),
        None => println!("attempts waiting for the gateway (parked): 0"),
    }
    Ok(())
}
