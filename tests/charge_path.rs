//! The charge path end to end: a real worker, the simulator over HTTP, the
//! gateway's ledger as the ground truth. Reads like seed 003's pre-deploy
//! checklist.

#[macro_use]
mod common;

use std::time::Duration;

use cobro::backoff::CheckSchedule;
use cobro::domain::ChargeRequest;
use cobro::sim::Faults;
use cobro::state::State;
use cobro::store::Store;
use common::*;
use uuid::Uuid;

on_both_dbs!(
    seed_test_1_connection_cut_after_the_charge_is_resolved_by_lookup,
    a_lost_request_is_looked_up_then_resent_with_the_same_key,
    lookups_that_keep_failing_give_exactly_five_checks_on_time_then_review,
    a_decline_is_final_for_the_attempt_and_a_5xx_is_unknown,
    an_old_key_is_never_resent,
    a_resend_put_off_past_the_keys_lifetime_goes_to_finance_unsent,
    a_lost_wake_up_is_recreated_by_the_sweeper,
    a_wake_up_late_behind_a_backlog_is_not_duplicated_by_the_sweeper,
    a_gateway_that_keeps_losing_requests_ends_in_review_not_in_a_loop,
    wake_ups_due_later_are_found_by_a_poll_shorter_than_a_fetch,
    a_worker_restarted_under_its_name_takes_back_what_it_left_running,
    ; by_backend:
    duplicated_wake_ups_and_racing_workers_charge_once,
);

async fn enqueue(store: &Store, order: &str, amount: i64) -> Uuid {
    let req = ChargeRequest::parse(order, amount, "USD", None, Some("pm_test_visa")).unwrap();
    store.enqueue(&req).await.unwrap().attempt_id
}

async fn seed_test_1_connection_cut_after_the_charge_is_resolved_by_lookup(db: &TestDb) {
    let (sim, worker) = sim_and_worker(db, answers_lost()).await;
    let id = enqueue(&db.store, "order-cut", 25_000).await;

    let a = settled(&db.store, id, State::Aprobado, Duration::from_secs(20)).await;
    assert_eq!(
        path(&db.store, id).await,
        ["PENDIENTE", "EN_PROCESO", "DESCONOCIDO", "APROBADO"]
    );
    let t = db.store.transitions(id).await.unwrap();
    assert_eq!(t[2].error_kind.as_deref(), Some("connection_closed"));
    assert_eq!(t[3].cause, "lookup_approved");
    assert_eq!(t[3].lookup_result.as_deref(), Some("approved"));
    assert_eq!(a.send_count, 1, "resolved by lookup, never re-sent");

    let l = ledger(&sim.url()).await;
    assert_eq!(l.entries.len(), 1, "exactly one charge at the gateway");
    assert_eq!(l.stats.charge_requests, 1);
    assert_eq!(
        a.gateway_charge_id.as_deref(),
        Some(l.entries[0].charge_id.as_str())
    );
    assert_eq!(l.entries[0].idempotency_key, a.idempotency_key.to_string());

    finish(worker, sim).await;
}

async fn a_lost_request_is_looked_up_then_resent_with_the_same_key(db: &TestDb) {
    let (sim, worker) = sim_and_worker(db, requests_lost()).await;
    let id = enqueue(&db.store, "order-lost", 4_200).await;

    settled(&db.store, id, State::Desconocido, Duration::from_secs(10)).await;
    set_faults(&sim.url(), &Faults::default()).await; // the network heals
    let a = settled(&db.store, id, State::Aprobado, Duration::from_secs(20)).await;

    assert_eq!(
        path(&db.store, id).await,
        [
            "PENDIENTE",
            "EN_PROCESO",
            "DESCONOCIDO",
            "EN_PROCESO",
            "APROBADO"
        ]
    );
    let t = db.store.transitions(id).await.unwrap();
    assert_eq!(t[2].error_kind.as_deref(), Some("timeout"));
    assert_eq!(t[3].cause, "lookup_not_found");
    assert_eq!(a.send_count, 2);

    let l = ledger(&sim.url()).await;
    assert_eq!(l.entries.len(), 1, "one charge");
    assert_eq!(l.stats.charge_requests, 2, "sent twice");
    assert_eq!(
        l.entries[0].idempotency_key,
        a.idempotency_key.to_string(),
        "same key"
    );

    finish(worker, sim).await;
}

async fn lookups_that_keep_failing_give_exactly_five_checks_on_time_then_review(db: &TestDb) {
    let sim = start_sim(true, answers_lost_lookups_fail()).await;
    let args = worker_args(&db.url, &sim.url());
    let schedule = CheckSchedule::parse(&args.check_schedule, args.check_jitter).unwrap();
    let worker = spawn_worker(args);
    let id = enqueue(&db.store, "order-dark", 9_900).await;

    let a = settled(&db.store, id, State::EnRevision, Duration::from_secs(30)).await;
    assert_eq!(
        path(&db.store, id).await,
        ["PENDIENTE", "EN_PROCESO", "DESCONOCIDO", "EN_REVISION"]
    );
    assert_eq!(a.check_count, 5);
    assert_eq!(
        a.send_count, 1,
        "never re-sent while the outcome is unknown"
    );
    let last = db.store.transitions(id).await.unwrap().pop().unwrap();
    assert_eq!(last.cause, "checks_exhausted");
    assert_eq!(last.lookup_result.as_deref(), Some("failed"));

    let checks = db.store.checks(id).await.unwrap();
    assert_eq!(checks.len(), 5);
    let mut prev_end = db.store.transitions(id).await.unwrap()[2].at;
    for (i, c) in checks.iter().enumerate() {
        assert_eq!(c.check_number, i as i32 + 1);
        // Each check was scheduled one jittered delay after the previous event...
        let gap = (c.scheduled_at - prev_end).to_std().unwrap().as_secs_f64();
        let nominal = schedule.nominal(i as u32).unwrap().as_secs_f64();
        assert!(
            gap >= nominal * 0.5 - 0.05 && gap <= nominal * 1.5 + 0.05,
            "check {} scheduled {gap:.3}s after the previous, nominal {nominal}s",
            i + 1
        );
        // ...and started within a second of that time.
        let late = (c.started_at - c.scheduled_at).num_milliseconds();
        println!(
            "check {}: {gap:.3}s after the previous (nominal {nominal}s), started {late} ms late",
            i + 1
        );
        assert!(
            (-50..1000).contains(&late),
            "check {} started {late} ms late",
            i + 1
        );
        prev_end = c.finished_at;
    }
    let l = ledger(&sim.url()).await;
    assert_eq!((l.entries.len(), l.stats.charge_requests), (1, 1));
    assert_eq!(l.stats.lookup_requests, 5);

    finish(worker, sim).await;
}

async fn a_decline_is_final_for_the_attempt_and_a_5xx_is_unknown(db: &TestDb) {
    let (sim, worker) = sim_and_worker(db, declining("insufficient_funds")).await;
    let declined = enqueue(&db.store, "order-poor", 1_000).await;
    let a = settled(
        &db.store,
        declined,
        State::Rechazado,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(a.decline_code.as_deref(), Some("insufficient_funds"));

    set_faults(
        &sim.url(),
        &Faults {
            p_5xx: 1.0,
            ..Faults::default()
        },
    )
    .await;
    let unknown = enqueue(&db.store, "order-5xx", 1_000).await;
    let t = eventually(Duration::from_secs(10), "a 5xx to be recorded", || async {
        let t = db.store.transitions(unknown).await.unwrap();
        (t.len() >= 3).then_some(t)
    })
    .await;
    assert_eq!(t[2].to_state, "DESCONOCIDO", "a 5xx is never a decline");
    assert_eq!(t[2].http_status, Some(503));
    set_faults(&sim.url(), &Faults::default()).await;
    settled(&db.store, unknown, State::Aprobado, Duration::from_secs(20)).await;
    let l = ledger(&sim.url()).await;
    assert_eq!(approved_per_order(&l).get("order-5xx"), Some(&1));

    finish(worker, sim).await;
}

async fn duplicated_wake_ups_and_racing_workers_charge_once(b: Backend) {
    let (db, sim) = db_and_sim(
        b,
        Faults {
            latency_ms: 200, // keep the first sender on the wire while the others arrive
            ..Faults::default()
        },
    )
    .await;
    let id = enqueue(&db.store, "order-race", 7_700).await;
    // Three extra wake-ups for the same attempt, as a redelivering queue would.
    for _ in 0..3 {
        db.store.wake(id).await.unwrap();
    }
    // Two engines stepped by hand, racing on the same attempt four times each...
    let (a, b) = (
        engine(&db.store, &sim.url(), "racer-a"),
        engine(&db.store, &sim.url(), "racer-b"),
    );
    let races = (0..4).flat_map(|_| [a.process(id), b.process(id)]);
    for r in futures::future::join_all(races).await {
        r.unwrap();
    }
    // ...and two real workers draining the four queued wake-ups.
    let w1 = spawn_worker(worker_args(&db.url, &sim.url()));
    let w2 = spawn_worker(worker_args(&db.url, &sim.url()));
    eventually(Duration::from_secs(10), "wake-ups drained", || async {
        (db.store.open_wakeups().await.unwrap() == 0).then_some(())
    })
    .await;

    let (attempt, _) = db.store.load(id).await.unwrap();
    assert_eq!(attempt.state, State::Aprobado);
    assert_eq!(attempt.send_count, 1);
    let l = ledger(&sim.url()).await;
    assert_eq!(
        l.stats.charge_requests, 1,
        "only the lease holder ever sent"
    );
    assert_eq!(l.entries.len(), 1);
    assert_eq!(
        path(&db.store, id).await,
        ["PENDIENTE", "EN_PROCESO", "APROBADO"]
    );
    if db.backend == Backend::Sqlite {
        // A finished wake-up lets go of its worker (trigger
        // jobs_done_unlocked), so apalis' index on lock_by holds only the
        // jobs in flight (an acknowledgement that searched it grew with
        // every job the worker ever took).
        let done_jobs = |sql: &'static str| {
            sqlx::query_scalar::<_, i64>(sql).fetch_one(db.store.sqlite_pool().unwrap())
        };
        eventually(Duration::from_secs(5), "wake-ups acknowledged", || async {
            let n = done_jobs("SELECT count(*) FROM Jobs WHERE status = 'Done'").await;
            (n.unwrap() >= 4).then_some(())
        })
        .await;
        let marked =
            done_jobs("SELECT count(*) FROM Jobs WHERE status = 'Done' AND lock_by IS NOT NULL")
                .await
                .unwrap();
        assert_eq!(marked, 0, "finished wake-ups still name their worker");
    }

    w1.stop().await;
    w2.stop().await;
    sim.shutdown().await;
    db.drop_db().await;
}

async fn an_old_key_is_never_resent(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let id = enqueue(&db.store, "order-old", 3_000).await;
    // The attempt was sent two days ago, and nobody knows what happened.
    let a = db.store.load(id).await.unwrap().0;
    let a = step(&db.store, &a, cobro::state::Event::Claim, None).await;
    step(&db.store, &a, cobro::state::Event::Unknown, None).await;
    let updated = db
        .exec(
            "UPDATE cobro.payment_attempts
                SET send_count = 1, next_action_at = now(),
                    created_at = now() - interval '2 days'
              WHERE id = $1::uuid",
            "UPDATE payment_attempts
                SET send_count = 1, next_action_at = 0,
                    created_at = created_at - 172800000
              WHERE id = ?1",
            &[&id.to_string()],
        )
        .await
        .unwrap();
    assert_eq!(updated, 1);
    engine(&db.store, &sim.url(), "w")
        .process(id)
        .await
        .unwrap();
    let (a, _) = db.store.load(id).await.unwrap();
    assert_eq!(a.state, State::EnRevision);
    let last = db.store.transitions(id).await.unwrap().pop().unwrap();
    assert_eq!(last.cause, "key_expired_not_found");
    assert_eq!(ledger(&sim.url()).await.stats.charge_requests, 0);
    sim.shutdown().await;
}

/// Review finding 4 (stop 39): a charge whose send timed out, found
/// missing by a lookup and sent again, that second send refused (the
/// gateway down), then put off for longer than the gateway keeps keys (an
/// outage of more than a day). Sending it now would not be replayed if the
/// first send executed after all: it goes to finance unsent, the janitor
/// scheduled. Its twin with a young key, and one whose sends were only ever
/// refused (nothing could have executed), are sent.
async fn a_resend_put_off_past_the_keys_lifetime_goes_to_finance_unsent(db: &TestDb) {
    use cobro::state::Event;
    use cobro::store::ClaimPlan;
    let sim = start_sim(true, Faults::default()).await;
    // (order, checks done, key age in hours, sent now?)
    let cases = [
        ("order-resend-old", 1, 48, false),
        ("order-resend-young", 1, 2, true),
        ("order-refused-old", 0, 48, true),
    ];
    let engine = engine(&db.store, &sim.url(), "w");
    let mut sent_orders = 0u64;
    for (order, checks, hours, sent) in cases {
        let id = enqueue(&db.store, order, 4_200).await;
        let a = db.store.load(id).await.unwrap().0;
        let a = step(&db.store, &a, Event::Claim, None).await;
        let a = if checks > 0 {
            let a = step(&db.store, &a, Event::Unknown, None).await;
            step(&db.store, &a, Event::Resend, None).await
        } else {
            a
        };
        step(&db.store, &a, Event::Deferred, None).await;
        let aged = db
            .exec(
                "UPDATE cobro.payment_attempts
                    SET send_count = 1 + $2::int, check_count = $2::int, next_action_at = now(),
                        created_at = now() - make_interval(hours => $3::int)
                  WHERE id = $1::uuid",
                "UPDATE payment_attempts
                    SET send_count = 1 + ?2, check_count = ?2, next_action_at = 0,
                        created_at = created_at - ?3 * 3600000
                  WHERE id = ?1",
                &[&id.to_string(), &checks.to_string(), &hours.to_string()],
            )
            .await
            .unwrap();
        assert_eq!(aged, 1);
        let (due, _) = db.store.load(id).await.unwrap();
        assert_eq!(due.state, State::Pendiente);
        assert_eq!(
            engine.claim_for(&due, chrono::Utc::now()).is_some(),
            sent,
            "{order}: the wake-up fetch's claim"
        );
        engine.process(id).await.unwrap();
        let (a, _) = db.store.load(id).await.unwrap();
        if sent {
            sent_orders += 1;
            assert_eq!(a.state, State::Aprobado, "{order}");
            continue;
        }
        assert_eq!(a.state, State::EnRevision, "{order}");
        assert_eq!(a.send_count, 2, "{order}: not sent a third time");
        assert!(a.next_action_at.is_some(), "{order}: the janitor looks");
        let last = db.store.transitions(id).await.unwrap().pop().unwrap();
        assert_eq!(last.cause, "key_expired_before_resend");
        let evidence = last.evidence.unwrap_or_default();
        let detail = evidence["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("24 h") && detail.contains("cobro escalations resolve --as approve"),
            "{detail}"
        );
    }
    let l = ledger(&sim.url()).await;
    assert_eq!(
        l.stats.charge_requests, sent_orders,
        "the old resend never sent"
    );
    assert!(l.entries.iter().all(|e| e.order_id != "order-resend-old"));
    sim.shutdown().await;
}

async fn a_lost_wake_up_is_recreated_by_the_sweeper(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let id = enqueue(&db.store, "order-lost-job", 2_500).await;
    // The queue loses the job (as if deleted by hand or failed for good).
    let deleted = db
        .exec(
            "DELETE FROM apalis.jobs WHERE job_type = 'cobro.charge'",
            "DELETE FROM Jobs WHERE job_type = 'cobro.charge'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let args = worker_args(&db.url, &sim.url()); // sweep grace 2 s
    let worker = spawn_worker(args);
    let a = settled(&db.store, id, State::Aprobado, Duration::from_secs(15)).await;
    assert_eq!(a.send_count, 1);
    assert_eq!(ledger(&sim.url()).await.entries.len(), 1);
    finish(worker, sim).await;
}

async fn a_wake_up_late_behind_a_backlog_is_not_duplicated_by_the_sweeper(db: &TestDb) {
    let id = enqueue(&db.store, "order-late-job", 2_500).await;
    // An hour late, with its wake-up still queued and due (a backlog, no
    // worker has reached it yet): the sweeper leaves it alone.
    let late = db
        .exec(
            "UPDATE cobro.payment_attempts SET next_action_at = now() - interval '1 hour'
              WHERE id = $1::uuid",
            "UPDATE payment_attempts SET next_action_at = next_action_at - 3600000 WHERE id = ?1",
            &[&id.to_string()],
        )
        .await
        .unwrap();
    assert_eq!(late, 1);
    let (grace, every) = (Duration::from_secs(1), Duration::from_secs(2));
    let jobs = || {
        db.scalar(
            "SELECT count(*) FROM apalis.jobs",
            "SELECT count(*) FROM Jobs",
        )
    };
    assert_eq!(db.store.sweep(grace, every, 500).await.unwrap(), 0);
    assert_eq!(jobs().await, 1);
    // A wake-up queued for later than the attempt's due time does not
    // count: the attempt is re-woken now.
    let postponed = db
        .exec(
            "UPDATE apalis.jobs SET run_at = now() + interval '1 day'",
            "UPDATE Jobs SET run_at = unixepoch() + 86400",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(postponed, 1);
    assert_eq!(db.store.sweep(grace, every, 500).await.unwrap(), 1);
    assert_eq!(jobs().await, 2);
    // Re-woken: the new wake-up is queued and due, so the next pass (past
    // `every`) adds nothing.
    db.exec(
        "UPDATE cobro.payment_attempts SET woken_at = now() - interval '1 hour' WHERE id = $1::uuid",
        "UPDATE payment_attempts SET woken_at = woken_at - 3600000 WHERE id = ?1",
        &[&id.to_string()],
    )
    .await
    .unwrap();
    assert_eq!(db.store.sweep(grace, every, 500).await.unwrap(), 0);
    assert_eq!(jobs().await, 2);
}

async fn a_gateway_that_keeps_losing_requests_ends_in_review_not_in_a_loop(db: &TestDb) {
    // Every charge request is lost (never executed, the client times out)
    // and every lookup truthfully says "not found".
    let sim = start_sim(
        true,
        Faults {
            hold_ms: 1_300,
            ..requests_lost()
        },
    )
    .await;
    let mut args = worker_args(&db.url, &sim.url());
    args.check_schedule = "100ms,100ms,100ms,100ms,100ms".into();
    args.gateway_link.timeout = Duration::from_millis(1_000);
    let worker = spawn_worker(args);
    let id = enqueue(&db.store, "order-black-hole", 1_234).await;
    let a = settled(&db.store, id, State::EnRevision, Duration::from_secs(40)).await;
    assert_eq!(a.check_count, 5, "every check counts, found or not");
    assert_eq!(
        a.send_count, 5,
        "the first send and one re-send after each of the first four checks"
    );
    let last = db.store.transitions(id).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.cause.as_str(), last.lookup_result.as_deref()),
        ("checks_exhausted", Some("not_found"))
    );
    let l = ledger(&sim.url()).await;
    assert_eq!((l.entries.len() as u64, l.stats.charge_requests), (0, 5));
    finish(worker, sim).await;
}

/// The stall's regression test (BENCHMARKS.md, "The stall"): wake-ups that
/// became due after their insert are found only by the poll interval; no
/// notification and no sweeper (its grace is ten minutes here) will wake
/// the worker. With a 5 ms poll, shorter than a fetch, the poll timer nearly
/// always fires while a fetch is in flight: apalis-core 1.0's `Persisted`
/// lost that wake-up, and a worker whose next fetch came back empty slept
/// until something else woke it. cobro's backend re-arms its own timer.
async fn wake_ups_due_later_are_found_by_a_poll_shorter_than_a_fetch(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let mut ids = Vec::new();
    for i in 0..100 {
        ids.push(enqueue(&db.store, &format!("order-later-{i}"), 1_000 + i).await);
    }
    // Every wake-up due 2 s from now, as a scheduled check is: none is due
    // at its insert, so none was notified.
    let moved = db
        .exec(
            "UPDATE apalis.jobs SET run_at = now() + interval '2 seconds'",
            "UPDATE Jobs SET run_at = unixepoch() + 2",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(moved, 100);
    let mut args = worker_args(&db.url, &sim.url());
    args.poll_interval = Duration::from_millis(5);
    args.missed_heartbeats = 2_000;
    args.sweep_grace = Duration::from_secs(600);
    args.sweep_interval = Duration::from_secs(60);
    let worker = spawn_worker(args);
    for id in &ids {
        settled(&db.store, *id, State::Aprobado, Duration::from_secs(30)).await;
    }
    let l = ledger(&sim.url()).await;
    assert_eq!(l.entries.len(), 100, "each order charged once");
    finish(worker, sim).await;
}

/// A process restarted under the same name (a container's hostname and
/// pid 1) finds its predecessor's taken wake-ups under its own, live name,
/// where the orphan recovery (which looks for dead names) never would: it
/// puts them back at registration, so the charge goes on at once, not only
/// when the sweeper's grace runs out (ten minutes here).
async fn a_worker_restarted_under_its_name_takes_back_what_it_left_running(db: &TestDb) {
    let sim = start_sim(true, Faults::default()).await;
    let id = enqueue(&db.store, "order-restarted", 4_200).await;
    let name = format!("restarted-{}", Uuid::new_v4().simple());
    // The charge queue's apalis worker is named `<name>-<restarts>`.
    let taken_by = format!("{name}-0");
    db.exec(
        "INSERT INTO apalis.workers (id, worker_type, storage_name, layers, last_seen, started_at)
         VALUES ($1, 'cobro.charge', 'cobro', '', now(), now())",
        "INSERT INTO Workers (id, worker_type, storage_name, layers, last_seen, started_at)
         VALUES (?1, 'cobro.charge', 'cobro', '', unixepoch(), unixepoch())",
        &[&taken_by],
    )
    .await
    .unwrap();
    let taken = db
        .exec(
            "UPDATE apalis.jobs SET status = 'Running', lock_by = $1, lock_at = now()",
            "UPDATE Jobs SET status = 'Running', lock_by = ?1, lock_at = unixepoch()",
            &[&taken_by],
        )
        .await
        .unwrap();
    assert_eq!(taken, 1, "the charge's one wake-up, left running");
    let mut args = worker_args(&db.url, &sim.url());
    args.worker_name = Some(name);
    args.sweep_grace = Duration::from_secs(600);
    args.sweep_interval = Duration::from_secs(60);
    let worker = spawn_worker(args);
    // Well within the orphan recovery's 10 s (20 missed 500 ms polls),
    // which would not apply anyway: the name is alive.
    let a = settled(&db.store, id, State::Aprobado, Duration::from_secs(5)).await;
    assert_eq!(a.send_count, 1);
    assert_eq!(ledger(&sim.url()).await.entries.len(), 1);
    finish(worker, sim).await;
}
