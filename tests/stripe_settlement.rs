//! Settlement reconciliation against localstripe (a Stripe-compatible
//! server nobody here wrote): charges approved through its PaymentIntents
//! are found settled in its `GET /v1/balance_transactions` (the charge
//! expanded to its PaymentIntent, which is what our attempts record), with
//! their gross, fee and net stored. localstripe's fee is always 0, and its
//! payouts are manual (`automatic: false`; it does not list a payout's
//! lines), so they are not checked; the payout check runs against the
//! simulator only (tests/settlement.rs). On both backends.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::settlement::FeeRule;
use cobro::recon::settle::{SettlementArgs, settle};
use common::*;
use stripe_support::*;

#[path = "common/stripe.rs"]
mod stripe_support;

on_both_dbs!(charges_approved_through_localstripe_are_found_settled,);

async fn charges_approved_through_localstripe_are_found_settled(db: &TestDb) {
    let Some(stripe) = local_stripe().await else {
        return;
    };
    let args = stripe_worker_args(&db.url, &stripe.url);
    let worker = spawn_worker(args.clone());
    let mut ids = Vec::new();
    for (i, amount) in [1_000, 2_345].into_iter().enumerate() {
        let charge = visa_charge(&format!("ord-settle-{i}"), amount);
        ids.push(charged_by_worker(&db.store, &charge).await.id);
    }
    worker.stop().await;
    // A manual payout: localstripe's only kind; not a payout whose lines
    // anyone can list, so not checked.
    let made = reqwest::Client::new()
        .post(format!("{}/v1/payouts", stripe.url))
        .bearer_auth(TEST_KEY)
        .form(&[("amount", "500"), ("currency", "eur")])
        .send()
        .await
        .unwrap();
    assert!(made.status().is_success(), "{}", made.status());
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let gateway = args.gateway.build(args.gateway_config()).unwrap();
    let now = chrono::Utc::now();
    let window = cobro::recon::Window::new(
        now - chrono::TimeDelta::hours(1),
        now + chrono::TimeDelta::minutes(1),
    )
    .unwrap();
    let rules = SettlementArgs {
        settlement_delay: Duration::from_secs(1),
        settlement_fee: FeeRule::parse("0%").unwrap(),
    };
    let r = settle(&db.store, gateway.as_ref(), &window, window.to, &rules)
        .await
        .expect("localstripe serves its balance transactions");
    assert_eq!((r.lines, r.payouts), (2, 0), "{r:#?}");
    assert_eq!((r.settled, r.recorded, r.waiting), (2, 2, 0), "{r:#?}");
    assert!(r.cases.is_empty(), "{r:#?}");
    let mut rows = db.store.settlements(window.from, window.to).await.unwrap();
    rows.sort_by_key(|s| s.gross_minor);
    let got: Vec<_> = rows
        .iter()
        .map(|s| (s.gross_minor, s.fee_minor, s.net_minor, s.currency.as_str()))
        .collect();
    assert_eq!(got, [(1_000, 0, 1_000, "EUR"), (2_345, 0, 2_345, "EUR")]);
    assert!(rows.iter().all(|s| s.gateway_charge_id.starts_with("pi_")));
    assert!(rows.iter().all(|s| s.balance_txn.starts_with("txn_")));

    // The contract's fee differs from localstripe's 0: one case a charge.
    let strict = SettlementArgs {
        settlement_fee: FeeRule::parse("2.9%+30").unwrap(),
        ..rules
    };
    let r = settle(&db.store, gateway.as_ref(), &window, window.to, &strict)
        .await
        .unwrap();
    let kinds: Vec<String> = r.cases.iter().map(|c| c.kind.to_string()).collect();
    assert_eq!(kinds, ["fee_mismatch", "fee_mismatch"], "{r:#?}");
    assert_eq!(r.recorded, 0, "kept from the first run");
}
