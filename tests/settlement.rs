//! Settlement reconciliation (seed 03: "pagos marcados aprobados en tu
//! sistema sin liquidación"), on both backends, against the simulator as a
//! real HTTP server: a charge never settled opens exactly one `unsettled`
//! case once the delay has passed (none before), a fee other than the
//! contract's one `fee_mismatch`, a payout that does not add up one
//! `payout_mismatch`; a re-run opens nothing new; gross, fee and net of the
//! settled charges are stored and reach finance's summary and CSV; the
//! balance transactions are read page by page (more than one page here);
//! a throttled listing (429) defers the run and writes nothing.

#[macro_use]
mod common;

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use cobro::domain::ChargeRequest;
use cobro::domain::settlement::{FeeRule, SettledCharge};
use cobro::gateway::{HttpGateway, HttpGatewayConfig};
use cobro::recon::CaseKind;
use cobro::recon::settle::{SettleReport, SettlementArgs, settle};
use cobro::sim::{Faults, Injection, LedgerEntry};
use cobro::store::{CaseStatus, Store};
use common::*;

on_both_dbs!(
    a_never_settled_charge_opens_one_unsettled_case_once_the_delay_has_passed,
    a_fee_other_than_the_contracts_opens_one_fee_mismatch,
    a_payout_that_does_not_add_up_opens_one_payout_mismatch,
    a_throttled_listing_defers_the_run_and_writes_nothing,
    the_database_keeps_a_settlement_to_an_approved_charge_written_once,
    the_worker_checks_the_day_now_delay_old_once_under_its_own_claim,
);

fn gateway(sim_url: &str) -> HttpGateway {
    HttpGateway::new(HttpGatewayConfig {
        base_url: sim_url.into(),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(3000),
        ca_file: None,
    })
    .expect("gateway client")
}

/// The simulator's fee is 2.9 % + 30; so is the contract's.
fn faults() -> Faults {
    Faults {
        settle_fee_bps: 290,
        settle_fee_fixed_minor: 30,
        ..Faults::default()
    }
}

fn args(delay: Duration) -> SettlementArgs {
    SettlementArgs {
        settlement_delay: delay,
        settlement_fee: FeeRule::parse("2.9%+30").unwrap(),
    }
}

async fn run(store: &Store, gw: &HttpGateway, delay: Duration) -> SettleReport {
    let w = around_now();
    settle(store, gw, &w, w.to, &args(delay))
        .await
        .expect("settlement check runs")
}

fn opened(r: &SettleReport) -> Vec<CaseKind> {
    r.cases
        .iter()
        .filter(|c| c.status == CaseStatus::New)
        .map(|c| c.kind)
        .collect()
}

async fn post(sim_url: &str, path: &str, body: Option<&Injection>) -> serde_json::Value {
    let req = reqwest::Client::new().post(format!("{sim_url}{path}"));
    let req = match body {
        Some(b) => req.json(b),
        None => req,
    };
    req.send()
        .await
        .expect("POST to the simulator")
        .error_for_status()
        .expect("accepted")
        .json()
        .await
        .expect("JSON")
}

async fn a_never_settled_charge_opens_one_unsettled_case_once_the_delay_has_passed(db: &TestDb) {
    // Every third approved charge of the gateway is never settled.
    let sim = start_sim(
        true,
        Faults {
            unsettled_every: 3,
            ..faults()
        },
    )
    .await;
    let gw = gateway(&sim.url());
    // 150 charges made outside cobro: the lines span two pages of 100.
    for i in 0..149 {
        let inj = Injection {
            kind: "charge".into(),
            idempotency_key: None,
            order_id: format!("elsewhere-{i}"),
            amount_minor: 100,
            currency: "EUR".into(),
            decline_code: None,
            charge_id: None,
            at: None,
        };
        let _: LedgerEntry =
            serde_json::from_value(post(&sim.url(), "/control/inject", Some(&inj)).await).unwrap();
    }
    // Ours are the 150th (never settled), 151st and 152nd charges.
    let lost = charged(&db.store, &gw, "settle-lost", 1_000).await;
    let a = charged(&db.store, &gw, "settle-a", 2_000).await;
    let c = charged(&db.store, &gw, "settle-c", 1_017).await;

    // Before the delay: nothing opens; two are settled, one is waiting.
    let early = run(&db.store, &gw, Duration::from_secs(3600)).await;
    assert_eq!(early.lines, 100 + 2, "{early:#?}"); // 152 charges, every third unsettled
    assert_eq!(
        (early.settled, early.waiting, early.opened),
        (2, 1, 0),
        "{early:#?}"
    );
    assert_eq!(early.recorded, 2);

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = run(&db.store, &gw, Duration::from_secs(1)).await;
    assert_eq!(opened(&r), [CaseKind::Unsettled], "{r:#?}");
    assert_eq!(r.recorded, 0, "already recorded by the first run");
    let case = &db.store.open_cases().await.unwrap()[0];
    assert_eq!(case.dedupe_key, format!("unsettled:{}", lost.id));
    assert_eq!(case.attempt_id, Some(lost.id));
    assert!(
        case.details["reason"]
            .as_str()
            .unwrap()
            .contains("10.00 EUR"),
        "{case:#?}"
    );

    let again = run(&db.store, &gw, Duration::from_secs(1)).await;
    assert_eq!((again.opened, again.already_open), (0, 1), "{again:#?}");
    assert_eq!(db.store.all_cases().await.unwrap().len(), 1);

    // Gross, fee (2.9 % + 30, half up) and net, for finance.
    let w = around_now();
    let rows = db.store.settlements(w.from, w.to).await.unwrap();
    let mut got: Vec<_> = rows
        .iter()
        .map(|s| (s.attempt_id, s.gross_minor, s.fee_minor, s.net_minor))
        .collect();
    got.sort_by_key(|g| -g.1);
    assert_eq!(got, [(a.id, 2_000, 88, 1_912), (c.id, 1_017, 59, 958)]);
    let summary = cobro::finance::summarize(&db.store, Duration::from_secs(60), Utc::now())
        .await
        .unwrap();
    assert_eq!(summary.settled.len(), 1);
    let eur = &summary.settled[0];
    assert_eq!(
        (
            eur.count,
            eur.gross.as_str(),
            eur.fee.as_str(),
            eur.net.as_str()
        ),
        (2, "30.17", "1.47", "28.70")
    );
    assert!(
        summary
            .to_text()
            .contains("30.17 EUR - 1.47 EUR = 28.70 EUR")
    );
    let csv = cobro::finance::settlements_csv(&rows);
    let lines: Vec<&str> = csv.split("\r\n").collect();
    assert!(lines[0].starts_with("attempt_id,order_id,gateway_charge_id,balance_txn"));
    let row = lines
        .iter()
        .find(|l| l.contains(",settle-a,"))
        .expect("settle-a's row");
    assert!(row.contains(",EUR,20.00,0.88,19.12,2000,88,1912,"), "{csv}");
    sim.shutdown().await;
}

async fn a_fee_other_than_the_contracts_opens_one_fee_mismatch(db: &TestDb) {
    let sim = start_sim(
        true,
        Faults {
            fee_off_every: 2,
            fee_off_minor: 7,
            ..faults()
        },
    )
    .await;
    let gw = gateway(&sim.url());
    charged(&db.store, &gw, "fee-ok", 1_000).await;
    let off = charged(&db.store, &gw, "fee-off", 1_000).await;
    let r = run(&db.store, &gw, Duration::from_secs(3600)).await;
    assert_eq!(opened(&r), [CaseKind::FeeMismatch], "{r:#?}");
    assert_eq!(
        r.settled, 2,
        "a fee mismatch is still settled: its figures are kept"
    );
    let case = &db.store.open_cases().await.unwrap()[0];
    assert_eq!(case.attempt_id, Some(off.id));
    assert_eq!(case.details["expected_fee_minor"], 59);
    assert_eq!(case.details["line"]["fee_minor"], 66);
    assert!(
        case.details["reason"]
            .as_str()
            .unwrap()
            .contains("0.66 EUR on 10.00 EUR; the contract (2.90%+30) says 0.59 EUR"),
        "{case:#?}"
    );
    let again = run(&db.store, &gw, Duration::from_secs(3600)).await;
    assert_eq!((again.opened, again.already_open), (0, 1));
    // The case does not hold the order (its charge is APROBADO anyway).
    sim.shutdown().await;
}

async fn a_payout_that_does_not_add_up_opens_one_payout_mismatch(db: &TestDb) {
    let sim = start_sim(
        true,
        Faults {
            payout_off_minor: -5,
            ..faults()
        },
    )
    .await;
    let gw = gateway(&sim.url());
    charged(&db.store, &gw, "payout-1", 1_000).await;
    charged(&db.store, &gw, "payout-2", 3_000).await;
    let paid = post(&sim.url(), "/control/payout", None).await;
    let payout = paid["payouts"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(paid["payouts"][0]["amount"], 941 + 2_883 - 5);

    let r = run(&db.store, &gw, Duration::from_secs(3600)).await;
    assert_eq!(opened(&r), [CaseKind::PayoutMismatch], "{r:#?}");
    let case = &db.store.open_cases().await.unwrap()[0];
    assert_eq!(case.dedupe_key, format!("payout_mismatch:{payout}"));
    assert_eq!(case.order_id, None);
    assert_eq!(case.details["payout"]["lines_net_minor"], 941 + 2_883);
    let w = around_now();
    let rows = db.store.settlements(w.from, w.to).await.unwrap();
    assert!(
        rows.iter()
            .all(|s| s.payout.as_deref() == Some(payout.as_str())),
        "{rows:#?}"
    );
    let again = run(&db.store, &gw, Duration::from_secs(3600)).await;
    assert_eq!((again.opened, again.already_open), (0, 1));

    // Finance downloads them: signed in, a CSV; a bad window names its field.
    let web = web_on(&db.store).await;
    let url = format!("{}/finance/settlements.csv", web.url);
    let resp = get_as(&url, As::Basic("ana")).await;
    assert_eq!(resp.status(), 200);
    assert_content_type(&resp, "text/csv");
    let text = resp.text().await.unwrap();
    assert_eq!(text.matches(&payout).count(), 2, "{text}");
    assert!(
        text.contains(",EUR,30.00,1.17,28.83,3000,117,2883,"),
        "{text}"
    );
    let bad = get_as(&format!("{url}?to=yesterday"), As::Basic("ana")).await;
    assert_eq!(bad.status(), 422);
    assert!(bad.text().await.unwrap().contains("\"to\""));
    assert_eq!(get_as(&url, As::Nobody).await.status(), 401);
    sim.shutdown().await;
}

async fn a_throttled_listing_defers_the_run_and_writes_nothing(db: &TestDb) {
    let sim = start_sim(
        true,
        Faults {
            unsettled_every: 1,
            ..faults()
        },
    )
    .await;
    let gw = gateway(&sim.url());
    charged(&db.store, &gw, "throttled-1", 1_000).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // One request per 1000 s: the balance page passes, the payouts page is a 429.
    set_faults(
        &sim.url(),
        &Faults {
            unsettled_every: 1,
            rate_limit_per_s: 0.001,
            rate_limit_burst: 1,
            ..faults()
        },
    )
    .await;
    let w = around_now();
    let err = settle(&db.store, &gw, &w, w.to, &args(Duration::from_secs(1)))
        .await
        .expect_err("a throttled listing is not a view to judge");
    assert!(err.is_deferred(), "{err:?}");
    assert!(db.store.all_cases().await.unwrap().is_empty());
    assert!(db.store.settlements(w.from, w.to).await.unwrap().is_empty());
    sim.shutdown().await;
}

/// The rule is the database's, not the check's: any door that writes a
/// settlement goes through it.
async fn the_database_keeps_a_settlement_to_an_approved_charge_written_once(db: &TestDb) {
    let sim = start_sim(true, faults()).await;
    let gw = gateway(&sim.url());
    let a = charged(&db.store, &gw, "guard-1", 1_000).await;
    let req = ChargeRequest::parse("guard-2", 1_000, "EUR", None, None).unwrap();
    let pending = db.store.enqueue(&req).await.unwrap().attempt_id;
    let row = |attempt_id, gross_minor: i64, fee_minor: i64| SettledCharge {
        attempt_id,
        order_id: String::new(),
        gateway_charge_id: String::new(),
        balance_txn: format!("txn_{attempt_id}"),
        gross_minor,
        fee_minor,
        net_minor: gross_minor - fee_minor,
        currency: "EUR".into(),
        payout: None,
        settled_at: Utc::now(),
    };
    // Not APROBADO; another amount than the charge's: refused, nothing written.
    assert!(
        db.store
            .record_settlements(&[row(pending, 1_000, 59)])
            .await
            .is_err()
    );
    assert!(
        db.store
            .record_settlements(&[row(a.id, 999, 59)])
            .await
            .is_err()
    );
    assert_eq!(
        db.store
            .record_settlements(&[row(a.id, 1_000, 59)])
            .await
            .unwrap(),
        1
    );
    // Written once: a later run's other figures are not taken; a payout is
    // filled in once.
    let mut later = row(a.id, 1_000, 59);
    later.payout = Some("po_1".into());
    assert_eq!(db.store.record_settlements(&[later]).await.unwrap(), 0);
    let w = around_now();
    let rows = db.store.settlements(w.from, w.to).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].fee_minor, rows[0].payout.as_deref()),
        (59, Some("po_1"))
    );
    let mut other = row(a.id, 1_000, 59);
    other.payout = Some("po_2".into());
    db.store.record_settlements(&[other]).await.unwrap();
    let rows = db.store.settlements(w.from, w.to).await.unwrap();
    assert_eq!(rows[0].payout.as_deref(), Some("po_1"), "kept");
    sim.shutdown().await;
}

/// The worker's daily close runs the settlement check of the day whose
/// charges are now `COBRO_SETTLEMENT_DELAY` old, once, under a claim of
/// its own (`[day, day end + delay)`, a window no charge run uses).
async fn the_worker_checks_the_day_now_delay_old_once_under_its_own_claim(db: &TestDb) {
    let sim = start_sim(true, faults()).await;
    let mut worker = worker_args(&db.url, &sim.url());
    worker.reconcile = cobro::recon::ReconcileArgs {
        reconcile_at: cobro::recon::ReconcileAt::parse("00:00").unwrap(),
        settlement_check: true,
        settlement: args(Duration::from_secs(1)),
        ..cobro::recon::ReconcileArgs::off()
    };
    let started = Utc::now();
    let w = spawn_worker(worker);
    let run = eventually(Duration::from_secs(30), "a settlement run", || async {
        let runs = db.store.recon_runs().await.unwrap();
        runs.into_iter().find(|r| {
            r.report
                .as_ref()
                .is_some_and(|j| j["check"] == "settlement")
        })
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.stop().await;
    assert_eq!(run.outcome.as_deref(), Some("ok"), "{run:#?}");
    let (day, claim) = cobro::recon::settle::due(started, Duration::from_secs(1));
    assert_eq!((run.window_from, run.window_to), (claim.from, claim.to));
    assert_eq!(
        run.window_to - run.window_from,
        TimeDelta::days(1) + TimeDelta::seconds(1)
    );
    assert_eq!(
        run.report.unwrap()["window"]["from"],
        serde_json::json!(day.from)
    );
    let runs = db.store.recon_runs().await.unwrap();
    assert_eq!(
        runs.len(),
        2,
        "the daily close and the settlement check, once each: {runs:#?}"
    );
    sim.shutdown().await;
}
