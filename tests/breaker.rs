//! The gateway circuit breaker and the shared rate limit, end to end with
//! real workers and the simulator on 127.0.0.1, on both backends.
//!
//! - An outage (every call answers 503) longer than the whole check
//!   schedule: the breaker opens, attempts are parked with their check and
//!   send counts unchanged, nothing reaches finance, the state shows on
//!   `/metrics`, the finance page and in the store; when the gateway
//!   answers a probe, the parked attempts resume at the configured pace and
//!   each order is charged exactly once. The same outage without the
//!   breaker sends attempts to `EN_REVISION` (so the first test can fail).
//! - Two workers under a shared limit of 10 requests/s never trip a
//!   gateway that throttles above 20/s; without the limit they do.

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::State;
use cobro::store::Attempt;
use common::*;
use uuid::Uuid;

on_both_dbs!(
    without_the_breaker_the_same_outage_sends_attempts_to_finance,
    without_the_limit_the_same_load_is_throttled,
    cobro_status_shows_the_breaker_and_what_waits_for_it,
    ; by_backend:
    an_outage_longer_than_the_schedule_parks_attempts_and_resumes_them_paced,
    two_workers_share_one_rate_limit_and_are_never_throttled,
);

const ORDERS: usize = 12;

async fn enqueue(db: &TestDb, prefix: &str, n: usize) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for i in 0..n {
        let req = ChargeRequest::parse(
            &format!("{prefix}-{i}"),
            1_000 + i as i64,
            "EUR",
            None,
            Some("pm_ok"),
        )
        .unwrap();
        ids.push(db.store.enqueue(&req).await.unwrap().attempt_id);
    }
    ids
}

async fn all(db: &TestDb, ids: &[Uuid]) -> Vec<Attempt> {
    let mut out = Vec::new();
    for id in ids {
        out.push(db.store.load(*id).await.unwrap().0);
    }
    out
}

/// Waits (up to `limit`) for every one of `ids` to be approved; returns them.
async fn all_approved(db: &TestDb, ids: &[Uuid], limit: Duration) -> Vec<Attempt> {
    eventually(limit, "every order approved", || async {
        let now = all(db, ids).await;
        now.iter()
            .all(|a| a.state == State::Aprobado)
            .then_some(now)
    })
    .await
}

/// The scaled check schedule (200 ms … 3.2 s) ends in 6.2 s nominal, 9.3 s
/// at most with jitter: the outage lasts longer than that.
const OUTAGE_PAST_SCHEDULE: Duration = Duration::from_secs(10);

async fn an_outage_longer_than_the_schedule_parks_attempts_and_resumes_them_paced(b: Backend) {
    let (db, sim) = db_and_sim(b, outage()).await;
    let mut args = worker_args(&db.url, &sim.url());
    args.breaker.breaker_failures = 3;
    args.breaker.breaker_rewake_per_s = 4;
    let worker = spawn_worker(args);
    let ids = enqueue(&db, "down", ORDERS).await;

    // Every attempt ends up parked: sent once at most, nothing decided.
    let parked = eventually(Duration::from_secs(20), "every attempt parked", || async {
        let now = all(&db, &ids).await;
        now.iter().all(|a| a.parked_since.is_some()).then_some(now)
    })
    .await;
    let health = db.store.gateway_health().await.unwrap();
    assert_eq!(health.parked, ORDERS as i64);
    let (gateway, since) = health.open_since().expect("the breaker is open");
    let named = cobro::gateway::shown_url(&sim.url());
    assert_eq!(gateway, named);
    assert!(health.oldest_parked.unwrap() >= since - chrono::Duration::seconds(5));
    for a in &parked {
        assert!(
            matches!(a.state, State::Pendiente | State::Desconocido),
            "{a:?}"
        );
        assert!(a.send_count <= 1, "re-sent during the outage: {a:?}");
    }

    // The state is on /metrics and on finance's page.
    let scrape = cobro::metrics::Scraper::new(db.store.clone(), Duration::ZERO)
        .render()
        .await;
    assert!(
        scrape.contains(&format!(
            "cobro_gateway_breaker_open{{gateway=\"{named}\"}} 1"
        )),
        "{scrape}"
    );
    assert!(
        scrape.contains(&format!("cobro_attempts_parked {ORDERS}")),
        "{scrape}"
    );
    let web = web_on(&db.store).await;
    let page = get_text(&format!("{}/finance", web.url), As::Basic("ana")).await;
    assert!(
        page.contains(&format!(
            "unreachable since {}",
            since.format("%H:%M UTC on %Y-%m-%d")
        )) && page.contains(&format!("{ORDERS} attempt(s) waiting")),
        "{page}"
    );
    web.stop().await;

    // Longer than the whole check schedule: no check spent, nothing sent,
    // nothing to finance.
    let calls_before = ledger(&sim.url()).await.stats;
    tokio::time::sleep(OUTAGE_PAST_SCHEDULE).await;
    let after = all(&db, &ids).await;
    for (was, now) in parked.iter().zip(&after) {
        assert_eq!(now.state, was.state, "{now:?}");
        assert_eq!(
            now.check_count, was.check_count,
            "a check was spent: {now:?}"
        );
        assert_eq!(now.send_count, was.send_count, "{now:?}");
        assert!(now.parked_since.is_some());
    }
    let calls_after = ledger(&sim.url()).await.stats;
    assert_eq!(calls_after.charge_requests, calls_before.charge_requests);
    // Only the probes looked anything up: one per 300 ms at most, across
    // the whole outage (plus one per worker poll of slack).
    let probes = calls_after.lookup_requests - calls_before.lookup_requests;
    assert!(
        (1..=40).contains(&probes),
        "{probes} lookups in {OUTAGE_PAST_SCHEDULE:?}"
    );

    // The gateway answers again: a probe closes the breaker and the parked
    // attempts resume at 4 per second, each charged once.
    set_faults(&sim.url(), &Faults::default()).await;
    let back = Instant::now();
    let done = all_approved(&db, &ids, Duration::from_secs(30)).await;
    let recovery = back.elapsed();
    let book = ledger(&sim.url()).await;
    let per_order = approved_per_order(&book);
    assert_eq!(per_order.len(), ORDERS);
    assert!(per_order.values().all(|n| *n == 1), "{per_order:?}");
    assert!(done.iter().all(|a| a.parked_since.is_none()));
    // Paced: 12 attempts at 4 per second take at least two seconds from
    // the first re-wake to the last approval.
    let mut approved_at = Vec::new();
    for a in &done {
        let log = db.store.transitions(a.id).await.unwrap();
        approved_at.push(log.last().unwrap().at);
    }
    let first = *approved_at.iter().min().unwrap();
    let last = *approved_at.iter().max().unwrap();
    assert!(
        last - first >= chrono::Duration::milliseconds(2_000),
        "re-woken at once: approvals spread over {} ms",
        (last - first).num_milliseconds()
    );
    eprintln!(
        "{b:?}: {ORDERS} parked attempts approved {:.1} s after the gateway came back (spread {} ms)",
        recovery.as_secs_f64(),
        (last - first).num_milliseconds()
    );
    let events = db.store.breaker_events(&named).await.unwrap();
    let states: Vec<&str> = events.iter().map(|(s, _, _)| s.as_str()).collect();
    assert_eq!(states, ["open", "closed"], "{events:?}");
    assert!(
        db.store
            .transitions(done[0].id)
            .await
            .unwrap()
            .iter()
            .all(|t| t.to_state != "EN_REVISION")
    );
    worker.stop().await;
    db.drop_db().await;
}

async fn without_the_breaker_the_same_outage_sends_attempts_to_finance(db: &TestDb) {
    let sim = start_sim(true, outage()).await;
    let mut args = worker_args(&db.url, &sim.url());
    args.breaker.breaker_failures = 0;
    let worker = spawn_worker(args);
    let ids = enqueue(db, "nobreaker", 4).await;
    eventually(
        OUTAGE_PAST_SCHEDULE + Duration::from_secs(10),
        "attempts in finance's queue",
        || async {
            let now = all(db, &ids).await;
            now.iter()
                .any(|a| a.state == State::EnRevision)
                .then_some(())
        },
    )
    .await;
    assert_eq!(db.store.gateway_health().await.unwrap().parked, 0);
    worker.stop().await;
}

/// A gateway that answers 429 above 20 requests/s (bursts of 5): twice
/// the workers' limit, so only a request delayed by half a second on its
/// way (a loaded machine) could bunch up with the next ones past it.
fn throttling() -> Faults {
    Faults {
        rate_limit_per_s: 20.0,
        rate_limit_burst: 5,
        ..Faults::default()
    }
}

const LOAD: usize = 40;

async fn two_workers_share_one_rate_limit_and_are_never_throttled(b: Backend) {
    let (db, sim) = db_and_sim(b, throttling()).await;
    let ids = enqueue(&db, "paced", LOAD).await;
    let started = Instant::now();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let mut args = worker_args(&db.url, &sim.url());
            args.breaker.gateway_rps = 10;
            args.breaker.gateway_burst = 1;
            spawn_worker(args)
        })
        .collect();
    all_approved(&db, &ids, Duration::from_secs(30)).await;
    let took = started.elapsed();
    let stats = ledger(&sim.url()).await.stats;
    assert_eq!(stats.throttled, 0, "the gateway throttled us: {stats:?}");
    assert_eq!(stats.charge_requests, LOAD as u64, "{stats:?}");
    // 40 requests at 10/s, one at a time, cannot take less than 3.9 s.
    assert!(took >= Duration::from_millis(3_800), "{took:?}");
    eprintln!("{b:?}: {LOAD} charges under a shared 10/s limit in {took:?}");
    for w in workers {
        w.stop().await;
    }
    db.drop_db().await;
}

async fn without_the_limit_the_same_load_is_throttled(db: &TestDb) {
    let sim = start_sim(true, throttling()).await;
    let ids = enqueue(db, "unpaced", LOAD).await;
    let workers: Vec<_> = (0..2)
        .map(|_| spawn_worker(worker_args(&db.url, &sim.url())))
        .collect();
    all_approved(db, &ids, Duration::from_secs(60)).await;
    let stats = ledger(&sim.url()).await.stats;
    assert!(stats.throttled > 0, "{stats:?}");
    assert_eq!(
        approved_per_order(&ledger(&sim.url()).await)
            .values()
            .filter(|n| **n == 1)
            .count(),
        LOAD
    );
    for w in workers {
        w.stop().await;
    }
}

async fn cobro_status_shows_the_breaker_and_what_waits_for_it(db: &TestDb) {
    let id = enqueue(db, "status", 1).await[0];
    let gw = "http://gw.test:8089/";
    db.store
        .breaker_update(gw, "test", |row, now| {
            cobro::breaker::after_failure(
                row,
                now,
                1,
                Duration::from_secs(5),
                "connect: refused",
                false,
            )
        })
        .await
        .unwrap();
    let (seen, _) = db.store.load(id).await.unwrap();
    let mut park = cobro::store::Change::new(None, "parked_gateway_unreachable", "test");
    park.park = true;
    db.store.apply(&seen, &park).await.unwrap();

    let run = |args: &[&str]| cobro_ok(&db.url, args);
    let text = run(&["status"]);
    assert!(
        text.contains(&format!("gateway {gw}: UNREACHABLE since ")),
        "{text}"
    );
    assert!(text.contains("last failure"), "{text}");
    assert!(text.contains("connect: refused"), "{text}");
    assert!(
        text.contains("attempts waiting for the gateway (parked): 1, the oldest since"),
        "{text}"
    );
    assert!(text.contains("PENDIENTE   1"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&run(&["status", "--json"])).unwrap();
    assert_eq!(json["gateway"]["parked"], 1, "{json}");
    assert_eq!(json["gateway"]["breakers"][0]["state"], "open", "{json}");
    assert_eq!(json["attempts"]["PENDIENTE"], 1, "{json}");
    let one = run(&["status", "--attempt", &id.to_string()]);
    assert!(one.contains("parked since "), "{one}");
}
