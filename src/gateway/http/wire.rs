//! What came back over the wire, before it is classified: a response's
//! status, `Retry-After`, `Location` and JSON body (read within
//! [`body::Cap::ANSWER`]), or how a call that got no answer it could read
//! failed (not sent, unknown, or an answer too large to read). Redirects
//! are read, logged and never followed.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::warn;

use super::body::{self, Cap};
use super::{Reply, shown_url};
use crate::domain::text::{self, Kind};

/// A response: its status, its `Retry-After`, its `Location` and its JSON
/// body if it has one.
pub(super) struct Answer {
    pub(super) code: u16,
    pub(super) retry_after: Option<Duration>,
    pub(super) location: Option<String>,
    pub(super) reply: Option<Reply>,
}

/// A call that got no answer it could read, by what the gateway could
/// have done.
pub(crate) enum Transport {
    /// Nothing was written (the connection was never made).
    NotSent(&'static str),
    /// The request may have left.
    Unknown(&'static str),
    /// The status line (`status`) arrived, so the request certainly left,
    /// but its body went past its cap ([`body`]) and was not read: `what`
    /// says so in words. A send is unknown; a listing page fails.
    TooLarge { status: u16, what: &'static str },
}

impl Transport {
    /// The evidence's `error_kind`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Transport::NotSent(kind) | Transport::Unknown(kind) => kind,
            Transport::TooLarge { .. } => "answer_too_large",
        }
    }

    /// The HTTP status, when one arrived.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Transport::NotSent(_) | Transport::Unknown(_) => None,
            Transport::TooLarge { status, .. } => Some(*status),
        }
    }

    /// What happened, in words, when there is more to say than the kind.
    pub(crate) fn detail(&self) -> Option<String> {
        match self {
            Transport::NotSent(_) | Transport::Unknown(_) => None,
            Transport::TooLarge { what, .. } => Some((*what).to_owned()),
        }
    }
}

/// The gateway said it did not execute the request: a 429, or a 503 that
/// says when to come back. A bare 503 is unknown (a proxy in front of a
/// gateway that did execute may answer it).
pub(super) fn not_executed(code: u16, retry_after: Option<Duration>) -> Option<&'static str> {
    match (code, retry_after) {
        (429, _) => Some("throttled"),
        (503, Some(_)) => Some("unavailable"),
        _ => None,
    }
}

/// A 3xx, which the client never follows ([`client`]), read for what the
/// gateway could have done: `not_executed` for 301, 302, 307 and 308 (the
/// resource is not at this URL: the request was not processed here), not
/// for any other (303 See Other is the answer to a request that *was*
/// processed, pointing at its result; the rest mean nothing for an API
/// call): unknown. `detail` names the status and the `Location`.
pub(crate) struct Redirect {
    pub(crate) not_executed: bool,
    pub(crate) detail: String,
}

/// The [`Redirect`] a 3xx to `call` is, logged as a warning (a gateway that
/// redirects is misconfigured or moved, and every call will say so); `None`
/// for any other status.
pub(crate) fn redirect(call: &str, code: u16, location: Option<&str>) -> Option<Redirect> {
    if !(300..=399).contains(&code) {
        return None;
    }
    let not_executed = matches!(code, 301 | 302 | 307 | 308);
    let location = location.unwrap_or("(none)");
    warn!(
        call,
        status = code,
        location,
        not_executed,
        "the gateway answered a redirect; not followed (check GATEWAY_URL)"
    );
    Some(Redirect {
        not_executed,
        detail: format!("HTTP {code} to {location}; redirects are never followed"),
    })
}

/// A response's status, `Retry-After` (as a wait) and `Location` (as
/// [`location`] shows it): what both adapters read before the body.
pub(crate) fn head(resp: &reqwest::Response) -> (u16, Option<Duration>, Option<String>) {
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after(v, Utc::now()));
    (
        resp.status().as_u16(),
        retry_after,
        location(resp.headers()),
    )
}

/// A response's `Location`, as it may be logged and stored: without a user
/// name or password, escaped and bounded.
pub(crate) fn location(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let raw = headers.get(reqwest::header::LOCATION)?;
    let raw = String::from_utf8_lossy(raw.as_bytes());
    let shown = match reqwest::Url::parse(raw.trim()) {
        Ok(_) => shown_url(&raw),
        Err(_) => raw.into_owned(), // a relative reference
    };
    Some(text::stored(&shown, Kind::Id))
}

/// Reads status, `Retry-After`, `Location` and JSON body; a call that got
/// no response is classified by [`transport`].
pub(super) async fn read(
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Result<Answer, Transport> {
    let resp = sent.map_err(|e| transport(&e))?;
    let (code, retry_after, location) = head(&resp);
    // The status line and headers arrived; a body cut short is unknown.
    let bytes = body::read(resp, Cap::ANSWER)
        .await
        .map_err(|u| u.after(code))?;
    Ok(Answer {
        code,
        retry_after,
        location,
        reply: serde_json::from_slice::<Reply>(&bytes)
            .ok()
            .map(Reply::tidied),
    })
}

/// A connect error (refused, DNS, TLS handshake, connect timeout) happens
/// before any byte of the request is written: not sent. Anything after it
/// (a reused connection that dies, a request timeout) may have left.
pub(crate) fn transport(e: &reqwest::Error) -> Transport {
    match e.is_connect() {
        true => Transport::NotSent(transport_kind(e)),
        false => Transport::Unknown(transport_kind(e)),
    }
}

/// The evidence's `error_kind` of a call that got no response.
pub(crate) fn transport_kind(e: &reqwest::Error) -> &'static str {
    match (e.is_connect(), e.is_timeout()) {
        (true, true) => "connect_timeout",
        (true, false) => "connect",
        (false, _) => unknown_kind(e),
    }
}

pub(super) fn unknown_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else {
        "connection_closed"
    }
}

/// `Retry-After` (RFC 9110): whole seconds, or an HTTP date (a date in the
/// past means now).
pub(crate) fn retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = DateTime::parse_from_rfc2822(value).ok()?;
    Some((at.with_timezone(&Utc) - now).to_std().unwrap_or_default())
}

// Here, not in body.rs, so that body.rs reads bodies without knowing the
// failure classes (and the two files do not import each other).
impl body::Unread {
    /// As a call's [`Transport`] failure, once the status line (`status`)
    /// has arrived: the request certainly left, so a broken body is
    /// unknown, and one too large was never read.
    pub(crate) fn after(self, status: u16) -> Transport {
        match self {
            body::Unread::Broken(e) => Transport::Unknown(unknown_kind(&e)),
            body::Unread::TooLarge(what) => Transport::TooLarge { status, what },
        }
    }
}
