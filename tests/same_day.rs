//! Same-day detection of a double charge and the refund of the duplicate,
//! on both backends: a worker whose intraday reconciliation runs every 2 s
//! (production: 10 min) opens a `double_charge` case for a charge the
//! gateway made twice, the gauge says so, finance refunds the duplicate
//! from the case through the API (approved by a named person, in the log),
//! the refund's answer is lost and found by lookup, the gateway's ledger
//! shows exactly one refund, of the duplicate, and the next run's gauge is 0;
//! should that refund fail after it succeeded, the duplicate can be refunded
//! again.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::recon::{Intraday, ReconcileArgs, ReconcileAt};
use cobro::sim::{Faults, LedgerEntry};
use cobro::state::State;
use cobro::store::{Contradiction, ReconCase, Store};
use common::*;
use serde_json::{Value, json};

on_both_dbs!(a_double_charge_is_found_the_same_day_and_its_duplicate_refunded_once,);

const INTERVAL: Duration = Duration::from_secs(2);

/// The gateway charges `order` again, outside cobro (a stray retry of the
/// app's own HTTP client, another integration…).
async fn charge_again(sim_url: &str, order: &str, amount_minor: i64) -> LedgerEntry {
    inject_charge(sim_url, order, amount_minor).await
}

async fn double_charge_case(store: &Store, order: &str) -> Option<ReconCase> {
    store
        .open_cases()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.kind == "double_charge" && c.order_id.as_deref() == Some(order))
}

/// The on-call gauge of double charges at the gateway not yet refunded.
async fn double_charges_gauge(store: &Store) -> i64 {
    store.gauges().await.unwrap().on_call.gateway_double_charges
}

async fn a_double_charge_is_found_the_same_day_and_its_duplicate_refunded_once(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let mut args = worker_args(&db.url, &sim.url());
    args.reconcile = ReconcileArgs {
        reconcile_at: ReconcileAt::Off,
        reconcile_retry: INTERVAL,
        reconcile_intraday: Intraday::Every(INTERVAL),
        ..ReconcileArgs::off()
    };
    let worker = spawn_worker(args);
    let order = "order-same-day";
    let req = ChargeRequest::parse(order, 1_500, "EUR", None, Some("pm_test")).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let ours = settled(&db.store, id, State::Aprobado, Duration::from_secs(20)).await;
    let ours_charge = ours.gateway_charge_id.clone().expect("our charge id");
    let duplicate = charge_again(&sim.url(), order, 1_500).await;

    // Within one interval after the next slot boundary, plus the run itself.
    let case = eventually(
        INTERVAL * 2 + Duration::from_secs(6),
        "a double_charge case",
        || double_charge_case(&db.store, order),
    )
    .await;
    let refs = case.gateway_ref.clone().unwrap_or_default();
    assert!(
        refs.contains(&duplicate.charge_id) && refs.contains(&ours_charge),
        "{refs}"
    );
    assert_eq!(case.details["unrefunded"], 2, "{}", case.details);
    // The run records its report just after its cases.
    eventually(Duration::from_secs(5), "the gauge at 1", || async {
        (double_charges_gauge(&db.store).await == 1).then_some(())
    })
    .await;

    // Finance refunds the duplicate from the case; the gateway executes the
    // refund and its answer is lost.
    set_faults(&sim.url(), &answers_lost()).await;
    let web = web_on(&db.store).await;
    let http = reqwest::Client::new();
    let refund_duplicate = |who: &'static str, charge: String| {
        let req = http
            .post(format!(
                "{}/finance/api/cases/{}/refund-duplicate",
                web.url, case.id
            ))
            .bearer_auth(secret(who))
            .json(&json!({ "charge_id": charge }));
        async move {
            let resp = req.send().await.unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    // The order's own approved charge is not a duplicate.
    let (status, err) = refund_duplicate("ana", ours_charge.clone()).await;
    assert_refused(status, &err, 409, "charge_id");
    // Nor is a charge the case does not list.
    let (status, err) = refund_duplicate("ana", "ch_nobody".into()).await;
    assert_refused(status, &err, 422, "charge_id");
    // A key without finance:write may not.
    let (status, _) = refund_duplicate("agent", duplicate.charge_id.clone()).await;
    assert_eq!(status, 403);

    let (status, asked) = refund_duplicate("ana", duplicate.charge_id.clone()).await;
    assert_eq!(status, 201, "{asked}");
    // Asking again (a double click, a lost HTTP answer) is the same refund.
    let (status, again) = refund_duplicate("luis", duplicate.charge_id.clone()).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["refund_id"], asked["refund_id"]);
    assert_eq!(again["created"], false);

    let refund_id = asked["refund_id"].as_str().unwrap().parse().unwrap();
    let refund = settled(
        &db.store,
        refund_id,
        State::Aprobado,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(refund.refund_of, Some(ours.id), "anchored on our charge");
    assert_eq!(
        refund.refund_of_gateway.as_deref(),
        Some(duplicate.charge_id.as_str())
    );
    assert_eq!(refund.send_count, 1, "resolved by lookup, never re-sent");
    let log = db.store.transitions(refund.id).await.unwrap();
    assert_eq!(log[0].cause, "duplicate_refund_requested");
    assert_eq!(log[0].actor, "finance:ana");
    let ev = log[0].evidence.clone().unwrap_or_default();
    assert_eq!(ev["approved_by"], "ana");
    assert_eq!(ev["case_id"], case.id);
    assert_eq!(ev["duplicate_charge"], duplicate.charge_id.as_str());
    let path: Vec<&str> = log.iter().map(|t| t.to_state.as_str()).collect();
    assert_eq!(path, ["PENDIENTE", "EN_PROCESO", "DESCONOCIDO", "APROBADO"]);

    let l = ledger(&sim.url()).await;
    assert_eq!(l.refunds.len(), 1, "exactly one refund at the gateway");
    assert_eq!(l.refunds[0].charge_id, duplicate.charge_id);
    assert_eq!(l.refunds[0].amount_minor, 1_500);
    assert_eq!(
        l.refunds[0].idempotency_key,
        refund.idempotency_key.to_string()
    );

    // The next intraday run sees the duplicate refunded: the gauge drops.
    set_faults(&sim.url(), &Faults::default()).await;
    eventually(
        INTERVAL * 2 + Duration::from_secs(6),
        "the gauge back to 0",
        || async { (double_charges_gauge(&db.store).await == 0).then_some(()) },
    )
    .await;
    // One case for the double charge, whatever the number of runs.
    let n = db
        .store
        .open_cases()
        .await
        .unwrap()
        .iter()
        .filter(|c| c.kind == "double_charge")
        .count();
    assert_eq!(n, 1);

    // The refund then fails at the gateway after it succeeded (Stripe's
    // `refund.updated`, failed): marked, its amount free again. Finance
    // may refund the duplicate again, and is not told it is refunded.
    let failed = Contradiction::declined(
        &refund,
        "expired_or_canceled_card",
        "test",
        chrono::Utc::now(),
    )
    .expect("a settled refund contradicted");
    db.store
        .contradicted(&refund, &failed, "webhook:test")
        .await
        .unwrap();
    let (status, anew) = refund_duplicate("ana", duplicate.charge_id.clone()).await;
    assert_eq!(status, 201, "{anew}");
    assert_eq!(anew["created"], true);
    assert_ne!(anew["refund_id"], asked["refund_id"]);

    web.stop().await;
    finish(worker, sim).await;
}
