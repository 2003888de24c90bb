//! Amounts in messages are in major units with the currency's exponent: a
//! reused idempotency key's refusal once said "700 USD" for a 7.00 USD
//! charge (the stored amount_minor printed as if it were major), on both
//! backends and through the CLI.

#[macro_use]
mod common;

use cobro::domain::{Amount, ChargeRequest, IdempotencyKey};
use cobro::state::Event;
use cobro::store::RefundError;
use common::*;

on_both_dbs!(
    a_reused_key_names_the_first_charge_in_major_units,
    a_refund_over_what_is_left_says_it_in_major_units,
);

async fn a_reused_key_names_the_first_charge_in_major_units(db: &TestDb) {
    for (n, (minor, currency, shown)) in [
        (700, "USD", "7.00 USD"),
        (700, "JPY", "700 JPY"),
        (7000, "KWD", "7.000 KWD"),
    ]
    .into_iter()
    .enumerate()
    {
        let key = uuid::Uuid::new_v4().to_string();
        let first =
            ChargeRequest::parse(&format!("words-{n}"), minor, currency, Some(&key), None).unwrap();
        db.store
            .enqueue(&first)
            .await
            .expect("first use of the key");
        let other =
            ChargeRequest::parse(&format!("words-{n}-b"), minor, currency, Some(&key), None)
                .unwrap();
        let err = db.store.enqueue(&other).await.unwrap_err().to_string();
        assert!(
            err.contains(&format!("(order words-{n}, {shown})")),
            "{currency}: {err}"
        );
    }
    // The CLI says the same.
    let key = uuid::Uuid::new_v4().to_string();
    let enqueue = |order: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cobro"))
            .args(["enqueue", "--order", order, "--amount-minor", "700"])
            .args(["--currency", "USD", "--key", &key])
            .env("DATABASE_URL", &db.url)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    assert!(enqueue("words-cli").status.success());
    let out = enqueue("words-cli-b");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(order words-cli, 7.00 USD)"), "{stderr}");
    assert!(!stderr.contains("700 USD"), "{stderr}");
}

async fn a_refund_over_what_is_left_says_it_in_major_units(db: &TestDb) {
    let req = ChargeRequest::parse("words-refund", 1000, "USD", None, Some("pm_test")).unwrap();
    let charge = enqueued(&db.store, &req).await;
    let charge = step(&db.store, &charge, Event::Claim, None).await;
    let charge = step(&db.store, &charge, Event::Approved, None).await;
    let refund = |minor: i64| {
        db.store.request_refund(
            charge.id,
            Amount::parse(minor).unwrap(),
            IdempotencyKey::generate(),
            "test",
        )
    };
    refund(300).await.expect("3.00 USD of 10.00 USD");
    let err = refund(800).await.unwrap_err();
    let RefundError::ExceedsCapture(msg) = &err else {
        panic!("expected ExceedsCapture, got {err:?}");
    };
    assert!(
        !msg.contains("800 USD") && !msg.contains("of 1000"),
        "{msg}"
    );
    if db.backend == Backend::Postgres {
        assert!(
            msg.contains("refund of 8.00 USD exceeds")
                && msg.contains("3.00 USD of 10.00 USD already refunded"),
            "{msg}"
        );
    }
}
