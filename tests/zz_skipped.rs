//! The run's closing count of tests that ran nothing. `cargo test` runs its
//! test binaries in name order, so this one comes last: it reads the lines
//! the others appended to `target/skipped-tests.txt`
//! (`tests/common/python.rs`'s `skipped`) under the same `cargo test`
//! process, and prints how many tests were skipped and the command that
//! lets each run. A skip is never a pass in silence; with `CI` set the
//! tests that would skip fail instead.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::io::Write;

#[test]
fn the_skipped_tests_of_this_run_are_counted() {
    let file = common::python::skips_file();
    let run = std::os::unix::process::parent_id().to_string();
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let (ours, others): (Vec<&str>, Vec<&str>) = text
        .lines()
        .partition(|l| l.split('\t').next() == Some(run.as_str()));
    // command -> (count, a reason)
    let mut by_fix: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    for line in &ours {
        let f: Vec<&str> = line.split('\t').collect();
        let (reason, fix) = (
            f.get(2).copied().unwrap_or(""),
            f.get(3).copied().unwrap_or(""),
        );
        let e = by_fix.entry(fix).or_insert((0, reason));
        e.0 += 1;
    }
    let mut err = std::io::stderr();
    if ours.is_empty() {
        let _ = writeln!(err, "== no test was skipped in this run");
    } else {
        let _ = writeln!(
            err,
            "== {} test(s) SKIPPED in this run: they ran nothing and are not passes",
            ours.len()
        );
        for (fix, (n, reason)) in &by_fix {
            let _ = writeln!(err, "   {n:>4}  {reason}; to run them: {fix}");
        }
    }
    // This run's lines are reported; keep only what another run wrote.
    let rest: String = others.iter().map(|l| format!("{l}\n")).collect();
    let _ = std::fs::write(&file, rest);
    assert!(
        std::env::var_os("CI").is_none() || ours.is_empty(),
        "CI is set and {} test(s) were skipped",
        ours.len()
    );
}
