//! The soak's processes: the simulator, the web process and the workers,
//! started as real processes; killed, replaced and supervised by the
//! harness.
//!
//! Invariant: every child is killed when its handle drops, so a failed or
//! interrupted soak leaves no process behind.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result};
use rand::Rng;
use rand::rngs::StdRng;
use tokio::process::{Child, Command};
use tracing::{info, warn};

pub(super) struct Procs {
    pub(super) cobro: PathBuf,
    pub(super) worker: PathBuf,
    pub(super) db_url: String,
    pub(super) sim_url: String,
    pub(super) check_schedule: String,
    pub(super) worker_rps: u32,
    /// A memoryless gateway: the longest a charge can take there.
    pub(super) max_processing: Option<std::time::Duration>,
    pub(super) workers: Vec<(String, Child)>,
    pub(super) web: Option<Child>,
    pub(super) web_env: Vec<(String, String)>,
    pub(super) started: usize,
    pub(super) unexpected_exits: usize,
}

impl Procs {
    pub(super) fn spawn_worker(&mut self) -> Result<()> {
        self.started += 1;
        let name = format!("chaos-w{}", self.started);
        let child = Command::new(&self.worker)
            .env("DATABASE_URL", &self.db_url)
            .env("COBRO_GATEWAY", "sim")
            .env("GATEWAY_URL", &self.sim_url)
            .env("COBRO_WORKER_NAME", &name)
            .env("COBRO_CHECK_SCHEDULE", &self.check_schedule)
            // Each worker's pool holds concurrency + refund concurrency + 4
            // connections at most; keep N workers well inside PostgreSQL's
            // max_connections (100 by default), beside whatever else runs.
            .env("COBRO_CONCURRENCY", "8")
            .env("COBRO_REFUND_CONCURRENCY", "1")
            // Scaled for a soak: a killed worker's lease and its jobs come
            // back in seconds, and declined orders are retried in seconds.
            .env("COBRO_LEASE_TTL", "5s")
            .env("COBRO_GATEWAY_TIMEOUT", "2s")
            .env("COBRO_GATEWAY_CONNECT_TIMEOUT", "1s")
            .env("COBRO_SWEEP_GRACE", "5s")
            .env("COBRO_MISSED_HEARTBEATS", "6")
            .env("COBRO_RETRY_SCHEDULE", "2s")
            .env("COBRO_GATEWAY_RPS", self.worker_rps.to_string())
            .env("COBRO_BREAKER_PROBE_EVERY", "1s")
            .env(
                "COBRO_GATEWAY_IDEMPOTENT",
                self.max_processing.is_none().to_string(),
            )
            .env(
                "COBRO_GATEWAY_MAX_PROCESSING",
                format!(
                    "{}ms",
                    self.max_processing.unwrap_or_default().as_millis().max(1)
                ),
            )
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting cobro-worker")?;
        self.workers.push((name, child));
        Ok(())
    }

    pub(super) fn spawn_web(&mut self) -> Result<()> {
        let mut cmd = Command::new(&self.cobro);
        cmd.arg("serve")
            .envs(self.web_env.iter().cloned())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        self.web = Some(cmd.spawn().context("starting cobro serve")?);
        Ok(())
    }

    /// Restarts whatever exited by itself (a supervisor's job), counting it.
    pub(super) fn supervise(&mut self) -> Result<()> {
        let mut dead = 0;
        self.workers.retain_mut(|(name, child)| match child.try_wait() {
            Ok(Some(status)) => {
                warn!(worker = %name, %status, "worker exited by itself; starting a replacement");
                dead += 1;
                false
            }
            _ => true,
        });
        for _ in 0..dead {
            self.unexpected_exits += 1;
            self.spawn_worker()?;
        }
        if let Some(web) = &mut self.web
            && let Ok(Some(status)) = web.try_wait()
        {
            warn!(%status, "web process exited by itself; restarting it");
            self.unexpected_exits += 1;
            self.spawn_web()?;
        }
        Ok(())
    }

    pub(super) async fn kill_one(&mut self, rng: &mut StdRng) -> Result<()> {
        if self.workers.is_empty() {
            return Ok(());
        }
        let i = rng.random_range(0..self.workers.len());
        let (name, mut child) = self.workers.swap_remove(i);
        child.start_kill().ok(); // SIGKILL
        let _ = child.wait().await;
        info!(worker = %name, "SIGKILLed; starting a replacement under a fresh name");
        self.spawn_worker()
    }

    pub(super) async fn stop_all(&mut self) {
        for (_, child) in &mut self.workers {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        if let Some(web) = &mut self.web {
            let _ = web.start_kill();
            let _ = web.wait().await;
        }
    }
}

/// How long the simulator holds a reply it will not send in time.
pub(super) const HOLD_MS: u64 = 3_000;

pub(super) async fn spawn_sim(
    cobro: &PathBuf,
    port: u16,
    args: &super::ChaosArgs,
    web: &str,
    secret: &str,
) -> Result<Child> {
    let mut cmd = Command::new(cobro);
    cmd.args(["gateway-sim", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--seed", &args.seed.to_string(), "--per-order-draws"])
        .args(["--rate-limit-per-s", &args.gateway_rate_limit.to_string()]);
    if args.memoryless {
        cmd.arg("--no-idempotency");
    }
    if args.record_on_complete_ms > 0 {
        cmd.arg("--record-on-complete")
            .args(["--execution-ms", &args.record_on_complete_ms.to_string()]);
    }
    cmd.args([
        "--p-response-lost",
        "0.15",
        "--p-timeout-after-charge",
        "0.05",
    ])
    .args([
        "--p-5xx",
        "0.05",
        "--p-lookup-fail",
        "0.05",
        "--hold-ms",
        &HOLD_MS.to_string(),
    ])
    .args([
        "--p-decline",
        "0.05",
        "--decline-code",
        "insufficient_funds",
    ])
    .args(["--decline-code", "card_declined"])
    .args(["--webhook-url", &format!("{web}/webhooks/gateway")])
    .args(["--webhook-copies", "2"])
    .env("COBRO_SIM_WEBHOOK_SECRET", secret)
    .env("RUST_LOG", "warn")
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .kill_on_drop(true);
    cmd.spawn().context("starting the gateway simulator")
}
