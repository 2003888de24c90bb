//! The house's floors (docs/architecture.md): a module of `src/` may import
//! only modules on a floor below its own, never one beside it or above it.
//! The table below is the one in docs/architecture.md; this test reads every
//! source file and fails on an import that climbs, naming the file, the line
//! and the floors. `src/store/` is the floor everything else stands on: a
//! store that imports the engine, the metrics or the reconciliation is the
//! knot this test exists to keep untied.
//!
//! What counts as an import: a `crate::<module>` path in code (comments and
//! doc links are not imports). Test modules (`tests.rs`, `*_tests.rs`,
//! files under a `tests/` folder of `src/`) may
//! use anything, as tests do (the gateway's tests start the simulator). The
//! binary (`main.rs`, `cli/`) is the top floor and is not read.
//!
//! The database's big rules are made of helpers
//! (migrations/postgres/20261215000001_rule_helpers.sql, and
//! 20261216000001_every_door_held.sql for charge_gate): a later migration
//! changes a decision by redefining its helper, not the whole rule, so the
//! next change is one small diff and not a copy of the rule.

use std::path::{Path, PathBuf};

/// Each module of `src/` and its floor, from the ground up.
const FLOORS: &[(&str, u8)] = &[
    // Values with no I/O: parsed input, the state machine, the schedule.
    ("domain", 1),
    ("state", 1),
    ("backoff", 1),
    // The edges the store does not need: the gateway's adapters, the HTTP
    // server loop and API keys.
    ("gateway", 2),
    ("http", 2),
    // Pure decisions over those values.
    ("policy", 3),
    ("retry", 3),
    // All SQL.
    ("store", 4),
    // What stands on the store alone.
    ("metrics", 5),
    ("wakeq", 5),
    ("pause", 5),
    ("janitor", 5),
    ("retention", 5),
    ("breaker", 6),
    ("finance", 6),
    ("engine", 7),
    ("operator", 7),
    ("recon", 8),
    ("webhook", 9),
    ("notify", 10),
    ("sim", 10),
    ("web", 10),
    ("runtime", 11),
    ("chaos", 11),
    ("demo", 12),
    ("cli", 13),
    ("main", 14),
];

fn floor(module: &str) -> Option<u8> {
    FLOORS.iter().find(|(m, _)| *m == module).map(|(_, f)| *f)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

/// `file` is relative to `src/` (a checkout may itself sit in a folder
/// named `tests`).
fn is_test_file(file: &Path) -> bool {
    let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let in_tests_folder = file
        .parent()
        .into_iter()
        .flat_map(Path::components)
        .any(|c| c.as_os_str() == "tests");
    name == "tests" || name.ends_with("_tests") || in_tests_folder
}

/// Every `crate::<module>` the code (not the comments) of `text` names,
/// with its line number, up to an inline test module (`#[cfg(test)]` then
/// `mod … {`, by custom the end of a file).
fn imports(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]"
            && lines.get(n + 1).is_some_and(|next| {
                let next = next.trim();
                next.starts_with("mod ") && next.ends_with('{')
            })
        {
            break;
        }
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push((n + 1, name));
            }
            rest = after;
        }
        // `use crate::{a, b}` names several modules at once.
        if let Some(i) = code.find("crate::{") {
            let list = &code[i + "crate::{".len()..];
            for part in list.split([',', '}']) {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push((n + 1, name));
                }
            }
        }
    }
    found
}

#[test]
fn no_module_imports_one_on_its_own_floor_or_above() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut climbs = Vec::new();
    let mut unplaced = Vec::new();
    let mut checked = 0;
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        // `main.rs` and `cli/` are the binary, the top floor: their
        // `crate::` is the binary's own, and nothing can climb above them.
        let rel = file.strip_prefix(&src).unwrap_or(file);
        if matches!(module.as_str(), "lib" | "main" | "cli") || is_test_file(rel) {
            continue;
        }
        let Some(own) = floor(&module) else {
            unplaced.push(module);
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        for (line, target) in imports(&text) {
            checked += 1;
            if target == module {
                continue;
            }
            match floor(&target) {
                Some(f) if f < own => {}
                Some(f) => climbs.push(format!(
                    "{}:{line}: {module} (floor {own}) imports {target} (floor {f})",
                    file.strip_prefix(&src).unwrap().display()
                )),
                None => unplaced.push(target),
            }
        }
    }
    unplaced.sort();
    unplaced.dedup();
    assert!(
        unplaced.is_empty(),
        "modules with no floor in the table (add them here and in docs/architecture.md): {unplaced:?}"
    );
    assert!(
        checked > 200,
        "only {checked} imports read: is the parser broken?"
    );
    assert!(
        climbs.is_empty(),
        "imports that climb a floor or cross one:\n{}",
        climbs.join("\n")
    );
}

#[test]
fn the_parser_sees_paths_and_lists_but_not_comments() {
    let text = "use crate::store::Store;\n\
                use crate::{domain::X, state::State};\n\
                //! [`crate::engine`] is above\n\
                let x = crate::metrics::count(); // crate::web in a comment\n\
                #[cfg(test)]\n\
                mod tests {\n\
                use crate::sim::Faults;\n";
    let names: Vec<String> = imports(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["store", "domain", "state", "metrics"]);
}

#[test]
fn the_table_matches_the_documented_layers() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .expect("docs/architecture.md");
    for (module, floor) in FLOORS {
        let row = format!("| {floor} | ");
        let listed = doc
            .lines()
            .filter(|l| l.starts_with(&row))
            .any(|l| l.contains(&format!("`{module}`")));
        assert!(
            listed,
            "docs/architecture.md lists `{module}` on floor {floor}"
        );
    }
}

/// The rules whose bodies are made of helpers, each with the migration
/// that split it: a later migration redefines a helper, never the rule.
const RULES: [(&str, &str); 4] = [
    ("cobro.enqueue_charge", "20261215000001"),
    ("cobro.business_retry", "20261215000001"),
    ("cobro.guard_refund", "20261215000001"),
    ("cobro.charge_gate", "20261216000001"),
];

#[test]
fn no_migration_after_the_split_redefines_a_big_rule_whole() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut offences = Vec::new();
    for (rule, split) in RULES {
        let mut seen_split = false;
        for name in &names {
            let sql = std::fs::read_to_string(dir.join(name))
                .unwrap()
                .to_lowercase();
            let defines = sql.contains(&format!("function {rule}("));
            if name.starts_with(split) {
                seen_split = true;
                assert!(defines, "{name} defines {rule} from its helpers");
            } else if name.as_str() > split && defines {
                offences.push(format!("{name}: {rule}"));
            }
        }
        assert!(seen_split, "the split migration {split}_* of {rule} exists");
    }
    assert!(
        offences.is_empty(),
        "a migration redefines a whole rule after its split; redefine the helper \
         that holds the decision (cobro.same_charge, cobro.retry_number, cobro.retry_method, \
         cobro.insert_retry, cobro.refunded_of, cobro.refuse_over_maximum, \
         cobro.refuse_charged_or_live, cobro.refuse_held_order) or add a new helper the rule \
         calls: {offences:?}"
    );
}
