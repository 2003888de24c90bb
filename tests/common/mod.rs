//! Test harness: a fresh PostgreSQL database per test, the gateway simulator
//! as a real HTTP server on 127.0.0.1, workers in-process or as real
//! `cobro-worker` processes.
//!
//! PostgreSQL comes from `TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); each test creates its own
//! database `cobro_t_<uuid>` there and drops it when it passes. When
//! PostgreSQL is unreachable the tests fail loudly: they never skip.

#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use cobro::runtime::WorkerArgs;
use cobro::sim::{Faults, Ledger, SimConfig, SimHandle};
use cobro::store::Store;
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub fn admin_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn with_database(url: &str, db: &str) -> String {
    let (base, _) = url
        .rsplit_once('/')
        .expect("TEST_DATABASE_URL ends in /<database>");
    format!("{base}/{db}")
}

pub use cobro::store::Backend;

pub mod cli;
pub mod http;
pub mod python;

#[allow(unused_imports)]
pub use cli::*;
#[allow(unused_imports)]
pub use http::*;

/// Whether a PostgreSQL test must be skipped: only when PostgreSQL is not
/// reachable AND `CI` is unset (a newcomer without PostgreSQL still runs
/// the SQLite suite). With `CI` set an unreachable PostgreSQL is a failure.
/// The skip notice bypasses the test harness' output capture on purpose.
pub fn skip_postgres(test: &str) -> bool {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let url = admin_url();
    let ready = *READY.get_or_init(|| {
        let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
        let host_port = rest
            .rsplit('@')
            .next()
            .unwrap_or(rest)
            .split('/')
            .next()
            .unwrap_or("");
        let target = if host_port.contains(':') {
            host_port.to_owned()
        } else {
            format!("{host_port}:5432")
        };
        use std::net::ToSocketAddrs;
        match target.to_socket_addrs().ok().and_then(|mut a| a.next()) {
            Some(addr) => {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
            }
            None => true, // not host:port (e.g. a socket path): let the test try
        }
    });
    if ready {
        return false;
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "CI is set and PostgreSQL is not reachable at {url}: the PostgreSQL suite must run on CI"
        );
    }
    python::skipped(
        &format!("postgres::{test}"),
        &format!("PostgreSQL not reachable at {url}"),
        "a PostgreSQL 13+ reachable at TEST_DATABASE_URL (README: Quick start)",
    );
    true
}

/// Runs each named `async fn name(backend: Backend)` once per backend, as
/// `postgres::name` and `sqlite::name`: one suite, a backend parameter.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                if super::common::skip_postgres(stringify!($name)) {
                    return;
                }
                super::$name(cobro::store::Backend::Postgres).await
            })*
        }
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(cobro::store::Backend::Sqlite).await })*
        }
    };
}

pub struct TestDb {
    pub backend: Backend,
    pub name: String,
    pub url: String,
    pub store: Store,
    dir: Option<std::path::PathBuf>,
}

impl TestDb {
    /// A new, migrated database of its own: a PostgreSQL database, or a
    /// SQLite file in a fresh temp directory.
    pub async fn new(backend: Backend) -> TestDb {
        let db = TestDb::unmigrated(backend).await;
        db.store.migrate().await.expect("migrate test database");
        db
    }

    /// [`TestDb::new`] without the migration: what a process started by the
    /// test must set up itself.
    pub async fn unmigrated(backend: Backend) -> TestDb {
        let name = format!("cobro_t_{}", Uuid::new_v4().simple());
        let (url, dir) = match backend {
            Backend::Postgres => {
                let admin = admin_url();
                let mut conn = PgConnection::connect(&admin).await.unwrap_or_else(|e| {
                    panic!(
                        "PostgreSQL is not reachable at {admin} ({e}). Start it (see README) or set TEST_DATABASE_URL."
                    )
                });
                // A database name cannot be a bound parameter; this one is ours, [a-z0-9_] only.
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                (with_database(&admin, &name), None)
            }
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(&name);
                std::fs::create_dir_all(&dir).expect("temp dir");
                (
                    format!("sqlite://{}", dir.join("cobro.db").display()),
                    Some(dir),
                )
            }
        };
        let store = Store::connect(&url, 10)
            .await
            .expect("connect test database");
        TestDb {
            backend,
            name,
            url,
            store,
            dir,
        }
    }

    /// A migrated database to copy fresh ones from ([`TestDb::copy_of`]),
    /// for a test that needs many: its own pool is closed (PostgreSQL copies
    /// only a database nobody is connected to). Drop it with
    /// [`TestDb::drop_db`] when done.
    pub async fn template(backend: Backend) -> TestDb {
        let db = TestDb::new(backend).await;
        db.store.close().await;
        db
    }

    /// A new database of its own with the schema of `template`, copied
    /// (`CREATE DATABASE … TEMPLATE`, or the SQLite file) instead of
    /// migrated: what [`TestDb::new`] gives, several times faster.
    pub async fn copy_of(template: &TestDb) -> TestDb {
        let name = format!("cobro_t_{}", Uuid::new_v4().simple());
        let (url, dir) = match template.backend {
            Backend::Postgres => {
                let admin = admin_url();
                let mut conn = PgConnection::connect(&admin)
                    .await
                    .unwrap_or_else(|e| panic!("PostgreSQL is not reachable at {admin} ({e})"));
                // Both names are ours, [a-z0-9_] only.
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "CREATE DATABASE {name} TEMPLATE {}",
                    template.name
                )))
                .execute(&mut conn)
                .await
                .expect("copy the template database");
                (with_database(&admin, &name), None)
            }
            Backend::Sqlite => {
                let from = template
                    .dir
                    .as_ref()
                    .expect("a SQLite test database has a dir");
                let dir = std::env::temp_dir().join(&name);
                std::fs::create_dir_all(&dir).expect("temp dir");
                for file in ["cobro.db", "cobro.db-wal"] {
                    if from.join(file).exists() {
                        std::fs::copy(from.join(file), dir.join(file))
                            .expect("copy the template database");
                    }
                }
                (
                    format!("sqlite://{}", dir.join("cobro.db").display()),
                    Some(dir),
                )
            }
        };
        let store = Store::connect(&url, 10)
            .await
            .expect("connect test database");
        TestDb {
            backend: template.backend,
            name,
            url,
            store,
            dir,
        }
    }

    /// Drops the database (call at the end of a passing test).
    pub async fn drop_db(self) {
        self.store.close().await;
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
            return;
        }
        if let Ok(mut conn) = PgConnection::connect(&admin_url()).await {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .execute(&mut conn)
            .await;
        }
    }

    /// Picks the statement written for this backend.
    pub fn sql(&self, pg: &'static str, lite: &'static str) -> &'static str {
        match self.backend {
            Backend::Postgres => pg,
            Backend::Sqlite => lite,
        }
    }

    /// Runs a statement (with optional text binds) and returns rows affected.
    pub async fn exec(
        &self,
        pg: &'static str,
        lite: &'static str,
        binds: &[&str],
    ) -> Result<u64, sqlx::Error> {
        match self.backend {
            Backend::Postgres => {
                let mut q = sqlx::query(pg);
                for b in binds {
                    q = q.bind(*b);
                }
                Ok(q.execute(self.store.pg_pool().unwrap())
                    .await?
                    .rows_affected())
            }
            Backend::Sqlite => {
                let mut q = sqlx::query(lite);
                for b in binds {
                    q = q.bind(*b);
                }
                Ok(q.execute(self.store.sqlite_pool().unwrap())
                    .await?
                    .rows_affected())
            }
        }
    }

    pub async fn scalar(&self, pg: &'static str, lite: &'static str) -> i64 {
        let sql = self.sql(pg, lite);
        match self.backend {
            Backend::Postgres => {
                sqlx::query_scalar(pg)
                    .fetch_one(self.store.pg_pool().unwrap())
                    .await
            }
            Backend::Sqlite => {
                sqlx::query_scalar(lite)
                    .fetch_one(self.store.sqlite_pool().unwrap())
                    .await
            }
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub async fn attempts(&self) -> i64 {
        self.store
            .count_by_state()
            .await
            .unwrap()
            .iter()
            .map(|(_, n)| n)
            .sum()
    }
}

pub async fn start_sim(idempotent: bool, faults: Faults) -> SimHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind sim");
    cobro::sim::spawn(
        listener,
        SimConfig {
            per_order_draws: false,
            webhooks: None,
            idempotent,
            seed: 7,
            faults,
        },
    )
    .await
    .expect("start gateway simulator")
}

pub async fn ledger(sim_url: &str) -> Ledger {
    reqwest::get(format!("{sim_url}/ledger"))
        .await
        .expect("GET /ledger")
        .json()
        .await
        .expect("ledger json")
}

pub async fn set_faults(sim_url: &str, faults: &Faults) {
    let resp = reqwest::Client::new()
        .put(format!("{sim_url}/control/faults"))
        .json(faults)
        .send()
        .await
        .expect("PUT /control/faults");
    assert!(
        resp.status().is_success(),
        "PUT /control/faults: {}",
        resp.status()
    );
}

/// Approved charges per order in the gateway's ledger.
pub fn approved_per_order(ledger: &Ledger) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for e in ledger.entries.iter().filter(|e| e.status == "approved") {
        *m.entry(e.order_id.clone()).or_insert(0) += 1;
    }
    m
}

/// Worker settings scaled down for tests: the check schedule is the real
/// 2-4-8-16-32 shape times 0.1, timeouts are short, the lease is 3 s.
pub fn worker_args(db_url: &str, gateway_url: &str) -> WorkerArgs {
    WorkerArgs {
        database_url: db_url.into(),
        gateway_url: Some(gateway_url.into()),
        gateway_ca_file: None,
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
        gateway_connect_timeout: Duration::from_millis(500),
        gateway_timeout: Duration::from_millis(1500),
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

/// A database, the simulator (idempotent, with `faults`) and one
/// in-process worker with [`worker_args`]: where most scenarios start.
pub async fn rig(b: Backend, faults: Faults) -> (TestDb, SimHandle, InProcessWorker) {
    let (db, sim) = db_and_sim(b, faults).await;
    let worker = spawn_worker(worker_args(&db.url, &sim.url()));
    (db, sim, worker)
}

/// A database and the simulator (idempotent, with `faults`), for a test
/// that sets its worker up itself.
pub async fn db_and_sim(b: Backend, faults: Faults) -> (TestDb, SimHandle) {
    init_logs();
    let db = TestDb::new(b).await;
    let sim = start_sim(true, faults).await;
    (db, sim)
}

/// Stops the worker and the simulator, then drops the database (a test
/// that panics before this keeps its database for a look).
pub async fn finish(worker: InProcessWorker, sim: SimHandle, db: TestDb) {
    worker.stop().await;
    sim.shutdown().await;
    db.drop_db().await;
}

/// Polls `cond` every 50 ms until it returns `Some`, or panics after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut cond: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Optional log output for debugging a test: `COBRO_TEST_LOG=debug cargo test`.
pub fn init_logs() {
    if let Ok(filter) = std::env::var("COBRO_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

/// A test webhook secret (Standard Webhooks format, 32 random bytes).
pub fn test_secret() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The test API keys: name, scopes. Each one's secret is [`secret`]`(name)`.
pub const TEST_KEYS: &[(&str, &str)] = &[
    ("app", "charges:write+refunds:write+attempts:read"),
    ("ana", "finance:read+finance:write"),
    ("luis", "finance:read+finance:write"),
    ("agent", "finance:read+attempts:read"),
    ("prom", "metrics:read"),
];

/// The secret of test key `name` (only its SHA-256 is configured).
pub fn secret(name: &str) -> String {
    format!("test-secret-of-{name}-0123456789")
}

/// [`TEST_KEYS`] as `COBRO_API_KEYS` holds them: hashes only.
pub fn test_keys_config() -> String {
    let entries: Vec<String> = TEST_KEYS
        .iter()
        .map(|(name, scopes)| {
            format!(
                "{name}:{scopes}:{}",
                cobro::http::auth::hash_hex(&secret(name))
            )
        })
        .collect();
    entries.join(",")
}

/// [`TEST_KEYS`] as the web process holds them.
pub fn test_keys() -> cobro::http::auth::ApiKeys {
    cobro::http::auth::ApiKeys::parse(&test_keys_config()).expect("test keys")
}

/// The web process (`cobro serve`'s routes, with [`test_keys`] and fresh
/// metrics) on 127.0.0.1:0, until dropped or stopped.
pub struct Web {
    pub url: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

pub async fn start_web(store: &Store, verifier: cobro::webhook::Verifier) -> Web {
    start_web_cfg(web_config(store, verifier)).await
}

/// The web settings of [`start_web`], to adjust before [`start_web_cfg`].
pub fn web_config(store: &Store, verifier: cobro::webhook::Verifier) -> cobro::web::WebConfig {
    let mut cfg = cobro::web::WebConfig::new(store.clone(), verifier);
    cfg.keys = test_keys();
    cfg.metrics_cache = Duration::ZERO;
    cfg
}

/// The web process with these settings, one listener, default limits.
pub async fn start_web_cfg(cfg: cobro::web::WebConfig) -> Web {
    serve_router(cfg.router(), cobro::http::serve::HttpLimits::default()).await
}

/// Any router on 127.0.0.1:0 through cobro's hardened server loop.
pub async fn serve_router(app: axum::Router, limits: cobro::http::serve::HttpLimits) -> Web {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind web");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        cobro::http::serve::serve(listener, app, &limits, async move {
            let _ = rx.await;
        })
        .await
        .expect("web server");
    });
    Web { url, stop, task }
}

impl Web {
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Moves `a` with `event` through the store's compare-and-set writer, as a
/// worker would: a Claim takes a 30 s lease; `detail` is the gateway's
/// charge id for Approved (default `ch_test`) or the decline code for
/// Declined. Panics if the write loses (no test races itself).
pub async fn step(
    store: &Store,
    a: &cobro::store::Attempt,
    event: cobro::state::Event,
    detail: Option<&str>,
) -> cobro::store::Attempt {
    step_change(store, a, event, detail, None).await
}

/// [`step`] with the gateway evidence the write records.
pub async fn step_with_evidence(
    store: &Store,
    a: &cobro::store::Attempt,
    event: cobro::state::Event,
    evidence: &cobro::gateway::Evidence,
) -> cobro::store::Attempt {
    step_change(store, a, event, None, Some(evidence)).await
}

async fn step_change(
    store: &Store,
    a: &cobro::store::Attempt,
    event: cobro::state::Event,
    detail: Option<&str>,
    evidence: Option<&cobro::gateway::Evidence>,
) -> cobro::store::Attempt {
    use cobro::state::Event;
    use cobro::store::{Applied, Change, Lease};
    let mut c = Change::new(Some(event), "test", "worker:test");
    c.evidence = evidence;
    match event {
        Event::Claim => {
            c.lease = Lease::Take {
                owner: "test",
                ttl: Duration::from_secs(30),
            }
        }
        Event::Approved => c.charge_id = Some(detail.unwrap_or("ch_test")),
        Event::Declined => c.decline_code = detail,
        _ => {}
    }
    match store.apply(a, &c).await.unwrap() {
        Applied::Moved(now) => *now,
        Applied::Lost => panic!("lost a race nobody runs"),
    }
}

/// The states attempt `id` went through, from its transition log.
pub async fn path(store: &Store, id: Uuid) -> Vec<String> {
    store
        .transitions(id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.to_state)
        .collect()
}

/// Waits (up to `limit`) for attempt `id` to reach `want`.
pub async fn settled(
    store: &Store,
    id: Uuid,
    want: cobro::state::State,
    limit: Duration,
) -> cobro::store::Attempt {
    eventually(limit, &format!("attempt {id} to reach {want}"), || async {
        let (a, _) = store.load(id).await.unwrap();
        (a.state == want).then_some(a)
    })
    .await
}

/// A charge for `order` (49.90 EUR) moved to `EN_REVISION` as a worker
/// would: claimed, an unknown outcome (HTTP 503), then a failed lookup
/// (recorded as a check) that exhausts the checks.
pub async fn in_review(store: &Store, order: &str) -> cobro::store::Attempt {
    use cobro::state::Event;
    use cobro::store::{Applied, Change, CheckRecord, Lease};
    let req = cobro::domain::ChargeRequest::parse(order, 4_990, "EUR", None, None).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    let mut a = store.load(id).await.unwrap().0;
    for event in [Event::Claim, Event::Unknown, Event::ChecksExhausted] {
        let mut c = Change::new(Some(event), "test", "worker:test");
        let ev = cobro::gateway::Evidence {
            call: "lookup".into(),
            http_status: Some(503),
            error_kind: "http_5xx".into(),
            lookup_result: Some("failed".into()),
            ..Default::default()
        };
        c.evidence = Some(&ev);
        match event {
            Event::Claim => {
                c.lease = Lease::Take {
                    owner: "test",
                    ttl: Duration::from_secs(30),
                }
            }
            Event::ChecksExhausted => {
                let now = chrono::Utc::now();
                c.add_check = Some(CheckRecord {
                    scheduled_at: now,
                    started_at: now,
                });
            }
            _ => {}
        }
        a = match store.apply(&a, &c).await.unwrap() {
            Applied::Moved(now) => *now,
            Applied::Lost => panic!("lost a race nobody runs"),
        };
    }
    a
}

/// An engine named `name` on the simulator at `gateway_url`, with the
/// test timings (3 s lease, check schedule scaled to a tenth).
pub fn engine(store: &Store, gateway_url: &str, name: &str) -> cobro::engine::Engine {
    use cobro::gateway::{HttpGateway, HttpGatewayConfig};
    let gateway = HttpGateway::new(HttpGatewayConfig {
        base_url: gateway_url.into(),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(1500),
        ca_file: None,
    })
    .unwrap();
    cobro::engine::Engine::new(
        store.clone(),
        std::sync::Arc::new(gateway),
        cobro::engine::EngineConfig {
            worker_name: name.into(),
            lease_ttl: Duration::from_secs(3),
            schedule: cobro::backoff::CheckSchedule::default().scaled(0.1),
            key_lifetime: Duration::from_secs(86_400),
            retry: Default::default(),
            defer_backoff: Duration::from_millis(300),
            not_found: cobro::policy::NotFoundRule {
                gateway_idempotent: true,
                max_processing: Duration::from_secs(60),
            },
            review: Default::default(),
        },
    )
}

/// A charge declined with `insufficient_funds` (3 000 USD minor units, on
/// `pm_x`), its business retry scheduled `retry_in` from now, as the worker
/// leaves it.
pub async fn declined_with_retry(
    store: &Store,
    order: &str,
    retry_in: Duration,
) -> cobro::store::Attempt {
    use cobro::state::Event;
    use cobro::store::{Applied, Change};
    let req = cobro::domain::ChargeRequest::parse(order, 3_000, "USD", None, Some("pm_x")).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    let a = store.load(id).await.unwrap().0;
    let a = step(store, &a, Event::Claim, None).await;
    let mut decline = Change::new(Some(Event::Declined), "gateway_declined", "worker:test");
    decline.decline_code = Some("insufficient_funds");
    decline.act_in = Some(retry_in);
    let Applied::Moved(a) = store.apply(&a, &decline).await.unwrap() else {
        panic!("not declined");
    };
    assert!(a.next_action_at.is_some(), "a retry is scheduled");
    *a
}

/// A charge of `amount` EUR for `order` sent to the simulator behind `gw`
/// with its own key and recorded APROBADO, as a worker would (without
/// one): what the reconciliation and settlement tests compare against.
pub async fn charged(
    store: &Store,
    gw: &cobro::gateway::HttpGateway,
    order: &str,
    amount: i64,
) -> cobro::store::Attempt {
    use cobro::domain::{Amount, ChargeRequest, Currency, IdempotencyKey, OrderId};
    use cobro::gateway::{ChargeCall, ChargeOutcome, Gateway};
    use cobro::state::Event;
    let req = ChargeRequest::parse(order, amount, "EUR", None, None).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    let a = store.load(id).await.unwrap().0;
    let a = step(store, &a, Event::Claim, None).await;
    let call = ChargeCall {
        key: IdempotencyKey::from_uuid(a.idempotency_key),
        attempt_id: None,
        order_id: OrderId::parse(order).unwrap(),
        amount: Amount::parse(amount).unwrap(),
        currency: Currency::parse("EUR").unwrap(),
        payment_method: None,
        customer: None,
        gateway_ref: None,
        merchant_initiated: false,
    };
    let ChargeOutcome::Approved { charge_id, .. } = gw.charge(&call).await else {
        panic!("the simulator declined a fault-free charge");
    };
    step(store, &a, Event::Approved, Some(&charge_id)).await
}

/// Moves every attempt charged to the payment method `card` two days into
/// the past (the card networks' 24-hour window is behind them).
pub async fn two_days_ago(db: &TestDb, card: &str) {
    db.exec(
        "UPDATE cobro.payment_attempts SET created_at = created_at - interval '2 days'
          WHERE payment_method = $1",
        "UPDATE payment_attempts SET created_at = created_at - 2 * 86400000
          WHERE payment_method = ?1",
        &[card],
    )
    .await
    .unwrap();
}
