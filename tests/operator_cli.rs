//! The operator view from a terminal (`cobro attempts`, run as a real
//! process): search, pages with the printed cursor, bad values named, one
//! attempt with its history and lookups. On both backends.

#[macro_use]
mod common;
#[path = "common/operator_seed.rs"]
mod operator_seed;

use common::*;
use operator_seed::{ids, seed};
use serde_json::Value;

on_both_backends!(the_cli_lists_pages_and_shows_an_attempt,);

async fn the_cli_lists_pages_and_shows_an_attempt(b: Backend) {
    let s = seed(b).await;
    let url = s.db.url.clone();

    let out = cobro(&url, &["attempts", "--order", "op-2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains(&s.retry.id.to_string()) && lines[0].contains("business_retry"));
    assert!(lines[1].contains(&s.op2.id.to_string()) && lines[1].contains("RECHAZADO"));

    // Page by page with the printed cursor: every attempt once.
    let mut seen = Vec::new();
    let mut args = vec!["attempts".to_owned(), "--limit".into(), "3".into()];
    loop {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cobro(&url, &argv);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        seen.extend(
            stdout
                .lines()
                .filter(|l| !l.starts_with("next page"))
                .map(|l| l.split_whitespace().nth(1).unwrap().to_owned()),
        );
        match stdout
            .lines()
            .find_map(|l| l.strip_prefix("next page: --cursor "))
        {
            Some(c) => {
                args = vec![
                    "attempts".into(),
                    "--limit".into(),
                    "3".into(),
                    "--cursor".into(),
                    c.into(),
                ]
            }
            None => break,
        }
    }
    assert_eq!(seen, s.newest_first());

    let out = cobro(&url, &["attempts", "--kind", "refund", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&body), [s.refund.id.to_string()]);
    assert!(body["next_cursor"].is_null());

    for (flag, value) in [
        ("--state", "nope"),
        ("--from", "yesterday"),
        ("--limit", "500"),
    ] {
        let out = cobro(&url, &["attempts", flag, value]);
        assert!(!out.status.success());
        let field = flag.trim_start_matches("--");
        assert!(
            text(&out.stderr).contains(&format!("invalid {field}")),
            "{flag}: {}",
            text(&out.stderr)
        );
    }

    let out = cobro(&url, &["attempts", "show", &s.op3.id.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("state EN_REVISION"), "{stdout}");
    assert!(stdout.contains("DESCONOCIDO -> EN_REVISION"), "{stdout}");
    assert!(
        stdout.contains("lookup #1") && stdout.contains("failed"),
        "{stdout}"
    );
    let out = cobro(&url, &["attempts", "show", &s.op3.id.to_string(), "--json"]);
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["transitions"].as_array().unwrap().len(), 4);
    assert_eq!(body["checks"].as_array().unwrap().len(), 1);
    let out = cobro(
        &url,
        &["attempts", "show", &uuid::Uuid::new_v4().to_string()],
    );
    assert_fails_saying(&out, "no attempt");
    s.db.drop_db().await;
}
