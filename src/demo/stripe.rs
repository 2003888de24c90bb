//! `cobro demo --gateway stripe --stripe-api-base URL`: the fleet charged
//! through Stripe's API, by cobro, against any Stripe-compatible server
//! (localstripe, or Stripe in test mode). With an `http://` base the
//! requests go through the simulator in proxy mode, which loses `--loss` of
//! the answers to creates and confirms after the server executed them; an
//! `https://` base (Stripe itself) is charged directly, with no injected
//! loss, since the proxy forwards plain HTTP only.
//!
//! Invariant: the counts come from the server's own list of PaymentIntents
//! (succeeded ones, per order, by the order id cobro put in the metadata),
//! never from cobro's tables.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{Context, Result};
use chrono::Utc;
use indicatif::ProgressBar;

use super::{DemoOptions, WorkerFlags, World};
use crate::gateway::{GatewayChoice, Listed};
use crate::sim::{Faults, SimConfig, Upstream};

pub(super) async fn run(
    opts: &DemoOptions,
    choice: &GatewayChoice,
    db_url: &str,
    prefix: &str,
    fleet: &[(String, i64)],
    bar: Option<ProgressBar>,
) -> Result<World> {
    let started = Instant::now();
    let since = Utc::now() - chrono::TimeDelta::minutes(5);
    let base = choice.stripe_api_base.trim_end_matches('/').to_owned();
    let proxy = match base.starts_with("http://") {
        true => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .context("binding the lossy proxy to 127.0.0.1")?;
            let upstream: Upstream = base.parse().map_err(anyhow::Error::msg)?;
            let cfg = SimConfig {
                idempotent: true,
                seed: opts.seed,
                per_order_draws: false,
                webhooks: None,
                faults: Faults {
                    p_response_lost: opts.loss,
                    ..Faults::default()
                },
            };
            Some(crate::sim::spawn_proxy(listener, cfg, upstream).await?)
        }
        false => None,
    };
    let through = proxy.as_ref().map_or(base.clone(), |p| p.url());
    let args = |name: &str| -> Result<crate::runtime::WorkerArgs> {
        let mut args = <WorkerFlags as clap::Parser>::try_parse_from([
            "cobro-worker",
            "--database-url",
            db_url,
            "--worker-name",
            name,
            "--concurrency",
            "8",
            "--check-schedule",
            &opts.check_schedule,
            "--reconcile-at",
            "off",
        ])?
        .args;
        args.gateway = GatewayChoice {
            stripe_api_base: through.clone(),
            ..choice.clone()
        };
        Ok(args)
    };
    let en_revision = super::drive(
        &args,
        db_url,
        prefix,
        fleet,
        Some("pm_card_visa"),
        opts.workers,
        bar,
    )
    .await?;
    let sent = match &proxy {
        Some(p) => {
            let stats: crate::sim::ProxyStats = reqwest::get(format!("{}/control/proxy", p.url()))
                .await?
                .error_for_status()?
                .json()
                .await?;
            stats.executing_forwarded
        }
        None => 0,
    };
    if let Some(p) = proxy {
        p.shutdown().await;
    }
    // Counted from the server's list, read directly (not through the proxy).
    let gateway = choice.build(crate::gateway::HttpGatewayConfig {
        base_url: base.clone(),
        connect_timeout: std::time::Duration::from_secs(5),
        request_timeout: std::time::Duration::from_secs(30),
        ca_file: None,
    })?;
    let listed = gateway
        .list(
            Listed::Charges,
            since,
            Utc::now() + chrono::TimeDelta::minutes(5),
        )
        .await
        .context("listing the server's PaymentIntents")?;
    let ours: HashMap<String, i64> = fleet
        .iter()
        .map(|(o, a)| (format!("{prefix}{o}"), *a))
        .collect();
    let mut per_order: HashMap<&str, usize> = HashMap::new();
    let mut total: i128 = 0;
    for r in listed
        .iter()
        .filter(|r| r.is_approved() && ours.contains_key(&r.order_id))
    {
        *per_order.entry(r.order_id.as_str()).or_default() += 1;
        total += i128::from(r.amount_minor);
    }
    let intent: i128 = fleet.iter().map(|(_, a)| i128::from(*a)).sum();
    let overcharge = total - intent;
    Ok(World {
        name: "stripe".into(),
        client: "cobro".into(),
        gateway: if sent > 0 {
            "stripe API, lossy proxy".into()
        } else {
            "stripe API".into()
        },
        intent_total_minor: intent,
        orders: fleet.len(),
        attempts_sent: sent,
        ledger_charges: per_order.values().sum(),
        orders_charged_twice: per_order.values().filter(|n| **n >= 2).count(),
        orders_not_charged: ours
            .keys()
            .filter(|o| !per_order.contains_key(o.as_str()))
            .count(),
        total_charged_minor: total,
        overcharge_minor: overcharge,
        overcharge_pct: super::percent_of(overcharge, intent),
        en_revision,
        wall_ms: started.elapsed().as_millis() as u64,
    })
}
