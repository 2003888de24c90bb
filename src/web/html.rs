//! What every server-rendered page stands on (finance's and the
//! operator's): HTML escaping, the page's frame, a `<select>`, and an
//! attempt's history and lookups as tables.
//!
//! Invariant: every value from the database or the request goes through
//! [`esc`] before it reaches a page; no scripts, no front-end build.

use std::fmt::Write;

use axum::response::Html;

use crate::http::auth::Caller as Person;
use crate::store::{Check, Transition};

/// HTML-escapes text for element content and quoted attributes.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a query-string value.
pub(crate) fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:2rem;color:#1b1f24;max-width:75rem}\
table{border-collapse:collapse;width:100%;margin:1rem 0}th,td{border-bottom:1px solid #d8dee4;padding:.35rem .5rem;text-align:left;vertical-align:top}\
th{background:#f3f5f7}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.note{padding:.6rem .8rem;border-radius:6px;margin:1rem 0}.ok{background:#e6f4ea}.err{background:#fde7e9}\
form.inline{display:inline-block;margin:0 1rem 1rem 0;padding:.8rem;border:1px solid #d8dee4;border-radius:6px;vertical-align:top}\
label{display:block;margin:.3rem 0}input[type=text],textarea{width:18rem}nav a{margin-right:1rem}code{font-size:13px}";

/// A whole page: `title · site`, the navigation, who is signed in, `body`
/// (already escaped by its maker).
pub(crate) fn shell(site: &str, title: &str, person: &Person, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t} · {site}</title>\
         <style>{STYLE}</style></head><body>\
         <nav><a href=\"/finance\">Escalation queue</a><a href=\"/finance/summary\">Daily summary</a>\
         <a href=\"/operator/attempts\">All attempts</a>\
         <span style=\"float:right\">signed in as <b id=\"person\">{who}</b></span></nav>\
         <h1>{t}</h1>{body}</body></html>",
        t = esc(title),
        site = esc(site),
        who = esc(&person.name),
    ))
}

/// A `<select>` named `name` (id `filter-<name>`) with `current` selected.
pub(crate) fn select(name: &str, current: Option<&str>, options: &[(&str, &str)]) -> String {
    let mut out = format!("<select name=\"{0}\" id=\"filter-{0}\">", esc(name));
    for (value, label) in options {
        let selected = if current.unwrap_or("") == *value {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            out,
            "<option value=\"{}\"{selected}>{}</option>",
            esc(value),
            esc(label)
        );
    }
    out.push_str("</select>");
    out
}

/// An attempt's transition log as a table (`#history`): who moved it,
/// from what to what, why, with what evidence.
pub(crate) fn history(transitions: &[Transition]) -> String {
    let mut out = String::from(
        "<h2>History</h2><table id=\"history\"><thead><tr><th>At</th><th>From</th><th>To</th>\
         <th>Cause</th><th>Who</th><th>Evidence</th></tr></thead><tbody>",
    );
    for t in transitions {
        let note = t
            .evidence
            .as_ref()
            .and_then(|e| e.get("detail"))
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} {} {} {}</td></tr>",
            t.at.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            esc(t.from_state.as_deref().unwrap_or("(new)")),
            esc(&t.to_state),
            esc(&t.cause),
            esc(&t.actor),
            t.http_status.map_or(String::new(), |s| format!("HTTP {s}")),
            esc(t.error_kind.as_deref().unwrap_or("")),
            esc(t.lookup_result.as_deref().unwrap_or("")),
            esc(note),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// An attempt's lookups as a table (`#checks`): when each was due, when
/// it ran, what it found.
pub(crate) fn checks(checks: &[Check]) -> String {
    let mut out = String::from(
        "<h2>Lookups</h2><table id=\"checks\"><thead><tr><th>#</th><th>Due</th><th>Ran</th>\
         <th>Result</th><th>HTTP</th><th>Who</th></tr></thead><tbody>",
    );
    for c in checks {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.check_number,
            c.scheduled_at.format("%H:%M:%S%.3f"),
            c.started_at.format("%H:%M:%S%.3f"),
            esc(&c.lookup_result),
            c.http_status.map_or("-".into(), |s| s.to_string()),
            esc(&c.actor),
        );
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_values_is_escaped() {
        assert_eq!(
            esc("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
        assert_eq!(url_encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
