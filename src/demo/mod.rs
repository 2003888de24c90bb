//! `cobro demo`: the seed's fleet experiment (lesson 2, "ESCENARIO C") run
//! on the real engine, in three worlds on the same seeded faults.
//!
//! 1. the naive client of the lesson: retries a lost response without a
//!    stable key, against a memoryless gateway;
//! 2. cobro (keys, `DESCONOCIDO`, lookup before re-send) against an
//!    idempotent gateway;
//! 3. cobro against the memoryless gateway: lookup-before-retry protects
//!    even a gateway without idempotency support.
//!
//! Invariant: every number in the report is counted from the simulator's
//! `/ledger` (and its request counter), never computed by formula. Faults
//! are drawn per order (`SimConfig::per_order_draws`), so the same order
//! meets the same fate on its first request in every world.

mod naive;
mod scenario;
mod stripe;
mod table;

pub use scenario::{Scenario, SeedColumn, SeedTable, run as run_scenario, seed_table};
pub use table::render;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::sync::oneshot;

use crate::domain::ChargeRequest;
use crate::runtime::WorkerArgs;
use crate::sim::{Faults, Ledger, SimConfig, SimHandle};
use crate::state::State;
use crate::store::Store;

/// The naive client's attempts per order (the lesson's module-3 retry).
pub const NAIVE_MAX_ATTEMPTS: u32 = 4;

#[derive(Clone)]
pub struct DemoOptions {
    pub orders: usize,
    /// Probability that the gateway's response is lost after it charged.
    pub loss: f64,
    pub seed: u64,
    /// In-process cobro workers per world.
    pub workers: usize,
    /// `None`: a throwaway SQLite database per world, deleted afterwards.
    pub database_url: Option<String>,
    /// The check schedule for `DESCONOCIDO` (default 2s,4s,8s,16s,32s).
    pub check_schedule: String,
    /// The simulator's three worlds (`sim`), or the fleet through Stripe's
    /// API against `stripe_api_base` (`stripe`).
    pub gateway: crate::gateway::GatewayChoice,
}

/// One column of the table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct World {
    pub name: String,
    pub client: String,
    pub gateway: String,
    /// Sums of amounts, in i128 so that they can never overflow.
    pub intent_total_minor: i128,
    pub orders: usize,
    pub attempts_sent: u64,
    pub ledger_charges: usize,
    pub orders_charged_twice: usize,
    pub orders_not_charged: usize,
    pub total_charged_minor: i128,
    pub overcharge_minor: i128,
    pub overcharge_pct: f64,
    /// cobro worlds: attempts left in `EN_REVISION` for finance.
    pub en_revision: i64,
    pub wall_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub orders: usize,
    /// The probability a charge's answer is lost; in `--scenario a` and
    /// `new-key`, 1: every answer to cobro's charges is lost (the naive
    /// client's losses are scripted: its first one or two).
    pub loss: f64,
    pub seed: u64,
    pub currency: &'static str,
    pub database: String,
    pub worlds: Vec<World>,
    /// `--scenario`: which of the seed's tables this is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<Scenario>,
    /// `--scenario`: the seed's own figures, printed beside cobro's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lesson: Option<SeedTable>,
}

/// The fleet: `(order id, amount in minor units)`, amounts 10.00-500.00 USD.
pub fn fleet(orders: usize, seed: u64) -> Vec<(String, i64)> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..orders)
        .map(|i| {
            (
                format!("order-{:05}", i + 1),
                rng.random_range(1_000..=50_000),
            )
        })
        .collect()
}

pub async fn run(opts: &DemoOptions, progress: Option<&MultiProgress>) -> Result<Report> {
    if opts.orders == 0 || opts.workers == 0 {
        bail!("--orders and --workers must be at least 1");
    }
    if !(0.0..=1.0).contains(&opts.loss) {
        bail!(
            "--loss must be a probability within 0..=1, got {}",
            opts.loss
        );
    }
    let fleet = fleet(opts.orders, opts.seed);
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let scratch = std::env::temp_dir().join(format!("cobro-demo-{}", &run_id[..12]));
    let bar = |name: &str| progress.map(|m| m.add(new_bar(name, fleet.len())));
    let world_db = |n: u32| -> Result<String> {
        Ok(match &opts.database_url {
            Some(url) => url.clone(),
            None => {
                std::fs::create_dir_all(&scratch).context("creating the demo's temp dir")?;
                format!(
                    "sqlite://{}",
                    scratch.join(format!("world{n}.db")).display()
                )
            }
        })
    };
    // In a shared database (or a shared Stripe account) each world needs
    // its own order ids.
    let stripe = opts.gateway.kind == Some(crate::gateway::GatewayKind::Stripe);
    let world_prefix = |n: u32| match (&opts.database_url, stripe) {
        (None, false) => String::new(),
        _ => format!("demo-{}-w{n}-", &run_id[..8]),
    };

    let mut worlds = Vec::new();
    if stripe {
        let world = stripe::run(
            opts,
            &opts.gateway,
            &world_db(1)?,
            &world_prefix(1),
            &fleet,
            bar("cobro / stripe API"),
        )
        .await;
        if opts.database_url.is_none() {
            let _ = std::fs::remove_dir_all(&scratch);
        }
        worlds.push(world?);
        return Ok(report(opts, worlds));
    }
    let sim = start_sim(false, opts.loss, opts).await?;
    worlds.push(naive::run(&sim, &fleet, bar("naive client")).await?);
    sim.shutdown().await;

    for (n, idempotent) in [(2, true), (3, false)] {
        let sim = start_sim(idempotent, opts.loss, opts).await?;
        let db_url = world_db(n)?;
        let prefix = world_prefix(n);
        let label = if idempotent {
            "cobro / idempotent gw"
        } else {
            "cobro / memoryless gw"
        };
        let world = run_cobro(&sim, idempotent, &db_url, &prefix, &fleet, opts, bar(label)).await;
        sim.shutdown().await;
        let mut world = world?;
        world.name = format!("world {n}");
        world.gateway = if idempotent {
            "idempotent"
        } else {
            "memoryless"
        }
        .into();
        worlds.push(world);
    }
    if opts.database_url.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    Ok(report(opts, worlds))
}

fn report(opts: &DemoOptions, worlds: Vec<World>) -> Report {
    Report {
        orders: opts.orders,
        loss: opts.loss,
        seed: opts.seed,
        currency: "USD",
        database: match &opts.database_url {
            Some(url) if url.starts_with("sqlite:") => "sqlite (DATABASE_URL)".into(),
            Some(_) => "postgres (DATABASE_URL)".into(),
            None => "sqlite (throwaway, one file per world)".into(),
        },
        worlds,
        scenario: None,
        lesson: None,
    }
}

fn new_bar(name: &str, len: usize) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    let style =
        ProgressStyle::with_template("{prefix:>24} [{bar:40}] {pos}/{len} settled {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(name.to_owned());
    bar
}

async fn start_sim(idempotent: bool, loss: f64, opts: &DemoOptions) -> Result<SimHandle> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the simulator to 127.0.0.1")?;
    Ok(crate::sim::spawn(
        listener,
        SimConfig {
            idempotent,
            seed: opts.seed,
            per_order_draws: true,
            webhooks: None,
            faults: Faults {
                p_response_lost: loss,
                ..Faults::default()
            },
        },
    )
    .await?)
}

#[derive(Parser)]
struct WorkerFlags {
    #[command(flatten)]
    args: WorkerArgs,
}

/// A worker of the demo; `idempotent` tells it whether the world's gateway
/// honours keys (world 3's does not, and cobro is told so).
fn worker_args(
    db_url: &str,
    gateway: &str,
    name: &str,
    schedule: &str,
    idempotent: bool,
) -> Result<WorkerArgs> {
    Ok(WorkerFlags::try_parse_from([
        "cobro-worker",
        "--database-url",
        db_url,
        "--gateway",
        "sim",
        "--gateway-url",
        gateway,
        "--worker-name",
        name,
        "--concurrency",
        "8",
        "--check-schedule",
        schedule,
        "--reconcile-at",
        "off",
        "--gateway-idempotent",
        if idempotent { "true" } else { "false" },
    ])?
    .args)
}

async fn run_cobro(
    sim: &SimHandle,
    idempotent: bool,
    db_url: &str,
    prefix: &str,
    fleet: &[(String, i64)],
    opts: &DemoOptions,
    bar: Option<ProgressBar>,
) -> Result<World> {
    let started = Instant::now();
    let en_revision = drive(
        &|name| worker_args(db_url, &sim.url(), name, &opts.check_schedule, idempotent),
        db_url,
        prefix,
        fleet,
        None,
        opts.workers,
        bar,
    )
    .await?;
    let ledger = fetch_ledger(sim).await?;
    Ok(count(
        "cobro",
        fleet,
        prefix,
        &ledger,
        en_revision,
        started.elapsed(),
    ))
}

/// Runs `workers` cobro workers (settings from `args`, given each its
/// name) on `db_url`, enqueues the fleet, waits until every order is
/// settled (APROBADO, RECHAZADO or EN_REVISION), stops them; returns how
/// many wait for finance.
pub(crate) async fn drive(
    args: &dyn Fn(&str) -> Result<WorkerArgs>,
    db_url: &str,
    prefix: &str,
    fleet: &[(String, i64)],
    payment_method: Option<&str>,
    workers: usize,
    bar: Option<ProgressBar>,
) -> Result<i64> {
    let store = Store::connect(db_url, 4)
        .await
        .context("connecting to the demo database")?;
    store
        .migrate()
        .await
        .context("migrating the demo database")?;
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    for k in 0..workers {
        let name = format!(
            "demo-{}-{k}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let (stop, rx) = oneshot::channel::<()>();
        stops.push(stop);
        tasks.push(tokio::spawn(crate::runtime::run(
            args(&name)?,
            async move {
                let _ = rx.await;
            },
        )));
    }
    for (order, amount) in fleet {
        let req = ChargeRequest::parse(
            &format!("{prefix}{order}"),
            *amount,
            "USD",
            None,
            payment_method,
        )?;
        store.enqueue(&req).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let en_revision = loop {
        let (settled, review) = settled_counts(&store, prefix).await?;
        if let Some(b) = &bar {
            b.set_position(settled as u64);
        }
        if settled as usize >= fleet.len() {
            break review;
        }
        if Instant::now() > deadline {
            bail!(
                "the fleet did not settle within 10 minutes ({settled}/{} settled)",
                fleet.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if let Some(b) = &bar {
        b.finish();
    }
    for stop in stops {
        let _ = stop.send(());
    }
    for t in tasks {
        t.await??;
    }
    store.close().await;
    Ok(en_revision)
}

/// Attempts of this run that no worker will move again, and how many of
/// them wait for finance.
async fn settled_counts(store: &Store, prefix: &str) -> Result<(i64, i64)> {
    let by_state = store.count_by_state_of_orders(prefix).await?;
    let get = |s: State| {
        by_state
            .iter()
            .find(|(st, _)| *st == s)
            .map_or(0, |(_, n)| *n)
    };
    let review = get(State::EnRevision);
    Ok((
        get(State::Aprobado) + get(State::Rechazado) + review,
        review,
    ))
}

pub(crate) async fn fetch_ledger(sim: &SimHandle) -> Result<Ledger> {
    Ok(reqwest::get(format!("{}/ledger", sim.url()))
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// Counts one world from the gateway's ledger.
pub(crate) fn count(
    client: &str,
    fleet: &[(String, i64)],
    prefix: &str,
    ledger: &Ledger,
    en_revision: i64,
    wall: Duration,
) -> World {
    let intent: i128 = fleet.iter().map(|(_, a)| i128::from(*a)).sum();
    let mut per_order: HashMap<&str, usize> = HashMap::new();
    let mut total: i128 = 0;
    for e in ledger
        .entries
        .iter()
        .filter(|e| e.status == crate::sim::APPROVED)
    {
        *per_order.entry(e.order_id.as_str()).or_default() += 1;
        total += i128::from(e.amount_minor);
    }
    let not_charged = fleet
        .iter()
        .filter(|(o, _)| !per_order.contains_key(format!("{prefix}{o}").as_str()))
        .count();
    let overcharge = total - intent;
    World {
        name: String::new(),
        client: client.into(),
        gateway: String::new(),
        intent_total_minor: intent,
        orders: fleet.len(),
        attempts_sent: ledger.stats.charge_requests,
        ledger_charges: per_order.values().sum(),
        orders_charged_twice: per_order.values().filter(|n| **n >= 2).count(),
        orders_not_charged: not_charged,
        total_charged_minor: total,
        overcharge_minor: overcharge,
        overcharge_pct: percent_of(overcharge, intent),
        en_revision,
        wall_ms: wall.as_millis() as u64,
    }
}

/// `part` as a percentage of `whole` (for the table only: amounts stay in
/// minor units); 0 when there was nothing to charge.
pub(crate) fn percent_of(part: i128, whole: i128) -> f64 {
    if whole > 0 {
        part as f64 * 100.0 / whole as f64
    } else {
        0.0
    }
}

/// By hand: `database_url` may hold a password.
impl std::fmt::Debug for DemoOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoOptions")
            .field("orders", &self.orders)
            .field("loss", &self.loss)
            .field("seed", &self.seed)
            .field("workers", &self.workers)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| "<redacted>"),
            )
            .field("gateway", &self.gateway)
            .finish_non_exhaustive()
    }
}
