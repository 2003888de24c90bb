//! The soak's short version in the suite: `cobro chaos` as a real process
//! (which starts real worker, web and simulator processes) on PostgreSQL,
//! with SIGKILLed workers but no PostgreSQL restart (that would hit the
//! tests running beside it; `.ci/run` runs a soak with a restart on its
//! own, after the suite).

#[macro_use]
mod common;

use std::process::Command;

use common::*;

#[test]
fn a_short_soak_with_killed_workers_charges_nobody_twice_and_loses_nothing() {
    if skip_postgres() {
        return;
    }
    let seed = 1_000 + u64::from(std::process::id() % 1_000);
    let out = Command::new(env!("CARGO_BIN_EXE_cobro"))
        .args(["chaos", "--orders", "200", "--workers", "3", "--kills", "4"])
        .args([
            "--pg-restarts",
            "0",
            "--chaos-for",
            "10s",
            "--drain-timeout",
            "3m",
        ])
        .args(["--check-schedule", "200ms,400ms,800ms,1600ms,3200ms"])
        // The gateway misbehaves as a whole too: an outage of 503s, a
        // window of refused connections, 429s above 150 requests/s, and
        // charges recorded only when they complete.
        .args(["--outage-for", "4s", "--refuse-for", "2s"])
        .args([
            "--gateway-rate-limit",
            "150",
            "--record-on-complete-ms",
            "200",
        ])
        .args(["--seed", &seed.to_string(), "--json"])
        .env("TEST_DATABASE_URL", admin_url())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run cobro chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "soak failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let o: serde_json::Value = serde_json::from_str(&stdout).expect("JSON outcome");
    let r = &o["report"];
    assert_eq!(o["kills"], 4);
    assert_eq!(r["orders_enqueued"], 200);
    for zero in [
        "orders_charged_twice",
        "orders_lost",
        "attempts_stuck",
        "amount_mismatches",
        "log_inconsistent",
        "resent_after_approved",
    ] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
    assert!(r["approved_here"].as_u64().unwrap() > 150, "{r}");
    assert_eq!(
        r["approved_total_here"].as_i64().unwrap()
            + r["approved_total_in_review"].as_i64().unwrap(),
        r["approved_total_gateway"].as_i64().unwrap()
    );
    assert!(
        r["checks"].as_u64().unwrap() > 0,
        "the faults made checks happen: {r}"
    );
    let g = &o["gateway"];
    assert_eq!(g["refusal_windows"], 1, "{g}");
    assert!(g["recorded_on_complete"].as_u64().unwrap() > 150, "{g}");
}
