//! The web process as a client sees it: one GET or POST with a credential
//! of [`super::TEST_KEYS`] (or none), or any request a test builds, its
//! answer read whole; and what a test checks of an answer (a refusal's
//! field, a header, a form's token). A failed request panics naming the
//! URL.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::secret;

/// Who is asking: a person signed in with a password (HTTP Basic, as a
/// browser does), a program with its API key (Bearer), or anyone (no
/// credential).
#[derive(Clone, Copy)]
pub enum As<'a> {
    Basic(&'a str),
    Bearer(&'a str),
    Nobody,
}

fn with(req: reqwest::RequestBuilder, who: As<'_>) -> reqwest::RequestBuilder {
    match who {
        As::Basic(name) => req.basic_auth(name, Some(secret(name))),
        As::Bearer(name) => req.bearer_auth(secret(name)),
        As::Nobody => req,
    }
}

/// GET `url` as `who`; the answer as sent (a redirect is not followed).
pub async fn get_as(url: &str, who: As<'_>) -> reqwest::Response {
    with(no_redirects().get(url), who)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// GET `url` as `who`; the body as text, whatever the status.
pub async fn get_text(url: &str, who: As<'_>) -> String {
    send_text(with(no_redirects().get(url), who)).await
}

/// GET `url` as `who`; the body as JSON, whatever the status.
pub async fn get_json<T: DeserializeOwned>(url: &str, who: As<'_>) -> T {
    send_json(with(no_redirects().get(url), who)).await
}

/// Sends `req` (any client, method and headers); the body of the answer
/// as text, whatever the status.
pub async fn send_text(req: reqwest::RequestBuilder) -> String {
    let (url, resp) = send(req).await;
    resp.text()
        .await
        .unwrap_or_else(|e| panic!("{url}: body: {e}"))
}

/// Sends `req`; the body of the answer as JSON, whatever the status.
pub async fn send_json<T: DeserializeOwned>(req: reqwest::RequestBuilder) -> T {
    let (url, resp) = send(req).await;
    resp.json()
        .await
        .unwrap_or_else(|e| panic!("{url}: JSON body: {e}"))
}

/// Sends `req`; its method and URL (for messages) and the answer.
async fn send(req: reqwest::RequestBuilder) -> (String, reqwest::Response) {
    let (client, req) = req.build_split();
    let req = req.expect("a well-formed request");
    let url = format!("{} {}", req.method(), req.url());
    let resp = client
        .execute(req)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    (url, resp)
}

/// POST `body` as JSON to `url` as `who`; the answer as sent.
pub async fn post_as(url: &str, who: As<'_>, body: &Value) -> reqwest::Response {
    post_keyed(url, who, None, &body.to_string()).await
}

/// POST the JSON text `body` (sent as written) to `url` as `who`, with an
/// `Idempotency-Key` when `key` is given; the answer as sent.
pub async fn post_keyed(
    url: &str,
    who: As<'_>,
    key: Option<&str>,
    body: &str,
) -> reqwest::Response {
    let mut req = with(reqwest::Client::new().post(url), who)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    req.send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

/// [`post_keyed`]: the status and the JSON answer (`null` when the answer
/// is not JSON).
pub async fn post_keyed_json(
    url: &str,
    who: As<'_>,
    key: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let r = post_keyed(url, who, key, body).await;
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

/// POST `body` as JSON to `url` as `who`; the status and the JSON answer
/// (`null` when the answer is not JSON).
pub async fn post_json(url: &str, who: As<'_>, body: &Value) -> (u16, Value) {
    let r = post_as(url, who, body).await;
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

impl super::Web {
    /// `/metrics` as Prometheus scrapes it (the `prom` key).
    pub async fn metrics(&self) -> String {
        get_text(&format!("{}/metrics", self.url), As::Bearer("prom")).await
    }
}

/// Asserts that an answer with `status` and JSON `body` is a refusal with
/// `want`, naming `field`.
pub fn assert_refused(status: u16, body: &Value, want: u16, field: &str) {
    assert_eq!(
        (status, body["field"].as_str()),
        (want, Some(field)),
        "{body}"
    );
}

/// The value of `resp`'s header `name` (which it must have), as text.
pub fn header<'r>(resp: &'r reqwest::Response, name: &str) -> &'r str {
    resp.headers()[name].to_str().unwrap()
}

/// Asserts that `resp`'s content type starts with `prefix`.
pub fn assert_content_type(resp: &reqwest::Response, prefix: &str) {
    assert!(header(resp, "content-type").starts_with(prefix));
}

/// The form token in a finance page's form, as a browser would send it back.
pub fn form_token_in(page: &str) -> String {
    let at = page.find("name=\"form_token\" value=\"").expect("a form") + 25;
    let len = page[at..].find('"').expect("the value's end");
    page[at..at + len].to_owned()
}

/// A client that never follows a redirect: a test sees the 303 itself.
pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("HTTP client")
}

/// A webhook delivery was taken (200) and its `outcome.result` is `want`
/// (`applied`, `ignored`, `rescheduled`, …).
pub fn assert_webhook_took(status: u16, reply: &Value, want: &str) {
    assert_eq!(
        (status, reply["outcome"]["result"].as_str()),
        (200, Some(want)),
        "{reply}"
    );
}
