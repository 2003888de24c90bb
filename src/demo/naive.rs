//! World 1: the naive client of the seed's lesson. On a lost response it
//! sends the charge again with a NEW key (or none at all, as far as a
//! memoryless gateway cares), up to [`super::NAIVE_MAX_ATTEMPTS`] times.
//!
//! Invariant: this is the counter-example, kept honest: it talks to the
//! same simulator over real HTTP with the same per-order faults as cobro,
//! and its numbers come from the simulator's ledger.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use indicatif::ProgressBar;
use tokio::sync::Semaphore;

use super::{NAIVE_MAX_ATTEMPTS, World, count, fetch_ledger};
use crate::sim::SimHandle;

pub(super) async fn run(
    sim: &SimHandle,
    fleet: &[(String, i64)],
    bar: Option<ProgressBar>,
) -> Result<World> {
    let started = Instant::now();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let url = format!("{}/v1/charges", sim.url());
    let limit = Arc::new(Semaphore::new(32));
    let mut tasks = Vec::with_capacity(fleet.len());
    for (order, amount) in fleet {
        let (order, amount) = (order.clone(), *amount);
        let (client, url, limit, bar) = (client.clone(), url.clone(), limit.clone(), bar.clone());
        tasks.push(tokio::spawn(async move {
            let _slot = limit.acquire_owned().await;
            let body = serde_json::json!({
                "order_id": order,
                "amount_minor": amount,
                "currency": "USD",
            });
            for _ in 0..NAIVE_MAX_ATTEMPTS {
                let sent = client
                    .post(&url)
                    .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                    .json(&body)
                    .send()
                    .await;
                if sent.is_ok() {
                    break; // an answer arrived: the client believes it is done
                }
            }
            if let Some(b) = bar {
                b.inc(1);
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    if let Some(b) = &bar {
        b.finish();
    }
    let ledger = fetch_ledger(sim).await?;
    let mut world = count("naive", fleet, "", &ledger, 0, started.elapsed());
    world.name = "world 1".into();
    world.gateway = "memoryless".into();
    Ok(world)
}
