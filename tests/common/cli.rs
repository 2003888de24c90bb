//! `cobro` as a shell runs it, against one database; and the demo, in
//! this process or as `cobro demo` without a database.

use std::process::{Command, Output};

/// `cobro ARGS` with `DATABASE_URL` set and warnings-only logs.
pub fn cobro_cmd(db_url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cobro"));
    cmd.args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn");
    cmd
}

/// `cobro ARGS` with nothing in its environment but `PATH` and
/// `DATABASE_URL`: the test adds the settings it means.
pub fn bare_cobro(db_url: &str, args: &[&str]) -> Command {
    bare(env!("CARGO_BIN_EXE_cobro"), db_url, args)
}

/// `cobro-worker` with nothing in its environment but `PATH` and
/// `DATABASE_URL`.
pub fn bare_worker(db_url: &str) -> Command {
    bare(env!("CARGO_BIN_EXE_cobro-worker"), db_url, &[])
}

fn bare(bin: &str, db_url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", db_url);
    cmd
}

/// Runs `cobro ARGS` to the end.
pub fn cobro(db_url: &str, args: &[&str]) -> Output {
    cobro_cmd(db_url, args).output().expect("run cobro")
}

/// Runs `cobro ARGS` to the end; it must succeed. Its output as text.
pub fn cobro_ok(db_url: &str, args: &[&str]) -> String {
    let out = cobro(db_url, args);
    assert_success(&out);
    text(&out.stdout)
}

/// Panics, showing the process's stderr, unless it exited successfully.
pub fn assert_success(out: &Output) {
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Panics unless the process failed with `words` in its stderr.
pub fn assert_fails_saying(out: &Output, words: &str) {
    let err = text(&out.stderr);
    assert!(!out.status.success(), "it succeeded: {}", text(&out.stdout));
    assert!(err.contains(words), "{err}");
}

/// A process's output as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The demo's options for `orders` orders on `db`: 30 % of answers lost,
/// seed 42, two workers, the test check schedule, the default gateway.
pub fn demo_options(db: &super::TestDb, orders: usize) -> cobro::demo::DemoOptions {
    cobro::demo::DemoOptions {
        orders,
        loss: 0.3,
        seed: 42,
        workers: 2,
        database_url: Some(db.url.clone()),
        check_schedule: "200ms,400ms,800ms,1600ms,3200ms".into(),
        gateway: Default::default(),
    }
}

/// `cobro demo ARGS` on its throwaway SQLite (no `DATABASE_URL`), with two
/// workers and the test check schedule: its `--json` report.
pub fn demo_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_cobro"))
        .arg("demo")
        .args(args)
        .args([
            "--workers",
            "2",
            "--check-schedule",
            "200ms,400ms,800ms,1600ms,3200ms",
            "--json",
        ])
        .env_remove("DATABASE_URL")
        .output()
        .expect("run cobro demo");
    assert_success(&out);
    serde_json::from_slice(&out.stdout).expect("--json report")
}
