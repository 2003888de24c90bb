//! `cobro reconcile --from <when> --to <when> [--json]`: one run of a window
//! by hand, with no claim (it is idempotent), printing the report.
//!
//! Invariant: bad input (the window, `GATEWAY_URL`, `COBRO_GATEWAY_CA_FILE`)
//! is refused before anything is contacted; a failed run exits non-zero and
//! says that nothing was opened.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Args;

use super::{Window, parse_when, reconcile};
use crate::backoff::parse_duration_arg as duration;
use crate::gateway::{Gateway, HttpGatewayConfig};
use crate::store::Store;

fn when(s: &str) -> Result<DateTime<Utc>, String> {
    parse_when(s).map_err(|e| e.reason)
}

/// Compare the gateway's charges and refunds of a window with ours: open a
/// case once per discrepancy, settle DESCONOCIDO/EN_REVISION attempts the
/// gateway shows approved under their key.
#[derive(Debug, Clone, Args)]
pub struct ReconcileCommand {
    /// The database: `postgres://…` or `sqlite://path`.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// The simulator's (or a compatible gateway's) base URL: `http://…` or
    /// `https://…`. No default: set it or `COBRO_GATEWAY`.
    #[arg(long, env = "GATEWAY_URL")]
    pub gateway_url: Option<String>,
    /// A PEM file of extra root certificates to trust for an `https://` gateway.
    #[arg(long, env = "COBRO_GATEWAY_CA_FILE")]
    pub gateway_ca_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub gateway: crate::gateway::GatewayChoice,
    /// Start of the window, included: RFC 3339 or YYYY-MM-DD (midnight UTC).
    #[arg(long, value_parser = when)]
    pub from: DateTime<Utc>,
    /// End of the window, excluded: RFC 3339 or YYYY-MM-DD (midnight UTC).
    #[arg(long, value_parser = when)]
    pub to: DateTime<Utc>,
    /// How long opening a connection to the gateway may take.
    #[arg(long, env = "COBRO_GATEWAY_CONNECT_TIMEOUT", default_value = "2s", value_parser = duration)]
    pub gateway_connect_timeout: Duration,
    /// How long one request to the gateway may take, connect to answer.
    #[arg(long, env = "COBRO_GATEWAY_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub gateway_timeout: Duration,
    /// Check the settlement of the window's APROBADO charges (the gateway's
    /// balance transactions and payouts) instead of its charges and refunds.
    #[arg(long)]
    pub settlement: bool,
    #[command(flatten)]
    pub settlement_args: super::settle::SettlementArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command; the report goes to stdout.
pub async fn run_command(cmd: ReconcileCommand) -> anyhow::Result<()> {
    let window = Window::new(cmd.from, cmd.to)?;
    let gateway: Arc<dyn Gateway> = cmd.gateway.build(HttpGatewayConfig {
        base_url: cmd.gateway_url.clone().unwrap_or_default(),
        connect_timeout: cmd.gateway_connect_timeout,
        request_timeout: cmd.gateway_timeout,
        ca_file: cmd.gateway_ca_file.clone(),
    })?;
    let store = Store::connect(&cmd.database_url, 2)
        .await
        .context("connecting to DATABASE_URL")?;
    if cmd.settlement {
        let now = store.now().await?;
        let delay = chrono::TimeDelta::from_std(cmd.settlement_args.settlement_delay)?;
        let list_to = (window.to + delay).min(now).max(window.to);
        let report = super::settle::settle(
            &store,
            gateway.as_ref(),
            &window,
            list_to,
            &cmd.settlement_args,
        )
        .await
        .with_context(|| format!("settlement check of {window} failed"))?;
        if cmd.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", report.render());
        }
        store.close().await;
        return Ok(());
    }
    let report = reconcile(&store, gateway.as_ref(), &window)
        .await
        .with_context(|| format!("reconciliation of {window} failed"))?;
    if cmd.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    store.close().await;
    Ok(())
}
