//! The worker process: apalis workers over cobro's wake-up backend, the sweeper, the
//! webhook purge ([`crate::retention`]), the optional `/metrics` server
//! ([`crate::metrics`]), daily reconciliation ([`crate::recon`]), customer
//! notice delivery ([`crate::notify`], when `COBRO_NOTICE_URL` is set), and
//! graceful shutdown.
//!
//! Invariant: a scheduled check starts within about one poll interval of its
//! time: wake-ups are pushed with their exact `run_at`, LISTEN/NOTIFY picks up
//! jobs due now, and the poll interval re-polls for jobs that became due
//! later ([`crate::wakeq`]; SQLite, with no notifications between processes,
//! polls for all). Nothing here decides about money: lost or
//! doubled wake-ups only delay or repeat a no-op, and the sweeper re-creates
//! wake-ups for attempts whose time has passed.

use std::sync::Arc;
use std::time::Duration;

use apalis::layers::WorkerBuilderExt;
use apalis::prelude::*;
use clap::Args;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::backoff::{CheckSchedule, parse_duration_arg as duration};
use crate::breaker::{Breaker, Pace};
use crate::engine::{Engine, EngineConfig};
use crate::gateway::{Gateway, HttpGatewayConfig};
use crate::store::{CHARGE_QUEUE, REFUND_QUEUE, Store};
use crate::wakeq::{Acks, LiteDb, Outcome, PgDb, WakeConfig, WakeDb, Wakes, Wakeup};

/// The default pool of an SQLite worker process (`WorkerArgs::connections`).
pub const SQLITE_CONNECTIONS: u32 = 4;

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
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// The simulator's (or a compatible gateway's) base URL: `http://…` or
    /// `https://…` (checked at start-up). No default: with neither this
    /// nor `COBRO_GATEWAY` the worker refuses to start.
    #[arg(long, env = "GATEWAY_URL")]
    pub gateway_url: Option<String>,
    /// A PEM file of extra root certificates to trust for an `https://`
    /// gateway (a private CA, a staging gateway); the public roots stay trusted.
    #[arg(long, env = "COBRO_GATEWAY_CA_FILE")]
    pub gateway_ca_file: Option<std::path::PathBuf>,
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
    /// How long opening a connection to the gateway may take; a connection
    /// not opened in time means the request was not sent (it is sent again
    /// later with the same key).
    #[arg(long, env = "COBRO_GATEWAY_CONNECT_TIMEOUT", default_value = "2s", value_parser = duration)]
    pub gateway_connect_timeout: Duration,
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
    /// at least this long after the send.
    #[arg(long, env = "COBRO_GATEWAY_MAX_PROCESSING", default_value = "60s", value_parser = duration)]
    pub gateway_max_processing: Duration,
    /// A request without an answer after this long is DESCONOCIDO.
    #[arg(long, env = "COBRO_GATEWAY_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub gateway_timeout: Duration,
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
            .field(
                "gateway_url",
                &self.gateway_url.as_deref().map(crate::gateway::shown_url),
            )
            .field("gateway_ca_file", &self.gateway_ca_file)
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
        if self.gateway.resolve(self.gateway_url.as_deref())? == crate::gateway::GatewayKind::Sim {
            crate::gateway::parse_base_url(self.gateway_url.as_deref().unwrap_or_default())?;
        }
        self.schedule()?;
        self.review()?;
        self.retry.policy()?;
        self.retention.validate()?;
        self.breaker.validate()?;
        self.notifier()?;
        let timeouts =
            self.gateway_connect_timeout + self.gateway_timeout + crate::engine::CLAIM_FRESH;
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
        HttpGatewayConfig {
            base_url: self.gateway_url.clone().unwrap_or_default(),
            connect_timeout: self.gateway_connect_timeout,
            request_timeout: self.gateway_timeout,
            ca_file: self.gateway_ca_file.clone(),
        }
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

/// Runs a worker process until `shutdown` resolves: stops fetching, lets
/// in-flight attempts finish (each bounded by the gateway timeout), exits.
pub async fn run(
    args: WorkerArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use anyhow::Context;
    args.validate()?;
    let name = args.name();
    // Before the database: a gateway that can never be reached (bad scheme,
    // unusable CA file) stops the process here, not at the first charge.
    let gateway: Arc<dyn Gateway> = args.gateway.build(args.gateway_config())?;
    args.gateway
        .check_credentials(args.gateway_config())
        .await?;
    let store = Store::connect(&args.database_url, args.connections())
        .await
        .context("connecting to DATABASE_URL")?;
    if let Some(problem) = store.readiness().await?.problem() {
        anyhow::bail!("{problem}");
    }
    let store = if args.group_commit {
        store.with_group_commit(args.concurrency + args.refund_concurrency)
    } else {
        store
    };
    // The breaker and the pace are per gateway, shared through the database.
    let gateway_name: String = args
        .gateway
        .shown(args.gateway_url.as_deref().unwrap_or_default())
        .chars()
        .take(300)
        .collect();
    let breaker = Arc::new(Breaker::new(
        store.clone(),
        &gateway_name,
        &args.breaker,
        &name,
    ));
    breaker
        .register()
        .await
        .context("reading the gateway breaker")?;
    let pace = Arc::new(Pace::new(store.clone(), &gateway_name, &args.breaker));
    let pause = Arc::new(crate::pause::Pause::new(store.clone()));
    pause
        .refresh()
        .await
        .context("reading the incident switch")?;
    let engine = Arc::new(
        Engine::new(
            store.clone(),
            gateway.clone(),
            EngineConfig {
                worker_name: name.clone(),
                lease_ttl: args.lease_ttl,
                schedule: args.schedule()?,
                key_lifetime: args.key_lifetime,
                retry: args.retry.policy()?,
                defer_backoff: args.defer_backoff,
                not_found: crate::policy::NotFoundRule {
                    gateway_idempotent: args.gateway_idempotent
                        || args.gateway.idempotent_lookups(),
                    max_processing: args.gateway_max_processing,
                },
                review: args.review()?,
            },
        )
        .with_guards(breaker.clone(), pace.clone())
        .with_pause(pause.clone())
        .with_poison_after(args.poison_after),
    );
    info!(
        worker = %name,
        concurrency = args.concurrency,
        gateway = %args.gateway.shown(args.gateway_url.as_deref().unwrap_or_default()),
        api = ?args.gateway.kind,
        extra_roots = ?args.gateway_ca_file,
        "cobro-worker starting"
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    let keys = args.api_keys.keys().map_err(anyhow::Error::msg)?;
    let metrics = crate::metrics::serve_worker(
        args.metrics_addr,
        crate::metrics::Scraper::new(store.clone(), args.metrics_cache),
        Arc::new(keys),
        stop_rx.clone(),
    )
    .await?;
    let purger = tokio::spawn(crate::retention::purge_loop(
        store.clone(),
        args.retention.clone(),
        stop_rx.clone(),
    ));
    let notices = args.notifier()?.map(|n| {
        tokio::spawn(crate::notify::deliver_loop(
            store.clone(),
            Arc::new(n),
            stop_rx.clone(),
        ))
    });
    let sweeper = tokio::spawn(sweep_loop(store.clone(), args.clone(), stop_rx.clone()));
    let guard = tokio::spawn(breaker.run(gateway.clone(), pace, pause, stop_rx.clone()));
    let reconciler = tokio::spawn(crate::recon::reconcile_loop(
        store.clone(),
        gateway,
        args.reconcile.clone(),
        name.clone(),
        stop_rx,
    ));

    let settings = QueueSettings {
        name,
        concurrency: args.concurrency,
        refund_concurrency: args.refund_concurrency,
        batch: args.batch_size,
        poll: args.poll_interval,
        missed: args.missed_heartbeats,
    };
    let monitor = match (store.pg_pool(), store.sqlite_pool()) {
        (Some(pool), _) => wake_monitor(PgDb::new(pool.clone()), engine, settings),
        (None, Some(pool)) => wake_monitor(LiteDb(pool.clone()), engine, settings),
        (None, None) => anyhow::bail!("the store has no pool"),
    };
    // In-flight work is bounded by the gateway timeout, which is shorter
    // than the lease; past the lease a stuck shutdown is cut short. That is
    // safe: an attempt left EN_PROCESO is recovered by another worker once
    // its lease expires. (Seen with apalis-sqlite on a starved machine: a
    // worker that never finished stopping.)
    let result = monitor
        .shutdown_timeout(args.lease_ttl)
        .run_with_signal(async move {
            shutdown.await;
            info!("shutdown requested: no new wake-ups, finishing in-flight attempts");
            Ok(())
        })
        .await;
    let _ = stop_tx.send(true);
    let _ = sweeper.await;
    let _ = guard.await;
    let _ = purger.await;
    if let Some(notices) = notices {
        let _ = notices.await;
    }
    if let Some(server) = metrics {
        let _ = server.await;
    }
    let _ = reconciler.await;
    result.context("worker monitor")?;
    info!("cobro-worker stopped");
    Ok(())
}

/// How this process's apalis worker fetches wake-ups.
#[derive(Clone)]
struct QueueSettings {
    name: String,
    concurrency: usize,
    refund_concurrency: usize,
    batch: usize,
    poll: Duration,
    missed: usize,
}

fn restart_logged(ctx: &WorkerContext, err: &WorkerError) -> bool {
    warn!(worker = %ctx.name(), error = %err, "apalis worker stopped; restarting it");
    true
}

/// The queues a worker process serves: charges, and refunds with their own
/// concurrency (same handler: the attempt row says what to send).
fn queues(q: &QueueSettings) -> [(&'static str, QueueSettings); 2] {
    let refunds = QueueSettings {
        name: format!("{}-refunds", q.name),
        concurrency: q.refund_concurrency,
        ..q.clone()
    };
    [(CHARGE_QUEUE, q.clone()), (REFUND_QUEUE, refunds)]
}

/// The handler of a wake-up ([`crate::wakeq`]): decides on the
/// row fetched with it, and leaves its acknowledgement for the next fetch.
async fn handle_wakeup(
    w: Wakeup,
    engine: Data<Arc<Engine>>,
    acks: Data<Acks>,
) -> Result<(), BoxDynError> {
    let _running = acks.finishing();
    let Some(id) = w.attempt_id else {
        warn!(job = %w.job_id, "a wake-up job names no attempt; dropping it");
        acks.push(w.job_id, Outcome::Killed);
        return Ok(());
    };
    match engine.process_seen(id, w.seen, w.claimed).await {
        Ok(()) => {
            acks.push(w.job_id, Outcome::Done);
            Ok(())
        }
        Err(e) => {
            engine.wake_failed(id, &e).await;
            acks.push(w.job_id, Outcome::Failed);
            Err(Box::new(e) as BoxDynError)
        }
    }
}

/// cobro's own wake-up backend ([`crate::wakeq`]) on either database:
/// PostgreSQL's LISTEN/NOTIFY for jobs due now, and on both the poll
/// interval for jobs that became due later (on SQLite, for all of them).
fn wake_monitor<D: WakeDb>(db: D, engine: Arc<Engine>, q: QueueSettings) -> Monitor {
    let worker = |queue: &'static str, q: QueueSettings| {
        let (db, engine) = (db.clone(), engine.clone());
        move |restarts: usize| {
            let acks = Acks::default();
            let backend = Wakes::new(
                db.clone(),
                WakeConfig {
                    queue,
                    batch: q.batch,
                    poll: q.poll,
                    orphaned_after: q.poll * q.missed as u32,
                    concurrency: q.concurrency,
                },
                acks.clone(),
            );
            // Charges are claimed in the fetch; a refund's call needs its
            // charge read first, so its handler claims it.
            let backend = if queue == CHARGE_QUEUE {
                backend.claiming(engine.clone())
            } else {
                backend
            };
            WorkerBuilder::new(format!("{}-{restarts}", q.name))
                .backend(backend)
                .concurrency(q.concurrency)
                .parallelize(tokio::spawn)
                .data(engine.clone())
                .data(acks)
                .build(handle_wakeup)
        }
    };
    let [(charges, c), (refunds, r)] = queues(&q);
    Monitor::new()
        .register(worker(charges, c))
        .register(worker(refunds, r))
        .should_restart(restart_logged)
}

async fn sweep_loop(store: Store, args: WorkerArgs, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(args.sweep_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        match store
            .sweep(args.sweep_grace, args.sweep_grace * 2, 500)
            .await
        {
            Ok(0) => {}
            Ok(n) => info!(
                rewoken = n,
                "sweeper re-woke attempts whose time had passed"
            ),
            Err(e) => warn!(error = %e, "sweep failed; trying again next tick"),
        }
        sweep_review(&store, &args).await;
    }
}

/// The janitor's backstop: attempts in review whose check is due.
async fn sweep_review(store: &Store, args: &WorkerArgs) {
    match store
        .sweep_review(args.sweep_grace, args.sweep_grace * 2, 500)
        .await
    {
        Ok(0) => {}
        Ok(n) => info!(
            rewoken = n,
            "sweeper re-woke attempts in review whose check was due"
        ),
        Err(e) => warn!(error = %e, "review sweep failed; trying again next tick"),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// How `cobro` and `cobro-worker` end: an error is printed as one message
/// with its causes (`error: …: …`) and the exit code is 1. Never anyhow's
/// `Debug`, which adds a stack backtrace when `RUST_BACKTRACE` is set: a
/// user's mistake is not a crash. A real panic keeps its backtrace.
pub fn exit_code(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Structured logs: `RUST_LOG` filters (default `default_level`),
/// `COBRO_LOG_FORMAT=json` switches to one JSON object per line.
pub fn init_tracing(default_level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("COBRO_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else {
        builder.init();
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
