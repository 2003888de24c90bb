//! The committed reference pages (`docs/src/reference/settings.md` and
//! `cli.md`) are what `cobro reference settings` and `cobro reference cli`
//! print now: a setting or command changed in the code without the pages
//! being regenerated fails here, with the command that regenerates them.

use std::path::Path;
use std::process::Command;

/// What `cobro reference <page>` prints, run as the real binary with no
/// setting in its environment (the pages must not depend on one).
fn printed(page: &str) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cobro"));
    cmd.args(["reference", page]);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if name.starts_with("COBRO_") || name.starts_with("STRIPE_") || name.ends_with("_URL") {
            cmd.env_remove(name);
        }
    }
    let out = cmd.output().expect("run cobro reference");
    assert!(
        out.status.success(),
        "cobro reference {page} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the page is UTF-8")
}

/// The first line that differs, for the failure message.
fn first_difference(committed: &str, printed: &str) -> String {
    let mut a = committed.lines();
    let mut b = printed.lines();
    for n in 1.. {
        match (a.next(), b.next()) {
            (None, None) => break,
            (x, y) if x == y => continue,
            (x, y) => {
                return format!(
                    "line {n}:\n  committed: {}\n  printed:   {}",
                    x.unwrap_or("(end of file)"),
                    y.unwrap_or("(end of file)")
                );
            }
        }
    }
    "the files differ only in their final newline".to_owned()
}

fn check(page: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/src/reference")
        .join(format!("{page}.md"));
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let printed = printed(page);
    assert!(
        committed == printed,
        "docs/src/reference/{page}.md is not what `cobro reference {page}` prints \
         ({}).\nRegenerate it:\n\n    cargo run -q -- reference {page} > docs/src/reference/{page}.md\n",
        first_difference(&committed, &printed)
    );
}

#[test]
fn the_settings_page_is_what_the_code_defines() {
    check("settings");
}

#[test]
fn the_command_line_page_is_what_the_code_defines() {
    check("cli");
}

#[test]
fn the_pages_do_not_depend_on_the_environment() {
    let plain = printed("settings");
    let out = Command::new(env!("CARGO_BIN_EXE_cobro"))
        .args(["reference", "settings"])
        .env("COBRO_CONCURRENCY", "3")
        .env("DATABASE_URL", "postgres://secret@db/cobro")
        .env("COLUMNS", "40")
        .output()
        .expect("run cobro reference");
    assert_eq!(String::from_utf8_lossy(&out.stdout), plain);
}
