//! `cobro reference settings` and `cobro reference cli`: the settings and
//! command-line reference pages (`docs/src/reference/`), printed as Markdown
//! from clap's own definitions of both programs (`cobro` and
//! `cobro-worker`), so a page says what the code accepts and nothing else.
//!
//! Invariant: the output depends only on the definitions: no terminal
//! width, no environment value, clap's own order. `tests/reference_docs.rs`
//! fails when a committed page differs from what these print. The few
//! variables read outside clap are listed in [`OUTSIDE_CLAP`]; a test (reference_tests.rs)
//! fails when the sources read one that is in neither.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory, Subcommand};

/// Which page to print.
#[derive(Subcommand)]
pub enum ReferencePage {
    /// Every setting of each process and command: environment variable,
    /// flag, default and meaning (docs/src/reference/settings.md).
    Settings,
    /// Every command and subcommand of `cobro` and `cobro-worker`: usage,
    /// description, arguments (docs/src/reference/cli.md).
    Cli,
}

/// Environment variables read outside clap's definitions: (variable, read
/// by, meaning). Every other variable the code reads is a clap `env`, and
/// the settings page prints both.
pub const OUTSIDE_CLAP: &[(&str, &str, &str)] = &[
    (
        "RUST_LOG",
        "every process",
        "Which log lines are written (to standard error): a level (`debug`, `info`, `warn`, \
         `error`) or per-module filters such as `info,sqlx=warn`. Unset: `info` \
         (`cobro demo`: `warn`).",
    ),
    (
        "COBRO_LOG_FORMAT",
        "every process",
        "`json`: one JSON object per log line, for a log collector. Anything else, or unset: \
         plain text lines.",
    ),
    (
        "NO_COLOR",
        "every process",
        "Set to a non-empty value: plain-text log lines carry no colour codes.",
    ),
    (
        "HOSTNAME",
        "cobro-worker",
        "The host part of the worker's name (`<host>-<pid>`) when `COBRO_WORKER_NAME` is unset \
         and `/etc/hostname` is missing or empty.",
    ),
];

/// The page's text.
pub fn render(page: &ReferencePage) -> String {
    match page {
        ReferencePage::Settings => settings(),
        ReferencePage::Cli => cli(),
    }
}

/// Both programs, built (global arguments propagated, names filled in).
fn programs() -> [Command; 2] {
    let mut cobro = crate::Cli::command();
    cobro.build();
    let mut worker = cobro::runtime::WorkerCli::command();
    worker.build();
    [cobro, worker]
}

/// A command and where it sits: its full name (`cobro escalations list`)
/// and its parent.
struct Place<'a> {
    path: String,
    cmd: &'a Command,
    parent: Option<&'a Command>,
}

/// Every command of `root`, depth first, in clap's order, without clap's
/// own `help` subcommand.
fn places(root: &Command) -> Vec<Place<'_>> {
    fn walk<'a>(cmd: &'a Command, path: &str, out: &mut Vec<Place<'a>>) {
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" && !cmd.is_disable_help_subcommand_set() {
                continue;
            }
            let sub_path = format!("{path} {}", sub.get_name());
            out.push(Place {
                path: sub_path.clone(),
                cmd: sub,
                parent: Some(cmd),
            });
            walk(sub, &sub_path, out);
        }
    }
    let mut out = vec![Place {
        path: root.get_name().to_owned(),
        cmd: root,
        parent: None,
    }];
    walk(root, root.get_name(), &mut out);
    out
}

/// clap's own `--help` and `--version`, which every command has.
fn is_builtin(arg: &Arg) -> bool {
    matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    )
}

/// A global argument this command has only because its parent declares it.
fn is_inherited(arg: &Arg, parent: Option<&Command>) -> bool {
    arg.is_global_set()
        && parent.is_some_and(|p| {
            p.get_arguments()
                .any(|a| a.get_id() == arg.get_id() && a.is_global_set())
        })
}

/// Text for one Markdown table cell or line: paragraphs separated by
/// `<br>`, pipes escaped, and `<`, `>` outside code spans written as
/// entities (else a renderer takes `<name>` for an HTML tag).
fn cell(text: &str) -> String {
    text.trim()
        .split("\n\n")
        .map(|para| escape(&para.split_whitespace().collect::<Vec<_>>().join(" ")))
        .collect::<Vec<_>>()
        .join("<br>")
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

fn help_of(arg: &Arg) -> String {
    arg.get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default()
}

fn about_of(cmd: &Command) -> String {
    cmd.get_long_about()
        .or(cmd.get_about())
        .map(|h| h.to_string())
        .unwrap_or_default()
}

fn value_name(arg: &Arg) -> String {
    let name = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(|n| n.to_string())
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
    let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    format!("<{name}>{}", if many { "..." } else { "" })
}

/// How the argument is written on the command line: `--order <ORDER>`,
/// `--json`, `<ID>`.
fn spelling(arg: &Arg) -> String {
    if arg.is_positional() {
        return value_name(arg);
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    let mut out = names.join(", ");
    if arg.get_action().takes_values() {
        out.push(' ');
        out.push_str(&value_name(arg));
    }
    out
}

fn default_of(arg: &Arg) -> Option<String> {
    if arg.is_hide_default_value_set() || !arg.get_action().takes_values() {
        return None;
    }
    let values: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .filter(|v| !v.is_empty())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

fn possible_values(arg: &Arg) -> Option<String> {
    if arg.is_hide_possible_values_set() || !arg.get_action().takes_values() {
        return None;
    }
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| match v.get_help() {
            Some(help) => format!("`{}` ({})", v.get_name(), help),
            None => format!("`{}`", v.get_name()),
        })
        .collect();
    (!values.is_empty()).then(|| format!("One of: {}.", values.join(", ")))
}

/// A sentence: clap drops the full stop of a one-line help text.
fn sentence(text: &str) -> String {
    let text = text.trim();
    match text.chars().last() {
        None => String::new(),
        Some('.' | '!' | '?' | ':') => text.to_owned(),
        Some(_) => format!("{text}."),
    }
}

/// Sentences joined by a space, empty ones left out.
fn sentences(parts: &[String]) -> String {
    parts
        .iter()
        .map(|p| sentence(p))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The help text of an argument with its possible values appended.
fn meaning(arg: &Arg) -> String {
    let mut parts = vec![cell(&help_of(arg))];
    if let Some(values) = possible_values(arg) {
        parts.push(cell(&values));
    }
    if !arg.get_action().takes_values() && arg.get_env().is_some() {
        // A switch read from the environment: say what the variable takes.
        parts.push("A switch: the variable takes `true` or `false`".to_owned());
    }
    sentences(&parts)
}

fn code(text: &str) -> String {
    format!("`{}`", text.replace('|', "\\|"))
}

const GENERATED: &str = "<!-- Generated by `cobro reference {page}` from the code's own definitions; \
     do not edit. Regenerate: cargo run -q -- reference {page} > docs/src/reference/{page}.md -->";

fn header(page: &str) -> String {
    GENERATED.replace("{page}", page)
}

/// The settings page: one table per process or command that reads a
/// setting, then the variables read outside the flags.
fn settings() -> String {
    let programs = programs();
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", header("settings"));
    out.push_str(
        "# Settings\n\n\
         Every setting is an environment variable and a command-line flag with the same \
         meaning; when both are given, the flag wins. Each table below is one process or \
         command and is complete for it: a setting that several read (such as `DATABASE_URL`, \
         or the business-retry settings the worker and `cobro serve` share) appears in the \
         table of each. A setting that applies to a command's subcommands too is listed once, \
         under that command. A setting left out of `--help` (because a hosting platform \
         sets it, not you) is marked so.\n\n\
         Durations are written like `500ms`, `30s`, `5m`, `1h`, `2d`. \
         [The command-line reference](cli.md) has every command's flags, settings or not.\n",
    );

    let mut database_only = Vec::new();
    for program in [&programs[1], &programs[0]] {
        for place in places(program) {
            let rows: Vec<&Arg> = place
                .cmd
                .get_arguments()
                .filter(|a| a.get_env().is_some() && !is_inherited(a, place.parent))
                .collect();
            if rows.is_empty() {
                continue;
            }
            if rows
                .iter()
                .all(|a| a.get_env().is_some_and(|e| e == "DATABASE_URL"))
            {
                database_only.push(place.path.clone());
                continue;
            }
            let _ = writeln!(out, "\n## {}\n", place.path);
            let about = sentence(&cell(&about_of(place.cmd)));
            if !about.is_empty() {
                let _ = writeln!(out, "{about}\n");
            }
            if rows.iter().any(|a| a.is_global_set()) && place.cmd.has_subcommands() {
                let _ = writeln!(
                    out,
                    "These settings apply to every `{}` subcommand.\n",
                    place.path
                );
            }
            out.push_str("| Variable | Flag | Default | Meaning |\n|---|---|---|---|\n");
            for arg in rows {
                let env = arg
                    .get_env()
                    .map(|e| e.to_string_lossy())
                    .unwrap_or_default();
                let default = if arg.is_required_set() {
                    "required".to_owned()
                } else {
                    default_of(arg).map_or("—".to_owned(), |d| code(&d))
                };
                let mut meaning = meaning(arg);
                if arg.is_hide_set() {
                    meaning = sentences(&[meaning, "Not shown by `--help`".to_owned()]);
                }
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    code(&env),
                    code(&spelling(arg)),
                    default,
                    meaning.trim()
                );
            }
        }
    }

    if !database_only.is_empty() {
        out.push_str(
            "\n## Commands that read only the database URL\n\n\
             These commands read one setting, `DATABASE_URL` (flag `--database-url`): the \
             database, `postgres://…` or `sqlite://path`.\n\n",
        );
        for path in &database_only {
            let _ = writeln!(out, "- `{path}`");
        }
    }

    out.push_str(
        "\n## Read outside the flags\n\n\
         These variables have no flag.\n\n\
         | Variable | Read by | Meaning |\n|---|---|---|\n",
    );
    for (var, by, what) in OUTSIDE_CLAP {
        let _ = writeln!(out, "| {} | {} | {} |", code(var), by, cell(what));
    }
    out
}

/// The command-line page: every command of both programs with its usage,
/// description and arguments, as `--help` shows them.
fn cli() -> String {
    let programs = programs();
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", header("cli"));
    out.push_str(
        "# Command line\n\n\
         Two programs: `cobro`, the tool (migrate the database, enqueue, refund, inspect, \
         serve the HTTP API, reconcile, run the gateway simulator) and `cobro-worker`, the \
         worker process. Every command takes `-h, --help`; both programs take \
         `-V, --version`. An argument that names an environment variable can be given \
         either way ([the settings reference](settings.md) has them by process).\n",
    );
    for program in &programs {
        let all = places(program);
        for place in &all {
            if place.cmd.is_hide_set() {
                continue;
            }
            let level = if place.parent.is_none() { "##" } else { "###" };
            let _ = writeln!(out, "\n{level} {}\n", place.path);
            let about = sentence(&cell(&about_of(place.cmd)));
            if !about.is_empty() {
                let _ = writeln!(out, "{}\n", about.replace("<br>", "\n\n"));
            }
            let usage = place.cmd.clone().render_usage().to_string();
            let usage = usage.trim().trim_start_matches("Usage:").trim();
            let _ = writeln!(out, "```text\n{usage}\n```");

            let subs: Vec<&Place> = all
                .iter()
                .filter(|p| p.parent.is_some_and(|c| std::ptr::eq(c, place.cmd)))
                .filter(|p| !p.cmd.is_hide_set())
                .collect();
            if !subs.is_empty() {
                out.push_str("\n| Command | What it does |\n|---|---|\n");
                for sub in subs {
                    let anchor = sub.path.replace(' ', "-");
                    let short = sub
                        .cmd
                        .get_about()
                        .map(|a| a.to_string())
                        .unwrap_or_default();
                    let short = sentence(&cell(&short));
                    let _ = writeln!(out, "| [`{}`](#{anchor}) | {short} |", sub.path);
                }
            }

            let args: Vec<&Arg> = place
                .cmd
                .get_arguments()
                .filter(|a| !a.is_hide_set() && !is_builtin(a))
                .collect();
            if args.is_empty() {
                continue;
            }
            out.push_str("\n| Argument | Meaning |\n|---|---|\n");
            for arg in args {
                let mut facts = vec![meaning(arg)];
                if arg.is_required_set() {
                    facts.push("Required".to_owned());
                }
                if let Some(env) = arg.get_env() {
                    facts.push(format!("Env: {}", code(&env.to_string_lossy())));
                }
                if let Some(default) = default_of(arg) {
                    facts.push(format!("Default: {}", code(&default)));
                }
                let text = sentences(&facts);
                let _ = writeln!(out, "| {} | {} |", code(&spelling(arg)), text);
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "reference_tests.rs"]
mod tests;
