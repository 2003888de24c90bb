//! A charge's customer (the gateway's customer a saved payment method
//! belongs to) at every door that enqueues: `POST /charges`, the Rust API,
//! PostgreSQL's `cobro.enqueue_charge`, `cobro enqueue --customer`; stored
//! on the attempt, shown where the attempt is shown, carried to a business
//! retry; card data refused naming `customer`, with nothing written. On
//! both backends (the SQL function on PostgreSQL, which has it).

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::{ChargeRequest, Customer};
use cobro::state::Event;
use cobro::store::{Backend, EnqueueError};
use common::*;
use serde_json::{Value, json};

on_both_dbs!(
    post_charges_stores_and_shows_the_customer_and_refuses_card_data,
    the_rust_api_stores_it_and_a_business_retry_carries_it,
    the_database_refuses_a_customer_that_looks_like_card_data,
    ; by_backend:
    the_cli_takes_customer_and_status_shows_it,
);

/// PostgreSQL only: SQLite has no stored functions (its doors are the
/// Rust API, HTTP and the CLI above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sql_function_takes_a_customer_or_none() {
    if skip_postgres() {
        return;
    }
    the_sql_function_takes_a_customer_or_none().await
}

const KEY: &str = "9d2c4b6a-1e3f-4a5b-8c7d-6e5f4a3b2c1d";

async fn post(web: &Web, key: &str, body: &Value) -> (u16, Value) {
    let url = format!("{}/charges", web.url);
    post_keyed_json(&url, As::Bearer("app"), Some(key), &body.to_string()).await
}

async fn post_charges_stores_and_shows_the_customer_and_refuses_card_data(db: &TestDb) {
    let web = web_on(&db.store).await;

    // Card data, or not a token: 422 naming `customer`, nothing written.
    for bad in [
        json!("4242424242424242"),
        json!("cus 4242"),
        json!(""),
        json!(42),
    ] {
        let body = json!({"order_id": "web-c", "amount_minor": 1999, "currency": "USD",
                          "payment_method": "pm_card_visa", "customer": bad});
        let (status, reply) = post(&web, KEY, &body).await;
        assert_eq!(status, 422, "{bad}: {reply}");
        assert_eq!(reply["field"], "customer", "{bad}: {reply}");
        assert!(
            !reply.to_string().contains("4242424242424242"),
            "card data is not echoed: {reply}"
        );
    }
    assert_eq!(db.attempts().await, 0, "nothing written");

    let body = json!({"order_id": "web-c", "amount_minor": 1999, "currency": "USD",
                      "payment_method": "pm_card_visa", "customer": "cus_Saved1"});
    let (status, created) = post(&web, KEY, &body).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["customer"], "cus_Saved1");
    // The same key with another customer is another charge.
    let mut other = body.clone();
    other["customer"] = json!("cus_Other");
    let (status, reply) = post(&web, KEY, &other).await;
    assert_refused(status, &reply, 409, "Idempotency-Key");

    let id = created["attempt_id"].as_str().unwrap();
    let shown: Value = get_json(&format!("{}/charges/{id}", web.url), As::Bearer("agent")).await;
    assert_eq!(shown["attempt"]["customer"], "cus_Saved1", "{shown}");
    assert_eq!(shown["attempt"]["payment_method"], "pm_card_visa");

    // Without one, as before: no customer field, null on the attempt.
    let body = json!({"order_id": "web-d", "amount_minor": 500, "currency": "USD",
                      "payment_method": "pm_card_visa"});
    let (status, created) = post(&web, "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f", &body).await;
    assert_eq!(status, 201, "{created}");
    assert!(created.get("customer").is_none(), "{created}");
    assert_eq!(db.attempts().await, 2);
    web.stop().await;
}

async fn the_rust_api_stores_it_and_a_business_retry_carries_it(db: &TestDb) {
    let req = ChargeRequest::parse("rust-c", 3_000, "USD", None, Some("pm_saved"))
        .unwrap()
        .with_customer(Some("cus_Rust1"))
        .unwrap();
    let out = db.store.enqueue(&req).await.unwrap();
    assert!(out.created);
    // A replay of the same request is the same attempt.
    assert!(!db.store.enqueue(&req).await.unwrap().created);
    let changed = req.clone().with_customer(Some("cus_Rust2")).unwrap();
    let err = db.store.enqueue(&changed).await.unwrap_err();
    assert!(matches!(err, EnqueueError::KeyReused(_)), "{err}");

    // Declined with a retry scheduled, as the worker leaves it.
    let a = db.store.load(out.attempt_id).await.unwrap().0;
    assert_eq!(a.customer.as_deref(), Some("cus_Rust1"));
    let a = step(&db.store, &a, Event::Claim, None).await;
    let a = decline_for_retry(&db.store, &a, "insufficient_funds", Duration::from_secs(60)).await;
    let retried = db
        .store
        .business_retry(a.id, 3, "worker:test", Some(a.version))
        .await
        .unwrap();
    let retry = db.store.load(retried.attempt_id).await.unwrap().0;
    assert_eq!(retry.kind, "business_retry");
    assert_eq!(retry.customer.as_deref(), Some("cus_Rust1"), "carried over");
    assert_eq!(retry.payment_method.as_deref(), Some("pm_saved"));

    // Bad input never reaches the store: the parser names the field.
    let e = ChargeRequest::parse("rust-d", 100, "USD", None, None)
        .unwrap()
        .with_customer(Some("378282246310005"))
        .unwrap_err();
    assert_eq!(e.field, "customer");
}

/// The column's CHECK holds whatever door writes (a psql session, a door
/// not yet written): a customer with a card number's digits is refused.
async fn the_database_refuses_a_customer_that_looks_like_card_data(db: &TestDb) {
    let req = ChargeRequest::parse("db-c", 100, "USD", None, Some("pm_x"))
        .unwrap()
        .with_customer(Some("cus_ok"))
        .unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id.to_string();
    let err = db
        .exec(
            "UPDATE cobro.payment_attempts SET customer = $1 WHERE id = $2::uuid",
            "UPDATE payment_attempts SET customer = ?1 WHERE id = ?2",
            &["cus_4242424242424242", &id],
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("payment_attempts_customer_token"),
        "{err}"
    );
    let shown = db.store.load(id.parse().unwrap()).await.unwrap().0;
    assert_eq!(shown.customer.as_deref(), Some("cus_ok"));
}

async fn the_cli_takes_customer_and_status_shows_it(b: Backend) {
    let db = TestDb::new(b).await;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let base = [
        "enqueue",
        "--order",
        "cli-c",
        "--amount-minor",
        "1500",
        "--currency",
        "EUR",
        "--payment-method",
        "pm_saved",
    ];
    let mut bad = base.to_vec();
    bad.extend(["--customer", "5555555555554444"]);
    let out = cobro(&db.url, &bad);
    assert_fails_saying(&out, "customer");
    assert_eq!(db.attempts().await, 0, "nothing written");

    let mut good = base.to_vec();
    good.extend(["--customer", "cus_Cli1", "--json"]);
    let out = cobro(&db.url, &good);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cobro(&db.url, &["status", "--order", "cli-c"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("customer cus_Cli1"),
        "{}",
        text(&out.stdout)
    );
    let out = cobro(&db.url, &["status", "--order", "cli-c", "--json"]);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown[0]["attempt"]["customer"], "cus_Cli1", "{shown}");
    db.drop_db().await;
}

/// `cobro.enqueue_charge` with and without the customer: its old calls
/// unchanged, `p_customer` last or by name, and the same refusal as
/// [`Customer::parse`] for a bad one.
async fn the_sql_function_takes_a_customer_or_none() {
    let db = TestDb::new(Backend::Postgres).await;
    let pool = db.store.pg_pool().unwrap();
    let customer = |order: &'static str| async move {
        sqlx::query_scalar::<_, Option<String>>(
            "SELECT customer FROM cobro.payment_attempts WHERE order_id = $1",
        )
        .bind(order)
        .fetch_one(pool)
        .await
        .unwrap()
    };
    sqlx::query("SELECT * FROM cobro.enqueue_charge('sql-1', 100, 'USD', NULL, 'pm_x')")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(customer("sql-1").await, None);
    sqlx::query("SELECT * FROM cobro.enqueue_charge('sql-2', 100, 'USD', NULL, 'pm_x', 'app')")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(customer("sql-2").await, None);
    sqlx::query(
        "SELECT * FROM cobro.enqueue_charge('sql-3', 100, 'USD', NULL, 'pm_x', 'app', 'cus_Sql3')",
    )
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(customer("sql-3").await.as_deref(), Some("cus_Sql3"));
    sqlx::query(
        "SELECT * FROM cobro.enqueue_charge('sql-4', 100, 'USD', p_payment_method => 'pm_x',
                                             p_customer => 'cus_Sql4')",
    )
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(customer("sql-4").await.as_deref(), Some("cus_Sql4"));

    for bad in ["4242424242424242", "cus 1", "", "cus_é"] {
        let err = sqlx::query(
            "SELECT * FROM cobro.enqueue_charge('sql-5', 100, 'USD', NULL, 'pm_x', 'app', $1)",
        )
        .bind(bad)
        .execute(pool)
        .await
        .unwrap_err();
        let d = err.as_database_error().expect("a database error");
        assert_eq!(d.code().as_deref(), Some("22023"), "{bad:?}: {d}");
        assert_eq!(
            d.message(),
            Customer::parse(bad).unwrap_err().to_string(),
            "the same words as the Rust parser for {bad:?}"
        );
    }
    let problem: Option<String> =
        sqlx::query_scalar("SELECT cobro.charge_input_problem('o', 1, 'USD', NULL, 'pm', $1)")
            .bind("4242424242424242")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(
        problem.as_deref(),
        Some("invalid customer: looks like a card number; send the gateway's customer id instead")
    );
    assert_eq!(customer("sql-4").await.as_deref(), Some("cus_Sql4"));
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM cobro.payment_attempts")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(n, 4, "nothing written by a refusal");
    db.drop_db().await;
}
