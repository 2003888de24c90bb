//! The floor of cobro's throughput benchmark: how fast bare apalis-postgres
//! drains N no-op jobs on this machine, configured like a `cobro-worker`
//! (LISTEN/NOTIFY plus a 500 ms heartbeat, batch 10, jobs spawned on tokio)
//! but with concurrency 10, like the graphile-worker peer.
//!
//! The jobs are pushed in bulk (`apalis_postgres::queries::push_tasks`, 1000
//! per statement) before the timer starts; the timer runs from just before
//! the monitor starts to the N-th handler call. Nothing of cobro is used: this
//! is what the queue costs on its own. Also reported: the CPU clock ticks
//! this process and the PostgreSQL backends serving it used while draining
//! (from /proc; Linux, same machine). Prints one JSON line.
//!
//! `DATABASE_URL=postgres://… cargo run --release --example apalis_noop -- --jobs 20000`
//! (the database must exist; the apalis schema is created if missing).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use apalis::prelude::*;
use apalis_postgres::PostgresStorage;
use clap::Parser;
use serde::{Deserialize, Serialize};
use sqlx::Connection;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Notify;

const QUEUE: &str = "bench.noop";

#[derive(Parser)]
struct Cli {
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// How many no-op jobs to push and drain.
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// Jobs handled at once.
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Jobs fetched per poll (cobro's default).
    #[arg(long, default_value_t = 10)]
    batch_size: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Noop {
    i: u64,
}

struct Progress {
    done: AtomicUsize,
    target: usize,
    all_done: Notify,
}

/// CPU clock ticks (user + system) used so far by process `pid`; 0 when it
/// cannot be read (gone, or not Linux).
fn cpu_ticks(pid: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command name, which may contain spaces: state is the
    // first, utime and stime the 12th and 13th.
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split(' ').collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// Ticks used so far by the other backends of this database.
async fn backend_ticks(pool: &sqlx::PgPool) -> anyhow::Result<u64> {
    let pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(pool)
    .await?;
    Ok(pids.iter().map(|p| cpu_ticks(&p.to_string())).sum())
}

async fn handle(_job: Noop, progress: Data<Arc<Progress>>) -> Result<(), BoxDynError> {
    if progress.done.fetch_add(1, Ordering::Relaxed) + 1 == progress.target {
        progress.all_done.notify_one();
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let pool = PgPoolOptions::new()
        .max_connections(cli.concurrency as u32 + 4)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect(&cli.database_url)
        .await
        .context("connecting to DATABASE_URL")?;
    PostgresStorage::setup(&pool)
        .await
        .context("creating apalis' schema")?;

    // Pushed on a connection of its own, closed before the timer starts, so
    // the pool's backends only ever serve the worker.
    let pushed_at = Instant::now();
    let mut conn = sqlx::PgConnection::connect(&cli.database_url).await?;
    for start in (0..cli.jobs).step_by(1000) {
        let tasks = (start..(start + 1000).min(cli.jobs))
            .map(|i| {
                let bytes = serde_json::to_vec(&Noop { i: i as u64 })?;
                Ok(TaskBuilder::new(bytes).max_attempts(3).build())
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        apalis_postgres::queries::push_tasks(&mut conn, QUEUE, tasks).await?;
    }
    conn.close().await?;
    let push_secs = pushed_at.elapsed().as_secs_f64();

    let progress = Arc::new(Progress {
        done: AtomicUsize::new(0),
        target: cli.jobs,
        all_done: Notify::new(),
    });
    let (pool2, p2) = (pool.clone(), progress.clone());
    let (concurrency, batch) = (cli.concurrency, cli.batch_size);
    let monitor = Monitor::new().register(move |restarts: usize| {
        let config = apalis_postgres::Config::default()
            .queue(QUEUE)
            .batch_size(batch)
            .heartbeat_interval(Duration::from_millis(500))
            .missed_heartbeats(20);
        let backend = PostgresStorage::<Noop>::new(&pool2)
            .with_config(config)
            .with_pubsub();
        WorkerBuilder::new(format!("bench-noop-{}-{restarts}", std::process::id()))
            .backend(backend)
            .concurrency(concurrency)
            .parallelize(tokio::spawn)
            .data(p2.clone())
            .build(handle)
    });

    let started = Instant::now();
    let self_ticks = cpu_ticks("self");
    let drained = Arc::new(Notify::new());
    let (p3, d2, pool3) = (progress.clone(), drained.clone(), pool.clone());
    let waiter = tokio::spawn(async move {
        p3.all_done.notified().await;
        let secs = started.elapsed().as_secs_f64();
        let ticks = (cpu_ticks("self") - self_ticks, backend_ticks(&pool3).await);
        d2.notify_one();
        (secs, ticks)
    });
    monitor
        .shutdown_timeout(Duration::from_secs(10))
        .run_with_signal(async move {
            drained.notified().await;
            Ok(())
        })
        .await
        .context("apalis monitor")?;
    let (secs, (self_ticks, pg_ticks)) = waiter.await?;
    let done: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM apalis.jobs WHERE job_type = $1 AND status = 'Done'",
    )
    .bind(QUEUE)
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    println!(
        "{}",
        serde_json::json!({
            "floor": "apalis-postgres",
            "jobs": cli.jobs,
            "concurrency": cli.concurrency,
            "batch_size": cli.batch_size,
            "push_secs": (push_secs * 1000.0).round() / 1000.0,
            "secs": (secs * 1000.0).round() / 1000.0,
            "jobs_per_s": (cli.jobs as f64 / secs).round(),
            "done_rows": done,
            "self_ticks": self_ticks,
            "pg_backend_ticks": pg_ticks?,
        })
    );
    Ok(())
}
