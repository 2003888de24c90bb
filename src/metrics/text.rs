//! The Prometheus text format's small pieces, shared by the gauges'
//! renderers: a metric's `# HELP`/`# TYPE` header, a one-value gauge, and
//! an escaped label value.

use std::fmt::Write as _;

pub(super) fn header(out: &mut String, name: &str, help: &str) {
    if !out.is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

pub(super) fn gauge(out: &mut String, name: &str, help: &str, value: f64) {
    header(out, name, help);
    let _ = writeln!(out, "{name} {value}");
}

/// A label value in the text format: backslash, quote and newline escaped.
pub(super) fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
