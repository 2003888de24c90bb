//! A reproducer for "scheduled jobs start late behind a backlog", with
//! nothing of cobro: bare apalis-postgres configured like `cobro-worker`
//! (LISTEN/NOTIFY, heartbeat = poll interval, batch, concurrency, jobs
//! spawned on tokio), a backlog of `--jobs` jobs pushed at once, and a
//! handler that, like a check, holds a pool connection for `--handler-ms`
//! and with probability `--p-follow` schedules a follow-up job
//! `--follow-ms` (±50 %) ahead with its exact `run_at` (a raw INSERT, like
//! `cobro.wake`), up to `--chain` follow-ups per backlog job.
//!
//! Lateness of a follow-up = its handler's start - its `run_at`. A watchdog
//! prints a line whenever a job has been due for more than a second while
//! no handler started; a summary JSON line ends the run. Exit 1 when a
//! follow-up started more than `--limit-ms` late.
//!
//! `DATABASE_URL=postgres://…/db cargo run --release --example apalis_stall -- --jobs 2000 --batch-size 2`
//! (the database must exist; the apalis schema is created if missing; the
//! queue's rows are deleted first).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use apalis::prelude::*;
use apalis_postgres::PostgresStorage;
use clap::Parser;
use rand::Rng;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use std::sync::Mutex;

const QUEUE: &str = "stall.repro";

#[derive(Parser, Clone)]
struct Cli {
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// Backlog jobs pushed at once.
    #[arg(long, default_value_t = 5000)]
    jobs: usize,
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    #[arg(long, default_value_t = 10)]
    batch_size: usize,
    /// apalis heartbeat (cobro's COBRO_POLL_INTERVAL).
    #[arg(long, default_value_t = 500)]
    poll_ms: u64,
    /// Each handler holds a pool connection this long (pg_sleep).
    #[arg(long, default_value_t = 5)]
    handler_ms: u64,
    /// Probability that a job schedules a follow-up.
    #[arg(long, default_value_t = 0.5)]
    p_follow: f64,
    /// Follow-up delay (±50 %).
    #[arg(long, default_value_t = 3000)]
    follow_ms: u64,
    /// At most this many follow-ups per backlog job.
    #[arg(long, default_value_t = 4)]
    chain: u32,
    /// Pool connections beyond concurrency + 4 (cobro: refund concurrency 4
    /// more, and its sweeper, janitor etc. share them).
    #[arg(long, default_value_t = 0)]
    extra_pool: u32,
    /// Without LISTEN/NOTIFY (heartbeat polling only).
    #[arg(long)]
    no_pubsub: bool,
    #[arg(long, default_value_t = 1000)]
    limit_ms: u64,
    /// End the run once a stall has lasted this long (nothing here would
    /// end it: follow-ups are inserted ahead of time, so no NOTIFY comes).
    #[arg(long, default_value_t = 10)]
    give_up_s: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    /// The follow-up's due time (ms since the epoch); 0 for a backlog job.
    due_ms: u64,
    depth: u32,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

struct Shared {
    cli: Cli,
    pool: sqlx::PgPool,
    /// Follow-ups scheduled and not yet started.
    open: AtomicUsize,
    started: AtomicUsize,
    last_start_ms: AtomicU64,
    lateness_ms: Mutex<Vec<u64>>,
}

async fn handle(job: Job, s: Data<Arc<Shared>>) -> Result<(), BoxDynError> {
    let now = now_ms();
    s.last_start_ms.store(now, Ordering::Relaxed);
    s.started.fetch_add(1, Ordering::Relaxed);
    if job.due_ms > 0 {
        s.lateness_ms
            .lock()
            .unwrap()
            .push(now.saturating_sub(job.due_ms));
    }
    sqlx::query("SELECT pg_sleep($1)")
        .bind(s.cli.handler_ms as f64 / 1000.0)
        .execute(&s.pool)
        .await?;
    let follow = job.depth < s.cli.chain && rand::rng().random_bool(s.cli.p_follow);
    if follow {
        let delay = (s.cli.follow_ms as f64 * rand::rng().random_range(0.5..=1.5)) as u64;
        let due = now_ms() + delay;
        let body = serde_json::to_vec(&Job {
            due_ms: due,
            depth: job.depth + 1,
        })?;
        s.open.fetch_add(1, Ordering::Relaxed);
        sqlx::query(
            "INSERT INTO apalis.jobs (id, job_type, job, run_at, max_attempts, priority)
             VALUES (apalis.generate_ulid(), $1, $2, to_timestamp($3 / 1000.0), 3, 1)",
        )
        .bind(QUEUE)
        .bind(body)
        .bind(due as f64)
        .execute(&s.pool)
        .await?;
    }
    if job.due_ms > 0 {
        s.open.fetch_sub(1, Ordering::Relaxed);
    }
    Ok(())
}

fn pct(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let pool = PgPoolOptions::new()
        .max_connections(cli.concurrency as u32 + 4 + cli.extra_pool)
        .acquire_timeout(Duration::from_secs(10))
        .idle_timeout(None)
        .max_lifetime(None)
        .connect(&cli.database_url)
        .await
        .context("connecting to DATABASE_URL")?;
    PostgresStorage::setup(&pool)
        .await
        .context("creating apalis' schema")?;
    sqlx::query("DELETE FROM apalis.jobs WHERE job_type = $1")
        .bind(QUEUE)
        .execute(&pool)
        .await?;

    let shared = Arc::new(Shared {
        cli: cli.clone(),
        pool: pool.clone(),
        open: AtomicUsize::new(0),
        started: AtomicUsize::new(0),
        last_start_ms: AtomicU64::new(now_ms()),
        lateness_ms: Mutex::new(Vec::new()),
    });
    // One worker, configured like cobro-worker's charge queue.
    macro_rules! worker {
        ($wrap:expr) => {{
            let (pool2, s2, c2) = (pool.clone(), shared.clone(), cli.clone());
            Monitor::new().register(move |restarts: usize| {
                let config = apalis_postgres::Config::default()
                    .queue(QUEUE)
                    .batch_size(c2.batch_size)
                    .heartbeat_interval(Duration::from_millis(c2.poll_ms))
                    // Orphans after 10 s at least: apalis-postgres truncates
                    // heartbeat x missed to whole seconds, and 0 s re-enqueues
                    // the worker's own running jobs at every heartbeat.
                    .missed_heartbeats((10_000 / c2.poll_ms.max(1) as usize).max(20));
                let backend = PostgresStorage::<Job>::new(&pool2).with_config(config);
                WorkerBuilder::new(format!("stall-{}-{restarts}", std::process::id()))
                    .backend($wrap(backend))
                    .concurrency(c2.concurrency)
                    .parallelize(tokio::spawn)
                    .data(s2.clone())
                    .build(handle)
            })
        }};
    }
    let monitor = if cli.no_pubsub {
        worker!(|b| b)
    } else {
        worker!(|b: PostgresStorage<Job>| b.with_pubsub())
    }
    .should_restart(|ctx, err| {
        eprintln!("RESTART {} {} error={err}", chrono::Utc::now(), ctx.name());
        true
    });

    // The backlog, pushed once the worker has registered.
    let (pool3, c3) = (pool.clone(), cli.clone());
    let pusher = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let body = serde_json::to_vec(&Job {
            due_ms: 0,
            depth: 0,
        })
        .unwrap();
        sqlx::query(
            "INSERT INTO apalis.jobs (id, job_type, job, run_at, max_attempts, priority)
             SELECT apalis.generate_ulid(), $1, $2, now(), 3, 0 FROM generate_series(1, $3)",
        )
        .bind(QUEUE)
        .bind(body)
        .bind(c3.jobs as i32)
        .execute(&pool3)
        .await
    });

    // Watchdog: due jobs that nobody takes.
    let (pool4, s4) = (pool.clone(), shared.clone());
    let done = Arc::new(tokio::sync::Notify::new());
    let d4 = done.clone();
    let watchdog = tokio::spawn(async move {
        let mut stalls: Vec<(String, f64)> = Vec::new();
        let mut stall_since: Option<(u64, String)> = None;
        let mut idle_rounds = 0;
        let t0 = now_ms();
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let row: Result<(i64, i64, i64), _> = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE status = 'Pending' AND run_at < now() - interval '1 second'),
                        count(*) FILTER (WHERE status IN ('Pending', 'Queued', 'Running')),
                        count(*) FILTER (WHERE status IN ('Queued', 'Running'))
                   FROM apalis.jobs WHERE job_type = $1",
            )
            .bind(QUEUE)
            .fetch_one(&pool4)
            .await;
            let Ok((overdue, live, taken)) = row else {
                continue;
            };
            let since_start = now_ms().saturating_sub(s4.last_start_ms.load(Ordering::Relaxed));
            let stalled = overdue > 0 && since_start > 1000;
            match (&stall_since, stalled) {
                (None, true) => {
                    let at = chrono::Utc::now().to_rfc3339();
                    eprintln!(
                        "STALL begins {at}: {overdue} jobs overdue > 1 s, {taken} Queued/Running, no handler start for {since_start} ms"
                    );
                    stall_since = Some((now_ms(), at));
                }
                (Some((t, at)), false) => {
                    let secs = (now_ms() - t) as f64 / 1000.0;
                    eprintln!(
                        "STALL ends {}: lasted {secs:.2} s",
                        chrono::Utc::now().to_rfc3339()
                    );
                    stalls.push((at.clone(), secs));
                    stall_since = None;
                }
                (Some((t, at)), true) if now_ms() - t > s4.cli.give_up_s * 1000 => {
                    let secs = (now_ms() - t) as f64 / 1000.0;
                    eprintln!("STALL still on after {secs:.2} s: giving up");
                    stalls.push((at.clone(), secs));
                    break;
                }
                _ => {}
            }
            if live == 0 && s4.started.load(Ordering::Relaxed) > 0 && now_ms() - t0 > 2000 {
                idle_rounds += 1;
                if idle_rounds >= 4 {
                    break;
                }
            } else {
                idle_rounds = 0;
            }
        }
        d4.notify_one();
        stalls
    });

    monitor
        .shutdown_timeout(Duration::from_secs(10))
        .run_with_signal(async move {
            done.notified().await;
            Ok(())
        })
        .await
        .context("apalis monitor")?;
    pusher.await??;
    let stalls = watchdog.await?;
    let mut late = shared.lateness_ms.lock().unwrap().clone();
    late.sort_unstable();
    let over = late.iter().filter(|&&l| l > cli.limit_ms).count();
    println!(
        "{}",
        serde_json::json!({
            "jobs": cli.jobs, "concurrency": cli.concurrency, "batch_size": cli.batch_size,
            "poll_ms": cli.poll_ms, "handler_ms": cli.handler_ms, "pubsub": !cli.no_pubsub,
            "pool": cli.concurrency as u32 + 4 + cli.extra_pool,
            "started": shared.started.load(Ordering::Relaxed),
            "follow_ups": late.len(),
            "lateness_ms": {"p50": pct(&late, 0.5), "p99": pct(&late, 0.99), "max": late.last().copied().unwrap_or(0)},
            "over_limit": over,
            "stalls": stalls.iter().map(|(at, s)| serde_json::json!({"at": at, "secs": s})).collect::<Vec<_>>(),
        })
    );
    pool.close().await;
    if over > 0 || !stalls.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
