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
use tokio::sync::watch;
use tracing::{info, warn};

use crate::breaker::{Breaker, Pace};
use crate::engine::{Engine, EngineConfig};
use crate::gateway::Gateway;
use crate::store::{CHARGE_QUEUE, REFUND_QUEUE, Store};
use crate::wakeq::{Acks, LiteDb, Outcome, PgDb, WakeConfig, WakeDb, Wakes, Wakeup};

/// The default pool of an SQLite worker process (`WorkerArgs::connections`).
pub const SQLITE_CONNECTIONS: u32 = 4;

mod args;

pub use args::{ConfigError, WorkerArgs, WorkerCli};

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
        .shown(args.gateway_link.url())
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
        gateway = %args.gateway.shown(args.gateway_link.url()),
        api = ?args.gateway.kind,
        extra_roots = ?args.gateway_link.ca_file,
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

/// PostgreSQL's NOTICEs are not news to an operator (the migrations'
/// `IF NOT EXISTS` say "schema … already exists, skipping"), and cobro
/// raises none of its own: without `RUST_LOG` they are not printed.
const QUIET_NOTICES: &str = "sqlx::postgres::notice=warn";

/// Structured logs: `RUST_LOG` filters (default `default_level`, without
/// PostgreSQL's notices), `COBRO_LOG_FORMAT=json` switches to one JSON
/// object per line.
pub fn init_tracing(default_level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default_level},{QUIET_NOTICES}")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("COBRO_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else {
        builder.init();
    }
}
