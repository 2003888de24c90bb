//! Customer notices delivered (issue 14, item 2): a real worker declines
//! and approves charges against the simulator, and delivers every outbox
//! notice to a receiver that verifies it with the official Standard
//! Webhooks library for Python (`tests/notice_receiver.py`, a real process
//! on 127.0.0.1). Each notice arrives once after deduplication by
//! `webhook-id`, one is redelivered after two 500s, one that always gets
//! 500 ends `failed` with `cobro_notices_failed` showing it. Two workers
//! never hold one notice at once.
//! Without Python's `standardwebhooks` the receiver test says SKIPPED,
//! unless `CI` is set: then it fails.

#[macro_use]
mod common;
#[path = "common/declines.rs"]
mod declines;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::store::Notice;
use common::python;
use common::*;
use declines::*;
use serde_json::{Value, json};

on_both_dbs!(
    notices_reach_a_verifying_receiver_once_redelivered_after_500s_and_failed_after_the_last_try,
    two_workers_never_claim_one_notice_and_only_the_claim_holder_records,
);

fn python_library_available() -> bool {
    python::python_with("standardwebhooks").is_some()
}

/// The interpreter that imports `standardwebhooks` (after [`python_library_available`]).
fn py() -> std::path::PathBuf {
    python::python_with("standardwebhooks").expect("python_library_available() first")
}

/// The receiver process; killed when dropped.
struct Receiver {
    child: Child,
    url: String,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_receiver(secret: &str, plan: &Value) -> Receiver {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/notice_receiver.py");
    let mut child = Command::new(py())
        .arg(script)
        .env("NOTICE_SECRET", secret)
        .env("NOTICE_PLAN", plan.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start python3 tests/notice_receiver.py");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the receiver prints its port");
    let port: u16 = line.trim().parse().expect("a port number");
    Receiver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

async fn report(r: &Receiver) -> Value {
    reqwest::get(format!("{}/report", r.url))
        .await
        .expect("GET /report")
        .json()
        .await
        .expect("report json")
}

fn notice_of<'a>(all: &'a [Notice], order: &str, kind: &str) -> &'a Notice {
    all.iter()
        .find(|n| n.order_id == order && n.kind == kind)
        .unwrap_or_else(|| panic!("a {kind} notice for {order} in {all:#?}"))
}

async fn metric(web: &Web, name: &str) -> f64 {
    let text = web.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} in\n{text}"))
        .parse()
        .unwrap()
}

async fn notices_reach_a_verifying_receiver_once_redelivered_after_500s_and_failed_after_the_last_try(
    db: &TestDb,
) {
    if !python_library_available() {
        return;
    }
    let secret = test_secret();
    let receiver = start_receiver(
        &secret,
        &json!({
            "fail_twice": ["n-stolen"],
            "always_fail": ["n-expired"],
            "slow_once": ["n-funds"],
            "slow_seconds": 6,
        }),
    );
    let sim = start_sim(true, Faults::default()).await;
    let mut args = worker_args(&db.url, &sim.url());
    args.notify.notice_url = Some(format!("{}/notices", receiver.url));
    args.notify.notice_secret = Some(secret.clone());
    // The production shape (retries, then failed) scaled down: three tries.
    args.notify.notice_schedule = "100ms,200ms".into();
    args.notify.notice_timeout = Duration::from_secs(4);
    args.notify.notice_poll = Duration::from_millis(100);
    let worker = spawn_worker(args);
    let web = web_on(&db.store).await;

    // A retryable decline (a retry scheduled), two final ones.
    decline_with(&sim.url(), "insufficient_funds").await;
    let funds = declined(&db.store, "n-funds", None).await;
    assert!(
        funds.next_action_at.is_some(),
        "a business retry is scheduled"
    );
    decline_with(&sim.url(), "stolen_card").await;
    declined(&db.store, "n-stolen", None).await;
    decline_with(&sim.url(), "expired_card").await;
    declined(&db.store, "n-expired", None).await;
    // The retry is approved: one more notice.
    set_faults(&sim.url(), &Faults::default()).await;
    due_now(db, funds.id).await;

    let all = eventually(Duration::from_secs(30), "every notice settled", || async {
        let all = db.store.notices(false).await.unwrap();
        let settled = all.len() == 4
            && all
                .iter()
                .all(|n| n.delivered_at.is_some() || n.failed_at.is_some());
        settled.then_some(all)
    })
    .await;
    let scheduled = notice_of(&all, "n-funds", "retry_scheduled");
    let approved = notice_of(&all, "n-funds", "approved_after_retry");
    let stolen = notice_of(&all, "n-stolen", "payment_failed");
    let expired = notice_of(&all, "n-expired", "payment_failed");

    // The outbox: delivered ones acknowledged by delivery; the 500×2 one on
    // its third try; the always-500 one failed after the last of three.
    for n in [scheduled, approved, stolen] {
        assert!(n.delivered_at.is_some(), "{n:#?}");
        assert_eq!(n.acked_by.as_deref(), Some("delivery"));
        assert_eq!(n.failed_at, None);
    }
    assert_eq!(stolen.delivery_attempts, 3, "delivered on the third try");
    assert_eq!(
        scheduled.delivery_attempts, 2,
        "the slow answer timed out once"
    );
    assert_eq!(approved.delivery_attempts, 1);
    assert!(expired.failed_at.is_some() && expired.delivered_at.is_none());
    assert_eq!(expired.delivery_attempts, 3, "every try of the schedule");
    assert_eq!(expired.last_status, Some(500));
    assert!(
        expired
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("HTTP 500")),
        "{expired:#?}"
    );
    assert_eq!(expired.acked_at, None);

    // The receiver: everything verified by the Python library; each
    // delivered notice once after deduplication, by its stable webhook-id.
    let r = report(&receiver).await;
    assert_eq!(r["rejected"], json!([]), "every signature verified");
    let id = |n: &Notice| format!("notice_{}", n.id);
    let mut ids: Vec<String> = serde_json::from_value(r["ids"].clone()).unwrap();
    ids.sort();
    let mut want = vec![id(scheduled), id(approved), id(stolen)];
    want.sort();
    assert_eq!(ids, want, "each delivered notice exactly once after dedupe");
    assert_eq!(r["tries"][id(stolen)], 3, "500, 500, then delivered");
    assert_eq!(r["tries"][id(expired)], 3, "500 to every try");
    assert!(
        r["duplicates"][id(scheduled)].as_i64().unwrap_or(0) >= 1,
        "the slow answer's notice came again and was deduplicated: {r}"
    );
    assert_eq!(r["tries"][id(approved)], 1);

    // What the app writes to its customer.
    let body = |n: &Notice| {
        r["received"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["data"]["notice_id"] == n.id)
            .cloned()
            .unwrap()
    };
    let p = body(scheduled);
    assert_eq!(p["type"], "payment.retry_scheduled");
    let d = &p["data"];
    assert_eq!(
        (d["order_id"].as_str(), d["amount_minor"].as_i64()),
        (Some("n-funds"), Some(2_500))
    );
    assert_eq!(d["currency"], "EUR");
    assert_eq!(d["attempt_id"], json!(funds.id));
    assert_eq!(d["decline_code"], "insufficient_funds");
    assert_eq!(d["decline_category"], "insufficient_funds");
    assert!(d["next_retry_at"].is_string(), "{p}");
    assert_eq!(d["update_payment_method"], false);
    let p = body(stolen);
    assert_eq!(p["type"], "payment.failed");
    assert_eq!(p["data"]["decline_category"], "card_lost_stolen_or_fraud");
    assert_eq!(p["data"]["next_retry_at"], Value::Null);
    assert_eq!(p["data"]["update_payment_method"], true);
    assert!(
        p["data"]["what_happened"]
            .as_str()
            .unwrap()
            .contains("final")
    );
    let p = body(approved);
    assert_eq!(p["type"], "payment.approved_after_retry");
    assert_eq!(p["data"]["attempt_number"], 2);

    // The gauges, read from the rows: one failed, one not acknowledged.
    assert_eq!(metric(&web, "cobro_notices_failed").await, 1.0);
    assert_eq!(metric(&web, "cobro_notices_pending").await, 1.0);
    // The manual acknowledgement still works, and clears the failed one.
    assert!(db.store.ack_notice(expired.id, "ops:ana").await.unwrap());
    assert_eq!(metric(&web, "cobro_notices_failed").await, 0.0);
    assert!(
        !db.store.ack_notice(stolen.id, "ops:ana").await.unwrap(),
        "a delivered notice is already acknowledged"
    );

    worker.stop().await;
    web.stop().await;
    sim.shutdown().await;
}

/// Two workers claiming at once get disjoint notices; a claimed notice is
/// not due for anyone else; after a claim expires another worker takes the
/// notice, and the first holder's late result is not recorded.
async fn two_workers_never_claim_one_notice_and_only_the_claim_holder_records(db: &TestDb) {
    use cobro::state::Event;
    use cobro::store::TryOutcome;
    let declined_for_good = |order: String| {
        let store = db.store.clone();
        async move {
            let req = ChargeRequest::parse(&order, 700, "USD", None, None).unwrap();
            let a = enqueued(&store, &req).await;
            let a = step(&store, &a, Event::Claim, None).await;
            step(&store, &a, Event::Declined, Some("stolen_card")).await
        }
    };
    for i in 0..12 {
        declined_for_good(format!("claim-{i}")).await;
    }
    let hold = Duration::from_secs(30);
    let (x, y) = futures::join!(
        db.store.claim_notices(hold, 8),
        db.store.claim_notices(hold, 8)
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    let mut ids: Vec<i64> = x.iter().chain(&y).map(|n| n.notice.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        12,
        "every notice claimed once: {} + {}",
        x.len(),
        y.len()
    );
    assert_eq!(x.len() + y.len(), 12, "no notice in both claims");
    assert!(
        db.store.claim_notices(hold, 50).await.unwrap().is_empty(),
        "claimed ones are not due"
    );

    declined_for_good("claim-late".into()).await;
    let first = db.store.claim_notices(Duration::ZERO, 1).await.unwrap();
    let second = db.store.claim_notices(hold, 1).await.unwrap();
    assert_eq!((first.len(), second.len()), (1, 1));
    assert_eq!(
        first[0].notice.id, second[0].notice.id,
        "an expired claim is free again"
    );
    let delivered = TryOutcome::Delivered { status: 200 };
    assert!(
        !db.store
            .record_notice_try(&first[0], delivered)
            .await
            .unwrap(),
        "the first claim was lost"
    );
    assert!(
        db.store
            .record_notice_try(&second[0], delivered)
            .await
            .unwrap()
    );
    let all = db.store.notices(false).await.unwrap();
    let late = all.iter().find(|n| n.order_id == "claim-late").unwrap();
    assert_eq!(
        (late.delivery_attempts, late.acked_by.as_deref()),
        (1, Some("delivery"))
    );
}
