//! Customer notices delivered: each outbox row is POSTed to the app's URL
//! (`COBRO_NOTICE_URL`), signed in the Standard Webhooks format with the
//! notices' own secret (`COBRO_NOTICE_SECRET`), and retried on a schedule
//! of days (`COBRO_NOTICE_SCHEDULE`) until the app answers 2xx; after the
//! last try the notice is `failed` (gauge `cobro_notices_failed`).
//!
//! Invariant: at least once, and the outbox row stays the truth. A worker
//! claims a notice before each try (`store::notices`), the `webhook-id` is
//! stable per notice (`notice_<id>`, so the app deduplicates) and the
//! `webhook-timestamp` is fresh per try; nothing here touches a payment.
//! Off unless `COBRO_NOTICE_URL` is set; with a URL and no valid secret the
//! worker refuses to start. The secret never reaches logs or `Debug`.

pub mod payload;

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use rand::Rng;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::backoff::{CheckSchedule, ScheduleError, parse_duration_arg as duration};
use crate::retry::RetryPolicy;
use crate::store::{Outgoing, Store, TryOutcome};
use crate::webhook::{Scheme, Secret, SecretError, Verifier};

/// `COBRO_NOTICE_SCHEDULE`'s default: the delays between tries, about
/// three and a half days in all (ten tries).
pub const DEFAULT_SCHEDULE: &str = "5s,5m,30m,2h,5h,10h,10h,24h,24h";
/// Notices claimed per round.
const BATCH: i64 = 20;
/// How much of the app's answer is read (for `last_error`); the rest is
/// dropped unread.
const MAX_ANSWER_BYTES: usize = 512;
/// Each delay is jittered by ±10 %, so a burst of failures spreads out.
const JITTER: f64 = 0.1;

/// The delivery settings of `cobro-worker`. `Debug` hides the secret and
/// shows only the URL's scheme and host.
#[derive(Clone, Args)]
pub struct NotifyArgs {
    /// The app's URL for customer notices (`http://` or `https://`); off when unset.
    #[arg(long, env = "COBRO_NOTICE_URL", hide_env_values = true)]
    pub notice_url: Option<String>,
    /// The notices' own signing secret, `whsec_<base64>` (Standard Webhooks).
    #[arg(long, env = "COBRO_NOTICE_SECRET", hide_env_values = true)]
    pub notice_secret: Option<String>,
    /// Delays between tries of one notice; after the last, it is failed.
    #[arg(long, env = "COBRO_NOTICE_SCHEDULE", default_value = DEFAULT_SCHEDULE)]
    pub notice_schedule: String,
    /// How long one try may take, connect to answer.
    #[arg(long, env = "COBRO_NOTICE_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub notice_timeout: Duration,
    /// How often the worker looks for notices due.
    #[arg(long, env = "COBRO_NOTICE_POLL", default_value = "1s", value_parser = duration)]
    pub notice_poll: Duration,
}

impl Default for NotifyArgs {
    fn default() -> Self {
        Self {
            notice_url: None,
            notice_secret: None,
            notice_schedule: DEFAULT_SCHEDULE.into(),
            notice_timeout: Duration::from_secs(10),
            notice_poll: Duration::from_secs(1),
        }
    }
}

impl std::fmt::Debug for NotifyArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyArgs")
            .field("notice_url", &self.notice_url.as_deref().map(shown))
            .field(
                "notice_secret",
                &self.notice_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("notice_schedule", &self.notice_schedule)
            .field("notice_timeout", &self.notice_timeout)
            .field("notice_poll", &self.notice_poll)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NotifyConfigError {
    #[error("COBRO_NOTICE_URL must be an http:// or https:// URL with a host")]
    BadUrl,
    #[error(
        "COBRO_NOTICE_SECRET is required with COBRO_NOTICE_URL: the notices' own signing secret, whsec_<base64> (not the gateway's)"
    )]
    MissingSecret,
    #[error("COBRO_NOTICE_SECRET is not a valid signing secret")]
    Secret(#[from] SecretError),
    #[error("COBRO_NOTICE_SCHEDULE is not a valid schedule")]
    Schedule(#[from] ScheduleError),
    #[error("COBRO_NOTICE_TIMEOUT and COBRO_NOTICE_POLL must be longer than zero")]
    Zero,
    #[error("COBRO_NOTICE_URL: the HTTP client could not be built: {0}")]
    Client(String),
}

/// A URL as logs may show it: scheme and host only.
fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!("{}://{}", u.scheme(), u.host_str().unwrap_or("")),
        Err(_) => "<not a URL>".into(),
    }
}

impl NotifyArgs {
    /// The delivery loop's settings; `None` when delivery is off.
    pub fn notifier(&self, retry: RetryPolicy) -> Result<Option<Notifier>, NotifyConfigError> {
        let Some(raw) = self.notice_url.as_deref().filter(|u| !u.trim().is_empty()) else {
            return Ok(None);
        };
        let url = reqwest::Url::parse(raw.trim()).map_err(|_| NotifyConfigError::BadUrl)?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
            return Err(NotifyConfigError::BadUrl);
        }
        let secret = self
            .notice_secret
            .as_deref()
            .ok_or(NotifyConfigError::MissingSecret)?;
        let signer = Verifier::new(
            Scheme::StandardWebhooks,
            vec![Secret::parse(Scheme::StandardWebhooks, secret)?],
        )?;
        let schedule = CheckSchedule::parse(&self.notice_schedule, JITTER)?;
        if self.notice_timeout.is_zero() || self.notice_poll.is_zero() {
            return Err(NotifyConfigError::Zero);
        }
        let client = reqwest::Client::builder()
            .timeout(self.notice_timeout)
            .connect_timeout(self.notice_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("cobro-notices/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| NotifyConfigError::Client(e.without_url().to_string()))?;
        Ok(Some(Notifier {
            url,
            signer,
            schedule,
            timeout: self.notice_timeout,
            poll: self.notice_poll,
            client,
            retry,
        }))
    }
}

/// Ready to deliver: the URL, the signer, the schedule, the HTTP client.
pub struct Notifier {
    url: reqwest::Url,
    signer: Verifier,
    schedule: CheckSchedule,
    timeout: Duration,
    poll: Duration,
    client: reqwest::Client,
    retry: RetryPolicy,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("url", &shown(self.url.as_str()))
            .field("schedule", &self.schedule)
            .finish_non_exhaustive()
    }
}

/// How the app answered one try: its status on 2xx, else what went wrong.
type Answer = Result<u16, (Option<u16>, String)>;

/// What to record after try number `tries` (1-based): delivered, or the
/// next try after the schedule's delay, or failed once it is spent.
pub fn after_try<'a>(
    answer: &'a Answer,
    tries: u32,
    schedule: &CheckSchedule,
    rng: &mut impl Rng,
) -> TryOutcome<'a> {
    match answer {
        Ok(status) => TryOutcome::Delivered { status: *status },
        Err((status, error)) => match schedule.delay(tries.saturating_sub(1), rng) {
            Some(after) => TryOutcome::Retry {
                status: *status,
                error,
                after,
            },
            None => TryOutcome::Failed {
                status: *status,
                error,
            },
        },
    }
}

impl Notifier {
    /// How long a claim holds: longer than one try can take.
    fn hold(&self) -> Duration {
        self.timeout * 2 + Duration::from_secs(5)
    }

    /// POSTs one notice and records how it went.
    async fn deliver(&self, store: &Store, out: &Outgoing) {
        let n = &out.notice;
        let retryable = n
            .decline_code
            .as_deref()
            .is_some_and(|c| self.retry.is_retryable(c));
        let body = payload::body(out, retryable).to_string().into_bytes();
        let msg_id = payload::message_id(n.id);
        let headers = self
            .signer
            .sign(&msg_id, chrono::Utc::now().timestamp(), &body);
        let answer = self.post(headers, body).await;
        let tries = u32::try_from(n.delivery_attempts).unwrap_or(0) + 1;
        let outcome = after_try(&answer, tries, &self.schedule, &mut rand::rng());
        match &outcome {
            TryOutcome::Delivered { .. } => info!(notice = n.id, tries, "notice delivered"),
            TryOutcome::Retry { error, after, .. } => {
                info!(notice = n.id, tries, %error, ?after, "notice not delivered; trying again later")
            }
            TryOutcome::Failed { error, .. } => {
                warn!(notice = n.id, tries, %error, "notice not delivered after the last try: failed")
            }
        }
        match store.record_notice_try(out, outcome).await {
            Ok(true) => {}
            Ok(false) => debug!(notice = n.id, "claim lost meanwhile; nothing recorded"),
            Err(e) => {
                warn!(notice = n.id, error = %e, "recording a notice try failed; it is tried again after its claim expires")
            }
        }
    }

    async fn post(&self, headers: Vec<(String, String)>, body: Vec<u8>) -> Answer {
        let mut req = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let mut resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Err((None, clean(&e.without_url().to_string()))),
        };
        let status = resp.status();
        let mut read = Vec::new();
        while read.len() < MAX_ANSWER_BYTES {
            match resp.chunk().await {
                Ok(Some(chunk)) => read.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        if status.is_success() {
            return Ok(status.as_u16());
        }
        read.truncate(MAX_ANSWER_BYTES);
        let said = clean(&String::from_utf8_lossy(&read));
        Err((
            Some(status.as_u16()),
            format!("HTTP {}: {said}", status.as_u16()),
        ))
    }
}

/// Printable, one line, at most 300 characters.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect::<String>()
        .trim()
        .to_owned()
}

/// Delivers due notices every poll until `stop` turns true. Every worker
/// runs it; the claims keep them off each other's notices. A try cut short
/// by shutdown is simply tried again once its claim expires.
pub async fn deliver_loop(store: Store, n: Arc<Notifier>, mut stop: watch::Receiver<bool>) {
    info!(url = %shown(n.url.as_str()), "delivering customer notices");
    let mut tick = tokio::time::interval(n.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        loop {
            let batch = match store.claim_notices(n.hold(), BATCH).await {
                Ok(b) => b,
                Err(e) => {
                    warn!(error = %e, "claiming notices failed; trying again next poll");
                    break;
                }
            };
            let full = batch.len() as i64 == BATCH;
            let all = futures::future::join_all(batch.iter().map(|o| n.deliver(&store, o)));
            tokio::select! {
                _ = all => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if !full {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn a_try_is_delivered_retried_on_the_schedule_or_failed_after_the_last() {
        let schedule = CheckSchedule::parse("100ms,200ms", 0.0).unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let ok: Answer = Ok(204);
        assert_eq!(
            after_try(&ok, 3, &schedule, &mut rng),
            TryOutcome::Delivered { status: 204 }
        );
        let bad: Answer = Err((Some(500), "HTTP 500: boom".into()));
        let next = |tries| after_try(&bad, tries, &schedule, &mut StdRng::seed_from_u64(1));
        let retry = |ms| TryOutcome::Retry {
            status: Some(500),
            error: "HTTP 500: boom",
            after: Duration::from_millis(ms),
        };
        assert_eq!(next(1), retry(100));
        assert_eq!(next(2), retry(200));
        assert_eq!(
            next(3),
            TryOutcome::Failed {
                status: Some(500),
                error: "HTTP 500: boom"
            }
        );
    }

    #[test]
    fn delivery_is_off_without_a_url_and_refused_without_a_valid_secret() {
        let policy = RetryPolicy::default;
        assert!(NotifyArgs::default().notifier(policy()).unwrap().is_none());
        let with = |url: &str, secret: Option<&str>| NotifyArgs {
            notice_url: Some(url.into()),
            notice_secret: secret.map(str::to_owned),
            ..NotifyArgs::default()
        };
        let err = with("http://127.0.0.1:9/n", None)
            .notifier(policy())
            .unwrap_err();
        assert!(matches!(err, NotifyConfigError::MissingSecret), "{err}");
        let err = with("http://127.0.0.1:9/n", Some("whsec_dG9vc2hvcnQ="))
            .notifier(policy())
            .unwrap_err();
        assert!(err.to_string().starts_with("COBRO_NOTICE_SECRET"), "{err}");
        let secret = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
        let err = with("ftp://example.com/n", Some(secret))
            .notifier(policy())
            .unwrap_err();
        assert!(matches!(err, NotifyConfigError::BadUrl), "{err}");
        let ok = with("https://app.example/notices?token=abc", Some(secret));
        assert!(ok.notifier(policy()).unwrap().is_some());
        let shown = format!("{ok:?}");
        assert!(
            !shown.contains("MDEy") && !shown.contains("token=abc"),
            "{shown}"
        );
    }
}
