//! `cobro demo` with a small fleet: the cobro columns show nobody charged
//! twice and no overcharge; the naive column shows the seed's overcharge.

#[macro_use]
mod common;

use cobro::demo::{Report, World};
use common::*;

on_both_dbs!(a_small_fleet_shows_the_naive_overcharge_and_none_for_cobro,);

fn assert_report(r: &Report, orders: usize) {
    assert_eq!(r.worlds.len(), 3);
    let naive = &r.worlds[0];
    assert_eq!(
        (naive.client.as_str(), naive.gateway.as_str()),
        ("naive", "memoryless")
    );
    assert!(
        naive.attempts_sent > orders as u64,
        "lost responses made the naive client retry"
    );
    assert!(naive.orders_charged_twice > 0, "{naive:?}");
    assert!(
        naive.overcharge_minor > 0 && naive.overcharge_pct > 0.0,
        "{naive:?}"
    );
    assert_eq!(
        naive.ledger_charges as u64, naive.attempts_sent,
        "memoryless: every request charges"
    );
    for w in &r.worlds[1..] {
        let cobro: &World = w;
        assert_eq!(cobro.client, "cobro");
        assert_eq!(cobro.orders_charged_twice, 0, "{cobro:?}");
        assert_eq!(cobro.overcharge_minor, 0, "{cobro:?}");
        assert_eq!(cobro.orders_not_charged, 0, "{cobro:?}");
        assert_eq!(cobro.ledger_charges, orders);
        assert_eq!(cobro.total_charged_minor, cobro.intent_total_minor);
        assert_eq!(
            cobro.intent_total_minor, naive.intent_total_minor,
            "same fleet in every world"
        );
    }
    assert_eq!(r.worlds[1].gateway, "idempotent");
    assert_eq!(r.worlds[2].gateway, "memoryless");
}

async fn a_small_fleet_shows_the_naive_overcharge_and_none_for_cobro(db: &TestDb) {
    let opts = demo_options(db, 60);
    let report = cobro::demo::run(&opts, None).await.expect("demo runs");
    assert_report(&report, 60);
    let table = cobro::demo::render(&report);
    assert!(
        table.contains("orders charged 2+ times") && table.contains("overcharge"),
        "{table}"
    );
}

#[test]
fn the_demo_command_runs_with_no_database_url_on_a_throwaway_sqlite() {
    let report = demo_json(&["--orders", "40", "--loss", "0.3"]);
    assert_eq!(report["database"], "sqlite (throwaway, one file per world)");
    let worlds = report["worlds"].as_array().unwrap();
    assert!(worlds[0]["overcharge_minor"].as_i64().unwrap() > 0);
    for w in &worlds[1..] {
        assert_eq!(w["orders_charged_twice"], 0);
        assert_eq!(w["overcharge_minor"], 0);
        assert_eq!(w["ledger_charges"], 40);
    }
}
