//! The real `Procfile` under honcho (`pip install honcho`), on both backends:
//! `honcho start` on a fresh, unmigrated database, the cargo-built binaries
//! on `PATH`, the test's simulator as the gateway. The web process answers
//! `/health` on the port honcho assigns, a charge enqueued with
//! `cobro enqueue` reaches `APROBADO` through the worker, and on SIGTERM both
//! processes exit 0. Also: every process migrates as it starts, so several
//! `cobro migrate` runs at once on one database all succeed.
//!
//! Without honcho the honcho test says SKIPPED, unless `CI` is set: then it
//! fails (`.ci/run` installs it).

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use cobro::state::State;
use common::python;
use common::*;
use uuid::Uuid;

on_both_backends!(
    the_procfile_runs_under_honcho_charges_and_stops_cleanly_on_sigterm,
    several_processes_migrating_one_database_at_once_all_succeed,
);

fn procfile() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("Procfile")
}

/// The Procfile's process types, in order (honcho's own line format).
fn process_types() -> Vec<String> {
    std::fs::read_to_string(procfile())
        .expect("read the Procfile")
        .lines()
        .filter_map(|l| {
            let (name, cmd) = l.split_once(':')?;
            let ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            (ok && !cmd.trim().is_empty()).then(|| name.to_owned())
        })
        .collect()
}

/// `PATH` with the cargo-built `cobro` and `cobro-worker` first.
fn path_with_binaries() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_cobro"))
        .parent()
        .expect("the binaries' directory");
    assert!(bin.join("cobro-worker").exists(), "{}", bin.display());
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn honcho_available() -> bool {
    python::python_with("honcho").is_some()
}

/// The interpreter that imports `honcho` (after [`honcho_available`]).
fn py() -> std::path::PathBuf {
    python::python_with("honcho").expect("honcho_available() first")
}

/// A base port for honcho: it gives the n-th process type `base + 100 * n`;
/// every one of those is free on 0.0.0.0 right now.
fn free_base_port(types: usize) -> u16 {
    for _ in 0..50 {
        let base = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ports: Vec<u32> = (0..types as u32).map(|i| base as u32 + 100 * i).collect();
        if ports.iter().all(|&p| {
            p <= u16::MAX as u32 && std::net::TcpListener::bind(("0.0.0.0", p as u16)).is_ok()
        }) {
            return base;
        }
    }
    panic!("no free base port for honcho");
}

/// honcho itself; on drop (a failed test) it is stopped, and with it the
/// processes it started.
struct Honcho {
    child: Child,
    out: PathBuf,
}

impl Honcho {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -TERM honcho");
    }

    async fn wait(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "honcho did not exit within {limit:?}:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Honcho {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.sigterm();
            let start = Instant::now();
            while self.child.try_wait().ok().flatten().is_none()
                && start.elapsed() < Duration::from_secs(15)
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.out);
    }
}

/// `honcho start` with the repository's Procfile and only the environment
/// a platform would give: the database, the gateway, the webhook secret and
/// a base `PORT`. No `.env` file is read.
fn honcho_start(db_url: &str, gateway_url: &str, base_port: u16) -> Honcho {
    let out = std::env::temp_dir().join(format!("cobro-honcho-{}.log", Uuid::new_v4().simple()));
    let no_env_file = out.with_extension("env-none");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let child = Command::new(py())
        .args(["-m", "honcho", "start", "--no-colour", "-f"])
        .arg(procfile())
        .arg("-d")
        .arg(root)
        .arg("-e")
        .arg(&no_env_file)
        .current_dir(root)
        .env("PATH", path_with_binaries())
        .env("PORT", base_port.to_string())
        .env("DATABASE_URL", db_url)
        .env("COBRO_GATEWAY", "sim")
        .env("GATEWAY_URL", gateway_url)
        .env("COBRO_WEBHOOK_SECRETS", test_secret())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env("RUST_BACKTRACE", "0")
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("COBRO_LISTEN")
        .env_remove("COBRO_METRICS_ADDR")
        .env_remove("COBRO_WORKER_NAME")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("honcho log"))
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn python3 -m honcho");
    Honcho { child, out }
}

async fn the_procfile_runs_under_honcho_charges_and_stops_cleanly_on_sigterm(b: Backend) {
    if !honcho_available() {
        return;
    }
    let types = process_types();
    assert_eq!(
        types,
        ["web", "worker"],
        "honcho runs every line as a long-lived process and stops them all when one exits"
    );
    let db = TestDb::unmigrated(b).await;
    let sim = start_sim(true, cobro::sim::Faults::default()).await;
    let base = free_base_port(types.len());
    let web_port = base + 100 * types.iter().position(|t| t == "web").unwrap() as u16;
    let mut honcho = honcho_start(&db.url, &sim.url(), base);

    // The web process, on the port honcho gave it, with a migrated database.
    let health = format!("http://127.0.0.1:{web_port}/health");
    let body: serde_json::Value = eventually(
        Duration::from_secs(60),
        "the web process's /health",
        || async {
            let r = reqwest::get(&health).await.ok()?;
            if r.status() != 200 {
                return None;
            }
            r.json().await.ok()
        },
    )
    .await;
    assert_eq!(body["ok"], true, "{body}");
    assert_eq!(
        body["database"],
        serde_json::to_value(db.store.backend()).unwrap(),
        "{body}"
    );
    assert!(
        honcho
            .output()
            .contains(&format!("cobro web listening addr=0.0.0.0:{web_port}")),
        "{}",
        honcho.output()
    );

    // A charge through the CLI, charged by the Procfile's worker.
    let out = cobro_ok(
        &db.url,
        &[
            "enqueue",
            "--order",
            "procfile-1",
            "--amount-minor",
            "1999",
            "--currency",
            "USD",
            "--json",
        ],
    );
    let enqueued: serde_json::Value = serde_json::from_str(&out).unwrap();
    let id: Uuid = enqueued["attempt_id"].as_str().unwrap().parse().unwrap();
    let a = eventually(
        Duration::from_secs(30),
        "the worker to charge it",
        || async {
            let (a, _) = db.store.load(id).await.ok()?;
            (a.state == State::Aprobado).then_some(a)
        },
    )
    .await;
    assert_eq!(a.send_count, 1);
    assert_eq!(ledger(&sim.url()).await.entries.len(), 1);
    assert!(
        honcho.child.try_wait().unwrap().is_none() && !honcho.output().contains(" stopped (rc="),
        "no process stopped by itself:\n{}",
        honcho.output()
    );

    // SIGTERM: honcho passes it on, and each process exits 0.
    honcho.sigterm();
    let status = honcho.wait(Duration::from_secs(45)).await;
    let output = honcho.output();
    for t in &types {
        assert!(
            output.contains(&format!("{t}.1 stopped (rc=0)")),
            "{t} did not exit 0:\n{output}"
        );
    }
    // honcho's own status after a SIGTERM is always 143 (128 + 15, set in its
    // signal handler whatever its processes did); their exits are above.
    assert!(output.contains("SIGTERM received"), "{output}");
    assert_eq!(status.code(), Some(143), "honcho: {status}\n{output}");
    drop(honcho);
    sim.shutdown().await;
    db.drop_db().await;
}

async fn several_processes_migrating_one_database_at_once_all_succeed(b: Backend) {
    let db = TestDb::unmigrated(b).await;
    let runs: Vec<Child> = (0..4)
        .map(|_| {
            cobro_cmd(&db.url, &["migrate"])
                .env("RUST_BACKTRACE", "0")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn cobro migrate")
        })
        .collect();
    let mut applying = 0;
    for run in runs {
        let out = run.wait_with_output().unwrap();
        assert_success(&out);
        // Each says what it applied itself: one run applies everything,
        // the others (after their turn) find it up to date.
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let last = stdout.lines().last().unwrap_or_default().to_owned();
        if last == "database schema already up to date" {
            assert_eq!(stdout.lines().count(), 1, "{stdout}");
        } else {
            assert!(
                last.starts_with("database schema is up to date ("),
                "{stdout}"
            );
            assert!(stdout.starts_with("applied "), "{stdout}");
            applying += 1;
        }
    }
    assert_eq!(applying, 1, "exactly one run applied the migrations");
    let req = cobro::domain::ChargeRequest::parse("migrated-1", 100, "USD", None, None).unwrap();
    db.store.enqueue(&req).await.expect("the schema is there");
    assert_eq!(db.attempts().await, 1);
    db.drop_db().await;
}
