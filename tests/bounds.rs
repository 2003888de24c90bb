//! Input bounds (issue 11, item 5; issue 27, items 6 and 7). Amounts: the
//! deployment's maximum lives in the database's settings row (set by
//! `cobro migrate --max-amount-minor` / `COBRO_MAX_AMOUNT_MINOR`) and is
//! enforced there on every attempt whoever writes it (HTTP, CLI, SQL, the
//! library, a raw insert), with one message; the ceiling (999999999999)
//! is also checked at the doors before the database; the finance summary's
//! sums exact at any size. Webhooks: a signed event carrying `\u0000` in a
//! code is stored once and applied; one whose event id or charge id
//! carries it is refused as malformed (an id is never altered). On both
//! backends, over real HTTP and real processes.
//!
//! This file holds the amount's doors; `bounds/summary.rs` the finance
//! summary's exact sums, `bounds/webhook_nul.rs` the webhook carrying NUL.

#[macro_use]
mod common;
#[path = "bounds/summary.rs"]
mod summary;
#[path = "bounds/webhook_nul.rs"]
mod webhook_nul;

use std::process::{Command, Output};

use cobro::domain::{AMOUNT_CEILING, Amount, ChargeRequest, DEFAULT_MAX_AMOUNT, MaxAmount};
use cobro::state::Event;
use cobro::store::{Attempt, Store};
use cobro::webhook::{Scheme, Verifier};
use common::*;
use serde_json::Value;
use uuid::Uuid;

on_both_dbs!(
    over_http_an_amount_above_the_maximum_is_refused_and_nothing_is_written,
    the_cli_refuses_an_amount_above_the_maximum_and_writes_nothing,
    the_library_stops_at_the_ceiling_or_at_its_own_limit,
    the_database_refuses_a_raw_insert_above_the_ceiling,
);

pub(crate) fn verifier(secret: &str) -> Verifier {
    Verifier::from_env_value(Scheme::StandardWebhooks, secret).unwrap()
}

pub(crate) async fn charge(store: &Store, order: &str, amount: i64) -> Attempt {
    let req = ChargeRequest::parse(order, amount, "USD", None, None).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    store.load(id).await.unwrap().0
}

pub(crate) async fn approved(store: &Store, order: &str, amount: i64) -> Attempt {
    let a = charge(store, order, amount).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Approved, None).await
}

pub(crate) async fn in_review(store: &Store, order: &str, amount: i64) -> Attempt {
    let req = ChargeRequest::parse(order, amount, "USD", None, None).unwrap();
    in_review_of(store, &req).await
}

async fn post(url: String, key: &str, body: &str) -> (u16, Value) {
    post_keyed_json(&url, As::Bearer("app"), Some(key), body).await
}

/// A refusal of `amount_minor` that says the maximum (and what sets it).
fn assert_over_the_maximum(status: u16, reply: &Value, max: &str, set_by: &str, what: &str) {
    assert_eq!(status, 422, "{what}: {reply}");
    assert_eq!(reply["field"], "amount_minor", "{what}: {reply}");
    let msg = reply["error"].as_str().unwrap();
    assert!(
        msg.contains("amount_minor") && msg.contains(max) && msg.contains(set_by),
        "{what}: {msg}"
    );
}

async fn over_http_an_amount_above_the_maximum_is_refused_and_nothing_is_written(db: &TestDb) {
    let v = || verifier(&test_secret());
    let web = start_web(&db.store, v()).await;
    let max = DEFAULT_MAX_AMOUNT.to_string();
    let charge_body = |amount: &str| {
        format!(r#"{{"order_id": "b-http", "amount_minor": {amount}, "currency": "USD"}}"#)
    };
    // The maximum + 1 is the database's refusal (the settings row), in
    // major units too; past the ceiling the door refuses before it.
    const CEILING: (&str, &str) = ("999999999999", "the ceiling");
    for (amount, (limit, set_by)) in [
        ("100000000", (max.as_str(), "COBRO_MAX_AMOUNT_MINOR")),
        ("1000000000000", CEILING),
        ("9223372036854775807", CEILING),
        ("18446744073709551615", CEILING), // u64::MAX: not an i64 at all
        ("1e30", CEILING),
    ] {
        let key = Uuid::new_v4().to_string();
        let (status, reply) =
            post(format!("{}/charges", web.url), &key, &charge_body(amount)).await;
        assert_over_the_maximum(
            status,
            &reply,
            limit,
            set_by,
            &format!("POST /charges {amount}"),
        );
    }
    let (_, reply) = post(
        format!("{}/charges", web.url),
        &Uuid::new_v4().to_string(),
        &charge_body("100000000"),
    )
    .await;
    assert!(
        reply["error"].as_str().unwrap().contains("999999.99 USD"),
        "{reply}"
    );
    assert_eq!(db.attempts().await, 0, "nothing written");

    // The maximum itself is accepted.
    let key = Uuid::new_v4().to_string();
    let (status, reply) = post(format!("{}/charges", web.url), &key, &charge_body(&max)).await;
    assert_eq!(status, 201, "{reply}");
    assert_eq!(reply["amount_minor"], DEFAULT_MAX_AMOUNT);

    // A refund above the maximum: refused for its amount before anything
    // else (not as "exceeds the capture"), nothing written.
    let captured = approved(&db.store, "b-http-refund", DEFAULT_MAX_AMOUNT).await;
    for (amount, (limit, set_by)) in [
        ("100000000", (max.as_str(), "COBRO_MAX_AMOUNT_MINOR")),
        ("1000000000000", CEILING),
        ("18446744073709551615", CEILING),
    ] {
        let body = format!(
            r#"{{"attempt_id": "{}", "amount_minor": {amount}}}"#,
            captured.id
        );
        let key = Uuid::new_v4().to_string();
        let (status, reply) = post(format!("{}/refunds", web.url), &key, &body).await;
        assert_over_the_maximum(
            status,
            &reply,
            limit,
            set_by,
            &format!("POST /refunds {amount}"),
        );
    }
    assert!(db.store.refunds_of(captured.id).await.unwrap().is_empty());
    web.stop().await;

    // A lower maximum set in the database: the same refusals name it, with
    // the web process untouched.
    db.store
        .set_max_amount(MaxAmount::new(5_000, "COBRO_MAX_AMOUNT_MINOR").unwrap())
        .await
        .unwrap();
    let web = start_web(&db.store, v()).await;
    let body = r#"{"order_id": "b-http-low", "amount_minor": 5001, "currency": "USD"}"#;
    let (status, reply) = post(format!("{}/charges", web.url), KEY, body).await;
    assert_over_the_maximum(status, &reply, "5000", "COBRO_MAX_AMOUNT_MINOR", "max 5000");
    let body = format!(
        r#"{{"attempt_id": "{}", "amount_minor": 5001}}"#,
        captured.id
    );
    let (status, reply) = post(format!("{}/refunds", web.url), KEY, &body).await;
    assert_over_the_maximum(
        status,
        &reply,
        "5000",
        "COBRO_MAX_AMOUNT_MINOR",
        "refund, max 5000",
    );
    let body = format!(
        r#"{{"attempt_id": "{}", "amount_minor": 5000}}"#,
        captured.id
    );
    let (status, reply) = post(format!("{}/refunds", web.url), KEY, &body).await;
    assert_eq!(status, 201, "at the maximum: {reply}");
    assert_eq!(db.attempts().await, 3, "two charges and one refund");
    web.stop().await;
}

const KEY: &str = "5b0c9a8e-1f2d-4c3b-8a7e-6d5c4b3a2f10";

fn cobro(db_url: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cobro"));
    cmd.args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .env_remove("COBRO_MAX_AMOUNT_MINOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run cobro")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

async fn the_cli_refuses_an_amount_above_the_maximum_and_writes_nothing(db: &TestDb) {
    let enqueue = |env: &[(&str, &str)], amount: &str| {
        cobro(
            &db.url,
            env,
            &[
                "enqueue",
                "--order",
                "b-cli",
                "--amount-minor",
                amount,
                "--currency",
                "USD",
            ],
        )
    };
    // `cobro migrate` sets the maximum (COBRO_MAX_AMOUNT_MINOR); `cobro
    // enqueue` meets it in the database.
    let migrate = |env: &[(&str, &str)]| cobro(&db.url, env, &["migrate"]);
    for (env, amount, max, set_by) in [
        (vec![], "100000000", "99999999", "COBRO_MAX_AMOUNT_MINOR"),
        (vec![], "9223372036854775807", "999999999999", "ceiling"),
        (
            vec![("COBRO_MAX_AMOUNT_MINOR", "5000")],
            "5001",
            "5000",
            "COBRO_MAX_AMOUNT_MINOR",
        ),
        (
            vec![("COBRO_MAX_AMOUNT_MINOR", "999999999999")],
            "1000000000000",
            "999999999999",
            "",
        ),
    ] {
        let m = migrate(&env);
        assert!(m.status.success(), "migrate {env:?}: {}", stderr(&m));
        let out = enqueue(&[], amount);
        assert!(!out.status.success(), "{env:?} {amount}: it enqueued");
        let err = stderr(&out);
        assert!(
            err.contains("amount_minor") && err.contains(max) && err.contains(set_by),
            "{env:?} {amount}: {err}"
        );
    }
    // A maximum above the ceiling is refused before anything runs.
    let out = migrate(&[("COBRO_MAX_AMOUNT_MINOR", "1000000000000")]);
    assert!(
        !out.status.success(),
        "started with a maximum over the ceiling"
    );
    let err = stderr(&out);
    assert!(
        err.contains("COBRO_MAX_AMOUNT_MINOR") && err.contains("999999999999"),
        "{err}"
    );
    assert_eq!(db.attempts().await, 0, "nothing written");

    let m = migrate(&[("COBRO_MAX_AMOUNT_MINOR", "99999999")]);
    assert!(m.status.success(), "{}", stderr(&m));
    let captured = approved(&db.store, "b-cli-refund", 90_000_000).await;
    let id = captured.id.to_string();
    for (env, amount, max) in [
        (vec![], "100000000", "99999999"),
        (vec![("COBRO_MAX_AMOUNT_MINOR", "5000")], "5001", "5000"),
    ] {
        if !env.is_empty() {
            let m = migrate(&env);
            assert!(m.status.success(), "{}", stderr(&m));
        }
        let out = cobro(
            &db.url,
            &[],
            &["refund", "--attempt", &id, "--amount-minor", amount],
        );
        assert!(!out.status.success(), "{env:?} {amount}: it refunded");
        let err = stderr(&out);
        assert!(
            err.contains("amount_minor") && err.contains(max),
            "{env:?} {amount}: {err}"
        );
    }
    assert!(db.store.refunds_of(captured.id).await.unwrap().is_empty());
    let out = cobro(
        &db.url,
        &[],
        &["refund", "--attempt", &id, "--amount-minor", "5000"],
    );
    assert!(out.status.success(), "at the maximum: {}", stderr(&out));
    assert_eq!(db.store.refunds_of(captured.id).await.unwrap().len(), 1);
}

#[test]
fn migrate_refuses_a_maximum_above_the_ceiling() {
    for bad in ["1000000000000", "0", "lots"] {
        let out = Command::new(env!("CARGO_BIN_EXE_cobro"))
            .args(["migrate"])
            .env("DATABASE_URL", "sqlite::memory:")
            .env("COBRO_MAX_AMOUNT_MINOR", bad)
            .output()
            .expect("run cobro serve");
        assert!(!out.status.success(), "{bad}: it started");
        let err = stderr(&out);
        assert!(
            err.contains("COBRO_MAX_AMOUNT_MINOR") && err.contains("999999999999"),
            "{bad}: {err}"
        );
    }
}

async fn the_library_stops_at_the_ceiling_or_at_its_own_limit(db: &TestDb) {
    for over in [AMOUNT_CEILING + 1, i64::MAX] {
        let e = ChargeRequest::parse("b-lib", over, "USD", None, None).unwrap_err();
        assert_eq!(e.field, "amount_minor");
        assert!(e.to_string().contains("at most 999999999999"), "{e}");
        assert_eq!(Amount::parse(over).unwrap_err().field, "amount_minor");
    }
    // The app's own limit, named in the refusal.
    let mine = MaxAmount::new(5_000_000, "this shop's limit").unwrap();
    let e = ChargeRequest::parse_within("b-lib", 5_000_001, "USD", None, None, mine).unwrap_err();
    assert_eq!(e.field, "amount_minor");
    assert!(e.reason.contains("5000000") && e.reason.contains("this shop's limit"));
    assert!(Amount::parse_within(5_000_001, mine).is_err());
    assert_eq!(db.attempts().await, 0);

    // The ceiling itself goes through the library on both backends, once
    // the deployment's maximum allows it.
    db.store.set_max_amount(MaxAmount::CEILING).await.unwrap();
    let req = ChargeRequest::parse("b-lib", AMOUNT_CEILING, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    assert_eq!(
        db.store.load(id).await.unwrap().0.amount_minor,
        AMOUNT_CEILING
    );
}

#[tokio::test]
async fn postgres_the_sql_functions_refuse_amounts_above_the_ceiling() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let pool = db.store.pg_pool().unwrap();
    // The default maximum (99999999) holds SQL callers as it holds HTTP.
    let err = sqlx::query("SELECT * FROM cobro.enqueue_charge('b-sql', 99999999999, 'USD')")
        .execute(pool)
        .await
        .unwrap_err();
    let msg = err.as_database_error().unwrap().message().to_owned();
    assert!(
        msg.starts_with("invalid amount_minor:")
            && msg.contains("99999999 minor units (999999.99 USD)"),
        "{msg}"
    );
    db.store.set_max_amount(MaxAmount::CEILING).await.unwrap();
    let captured = approved(&db.store, "b-sql-charge", AMOUNT_CEILING).await;
    let over = [AMOUNT_CEILING + 1, i64::MAX];
    let mut refusals = Vec::new();
    for amount in over {
        let sql = "SELECT * FROM cobro.enqueue_charge('b-sql', $1, 'USD')";
        let err = sqlx::query(sql).bind(amount).execute(pool).await;
        refusals.push((format!("enqueue_charge {amount}"), err));
        let sql = "SELECT * FROM cobro.request_refund($1, $2)";
        let err = sqlx::query(sql)
            .bind(captured.id)
            .bind(amount)
            .execute(pool)
            .await;
        refusals.push((format!("request_refund {amount}"), err));
    }
    for (what, result) in refusals {
        let err = result.expect_err(&what);
        let db_err = err.as_database_error().expect("database error");
        assert_eq!(db_err.code().as_deref(), Some("22023"), "{what}");
        assert!(
            db_err.message().starts_with("invalid amount_minor:")
                && db_err.message().contains("999999999999"),
            "{what} -> {}",
            db_err.message()
        );
    }
    assert_eq!(db.attempts().await, 1, "nothing written");
    assert!(db.store.refunds_of(captured.id).await.unwrap().is_empty());
    // The ceiling itself is accepted.
    let created: bool = sqlx::query_scalar(
        "SELECT created FROM cobro.enqueue_charge('b-sql', 999999999999, 'USD')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(created);
    db.drop_db().await;
}

async fn the_database_refuses_a_raw_insert_above_the_ceiling(db: &TestDb) {
    let insert = |order: &'static str, amount: &'static str| {
        let db = &db;
        async move {
            db.exec(
            "INSERT INTO cobro.payment_attempts
                (id, order_id, amount_minor, currency, idempotency_key, state)
             VALUES (gen_random_uuid(), $1, $2::bigint, 'USD', gen_random_uuid(), 'RECHAZADO')",
            "INSERT INTO payment_attempts
                (id, order_id, amount_minor, currency, idempotency_key, state, created_at, updated_at)
             VALUES (lower(hex(randomblob(18))), ?1, CAST(?2 AS INTEGER), 'USD',
                     lower(hex(randomblob(18))), 'RECHAZADO', 0, 0)",
            &[order, amount],
        )
            .await
        }
    };
    for amount in ["1000000000000", "9223372036854775807"] {
        let err = insert("b-raw", amount).await.unwrap_err();
        let msg = err
            .as_database_error()
            .expect("database error")
            .message()
            .to_owned();
        assert!(msg.contains("amount_minor"), "{amount}: {msg}");
    }
    assert_eq!(db.attempts().await, 0, "nothing written");
    // Over the deployment's maximum (99999999 by default): refused too.
    let err = insert("b-raw", "100000000").await.unwrap_err();
    assert!(err.to_string().contains("invalid amount_minor"), "{err}");
    db.store.set_max_amount(MaxAmount::CEILING).await.unwrap();
    insert("b-raw", "999999999999").await.unwrap();
    assert_eq!(db.attempts().await, 1);
}
