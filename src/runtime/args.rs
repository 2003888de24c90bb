//! The worker's settings: the `cobro-worker` command line, every flag with
//! its environment variable, and how they are checked before anything
//! starts (a refusal names the variable to set). `Debug` never shows the
//! database URL.

use std::time::Duration;

use clap::Args;

use super::SQLITE_CONNECTIONS;
use crate::backoff::{CheckSchedule, parse_duration_arg as duration};
use crate::gateway::HttpGatewayConfig;

/// The `cobro-worker` command line (`workers/main.rs` parses it; `cobro
/// reference` prints it).
#[derive(clap::Parser)]
#[command(
    name = "cobro-worker",
    version,
    about = "cobro's worker process: charges attempts, never twice"
)]
pub struct WorkerCli {
    #[command(flatten)]
    pub worker: WorkerArgs,
}

/// Every setting of `cobro-worker`, as a flag or an environment variable.
/// `Debug` leaves out the database URL (it may hold a password).
#[derive(Clone, Args)]
pub struct WorkerArgs {
    /// `postgres://…` or `sqlite://path`.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// The gateway's URL, extra roots and timeouts (`GATEWAY_URL`, …).
    #[command(flatten)]
    pub gateway_link: crate::gateway::GatewayLink,
    /// Which gateway API: the simulator's or Stripe's (`COBRO_GATEWAY`).
    #[command(flatten)]
    pub gateway: crate::gateway::GatewayChoice,
    /// Attempts handled at once by this process.
    #[arg(long, env = "COBRO_CONCURRENCY", default_value_t = 16)]
    pub concurrency: usize,
    /// Refunds handled at once by this process (their own queue).
    #[arg(long, env = "COBRO_REFUND_CONCURRENCY", default_value_t = 4)]
    pub refund_concurrency: usize,
    /// Wake-up jobs fetched per poll.
    #[arg(long, env = "COBRO_BATCH_SIZE", default_value_t = 10)]
    pub batch_size: usize,
    /// Database connections this process may open for its work (on
    /// PostgreSQL each queue's LISTEN has one more of its own). Default: PostgreSQL,
    /// concurrency + refund concurrency + 4, so no handler waits for one;
    /// SQLite, 4 (it takes one writer at a time: more connections only
    /// queue for the file's lock, and each costs about 1 MiB).
    #[arg(long, env = "COBRO_DB_CONNECTIONS")]
    pub db_connections: Option<u32>,
    /// PostgreSQL group commit: the answers (and other writes of a row and
    /// its log alone) of handlers finishing together are written in one
    /// statement, each still fenced by its own version. `false`: one
    /// statement each. No effect on SQLite.
    #[arg(long, env = "COBRO_GROUP_COMMIT", default_value_t = true, action = clap::ArgAction::Set)]
    pub group_commit: bool,
    /// How long a worker may hold an attempt before another may take over.
    #[arg(long, env = "COBRO_LEASE_TTL", default_value = "30s", value_parser = duration)]
    pub lease_ttl: Duration,
    /// Delays between lookups of a DESCONOCIDO attempt; after the last one, EN_REVISION.
    #[arg(long, env = "COBRO_CHECK_SCHEDULE", default_value = "2s,4s,8s,16s,32s")]
    pub check_schedule: String,
    /// Jitter of each delay, as a fraction of it (0.5 = ±50 %).
    #[arg(long, env = "COBRO_CHECK_JITTER", default_value_t = 0.5)]
    pub check_jitter: f64,
    /// Delays between the janitor's lookups of an attempt in EN_REVISION,
    /// measured from when it entered review; the last one repeats. Within the
    /// key lifetime by key, past it through the gateway's listing; never a
    /// re-send.
    #[arg(long, env = "COBRO_REVIEW_SCHEDULE", default_value = crate::janitor::DEFAULT_REVIEW_SCHEDULE)]
    pub review_schedule: String,
    /// How long the gateway keeps idempotency keys; older keys are never re-sent.
    #[arg(long, env = "COBRO_KEY_LIFETIME", default_value = "24h", value_parser = duration)]
    pub key_lifetime: Duration,
    /// How often an idle worker polls for jobs that became due (and beats its heartbeat).
    #[arg(long, env = "COBRO_POLL_INTERVAL", default_value = "500ms", value_parser = duration)]
    pub poll_interval: Duration,
    /// Missed heartbeats before another worker re-enqueues this one's jobs.
    #[arg(long, env = "COBRO_MISSED_HEARTBEATS", default_value_t = 20)]
    pub missed_heartbeats: usize,
    /// How often the sweeper looks for attempts whose time has passed.
    #[arg(long, env = "COBRO_SWEEP_INTERVAL", default_value = "1s", value_parser = duration)]
    pub sweep_interval: Duration,
    /// How late a scheduled attempt must be before the sweeper re-wakes it
    /// (expired leases are re-woken at once).
    #[arg(long, env = "COBRO_SWEEP_GRACE", default_value = "30s", value_parser = duration)]
    pub sweep_grace: Duration,
    /// How long (±50 %) to wait before sending again, with the same key, a
    /// request the gateway certainly did not execute (connection refused,
    /// 429 or 503 without `Retry-After`); a `Retry-After` is honoured
    /// instead (up to 1 h). Also the wait before a lookup that could not
    /// reach the gateway.
    #[arg(long, env = "COBRO_DEFER_BACKOFF", default_value = "5s", value_parser = duration)]
    pub defer_backoff: Duration,
    /// The gateway honours idempotency keys (a replay with the same key
    /// never executes twice): one "not found" allows a re-send. Set false
    /// for a gateway without key support.
    #[arg(long, env = "COBRO_GATEWAY_IDEMPOTENT", default_value_t = true, action = clap::ArgAction::Set)]
    pub gateway_idempotent: bool,
    /// The longest a request may take at the gateway, from our send to its
    /// record. Without key support, a re-send waits for a "not found" taken
    /// at least this long after the send; finance's decline of a charge or
    /// refund that was sent is recorded on a "not found" only this long
    /// after its last send.
    #[arg(long, env = "COBRO_GATEWAY_MAX_PROCESSING", default_value = "60s", value_parser = duration)]
    pub gateway_max_processing: Duration,
    /// This process's name (unique); default host-pid.
    #[arg(long, env = "COBRO_WORKER_NAME")]
    pub worker_name: Option<String>,
    /// Failed wake-ups of one attempt (errors that are not the gateway's,
    /// within an hour of each other) before it is quarantined to finance as
    /// a `poison_wakeup` case and no longer woken.
    #[arg(long, env = "COBRO_POISON_AFTER", default_value_t = crate::engine::DEFAULT_POISON_AFTER)]
    pub poison_after: u32,
    #[command(flatten)]
    pub retry: crate::retry::RetryArgs,
    /// The shared circuit breaker and rate limit toward the gateway.
    #[command(flatten)]
    pub breaker: crate::breaker::BreakerArgs,
    /// Serve Prometheus `/metrics` here (e.g. 127.0.0.1:9464), behind an
    /// API key with `metrics:read`; off when unset.
    #[arg(long, env = "COBRO_METRICS_ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Database gauges on `/metrics` are reused for this long.
    #[arg(long, env = "COBRO_METRICS_CACHE", default_value = "5s", value_parser = duration)]
    pub metrics_cache: Duration,
    /// The keys `/metrics` accepts (`COBRO_API_KEYS`, `COBRO_API_KEYS_FILE`).
    #[command(flatten)]
    pub api_keys: crate::http::auth::ApiKeyArgs,
    #[command(flatten)]
    pub retention: crate::retention::RetentionArgs,
    #[command(flatten)]
    pub reconcile: crate::recon::ReconcileArgs,
    /// Customer notices POSTed to the app (`COBRO_NOTICE_URL`, …).
    #[command(flatten)]
    pub notify: crate::notify::NotifyArgs,
}

impl std::fmt::Debug for WorkerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerArgs")
            .field("gateway_link", &self.gateway_link)
            .field("gateway", &self.gateway)
            .field("concurrency", &self.concurrency)
            .field("db_connections", &self.db_connections)
            .field("group_commit", &self.group_commit)
            .field("lease_ttl", &self.lease_ttl)
            .field("check_schedule", &self.check_schedule)
            .field("review_schedule", &self.review_schedule)
            .field("worker_name", &self.worker_name)
            .field("notify", &self.notify)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("COBRO_CHECK_SCHEDULE: {0}")]
    Schedule(#[from] crate::backoff::ScheduleError),
    #[error("COBRO_REVIEW_SCHEDULE: {0}")]
    ReviewSchedule(crate::backoff::ScheduleError),
    #[error(
        "COBRO_LEASE_TTL ({lease:?}) must be longer than the gateway's connect + request timeouts plus the 500 ms a charge claimed in a fetch may wait for its handler ({timeouts:?})"
    )]
    LeaseTooShort { lease: Duration, timeouts: Duration },
    #[error("COBRO_CONCURRENCY, COBRO_REFUND_CONCURRENCY and COBRO_BATCH_SIZE must be at least 1")]
    Zero,
    #[error("COBRO_DB_CONNECTIONS must be at least 2")]
    TooFewConnections,
    #[error(transparent)]
    Retention(#[from] crate::retention::RetentionError),
    #[error(transparent)]
    Gateway(#[from] crate::gateway::GatewayConfigError),
    #[error(transparent)]
    Breaker(#[from] crate::breaker::BreakerConfigError),
    #[error(transparent)]
    Notify(#[from] crate::notify::NotifyConfigError),
}

impl WorkerArgs {
    pub fn schedule(&self) -> Result<CheckSchedule, ConfigError> {
        Ok(CheckSchedule::parse(
            &self.check_schedule,
            self.check_jitter,
        )?)
    }

    /// The janitor's schedule for attempts in review.
    pub fn review(&self) -> Result<crate::janitor::ReviewSchedule, ConfigError> {
        crate::janitor::ReviewSchedule::parse(&self.review_schedule)
            .map_err(ConfigError::ReviewSchedule)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.gateway.resolve(self.gateway_link.url.as_deref())?
            == crate::gateway::GatewayKind::Sim
        {
            crate::gateway::parse_base_url(self.gateway_link.url())?;
        }
        self.schedule()?;
        self.review()?;
        self.retry.policy()?;
        self.retention.validate()?;
        self.breaker.validate()?;
        self.notifier()?;
        let timeouts = self.gateway_link.connect_timeout
            + self.gateway_link.timeout
            + crate::engine::CLAIM_FRESH;
        if self.lease_ttl <= timeouts {
            return Err(ConfigError::LeaseTooShort {
                lease: self.lease_ttl,
                timeouts,
            });
        }
        if self.concurrency == 0 || self.refund_concurrency == 0 || self.batch_size == 0 {
            return Err(ConfigError::Zero);
        }
        if self.db_connections.is_some_and(|n| n < 2) {
            return Err(ConfigError::TooFewConnections);
        }
        Ok(())
    }

    /// The pool's size (`COBRO_DB_CONNECTIONS`). SQLite's default was
    /// measured (BENCHMARKS.md, "SQLite on cobro's own wake-up backend"):
    /// at 20,000 charges 4 connections gave 510-599 charges/s and 19-20 MiB
    /// per worker, 24 gave 404-456 and 32-35 MiB.
    pub fn connections(&self) -> u32 {
        self.db_connections
            .unwrap_or(if self.database_url.starts_with("sqlite:") {
                SQLITE_CONNECTIONS
            } else {
                (self.concurrency + self.refund_concurrency + 4) as u32
            })
    }

    /// Customer notice delivery; `None` when `COBRO_NOTICE_URL` is unset.
    pub fn notifier(&self) -> Result<Option<crate::notify::Notifier>, ConfigError> {
        Ok(self.notify.notifier(self.retry.policy()?)?)
    }

    /// The gateway client's settings (`base_url` empty when `GATEWAY_URL`
    /// is unset).
    pub fn gateway_config(&self) -> HttpGatewayConfig {
        self.gateway_link.config()
    }

    pub fn name(&self) -> String {
        self.worker_name.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| "host".into());
            format!("{host}-{}", std::process::id())
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        worker: WorkerArgs,
    }

    fn parse(extra: &[&str]) -> WorkerArgs {
        let mut argv = vec![
            "cobro-worker",
            "--database-url",
            "sqlite://unused.db",
            "--gateway-url",
            "http://127.0.0.1:8089",
        ];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).unwrap().worker
    }

    #[test]
    fn the_connection_budget_is_at_least_two_and_named_when_not() {
        assert_eq!(parse(&[]).connections(), SQLITE_CONNECTIONS);
        let pg = Cli::try_parse_from([
            "cobro-worker",
            "--database-url",
            "postgres://cobro@127.0.0.1/cobro",
            "--concurrency",
            "10",
            "--refund-concurrency",
            "2",
        ])
        .unwrap()
        .worker;
        assert_eq!(pg.connections(), 16);
        assert_eq!(parse(&["--db-connections", "9"]).connections(), 9);
        assert!(parse(&["--db-connections", "2"]).validate().is_ok());
        let err = parse(&["--db-connections", "1"]).validate().unwrap_err();
        assert!(matches!(err, ConfigError::TooFewConnections));
        assert!(err.to_string().contains("COBRO_DB_CONNECTIONS"), "{err}");
    }

    #[test]
    fn the_settlement_check_flag_takes_daily_or_off() {
        assert!(parse(&[]).reconcile.settlement_check);
        assert!(
            !parse(&["--settlement-check", "off"])
                .reconcile
                .settlement_check
        );
        assert!(
            parse(&["--settlement-check", "daily"])
                .reconcile
                .settlement_check
        );
        let mut argv = vec!["cobro-worker", "--database-url", "sqlite://unused.db"];
        argv.extend([
            "--gateway-url",
            "http://127.0.0.1:8089",
            "--settlement-check",
            "weekly",
        ]);
        assert!(Cli::try_parse_from(argv).is_err());
    }

    #[test]
    fn group_commit_is_on_unless_turned_off() {
        assert!(parse(&[]).group_commit);
        assert!(!parse(&["--group-commit", "false"]).group_commit);
        assert!(parse(&["--group-commit", "true"]).group_commit);
        assert!(
            Cli::try_parse_from([
                "cobro-worker",
                "--database-url",
                "x",
                "--group-commit",
                "maybe"
            ])
            .is_err()
        );
    }

    #[test]
    fn a_worker_without_a_gateway_is_refused_naming_the_variables() {
        let bare = Cli::try_parse_from(["cobro-worker", "--database-url", "sqlite://unused.db"])
            .unwrap()
            .worker;
        let err = bare.validate().unwrap_err().to_string();
        assert!(
            err.contains("COBRO_GATEWAY") && err.contains("GATEWAY_URL"),
            "{err}"
        );
        assert!(parse(&[]).validate().is_ok());
    }
}
