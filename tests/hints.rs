//! Every `cobro …` command a person is told to run exists: each one named
//! (in backticks) in `cobro --help`, every subcommand's `--help`,
//! `cobro-worker --help`, the source's messages and docs (which become
//! help texts and error hints), the README and every page of the book
//! (`docs/src/**/*.md`) is run with `--help`, which must succeed.
//! (`cobro api-key new`, once named by two hints, fails.)

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn run(bin: &str, args: &[String]) -> (bool, String) {
    let out = Command::new(bin)
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
        .expect("run the binary");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn cobro() -> &'static str {
    env!("CARGO_BIN_EXE_cobro")
}

/// The subcommands a help text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// Every help text of `cobro` (each level of subcommands) and of
/// `cobro-worker`.
fn help_texts() -> Vec<String> {
    let mut texts = Vec::new();
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = todo.pop() {
        let mut args = path.clone();
        args.push("--help".into());
        let (ok, help) = run(cobro(), &args);
        assert!(ok, "cobro {args:?}: {help}");
        for sub in subcommands(&help) {
            let mut next = path.clone();
            next.push(sub);
            todo.push(next);
        }
        texts.push(help);
    }
    let (ok, worker) = run(env!("CARGO_BIN_EXE_cobro-worker"), &["--help".into()]);
    assert!(ok, "{worker}");
    texts.push(worker);
    assert!(texts.len() > 20, "every subcommand's help: {}", texts.len());
    texts
}

/// The command paths of every backticked `cobro …` / `cobro-worker …`:
/// the words after the binary up to the first flag, placeholder or
/// anything else that is not a lower-case command word.
fn mentioned(text: &str, into: &mut BTreeSet<Vec<String>>) {
    for piece in text.split('`').skip(1).step_by(2) {
        let mut words = piece.split_whitespace();
        let bin = match words.next() {
            Some(b @ ("cobro" | "cobro-worker")) => b,
            _ => continue,
        };
        let mut path = vec![bin.to_owned()];
        path.extend(
            words
                .take_while(|w| {
                    w.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !w.starts_with('-')
                })
                .map(str::to_owned),
        );
        into.insert(path);
    }
}

/// Every file under `dir` whose extension is `ext`, read for commands;
/// returns how many files were read.
fn files(dir: &Path, ext: &str, into: &mut BTreeSet<Vec<String>>) -> usize {
    let mut read = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read += files(&path, ext, into);
        } else if path.extension().is_some_and(|e| e == ext) {
            mentioned(&std::fs::read_to_string(&path).unwrap(), into);
            read += 1;
        }
    }
    read
}

fn sources(dir: &Path, into: &mut BTreeSet<Vec<String>>) {
    files(dir, "rs", into);
}

#[test]
fn every_command_a_hint_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut named = BTreeSet::new();
    for help in help_texts() {
        mentioned(&help, &mut named);
    }
    let from_help = named.clone();
    sources(&root.join("src"), &mut named);
    sources(&root.join("workers"), &mut named);
    mentioned(
        &std::fs::read_to_string(root.join("README.md")).unwrap(),
        &mut named,
    );
    let pages = files(&root.join("docs/src"), "md", &mut named);
    assert!(pages > 20, "the book's pages are read: {pages}");
    let path = |p: &[&str]| p.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    assert!(
        from_help.contains(&path(&["cobro", "api-key"]))
            && from_help.contains(&path(&["cobro", "attempts", "show"])),
        "the help texts' hints are collected: {from_help:?}"
    );
    assert!(named.contains(&path(&["cobro", "migrate"])), "{named:?}");
    let mut broken = Vec::new();
    for path in &named {
        let bin = match path[0].as_str() {
            "cobro" => cobro(),
            _ => env!("CARGO_BIN_EXE_cobro-worker"),
        };
        let mut args: Vec<String> = path[1..].to_vec();
        args.push("--help".into());
        let (ok, out) = run(bin, &args);
        if !ok {
            broken.push(format!(
                "{}: {}",
                path.join(" "),
                out.lines().next().unwrap_or("")
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "hints naming commands that do not exist: {broken:#?}"
    );
}

#[test]
fn the_check_catches_a_command_that_does_not_exist() {
    let mut named = BTreeSet::new();
    mentioned("run `cobro api-key new` to make one", &mut named);
    let path = named.into_iter().next().unwrap();
    assert_eq!(path, ["cobro", "api-key", "new"]);
    let (ok, _) = run(cobro(), &["api-key".into(), "new".into(), "--help".into()]);
    assert!(!ok, "`cobro api-key new` is not a command");
}
