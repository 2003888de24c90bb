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

#[macro_use]
mod common;

use std::process::{Command, Output};
use std::time::Duration;

use cobro::domain::{
    AMOUNT_CEILING, Amount, ChargeRequest, DEFAULT_MAX_AMOUNT, MaxAmount, decimal,
};
use cobro::finance;
use cobro::state::{Event, State};
use cobro::store::{Attempt, Store};
use cobro::webhook::{Scheme, Verifier};
use common::*;
use serde_json::{Value, json};
use uuid::Uuid;

on_both_backends!(
    over_http_an_amount_above_the_maximum_is_refused_and_nothing_is_written,
    the_cli_refuses_an_amount_above_the_maximum_and_writes_nothing,
    the_library_stops_at_the_ceiling_or_at_its_own_limit,
    the_database_refuses_a_raw_insert_above_the_ceiling,
    the_summary_is_exact_with_amounts_at_the_ceiling,
    the_summary_stays_exact_past_the_range_of_i64,
    a_signed_webhook_carrying_nul_is_stored_once_and_applied_unless_in_an_id,
);

fn verifier(secret: &str) -> Verifier {
    Verifier::from_env_value(Scheme::StandardWebhooks, secret).unwrap()
}

async fn charge(store: &Store, order: &str, amount: i64) -> Attempt {
    let req = ChargeRequest::parse(order, amount, "USD", None, None).unwrap();
    let id = store.enqueue(&req).await.unwrap().attempt_id;
    store.load(id).await.unwrap().0
}

async fn approved(store: &Store, order: &str, amount: i64) -> Attempt {
    let a = charge(store, order, amount).await;
    let a = step(store, &a, Event::Claim, None).await;
    step(store, &a, Event::Approved, None).await
}

async fn in_review(store: &Store, order: &str, amount: i64) -> Attempt {
    let a = charge(store, order, amount).await;
    let a = step(store, &a, Event::Claim, None).await;
    let a = step(store, &a, Event::Unknown, None).await;
    step(store, &a, Event::ChecksExhausted, None).await
}

async fn post(url: String, key: &str, body: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .bearer_auth(secret("app"))
        .header("content-type", "application/json")
        .header("Idempotency-Key", key)
        .body(body.to_owned())
        .send()
        .await
        .expect("POST");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A refusal of `amount_minor` that says the maximum (and what sets it).
fn assert_refused(status: u16, reply: &Value, max: &str, set_by: &str, what: &str) {
    assert_eq!(status, 422, "{what}: {reply}");
    assert_eq!(reply["field"], "amount_minor", "{what}: {reply}");
    let msg = reply["error"].as_str().unwrap();
    assert!(
        msg.contains("amount_minor") && msg.contains(max) && msg.contains(set_by),
        "{what}: {msg}"
    );
}

async fn over_http_an_amount_above_the_maximum_is_refused_and_nothing_is_written(b: Backend) {
    let db = TestDb::new(b).await;
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
        assert_refused(
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
        assert_refused(
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
    assert_refused(status, &reply, "5000", "COBRO_MAX_AMOUNT_MINOR", "max 5000");
    let body = format!(
        r#"{{"attempt_id": "{}", "amount_minor": 5001}}"#,
        captured.id
    );
    let (status, reply) = post(format!("{}/refunds", web.url), KEY, &body).await;
    assert_refused(
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
    db.drop_db().await;
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

async fn the_cli_refuses_an_amount_above_the_maximum_and_writes_nothing(b: Backend) {
    let db = TestDb::new(b).await;
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
    db.drop_db().await;
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

async fn the_library_stops_at_the_ceiling_or_at_its_own_limit(b: Backend) {
    let db = TestDb::new(b).await;
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
    db.drop_db().await;
}

#[tokio::test]
async fn postgres_the_sql_functions_refuse_amounts_above_the_ceiling() {
    if common::skip_postgres("postgres_the_sql_functions_refuse_amounts_above_the_ceiling") {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
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

async fn the_database_refuses_a_raw_insert_above_the_ceiling(b: Backend) {
    let db = TestDb::new(b).await;
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
    db.drop_db().await;
}

/// The JSON text's `"amount_minor":<n>` values, as written (never through
/// an f64 or an i64).
fn json_amounts(json: &str) -> Vec<String> {
    json.split("\"amount_minor\":")
        .skip(1)
        .map(|rest| rest.chars().take_while(|c| c.is_ascii_digit()).collect())
        .collect()
}

async fn the_summary_is_exact_with_amounts_at_the_ceiling(b: Backend) {
    let db = TestDb::new(b).await;
    db.store.set_max_amount(MaxAmount::CEILING).await.unwrap();
    let n = 7;
    for i in 0..n {
        in_review(&db.store, &format!("b-sum-{i}"), AMOUNT_CEILING).await;
    }
    approved(&db.store, "b-sum-ok", AMOUNT_CEILING).await;
    let want = i128::from(AMOUNT_CEILING) * n;
    let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T08:00:00Z")
        .unwrap()
        .to_utc();
    let s = finance::summarize(&db.store, Duration::ZERO, at)
        .await
        .unwrap();
    let review = s
        .totals
        .iter()
        .find(|l| l.state == "EN_REVISION" && l.kind == "charge" && l.currency == "USD")
        .unwrap();
    assert_eq!((review.count, review.amount_minor), (n as i64, want));
    assert_eq!(review.amount, "69999999999.93");
    assert_eq!(review.amount, decimal(want, "USD"));
    assert_eq!(
        s.queue.amounts,
        [("USD".to_owned(), "69999999999.93".to_owned())]
    );
    assert_eq!(s.queue.en_revision, n as usize);
    let text = s.to_text();
    assert!(text.contains("in the queue: 69999999999.93 USD"), "{text}");
    assert!(text.contains("9999999999.99"), "{text}");
    let json = serde_json::to_string(&s).unwrap();
    assert!(json_amounts(&json).contains(&want.to_string()), "{json}");
    db.drop_db().await;
}

/// Rows above the ceiling cannot be written any more; this test takes the
/// guard off its own database to stand for amounts stored before it, and
/// shows the sums stay exact past `i64::MAX` (where PostgreSQL's bigint
/// cast, SQLite's sum() and an i64 `+=` all used to fail).
async fn the_summary_stays_exact_past_the_range_of_i64(b: Backend) {
    let db = TestDb::new(b).await;
    db.exec(
        "ALTER TABLE cobro.payment_attempts DROP CONSTRAINT payment_attempts_amount_minor_ceiling",
        "DROP TRIGGER amount_within_ceiling_on_insert",
        &[],
    )
    .await
    .unwrap();
    db.exec(
        "DROP TRIGGER charge_gate ON cobro.payment_attempts",
        "DROP TRIGGER charge_gate",
        &[],
    )
    .await
    .unwrap();
    let insert = |order: &'static str, state: &'static str| {
        let db = &db;
        async move {
            let (id, key) = (Uuid::new_v4().to_string(), Uuid::new_v4().to_string());
            db.exec(
                "INSERT INTO cobro.payment_attempts
                    (id, order_id, amount_minor, currency, idempotency_key, state)
                 VALUES ($3::uuid, $1, 9223372036854775807, 'USD', $4::uuid, $2)",
                "INSERT INTO payment_attempts
                    (id, order_id, amount_minor, currency, idempotency_key, state,
                     created_at, updated_at)
                 VALUES (?3, ?1, 9223372036854775807, 'USD', ?4, ?2, 0, 0)",
                &[order, state, &id, &key],
            )
            .await
        }
    };
    for order in ["b-big-1", "b-big-2", "b-big-3"] {
        insert(order, "EN_REVISION").await.unwrap();
    }
    insert("b-big-4", "RECHAZADO").await.unwrap();
    let want = i128::from(i64::MAX) * 3;
    let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T08:00:00Z")
        .unwrap()
        .to_utc();
    let s = finance::summarize(&db.store, Duration::ZERO, at)
        .await
        .unwrap();
    let review = s
        .totals
        .iter()
        .find(|l| l.state == "EN_REVISION" && l.currency == "USD")
        .unwrap();
    assert_eq!((review.count, review.amount_minor), (3, want));
    assert_eq!(review.amount, "276701161105643274.21");
    assert_eq!(
        s.queue.amounts,
        [("USD".to_owned(), "276701161105643274.21".to_owned())]
    );
    assert!(s.to_text().contains("276701161105643274.21"));
    let json = serde_json::to_string(&s).unwrap();
    assert!(json_amounts(&json).contains(&want.to_string()), "{json}");
    db.drop_db().await;
}

async fn stored(db: &TestDb, event_id: &str) -> (String, i64) {
    match db.backend {
        Backend::Postgres => sqlx::query_as(
            "SELECT payload, count(*) OVER () FROM cobro.webhook_events WHERE event_id = $1",
        )
        .bind(event_id)
        .fetch_one(db.store.pg_pool().unwrap())
        .await
        .unwrap(),
        Backend::Sqlite => sqlx::query_as(
            "SELECT payload, count(*) OVER () FROM webhook_events WHERE event_id = ?1",
        )
        .bind(event_id)
        .fetch_one(db.store.sqlite_pool().unwrap())
        .await
        .unwrap(),
    }
}

async fn a_signed_webhook_carrying_nul_is_stored_once_and_applied_unless_in_an_id(b: Backend) {
    let db = TestDb::new(b).await;
    let secret = test_secret();
    let v = verifier(&secret);
    let web = start_web(&db.store, verifier(&secret)).await;
    let send = |id: &str, body: &[u8]| {
        let headers = v.sign(id, chrono::Utc::now().timestamp(), body);
        let mut req = reqwest::Client::new()
            .post(format!("{}/webhooks/gateway", web.url))
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (k, val) in headers {
            req = req.header(k, val);
        }
        async move {
            let resp = req.send().await.expect("POST /webhooks/gateway");
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };

    // A decline whose code and metadata carry NUL (serde_json writes it as
    // the escape \u0000, which PostgreSQL's jsonb refuses).
    let declined = charge(&db.store, "b-nul-1", 1_999).await;
    let body = json!({
        "id": "evt_nul_1", "type": "charge.failed", "created": chrono::Utc::now().timestamp(),
        "data": {"charge_id": "ch_nul_1", "idempotency_key": declined.idempotency_key,
                 "status": "declined", "decline_code": "card\0declined",
                 "metadata": {"note": "before\0after"}}
    })
    .to_string();
    assert!(body.contains(r"card\u0000declined") && body.contains(r"before\u0000after"));
    let (status, reply) = send("evt_nul_1", body.as_bytes()).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["outcome"]["result"], "applied", "{reply}");
    assert_eq!(reply["outcome"]["to"], "RECHAZADO", "{reply}");
    let (a, _) = db.store.load(declined.id).await.unwrap();
    assert_eq!(a.state, State::Rechazado);
    assert_eq!(a.decline_code.as_deref(), Some(r"card\u0000declined"));
    assert_eq!(stored(&db, "evt_nul_1").await, (body.clone(), 1));
    let (status, reply) = send("evt_nul_1", body.as_bytes()).await;
    assert_eq!(
        (status, reply["outcome"]["result"].as_str()),
        (200, Some("duplicate")),
        "{reply}"
    );

    // NUL in the event id, or in the charge id of an approval: an id is
    // never altered (a refund or a lookup by it would miss), so the event
    // is malformed; the worker's own lookup settles the attempt.
    let not_by_hook = charge(&db.store, "b-nul-2", 2_999).await;
    let msg_id = "msg_nul_2"; // a header cannot carry NUL; the JSON id can
    for (id, charge_id) in [("evt_nul\u{0}2", "ch_nul_2"), ("evt_nul_3", "ch_nul\u{0}3")] {
        let body = json!({
            "id": id, "type": "charge.succeeded",
            "data": {"charge_id": charge_id, "idempotency_key": not_by_hook.idempotency_key,
                     "status": "approved", "metadata": {"note": "\u{0}"}}
        })
        .to_string();
        let (status, reply) = send(msg_id, body.as_bytes()).await;
        assert_eq!(status, 400, "{reply}");
        let error = reply["error"].as_str().unwrap();
        assert!(
            error.starts_with("malformed_body: ")
                && error.contains("holds the control character U+0000")
                && error.contains(r"\u0000"),
            "{reply}"
        );
    }
    let (a, _) = db.store.load(not_by_hook.id).await.unwrap();
    assert_eq!(a.state, State::Pendiente);
    assert_eq!(a.gateway_charge_id, None);

    let (accepted, rejected) = db.store.webhook_counts().await.unwrap();
    assert_eq!(accepted, 1, "only the decline was stored");
    // One sample row per reason per minute (two if the minute turned).
    assert!((1..=2).contains(&rejected), "{rejected}");
    let causes: Vec<String> = db
        .store
        .transitions(declined.id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.cause)
        .collect();
    assert_eq!(causes, ["enqueued", "webhook_declined"]);
    web.stop().await;
    db.drop_db().await;
}
