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
mod procs;
mod report;

use procs::{Procs, spawn_sim};
pub use report::render;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use sqlx::{Connection, PgConnection, PgPool, Row};
use tokio::process::Command;
use tracing::{info, warn};
use uuid::Uuid;

use crate::domain::{ChargeRequest, IdempotencyKey};
use crate::state::State;
use crate::store::Store;

#[derive(Debug, Clone, Args)]
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
    pub report: check::Report,
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
    let mut sim = spawn_sim(&cobro, sim_port, args.seed, &web_url, &secret).await?;
    wait_http(&format!("{sim_url}/health"), "the simulator").await?;
    let mut procs = Procs {
        cobro: cobro.clone(),
        worker,
        db_url: url.clone(),
        sim_url: sim_url.clone(),
        check_schedule: args.check_schedule.clone(),
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
    let mut plan: Vec<(u64, bool)> = (0..args.kills)
        .map(|_| (rng.random_range(0..span), false))
        .collect();
    for _ in 0..args.pg_restarts {
        plan.push((rng.random_range(span / 10..span.max(2)), true));
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
    let enqueue = tokio::spawn(enqueue_all(url.clone(), orders.clone(), amounts));
    let (mut kills, mut restarts) = (0, 0);
    for (at_ms, is_restart) in plan {
        let due = Duration::from_millis(at_ms);
        while start.elapsed() < due {
            procs.supervise()?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if is_restart {
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
        report,
    })
}

/// Half through the SQL function (as an app in another language would, in
/// its own transaction), half through the library. A database error (the
/// restart) is retried with the SAME key: the enqueue is idempotent.
async fn enqueue_all(url: String, orders: Vec<String>, amounts: Vec<i64>) -> Result<usize> {
    let mut retried = 0;
    let store = loop {
        match Store::connect(&url, 2).await {
            Ok(store) => break store,
            Err(e) if retried < 60 => {
                retried += 1;
                warn!(error = %e, "connecting to enqueue failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    for (i, (order, amount)) in orders.iter().zip(amounts).enumerate() {
        let key = IdempotencyKey::generate();
        loop {
            let done = if i % 2 == 0 {
                let pool = store.pg_pool().context("PostgreSQL only")?;
                sqlx::query("SELECT * FROM cobro.enqueue_charge($1, $2, 'USD', $3, 'pm_chaos')")
                    .bind(order)
                    .bind(amount)
                    .bind(key.uuid())
                    .execute(pool)
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from)
            } else {
                let req = ChargeRequest::parse(
                    order,
                    amount,
                    "USD",
                    Some(&key.to_string()),
                    Some("pm_chaos"),
                )?;
                store
                    .enqueue(&req)
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from)
            };
            match done {
                Ok(()) => break,
                Err(e) => {
                    retried += 1;
                    warn!(%order, error = %e, "enqueue failed; retrying with the same key");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
    store.close().await;
    Ok(retried)
}

async fn live(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM cobro.payment_attempts
          WHERE state IN ('PENDIENTE', 'EN_PROCESO', 'DESCONOCIDO')
             OR (state = 'RECHAZADO' AND next_action_at IS NOT NULL)",
    )
    .fetch_one(pool)
    .await?)
}

async fn read_back(pool: &PgPool, store: &Store) -> Result<(Vec<check::AttemptFacts>, Vec<i64>)> {
    let rows = sqlx::query(
        "SELECT id, order_id, idempotency_key, state, amount_minor, gateway_charge_id
           FROM cobro.payment_attempts ORDER BY created_at, id",
    )
    .fetch_all(pool)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let id: Uuid = r.try_get("id")?;
        let state: String = r.try_get("state")?;
        let log = store
            .transitions(id)
            .await?
            .into_iter()
            .map(|t| (t.from_state, t.to_state, t.cause, t.at))
            .collect();
        let checks = store
            .checks(id)
            .await?
            .into_iter()
            .map(|c| (c.lookup_result, c.started_at))
            .collect();
        out.push(check::AttemptFacts {
            id,
            order_id: r.try_get("order_id")?,
            key: r.try_get("idempotency_key")?,
            state: state.parse::<State>()?,
            amount_minor: r.try_get("amount_minor")?,
            gateway_charge_id: r.try_get("gateway_charge_id")?,
            log,
            checks,
        });
    }
    let lateness: Vec<i64> = sqlx::query_scalar(
        "SELECT (extract(epoch FROM started_at - scheduled_at) * 1000)::bigint FROM cobro.attempt_checks",
    )
    .fetch_all(pool)
    .await?;
    Ok((out, lateness))
}
