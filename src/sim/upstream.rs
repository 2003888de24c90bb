//! The upstream of proxy mode (see `proxy`): its URL, the request passed on to it and the
//! answer relayed back, and the HTTP client between them.
//!
//! Invariant: only the method, the path and query, the body bytes and the
//! [`FORWARDED_HEADERS`] reach the upstream, each request once (no retries, no redirects,
//! no system proxy, at most [`UPSTREAM_TIMEOUT`]); only its status, `Content-Type` and body
//! come back.

use std::{fmt, io, str::FromStr, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use reqwest::Url;

/// How long the upstream has to answer (connect, send, reply and body).
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// The request headers passed on to the upstream; no other header is.
pub const FORWARDED_HEADERS: [HeaderName; 5] = [
    header::AUTHORIZATION,
    HeaderName::from_static("idempotency-key"),
    HeaderName::from_static("stripe-version"),
    header::CONTENT_TYPE,
    header::ACCEPT,
];

/// The upstream's base URL: `http://host[:port][/prefix]`, no query, fragment or credentials,
/// kept without a trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream(String);

impl Upstream {
    /// Whether the host is a loopback address or `localhost` (the expected setting).
    pub fn is_loopback(&self) -> bool {
        let Some(host) = Url::parse(&self.0)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
        else {
            return false;
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<std::net::IpAddr>() {
            Ok(ip) => ip.is_loopback(),
            Err(_) => bare.eq_ignore_ascii_case("localhost"),
        }
    }

    /// The upstream URL of a request's path and query (`/v1/…?…`).
    fn url(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.0)
    }
}

impl FromStr for Upstream {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let url = Url::parse(s).map_err(|e| format!("not a URL: {s:?} ({e})"))?;
        if url.scheme() != "http" {
            return Err(format!("only http:// is supported, got {s:?}"));
        }
        if url.host().is_none() {
            return Err(format!("no host in {s:?}"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!("no query or fragment allowed in {s:?}"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!("no credentials allowed in {s:?}"));
        }
        Ok(Self(url.as_str().trim_end_matches('/').to_owned()))
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The upstream and the client that talks to it. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Proxy {
    upstream: Upstream,
    client: reqwest::Client,
}

impl Proxy {
    /// A client with [`UPSTREAM_TIMEOUT`], no redirects, no retries, no system proxy.
    pub(crate) fn new(upstream: Upstream) -> io::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(UPSTREAM_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .build()
            .map_err(io::Error::other)?;
        Ok(Self { upstream, client })
    }

    /// Sends one request to the upstream and reads its whole answer.
    pub(crate) async fn send(self, request: Outgoing) -> reqwest::Result<Relayed> {
        let mut sent = self
            .client
            .request(request.method, self.upstream.url(&request.path_and_query))
            .body(request.body);
        for (name, value) in request.headers {
            sent = sent.header(name, value);
        }
        let answer = sent.send().await?;
        let status = answer.status();
        let content_type = answer.headers().get(header::CONTENT_TYPE).cloned();
        let body = answer.bytes().await?;
        Ok(Relayed {
            status,
            content_type,
            body,
        })
    }
}

/// A request to forward.
pub(crate) struct Outgoing {
    pub(crate) method: Method,
    pub(crate) path_and_query: String,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: Bytes,
}

/// The upstream's answer, as relayed to the client.
pub(crate) struct Relayed {
    pub(crate) status: StatusCode,
    content_type: Option<HeaderValue>,
    body: Bytes,
}

impl IntoResponse for Relayed {
    fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.body));
        *response.status_mut() = self.status;
        if let Some(content_type) = self.content_type {
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, content_type);
        }
        response
    }
}

/// The [`FORWARDED_HEADERS`] of a request, every value of each, in order.
pub(crate) fn forwarded_headers(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    FORWARDED_HEADERS
        .iter()
        .flat_map(|name| {
            headers
                .get_all(name)
                .iter()
                .map(|v| (name.clone(), v.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls() {
        let ok = [
            ("http://127.0.0.1:8420", "http://127.0.0.1:8420"),
            ("http://127.0.0.1:8420/", "http://127.0.0.1:8420"),
            (
                "http://localhost:8420/stripe/",
                "http://localhost:8420/stripe",
            ),
        ];
        for (raw, base) in ok {
            assert_eq!(raw.parse::<Upstream>().map(|u| u.0), Ok(base.to_owned()));
        }
        let bad = [
            "https://127.0.0.1:8420",
            "127.0.0.1:8420",
            "http://127.0.0.1:8420/?a=1",
            "http://u:p@127.0.0.1:8420",
            "ftp://127.0.0.1",
        ];
        for raw in bad {
            assert!(raw.parse::<Upstream>().is_err(), "{raw}");
        }
        let up: Upstream = "http://127.0.0.1:8420/".parse().unwrap();
        assert_eq!(
            up.url("/v1/charges?expand[]=x"),
            "http://127.0.0.1:8420/v1/charges?expand[]=x"
        );
        let loopback = |s: &str| s.parse::<Upstream>().map(|u| u.is_loopback());
        assert_eq!(loopback("http://127.0.0.1:1"), Ok(true));
        assert_eq!(loopback("http://[::1]:1"), Ok(true));
        assert_eq!(loopback("http://LOCALHOST:1"), Ok(true));
        assert_eq!(loopback("http://10.0.0.1:1"), Ok(false));
    }

    #[test]
    fn only_the_listed_headers_are_forwarded() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer sk_test"));
        h.insert("idempotency-key", HeaderValue::from_static("k1"));
        h.insert("cookie", HeaderValue::from_static("x=1"));
        h.insert("host", HeaderValue::from_static("proxy"));
        h.append("accept", HeaderValue::from_static("a/b"));
        h.append("accept", HeaderValue::from_static("c/d"));
        let names: Vec<String> = forwarded_headers(&h)
            .iter()
            .map(|(n, v)| format!("{n}={}", v.to_str().unwrap()))
            .collect();
        assert_eq!(
            names,
            [
                "authorization=Bearer sk_test",
                "idempotency-key=k1",
                "accept=a/b",
                "accept=c/d"
            ]
        );
    }
}
