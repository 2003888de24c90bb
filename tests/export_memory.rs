//! The escalation CSV is streamed: the real `cobro serve` process, over a
//! PostgreSQL queue of 100,000 attempts in review, exports them all while
//! its resident memory stays flat (sampled from /proc/PID/status), and the
//! file is whole and well-formed.
//!
//! The bound: the CSV is about 13 MB; built in memory (as before) the
//! process grew by 60 MB (measured on main's build). Streamed, it holds
//! one page of 1,000 rows (~130 kB of text, a few hundred kB of rows in
//! flight); the growth allowed, 8 MB, leaves room for the allocator and
//! hyper's buffers and is still under two thirds of the file's size.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;

const ROWS: i64 = 100_000;
/// The most the web process may grow while exporting (see the header).
const MAX_GROWTH_KB: u64 = 8 * 1024;

/// `VmRSS` and `VmHWM` of `pid`, in kB.
fn memory_kb(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100k_row_export_streams_in_flat_memory() {
    let Some(db) = postgres_db().await else {
        return;
    };
    // In batches: the charge rule's trigger locks each order for the
    // transaction, and one transaction of 100,000 runs out of lock slots.
    for from in (1..=ROWS).step_by(5_000) {
        let (from, to) = (from.to_string(), (from + 4_999).to_string());
        db.exec(
            "INSERT INTO cobro.payment_attempts
             (id, order_id, amount_minor, currency, idempotency_key, state, next_action_at,
              send_count, check_count, version, created_at)
         SELECT gen_random_uuid(), 'mem-' || i, 1000 + i % 9000, 'USD', gen_random_uuid(),
                'EN_REVISION', now() + interval '1 day', 1, 5, 7,
                now() - interval '2 days' + i * interval '1 ms'
           FROM generate_series($1::int, $2::int) i",
            "SELECT 1",
            &[&from, &to],
        )
        .await
        .unwrap();
    }
    // As autovacuum would after a bulk load: the planner knows the table.
    db.exec("ANALYZE cobro.payment_attempts", "SELECT 1", &[])
        .await
        .unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    // The binary under test; COBRO_MEMORY_BIN measures another build (the
    // figure before streaming came from main's).
    let bin = std::env::var("COBRO_MEMORY_BIN").unwrap_or(env!("CARGO_BIN_EXE_cobro").into());
    let serve = Serve(
        Command::new(bin)
            .arg("serve")
            .env("DATABASE_URL", &db.url)
            .env("COBRO_LISTEN", format!("127.0.0.1:{port}"))
            .env("COBRO_WEBHOOK_SECRETS", test_secret())
            .env("COBRO_API_KEYS", test_keys_config())
            .env("COBRO_GATEWAY", "sim")
            .env("RUST_LOG", "warn")
            .env_remove("RUST_BACKTRACE")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run cobro serve"),
    );
    let pid = serve.0.id();
    let http = reqwest::Client::new();
    eventually(Duration::from_secs(20), "cobro serve answers", || {
        let http = http.clone();
        let url = url.clone();
        async move {
            http.get(format!("{url}/health"))
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success())
        }
    })
    .await;
    // Warm up what every request uses (the pool's connections, the
    // router), then take the baseline.
    for _ in 0..3 {
        let r = http
            .get(format!("{url}/finance/api/escalations?limit=500"))
            .bearer_auth(secret("ana"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    let (base_rss, base_hwm) = memory_kb(pid).expect("the process's memory");

    let peak = Arc::new(AtomicU64::new(base_rss));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some((rss, _)) = memory_kb(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let started = Instant::now();
    let mut resp = http
        .get(format!("{url}/finance/escalations.csv"))
        .basic_auth("ana", Some(secret("ana")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut csv = Vec::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        csv.extend_from_slice(&chunk);
    }
    let took = started.elapsed();
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let (_, end_hwm) = memory_kb(pid).unwrap();
    let peak = peak.load(Ordering::Relaxed);

    let text = String::from_utf8(csv).expect("UTF-8");
    let lines: Vec<&str> = text.split_terminator("\r\n").collect();
    eprintln!(
        "export of {ROWS} rows: {} bytes in {took:?}; RSS before {base_rss} kB, peak sampled {peak} kB \
         (+{} kB); VmHWM {base_hwm} -> {end_hwm} kB (+{} kB)",
        text.len(),
        peak - base_rss,
        end_hwm.saturating_sub(base_hwm),
    );
    assert_eq!(lines.len() as i64, ROWS + 1, "a header and a row each");
    assert!(lines[0].starts_with("attempt_id,order_id,kind,state,"));
    let columns = lines[0].split(',').count();
    let mut orders = std::collections::HashSet::new();
    for row in &lines[1..] {
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells.len(), columns, "{row}");
        assert_eq!(cells[3], "EN_REVISION", "{row}");
        assert!(orders.insert(cells[1].to_owned()), "{row} twice");
    }
    assert_eq!(orders.len() as i64, ROWS, "every attempt exactly once");
    assert!(
        peak - base_rss < MAX_GROWTH_KB,
        "RSS grew {} kB during the export (bound {MAX_GROWTH_KB} kB)",
        peak - base_rss
    );
    assert!(
        end_hwm.saturating_sub(base_hwm) < MAX_GROWTH_KB,
        "VmHWM grew {} kB",
        end_hwm - base_hwm
    );
    drop(serve);
    db.drop_db().await;
}
