//! A new user's first run, against the real binaries: a database never
//! migrated, one behind the binary, one that cannot be reached, a wrong
//! URL scheme, `RUST_BACKTRACE=1`, `cobro serve` without webhook secrets,
//! and `cobro status --watch` into a pipe. Each error must say what to do
//! in one line, with no backtrace.

#[macro_use]
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

on_both_dbs!(
    a_schema_behind_the_binary_is_not_ready,
    status_watch_prints_one_snapshot_per_interval_into_a_pipe,
    ; by_backend:
    a_database_never_migrated_says_run_cobro_migrate_everywhere,
);

fn cobro(db_url: &str, args: &[&str]) -> Output {
    cobro_cmd(db_url, args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run cobro")
}

/// A user error: exit 1, one line on stderr starting `error: `, no
/// backtrace although `RUST_BACKTRACE=1`; returns that line.
fn one_line_error(out: &Output) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains(" WARN ") && !l.contains(" INFO "))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    lines[0].to_owned()
}

/// `cobro serve` with no webhook secrets and the test keys on a free port,
/// once it answers.
async fn serve(db_url: &str) -> (Child, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let child = bare_cobro(db_url, &["serve", "--listen", &addr])
        .env("COBRO_API_KEYS", test_keys_config())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cobro serve");
    let url = format!("http://{addr}");
    let health = format!("{url}/health");
    eventually(Duration::from_secs(30), "cobro serve answers", || {
        let health = health.clone();
        async move { reqwest::get(&health).await.ok() }
    })
    .await;
    (child, url)
}

async fn get(url: &str) -> (u16, serde_json::Value) {
    let resp = reqwest::get(url).await.expect("GET");
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or_default())
}

async fn a_database_never_migrated_says_run_cobro_migrate_everywhere(b: Backend) {
    let db = TestDb::unmigrated(b).await;
    // The CLI: status and enqueue meet the missing tables.
    for args in [
        &["status"][..],
        &["status", "--order", "o-1"],
        &[
            "enqueue",
            "--order",
            "o-1",
            "--amount-minor",
            "700",
            "--currency",
            "USD",
        ],
    ] {
        let line = one_line_error(&cobro(&db.url, args));
        assert!(line.contains("run `cobro migrate`"), "{args:?}: {line}");
        assert!(!line.contains("at line"), "{args:?}: {line}");
    }
    // The worker refuses to start, saying the same.
    let worker = bare_worker(&db.url)
        .env("COBRO_GATEWAY", "sim")
        .env("GATEWAY_URL", "http://127.0.0.1:9")
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run cobro-worker");
    let line = one_line_error(&worker);
    assert!(
        line.contains("never migrated") && line.contains("`cobro migrate`"),
        "{line}"
    );

    // The web process starts (without webhook secrets) and says so on
    // /health and /ready; the webhook route is off.
    let (mut web, url) = serve(&db.url).await;
    for route in ["/health", "/ready"] {
        let (code, body) = get(&format!("{url}{route}")).await;
        assert_eq!(code, 503, "{route}: {body}");
        assert_eq!(body["ok"], false, "{route}: {body}");
        let reason = body["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("run `cobro migrate`"), "{route}: {body}");
    }
    // The API's own 503 names the fix too, and writes nothing.
    let charge = reqwest::Client::new()
        .post(format!("{url}/charges"))
        .bearer_auth(secret("app"))
        .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
        .json(&serde_json::json!({"order_id": "o-1", "amount_minor": 700, "currency": "USD"}))
        .send()
        .await
        .unwrap();
    assert_eq!(charge.status().as_u16(), 503);
    let body: serde_json::Value = charge.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("run `cobro migrate`"),
        "POST /charges on a never-migrated database: {body}"
    );
    let hook = reqwest::Client::new()
        .post(format!("{url}/webhooks/gateway"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(hook.status().as_u16(), 404, "no secrets: no webhook route");

    // `cobro migrate` says what it applied, then that there is nothing to do.
    let first = cobro(&db.url, &["migrate"]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let stdout = text(&first.stdout);
    let applied = stdout.lines().filter(|l| l.starts_with("applied ")).count();
    assert!(applied > 10, "{stdout}");
    assert!(
        stdout.contains("applied 20261130000001 attempts")
            || stdout.contains("applied 20261130000001 "),
        "each migration by version and description: {stdout}"
    );
    assert_eq!(
        stdout.lines().last(),
        Some(format!("database schema is up to date ({applied} migration(s) applied)").as_str())
    );
    let again = cobro(&db.url, &["migrate"]);
    assert_eq!(
        text(&again.stdout).trim(),
        "database schema already up to date"
    );

    // The health routes share one look at the database a second.
    tokio::time::sleep(cobro::web::HEALTH_FRESH).await;
    for route in ["/health", "/ready"] {
        let (code, body) = get(&format!("{url}{route}")).await;
        assert_eq!(code, 200, "{route}: {body}");
        assert_eq!(body["ok"], true, "{route}: {body}");
    }
    let (_, ready) = get(&format!("{url}/ready")).await;
    assert_eq!(ready, serde_json::json!({"ok": true}), "nothing beyond ok");
    let _ = web.kill();
    let mut warned = String::new();
    let _ = std::io::Read::read_to_string(web.stderr.as_mut().unwrap(), &mut warned);
    let _ = web.wait();
    assert_eq!(
        warned
            .matches("no webhook secrets (COBRO_WEBHOOK_SECRETS)")
            .count(),
        1,
        "logged once at start-up: {warned}"
    );
    db.drop_db().await;
}

async fn a_schema_behind_the_binary_is_not_ready(db: &TestDb) {
    assert!(db.store.readiness().await.unwrap().is_ready());
    let last: i64 = db
        .scalar(
            "SELECT max(version) FROM cobro._migrations",
            "SELECT max(version) FROM _cobro_migrations",
        )
        .await;
    db.exec(
        "DELETE FROM cobro._migrations WHERE version = (SELECT max(version) FROM cobro._migrations)",
        "DELETE FROM _cobro_migrations WHERE version = (SELECT max(version) FROM _cobro_migrations)",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(
        db.store.readiness().await.unwrap(),
        cobro::store::Readiness::Behind {
            pending: vec![last]
        }
    );
    let web = web_on(&db.store).await;
    let (code, body) = get(&format!("{}/ready", web.url)).await;
    assert_eq!(code, 503, "{body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("older than this cobro") && reason.contains("run `cobro migrate`"),
        "{body}"
    );
    // Liveness: one migration behind (a rolling deploy) is not a dead process.
    let (code, _) = get(&format!("{}/health", web.url)).await;
    assert_eq!(code, 200);
    web.stop().await;
}

async fn status_watch_prints_one_snapshot_per_interval_into_a_pipe(db: &TestDb) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cobro"))
        .args(["status", "--watch", "--interval", "300ms"])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cobro status --watch");
    let started = Instant::now();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut snapshots = vec![String::new()];
    while snapshots.len() < 3 && started.elapsed() < Duration::from_secs(30) {
        let Some(Ok(line)) = lines.next() else { break };
        match line.is_empty() {
            true => snapshots.push(String::new()),
            false => {
                let last = snapshots.last_mut().unwrap();
                last.push_str(&line);
                last.push('\n');
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(snapshots.len() >= 3, "two whole snapshots: {snapshots:?}");
    assert!(
        !snapshots[0].contains('\x1b'),
        "no terminal codes into a pipe"
    );
    assert!(snapshots[0].contains("attempts by state"), "{snapshots:?}");
    assert_eq!(snapshots[0], snapshots[1], "the same system, twice");
    // Not a terminal and not --watch: one snapshot, and --interval alone is refused.
    let once = cobro(&db.url, &["status"]);
    assert!(once.status.success());
    assert!(!text(&once.stdout).contains("\n\n"));
    let lone = cobro(&db.url, &["status", "--interval", "1s"]);
    assert_eq!(lone.status.code(), Some(2), "{}", text(&lone.stderr));
    let busy = one_line_error(&cobro(
        &db.url,
        &["status", "--watch", "--interval", "10ms"],
    ));
    assert!(busy.contains("--interval must be at least 100ms"), "{busy}");
}

/// PostgreSQL that cannot be used is named at once: host, port, cause, no
/// password, no pool timeout, no backtrace.
#[tokio::test]
async fn an_unusable_postgres_is_reported_at_once_with_where_and_why() {
    let port = free_port();
    let started = Instant::now();
    let refused = cobro(
        &format!("postgres://postgres:hunter2@127.0.0.1:{port}/test"),
        &["status"],
    );
    let line = one_line_error(&refused);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "at once, not after a pool timeout"
    );
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    assert!(line.contains("connection refused"), "{line}");
    assert!(
        !line.contains("hunter2") && !line.contains("timed out"),
        "{line}"
    );

    let scheme = one_line_error(&cobro(
        "postgress://root:hunter2@127.0.0.1/test",
        &["status"],
    ));
    assert_eq!(
        scheme,
        "error: DATABASE_URL must start with postgres://, postgresql:// or sqlite://; got postgress://"
    );

    let unknown = one_line_error(&cobro(
        "postgres://root@no-such-host.invalid/test",
        &["status"],
    ));
    assert!(
        unknown.contains("unknown host \"no-such-host.invalid\""),
        "{unknown}"
    );

    if common::skip_postgres() {
        return;
    }
    let admin = admin_url();
    let (base, _) = admin.rsplit_once('/').unwrap();
    let no_db = one_line_error(&cobro(&format!("{base}/cobro_no_such_db"), &["status"]));
    assert!(
        no_db.contains("database \"cobro_no_such_db\" does not exist"),
        "{no_db}"
    );
    let host = base.rsplit('@').next().unwrap();
    let no_role = one_line_error(&cobro(
        &format!("postgres://cobro_no_such_role:pw@{host}/postgres"),
        &["status"],
    ));
    assert!(
        no_role.contains("authentication failed for user \"cobro_no_such_role\""),
        "{no_role}"
    );
    assert!(!no_role.contains(":pw"), "{no_role}");
}
