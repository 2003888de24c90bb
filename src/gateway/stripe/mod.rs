//! The Stripe adapter: a charge in two steps, each safe to repeat.
//!
//! 1. **Create** a PaymentIntent with `Idempotency-Key: <attempt key>`,
//!    `confirm=false` and cobro's metadata (key, order, attempt). It cannot
//!    move money; the engine records its id on the attempt, once
//!    ([`super::Prepared::Created`]), before anything confirms it. A create
//!    that gets no answer charged nothing: it is
//!    [`super::Deferral::Unconfirmed`], and the next send creates again with
//!    the same key (Stripe replays the first PaymentIntent; a server without
//!    key support makes another, which stays unconfirmed and harmless).
//! 2. **Confirm** that PaymentIntent by id (`off_session` for a business
//!    retry). A confirm without an answer is unknown (`DESCONOCIDO`), looked
//!    up by `GET /v1/payment_intents/{id}` (strongly consistent): succeeded,
//!    failed, still unconfirmed ("not found": confirm the same one again,
//!    which can succeed at most once), or still processing.
//!
//! Invariant: nothing but the recorded PaymentIntent is ever confirmed; a
//! 400 to a confirm (`payment_intent_unexpected_state`, or a server's
//! "Bad request" without a code) means "look it up", never "create
//! another"; a 4xx is a decline or a refusal only when it carries Stripe's
//! error object (with its `type`): one without (a proxy's 408, 413 or 425,
//! a bare 404) says nothing of what Stripe did, so a create is made again
//! (same key), and a confirm or refund is unknown; a 401/403 is
//! a configuration fault (not executed, counted by the breaker, logged as
//! an error), never a decline; a redirect is never followed (a 301, 302,
//! 307 or 308 to a create, confirm or refund was not executed there; any
//! other 3xx is unknown; a redirected lookup failed), counted by the breaker
//! like a 401/403; `idempotency_error` goes to finance. Every answer is read
//! within a cap (1 MiB an object, 8 MiB a list's page): one past it is
//! never read, so a create charged nothing, a confirm or refund is unknown,
//! a lookup failed and a listing failed. The secret key is sent in the
//! `Authorization` header only and is never in a log, an error or `Debug`.

mod calls;
mod classify;
mod find;
#[cfg(test)]
mod find_tests;
mod list;
mod lookup;
mod refunds;
mod startup;
#[cfg(test)]
mod tests;

pub use classify::META_KEY;
pub use find::FindConfig;
pub use startup::KeyCheck;

/// The decline code cobro stores for a PaymentIntent object (a webhook's
/// `data.object`), from its `last_payment_error`; the same class as a
/// synchronous decline.
pub fn decline_code_of(pi: &Value) -> String {
    pi.get("last_payment_error")
        .and_then(|e| serde_json::from_value::<classify::StripeError>(e.clone()).ok())
        .map(classify::StripeError::tidied)
        .map_or_else(|| "card_declined".into(), |e| classify::decline_code(&e))
}

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;

use super::http::body::{self, Cap};
use super::http::{Transport, client, transport};
use super::settlement::PageError;
use super::{
    ChargeCall, ChargeOutcome, Evidence, Gateway, GatewayConfigError, GatewayRecord, ListError,
    Listed, LookupCall, LookupOutcome, Prepared, RefundCall,
};

/// The API version every request pins (`Stripe-Version`): the one whose
/// error objects carry `network_advice_code` and `network_decline_code`.
pub const STRIPE_VERSION: &str = "2024-12-18.acacia";
pub const DEFAULT_API_BASE: &str = "https://api.stripe.com";

/// A secret that never shows: `Debug` and `Display` print its kind only.
#[derive(Clone)]
pub struct SecretKey(String);

impl SecretKey {
    pub fn new(raw: &str) -> Self {
        Self(raw.trim().to_owned())
    }

    fn expose(&self) -> &str {
        &self.0
    }

    /// A secret (`sk_`) or restricted (`rk_`) key, live or test: a
    /// publishable key (`pk_`) or anything else is refused at start-up,
    /// naming `STRIPE_SECRET_KEY` and showing at most its first 3 characters.
    pub fn check(&self) -> Result<(), GatewayConfigError> {
        const ALLOWED: [&str; 4] = ["sk_live_", "sk_test_", "rk_live_", "rk_test_"];
        let key = self.expose();
        if key.is_empty() {
            return Err(GatewayConfigError::MissingSecret("STRIPE_SECRET_KEY"));
        }
        if key.starts_with("pk_") {
            return Err(GatewayConfigError::PublishableKey);
        }
        if !ALLOWED.iter().any(|p| key.starts_with(p)) {
            let shown: String = key.chars().take(3).collect();
            return Err(GatewayConfigError::NotASecretKey(shown));
        }
        Ok(())
    }
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Only a prefix Stripe documents: a key of another shape (a typo,
        // no underscore) is shown as nothing of itself.
        const KINDS: [&str; 6] = [
            "sk_live_", "sk_test_", "rk_live_", "rk_test_", "pk_live_", "pk_test_",
        ];
        match KINDS.iter().find(|k| self.0.starts_with(*k)) {
            _ if self.0.is_empty() => f.write_str("<empty>"),
            Some(kind) => write!(f, "{kind}…(redacted)"),
            None => f.write_str("…(redacted)"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct StripeConfig {
    /// `https://api.stripe.com`, or a Stripe-compatible server.
    pub api_base: String,
    pub secret_key: SecretKey,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub ca_file: Option<std::path::PathBuf>,
    /// Confirm business retries with `off_session=true` (merchant-initiated).
    pub off_session_retries: bool,
    /// Send the `created` window to list endpoints (Stripe has it; a
    /// compatible server without it is listed in full, filtered here).
    pub created_filter: bool,
    /// How a lookup without a recorded PaymentIntent finds one.
    pub find: FindConfig,
}

pub struct StripeGateway {
    base: String,
    key: SecretKey,
    client: reqwest::Client,
    off_session_retries: bool,
    created_filter: bool,
    find: FindConfig,
}

impl StripeGateway {
    /// Refuses an empty key and a base URL the client could never use.
    pub fn new(cfg: StripeConfig) -> Result<Self, GatewayConfigError> {
        cfg.secret_key.check()?;
        let base = super::parse_base_url(&cfg.api_base)?;
        let client = client::build(
            cfg.connect_timeout,
            cfg.request_timeout,
            cfg.ca_file.as_deref(),
        )?;
        Ok(Self {
            base,
            key: cfg.secret_key,
            client,
            off_session_retries: cfg.off_session_retries,
            created_filter: cfg.created_filter,
            find: cfg.find,
        })
    }

    /// `POST {base}{path}` as a form, with an idempotency key.
    async fn post(
        &self,
        path: &str,
        idempotency_key: &str,
        form: &[(String, String)],
    ) -> Result<Answer, Transport> {
        let sent = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(self.key.expose())
            .header("Stripe-Version", STRIPE_VERSION)
            .header("Idempotency-Key", idempotency_key)
            .form(form)
            .send()
            .await;
        read(sent, Cap::ANSWER).await
    }

    /// `GET {base}{path}?query` of one object.
    async fn get(&self, path: &str, query: &[(String, String)]) -> Result<Answer, Transport> {
        self.get_within(path, query, Cap::ANSWER).await
    }

    /// `GET {base}{path}?query` of a list's page (a larger [`Cap`]).
    async fn get_page(&self, path: &str, query: &[(String, String)]) -> Result<Answer, Transport> {
        self.get_within(path, query, Cap::PAGE).await
    }

    async fn get_within(
        &self,
        path: &str,
        query: &[(String, String)],
        cap: Cap,
    ) -> Result<Answer, Transport> {
        let sent = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(self.key.expose())
            .header("Stripe-Version", STRIPE_VERSION)
            .query(query)
            .send()
            .await;
        read(sent, cap).await
    }
}

/// A response: status, `Retry-After`, `Location`, whether Stripe replayed
/// the key's first answer (`Idempotent-Replayed: true`), JSON body if any.
pub(super) struct Answer {
    code: u16,
    retry_after: Option<Duration>,
    location: Option<String>,
    replayed: bool,
    body: Option<Value>,
}

/// Reads an answer whose body is at most `cap`.
async fn read(
    sent: Result<reqwest::Response, reqwest::Error>,
    cap: Cap,
) -> Result<Answer, Transport> {
    let resp = sent.map_err(|e| transport(&e))?;
    let (code, retry_after, location) = super::http::head(&resp);
    let replayed = resp
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
    // The status line arrived: the request certainly left.
    let bytes = body::read(resp, cap).await.map_err(|u| u.after(code))?;
    Ok(Answer {
        code,
        retry_after,
        location,
        replayed,
        body: serde_json::from_slice(&bytes).ok(),
    })
}

fn evidence(
    call: &str,
    status: Option<u16>,
    kind: &str,
    detail: Option<String>,
    started: Instant,
) -> Evidence {
    Evidence {
        call: call.into(),
        http_status: status,
        error_kind: kind.into(),
        lookup_result: None,
        elapsed_ms: started.elapsed().as_millis() as u64,
        detail: detail.map(|d| crate::domain::text::stored(&d, crate::domain::text::Kind::Message)),
        card_brand: None,
    }
}

fn lookup_evidence(
    call: &str,
    status: Option<u16>,
    kind: &str,
    result: &str,
    detail: Option<String>,
    started: Instant,
) -> Evidence {
    Evidence {
        lookup_result: Some(result.into()),
        ..evidence(call, status, kind, detail, started)
    }
}

impl Gateway for StripeGateway {
    fn prepare<'a>(&'a self, call: &'a ChargeCall) -> BoxFuture<'a, Prepared> {
        self.create_intent(call).boxed()
    }

    fn two_step(&self) -> bool {
        true
    }

    fn charge<'a>(&'a self, call: &'a ChargeCall) -> BoxFuture<'a, ChargeOutcome> {
        self.confirm(call).boxed()
    }

    fn lookup<'a>(&'a self, call: &'a LookupCall) -> BoxFuture<'a, LookupOutcome> {
        self.look_up(call).boxed()
    }

    fn probe(&self) -> BoxFuture<'_, LookupOutcome> {
        self.probe_api().boxed()
    }

    fn refund<'a>(&'a self, call: &'a RefundCall) -> BoxFuture<'a, ChargeOutcome> {
        self.create_refund(call).boxed()
    }

    fn lookup_refund<'a>(&'a self, call: &'a LookupCall) -> BoxFuture<'a, LookupOutcome> {
        self.look_up_refund(call).boxed()
    }

    fn list<'a>(
        &'a self,
        kind: Listed,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Vec<GatewayRecord>, ListError>> {
        self.list_window(kind, from, to).boxed()
    }

    fn settlement<'a>(
        &'a self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<crate::gateway::Settlement, crate::gateway::SettleError>> {
        async move { crate::gateway::settlement::read(self, from, to, self.created_filter).await }
            .boxed()
    }
}

impl crate::gateway::settlement::PageSource for StripeGateway {
    fn fetch<'a>(
        &'a self,
        path: &'a str,
        query: Vec<(String, String)>,
    ) -> BoxFuture<'a, Result<crate::gateway::settlement::PageAnswer, PageError>> {
        async move {
            let answer = self.get_page(path, &query).await.map_err(|t| match t {
                Transport::NotSent(k) | Transport::Unknown(k) => PageError::NoAnswer(k.to_owned()),
                Transport::TooLarge { what, .. } => PageError::TooLarge(what),
            })?;
            Ok(crate::gateway::settlement::PageAnswer {
                code: answer.code,
                retry_after: answer.retry_after,
                body: answer.body,
            })
        }
        .boxed()
    }
}
