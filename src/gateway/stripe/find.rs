//! Finding the PaymentIntent of a key when none was recorded (a worker
//! vanished between the create and its record): by Stripe's search
//! (`GET /v1/payment_intents/search`, with `STRIPE_SEARCH=true`), else by a
//! bounded listing of the PaymentIntents created since the attempt began.
//!
//! Invariants: nothing here clears an attempt on a guess.
//! - Search results lag (Stripe: searchable "in under a minute", longer
//!   during an outage): a search's "not found" is an answer only once the
//!   last request that may have created the PaymentIntent is older than
//!   `STRIPE_SEARCH_LAG`; within it the lookup failed (a check, never a
//!   re-send). A server that does not serve search (404: localstripe) is
//!   listed instead.
//! - The listing stops at `STRIPE_LOOKUP_PAGES` pages: past the cap the
//!   lookup failed (checked again, then finance), never "not found".
//! - A 429, or a 503 with `Retry-After`, on the search or any page is
//!   `Deferred`: the engine looks again later without spending a check.

use std::time::{Duration, Instant};

use chrono::Utc;

use super::calls::{Refusal, auth_fault, detail_of, refusal};
use super::classify::{META_KEY, Object};
use super::list::{Page, Walk};
use super::{Answer, StripeGateway, lookup_evidence};
use crate::gateway::http::Transport;
use crate::gateway::{Deferral, Listed, LookupCall, LookupOutcome};

/// How far before the attempt's creation a PaymentIntent may have been made
/// (clock skew between us and Stripe).
const SKEW_SECS: i64 = 300;
/// Matches a search asks for; a key is on one PaymentIntent.
const SEARCH_LIMIT: &str = "10";

/// How a lookup without a recorded PaymentIntent finds one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FindConfig {
    /// Ask Stripe's search endpoint first (`STRIPE_SEARCH`).
    pub search: bool,
    /// How long a new PaymentIntent may stay invisible to search
    /// (`STRIPE_SEARCH_LAG`).
    pub search_lag: Duration,
    /// The listing's page cap (`STRIPE_LOOKUP_PAGES`, 100 objects a page).
    pub max_pages: usize,
}

impl Default for FindConfig {
    fn default() -> Self {
        Self {
            search: false,
            search_lag: Duration::from_secs(60),
            max_pages: 10,
        }
    }
}

/// What the search or the listing found.
pub(super) enum Found {
    Intent(String),
    /// Certainly none: how it was established.
    Absent(String),
    /// No answer: the lookup's outcome as it stands (failed or deferred).
    NoAnswer(LookupOutcome),
}

impl StripeGateway {
    /// The PaymentIntent whose metadata carries the call's key.
    pub(super) async fn find_intent(&self, call: &LookupCall) -> Found {
        if self.find.search
            && let Some(found) = self.search(call).await
        {
            return found;
        }
        self.list_for(call).await
    }

    /// `None`: the server does not serve search (404); list instead.
    async fn search(&self, call: &LookupCall) -> Option<Found> {
        let started = Instant::now();
        let ev = |kind: &str, status: Option<u16>, result: &str, detail: Option<String>| {
            lookup_evidence("lookup", status, kind, result, detail, started)
        };
        let key = call.key.to_string();
        let query = [
            (
                "query".to_owned(),
                format!("metadata['{META_KEY}']:'{key}'"),
            ),
            ("limit".to_owned(), SEARCH_LIMIT.to_owned()),
        ];
        let a = match self.get_page("/v1/payment_intents/search", &query).await {
            Ok(a) => a,
            Err(t) => return Some(Found::NoAnswer(transport_failed(t, &ev))),
        };
        if a.code == 404 {
            return None;
        }
        if a.code != 200 {
            return Some(Found::NoAnswer(unanswered("lookup", &a, started)));
        }
        let page = a
            .body
            .and_then(|b| serde_json::from_value::<Page>(b).ok())
            .and_then(|p| {
                let data: Result<Vec<Object>, _> = p.data.into_iter().map(Object::tidied).collect();
                data.ok().map(|d| (d, p.has_more))
            });
        let Some((data, has_more)) = page else {
            return Some(Found::NoAnswer(LookupOutcome::Failed {
                evidence: ev("bad_body", Some(200), "failed", None),
            }));
        };
        // The search is an index: each match is checked for the key itself.
        if let Some(o) = data.into_iter().find(|o| o.key() == Some(key.as_str())) {
            return Some(Found::Intent(o.id));
        }
        if has_more {
            return Some(Found::NoAnswer(LookupOutcome::Failed {
                evidence: ev(
                    "search_foreign",
                    Some(200),
                    "failed",
                    Some("the search matched PaymentIntents that do not carry this key".into()),
                ),
            }));
        }
        // The last request that may have created it: the last send, or
        // the attempt's creation; neither known, it may be a moment ago.
        let latest = call.last_sent.max(call.since);
        let age = latest.and_then(|t| (Utc::now() - t).to_std().ok());
        if age.is_none_or(|age| age < self.find.search_lag) {
            return Some(Found::NoAnswer(LookupOutcome::Failed {
                evidence: ev(
                    "search_lag",
                    Some(200),
                    "failed",
                    Some(format!(
                        "not in Stripe's search yet, which may lag up to {} s after a create: not a clearance; looked up again later",
                        self.find.search_lag.as_secs()
                    )),
                ),
            }));
        }
        Some(Found::Absent(format!(
            "no PaymentIntent carries this key (searched, {} s after the last send)",
            age.unwrap_or_default().as_secs()
        )))
    }

    /// At most `max_pages` pages of the PaymentIntents created since the
    /// attempt began, newest first, until the one with the key.
    async fn list_for(&self, call: &LookupCall) -> Found {
        let started = Instant::now();
        let ev = |kind: &str, status: Option<u16>, result: &str, detail: Option<String>| {
            lookup_evidence("lookup", status, kind, result, detail, started)
        };
        let from = call.since.map_or(0, |s| s.timestamp() - SKEW_SECS);
        let to = Utc::now().timestamp() + SKEW_SECS;
        let key = call.key.to_string();
        let pages = self.find.max_pages;
        let walked = self
            .walk(
                Listed::Charges,
                "/v1/payment_intents",
                &[],
                Some((from, to)),
                pages,
                Some(&key),
            )
            .await;
        match walked {
            Ok(all) => match all.into_iter().find(|o| o.key() == Some(key.as_str())) {
                Some(o) => Found::Intent(o.id),
                None => Found::Absent(
                    "no PaymentIntent created since the attempt began carries this key (listed)"
                        .into(),
                ),
            },
            Err(Walk::NotNow {
                status,
                retry_after,
            }) => Found::NoAnswer(LookupOutcome::Deferred {
                why: Deferral::NotExecuted,
                retry_after,
                evidence: ev(
                    if status == 429 {
                        "throttled"
                    } else {
                        "unavailable"
                    },
                    Some(status),
                    "not_executed",
                    None,
                ),
            }),
            Err(Walk::Capped(n)) => Found::NoAnswer(LookupOutcome::Failed {
                evidence: ev(
                    "listing_capped",
                    Some(200),
                    "failed",
                    Some(format!(
                        "more than {n} pages of PaymentIntents since the attempt began (STRIPE_LOOKUP_PAGES): not a clearance; looked up again, then finance"
                    )),
                ),
            }),
            Err(Walk::Failed(e)) => Found::NoAnswer(LookupOutcome::Failed {
                evidence: ev("listing_failed", None, "failed", Some(e.to_string())),
            }),
        }
    }
}

/// An evidence maker: `(kind, status, lookup result, detail)`.
pub(super) type EvidenceOf<'a> =
    dyn Fn(&str, Option<u16>, &str, Option<String>) -> crate::gateway::Evidence + 'a;

/// A lookup request that got no HTTP answer it could read: not sent
/// (deferred, no check) or unknown, or an answer too large to read
/// (failed).
pub(super) fn transport_failed(t: Transport, ev: &EvidenceOf) -> LookupOutcome {
    match t {
        Transport::NotSent(k) => LookupOutcome::Deferred {
            why: Deferral::NotSent,
            retry_after: None,
            evidence: ev(k, None, "not_sent", None),
        },
        Transport::Unknown(_) | Transport::TooLarge { .. } => LookupOutcome::Failed {
            evidence: ev(t.kind(), t.status(), "failed", t.detail()),
        },
    }
}

/// A lookup request answered with other than 200: a 429 (or 503 with
/// `Retry-After`) and a 401/403 are deferred, never a check; a redirect and
/// anything else failed, never "not found".
pub(super) fn unanswered(call: &str, a: &Answer, started: Instant) -> LookupOutcome {
    let ev = |kind: &str, result: &str, detail: Option<String>| {
        lookup_evidence(call, Some(a.code), kind, result, detail, started)
    };
    match refusal(call, a) {
        Refusal::Redirect(r) => LookupOutcome::Failed {
            evidence: ev("redirected", "failed", Some(r.detail)),
        },
        Refusal::Auth => LookupOutcome::Deferred {
            why: Deferral::NotExecuted,
            retry_after: None,
            evidence: auth_fault(call, a, started),
        },
        Refusal::NotNow => LookupOutcome::Deferred {
            why: Deferral::NotExecuted,
            retry_after: a.retry_after,
            evidence: ev("throttled", "not_executed", detail_of(a)),
        },
        _ => LookupOutcome::Failed {
            evidence: ev(&format!("http_{}", a.code), "failed", detail_of(a)),
        },
    }
}
