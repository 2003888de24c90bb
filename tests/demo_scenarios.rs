//! `cobro demo --scenario a|c|new-key`: every table of seed 02 on the real
//! engine (workers, store, simulator), on both backends, beside the seed's
//! figures. Scenario A: the naive double click charges 1,000 USD, cobro
//! 500; new key on every retry: 1,500 USD even against a gateway that
//! honours keys, cobro once; C: the fleet, with the seed's columns.

#[macro_use]
mod common;

use cobro::demo::{Report, Scenario};
use common::*;

on_both_dbs!(
    scenario_a_double_click_is_1000_usd_naive_and_500_with_cobro,
    a_new_key_on_every_retry_is_1500_usd_even_against_keys_and_cobro_charges_once,
    scenario_c_prints_the_seeds_fleet_beside_cobros,
);

/// cobro's two worlds: one charge of 500 USD, nothing for finance.
fn assert_cobro_once(r: &Report) {
    for w in &r.worlds[1..] {
        assert_eq!(w.client, "cobro");
        assert_eq!(w.ledger_charges, 1, "{w:?}");
        assert_eq!(w.total_charged_minor, 50_000, "{w:?}");
        assert_eq!((w.overcharge_minor, w.orders_charged_twice), (0, 0));
        assert_eq!(w.attempts_sent, 1, "looked up, never sent again: {w:?}");
        assert_eq!(w.en_revision, 0);
    }
    assert_eq!(r.worlds[1].gateway, "idempotent");
    assert_eq!(r.worlds[2].gateway, "memoryless");
}

async fn scenario_a_double_click_is_1000_usd_naive_and_500_with_cobro(db: &TestDb) {
    let r = cobro::demo::run_scenario(&demo_options(db, 1000), Scenario::A, None)
        .await
        .expect("scenario a runs");
    assert_eq!(r.orders, 1, "one buyer, whatever --orders says");
    let naive = &r.worlds[0];
    assert_eq!(
        (naive.client.as_str(), naive.gateway.as_str()),
        ("naive", "memoryless")
    );
    assert_eq!((naive.attempts_sent, naive.ledger_charges), (2, 2));
    assert_eq!(naive.total_charged_minor, 100_000, "1,000 USD");
    assert_eq!(naive.orders_charged_twice, 1);
    assert_cobro_once(&r);
    let seed = r.lesson.as_ref().expect("the seed's table");
    assert_eq!(seed.columns[0].total_charged_minor, 100_000);
    assert_eq!(seed.columns[1].total_charged_minor, 50_000);
    let table = cobro::demo::render(&r);
    assert!(table.starts_with("ESCENARIO A"), "{table}");
    for shown in [
        "$1,000.00",
        "$500.00",
        "seed: no key",
        "seed: idempotency_key",
    ] {
        assert!(table.contains(shown), "{shown} in\n{table}");
    }
}

async fn a_new_key_on_every_retry_is_1500_usd_even_against_keys_and_cobro_charges_once(
    db: &TestDb,
) {
    let r = cobro::demo::run_scenario(&demo_options(db, 1000), Scenario::NewKey, None)
        .await
        .expect("scenario new-key runs");
    let naive = &r.worlds[0];
    assert_eq!(
        (naive.client.as_str(), naive.gateway.as_str()),
        ("new key per retry", "idempotent"),
        "the gateway honours keys"
    );
    assert_eq!((naive.attempts_sent, naive.ledger_charges), (3, 3));
    assert_eq!(naive.total_charged_minor, 150_000, "1,500 USD");
    assert_cobro_once(&r);
    assert_eq!(
        r.lesson.as_ref().unwrap().columns[0].total_charged_minor,
        150_000
    );
    let table = cobro::demo::render(&r);
    assert!(
        table.contains("$1,500.00") && table.contains("seed: same key"),
        "{table}"
    );
}

async fn scenario_c_prints_the_seeds_fleet_beside_cobros(db: &TestDb) {
    let r = cobro::demo::run_scenario(&demo_options(db, 40), Scenario::C, None)
        .await
        .expect("scenario c runs");
    assert_eq!(r.worlds.len(), 3);
    assert!(r.worlds[0].overcharge_minor > 0, "{:?}", r.worlds[0]);
    for w in &r.worlds[1..] {
        assert_eq!(
            (w.overcharge_minor, w.orders_charged_twice),
            (0, 0),
            "{w:?}"
        );
        assert_eq!(w.ledger_charges, 40);
    }
    let seed = r.lesson.as_ref().unwrap();
    assert_eq!(seed.columns[0].attempts_sent, 1_184);
    assert_eq!(seed.columns[0].overcharge_minor, 4_813_900);
    let table = cobro::demo::render(&r);
    for shown in [
        "$305,118.00",
        "$48,139.00 (18.7%)",
        "$256,979.00",
        "seed: no key",
    ] {
        assert!(table.contains(shown), "{shown} in\n{table}");
    }
}

#[test]
fn every_scenario_prints_json() {
    let a = demo_json(&["--scenario", "a"]);
    assert_eq!(a["scenario"], "a");
    assert_eq!(a["worlds"][0]["total_charged_minor"], 100_000);
    assert_eq!(a["worlds"][1]["total_charged_minor"], 50_000);
    assert_eq!(a["lesson"]["columns"][0]["total_charged_minor"], 100_000);

    let k = demo_json(&["--scenario", "new-key"]);
    assert_eq!(k["scenario"], "new-key");
    assert_eq!(k["worlds"][0]["total_charged_minor"], 150_000);
    assert_eq!(k["worlds"][2]["total_charged_minor"], 50_000);

    let c = demo_json(&["--scenario", "c", "--orders", "20", "--loss", "0.3"]);
    assert_eq!(c["scenario"], "c");
    assert_eq!(c["lesson"]["columns"][0]["total_charged_minor"], 30_511_800);
    for w in c["worlds"].as_array().unwrap()[1..].iter() {
        assert_eq!(w["overcharge_minor"], 0);
        assert_eq!(w["ledger_charges"], 20);
    }
}
