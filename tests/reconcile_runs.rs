//! Around a reconciliation run, on both backends: resolving a case is a
//! compare-and-set and a resolved case is never re-opened; a window is
//! claimed by one worker of many (a failed run is tried again, a vanished
//! holder is taken over and fenced out); the due window is read from the
//! database's clock; `cobro reconcile` from the command line.

#[macro_use]
mod common;

use std::process::{Command, Output};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use cobro::recon::{ReconcileArgs, ReconcileAt, Window, due_now, due_window, reconcile};
use cobro::sim::{Faults, LedgerEntry};
use cobro::store::{CaseError, CaseStatus};
use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    resolving_a_case_is_compare_and_set_and_it_is_never_reopened,
    a_window_is_claimed_once_retried_after_failure_and_taken_over_when_stale,
    two_workers_run_the_daily_window_once,
    reconcile_from_the_command_line,
    the_due_window_is_computed_from_the_database_clock,
);

/// A charge the gateway made for an order cobro never saw.
async fn stranger(sim_url: &str, order: &str) -> LedgerEntry {
    inject_charge(sim_url, order, 1_000).await
}

async fn resolving_a_case_is_compare_and_set_and_it_is_never_reopened(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let gw = sim_gateway(&sim.url());
    stranger(&sim.url(), "stranger-1").await;
    let first = reconcile(&db.store, &gw, &around_now()).await.unwrap();
    let id = first.cases[0].case_id;

    let bad = db.store.resolve_case(id, "ana", "  ").await.unwrap_err();
    assert!(
        matches!(&bad, CaseError::Invalid(e) if e.field == "resolution_note"),
        "{bad:?}"
    );
    let bad = db.store.resolve_case(id, "", "note").await.unwrap_err();
    assert!(matches!(&bad, CaseError::Invalid(e) if e.field == "resolved_by"));
    let missing = db.store.resolve_case(id + 1000, "ana", "x").await;
    assert!(matches!(missing, Err(CaseError::NotFound(n)) if n == id + 1000));

    let done = db
        .store
        .resolve_case(id, "ana", "refunded at the gateway's dashboard")
        .await
        .unwrap();
    assert_eq!(done.resolved_by.as_deref(), Some("ana"));
    assert!(done.resolved_at.is_some());
    let again = db
        .store
        .resolve_case(id, "ben", "me too")
        .await
        .unwrap_err();
    let CaseError::AlreadyResolved { id: got, by, .. } = &again else {
        panic!("expected AlreadyResolved, got {again:?}");
    };
    assert_eq!((*got, by.as_str()), (id, "ana"));
    assert!(
        again.to_string().contains("already resolved by ana"),
        "{again}"
    );
    let kept = db.store.recon_case(id).await.unwrap().unwrap();
    assert_eq!(
        kept.resolution_note.as_deref(),
        Some("refunded at the gateway's dashboard"),
        "the second resolution changed nothing"
    );

    assert!(db.store.open_cases().await.unwrap().is_empty());
    let rerun = reconcile(&db.store, &gw, &around_now()).await.unwrap();
    assert_eq!(
        (rerun.opened, rerun.already_open, rerun.already_resolved),
        (0, 0, 1)
    );
    assert_eq!(rerun.cases[0].status, CaseStatus::AlreadyResolved);
    assert!(db.store.open_cases().await.unwrap().is_empty());
    assert_eq!(db.store.all_cases().await.unwrap().len(), 1);
    sim.shutdown().await;
}

async fn a_window_is_claimed_once_retried_after_failure_and_taken_over_when_stale(db: &TestDb) {
    let s = &db.store;
    let day = Window::day(Utc::now().date_naive() - TimeDelta::days(1));
    let (retry, stale) = (Duration::from_secs(900), Duration::from_secs(3600));

    let first = s.claim_recon_run(&day, "w1", retry, stale).await.unwrap();
    let first = first.expect("the first claim wins");
    assert_eq!(first.tries, 1);
    let second = s.claim_recon_run(&day, "w2", retry, stale).await.unwrap();
    assert_eq!(second, None, "running elsewhere");
    let other_day = Window::day(day.from.date_naive() - TimeDelta::days(1));
    assert!(
        s.claim_recon_run(&other_day, "w2", retry, stale)
            .await
            .unwrap()
            .is_some()
    );

    // A failed run is tried again, but only after the retry delay.
    assert!(
        s.finish_recon_run(&first, false, &json!({"error": "503"}))
            .await
            .unwrap()
    );
    assert_eq!(
        s.claim_recon_run(&day, "w2", retry, stale).await.unwrap(),
        None
    );
    let retried = s
        .claim_recon_run(&day, "w2", Duration::ZERO, stale)
        .await
        .unwrap();
    let retried = retried.expect("failed long enough ago");
    assert_eq!((retried.id, retried.tries), (first.id, 2));

    // Its holder vanishes: once stale, another takes it over, and the old
    // holder can no longer record an end.
    let taken = s
        .claim_recon_run(&day, "w3", retry, Duration::ZERO)
        .await
        .unwrap();
    let taken = taken.expect("stale claim taken over");
    assert_eq!(taken.tries, 3);
    assert!(
        !s.finish_recon_run(&retried, true, &json!({}))
            .await
            .unwrap(),
        "fenced"
    );
    assert!(
        s.finish_recon_run(&taken, true, &json!({"opened": 0}))
            .await
            .unwrap()
    );
    // Done is done, whatever the delays.
    let zero = Duration::ZERO;
    assert_eq!(
        s.claim_recon_run(&day, "w4", zero, zero).await.unwrap(),
        None
    );

    let runs = s.recon_runs().await.unwrap();
    assert_eq!(runs.len(), 2);
    let run = runs.iter().find(|r| r.window_from == day.from).unwrap();
    assert_eq!(
        (run.claimed_by.as_str(), run.tries, run.outcome.as_deref()),
        ("w3", 3, Some("ok"))
    );
    assert_eq!(run.report, Some(json!({"opened": 0})));
}

async fn two_workers_run_the_daily_window_once(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let daily = |name: &str| {
        let mut args = worker_args(&db.url, &sim.url());
        args.worker_name = Some(name.into());
        args.reconcile = ReconcileArgs {
            reconcile_at: ReconcileAt::parse("00:00").unwrap(),
            reconcile_retry: Duration::from_secs(900),
            ..ReconcileArgs::off()
        };
        args
    };
    let started = Utc::now();
    let workers = [
        spawn_worker(daily("recon-a")),
        spawn_worker(daily("recon-b")),
    ];
    let run = eventually(Duration::from_secs(30), "a finished run", || async {
        let runs = db.store.recon_runs().await.unwrap();
        runs.into_iter().find(|r| r.finished_at.is_some())
    })
    .await;
    // Both loops have had their first tick by now; give a slow one time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for w in workers {
        w.stop().await;
    }
    let runs = db.store.recon_runs().await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    // The previous UTC day (either side of midnight, should the test straddle it).
    let midnight = chrono::NaiveTime::MIN;
    let due = [
        due_window(started, midnight),
        due_window(Utc::now(), midnight),
    ];
    let window = Window {
        from: run.window_from,
        to: run.window_to,
    };
    assert!(
        due.contains(&window),
        "{window} is not the previous UTC day"
    );
    assert_eq!(run.tries, 1, "claimed once");
    assert!(["recon-a", "recon-b"].contains(&run.claimed_by.as_str()));
    assert_eq!(run.outcome.as_deref(), Some("ok"));
    let report = run.report.unwrap();
    assert_eq!(
        (report["gateway_charges"].clone(), report["opened"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(
        ledger(&sim.url()).await.stats.list_requests,
        2,
        "charges and refunds, once"
    );
    sim.shutdown().await;
}

fn cobro(db_url: &str, sim_url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cobro"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("COBRO_GATEWAY", "sim")
        .env("GATEWAY_URL", sim_url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run cobro")
}

async fn reconcile_from_the_command_line(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let charge = stranger(&sim.url(), "cli-stranger").await;
    let today = Utc::now().date_naive();
    let (from, to) = (today.to_string(), (today + TimeDelta::days(1)).to_string());

    let out = cobro(
        &db.url,
        &sim.url(),
        &["reconcile", "--from", &from, "--to", &to, "--json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["gateway_charges"], 1);
    assert_eq!(report["opened"], 1);
    assert_eq!(report["cases"][0]["kind"], "unmatched_charge");
    assert_eq!(report["cases"][0]["gateway_ref"], charge.charge_id.as_str());

    let out = cobro(
        &db.url,
        &sim.url(),
        &["reconcile", "--from", &from, "--to", &to],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("0 opened (new), 1 already open"), "{shown}");
    assert!(shown.contains("unmatched_charge"), "{shown}");

    let backwards = cobro(
        &db.url,
        &sim.url(),
        &["reconcile", "--from", &to, "--to", &from],
    );
    assert_fails_saying(&backwards, "must be after");
    let garbage = cobro(
        &db.url,
        &sim.url(),
        &["reconcile", "--from", "yesterday", "--to", &to],
    );
    assert_fails_saying(&garbage, "RFC 3339");

    set_faults(&sim.url(), &outage()).await;
    let down = cobro(
        &db.url,
        &sim.url(),
        &["reconcile", "--from", &from, "--to", &to],
    );
    assert!(!down.status.success());
    let err = text(&down.stderr);
    assert!(
        err.contains("HTTP 503") && err.contains("nothing was opened"),
        "{err}"
    );
    assert_eq!(db.store.all_cases().await.unwrap().len(), 1);
    sim.shutdown().await;
}

async fn the_due_window_is_computed_from_the_database_clock(db: &TestDb) {
    let at = chrono::NaiveTime::from_hms_opt(2, 30, 0).unwrap();
    let before = db.store.now().await.unwrap();
    let window = due_now(&db.store, at).await.unwrap();
    let after = db.store.now().await.unwrap();
    assert!(
        window == due_window(before, at) || window == due_window(after, at),
        "{window} is the window due by the database's clock"
    );
    // Same machine, so the clocks agree closely (the test's only use of the
    // process clock).
    let drift = (before - Utc::now()).abs();
    assert!(
        drift < TimeDelta::seconds(5),
        "database clock off by {drift}"
    );
}

/// A PostgreSQL whose clock says 2031-03-04 01:00 UTC: `now()` is shadowed
/// by a function earlier in the connection's search_path. The worker's
/// due window follows it, whatever the process clock says.
#[tokio::test]
async fn postgres_the_due_window_follows_the_database_clock_not_the_process_clock() {
    if common::skip_postgres() {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    db.exec("CREATE SCHEMA fake_clock", "SELECT 'postgres only'", &[])
        .await
        .unwrap();
    db.exec(
        "CREATE FUNCTION fake_clock.now() RETURNS timestamptz LANGUAGE sql
             AS $$ SELECT timestamptz '2031-03-04 01:00:00+00' $$",
        "SELECT 'postgres only'",
        &[],
    )
    .await
    .unwrap();
    let skewed = cobro::store::Store::connect(
        &format!(
            "{}?options=-c%20search_path%3Dfake_clock%2Cpg_catalog%2Cpublic",
            db.url
        ),
        1,
    )
    .await
    .unwrap();
    let day = |d: u32| chrono::NaiveDate::from_ymd_opt(2031, 3, d).unwrap();
    assert_eq!(
        skewed.now().await.unwrap(),
        day(4).and_hms_opt(1, 0, 0).unwrap().and_utc()
    );
    let at = |h: u32, m: u32| chrono::NaiveTime::from_hms_opt(h, m, 0).unwrap();
    // 01:00 is before 02:30: the day before yesterday (by the database).
    assert_eq!(
        due_now(&skewed, at(2, 30)).await.unwrap(),
        Window::day(day(2))
    );
    // 01:00 is after 00:30: yesterday.
    assert_eq!(
        due_now(&skewed, at(0, 30)).await.unwrap(),
        Window::day(day(3))
    );
    assert_ne!(
        due_now(&skewed, at(0, 30)).await.unwrap(),
        due_window(Utc::now(), at(0, 30)),
        "the process clock would pick another window"
    );
    skewed.close().await;
    db.drop_db().await;
}
