//! A worker for a test: its settings scaled down ([`worker_args`]), one
//! running in this process until stopped, the usual database + simulator
//! (+ worker) rig and its finishes, and an engine to drive by hand.

use std::time::{Duration, Instant};

use cobro::backoff::CheckSchedule;
use cobro::runtime::WorkerArgs;
use cobro::sim::{Faults, SimHandle};
use cobro::store::{Backend, Store};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::{TestDb, init_logs, start_sim};

/// Worker settings scaled down for tests: the check schedule is the real
/// 2-4-8-16-32 shape times 0.1, timeouts are short, the lease is 3 s.
pub fn worker_args(db_url: &str, gateway_url: &str) -> WorkerArgs {
    WorkerArgs {
        database_url: db_url.into(),
        gateway_link: cobro::gateway::GatewayLink {
            url: Some(gateway_url.into()),
            ca_file: None,
            connect_timeout: Duration::from_millis(500),
            timeout: Duration::from_millis(1500),
        },
        gateway: cobro::gateway::GatewayChoice {
            kind: Some(cobro::gateway::GatewayKind::Sim),
            ..Default::default()
        },
        concurrency: 8,
        refund_concurrency: 2,
        batch_size: 10,
        group_commit: true,
        db_connections: None,
        lease_ttl: Duration::from_secs(3),
        check_schedule: "200ms,400ms,800ms,1600ms,3200ms".into(),
        check_jitter: 0.5,
        review_schedule: "5m,15m,1h,4h,12h,24h".into(),
        key_lifetime: Duration::from_secs(86_400),
        poll_interval: Duration::from_millis(500),
        missed_heartbeats: 20,
        sweep_interval: Duration::from_millis(500),
        sweep_grace: Duration::from_secs(2),
        defer_backoff: Duration::from_millis(300),
        gateway_idempotent: true,
        gateway_max_processing: Duration::from_secs(60),
        worker_name: Some(format!("test-{}", Uuid::new_v4().simple())),
        poison_after: cobro::engine::DEFAULT_POISON_AFTER,
        retry: cobro::retry::RetryArgs {
            retryable_declines: cobro::retry::DEFAULT_RETRYABLE.into(),
            retry_schedule: "1d,3d,7d".into(),
            retry_jitter: 0.2,
            max_attempts: 4,
            caps: Default::default(),
            card_updated_retry_delay: cobro::retry::DEFAULT_CARD_UPDATED_RETRY_DELAY,
        },
        // The breaker as in production, its timings scaled down.
        breaker: cobro::breaker::BreakerArgs {
            breaker_probe_every: Duration::from_millis(300),
            breaker_poll: Duration::from_millis(100),
            breaker_rewake_per_s: 50,
            ..Default::default()
        },
        metrics_addr: None,
        metrics_cache: Duration::ZERO,
        api_keys: Default::default(),
        retention: Default::default(),
        reconcile: cobro::recon::ReconcileArgs::off(),
        notify: Default::default(),
    }
}

/// A worker running in this process until [`InProcessWorker::stop`].
pub struct InProcessWorker {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

pub fn spawn_worker(args: WorkerArgs) -> InProcessWorker {
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(cobro::runtime::run(args, async move {
        let _ = rx.await;
    }));
    InProcessWorker { stop, task }
}

impl InProcessWorker {
    pub async fn stop(self) {
        let started = Instant::now();
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("worker stops within 20 s")
            .expect("worker task")
            .expect("worker exits cleanly");
        println!("worker stopped in {:?}", started.elapsed());
    }
}

/// The simulator (idempotent, with `faults`) and one in-process worker
/// with [`worker_args`] charging through it on `db`: where most scenarios
/// start.
pub async fn sim_and_worker(db: &TestDb, faults: Faults) -> (SimHandle, InProcessWorker) {
    let sim = start_sim(true, faults).await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    (sim, worker)
}

/// A database and the simulator (idempotent, with `faults`), for a test
/// that sets its worker up itself.
pub async fn db_and_sim(b: Backend, faults: Faults) -> (TestDb, SimHandle) {
    init_logs();
    let db = TestDb::new(b).await;
    let sim = start_sim(true, faults).await;
    (db, sim)
}

/// [`db_and_sim`] on PostgreSQL, for a PostgreSQL-only test; `None` when
/// the test is skipped (see [`super::skip_postgres`]).
pub async fn postgres_db_and_sim(faults: Faults) -> Option<(TestDb, SimHandle)> {
    if super::skip_postgres() {
        return None;
    }
    Some(db_and_sim(Backend::Postgres, faults).await)
}

/// Stops the worker, then the simulator (the database is dropped by
/// [`on_both_dbs!`] when the test returns, or by the test itself).
pub async fn finish(worker: InProcessWorker, sim: SimHandle) {
    worker.stop().await;
    sim.shutdown().await;
}

/// An engine named `name` on the simulator at `gateway_url`, with the
/// test timings (3 s lease, check schedule scaled to a tenth).
pub fn engine(store: &Store, gateway_url: &str, name: &str) -> cobro::engine::Engine {
    let gateway = super::sim_gateway(gateway_url);
    cobro::engine::Engine::new(
        store.clone(),
        std::sync::Arc::new(gateway),
        engine_config(name, CheckSchedule::default().scaled(0.1)),
    )
}

/// The settings of an engine named `name` in a test: this check
/// `schedule`, a 3 s lease, keys kept a day, 300 ms between deferred
/// sends, a gateway that keeps keys and processes within 60 s; the
/// default retry and review schedules.
pub fn engine_config(name: &str, schedule: CheckSchedule) -> cobro::engine::EngineConfig {
    cobro::engine::EngineConfig {
        worker_name: name.into(),
        lease_ttl: Duration::from_secs(3),
        schedule,
        key_lifetime: Duration::from_secs(86_400),
        retry: Default::default(),
        defer_backoff: Duration::from_millis(300),
        not_found: cobro::policy::NotFoundRule {
            gateway_idempotent: true,
            max_processing: Duration::from_secs(60),
        },
        review: Default::default(),
    }
}
