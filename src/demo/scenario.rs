//! `cobro demo --scenario a|c|new-key`: every table of the seed's lesson 2
//! (and lesson 3's new key) run on the real engine, printed beside the
//! seed's own figures.
//!
//! - `a`: one buyer, 500 USD, the first response lost, one retry (the
//!   seed's "ESCENARIO A": 1,000 USD without protection, 500 with it);
//! - `c`: the fleet (the default demo, "ESCENARIO C");
//! - `new-key`: 500 USD, the first two responses lost, and a client that
//!   makes a new key for every retry: 1,500 USD even against a gateway that
//!   honours keys (lesson 2's exercise 1, measured in lesson 3).
//!
//! Invariant: as in the default demo, cobro's numbers and the naive
//! client's are counted from the simulator's ledger; the seed's are its
//! published figures, constants here, never mixed into a count. In `a` and
//! `new-key` the losses are scripted, not drawn: the naive client's first
//! one or two responses are lost; every response to one of cobro's charges
//! is lost (its lookups are answered), so cobro is never helped by luck.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use indicatif::MultiProgress;
use serde::Serialize;

use super::{DemoOptions, NAIVE_MAX_ATTEMPTS, Report, World, count, fetch_ledger, run_cobro};
use crate::sim::{Faults, SimHandle};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// One buyer, 500 USD, the first response lost, one retry.
    A,
    /// 1,000 orders, 15% of responses lost (the default demo).
    C,
    /// 500 USD, two responses lost, a new key on every retry.
    NewKey,
}

/// One column of the seed's own table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SeedColumn {
    pub name: &'static str,
    pub client: &'static str,
    pub gateway: &'static str,
    pub attempts_sent: u64,
    pub ledger_charges: u64,
    pub orders_charged_twice: u64,
    /// In minor units (the seed prints whole dollars).
    pub total_charged_minor: i128,
    pub overcharge_minor: i128,
    pub overcharge_pct: f64,
}

/// The seed's table for a scenario, as the lesson prints it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SeedTable {
    pub source: &'static str,
    pub setup: &'static str,
    pub intent_total_minor: i128,
    pub columns: Vec<SeedColumn>,
}

/// The seed's figures (lesson 2, "El doble cargo del reintento, medido").
pub fn seed_table(s: Scenario) -> SeedTable {
    const NO_KEY: (&str, &str, &str) = ("seed: no key", "naive", "memoryless");
    const KEY: (&str, &str, &str) = ("seed: idempotency_key", "same key", "idempotent");
    let col = |(name, client, gateway), attempts, charges, twice, total: i128, over: i128, pct| {
        SeedColumn {
            name,
            client,
            gateway,
            attempts_sent: attempts,
            ledger_charges: charges,
            orders_charged_twice: twice,
            total_charged_minor: total * 100,
            overcharge_minor: over * 100,
            overcharge_pct: pct,
        }
    };
    match s {
        Scenario::A => SeedTable {
            source: "seed 02, ESCENARIO A",
            setup: "Ana pays 500 USD; the first response is lost; orders retries once",
            intent_total_minor: 50_000,
            columns: vec![
                col(NO_KEY, 2, 2, 1, 1_000, 500, 100.0),
                col(KEY, 2, 1, 0, 500, 0, 0.0),
            ],
        },
        Scenario::C => SeedTable {
            source: "seed 02, ESCENARIO C",
            setup: "N=1000 orders of 10-500 USD | p(response lost)=0.15 | max_attempts=4",
            intent_total_minor: 256_979 * 100,
            columns: vec![
                col(NO_KEY, 1_184, 1_184, 146, 305_118, 48_139, 18.7),
                col(KEY, 1_184, 1_000, 0, 256_979, 0, 0.0),
            ],
        },
        Scenario::NewKey => SeedTable {
            source: "seed 02, exercise 1 (lesson 3: a new key on every retry)",
            setup: "500 USD; the first two responses are lost; the third arrives",
            intent_total_minor: 50_000,
            columns: vec![
                col(
                    ("seed: new key each try", "new key per retry", "idempotent"),
                    3,
                    3,
                    1,
                    1_500,
                    1_000,
                    200.0,
                ),
                col(
                    ("seed: same key", "same key", "idempotent"),
                    3,
                    1,
                    0,
                    500,
                    0,
                    0.0,
                ),
            ],
        },
    }
}

/// Runs `scenario` on the real engine (workers, store, simulator as in the
/// default demo) and attaches the seed's table.
pub async fn run(
    opts: &DemoOptions,
    scenario: Scenario,
    progress: Option<&MultiProgress>,
) -> Result<Report> {
    let mut report = match scenario {
        Scenario::C => super::run(opts, progress).await?,
        Scenario::A | Scenario::NewKey => {
            if opts.gateway.kind == Some(crate::gateway::GatewayKind::Stripe) {
                bail!("--scenario a and new-key run on the simulator; drop --gateway stripe");
            }
            one_buyer(opts, scenario).await?
        }
    };
    report.scenario = Some(scenario);
    report.lesson = Some(seed_table(scenario));
    Ok(report)
}

/// Scenarios A and new-key: one order of 500 USD in three worlds.
async fn one_buyer(opts: &DemoOptions, scenario: Scenario) -> Result<Report> {
    if opts.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let (order, lost, naive_gateway_idempotent, client) = match scenario {
        Scenario::A => ("ana-500", 1, false, "naive"),
        _ => ("new-key-500", 2, true, "new key per retry"),
    };
    let fleet = vec![(order.to_owned(), 50_000_i64)];
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let scratch = std::env::temp_dir().join(format!("cobro-demo-{}", &run_id[..12]));
    let mut worlds = Vec::new();

    let sim = super::start_sim(naive_gateway_idempotent, 0.0, opts).await?;
    let naive = naive_scripted(&sim, &fleet, lost, client).await;
    sim.shutdown().await;
    let mut naive = naive?;
    naive.gateway = gateway_name(naive_gateway_idempotent);
    worlds.push(naive);

    for (n, idempotent) in [(2, true), (3, false)] {
        let db_url = match &opts.database_url {
            Some(url) => url.clone(),
            None => {
                std::fs::create_dir_all(&scratch)?;
                format!(
                    "sqlite://{}",
                    scratch.join(format!("world{n}.db")).display()
                )
            }
        };
        let prefix = format!("demo-{}-w{n}-", &run_id[..8]);
        // Every answer to a charge is lost; lookups are answered.
        let sim = super::start_sim(idempotent, 1.0, opts).await?;
        let world = run_cobro(&sim, idempotent, &db_url, &prefix, &fleet, opts, None).await;
        sim.shutdown().await;
        let mut world = world?;
        world.name = format!("world {n}");
        world.gateway = gateway_name(idempotent);
        worlds.push(world);
    }
    if opts.database_url.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let mut report = super::report(opts, worlds);
    report.orders = fleet.len();
    report.loss = 1.0;
    Ok(report)
}

fn gateway_name(idempotent: bool) -> String {
    if idempotent {
        "idempotent"
    } else {
        "memoryless"
    }
    .into()
}

/// The lesson's client for one order: its first `lost` responses are lost
/// (the simulator's loss is switched on for them, off after), each try
/// carries a new key, and it stops at the first answer.
async fn naive_scripted(
    sim: &SimHandle,
    fleet: &[(String, i64)],
    lost: u32,
    client_name: &str,
) -> Result<World> {
    let started = Instant::now();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    for (order, amount) in fleet {
        let body = serde_json::json!({
            "order_id": order,
            "amount_minor": amount,
            "currency": "USD",
        });
        for n in 0..NAIVE_MAX_ATTEMPTS {
            let faults = Faults {
                p_response_lost: if n < lost { 1.0 } else { 0.0 },
                ..Faults::default()
            };
            client
                .put(format!("{}/control/faults", sim.url()))
                .json(&faults)
                .send()
                .await?
                .error_for_status()?;
            let sent = client
                .post(format!("{}/v1/charges", sim.url()))
                .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                .json(&body)
                .send()
                .await;
            if sent.is_ok() {
                break;
            }
        }
    }
    let ledger = fetch_ledger(sim).await?;
    let mut world = count(client_name, fleet, "", &ledger, 0, started.elapsed());
    world.name = "world 1".into();
    Ok(world)
}
