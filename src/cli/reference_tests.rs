//! Tests of `cobro reference`: every variable the sources read is on the
//! settings page, every command on the CLI page, and no setting that may
//! hold a secret shows its value in `--help`.

use std::collections::BTreeSet;
use std::path::Path;

use super::*;

/// Every variable a clap definition of either program reads.
fn clap_envs() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for program in programs() {
        for place in places(&program) {
            for arg in place.cmd.get_arguments() {
                if let Some(env) = arg.get_env() {
                    out.insert(env.to_string_lossy().into_owned());
                }
            }
        }
    }
    out
}

/// The variables `text` reads by name: `env::var("…")`,
/// `env::var_os("…")`, and `RUST_LOG` through tracing's
/// `from_default_env`.
fn reads(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for opener in ["env::var(\"", "env::var_os(\""] {
        for (at, _) in text.match_indices(opener) {
            let rest = &text[at + opener.len()..];
            if let Some(end) = rest.find('"') {
                out.insert(rest[..end].to_owned());
            }
        }
    }
    if text.contains("from_default_env") {
        out.insert("RUST_LOG".to_owned());
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A test file (`tests.rs`, `*_tests.rs`) reads the test harness's
/// variables, not settings.
fn is_test_file(path: &Path) -> bool {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem == "tests" || stem.ends_with("_tests")
}

#[test]
fn every_variable_the_sources_read_is_on_the_settings_page() {
    let known: BTreeSet<String> = clap_envs()
        .into_iter()
        .chain(OUTSIDE_CLAP.iter().map(|(v, _, _)| (*v).to_owned()))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("workers"), &mut files);
    files.sort();
    let this = Path::new(file!());
    let mut unknown = Vec::new();
    for file in files {
        if is_test_file(&file) || file.ends_with(this) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for var in reads(&text) {
            if !known.contains(&var) {
                unknown.push(format!("{} reads {var}", file.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "environment variables read outside clap and missing from OUTSIDE_CLAP in \
         src/cli/reference.rs (add each with what it does, then regenerate \
         docs/src/reference/settings.md):\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_scan_sees_a_variable_read_by_name() {
    let text = r#"let a = std::env::var("COBRO_NEW").ok(); let b = env::var_os("OTHER");"#;
    let found: Vec<String> = reads(text).into_iter().collect();
    assert_eq!(found, ["COBRO_NEW", "OTHER"]);
    assert!(!clap_envs().contains("COBRO_NEW"));
}

#[test]
fn the_outside_table_holds_no_clap_setting() {
    let clap = clap_envs();
    for (var, _, _) in OUTSIDE_CLAP {
        assert!(
            !clap.contains(*var),
            "{var} is a clap env; drop it from OUTSIDE_CLAP"
        );
    }
}

/// A setting whose value may carry a secret: a URL (a password or a
/// token in it), a secret, a key.
fn may_hold_a_secret(var: &str) -> bool {
    var.ends_with("_URL")
        || var.ends_with("_BASE")
        || var.contains("SECRET")
        || var.ends_with("_KEY")
        || var.ends_with("_KEYS")
}

/// clap prints an `env` setting's current value in `--help` unless told
/// not to: `DATABASE_URL=postgres://u:pw@…` showed its password there.
#[test]
fn help_never_prints_a_setting_that_may_hold_a_secret() {
    let mut shown = Vec::new();
    for program in programs() {
        for place in places(&program) {
            for arg in place.cmd.get_arguments() {
                let Some(var) = arg.get_env().map(|v| v.to_string_lossy().into_owned()) else {
                    continue;
                };
                if may_hold_a_secret(&var) && !arg.is_hide_env_values_set() {
                    shown.push(format!("{} --{} ({var})", place.path, arg.get_id()));
                }
            }
        }
    }
    assert!(
        shown.is_empty(),
        "these settings' values would be printed by --help; give each \
         `hide_env_values = true`:\n{}",
        shown.join("\n")
    );
    assert!(may_hold_a_secret("DATABASE_URL") && !may_hold_a_secret("COBRO_KEY_LIFETIME"));
}

#[test]
fn the_pages_name_every_setting_and_command() {
    let settings = render(&ReferencePage::Settings);
    for var in clap_envs() {
        assert!(settings.contains(&format!("`{var}`")), "{var} missing");
    }
    let cli = render(&ReferencePage::Cli);
    for program in programs() {
        for place in places(&program) {
            assert!(
                cli.contains(&format!("## {}\n", place.path)),
                "{}",
                place.path
            );
        }
    }
}

/// The parsed arguments of the commands that take a database URL, a
/// role's URL or a signing secret show none of it in `Debug`.
#[test]
fn no_parsed_command_shows_a_secret_in_debug() {
    use clap::Parser;
    let url = "postgres://user:s3cret@db.internal/cobro";
    let shown = |args: &[&str]| -> String {
        let cli = crate::Cli::try_parse_from(args).expect("the command parses");
        match cli.command {
            crate::Command::Reconcile(c) => format!("{c:?}"),
            crate::Command::Chaos(c) => format!("{c:?}"),
            crate::Command::GatewaySim(c) => format!("{c:?}"),
            _ => unreachable!("a command this test does not read"),
        }
    };
    for args in [
        &[
            "cobro",
            "reconcile",
            "--database-url",
            url,
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-02",
        ][..],
        &["cobro", "chaos", "--admin-url", url][..],
        &[
            "cobro",
            "gateway-sim",
            "--webhook-url",
            "http://127.0.0.1:1/",
            "--webhook-secret",
            "whsec_s3cret",
        ][..],
    ] {
        let debug = shown(args);
        assert!(
            !debug.contains("s3cret") && debug.contains("redacted"),
            "{args:?}: {debug}"
        );
    }
}
