//! Retention: how long webhook records are kept, and the worker's loop that
//! purges older ones ([`Store::purge_webhooks`]).
//!
//! What is kept for how long:
//! - `webhook_events` (accepted event ids, for deduplication) and
//!   `rejected_webhooks` (refused deliveries, for investigation): purged
//!   after `COBRO_WEBHOOK_RETENTION` (default 30 days).
//! - finished wake-up jobs (apalis' `jobs`): purged after
//!   `COBRO_JOB_RETENTION` (default 1 day); a wake-up carries nothing but
//!   an attempt id.
//! - attempts, the transition log, checks, notices, refunds, reconciliation
//!   cases: never purged; they are the money trail.
//!
//! Invariant: the retention period is never shorter than the gateway's
//! retry window ([`GATEWAY_RETRY_WINDOW`], 3 days): an event id is kept as
//! long as the gateway may still redeliver it, so deduplication by id holds
//! for every redelivery. (Past that, a stray redelivery would still change
//! nothing: the attempt already moved and the state machine refuses the
//! news as stale; the id table is the first guard, not the only one.)

use std::time::Duration;

use clap::Args;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::backoff::parse_duration_arg as duration;
use crate::store::Store;

/// How long the gateway retries a webhook delivery (3 days).
pub const GATEWAY_RETRY_WINDOW: Duration = Duration::from_secs(3 * 86_400);
/// The default retention period (30 days).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);
/// How long finished wake-up jobs are kept by default (1 day).
pub const DEFAULT_JOB_RETENTION: Duration = Duration::from_secs(86_400);
/// The default time between purges (1 hour).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(3_600);

/// The worker's retention settings, as flags or environment variables.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct RetentionArgs {
    /// Webhook event ids and rejected deliveries older than this are purged
    /// (at least 3 days: the gateway retries for that long).
    #[arg(long, env = "COBRO_WEBHOOK_RETENTION", default_value = "30d", value_parser = duration)]
    pub webhook_retention: Duration,
    /// Finished wake-up jobs (apalis' `jobs`: done, killed, or failed for
    /// good) older than this are purged; the attempts keep what happened.
    #[arg(long, env = "COBRO_JOB_RETENTION", default_value = "1d", value_parser = duration)]
    pub job_retention: Duration,
    /// How often this worker purges them.
    #[arg(long, env = "COBRO_RETENTION_INTERVAL", default_value = "1h", value_parser = duration)]
    pub retention_interval: Duration,
}

impl Default for RetentionArgs {
    fn default() -> Self {
        Self {
            webhook_retention: DEFAULT_RETENTION,
            job_retention: DEFAULT_JOB_RETENTION,
            retention_interval: DEFAULT_INTERVAL,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionError {
    #[error(
        "COBRO_WEBHOOK_RETENTION ({got:?}) must be at least 3 days (72h): the gateway retries a webhook for up to 3 days, and an event id purged earlier would no longer be recognised as a redelivery"
    )]
    TooShort { got: Duration },
    #[error("COBRO_RETENTION_INTERVAL must be longer than zero")]
    ZeroInterval,
}

impl RetentionArgs {
    pub fn validate(&self) -> Result<(), RetentionError> {
        if self.webhook_retention < GATEWAY_RETRY_WINDOW {
            return Err(RetentionError::TooShort {
                got: self.webhook_retention,
            });
        }
        if self.retention_interval.is_zero() {
            return Err(RetentionError::ZeroInterval);
        }
        Ok(())
    }
}

/// Purges every `retention_interval` (the first time at start-up) until
/// `stop` turns true. Every worker runs it; concurrent purges skip each
/// other's rows, and a failed pass is retried at the next tick.
pub async fn purge_loop(store: Store, args: RetentionArgs, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(args.retention_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        match store.purge_webhooks(args.webhook_retention).await {
            Ok(p) if p.events == 0 && p.rejected == 0 => {}
            Ok(p) => info!(
                events = p.events,
                rejected = p.rejected,
                "purged webhook records past retention"
            ),
            Err(e) => warn!(error = %e, "webhook purge failed; trying again next interval"),
        }
        match store.purge_finished_jobs(args.job_retention).await {
            Ok(0) => {}
            Ok(n) => info!(jobs = n, "purged finished wake-up jobs past retention"),
            Err(e) => warn!(error = %e, "wake-up job purge failed; trying again next interval"),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RetentionArgs,
    }

    fn parse(flags: &[&str]) -> RetentionArgs {
        let argv = std::iter::once("cobro-worker").chain(flags.iter().copied());
        match Cli::try_parse_from(argv) {
            Ok(cli) => cli.args,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn the_flag_defaults_are_the_documented_ones() {
        assert_eq!(parse(&[]), RetentionArgs::default());
        assert_eq!(DEFAULT_RETENTION, Duration::from_secs(30 * 86_400));
        assert_eq!(RetentionArgs::default().validate(), Ok(()));
    }

    #[test]
    fn three_days_is_the_shortest_retention() {
        let at = |s: &str| parse(&["--webhook-retention", s]).validate();
        assert_eq!(at("3d"), Ok(()));
        assert_eq!(at("72h"), Ok(()));
        assert!(matches!(at("71h"), Err(RetentionError::TooShort { .. })));
        assert!(matches!(at("1d"), Err(RetentionError::TooShort { .. })));
        assert!(matches!(at("0s"), Err(RetentionError::TooShort { .. })));
        let zero = parse(&["--retention-interval", "0s"]).validate();
        assert_eq!(zero, Err(RetentionError::ZeroInterval));
    }
}
