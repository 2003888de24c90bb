//! What every server-rendered page stands on (finance's, the operator's
//! and the landing page): the page's frame, its stylesheet, a `<select>`,
//! an attempt's history and lookups as tables, and the response headers
//! that keep pages from being framed, sniffed or leaking their address.
//!
//! The HTML is written with [maud]'s `html!` macro, chosen over askama
//! because the markup stays next to the Rust that fills it (one file per
//! page, no template directory to keep in step) and the compiler checks
//! both: a misspelt variable or an unclosed element fails the build, and
//! every `(value)` spliced in is HTML-escaped by the macro, so a new field
//! cannot be added unescaped by forgetting a call.
//!
//! Invariant: no page is built by `format!` or string pushing, and nothing
//! here uses `PreEscaped`; no scripts and no inline styles (the CSP allows
//! neither): the look is one stylesheet at [`STYLESHEET_PATH`].

use axum::http::header;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use crate::http::auth::{Caller as Person, Scope};
use crate::store::{Check, Transition};

/// Where the pages' one stylesheet is served.
pub(crate) const STYLESHEET_PATH: &str = "/assets/cobro.css";

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:2rem;color:#1b1f24;max-width:75rem}\
table{border-collapse:collapse;width:100%;margin:1rem 0}th,td{border-bottom:1px solid #d8dee4;padding:.35rem .5rem;text-align:left;vertical-align:top}\
th{background:#f3f5f7}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.note{padding:.6rem .8rem;border-radius:6px;margin:1rem 0}.ok{background:#e6f4ea}.err{background:#fde7e9}\
form.inline{display:inline-block;margin:0 1rem 1rem 0;padding:.8rem;border:1px solid #d8dee4;border-radius:6px;vertical-align:top}\
label{display:block;margin:.3rem 0}input[type=text],textarea{width:18rem}nav a{margin-right:1rem}code{font-size:13px}\
.who{float:right}label.inline{display:inline-block;margin-right:1rem}input.short{width:4rem}input.search{width:14rem}";

/// `GET /assets/cobro.css`: the pages' look (a file, so the CSP needs no
/// `'unsafe-inline'`).
#[utoipa::path(
    get,
    path = "/assets/cobro.css",
    operation_id = "get_assets_cobro_css",
    summary = "The pages' stylesheet",
    tag = "pages",
    description = "The pages' stylesheet. No credential.",
    responses(
        (status = 200, description = "The stylesheet.", content_type = "text/css")
    ),
    security(())
)]
pub(crate) async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        STYLE,
    )
        .into_response()
}

/// The page-safety headers ([`crate::http::headers`]); every route of
/// the web process carries them, whatever listener serves it.
pub(crate) use crate::http::headers::safe as security_headers;

/// Percent-encodes a query-string value.
pub(crate) fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A whole page: `title · site`, the navigation (only the views this
/// key may open, as on the landing page), who is signed in, `body`.
pub(crate) fn shell(site: &str, title: &str, person: &Person, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · " (site) }
                link rel="stylesheet" href=(STYLESHEET_PATH);
            }
            body {
                nav {
                    a href="/" { "Home" }
                    @if person.scopes.has(Scope::FinanceRead) {
                        a href="/finance" { "Escalation queue" }
                        a href="/finance/summary" { "Daily summary" }
                    }
                    @if person.scopes.has(Scope::AttemptsRead) {
                        a href="/operator/attempts" { "All attempts" }
                    }
                    span.who { "signed in as " b #person { (person.name) } }
                }
                h1 { (title) }
                (body)
            }
        }
    }
}

/// A `<select>` named `name` (id `filter-<name>`) with `current` selected.
pub(crate) fn select(name: &str, current: Option<&str>, options: &[(&str, &str)]) -> Markup {
    let current = current.unwrap_or("");
    html! {
        select name=(name) id={ "filter-" (name) } {
            @for (value, label) in options {
                option value=(value) selected[current == *value] { (label) }
            }
        }
    }
}

/// An attempt's transition log as a table (`#history`): who moved it,
/// from what to what, why, with what evidence.
pub(crate) fn history(transitions: &[Transition]) -> Markup {
    html! {
        h2 { "History" }
        table #history {
            thead { tr { th { "At" } th { "From" } th { "To" } th { "Cause" } th { "Who" } th { "Evidence" } } }
            tbody {
                @for t in transitions {
                    @let note = t.evidence.as_ref()
                        .and_then(|e| e.get("detail"))
                        .and_then(|v| v.as_str())
                        .unwrap_or("");
                    tr {
                        td { (t.at.format("%Y-%m-%dT%H:%M:%S%.3fZ")) }
                        td { (t.from_state.as_deref().unwrap_or("(new)")) }
                        td { (t.to_state) }
                        td { (t.cause) }
                        td { (t.actor) }
                        td {
                            @if let Some(s) = t.http_status { "HTTP " (s) }
                            " " (t.error_kind.as_deref().unwrap_or(""))
                            " " (t.lookup_result.as_deref().unwrap_or(""))
                            " " (note)
                        }
                    }
                }
            }
        }
    }
}

/// An attempt's lookups as a table (`#checks`): when each was due, when
/// it ran, what it found.
pub(crate) fn checks(checks: &[Check]) -> Markup {
    html! {
        h2 { "Lookups" }
        table #checks {
            thead { tr { th { "#" } th { "Due" } th { "Ran" } th { "Result" } th { "HTTP" } th { "Who" } } }
            tbody {
                @for c in checks {
                    tr {
                        td { (c.check_number) }
                        td { (c.scheduled_at.format("%H:%M:%S%.3f")) }
                        td { (c.started_at.format("%H:%M:%S%.3f")) }
                        td { (c.lookup_result) }
                        td { @match c.http_status { Some(s) => { (s) } None => { "-" } } }
                        td { (c.actor) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_values_is_escaped_and_urls_encoded() {
        let page = select(
            "state\"><script>",
            Some("<b>"),
            &[("<b>", "<script>alert('x')</script>&")],
        )
        .into_string();
        assert!(!page.contains("<script>"), "{page}");
        assert!(
            page.contains("&lt;script&gt;alert('x')&lt;/script&gt;&amp;"),
            "{page}"
        );
        assert!(
            page.contains("name=\"state&quot;&gt;&lt;script&gt;\""),
            "{page}"
        );
        assert!(page.contains("selected"), "{page}");
        assert_eq!(url_encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
