//! `cobro reconcile --from <when> --to <when> [--json]`: one run of a window
//! by hand, with no claim (it is idempotent), printing the report.
//!
//! Invariant: bad input (the window, `GATEWAY_URL`, `COBRO_GATEWAY_CA_FILE`)
//! is refused before anything is contacted; a failed run exits non-zero and
//! says that nothing was opened.

use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Args;

use super::{Window, parse_when, reconcile};
use crate::gateway::Gateway;
use crate::store::Store;

fn when(s: &str) -> Result<DateTime<Utc>, String> {
    parse_when(s).map_err(|e| e.reason)
}

/// Compare the gateway's charges and refunds of a window with ours: open a
/// case once per discrepancy, settle DESCONOCIDO/EN_REVISION attempts the
/// gateway shows approved under their key.
#[derive(Clone, Args)]
pub struct ReconcileCommand {
    /// The database: `postgres://…` or `sqlite://path`.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// The gateway's URL, extra roots and timeouts (`GATEWAY_URL`, …).
    #[command(flatten)]
    pub gateway_link: crate::gateway::GatewayLink,
    #[command(flatten)]
    pub gateway: crate::gateway::GatewayChoice,
    /// Start of the window, included: RFC 3339 or YYYY-MM-DD (midnight UTC).
    #[arg(long, value_parser = when)]
    pub from: DateTime<Utc>,
    /// End of the window, excluded: RFC 3339 or YYYY-MM-DD (midnight UTC).
    #[arg(long, value_parser = when)]
    pub to: DateTime<Utc>,
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
    let gateway: Arc<dyn Gateway> = cmd.gateway.build(cmd.gateway_link.config())?;
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

/// By hand: `database_url` may hold a password.
impl std::fmt::Debug for ReconcileCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconcileCommand")
            .field("database_url", &"<redacted>")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("settlement", &self.settlement)
            .field("json", &self.json)
            .finish_non_exhaustive()
    }
}
