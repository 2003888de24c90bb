//! Test harness: a fresh PostgreSQL database per test, the gateway simulator
//! as a real HTTP server on 127.0.0.1, workers in-process or as real
//! `cobro-worker` processes.
//!
//! PostgreSQL comes from `TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); each test creates its own
//! database `cobro_t_<uuid>` there and drops it when it passes. When
//! PostgreSQL is unreachable the tests fail loudly: they never skip.
//!
//! This file holds what every test uses first (whether PostgreSQL is there,
//! [`on_both_dbs!`], waiting for a condition, logs); each other idea
//! has its own file, re-exported here: `db.rs` (a database per test),
//! `sim.rs` (the simulator), `worker.rs` (a worker and the usual rig),
//! `web.rs` (the web process and the test keys), `attempts.rs` (attempts
//! moved by hand), `http.rs` and `cli.rs` (asking the web process and the
//! CLI), `recon.rs` (the window a reconciliation reads), `python.rs` (the
//! Python tools and skips).

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

pub fn admin_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

#[allow(unused_imports)]
pub use cobro::store::Backend;

pub mod cli;
pub mod http;
pub mod python;

mod attempts;
mod db;
mod recon;
mod sim;
mod web;
mod worker;

#[allow(unused_imports)]
pub use attempts::*;
#[allow(unused_imports)]
pub use cli::*;
#[allow(unused_imports)]
pub use db::*;
#[allow(unused_imports)]
pub use http::*;
#[allow(unused_imports)]
pub use recon::*;
#[allow(unused_imports)]
pub use sim::*;
#[allow(unused_imports)]
pub use web::*;
#[allow(unused_imports)]
pub use worker::*;

/// Whether a PostgreSQL test must be skipped: only when PostgreSQL is not
/// reachable AND `CI` is unset (a newcomer without PostgreSQL still runs
/// the SQLite suite). With `CI` set an unreachable PostgreSQL is a failure.
/// The skip notice bypasses the test harness' output capture on purpose.
pub fn skip_postgres() -> bool {
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
        &format!("PostgreSQL not reachable at {url}"),
        "a PostgreSQL 13+ reachable at TEST_DATABASE_URL (README: Quick start)",
    );
    true
}

/// Runs each named `async fn name(db: &TestDb)` once per backend, as
/// `postgres::name` and `sqlite::name`, on a fresh migrated database of its
/// own (logs set up as [`init_logs`] does): dropped when the test returns,
/// kept when it panics, to be looked at. A test that makes its databases
/// itself takes the backend instead: name it after `; by_backend:`.
///
/// `on_both_dbs!(a_scenario, another; by_backend: one_that_makes_its_own);`
#[macro_export]
macro_rules! on_both_dbs {
    ($($name:ident),* $(,)? $(; by_backend: $($by:ident),* $(,)?)?) => {
        mod postgres {
            on_both_dbs!(@tests Postgres, [$($name),*], [$($($by),*)?]);
        }
        mod sqlite {
            on_both_dbs!(@tests Sqlite, [$($name),*], [$($($by),*)?]);
        }
    };
    (@tests $backend:ident, [$($name:ident),*], [$($by:ident),*]) => {
        $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let backend = cobro::store::Backend::$backend;
            if backend == cobro::store::Backend::Postgres && super::common::skip_postgres() {
                return;
            }
            super::common::init_logs();
            let db = super::common::TestDb::new(backend).await;
            super::$name(&db).await;
            db.drop_db().await;
        })*
        $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $by() {
            let backend = cobro::store::Backend::$backend;
            if backend == cobro::store::Backend::Postgres && super::common::skip_postgres() {
                return;
            }
            super::$by(backend).await
        })*
    };
}

/// Runs each named `async fn name(backend: Backend)` once per backend, as
/// `postgres::name` and `sqlite::name`: one suite, a backend parameter
/// (what [`on_both_dbs!`] calls `by_backend`).
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        on_both_dbs!(; by_backend: $($name),*);
    };
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
