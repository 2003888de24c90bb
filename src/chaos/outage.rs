//! The soak's hand on the gateway: turning the simulator's outage on and
//! off, and timing how long the parked attempts take to be re-woken after.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use tracing::warn;

/// From the end of the outage: how many attempts were parked, and how long
/// until none is (the breaker's probe, then its paced re-wake).
pub(super) async fn time_unparking(url: String) -> Result<(i64, f64)> {
    let start = Instant::now();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await?;
    let parked = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM cobro.payment_attempts WHERE parked_since IS NOT NULL",
        )
        .fetch_one(&pool)
        .await
    };
    let first = parked().await.unwrap_or_default();
    // A database restart may interrupt a read: keep asking.
    while parked().await.map_or(true, |n| n > 0) {
        if start.elapsed() > Duration::from_secs(1800) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pool.close().await;
    Ok((first, start.elapsed().as_secs_f64()))
}

/// Turns the simulator's 503 outage on or off, keeping its other faults;
/// tried again for a while when the simulator is refusing connections (a
/// refusal window may overlap the outage).
pub(super) async fn set_outage(sim_url: &str, on: bool) -> Result<()> {
    let mut tries = 0;
    loop {
        match try_set_outage(sim_url, on).await {
            Ok(()) => return Ok(()),
            Err(e) if tries < 300 => {
                tries += 1;
                if tries == 1 {
                    warn!(error = %e, "could not reach the simulator's controls; trying again");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

pub(super) async fn try_set_outage(sim_url: &str, on: bool) -> Result<()> {
    let client = reqwest::Client::new();
    let mut faults: crate::sim::Faults = client
        .get(format!("{sim_url}/control/faults"))
        .send()
        .await?
        .json()
        .await?;
    faults.outage = on;
    let put = client
        .put(format!("{sim_url}/control/faults"))
        .json(&faults)
        .send()
        .await?;
    if !put.status().is_success() {
        bail!("PUT /control/faults: {}", put.status());
    }
    Ok(())
}
