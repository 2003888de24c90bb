//! The `cobro` command line, run as a real process.

#[macro_use]
mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

on_both_dbs!(
    migrate_enqueue_and_status_from_the_command_line,
    finance_retries_a_declined_order_from_the_command_line,
    refunds_from_the_command_line,
    finance_works_the_escalation_queue_from_the_command_line,
    finance_pages_the_queue_and_checks_again_now_from_the_command_line,
);

async fn migrate_enqueue_and_status_from_the_command_line(db: &TestDb) {
    let out = cobro(&db.url, &["migrate"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Bad input: a clear error naming the field, nothing written.
    for (args, field) in [
        (
            vec!["--amount-minor", "0", "--currency", "USD"],
            "amount_minor",
        ),
        (
            vec!["--amount-minor", "-5", "--currency", "USD"],
            "amount_minor",
        ),
        (
            vec!["--amount-minor", "100", "--currency", "XYZ"],
            "currency",
        ),
        (
            vec![
                "--amount-minor",
                "100",
                "--currency",
                "USD",
                "--key",
                "nope",
            ],
            "idempotency_key",
        ),
    ] {
        let mut full = vec!["enqueue", "--order", "cli-1"];
        full.extend(args);
        let out = cobro(&db.url, &full);
        assert!(!out.status.success(), "{full:?} should fail");
        assert!(
            text(&out.stderr).contains(field),
            "{full:?}: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(db.attempts().await, 0);

    let key = "3e7d1c9a-2b4f-4a6e-8c0d-9f1e2a3b4c5d";
    let enqueue = [
        "enqueue",
        "--order",
        "cli-1",
        "--amount-minor",
        "1999",
        "--currency",
        "USD",
        "--key",
        key,
        "--json",
    ];
    let out = cobro(&db.url, &enqueue);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("enqueue --json");
    assert_eq!(v["idempotency_key"], key);
    assert_eq!(v["created"], true);
    assert_eq!(v["state"], "PENDIENTE");
    let id = v["attempt_id"].as_str().unwrap().to_owned();

    // The same command again: the same attempt, not a second one.
    let out = cobro(&db.url, &enqueue);
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (again["attempt_id"].as_str(), &again["created"]),
        (Some(id.as_str()), &serde_json::json!(false))
    );

    let out = cobro(&db.url, &["status", "--attempt", &id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["attempt"]["state"], "PENDIENTE");
    assert_eq!(v[0]["transitions"][0]["cause"], "enqueued");

    let out = cobro(&db.url, &["status", "--order", "cli-1"]);
    let human = text(&out.stdout);
    assert!(
        human.contains("state PENDIENTE") && human.contains("enqueued"),
        "{human}"
    );
}

#[tokio::test]
async fn the_gateway_simulator_runs_as_its_own_process() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut sim = Command::new(env!("CARGO_BIN_EXE_cobro"))
        .args([
            "gateway-sim",
            "--listen",
            &addr.to_string(),
            "--no-idempotency",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gateway-sim");
    let url = format!("http://{addr}");
    let health = eventually(
        Duration::from_secs(10),
        "the simulator to answer",
        || async {
            reqwest::get(format!("{url}/health"))
                .await
                .ok()
                .map(|r| r.status())
        },
    )
    .await;
    assert!(health.is_success());
    let body = serde_json::json!({"order_id": "o", "amount_minor": 100, "currency": "USD"});
    let client = reqwest::Client::new();
    for _ in 0..2 {
        let r = client
            .post(format!("{url}/v1/charges"))
            .header("Idempotency-Key", "3e7d1c9a-2b4f-4a6e-8c0d-9f1e2a3b4c5d")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(
        ledger(&url).await.entries.len(),
        2,
        "--no-idempotency: the memoryless gateway charges a replay again"
    );
    sim.kill().unwrap();
    let _ = sim.wait();
}

#[test]
fn the_web_process_refuses_to_start_without_a_proper_secret() {
    // Unset or empty is not a malformed secret: the webhook route is off
    // (tests/first_run.rs). A secret that is there must be proper.
    for (secret, why) in [
        ("whsec_", "empty after the prefix"),
        ("whsec_c2hvcnQ=", "5 bytes"),
        ("Sup3rS3cretValueWithoutPrefix42", "no prefix"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cobro"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("DATABASE_URL", "sqlite::memory:")
            .env("COBRO_WEBHOOK_SECRETS", secret)
            .output()
            .expect("run cobro serve");
        assert!(!out.status.success(), "{why}: it started");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("COBRO_WEBHOOK_SECRETS"), "{why}: {stderr}");
        for part in ["c2hvcnQ", "Sup3rS3cret"] {
            assert!(!stderr.contains(part), "{why}: the secret leaked: {stderr}");
        }
    }
}

async fn finance_retries_a_declined_order_from_the_command_line(db: &TestDb) {
    use cobro::state::Event;
    let req = cobro::domain::ChargeRequest::parse("cli-retry", 900, "USD", None, None).unwrap();
    let a = enqueued(&db.store, &req).await;
    let id = a.id;
    let a = step(&db.store, &a, Event::Claim, None).await;
    step(&db.store, &a, Event::Declined, Some("card_declined")).await;

    let args = [
        "retry",
        "--attempt",
        &id.to_string(),
        "--actor",
        "ana",
        "--json",
    ];
    let out = cobro(&db.url, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["attempt_number"], 2);
    assert_last_move(&db.store, id, "retry_requested", "manual:ana").await;
    // A worker looks it up and creates the retry it announced.
    let sim = start_sim(true, cobro::sim::Faults::default()).await;
    engine(&db.store, &sim.url(), "w")
        .process(id)
        .await
        .unwrap();
    let order = db.store.attempts_for_order("cli-retry").await.unwrap();
    let retry = order
        .iter()
        .find(|r| r.attempt_number == 2)
        .expect("the retry");
    assert_eq!(retry.idempotency_key.to_string(), v["idempotency_key"]);
    sim.shutdown().await;
    // Again: the order already has a live attempt.
    let out = cobro(&db.url, &args);
    assert_fails_saying(&out, "already has a live attempt");
}

async fn refunds_from_the_command_line(db: &TestDb) {
    use cobro::state::Event;
    let req = cobro::domain::ChargeRequest::parse("cli-refund", 900, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    let id_text = id.to_string();
    let refund = |amount: &str, key: &str| {
        let mut args = vec!["refund", "--attempt", &id_text, "--amount-minor", amount];
        if !key.is_empty() {
            args.extend(["--key", key]);
        }
        cobro(&db.url, &args)
    };
    // Not approved yet: refused, naming the state; nothing written.
    let out = refund("100", "");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("PENDIENTE") && err.contains("APROBADO"),
        "{err}"
    );
    assert_eq!(db.store.refunds_of(id).await.unwrap().len(), 0);

    let (a, _) = db.store.load(id).await.unwrap();
    let a = step(&db.store, &a, Event::Claim, None).await;
    step(&db.store, &a, Event::Approved, Some("ch_cli")).await;

    let out = refund("0", "");
    assert_fails_saying(&out, "amount_minor");

    let key = uuid::Uuid::new_v4().to_string();
    let first = refund("400", &key);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(text(&first.stdout).starts_with("refund requested"));
    let again = refund("400", &key);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(text(&again.stdout).starts_with("already requested"));
    let over = refund("501", "");
    assert_fails_saying(&over, "exceeds");
    assert_eq!(db.store.refunds_of(id).await.unwrap().len(), 1);
}

async fn finance_works_the_escalation_queue_from_the_command_line(db: &TestDb) {
    use cobro::state::Event;
    let req = cobro::domain::ChargeRequest::parse("cli-esc", 1_250, "USD", None, None).unwrap();
    let mut a = enqueued(&db.store, &req).await;
    let id = a.id;
    for event in [Event::Claim, Event::Unknown, Event::ChecksExhausted] {
        a = step(&db.store, &a, event, None).await;
    }
    let out = cobro(&db.url, &["escalations", "list", "--csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = text(&out.stdout);
    assert!(csv.starts_with("attempt_id,order_id,"), "{csv}");
    assert!(
        csv.contains(&format!(
            "{id},cli-esc,charge,EN_REVISION,en_revision,12.50,USD"
        )),
        "{csv}"
    );

    let id_text = id.to_string();
    let resolve = |version: i64| {
        let v = version.to_string();
        cobro(
            &db.url,
            &[
                "escalations",
                "resolve",
                "--attempt",
                &id_text,
                "--version",
                &v,
                "--as",
                "decline",
                "--code",
                "no_charge_found",
                "--by",
                "ana",
                "--note",
                "not in the gateway dashboard",
            ],
        )
    };
    let stale = resolve(a.version - 1);
    assert_fails_saying(&stale, "changed since you looked");
    // It was sent: the gateway may still be executing it, so the decline
    // is asked for, and a worker records it on the gateway's word.
    let ok = resolve(a.version);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let said = text(&ok.stdout);
    assert!(
        said.starts_with("decline requested: a worker looks it up at the gateway")
            && said.contains("cobro escalations show --attempt"),
        "{said}"
    );
    let (asked, _) = db.store.load(id).await.unwrap();
    assert_eq!(
        (asked.state, asked.decline_code),
        (cobro::state::State::EnRevision, None)
    );
    assert_last_move(&db.store, id, "finance_decline_requested", "finance:ana").await;
    let out = cobro(&db.url, &["escalations", "summary", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["queue"]["en_revision"], 1);
}

async fn finance_pages_the_queue_and_checks_again_now_from_the_command_line(db: &TestDb) {
    use cobro::state::Event;
    use cobro::store::{Applied, Change, Lease};
    let mut ids = Vec::new();
    for (order, currency) in [("cli-a", "USD"), ("cli-b", "EUR"), ("cli-c", "USD")] {
        let req = cobro::domain::ChargeRequest::parse(order, 1_000, currency, None, None).unwrap();
        let mut a = enqueued(&db.store, &req).await;
        let id = a.id;
        for event in [Event::Claim, Event::Unknown, Event::ChecksExhausted] {
            let mut c = Change::new(Some(event), "test", "test");
            match event {
                Event::Claim => {
                    c.lease = Lease::Take {
                        owner: "test",
                        ttl: Duration::from_secs(30),
                    }
                }
                Event::ChecksExhausted => c.act_in = Some(Duration::from_secs(3600)),
                _ => {}
            }
            let Applied::Moved(now) = db.store.apply(&a, &c).await.unwrap() else {
                panic!()
            };
            a = *now;
        }
        ids.push(id.to_string());
    }
    // A page of one, then the next page by its cursor: every item once.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["escalations", "list", "--json", "--limit", "1"];
        if let Some(a) = after.as_deref() {
            args.extend(["--after", a]);
        }
        let out = cobro(&db.url, &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["total"], 3, "{v}");
        seen.extend(
            v["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_str().unwrap().to_owned()),
        );
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_owned()),
            None => break,
        }
    }
    // (the same order as created, up to SQLite's millisecond ties)
    let mut sorted = seen.clone();
    sorted.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(sorted, want);
    let out = cobro(&db.url, &["escalations", "list", "--limit", "1"]);
    assert!(
        text(&out.stdout).contains("next page: --after "),
        "{}",
        text(&out.stdout)
    );

    let out = cobro(
        &db.url,
        &[
            "escalations",
            "check-now",
            "--currency",
            "USD",
            "--actor",
            "ana",
            "--note",
            "gateway incident over",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("scheduled 2 attempt(s) in review"),
        "{}",
        text(&out.stdout)
    );
    for (id, touched) in ids.iter().zip([true, false, true]) {
        let log = db.store.transitions(id.parse().unwrap()).await.unwrap();
        let last = log.last().unwrap();
        assert_eq!(
            (
                last.cause == "finance_check_now",
                last.actor.as_str() == "finance:ana"
            ),
            (touched, touched),
            "{id}"
        );
    }
    let out = cobro(
        &db.url,
        &["escalations", "check-now", "--by", "ana", "--note", " "],
    );
    assert_fails_saying(&out, "note");
}
