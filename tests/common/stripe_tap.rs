//! A recording tap between the Stripe adapter and localstripe: every
//! request is kept (method, path, form body) so a test can read what the
//! adapter sent, then forwarded as it came, but for one field: localstripe's
//! confirm refuses `off_session` ("Unexpected off_session"; Stripe takes
//! it), so the tap drops it from confirms after recording it.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// One request as the adapter sent it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub body: String,
}

impl Seen {
    /// The form's value of `field`, if it was sent.
    pub fn field(&self, field: &str) -> Option<String> {
        let form = reqwest::Url::parse(&format!("http://form/?{}", self.body)).ok()?;
        form.query_pairs()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v.into_owned())
    }
}

pub struct Tap {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Upstream {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    client: reqwest::Client,
}

impl Tap {
    /// A tap on a free loopback port forwarding to `upstream`.
    pub async fn start(upstream: &str) -> Tap {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let state = Upstream {
            url: upstream.to_owned(),
            seen: seen.clone(),
            client: reqwest::Client::new(),
        };
        let app = Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Tap { url, seen, task }
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("tap lock").clone()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    State(up): State<Upstream>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = String::from_utf8_lossy(&body).into_owned();
    up.seen.lock().expect("tap lock").push(Seen {
        method: method.to_string(),
        path: uri.path().to_owned(),
        body: body.clone(),
    });
    let sent = match uri.path().ends_with("/confirm") {
        true => body
            .split('&')
            .filter(|pair| !pair.starts_with("off_session="))
            .collect::<Vec<_>>()
            .join("&"),
        false => body,
    };
    let target = format!(
        "{}{}",
        up.url,
        uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let Ok(m) = reqwest::Method::from_bytes(method.as_str().as_bytes()) else {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    };
    let mut req = up.client.request(m, target);
    for name in [
        "authorization",
        "content-type",
        "idempotency-key",
        "stripe-version",
    ] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            req = req.header(name, v);
        }
    }
    let Ok(resp) = req.body(sent).send().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| HeaderValue::from_str(v).ok());
    let bytes = resp.bytes().await.unwrap_or_default().to_vec();
    let mut out = (status, bytes).into_response();
    if let Some(ct) = content_type {
        out.headers_mut().insert("content-type", ct);
    }
    out
}
