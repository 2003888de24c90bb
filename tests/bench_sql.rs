//! The benchmarks read the hot statements' SQL straight from `src/`
//! (`scale_sql` in scripts/bench/run), so what they measure is what the
//! product sends. This runs `scripts/bench/run --check-sql`, which reads
//! them and PREPAREs each on a freshly migrated PostgreSQL database: a
//! change that moves a statement out of the script's reach (a renamed
//! function, a query split by a macro) fails here, in `cargo test`, and not
//! at the end of a benchmark run.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn the_benchmarks_find_the_hot_statements_in_src_and_they_prepare() {
    if common::skip_postgres() {
        return;
    }
    // The script talks to PostgreSQL with its client; a PostgreSQL reached
    // in a container may have none on this machine (CI has it: never skipped).
    let psql = Command::new("psql").arg("--version").output();
    if !psql.is_ok_and(|o| o.status.success()) {
        assert!(std::env::var_os("CI").is_none(), "psql is missing in CI");
        common::python::skipped("no psql on PATH", "apt-get install -y postgresql-client");
        return;
    }
    // The binaries cargo built for this test run: `cobro migrate` sets up
    // the database the statements are prepared on.
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_cobro"))
        .parent()
        .expect("the binary's folder");
    let target = bin_dir.parent().expect("the target folder");
    let profile = if bin_dir.ends_with("release") {
        "release"
    } else {
        "dev"
    };
    let admin = common::admin_url();
    let (server, _) = admin
        .rsplit_once('/')
        .expect("TEST_DATABASE_URL ends in /<database>");
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench/run"))
        .arg("--check-sql")
        .env("BENCH_PG", server)
        .env("BENCH_PROFILE", profile)
        .env("CARGO_TARGET_DIR", target)
        .env("BENCH_OUT", target.join("bench-check-sql"))
        .output()
        .expect("run scripts/bench/run (needs bash and psql)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/bench/run --check-sql failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("prepare on a fresh database"),
        "no verdict from the script:\n{stdout}\n{stderr}"
    );
}
