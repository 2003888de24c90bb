//! Shrinking a failing case: delta debugging over its steps. Remove chunks
//! of steps, halving the chunk size down to single steps, and keep every
//! removal after which a fresh world (new database, new simulator, new web
//! process) still breaks the same invariant; then try each remaining step's
//! plainer versions ([`Step::simpler`]) the same way; repeat until a whole
//! round changes nothing, or the time budget is spent.
//!
//! Invariant: what it returns always broke the invariant it was asked
//! about, in a replay of its own (the shrunk sequence is evidence, not a
//! guess); a candidate that breaks another invariant, or none, is dropped.

use std::time::{Duration, Instant};

use super::common::TestDb;
use super::steps::Step;
use super::{Run, run_case};

/// The smallest failing sequence found, the run that showed it, how many
/// replays it took.
pub struct Shrunk {
    pub steps: Vec<Step>,
    pub run: Run,
    pub replays: usize,
    pub took: Duration,
}

/// Shrinks `steps`, whose run `first` broke invariant `invariant`.
pub async fn shrink(
    template: &TestDb,
    steps: Vec<Step>,
    first: Run,
    invariant: u8,
    budget: Duration,
) -> Shrunk {
    let started = Instant::now();
    let mut best = Shrunk {
        steps: cut_at_failure(steps, &first),
        run: first,
        replays: 0,
        took: Duration::ZERO,
    };
    loop {
        let mut changed = false;
        let mut chunk = best.steps.len().div_ceil(2).max(1);
        loop {
            let mut removed_any = false;
            let mut i = 0;
            while i < best.steps.len() {
                if started.elapsed() > budget {
                    best.took = started.elapsed();
                    return best;
                }
                let end = (i + chunk).min(best.steps.len());
                let candidate: Vec<Step> = best.steps[..i]
                    .iter()
                    .chain(&best.steps[end..])
                    .copied()
                    .collect();
                if try_candidate(template, candidate, invariant, &mut best).await {
                    removed_any = true;
                    changed = true;
                } else {
                    i += chunk;
                }
            }
            if chunk == 1 && !removed_any {
                break;
            }
            chunk = (chunk / 2).max(1);
        }
        let mut i = 0;
        while i < best.steps.len() {
            for plainer in best.steps[i].simpler() {
                if started.elapsed() > budget {
                    best.took = started.elapsed();
                    return best;
                }
                let mut candidate = best.steps.clone();
                candidate[i] = plainer;
                if try_candidate(template, candidate, invariant, &mut best).await {
                    changed = true;
                    break;
                }
            }
            i += 1;
        }
        if !changed {
            break;
        }
    }
    best.took = started.elapsed();
    best
}

/// Replays `candidate` in a fresh world; keeps it in `best` when it broke
/// `invariant` again.
async fn try_candidate(
    template: &TestDb,
    candidate: Vec<Step>,
    invariant: u8,
    best: &mut Shrunk,
) -> bool {
    best.replays += 1;
    let run = run_case(template, &candidate).await;
    let again = run
        .failure
        .as_ref()
        .is_some_and(|f| f.violation.invariant == invariant);
    if again {
        best.steps = cut_at_failure(candidate, &run);
        best.run = run;
    }
    again
}

/// The steps up to the one after which `run` failed (all of them when it
/// failed at the end).
fn cut_at_failure(mut steps: Vec<Step>, run: &Run) -> Vec<Step> {
    if let Some(n) = run.failure.as_ref().and_then(|f| f.after_step) {
        steps.truncate(n + 1);
    }
    steps
}
