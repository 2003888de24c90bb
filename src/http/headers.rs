//! The safety headers every answer of every listener carries: no framing
//! (`X-Frame-Options` and the CSP's `frame-ancestors`), no script, no MIME
//! sniffing, no `Referer` to another site (the queue's URLs carry order
//! ids and cursors). Set by [`super::serve`] outside every other layer, so
//! the timeouts' 408s carry them too, and written into admission's
//! hand-made 503 ([`RAW`]).
//!
//! Not `no-referrer`: with it Chromium sends `Origin: null` on the pages'
//! own forms, and the same-origin check would refuse them.

use axum::http::{HeaderValue, header};
use axum::response::Response;

/// Nothing may frame a page, load a script, or post a form elsewhere;
/// styles only from the pages' own stylesheet.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; \
     img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The same headers as lines of a hand-written HTTP/1.1 answer.
pub const RAW: &str = concat!(
    "x-frame-options: DENY\r\n",
    "content-security-policy: default-src 'none'; style-src 'self'; ",
    "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'\r\n",
    "x-content-type-options: nosniff\r\n",
    "referrer-policy: same-origin\r\n",
);

/// Adds the headers to `resp` (replacing any already there).
pub async fn safe(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_raw_lines_say_what_the_layer_sets() {
        let policy = format!(
            "content-security-policy: {}\r\n",
            super::CONTENT_SECURITY_POLICY
        );
        assert!(super::RAW.contains(&policy), "{}", super::RAW);
    }
}
