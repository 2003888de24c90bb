//! A model-based test across all of cobro's doors (issue 27, item 8), on
//! both backends. A case is a seed; the seed gives a sequence of steps over
//! three orders (so the steps collide): enqueues over HTTP and SQL (new keys
//! and replayed ones), worker wake-ups with the gateway losing answers,
//! timing out, declining, throttling or down, a worker that vanishes
//! mid-send, time passing (minutes, or more than a day), signed gateway webhooks in any order, duplicated and
//! contradictory, finance's resolutions, manual retries and case closes,
//! the daily reconciliation (its cases, settlements and refund marks),
//! cancels with every reason, refunds, and the app's raw SQL. Everything is
//! real: PostgreSQL or SQLite, the gateway simulator and the web process as
//! HTTP servers on 127.0.0.1, the worker's engine in this process. A
//! refusal (a 409 or 422, an SQL error) is a legitimate outcome of a step;
//! only the invariants fail a case.
//!
//! The gateway is honest: it executes what it is sent, its webhooks tell
//! what its ledger holds, and a late approval (it approves a charge it had
//! declined) is told by webhook in the same step; it is only allowed for the
//! order's latest attempt, or for the one before a business retry not yet
//! sent, so no second charge can already be on its way when cobro hears of
//! it (the unsent retry is cobro's to hold). Once in a while the gateway
//! breaks one promise: it makes, late, a refund it had shown nothing of for
//! longer than the processing time it promises (so the review janitor had
//! confirmed finance's decline of it), and says so by webhook; cobro must
//! mark the refund made, so its amount counts as refunded. And a refund it
//! approved may fail there after it succeeded (the card's bank returned the
//! money), told by webhook too: cobro must mark it failed, so its amount
//! no longer counts as refunded. Finance is honest too: it decides an attempt in
//! doubt by what the gateway's ledger shows (a refund the gateway neither
//! approved nor declined it has looked up again). So every difference
//! between the two sides is cobro's to prevent or to explain. Two steps
//! are not honest, and cobro must hold against them: finance, hasty,
//! declines a refund in doubt without looking (a refund that was sent is
//! then declined only on the gateway's word); and a crossed webhook, signed,
//! carries one ledger entry's news under the key of another order's
//! attempt (a gateway's bug, or a stranger with the signing secret), which
//! must move nothing.
//!
//! Checked after every step:
//! 1. No order has two approved charges at the gateway (the simulator's
//!    ledger) unless all but one are refunded in full.
//! 2. Nothing but the gateway turns a refund down: a refund is `RECHAZADO`
//!    only by a decline the gateway gave and its ledger shows (the answer, a
//!    lookup, a webhook, the review janitor, or finance relaying it), by
//!    finance's decline confirmed by the review janitor while the gateway
//!    made no refund under its key (a refund it makes later is marked made
//!    in the refund's log), or by finance's decline of a refund never sent;
//!    never by a cancel.
//! 3. Every attempt's transition log is a valid chain: NULL -> `PENDIENTE`
//!    first, each row starting where the previous one ended, each row a move
//!    of `cobro::state::transition` for some event (or one that keeps the
//!    state), and the last row ending in the attempt's state.
//! 5. A cancel that means "do not charge" (`paid_by_other_means`,
//!    `fraud_suspected`, `duplicate_order`) is final: once one is recorded
//!    for an order, the gateway approves no charge for it under a key it
//!    had not seen before the cancel.
//! 6. No attempt is sent again after an unknown outcome (a move into
//!    `EN_PROCESO` with `DESCONOCIDO` earlier in its log) once its key is
//!    older than the gateway keeps keys, unless its gateway object is
//!    recorded: the gateway would make it again, not replay it. A step
//!    ages every key by two days (more than a day passes).
//!
//! Checked at the end of a case, after draining (time passes and the workers
//! run, the gateway healthy, until no attempt has work left; one that never
//! settles fails this invariant too; draining does not run the daily
//! reconciliation, so a difference must already be on a case, from any door
//! or a reconciliation step, or in review):
//! 4. Per order, the sum of our `APROBADO` charges minus our refunds
//!    (`APROBADO` ones not marked failed since, and `RECHAZADO` ones marked
//!    made) equals the gateway's approved charges minus its approved
//!    refunds, to the cent. Where they differ, every charge that nets
//!    (captured minus refunded) to different amounts on the two sides, or
//!    that the gateway made under a key we do not know, is explained: it or
//!    one of its refunds waits in `EN_REVISION` (finance's queue), or an
//!    open reconciliation case names it (its attempt, or the gateway's id of
//!    it or of one of its refunds). Finance closes a case only after
//!    settling it at the gateway (it refunds there what the case says was
//!    charged and we do not hold as charged; it waits while the case names
//!    a charge whose attempt of ours is not settled yet), so a closed case
//!    explains nothing: after it the two sides must agree again.
//!
//! A failure prints the backend, the seed and the failing sequence shrunk
//! (each step's `Debug`, one per line, with what cobro answered it).
//!
//! Before the random cases, every run replays a small corpus of fixed
//! cases (`model/corpus.rs`): chains of steps that reach a rare hold only by
//! a long run of luck.
//!
//! Environment:
//! - `COBRO_MODEL_SEED=N`: run only the case of seed N (replay a failure).
//! - `COBRO_MODEL_CASES` (default 40), `COBRO_MODEL_FIRST_SEED` (default 1):
//!   run the cases of seeds FIRST..FIRST+CASES.
//! - `COBRO_MODEL_STEPS` (default 40): steps per case.
//! - `COBRO_MODEL_SHRINK_SECS` (default 120): the time shrinking may take.
//! - `COBRO_MODEL_WITHOUT=kind,...`: leave these kinds of step out (e.g.
//!   `raw_reopen`), to look past a known defect.
//! - `COBRO_MODEL_VERBOSE=1`: print every step and its outcome as it runs.
//! - `COBRO_MODEL_KEEP_GOING=1`: after a failure (shrunk and printed), go
//!   on with the next cases; the test fails at the end with every report.
//!
//! `scripts/model-soak` runs thousands of cases in release mode.

#[macro_use]
mod common;
#[path = "model/corpus.rs"]
mod corpus;
#[path = "model/invariants.rs"]
mod invariants;
#[path = "model/shrink.rs"]
mod shrink;
#[path = "model/steps.rs"]
mod steps;
#[path = "model/world.rs"]
mod world;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cobro::store::Backend;
use invariants::{Marks, Violation};
use steps::Step;
use world::World;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_model() {
    if common::skip_postgres() {
        return;
    }
    run(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_model() {
    run(Backend::Sqlite).await;
}

/// A run of steps that broke an invariant: after which step (`None`: at
/// the end, after draining) and what.
pub struct Failure {
    pub after_step: Option<usize>,
    pub violation: Violation,
}

/// What running a sequence of steps in a fresh world found.
pub struct Run {
    pub failure: Option<Failure>,
    /// What cobro answered each step that ran.
    pub outcomes: Vec<String>,
    /// The causes in the attempts' transition logs: which of cobro's moves
    /// the case reached (printed at the end of a run, so a reader sees what
    /// the random steps covered).
    pub causes: BTreeSet<String>,
}

/// Runs `steps` in a fresh world (its database a copy of `template`),
/// checking after each; then drains and checks the end.
pub async fn run_case(template: &common::TestDb, steps: &[Step]) -> Run {
    let verbose = std::env::var_os("COBRO_MODEL_VERBOSE").is_some();
    let mut world = World::start(template).await;
    let mut marks = Marks::default();
    let mut outcomes = Vec::with_capacity(steps.len());
    let mut failure = None;
    let mut causes = BTreeSet::new();
    let mut reached = |snapshot: &world::Snapshot| {
        for (_, log) in &snapshot.attempts {
            causes.extend(log.iter().map(|t| t.cause.clone()));
        }
    };
    for (i, step) in steps.iter().enumerate() {
        let outcome = world.exec(step).await;
        if verbose {
            println!("  {step:?}\n      => {outcome}");
        }
        outcomes.push(outcome);
        let snapshot = world.snapshot().await;
        reached(&snapshot);
        if let Err(violation) = invariants::after_step(&snapshot, &mut marks) {
            failure = Some(Failure {
                after_step: Some(i),
                violation,
            });
            break;
        }
    }
    if failure.is_none() {
        let end = match world.drain(12).await {
            Err(stuck) => Err(Violation {
                invariant: 4,
                detail: stuck,
            }),
            Ok(()) => {
                let snapshot = world.snapshot().await;
                reached(&snapshot);
                invariants::after_step(&snapshot, &mut marks)
                    .and_then(|()| invariants::reconciled(&snapshot))
            }
        };
        failure = end.err().map(|violation| Failure {
            after_step: None,
            violation,
        });
    }
    world.stop().await;
    Run {
        failure,
        outcomes,
        causes,
    }
}

struct Settings {
    seeds: Vec<u64>,
    steps: usize,
    shrink_budget: Duration,
    without: Vec<String>,
    keep_going: bool,
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

fn settings() -> Settings {
    let seeds = match std::env::var("COBRO_MODEL_SEED") {
        Ok(_) => vec![env_u64("COBRO_MODEL_SEED", 0)],
        Err(_) => {
            let first = env_u64("COBRO_MODEL_FIRST_SEED", 1);
            (first..first + env_u64("COBRO_MODEL_CASES", 40)).collect()
        }
    };
    let without: Vec<String> = std::env::var("COBRO_MODEL_WITHOUT")
        .unwrap_or_default()
        .split(',')
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
        .collect();
    steps::check_kinds(&without).unwrap_or_else(|e| panic!("{e}"));
    Settings {
        seeds,
        steps: env_u64("COBRO_MODEL_STEPS", 40) as usize,
        shrink_budget: Duration::from_secs(env_u64("COBRO_MODEL_SHRINK_SECS", 120)),
        without,
        keep_going: std::env::var_os("COBRO_MODEL_KEEP_GOING").is_some(),
    }
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Postgres => "postgres",
        Backend::Sqlite => "sqlite",
    }
}

async fn run(backend: Backend) {
    common::init_logs();
    let s = settings();
    let started = Instant::now();
    let name = backend_name(backend);
    // Every case's database is a copy of this one, migrated once.
    let template = common::TestDb::template(backend).await;
    let mut reports = Vec::new();
    // Answers 5xx, or a rule's refusal the route did not check first: no
    // invariant, but worth a look (see the verbose output).
    let mut server_errors = 0;
    let mut causes = BTreeSet::new();
    // The corpus first: the rarest holds, driven every run.
    for (what, steps) in corpus::cases() {
        let run = run_case(&template, &steps).await;
        causes.extend(run.causes.iter().cloned());
        match &run.failure {
            None => println!("{name} corpus, {what}: every invariant held"),
            Some(failure) => {
                let mut report = format!(
                    "model test failed on {name}, corpus case {what}: {}\n",
                    failure.violation
                );
                for (step, outcome) in steps.iter().zip(&run.outcomes) {
                    report.push_str(&format!("  {step:?}\n      => {outcome}\n"));
                }
                reports.push(report);
            }
        }
    }
    for &seed in &s.seeds {
        let case_started = Instant::now();
        let steps = steps::generate(seed, s.steps, &s.without);
        let run = run_case(&template, &steps).await;
        server_errors += run
            .outcomes
            .iter()
            .filter(|o| o.contains("SERVER ERROR") || o.contains("RULE REFUSAL"))
            .count();
        causes.extend(run.causes.iter().cloned());
        let Some(failure) = &run.failure else {
            println!(
                "{name} seed {seed}: {} steps, every invariant held ({:.1} s)",
                steps.len(),
                case_started.elapsed().as_secs_f64()
            );
            continue;
        };
        let invariant = failure.violation.invariant;
        println!(
            "{name} seed {seed}: {} ({}); shrinking",
            failure.violation,
            failure
                .after_step
                .map_or("at the end, after draining".into(), |i| {
                    format!("after step {}", i + 1)
                })
        );
        let shrunk =
            shrink::shrink(&template, steps.clone(), run, invariant, s.shrink_budget).await;
        let report = report(name, seed, &s, steps.len(), &shrunk);
        if !s.keep_going {
            reports.push(report);
            break;
        }
        println!("{report}");
        reports.push(report);
    }
    template.drop_db().await;
    println!(
        "{name}: the transition causes these cases reached ({}): {}",
        causes.len(),
        causes.into_iter().collect::<Vec<_>>().join(", ")
    );
    assert!(
        reports.is_empty(),
        "{} failed:\n\n{}",
        match s.keep_going {
            true => format!("{} of {} cases", reports.len(), s.seeds.len()),
            false => "a case".to_owned(),
        },
        reports.join("\n")
    );
    println!(
        "{name}: {} cases of {} steps, every invariant held ({:.1} s); {server_errors} steps answered 5xx or a rule's refusal",
        s.seeds.len(),
        s.steps,
        started.elapsed().as_secs_f64()
    );
}

fn report(name: &str, seed: u64, s: &Settings, original: usize, shrunk: &shrink::Shrunk) -> String {
    let failure = shrunk
        .run
        .failure
        .as_ref()
        .expect("a shrunk run fails by construction");
    let mut out = format!(
        "model test failed on {name}, seed {seed}: {}\n\
         replay: COBRO_MODEL_SEED={seed} COBRO_MODEL_STEPS={}{} cargo test --test model {name}_model\n\
         shrunk from {original} to {} steps in {} replays ({:.0} s); it broke after {}:\n",
        failure.violation,
        s.steps,
        match s.without.is_empty() {
            true => String::new(),
            false => format!(" COBRO_MODEL_WITHOUT={}", s.without.join(",")),
        },
        shrunk.steps.len(),
        shrunk.replays,
        shrunk.took.as_secs_f64(),
        failure
            .after_step
            .map_or("draining, at the end".into(), |i| format!("step {}", i + 1)),
    );
    for (step, outcome) in shrunk.steps.iter().zip(&shrunk.run.outcomes) {
        out.push_str(&format!("  {step:?}\n      => {outcome}\n"));
    }
    out
}
