//! Retention: webhook event ids and rejected deliveries are purged once
//! older than the retention period, by the store in bounded batches and by
//! every worker on its own; attempts, transitions and checks never are. A
//! retention shorter than the gateway's 3-day retry window is refused.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::domain::ChargeRequest;
use cobro::state::State;
use cobro::store::{EventOutcome, IncomingEvent, Purged, Store, WebhookResult};
use common::*;
use uuid::Uuid;

on_both_dbs!(
    old_webhook_records_are_purged_recent_ones_kept_and_the_money_trail_untouched,
    a_worker_purges_old_webhook_records_on_its_own,
    finished_wake_up_jobs_are_purged_and_live_ones_kept,
);

const DAY: Duration = Duration::from_secs(86_400);

fn approved(event_id: &str, key: Uuid) -> IncomingEvent {
    IncomingEvent {
        event_id: event_id.into(),
        event_type: "charge.succeeded".into(),
        key: Some(key),
        outcome: EventOutcome::Approved {
            charge_id: "ch_retention".into(),
        },
        said: Default::default(),
        payload: "{}".into(),
    }
}

/// Ages the event `id` by `days` days.
async fn age_event(db: &TestDb, id: &str, days: &str) {
    let n = db
        .exec(
            "UPDATE cobro.webhook_events SET received_at = received_at - make_interval(days => $2::int)
              WHERE event_id = $1",
            "UPDATE webhook_events SET received_at = received_at - CAST(?2 AS INTEGER) * 86400000
              WHERE event_id = ?1",
            &[id, days],
        )
        .await
        .unwrap();
    assert_eq!(n, 1, "{id}");
}

/// Ages the rejected deliveries whose detail is `detail` by `days` days.
async fn age_rejected(db: &TestDb, detail: &str, days: &str) {
    db.exec(
        "UPDATE cobro.rejected_webhooks SET received_at = received_at - make_interval(days => $2::int)
          WHERE detail = $1",
        "UPDATE rejected_webhooks SET received_at = received_at - CAST(?2 AS INTEGER) * 86400000
          WHERE detail = ?1",
        &[detail, days],
    )
    .await
    .unwrap();
}

/// Stores a rejected delivery as the sample of its own minute (one row
/// per reason and minute is kept), so every call adds a row.
async fn reject(store: &Store, detail: &str) {
    static MINUTE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
    let minute = MINUTE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    store
        .record_rejected_webhook(
            "bad_signature",
            Some(detail),
            &serde_json::json!({}),
            10,
            minute,
        )
        .await
        .unwrap();
}

async fn event_ids(db: &TestDb) -> Vec<String> {
    let sql = db.sql(
        "SELECT event_id FROM cobro.webhook_events ORDER BY event_id",
        "SELECT event_id FROM webhook_events ORDER BY event_id",
    );
    match b_pool(db) {
        Pool::Pg(p) => sqlx::query_scalar(sql).fetch_all(p).await.unwrap(),
        Pool::Lite(p) => sqlx::query_scalar(sql).fetch_all(p).await.unwrap(),
    }
}

enum Pool<'a> {
    Pg(&'a sqlx::PgPool),
    Lite(&'a sqlx::SqlitePool),
}

fn b_pool(db: &TestDb) -> Pool<'_> {
    match (db.store.pg_pool(), db.store.sqlite_pool()) {
        (Some(p), _) => Pool::Pg(p),
        (None, Some(p)) => Pool::Lite(p),
        (None, None) => panic!("no pool"),
    }
}

async fn old_webhook_records_are_purged_recent_ones_kept_and_the_money_trail_untouched(
    db: &TestDb,
) {
    let req = ChargeRequest::parse("r-1", 2_000, "USD", None, None).unwrap();
    let enq = db.store.enqueue(&req).await.unwrap();
    let key = enq.idempotency_key.uuid();

    // The first event approves the attempt; the others are late news.
    let ids = ["evt-old-1", "evt-old-2", "evt-old-3", "evt-29d", "evt-new"];
    for id in ids {
        db.store
            .record_webhook(&approved(id, key), None)
            .await
            .unwrap();
    }
    for id in &ids[..3] {
        age_event(db, id, "31").await;
    }
    age_event(db, "evt-29d", "29").await;
    for detail in ["old", "old", "old", "new"] {
        reject(&db.store, detail).await;
    }
    age_rejected(db, "old", "40").await;

    let (attempt, _) = db.store.load(enq.attempt_id).await.unwrap();
    assert_eq!(attempt.state, State::Aprobado);
    let transitions = db.store.transition_rows().await.unwrap();
    let attempts = db.attempts().await;
    assert_eq!(db.store.webhook_counts().await.unwrap(), (5, 4));

    // Batches of 2, so the purge has to loop.
    let purged = db
        .store
        .purge_webhooks_in_batches(30 * DAY, 2)
        .await
        .unwrap();
    assert_eq!(
        purged,
        Purged {
            events: 3,
            rejected: 3
        }
    );
    assert_eq!(event_ids(db).await, ["evt-29d", "evt-new"]);
    assert_eq!(db.store.webhook_counts().await.unwrap(), (2, 1));
    assert_eq!(db.store.rejected_webhook_reasons().await.unwrap().len(), 1);
    // The money trail is untouched.
    assert_eq!(db.store.transition_rows().await.unwrap(), transitions);
    assert_eq!(db.attempts().await, attempts);
    let (after, _) = db.store.load(enq.attempt_id).await.unwrap();
    assert_eq!(after, attempt);
    assert_eq!(
        db.store.transitions(enq.attempt_id).await.unwrap().len() as i64,
        transitions
    );

    // Nothing more to purge.
    assert_eq!(
        db.store.purge_webhooks(30 * DAY).await.unwrap(),
        Purged::default()
    );
    // A purged id delivered again (it cannot be, past the gateway's retry
    // window) is stored as new, and the state machine still refuses it.
    let again = db
        .store
        .record_webhook(&approved("evt-old-1", key), None)
        .await
        .unwrap();
    assert!(matches!(again, WebhookResult::Noop { .. }), "{again:?}");
    assert_eq!(db.store.transition_rows().await.unwrap(), transitions);
}

async fn a_worker_purges_old_webhook_records_on_its_own(db: &TestDb) {
    let req = ChargeRequest::parse("r-2", 2_000, "USD", None, None).unwrap();
    let key = db.store.enqueue(&req).await.unwrap().idempotency_key.uuid();
    db.store
        .record_webhook(&approved("evt-ancient", key), None)
        .await
        .unwrap();
    db.store
        .record_webhook(&approved("evt-recent", key), None)
        .await
        .unwrap();
    age_event(db, "evt-ancient", "45").await;
    reject(&db.store, "old").await;
    age_rejected(db, "old", "45").await;

    // Nothing is charged here, so no gateway is needed.
    let mut args = worker_args(&db.url, "http://127.0.0.1:9");
    args.retention.retention_interval = Duration::from_millis(200);
    let worker = spawn_worker(args);
    eventually(Duration::from_secs(20), "the worker's purge", || async {
        (db.store.webhook_counts().await.unwrap() == (1, 0)).then_some(())
    })
    .await;
    assert_eq!(event_ids(db).await, ["evt-recent"]);
    worker.stop().await;
}

#[tokio::test]
async fn a_retention_shorter_than_the_gateway_retry_window_is_refused() {
    let mut args = worker_args("sqlite://never-opened.db", "http://127.0.0.1:9");
    args.retention.webhook_retention = 2 * DAY;
    let err = args.validate().unwrap_err().to_string();
    assert!(err.contains("COBRO_WEBHOOK_RETENTION"), "{err}");
    assert!(err.contains("3 days"), "{err}");
    let err = cobro::runtime::run(args, std::future::pending())
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("COBRO_WEBHOOK_RETENTION"),
        "{err:#}"
    );
    assert!(!std::path::Path::new("never-opened.db").exists());

    // The binary refuses it too, before touching the database.
    let dir = std::env::temp_dir().join(format!("cobro-ret-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = bare_worker(&format!("sqlite://{}", dir.join("c.db").display()))
        .env("COBRO_GATEWAY", "sim")
        .env("GATEWAY_URL", "http://127.0.0.1:9")
        .env("COBRO_WEBHOOK_RETENTION", "48h")
        .output()
        .expect("run cobro-worker");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("COBRO_WEBHOOK_RETENTION"), "{stderr}");
    assert!(stderr.contains("at least 3 days"), "{stderr}");
    assert!(!dir.join("c.db").exists(), "no database was created");
    let _ = std::fs::remove_dir_all(&dir);

    // 3 days exactly is allowed, and so is the default.
    args_ok("72h");
    args_ok("30d");
}

fn args_ok(retention: &str) {
    let mut args = worker_args("sqlite://x.db", "http://127.0.0.1:9");
    args.retention.webhook_retention = cobro::backoff::parse_duration(retention).unwrap();
    assert!(args.validate().is_ok(), "{retention}");
}

/// Finished wake-ups (apalis' `jobs`) go after `COBRO_JOB_RETENTION`; a
/// wake-up still due stays, and the attempts keep everything.
async fn finished_wake_up_jobs_are_purged_and_live_ones_kept(db: &TestDb) {
    let (_sim, worker) = sim_and_worker(db, cobro::sim::Faults::default()).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let req = cobro::domain::ChargeRequest::parse(&format!("jobs-{i}"), 100, "EUR", None, None)
            .unwrap();
        ids.push(db.store.enqueue(&req).await.unwrap().attempt_id);
    }
    for id in &ids {
        settled(
            &db.store,
            *id,
            cobro::state::State::Aprobado,
            Duration::from_secs(10),
        )
        .await;
    }
    worker.stop().await;
    let (finished, live) = (
        (
            "SELECT count(*) FROM apalis.jobs WHERE status IN ('Done', 'Killed')",
            "SELECT count(*) FROM Jobs WHERE status IN ('Done', 'Killed')",
        ),
        (
            "SELECT count(*) FROM apalis.jobs WHERE status IN ('Pending', 'Queued', 'Running')",
            "SELECT count(*) FROM Jobs WHERE status IN ('Pending', 'Queued', 'Running')",
        ),
    );
    // One more charge, not handled (the worker is gone): its wake-up waits.
    let waiting =
        cobro::domain::ChargeRequest::parse("jobs-waiting", 100, "EUR", None, None).unwrap();
    db.store.enqueue(&waiting).await.unwrap();
    let done_before = db.scalar(finished.0, finished.1).await;
    assert!(
        done_before >= 5,
        "the handled wake-ups are finished: {done_before}"
    );
    assert_eq!(
        db.store.purge_finished_jobs(DAY).await.unwrap(),
        0,
        "none is a day old"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let purged = db.store.purge_finished_jobs(Duration::ZERO).await.unwrap();
    assert_eq!(purged as i64, done_before);
    assert_eq!(db.scalar(finished.0, finished.1).await, 0);
    assert!(
        db.scalar(live.0, live.1).await >= 1,
        "a wake-up still due is kept"
    );
    assert_eq!(db.attempts().await, 6, "the attempts are untouched");
}
