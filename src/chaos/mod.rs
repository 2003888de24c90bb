//! `cobro chaos`: the soak. Real processes (the gateway simulator, the web
//! process receiving the simulator's duplicated, reordered webhooks, N
//! `cobro-worker` processes) on a fresh PostgreSQL database; orders enqueued
//! through the SQL function and the library; faults at the gateway; workers
//! SIGKILLed at seeded random times and replaced under fresh names;
//! PostgreSQL restarted with `-m immediate`. When the queue drains, the
//! verdict ([`check`]) counts double charges, lost and stuck attempts,
//! amount mismatches, broken logs and re-sends after an approval.
//!
//! Invariant: the harness only observes and disrupts; it never writes to an
//! attempt. Every random choice comes from the printed seed. A worker or the
//! web process that exits by itself is restarted like a supervisor would,
//! and counted (`unexpected_exits`), so a crash loop shows in the report.

pub mod check;
mod orders;
mod outage;
mod procs;
mod report;

use orders::{enqueue_all, live, read_back};
use outage::{set_outage, time_unparking};
use procs::{Procs, spawn_sim};
pub use report::render;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use sqlx::{Connection, PgConnection};
use tokio::process::Command;
use tracing::{info, warn};

use crate::store::Store;

#[derive(Clone, Args)]
pub struct ChaosArgs {
    /// A PostgreSQL URL of a role that may create databases; the soak runs
    /// in a fresh database `cobro_chaos_<seed>` and drops it when it passes.
    #[arg(
        long,
        env = "TEST_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres",
        hide_env_values = true
    )]
    pub admin_url: String,
    #[arg(long, default_value_t = 10_000)]
    pub orders: usize,
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// SIGKILLs of a random worker, spread over the enqueue and drain.
    #[arg(long, default_value_t = 30)]
    pub kills: usize,
    /// Immediate restarts of PostgreSQL during the run.
    #[arg(long, default_value_t = 3)]
    pub pg_restarts: usize,
    /// The command that restarts PostgreSQL (default: `pg_ctlcluster
    /// <newest version> <--pg-cluster> restart -m immediate`; needs root).
    #[arg(long)]
    pub pg_restart_command: Option<String>,
    /// The Debian cluster name the default restart command restarts. A
    /// cluster of its own (e.g. `pg_createcluster 15 chaos -p 5433`) keeps
    /// the restarts away from anything else using PostgreSQL.
    #[arg(long, default_value = "main")]
    pub pg_cluster: String,
    /// The run's seed: a failure prints it, and the same seed replays the run.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Give up waiting for the queue to drain after this long.
    #[arg(long, default_value = "20m", value_parser = crate::backoff::parse_duration_arg)]
    pub drain_timeout: Duration,
    /// How long the disruptions go on.
    #[arg(long, default_value = "90s", value_parser = crate::backoff::parse_duration_arg)]
    pub chaos_for: Duration,
    /// The workers' check schedule (the real one by default).
    #[arg(long, default_value = "2s,4s,8s,16s,32s")]
    pub check_schedule: String,
    /// A gateway outage during the disruptions: every call answers 503 for
    /// this long, from a seeded time (0s: none).
    #[arg(long, default_value = "0s", value_parser = crate::backoff::parse_duration_arg)]
    pub outage_for: Duration,
    /// A window with nothing listening on the gateway's port (connections
    /// refused), from a seeded time (0s: none).
    #[arg(long, default_value = "0s", value_parser = crate::backoff::parse_duration_arg)]
    pub refuse_for: Duration,
    /// The gateway answers 429 above this many requests per second (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub gateway_rate_limit: f64,
    /// The workers' shared rate limit toward the gateway
    /// (`COBRO_GATEWAY_RPS`; 0: off).
    #[arg(long, default_value_t = 0)]
    pub worker_rps: u32,
    /// The gateway takes this long to execute each charge and records it
    /// only then (record-on-complete; 0: recorded on arrival).
    #[arg(long, default_value_t = 0)]
    pub record_on_complete_ms: u64,
    /// The gateway honours no idempotency key (a replay charges again; the
    /// like a gateway without idempotency support), and the workers are told so
    /// (`COBRO_GATEWAY_IDEMPOTENT=false`, with `COBRO_GATEWAY_MAX_PROCESSING`
    /// the longest a charge can take there: a held reply plus the
    /// record-on-complete time, plus a margin).
    #[arg(long)]
    pub memoryless: bool,
    /// Spread the enqueues evenly over this long, so orders keep arriving
    /// through the disruptions (0s: as fast as possible).
    #[arg(long, default_value = "0s", value_parser = crate::backoff::parse_duration_arg)]
    pub enqueue_over: Duration,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Where the binaries are: next to this one.
fn bin(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    let path = me.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found next to {} (cargo build first)",
            name,
            me.display()
        );
    }
    Ok(path)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn default_restart_command(cluster: &str) -> Result<String> {
    let version = std::fs::read_dir("/etc/postgresql")
        .context("no /etc/postgresql: pass --pg-restart-command")?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .max()
        .context("no cluster in /etc/postgresql")?;
    Ok(format!(
        "pg_ctlcluster --skip-systemctl-redirect {version} {cluster} restart -m immediate"
    ))
}

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub seed: u64,
    pub database: String,
    pub kills: usize,
    pub pg_restarts: usize,
    pub unexpected_exits: usize,
    pub enqueue_errors_retried: usize,
    pub drained_in_secs: f64,
    /// What the gateway did to us, and how the breaker answered.
    pub gateway: GatewayDisruptions,
    pub report: check::Report,
}

/// The soak's gateway faults as they happened.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GatewayDisruptions {
    pub outage_secs: f64,
    pub refused_secs: f64,
    pub rate_limit_per_s: f64,
    pub record_on_complete_ms: u64,
    pub memoryless: bool,
    /// Requests the simulator answered 429.
    pub throttled: u64,
    /// Refusal windows the simulator opened.
    pub refusal_windows: u64,
    /// Charges the simulator recorded only on completion.
    pub recorded_on_complete: u64,
    /// Times the workers' shared breaker opened.
    pub breaker_openings: i64,
    /// Attempts parked when the outage ended, and how long after its end
    /// the last of them was re-woken (none parked: 0).
    pub parked_at_outage_end: i64,
    pub unparked_in_secs: f64,
}

/// One scheduled disruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Disruption {
    Kill,
    PgRestart,
    OutageStart,
    OutageEnd,
    Refuse,
}

async fn wait_http(url: &str, what: &str) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if reqwest::get(url)
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{what} did not come up at {url}")
}

fn db_url(admin: &str, name: &str) -> String {
    match admin.rfind('/') {
        Some(i) if !admin[..i].ends_with('/') => format!("{}/{name}", &admin[..i]),
        _ => format!("{admin}/{name}"),
    }
}

/// Runs the soak; `Ok` carries the outcome whether or not it passed.
pub async fn run(args: &ChaosArgs) -> Result<Outcome> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let cobro = bin("cobro")?;
    let worker = bin("cobro-worker")?;
    let restart_cmd = match (&args.pg_restart_command, args.pg_restarts) {
        (Some(c), _) => c.clone(),
        (None, 0) => String::new(),
        (None, _) => default_restart_command(&args.pg_cluster)?,
    };
    let name = format!("cobro_chaos_{}", args.seed);
    let mut admin = PgConnection::connect(&args.admin_url)
        .await
        .context("connecting to --admin-url")?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await?;
    let url = db_url(&args.admin_url, &name);
    let store = Store::connect(&url, 4).await?;
    store.migrate().await?;

    let secret = format!("whsec_{}", {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(rng.random::<[u8; 32]>())
    });
    let (sim_port, web_port) = (free_port()?, free_port()?);
    let sim_url = format!("http://127.0.0.1:{sim_port}");
    let web_url = format!("http://127.0.0.1:{web_port}");
    let mut sim = spawn_sim(&cobro, sim_port, args, &web_url, &secret).await?;
    wait_http(&format!("{sim_url}/health"), "the simulator").await?;
    let mut procs = Procs {
        cobro: cobro.clone(),
        worker,
        db_url: url.clone(),
        sim_url: sim_url.clone(),
        check_schedule: args.check_schedule.clone(),
        worker_rps: args.worker_rps,
        max_processing: args
            .memoryless
            .then(|| Duration::from_millis(procs::HOLD_MS + args.record_on_complete_ms + 2_000)),
        workers: Vec::new(),
        web: None,
        web_env: vec![
            ("DATABASE_URL".into(), url.clone()),
            ("COBRO_LISTEN".into(), format!("127.0.0.1:{web_port}")),
            ("COBRO_WEBHOOK_SECRETS".into(), secret.clone()),
            ("COBRO_RETRY_SCHEDULE".into(), "2s".into()),
        ],
        started: 0,
        unexpected_exits: 0,
    };
    procs.spawn_web()?;
    wait_http(&format!("{web_url}/health"), "the web process").await?;
    for _ in 0..args.workers {
        procs.spawn_worker()?;
    }

    // The disruption plan, from the seed: times within `chaos_for`.
    let span = args.chaos_for.as_millis().max(1) as u64;
    let mut plan: Vec<(u64, Disruption)> = (0..args.kills)
        .map(|_| (rng.random_range(0..span), Disruption::Kill))
        .collect();
    for _ in 0..args.pg_restarts {
        plan.push((
            rng.random_range(span / 10..span.max(2)),
            Disruption::PgRestart,
        ));
    }
    if !args.outage_for.is_zero() {
        let at = rng.random_range(0..span / 2 + 1);
        plan.push((at, Disruption::OutageStart));
        plan.push((
            at + args.outage_for.as_millis() as u64,
            Disruption::OutageEnd,
        ));
    }
    if !args.refuse_for.is_zero() {
        plan.push((rng.random_range(0..span / 2 + 1), Disruption::Refuse));
    }
    plan.sort_unstable();
    info!(
        seed = args.seed,
        kills = args.kills,
        pg_restarts = args.pg_restarts,
        "chaos plan drawn"
    );

    let orders: Vec<String> = (0..args.orders)
        .map(|i| format!("chaos-{}-{i:06}", args.seed))
        .collect();
    let amounts: Vec<i64> = orders
        .iter()
        .map(|_| rng.random_range(1_000..50_000))
        .collect();
    let start = Instant::now();
    let gap = args.enqueue_over / u32::try_from(args.orders.max(1)).unwrap_or(u32::MAX);
    let enqueue = tokio::spawn(enqueue_all(url.clone(), orders.clone(), amounts, gap));
    let (mut kills, mut restarts) = (0, 0);
    let mut recovery = None;
    for (at_ms, what) in plan {
        let due = Duration::from_millis(at_ms);
        while start.elapsed() < due {
            procs.supervise()?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        match what {
            Disruption::OutageStart | Disruption::OutageEnd => {
                let on = what == Disruption::OutageStart;
                info!(on, "gateway outage (every call answers 503)");
                set_outage(&sim_url, on).await?;
                if !on {
                    recovery = Some(tokio::spawn(time_unparking(url.clone())));
                }
                continue;
            }
            Disruption::Refuse => {
                info!(
                    for_ms = args.refuse_for.as_millis() as u64,
                    "gateway refuses connections"
                );
                reqwest::Client::new()
                    .post(format!("{sim_url}/control/refuse"))
                    .json(&serde_json::json!({ "for_ms": args.refuse_for.as_millis() as u64 }))
                    .send()
                    .await
                    .context("POST /control/refuse")?;
                continue;
            }
            Disruption::Kill | Disruption::PgRestart => {}
        }
        if what == Disruption::PgRestart {
            info!(command = %restart_cmd, "restarting PostgreSQL");
            let status = Command::new("sh")
                .args(["-c", &restart_cmd])
                .status()
                .await?;
            if !status.success() {
                bail!("{restart_cmd:?} failed: {status}");
            }
            restarts += 1;
        } else {
            procs.kill_one(&mut rng).await?;
            kills += 1;
        }
    }
    let enqueue_errors_retried = enqueue.await??;

    // Drain: nothing live, no business retry pending.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await?;
    let drained_at = loop {
        procs.supervise()?;
        if let Ok(0) = live(&pool).await {
            break start.elapsed();
        }
        if start.elapsed() > args.drain_timeout {
            warn!("the queue did not drain in time; judging what is there");
            break start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Let late webhooks land, then stop everything before reading.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ledger: crate::sim::Ledger = reqwest::get(format!("{sim_url}/ledger"))
        .await?
        .json()
        .await?;
    procs.stop_all().await;
    let _ = sim.start_kill();
    let _ = sim.wait().await;

    let (attempts, lateness) = read_back(&pool, &store).await?;
    let (parked_at_outage_end, unparked_in_secs) = match recovery {
        Some(task) => task.await??,
        None => (0, 0.0),
    };
    let breaker_openings: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM cobro.gateway_breaker_events WHERE state = 'open'",
    )
    .fetch_one(&pool)
    .await?;
    let gateway = GatewayDisruptions {
        outage_secs: args.outage_for.as_secs_f64(),
        refused_secs: args.refuse_for.as_secs_f64(),
        rate_limit_per_s: args.gateway_rate_limit,
        record_on_complete_ms: args.record_on_complete_ms,
        memoryless: args.memoryless,
        throttled: ledger.stats.throttled,
        refusal_windows: ledger.stats.refusal_windows,
        recorded_on_complete: ledger.stats.deferred,
        breaker_openings,
        parked_at_outage_end,
        unparked_in_secs,
    };
    let report = check::judge(&orders, &attempts, &ledger, lateness);
    pool.close().await;
    store.close().await;
    if report.passed() {
        // A fresh connection: the first one did not survive the restarts.
        let mut admin = PgConnection::connect(&args.admin_url).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await?;
    }
    Ok(Outcome {
        seed: args.seed,
        database: name,
        kills,
        pg_restarts: restarts,
        unexpected_exits: procs.unexpected_exits,
        enqueue_errors_retried,
        drained_in_secs: drained_at.as_secs_f64(),
        gateway,
        report,
    })
}

/// By hand: `admin_url` may hold a password.
impl std::fmt::Debug for ChaosArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChaosArgs")
            .field("admin_url", &"<redacted>")
            .field("orders", &self.orders)
            .field("workers", &self.workers)
            .field("kills", &self.kills)
            .field("pg_restarts", &self.pg_restarts)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}
