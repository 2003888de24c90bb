//! Workers as real processes: SIGKILL in the middle of a charge, and a
//! graceful SIGTERM.

#[macro_use]
mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cobro::domain::ChargeRequest;
use cobro::runtime::WorkerArgs;
use cobro::sim::Faults;
use cobro::state::State;
use common::*;
use uuid::Uuid;

on_both_dbs!(
    a_worker_killed_while_en_proceso_is_recovered_after_its_lease_with_one_charge,
    sigterm_finishes_the_charge_in_flight_then_exits_zero,
);

/// Starts `cobro-worker` with `args` as environment variables; its log goes
/// to a file in the temp dir (printed if the test fails).
fn spawn_process(args: &WorkerArgs, tag: &str) -> (Child, std::path::PathBuf) {
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    let log = std::env::temp_dir().join(format!("cobro-{tag}-{}.log", Uuid::new_v4().simple()));
    let child = bare_worker(&args.database_url)
        .env("RUST_LOG", "info")
        .env("COBRO_GATEWAY", "sim")
        .env("GATEWAY_URL", args.gateway_link.url())
        .env("COBRO_CONCURRENCY", args.concurrency.to_string())
        .env("COBRO_LEASE_TTL", ms(args.lease_ttl))
        .env("COBRO_CHECK_SCHEDULE", &args.check_schedule)
        .env("COBRO_POLL_INTERVAL", ms(args.poll_interval))
        .env("COBRO_SWEEP_INTERVAL", ms(args.sweep_interval))
        .env("COBRO_SWEEP_GRACE", ms(args.sweep_grace))
        .env(
            "COBRO_GATEWAY_CONNECT_TIMEOUT",
            ms(args.gateway_link.connect_timeout),
        )
        .env("COBRO_GATEWAY_TIMEOUT", ms(args.gateway_link.timeout))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("worker log file"))
        .spawn()
        .expect("spawn cobro-worker");
    (child, log)
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -TERM {}", child.id());
}

async fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            start.elapsed() < limit,
            "worker did not exit within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_worker_killed_while_en_proceso_is_recovered_after_its_lease_with_one_charge(
    db: &TestDb,
) {
    // The gateway charges at once but holds its answer for 3 s: the worker is
    // killed after the money moved and before it could record it.
    let sim = start_sim(
        true,
        Faults {
            p_timeout_after_charge: 1.0,
            hold_ms: 3_000,
            ..Faults::default()
        },
    )
    .await;
    let mut args = worker_args(&db.url, &sim.url());
    args.gateway_link.timeout = Duration::from_secs(5);
    args.lease_ttl = Duration::from_secs(7);
    args.sweep_interval = Duration::from_millis(200);

    let (mut victim, victim_log) = spawn_process(&args, "victim");
    let req = ChargeRequest::parse("order-kill", 12_345, "USD", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;

    // The victim takes the lease.
    let held = settled(&db.store, id, State::EnProceso, Duration::from_secs(15)).await;
    eventually(Duration::from_secs(5), "the gateway to charge", || async {
        (!ledger(&sim.url()).await.entries.is_empty()).then_some(())
    })
    .await;
    victim.kill().expect("SIGKILL the victim");
    let killed_at = Instant::now();
    victim.wait().expect("reap the victim");
    set_faults(&sim.url(), &Faults::default()).await;

    // Another worker process takes over once the lease has expired.
    let (mut rescuer, rescuer_log) = spawn_process(&args, "rescuer");
    let done = settled(&db.store, id, State::Aprobado, Duration::from_secs(20)).await;
    let took = killed_at.elapsed();
    let lease_left = (held.lease_expires_at.unwrap() - held.updated_at)
        .to_std()
        .unwrap();
    println!("recovered {took:?} after the kill (lease {lease_left:?})");
    assert!(
        took < args.lease_ttl + Duration::from_secs(3),
        "recovered {took:?} after the kill; the lease is {:?}",
        args.lease_ttl
    );

    let t = db.store.transitions(id).await.unwrap();
    let causes: Vec<_> = t.iter().map(|t| t.cause.as_str()).collect();
    assert_eq!(
        causes,
        ["enqueued", "claim", "lease_expired", "lookup_approved"]
    );
    assert_ne!(t[2].actor, t[1].actor, "another worker moved it");
    assert_eq!(done.send_count, 1, "found by lookup: never re-sent");
    let l = ledger(&sim.url()).await;
    assert_eq!(l.entries.len(), 1, "exactly one charge at the gateway");
    assert_eq!(l.stats.charge_requests, 1);

    sigterm(&rescuer);
    let status = wait_exit(&mut rescuer, Duration::from_secs(15)).await;
    if !status.success() {
        for log in [&victim_log, &rescuer_log] {
            eprintln!(
                "--- {}\n{}",
                log.display(),
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
    }
    assert!(status.success(), "SIGTERM exits 0, got {status}");
    sim.shutdown().await;
}

async fn sigterm_finishes_the_charge_in_flight_then_exits_zero(db: &TestDb) {
    let sim = start_sim(
        true,
        Faults {
            latency_ms: 1_000,
            ..Faults::default()
        },
    )
    .await;
    let args = worker_args(&db.url, &sim.url());
    let (mut worker, log) = spawn_process(&args, "graceful");
    let req = ChargeRequest::parse("order-term", 500, "EUR", None, None).unwrap();
    let id = db.store.enqueue(&req).await.unwrap().attempt_id;
    settled(&db.store, id, State::EnProceso, Duration::from_secs(15)).await;
    sigterm(&worker);
    let status = wait_exit(&mut worker, Duration::from_secs(15)).await;
    let (a, _) = db.store.load(id).await.unwrap();
    if !status.success() || a.state != State::Aprobado {
        eprintln!("{}", std::fs::read_to_string(&log).unwrap_or_default());
    }
    assert!(status.success(), "exit status {status}");
    assert_eq!(
        a.state,
        State::Aprobado,
        "the in-flight charge was finished, not dropped"
    );
    assert_eq!(a.lease_owner, None);
    sim.shutdown().await;
}
